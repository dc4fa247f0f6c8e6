"""Result files of the one-shot job (paper Fig. 3): ``oneshot.nc``, ``report.md`` and the figures.

Pure functions of a :class:`~bayes_attn.oneshot._prune_result.PruneResult` and the results dataset;
:func:`draw_figures` redraws every figure from the files alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from .._internal import io as _io
from .._internal import markdown as _markdown
from ..comparison import THEORY_NAMES
from ..network import head_labels
from ..runs import _figures as run_figures
from . import _figures as figures
from ._prune_result import PAPER_SPEARMAN_RHO, PruneResult, load_pruning

__all__ = ["BINOMIAL_NOTE", "FIGURES", "comparison_dataset", "draw_figures", "figures_of", "report_markdown",
           "results_dataset", "save_dataset"]

FIGURES = {
    "accuracy_vs_width.png": "(a) test accuracy vs N: theory, GP, sampled; GD model and pixel baseline",
    "score_vs_drop.png": "(b) head score vs accuracy drop, Spearman ρ and p",
    "cumulative_pruning.png": "(c) accuracy vs heads removed: ascending, descending, random",
    "order_parameters.png": "(d) U: theory | sampled | trained weights",
    "path_kernels.png": "(e) path kernels C[π,π] and GP vs renormalised kernel",
    "finite_size.png": "(f) gap between the samples and each theory against 1/N, with its Monte-Carlo floor",
}


BINOMIAL_NOTE = ("Below, ± is the binomial standard error (episodes counted as independent), smaller than the "
                 "class bootstrap of the summary, which lets episodes that share a class move together.")

def _nan_none(v) -> float:
    return np.nan if v is None else float(v)


def results_dataset(scan: xr.Dataset, sampled: xr.Dataset, result: PruneResult, U: Mapping[str, np.ndarray],
                    heads: Sequence[int], attrs: Mapping) -> xr.Dataset:
    """One dataset of everything numeric: the scan, the sampling, ``U`` theory/sampled/trained, head scores, drops,
    and the comparisons of theory and samples (:func:`comparison_dataset`, its ``verdict`` as ``comparison_verdict``).

    ``U``: ``{"score": …, "trained": …}`` ``[D, D]`` each; ``attrs``: scalars
    for the figures and the record (``gd_accuracy``, ``gd_width``,
    ``nn_accuracy``, …).
    """
    p, sp = result.pruning, result.spread

    def flat(per_layer):
        return np.array([_nan_none(v) for layer in per_layer for v in layer])

    ds = xr.merge([scan, sampled], compat="override", join="outer")
    ds = ds.assign({f"U_{name}": (("path", "path_"), np.asarray(m)) for name, m in U.items()})
    ds = ds.assign(
        head_score=(("head",), flat(p.head_scores)),
        head_score_trained=(("head",), flat(result.trained_head_scores)),
        accuracy_drop=(("head",), flat(p.drops)),
        accuracy_drop_se=(("head",), flat(p.drop_se)),
        pruned_ascending=(("step",), np.asarray(p.ascending.accuracy)),
        pruned_descending=(("step",), np.asarray(p.descending.accuracy)),
        pruned_random_mean=(("step",), np.asarray(p.random.accuracy_mean)),
        pruned_random_std=(("step",), np.asarray(p.random.accuracy_std)),
        spearman_draws=(("rho_draw",), np.asarray(sp.rho.draws, dtype=np.float64)),
    )
    ds = ds.assign_coords(head=head_labels(heads),
                          head_layer=("head", [l + 1 for l, H in enumerate(heads) for _ in range(H)]),
                          step=np.arange(len(p.ascending.accuracy)))
    ds.attrs.update({**scan.attrs, **sampled.attrs, **{k: v for k, v in attrs.items() if v is not None},
                     "base_accuracy": float(sp.base.accuracy), "base_se": float(sp.base.se),
                     "spearman_rho": _nan_none(p.spearman.rho), "spearman_p": _nan_none(p.spearman.p_value),
                     "theory_accuracy": float(sp.theory.accuracy), "theory_se": float(sp.theory.se),
                     "gp_accuracy": float(sp.gp.accuracy), "gp_se": float(sp.gp.se),
                     "spearman_median": float(sp.rho.median), "spearman_q05": float(sp.rho.q05),
                     "spearman_q95": float(sp.rho.q95)})
    cmp = comparison_dataset(result)  # the theory against the samples, per sampled width
    if cmp.data_vars:
        ds = ds.assign(cmp.rename(verdict="comparison_verdict").data_vars)
    return ds


def comparison_dataset(result: PruneResult) -> xr.Dataset:
    """The comparisons over the sampled widths in a sweep's layout (``check_value``, ``check_mcse``,
    ``check_noise_floor``, ``check_gap`` ``[sample_width, check]`` of the headline theory, ``alternative_…`` of
    the other, ``verdict``), as :func:`bayes_attn.runs._figures.finite_size` draws them."""
    comps = list(result.comparisons.values())
    if not comps:
        return xr.Dataset()
    names = [k.name for k in comps[0].theories[comps[0].headline].checks]
    data: dict[str, tuple[tuple[str, ...], np.ndarray]] = {}
    for prefix, which in (("", 0), ("alternative_", 1)):
        if any(len(c.theories) <= which for c in comps):
            continue
        rows = [{k.name: k for k in list(c.theories.values())[which].checks} for c in comps]
        for f in ("value", "mcse", "noise_floor", "gap"):
            data[f"{prefix}check_{f}"] = (("sample_width", "check"),
                                          np.array([[getattr(r[n], f) if n in r else np.nan for n in names]
                                                    for r in rows]))
    data["verdict"] = (("sample_width",), np.array([c.verdict for c in comps], dtype=str))
    first = comps[0]
    return xr.Dataset(data, coords={"sample_width": [c.width for c in comps], "check": names},
                      attrs={"correction": first.headline,
                             "alternative_correction": "none" if first.headline == "laplace" else "laplace"})


def save_dataset(ds: xr.Dataset, path: str | os.PathLike) -> Path:
    """Write ``ds`` to netCDF atomically (:func:`bayes_attn._io.save`)."""
    return _io.save(ds, path)


def draw_figures(out: str | os.PathLike) -> list[Path]:
    """Figures (a)–(d) and (f) from ``out/oneshot.nc`` and ``out/pruning.json`` (no recomputation)."""
    out = Path(out)
    return figures_of(_io.load_dataset(out / "oneshot.nc"), load_pruning(out), out)


def figures_of(ds: xr.Dataset, result: PruneResult, out: str | os.PathLike) -> list[Path]:
    """Figures (a)–(d) and (f) of the results ``ds`` (:func:`results_dataset`) and ``result`` into the folder
    ``out``."""
    out = Path(out)
    paths = [
        figures.accuracy_vs_width(ds, out / "accuracy_vs_width.png"),
        figures.score_vs_drop(result, out / "score_vs_drop.png"),
        figures.cumulative_pruning(result, out / "cumulative_pruning.png"),
    ]
    mats = {}
    if "sample_width" in ds.dims and ds.sizes["sample_width"]:
        N = int(ds["sample_width"][0])
        temp = float(ds["temperature_sampled"][0])
        mats[f"theory U, N = {N}, T = {temp:g}"] = ds["U_theory"].isel(sample_width=0).values
        mats[f"sampled U (posterior mean), N = {N}, T = {temp:g}"] = ds["U_sampled"].isel(sample_width=0).values
    else:
        mats[f"theory U, N = {ds.attrs['score_width']}, T = {ds.attrs['score_temperature']:g}"] = ds["U_score"].values
    mats[f"trained weights U (GD model, width {int(ds.attrs['gd_width'])})"] = ds["U_trained"].values
    paths.append(figures.order_parameters(mats, list(ds["path"].values), out / "order_parameters.png",
                                          "Order parameter U over attention paths (each panel its own scale)"))
    cmp = comparison_dataset(result)
    if cmp.sizes.get("sample_width"):
        cmp.attrs["n_train"] = int(ds.attrs["n_train"])
        paths.append(run_figures.finite_size(cmp, out / "finite_size.png"))
    else:
        paths.append(figures.not_sampled(out / "finite_size.png"))
    return paths


def _pm(a) -> str:
    return f"{a.accuracy:.3f} ± {a.se:.3f}"


def _summary(r: PruneResult) -> list[str]:
    sp = r.spread
    rho = sp.rho
    rows = [
        ("gradient-descent model", _pm(sp.base), "0.838"),
        (f"theory, N = {sp.theory_width}, T = {sp.theory_temperature:g} (validation-chosen)", _pm(sp.theory), ""),
        (f"GP limit, T = {sp.gp_temperature:g} (validation-chosen)", _pm(sp.gp), ""),
        (f"Spearman ρ, head score vs single-head drop: median [5 %, 95 %] of {len(rho.draws)} values "
         f"({rho.n_draws} draws of the theory's episodes × {rho.n_resamples} bootstraps of the test episodes)",
         f"{rho.median:.2f} [{rho.q05:.2f}, {rho.q95:.2f}]", f"{PAPER_SPEARMAN_RHO:.2f}"),
    ]
    return ["## Summary (test episodes; ± class-bootstrap standard error)", "",
            *_markdown.table(("quantity", "here", "paper"), rows), "",
            f"Theory's training episodes: classes of `{r.theory_classes}`. Standard errors: {sp.se_method}.", ""]


def _model_section(r: PruneResult, ds: xr.Dataset) -> list[str]:
    m = r.model
    rows = [(f"test ({int(ds.attrs['n_test'])} episodes)", _pm(m.test), _pm(m.nn_baseline)),
            ("validation", _pm(m.validation), ""),
            *[(f"OOD {k}", _pm(v), f"{v.nn_accuracy:.3f} ± {v.nn_se:.3f}") for k, v in m.ood.items()]]
    stop = (f" Early stopping on validation: {m.epochs_run} epochs run, the weights of epoch {m.kept_epoch + 1} kept."
            if m.kept_epoch is not None else "")
    return ["## Gradient-descent model", "", BINOMIAL_NOTE + stop, "",
            *_markdown.table(("set", "model", "pixel nearest neighbour"), rows)]


def _sampling_diagnostics(ds: xr.Dataset, sw: list) -> str:
    def one(j):
        finite = lambda v: np.isfinite(float(ds[v][j]))  # noqa: E731
        return ((f"`{ds['sampler_used'].values[j]}`, " if "sampler_used" in ds else "")
                + f"max R-hat(U) {float(ds['rhat_U'][j]):.3f}, "
                + (f"min bulk ESS(U) {float(ds['ess_U'][j]):.0f}, " if "ess_U" in ds else "")
                + (f"Pareto k-hat {float(ds['pareto_k'][j]):.2f}, " if "pareto_k" in ds and finite("pareto_k") else "")
                + f"{int(ds['divergences'][j])} divergences, "
                + (f"{float(ds['mean_steps'][j]):.0f} leapfrog steps/draw, " if finite("mean_steps") else "")
                + f"{float(ds['sampling_seconds'][j]):.0f} s")

    return "Sampling diagnostics: " + ", ".join(f"N = {N}: {one(j)}" for j, N in enumerate(sw))


def _theory_section(ds: xr.Dataset) -> list[str]:
    sw = list(ds["sample_width"].values) if "sample_width" in ds.dims else []
    rows = []
    for i, N in enumerate(ds["width"].values):
        s, a = "", ""
        if N in sw:
            j = sw.index(N)
            s = f"{float(ds['accuracy_sampled'][j]):.3f} ± {float(ds['accuracy_sampled_se'][j]):.3f}"
            a = f"{float(ds['agreement'][j]):.3f}"
        rows.append((N, f"{float(ds['best_temperature'][i]):g}", f"{float(ds['accuracy_theory_validation'][i]):.3f}",
                     f"{float(ds['accuracy_theory'][i]):.3f} ± {float(ds['accuracy_theory_se'][i]):.3f}", s, a))
    rows.append(("GP", f"{float(ds['gp_best_temperature']):g}", f"{float(ds['accuracy_gp_validation']):.3f}",
                 f"{float(ds['accuracy_gp']):.3f} ± {float(ds['accuracy_gp_se']):.3f}", "", ""))
    header = ("N", "chosen T", "validation", "test (theory)", "sampled", "agreement with theory")
    return ["", "## Theory and sampling on the frozen attention", "",
            f"Temperature chosen per width on validation episodes ({ds.attrs['temperature_choice']}); "
            "test accuracy at that temperature. " + BINOMIAL_NOTE, "", *_markdown.table(header, rows),
            *(["", _sampling_diagnostics(ds, sw)] if sw else []),
            "", f"Theory solves not converged: {int((~ds['converged'].values.astype(bool)).sum())} of "
            f"{ds['converged'].size}.", ""]


def _comparison_section(r: PruneResult) -> list[str]:
    """The theory against the exact posterior at each sampled width, headline theory first (as ``run`` reports)."""
    if not r.comparisons:
        return []
    lines = ["## Theory against the exact posterior", "",
             "At each sampled width and its chosen temperature, as `bayes-attn run` compares them: the relative "
             "error of each order parameter and of the predictor's mean and variance on the test episodes, with "
             "its Monte-Carlo floor. A check fails only when the error exceeds its tolerance and its excess over "
             "the floor exceeds 3 standard errors. The corrected theory (§8) headlines where it exists; the "
             "leading order (§4) is beside it.", ""]
    for N, c in r.comparisons.items():
        rows = []
        for name, t in c.theories.items():
            rows += [(THEORY_NAMES[name], k.name, f"{k.value:.4g}", f"{k.mcse:.2g}", f"{k.noise_floor:.2g}",
                      f"{k.gap:.4g}", f"{k.tolerance:.3g}", "pass" if k.passed else "FAIL") for k in t.checks]
            rows.append((THEORY_NAMES[name], "**verdict**", "", "", "", "", "", f"**{t.verdict}**"))
        header = ("theory", "check", "relative error", "MCSE", "MC floor", "noise-corrected gap", "tolerance",
                  "result")
        acc = ", ".join(f"{THEORY_NAMES[name]} {t.accuracy:.3f}" for name, t in c.theories.items())
        lines += [f"### N = {N}, T = {c.temperature:g}: {c.summary()}", "", *_markdown.table(header, rows), "",
                  f"Test accuracy of sign(mean): sampled {c.sampled_accuracy:.3f}, {acc}.", ""]
        reasons = [f"{THEORY_NAMES[name]} inconclusive: {'; '.join(t.reasons)}" for name, t in c.theories.items()
                   if t.reasons]
        lines += [*(f"- {x}" for x in reasons + c.correction_problems), *([""] if reasons or c.correction_problems
                                                                         else [])]
    return lines


def _heads_section(r: PruneResult) -> list[str]:
    p, sp = r.pruning, r.spread
    rows, labels = [], iter(head_labels([len(layer) for layer in p.head_scores]))
    for l, layer in enumerate(p.head_scores):
        for h, s in enumerate(layer):
            d, se, td = p.drops[l][h], p.drop_se[l][h], sp.ablation.drops[l][h]
            rows.append((next(labels), f"{s:.3f}", f"{r.trained_head_scores[l][h]:.3f}",
                         "n/a" if d is None else f"{d:+.3f} ± {se:.3f}", "" if td is None else f"{td:+.3f}"))
    header = ("head", "score (theory U)", "score (trained U)", "drop ± se (GD model)", "drop (theory, paths out of U)")
    rho = sp.rho
    return ["## Head scores and pruning (test episodes, no retraining)", "",
            f"Head scores from the theory's U at N = {r.score_width}, T = {r.score_temperature}.", "",
            *_markdown.table(header, rows), "",
            f"Spearman (theory score vs drop): {p.spearman.describe()}.",
            f"Spearman (trained-weights score vs drop): {r.trained_spearman.describe()}.",
            f"Spread of ρ (theory score vs drop) over {rho.n_draws} draws of the theory's training episodes × "
            f"{rho.n_resamples} class bootstraps of the test episodes: median {rho.median:.3f}, "
            f"90 % interval [{rho.q05:.3f}, {rho.q95:.3f}] ({len(rho.draws)} values); the paper's ρ ≈ "
            f"{PAPER_SPEARMAN_RHO}.",
            f"Theory-side ablation (head's paths removed from U, survivors rescaled as in the model; theory "
            f"accuracy {sp.ablation.accuracy:.3f}): Spearman vs score {sp.ablation_rho_score.describe()}; "
            f"vs the model's drops {sp.ablation_rho_drops.describe()}."]


def _predictors_section(r: PruneResult) -> list[str]:
    """ρ with the model's drops of each predictor of pruning, with the same spread, beside the paper's."""
    sp, o = r.spread, r.spread.others
    N, T = r.score_width, r.score_temperature
    cases = [(f"head score, leading-order theory U (N = {N}, T = {T:g})", sp.rho),
             (f"head score, corrected theory U (§8, N = {N}, T = {T:g})", o.corrected),
             (f"head score, exact posterior's mean U (N = {N}, T = {o.posterior_temperature or float('nan'):g})",
              o.posterior),
             ("theory-side ablation (a head's paths out of the leading-order U)", o.ablation)]
    rows = [(what, "not computed" if s_ is None else f"{s_.median:.2f} [{s_.q05:.2f}, {s_.q95:.2f}]",
             "" if s_ is None else f"{s_.n_draws} × {s_.n_resamples}") for what, s_ in cases]
    return ["", "Which predicts the single-head drops: Spearman ρ with the model's drops, median [5 %, 95 %] over "
            "draws of the theory's training episodes × class bootstraps of the test episodes (the posterior's "
            f"score: one draw); the paper's ρ ≈ {PAPER_SPEARMAN_RHO}.", "",
            *_markdown.table(("predictor", "ρ median [5 %, 95 %]", "draws × bootstraps"), rows),
            *([""] + [f"- correction: {p}" for p in o.correction_problems] if o.correction_problems else [])]


def _pruning_section(r: PruneResult) -> list[str]:
    p = r.pruning
    rows = [(k, f"{a:.3f}", f"{d:.3f}", f"{p.random.accuracy_mean[k]:.3f} ± {p.random.accuracy_std[k]:.3f}")
            for k, (a, d) in enumerate(zip(p.ascending.accuracy, p.descending.accuracy, strict=True))]
    return ["", "Cumulative pruning, accuracy after k heads removed:", "",
            *_markdown.table(("k", "ascending", "descending", "random mean ± sd"), rows)]


def _width_verdicts(r: PruneResult) -> str:
    """``N = 10: disagree, N = 100: agree; the headline theory at each width, the worst deciding``."""
    per = ", ".join(f"N = {N}: {c.verdict}" for N, c in sorted(r.comparisons.items()))
    return f"{per}; the headline theory at each width, the worst deciding"


def _theory_verdict_lines(r: PruneResult) -> list[str]:
    """The theory's verdict against the samples, ``not compared`` in words where samples passed but no theory
    was compared with them; nothing without samples."""
    if r.outcome.uncompared:
        return ["Verdict of the theory against the samples: **not compared** (the samples passed their diagnostics, "
                "but no theory was compared with them: this result was written before `prune` compared; run `prune` "
                "again to compare).", ""]
    if not r.comparisons:
        return []
    return [f"Verdict of the theory against the samples: **{r.verdict}** ({_width_verdicts(r)}).", ""]


def report_markdown(name: str, result: PruneResult, ds: xr.Dataset, seconds: Mapping[str, float]) -> str:
    """``report.md``: the numbers of Fig. 3 in tables."""
    v = result.sampling
    lines = [f"# One-shot image classification (paper Fig. 3): `{name}`", "",
             f"Verdict of the sampling: **{v.verdict}**" + (": " + "; ".join(v.reasons) if v.reasons else "") + ".", "",
             *_theory_verdict_lines(result),
             *_summary(result), *_model_section(result, ds), *_theory_section(ds), *_comparison_section(result),
             *_heads_section(result), *_predictors_section(result),
             *_pruning_section(result)]
    if result.deviations:
        lines += ["", "## Departures from the authors' recipe", "", *[f"- {d}" for d in result.deviations]]
    lines += ["", "## Wall time", "", *[f"- {k}: {v:.0f} s" for k, v in seconds.items()], "",
              "## Figures", "", *[f"- `{f}`: {d}" for f, d in FIGURES.items()], ""]
    return "\n".join(lines)
