"""The Markdown report of a theory-against-sampling comparison (:class:`bayes_attn.comparison.Comparison`).

:func:`comparison_report` writes the text (checks, verdict, accuracies, ``U``
and the predictor); the statistics, the verdict and the headline line
(:meth:`~bayes_attn.comparison.Comparison.theories_summary`) are
:mod:`bayes_attn.comparison`'s.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import stats, verdict
from .._internal import markdown as _markdown
from ..comparison import THEORY_NAMES, Comparison
from ..diagnostics import GROUP_COLUMNS, group_rows

__all__ = ["comparison_report"]


def _verdict_text(comp: Comparison) -> str:
    """The verdict line: whose theory, and whether it agrees with sampling (or why that cannot be told)."""
    return comp.outcome.text(THEORY_NAMES[comp.correction] if comp.alternative is not None else "")


def _theories_section(comp: Comparison) -> list[str]:
    """Side-by-side table of the leading and corrected theories (empty without an :attr:`alternative`)."""
    if comp.alternative is None:
        return []
    rows = []
    for corr, c in comp.theories.items():
        rows += [(THEORY_NAMES[corr], ch.name, f"{ch.value:.4g}", f"{ch.mcse:.2g}", f"{ch.gap:.4g}",
                  "pass" if ch.passed else "FAIL") for ch in c.checks]
        rows.append((THEORY_NAMES[corr], "**verdict**", "", "", "", f"**{c.verdict}**"))
    lines = [
        "## Leading order and finite-width correction",
        "",
        f"Headline theory: {THEORY_NAMES[comp.correction]}. {comp.theories_summary()}.",
        "",
        "The leading order (docs/theory.md §4) is exact only as the widths grow; its gap from the exact posterior "
        "shrinks like 1/N. The Laplace correction (§8) adds the next order in 1/N; its remaining gap shrinks "
        "like 1/N².",
        "",
        *_markdown.table(("theory", "check", "relative error", "MCSE", "noise-corrected gap", "result"), rows),
        "",
    ]
    if comp.U_sd_theory is not None and comp.U_sd_sampled is not None:
        labels = comp.path_labels
        iu = np.triu_indices(len(labels))
        lines += ["Posterior standard deviation of U (upper triangle): predicted (§8) against sampled.", "",
                  *_markdown.table(("entry", "predicted sd", "sampled sd"),
                                   [(f"{labels[i]}, {labels[j]}", f"{comp.U_sd_theory[i, j]:.4g}",
                                     f"{comp.U_sd_sampled[i, j]:.4g}") for i, j in zip(*iu, strict=True)]), ""]
    return lines


def _warnings(comp: Comparison) -> list[str]:
    """What limits the reading of the checks: theory warnings and problems, failed diagnostics, a disagreement."""
    lines = []
    if comp.theory_warnings:
        lines += ["**Warning:** " + "; ".join(comp.theory_warnings) + ". Read the corrected theory's numbers with "
                  "care; the leading order is beside them.", ""]
    if comp.theory_problems:
        lines += ["The theory is not a solution, so its numbers cannot be compared: "
                  + "; ".join(comp.theory_problems) + ". Check the spec's scales (labels, variances, temperature) "
                  "or give the solver more iterations.", ""]
    if comp.sampler_failures:
        lines += ["The sampler's diagnostics failed, so the Monte-Carlo error bars cannot be trusted: "
                  + "; ".join(comp.sampler_failures) + ". Sample longer (more warm-up and draws, more "
                  "chains) or with a higher target acceptance before reading the checks below.", ""]
    if comp.outcome.disagrees and comp.alternative is not None:
        lines += [f"The other theory: {THEORY_NAMES[comp.alternative.correction]}: {comp.alternative.verdict}.", ""]
    if comp.outcome.disagrees and comp.correction != "laplace":
        lines += ["The theory is exact only as the widths grow (N, P → ∞ at fixed P/N): at small N a gap "
                  "that shrinks like 1/N is a finite-size effect, not a sampler fault. `bayes-attn sweep` with "
                  "several --sample-widths shows whether it shrinks.", ""]
    return lines


def _checks_and_accuracy(comp: Comparison) -> list[str]:
    """The headline theory's checks, the sampler's diagnostics and the test accuracy of sign(mean)."""
    checks = [(c.name, f"{c.value:.4g}", f"{c.mcse:.2g}", f"{c.noise_floor:.2g} ± {c.noise_sd:.2g}", f"{c.gap:.4g}",
               f"{c.tolerance:.3g}", "pass" if c.passed else "FAIL") for c in comp.checks]
    n = len(comp.y_test)
    groups, rest = group_rows(comp.diagnostics)
    diag = ", ".join(f"{k} = {v:.4g}" for k, v in rest.items())
    return [
        *([] if comp.alternative is None
          else [f"## Checks of the headline theory ({THEORY_NAMES[comp.correction]})", ""]),
        *_markdown.table(("check", "relative error", "MCSE", "MC noise floor", "noise-corrected gap", "tolerance",
                          "result"), checks),
        "", f"Sampler diagnostics: {diag}", "",
        *(["Convergence per group of entries (R-hat against the bound of the group's size, chains and draws; "
           "bulk and tail ESS against the ESS required; docs/samplers.md):", "",
           *_markdown.table(GROUP_COLUMNS, groups), ""] if groups else []),
        "## Test accuracy of sign(mean)", "",
        *_markdown.table(("predictor", "accuracy", f"test-set s.e. (P_test = {n})"),
                         [(k, f"{v:.4f}", f"{stats.binomial_se(v, n):.4f}") for k, v in comp.accuracy.items()]),
        "",
    ]


def comparison_report(comp: Comparison) -> str:
    """The Markdown report of a :class:`~bayes_attn.comparison.Comparison` (what ``Comparison.report()`` gave)."""
    labels = comp.path_labels
    frame = lambda a: pd.DataFrame(a, index=labels, columns=labels).to_markdown(floatfmt=".4g")  # noqa: E731
    return "\n".join(
        [
            f"# Theory vs sampling (N = {comp.width})",
            "",
            f"Sampled with {comp.provenance.get('method', f'the `{comp.sampler}` sampler')}.",
            "",
            f"**Verdict: {_verdict_text(comp)}** "
            f"(a check fails only when the relative error exceeds its tolerance and its excess over the "
            f"Monte-Carlo noise floor exceeds {comp.checks[0].n_sigma if comp.checks else 3:g} standard errors).",
            "",
            *_warnings(comp),
            *_theories_section(comp),
            *_checks_and_accuracy(comp),
            "## Order parameter U",
            "",
            "Theory:",
            "",
            frame(comp.U_theory),
            "",
            "Sampled (posterior mean of U; w·w'/N1 for samplers that draw weights):",
            "",
            frame(comp.U_sampled),
            "",
            "Monte-Carlo standard error:",
            "",
            frame(comp.U_mcse),
            "",
            "z-scores (sampled − theory) / MCSE:",
            "",
            frame(comp.U_zscores),
            "",
            "## Predictor on the test set",
            "",
            f"correlation of means: {comp.mean_correlation:.5f}; "
            f"median MCSE of sampled means: {np.median(comp.mean_mcse):.3g}",
            "",
        ]
    )
