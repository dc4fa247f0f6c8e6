"""Runs that chain the pieces: task → network → theory | posterior → comparison → report.

- :func:`theory_run`: one width: theory and GP limit, with test accuracies.
- :func:`sample_run`: one width: the posterior and its diagnostics.
- :func:`run`: one width: theory, GP limit, sampling, comparison, report and figures.

Sweeps over width and temperature are in :mod:`bayes_attn.sweep._table`. Every run
holds its output folder (:mod:`bayes_attn._internal.outputs`): checked writable and
locked before computing, its files replaced together when it finishes; a
folder holding files this package did not write is refused unless ``force``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import experiment, verdict
from .._internal import checks as _checks, io as _io, outputs
from ..experiment import Point
from ..network import Network
from ..samplers import SamplerSettings
from ..spec import Spec
from ..stats import accuracy
from ..theory import Theory
from ..theory._correction import CORRECTIONS

if TYPE_CHECKING:  # imported where used: the theory command needs neither sampling nor figures
    from ..comparison import Comparison
    from ..diagnostics import Summary
    from ..posterior import Posterior

__all__ = ["RUN_FILES", "RunResult", "SAMPLE_FILES", "SampleResult", "THEORY_FILES", "TheoryResult", "gp_accuracies",
           "gp_on_paths", "run", "sample_run", "theory_accuracy", "theory_run"]


def gp_on_paths(gp: Theory, paths: tuple[str, ...]) -> Theory:
    """The GP limit of the network restricted to ``paths`` (labels).

    Its kernel is that of a network with only those paths: the GP ``U`` on the
    kept diagonal entries, scaled by ``D / len(paths)`` to undo the ``1/D`` of ``C``.
    Only its kernel and predictor are meant to be used: the action, gradient and
    deeper order parameters it carries are those of the whole network's GP point.
    """
    labels = gp.net.path_labels
    keep = np.isin(labels, paths)
    U = np.diag(np.where(keep, np.diag(gp.U) * gp.net.D / keep.sum(), 0.0))
    return dataclasses.replace(gp, order_parameters=(U, *gp.order_parameters[1:]), limit=f"gp on {list(paths)}")


def gp_accuracies(spec: Spec, gp: Theory, x_test, y_test) -> dict[str, float]:
    """Test accuracy of the GP limit of the whole network and of each ``compare.gp_paths`` subset."""
    models = {"whole network": gp} | {k: gp_on_paths(gp, v) for k, v in spec.compare.gp_paths.items()}
    batch = _even_batches(len(x_test))
    return {k: theory_accuracy(t, x_test, y_test, batch) for k, t in models.items()}


def theory_accuracy(theory: Theory, x, y, batch: int = 512) -> float:
    """Test accuracy of ``theory``'s predictor; NaN where it is not finite (a theory that is not a solution)."""
    mean = theory.predict(x, batch)[0]
    return accuracy(mean, y) if np.all(np.isfinite(mean)) else float("nan")


def _even_batches(n: int, most: int = 512) -> int:
    """A batch size of at most ``most`` that splits ``n`` test inputs into batches of equal size (the last one
    possibly one smaller): one shape, so that the predictor's programs are traced and compiled once, not twice."""
    return -(-n // -(-n // most))


THEORY_FILES = ("theory.nc", "spec.toml")
SAMPLE_FILES = ("posterior.nc", "summary.txt", "spec.toml")
RUN_FILES = ("theory.nc", "gp.nc", "posterior.nc", "comparison.nc", "report.md", "spec.toml",
             "order_parameter.png", "predictor.png", "alignment.png")
"""The files each run writes into its folder (besides ``manifest.json``): clashes are settled before computing."""


@dataclass(frozen=True, eq=False)
class TheoryResult:
    """What :func:`theory_run` computed, and where it was written."""

    theory: Theory
    gp: Theory
    accuracy: float
    gp_accuracies: dict[str, float]
    path: Path


def theory_run(spec: Spec, out: str | Path, *, width: int | None = None, temperature: float | None = None,
               correction: str | None = None, force: bool = False) -> TheoryResult:
    """Theory and GP limit at one width, with test accuracies; writes ``out/theory.nc`` and ``out/spec.toml``.

    ``correction``: ``"laplace"`` (the finite-width correction, docs/theory.md §8, with the leading order
    beside it) or ``"none"``; default ``spec.compare.correction``, as in :func:`run`.
    """
    correction = _checks.choice("correction", spec.compare.correction if correction is None else correction,
                                CORRECTIONS)
    point = spec.point(width, temperature, correction=correction)
    net, temperature, xt, yt = point.net, point.temperature, point.x_test, point.y_test
    experiment.check(point)
    with outputs.output_folder(out, force=force, command="theory", files=THEORY_FILES) as stage:
        solved = experiment.solve(point)
        theory, gp = solved.theory, solved.gp
        assert gp is not None
        acc = theory_accuracy(theory, xt, yt, _even_batches(len(xt)))
        ds = theory.to_file_dataset().assign_attrs(spec=_spec_as_run(spec, net, temperature).to_toml())
        ds["accuracy"] = acc
        _io.save(ds, stage.path("theory.nc"))
        stage.path("spec.toml").write_text(_spec_as_run(spec, net, temperature).to_toml())
    return TheoryResult(theory, gp, acc, gp_accuracies(spec, gp, xt, yt), stage.folder / "theory.nc")


@dataclass(frozen=True, eq=False)
class SampleResult:
    """What :func:`sample_run` computed, and where it was written."""

    posterior: Posterior
    summary: Summary
    out: Path


def sample_run(spec: Spec, out: str | Path, *, width: int | None = None, temperature: float | None = None,
               progress_bar: bool = True, force: bool = False) -> SampleResult:
    """The posterior at one width (``spec.sampler``); writes ``posterior.nc``, ``summary.txt`` (ArviZ
    diagnostics), ``spec.toml``. The folder is held and its files replaced together, as in :func:`run`.
    """
    point = spec.point(width, temperature, correction="none", sampler=spec.sampler, progress_bar=progress_bar)
    net, temperature = point.net, point.temperature
    experiment.check(point)  # refused before the folder
    with outputs.output_folder(out, force=force, command="sample", files=SAMPLE_FILES) as stage:
        post = experiment.sample(point)
        post.save(stage.path("posterior.nc"))
        summary = post.summary()
        stage.path("summary.txt").write_text(str(summary) + "\n")
        ran = _spec_as_run(spec, net, temperature, post.settings)
        stage.path("spec.toml").write_text(ran.to_toml())
        stage.record.update(verdict=verdict.of_sampling({"": summary.diagnostics()}).value,
                            sampler_settings=ran.sampler.to_dict())
    return SampleResult(post, summary, stage.folder)


def _spec_as_run(spec: Spec, net: Network, temperature: float, settings: SamplerSettings | None = None) -> Spec:
    """The spec of the run as it was made: width and temperature applied, the sampler's ``settings`` as they ran
    (the chain method resolved)."""
    spec = dataclasses.replace(spec, temperature=temperature,
                               network=dataclasses.replace(spec.network, width=net.widths[0]))
    return spec if settings is None else dataclasses.replace(spec, sampler=settings)


@dataclass(frozen=True, eq=False)
class RunResult:
    """Everything :func:`run` computed, and where it was written."""

    theory: Theory
    gp: Theory
    posterior: Posterior
    comparison: Comparison
    out: Path


def run(spec: Spec, out: str | Path, *, width: int | None = None, temperature: float | None = None,
        progress_bar: bool = True, force: bool = False) -> RunResult:
    """Theory + GP + sampling (``spec.sampler``) + comparison at one width, written into ``out``.

    The theory is solved with the finite-width correction (docs/theory.md §8) and
    compared both corrected and at leading order; ``spec.compare.correction``
    picks the one whose verdict is the headline (and the exit status).

    Writes ``theory.nc``, ``gp.nc``, ``posterior.nc``, ``comparison.nc``,
    ``report.md``, ``spec.toml`` (the run as made: replaying it repeats it),
    ``manifest.json`` and figures ``order_parameter.png``, ``predictor.png``,
    ``alignment.png``. The folder is held while the run computes (a second run
    into it fails at once) and its files are replaced together at the end.
    """
    point = spec.point(width, temperature, sampler=spec.sampler, progress_bar=progress_bar)
    net, temperature, xt, yt = point.net, point.temperature, point.x_test, point.y_test
    from . import _figures as figures

    experiment.check(point)  # refused before the folder
    with outputs.output_folder(out, force=force, command="run", files=RUN_FILES) as stage:
        result = experiment.evaluate(point)
        theory, gp, post, comp = result.theory, result.gp, result.posterior, result.comparison
        ran = _spec_as_run(spec, net, temperature, post.settings)
        theory.save(stage.path("theory.nc"))
        gp.save(stage.path("gp.nc"))
        post.save(stage.path("posterior.nc"))
        comp.save(stage.path("comparison.nc"))
        gp_acc = gp_accuracies(spec, gp, xt, yt)
        stage.path("spec.toml").write_text(ran.to_toml())
        stage.path("report.md").write_text(_report(spec, net, temperature, theory, post, comp, gp_acc))
        figures.order_parameter(comp, stage.path("order_parameter.png"), spec.compare.path_names)
        figures.predictor(comp, stage.path("predictor.png"))
        figures.alignment(theory, gp, stage.path("alignment.png"))
        stage.record.update(verdict=comp.verdict, sampler_settings=ran.sampler.to_dict())
    return RunResult(theory, gp, post, comp, stage.folder)


def _report(spec: Spec, net: Network, temperature: float, theory: Theory, post: Posterior, comp: Comparison,
            gp_acc) -> str:
    from ._report import comparison_report

    names = spec.compare.path_names
    paths = ", ".join(f"{p} ({names[p]})" if p in names else p for p in net.path_labels)
    scores = theory.head_scores()
    head_rows = [
        f"| {l + 1} | {h + 1} | {net.head_names[l][h] if net.head_names else ''} | {s:.3f} |"
        for l, layer in enumerate(scores) for h, s in enumerate(layer)
    ]
    return "\n".join(
        [
            f"# {spec.name}: N = {net.widths[0]}, temperature = {temperature}",
            "",
            f"Paths: {paths}. P = {len(theory.y_train)} training, {len(comp.y_test)} test examples.",
            "",
            f"Headline: {comp.theories_summary()}.",
            "",
            f"Theory: converged = {theory.converged}, max |dS/dU| = {theory.max_gradient:.2g}, "
            f"Hessian min eigenvalue = {theory.hessian_min_eigenvalue:.3g}, Ua = {theory.Ua:.4g}, "
            f"S/N = {theory.action:.6g}.",
            "",
            f"Sampler: {post.method()}, {post.tree['posterior'].sizes['chain']} chains × "
            f"{post.tree['posterior'].sizes['draw']} draws, {post.tree.attrs['seconds']:.1f} s.",
            "",
            comparison_report(comp),
            "## GP limits",
            "",
            "| GP model | test accuracy |",
            "|---|---|",
            *[f"| {k} | {v:.4f} |" for k, v in gp_acc.items()],
            "",
            "## Head scores (theory)",
            "",
            "| layer | head | name | score |",
            "|---|---|---|---|",
            *head_rows,
            "",
            "Figures: order_parameter.png, predictor.png, alignment.png.",
            "",
        ]
    )
