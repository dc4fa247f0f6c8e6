"""The one-shot image task end to end: paper Fig. 3 (docs/theory.md §6).

:func:`run_oneshot`, the whole job, is a line of stages; each returns a
frozen value (:mod:`bayes_attn.oneshot._prune_result`) and the next takes it:

1. images and episodes (:mod:`bayes_attn.oneshot._data`);
2. :func:`train_model`: gradient descent on fresh episodes every epoch (``model.npz``; parked until the run commits,
   reused when its settings match) → :class:`TrainedModel` with its :class:`ModelMetrics` (test and OOD accuracy, the
   pixel baseline);
3. :func:`~bayes_attn.oneshot._scan.temperature_scan`: theory at every width × temperature and the GP limit per
   temperature on the frozen query/key, the temperature chosen on the *validation* episodes → ``Scan``;
4. :func:`~bayes_attn.oneshot._scan.sample_at_widths`: one experiment point per sampled width at its chosen
   temperature (:func:`bayes_attn.experiment.evaluate`, with the scan's theory, corrected): the posterior
   (``[sampler]``) → :class:`SamplingVerdict`, and the leading and the corrected theory against it, as
   ``bayes-attn run`` compares them → :class:`WidthComparison` per width;
5. :func:`~bayes_attn.oneshot._pruning.pruning_report`: head scores from the theory's ``U`` at ``score_width``,
   ``score_temperature``; single-head drops and cumulative pruning of the model on the test episodes →
   ``PruningResult``;
6. :func:`~bayes_attn.oneshot._uncertainty.spread`: class-bootstrap errors, the same removal in the theory (a head's
   paths out of ``U``), the spread of the score–drop ρ over draws of the ``P`` episodes × class bootstraps of the test
   episodes → :class:`Spread`;
7. :class:`PruneResult` → ``pruning.json``, ``oneshot.nc``, ``report.md``, figures.

**Temperature choice.** The paper chose the temperature per width by *test* accuracy. Here it is chosen by accuracy on
separate validation episodes drawn from a alphabet of its own (default Tagalog,
:data:`~bayes_attn.oneshot._spec.ONESHOT_SPLIT`), disjoint from the gradient-descent (and theory-training) and test
classes, so that validation episodes are new classes like the test episodes, and the test accuracy at the chosen
temperature is an honest estimate. Standard errors of test accuracies come from a bootstrap over the query's class
(:func:`~bayes_attn.oneshot._pruning.class_bootstrap`).

Symbols (docs/theory.md): ``x0`` tokens ``[n, T, N0]``, labels ``y`` ±1, ``P`` training episodes, ``N`` width, ``U``
``[D, D]`` order parameter over paths, ``temperature`` the likelihood variance.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr

from .. import experiment, stats, verdict
from .._internal import checks as _checks
from .._internal import io as _io
from .._internal import outputs
from ..theory import head_scores
from . import _checkpoints as checkpoints
from . import _data as data
from . import _figures as figures
from . import _model as gd_model
from . import _pruning as pruning
from . import _results as results
from . import _training as training
from ._data import Evaluation, ImageSets
from ._model import Params
from ._prune_result import (
    Accuracy,
    ModelMetrics,
    OodAccuracy,
    PruneResult,
    SamplingVerdict,
    Temperatures,
    TrainedModel,
    width_comparison,
    write,
)
from ._scan import Scan, sample_at_widths, temperature_scan
from ._spec import OneShotSpec, deviations
from ._uncertainty import spread

log = logging.getLogger(__name__)

__all__ = ["MODEL_FILES", "PARKED_FILES", "PRUNE_FILES", "run_oneshot",
           "sampling_verdict", "train_model"]

MODEL_FILES = ("model.npz", "model.json")
"""The model of the folder's results (weights with their settings, and its record)."""
PARKED_FILES = ("model.parked.npz", "model.parked.json")
"""A newly trained model, parked in the output folder as soon as training ends: a failed run keeps it beside the
folder's results (which stay as they were) and a rerun reuses it; the run's commit moves it to :data:`MODEL_FILES`."""
PRUNE_FILES = ("spec.toml", *MODEL_FILES, *PARKED_FILES, "pruning.json", "oneshot.nc", "report.md", *results.FIGURES)
"""Every file :func:`run_oneshot` writes into its folder (besides ``manifest.json``)."""


def _log(progress_bar: bool, msg: str) -> None:
    if progress_bar:
        log.info(msg)


# ----- 2. the gradient-descent model -------------------------------------------
def _saved_model(spec: OneShotSpec, folder: Path, names: tuple[str, str]):
    """``(model, record, None, None)``: the model saved under ``names`` (``.npz``, ``.json``) in ``folder``, when
    both files say it was trained with ``spec``'s training settings; else ``(None, None, why not, log level)``."""
    npz, js = folder / names[0], folder / names[1]
    missing = [p.name for p in (npz, js) if not (p.is_file() and not p.is_symlink())]
    if missing:
        return None, None, f"{' and '.join(missing)} missing or not a plain file", logging.WARNING
    try:
        meta = json.loads(js.read_text())
        stored = meta["training_hash"], meta.get("settings")
    except (OSError, ValueError, TypeError, KeyError) as err:
        return None, None, f"{js.name} is not a readable model record ({type(err).__name__}: {err})", logging.WARNING
    if stored[0] != spec.training_hash():
        want = json.loads(json.dumps(spec.training_settings(), default=list))
        changed = ", ".join(checkpoints.changed(stored[1], want)[:4])
        return None, None, f"trained with other settings ({changed or 'the training hash'})", logging.INFO
    try:
        saved = checkpoints.load_model(npz)
    except ValueError as err:
        return None, None, f"not a readable model file ({err.__cause__ or err})", logging.WARNING
    diff = checkpoints.mismatches(saved, spec.model_config, spec.training, spec.training_hash())
    if diff:  # another run's weights under this record
        return None, None, (f"it holds a model trained with other settings than {js.name} records "
                            f"({', '.join(diff[:4])})"), logging.WARNING
    return saved, meta, None, None


def _reusable(spec: OneShotSpec, folder: Path, progress_bar: bool):
    """The model in ``folder`` trained with ``spec``'s settings, its record and its names: the parked one
    (:data:`PARKED_FILES`, the newest training) first, else the folder's (:data:`MODEL_FILES`); ``None`` when
    neither is. Says in one log line why a model there is not reused (a warning when it is unreadable)."""
    for names in (PARKED_FILES, MODEL_FILES):
        if not any(os.path.lexists(folder / n) for n in names):
            continue
        saved, meta, why, level = _saved_model(spec, folder, names)
        if saved is not None:
            return saved, meta, names
        if level > logging.INFO or progress_bar:
            log.log(level, f"not reusing {folder / names[0]}: {why}")
    return None


def _kept(spec: OneShotSpec, folder: Path) -> str:
    """Which model of ``spec``'s training settings the output ``folder`` keeps, for an error message."""
    for names in (PARKED_FILES, MODEL_FILES):
        if any(os.path.lexists(folder / n) for n in names) and _saved_model(spec, folder, names)[0] is not None:
            return (f"the trained model is kept in {str(folder / names[0])!r} and a rerun with the same training "
                    "settings reuses it")
    return f"no model trained with these settings is kept in {str(folder)!r}"


def _accuracy(correct: np.ndarray) -> Accuracy:
    return Accuracy(*stats.proportion(correct))


def _metrics(params: Params, evaluation: Evaluation, seconds: float, reused: bool,
             history: training.History) -> ModelMetrics:
    test = evaluation.test
    ood = {}
    for name, s in evaluation.ood.items():
        acc = _accuracy(gd_model.correct(params, s.x, s.y))
        ood[name] = OodAccuracy(acc.accuracy, acc.se, *gd_model.nearest_neighbour_accuracy(s.episodes.images, s.y))
    return ModelMetrics(
        test=_accuracy(gd_model.correct(params, test.x, test.y)),
        validation=_accuracy(gd_model.correct(params, evaluation.validation.x, evaluation.validation.y)),
        nn_baseline=Accuracy(*gd_model.nearest_neighbour_accuracy(test.episodes.images, test.y)),
        ood=ood, train_seconds=seconds, reused=reused, epochs_run=len(history.loss), kept_epoch=history.kept_epoch)


def train_model(
    spec: OneShotSpec,
    out: str | os.PathLike,
    *,
    sets: ImageSets | None = None,
    evaluation: Evaluation | None = None,
    data_dir: str | os.PathLike | None = None,
    retrain: bool = False,
    progress_bar: bool = True,
    saved_in: str | os.PathLike | None = None,
) -> TrainedModel:
    """Train the gradient-descent model of docs/theory.md §6, or reuse one trained with the same settings.

    Every epoch trains on fresh shifted episodes (:func:`gd_episodes`); the
    validation accuracy is recorded per epoch. Writes ``model.npz`` and
    ``model.json`` (settings, their hash, history, wall time) into ``out``;
    the hash is stored in ``model.npz`` too. Unless ``retrain``, a model in
    ``saved_in`` (default ``out``: its parked model, else ``model.npz``) whose
    ``model.json`` and ``model.npz`` both match the settings is reused (copied
    into ``out`` from another folder). Returns the model with its test
    accuracy ± se, the pixel nearest-neighbour baseline on the same test
    episodes and the OOD accuracies.
    """
    spec, out = data.check_spec(spec), Path(out)
    saved_in = out if saved_in is None else Path(saved_in)
    sets = data.datasets(spec, data_dir) if sets is None else sets
    evaluation = data.evaluation_episodes(spec, sets) if evaluation is None else evaluation
    config = spec.model_config
    found = None if retrain else _reusable(spec, saved_in, progress_bar)
    if found is not None:
        saved, meta, names = found
        if saved_in.resolve() != out.resolve():
            for name, to in zip(names, MODEL_FILES, strict=True):
                shutil.copy2(saved_in / name, out / to)
        params, history, seconds = saved.params, saved.history, float(meta.get("train_seconds", float("nan")))
        _log(progress_bar, f"reusing {saved_in / names[0]} (same training settings)")
    else:
        val = evaluation.validation
        t0 = time.perf_counter()
        params, history = training.train(
            config, None, None, spec.training, x_val=val.x, y_val=val.y, progress_bar=progress_bar,
            augment=lambda epoch, rng: data.gd_episodes(spec, sets, epoch)[1:],
        )
        seconds = time.perf_counter() - t0
        checkpoints.save_model(out / "model.npz", params, config, spec.training, history, spec.training_hash())
        _io.write_json(out / "model.json", {"training_hash": spec.training_hash(),
                                            "settings": spec.training_settings(), "history": history.to_dict(),
                                            "train_seconds": seconds})
    return TrainedModel(params, config, history, _metrics(params, evaluation, seconds, found is not None, history))


# ----- the whole job -------------------------------------------------------------
def _top_paths(U: np.ndarray, labels: list[str]) -> list[str]:
    """The two paths of largest ``U[π, π]`` and the one of smallest (for the path-kernel figure)."""
    order = np.argsort(-np.diag(U), kind="stable")
    return [labels[i] for i in (*order[:2], order[-1])]


def run_oneshot(
    spec: OneShotSpec,
    out: str | os.PathLike,
    *,
    data_dir: str | os.PathLike | None = None,
    retrain: bool = False,
    progress_bar: bool = True,
    force: bool = False,
) -> PruneResult:
    """Paper Fig. 3 end to end; returns the :class:`PruneResult` written to ``pruning.json``.

    Trains (or reuses) the model, scans the theory over widths × temperatures
    (validation-chosen ``T``), samples at ``theory.sample_widths``, reads the
    head scores off the theory's ``U`` at ``(score_width, score_temperature)``,
    prunes the gradient-descent model on the test episodes (single-head drops,
    cumulative pruning), and writes into ``out``: ``model.npz``,
    ``model.json``, ``spec.toml``, ``pruning.json``
    (:func:`bayes_attn.oneshot._prune_result.to_json`), ``oneshot.nc``,
    ``report.md`` and the figures of :data:`bayes_attn.oneshot._results.FIGURES`.
    ``sampling.verdict`` is ``"inconclusive"`` (with its reasons) when the
    sampler's R-hat or divergences failed at some sampled width; ``verdict``
    is the headline over the widths' comparisons of theory and samples. The folder is
    held and its files replaced together, as for every job (``force``: write
    into a non-empty folder this package did not write). A newly trained model
    is parked in ``out`` at once (:data:`PARKED_FILES`), beside the previous
    run's files, and becomes ``model.npz`` when the run commits; a failure
    (a full disk too) says where the trained model is kept.
    """
    spec, out = data.check_spec(spec), Path(out)
    if not isinstance(retrain, bool):
        raise ValueError(f"retrain must be a bool, got {retrain!r}")
    data.check_data(spec, data_dir)
    if spec.theory.sample_widths:  # an explicit guided_samples that cannot fit: refused before training
        from ..samplers._memory import check_guided_draws

        check_guided_draws(spec.sampler, "prune's [sampler]")
    try:
        with outputs.output_folder(out, force=force, command="prune", files=PRUNE_FILES) as stage:  # checked, held
            result = _run_oneshot(spec, stage, data_dir, retrain, progress_bar)
            stage.record.update(verdict=result.verdict)
    except OSError as err:  # a full disk: say where the trained model is
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        said = str(err.strerror) if str(err.strerror).startswith("no space") else \
            f"no space left on the device ({err}): free some disk space or choose another output folder"
        raise OSError(err.errno, f"{said}; {_kept(spec, out)}") from err
    return result


def sampling_verdict(ds: xr.Dataset | str | os.PathLike) -> SamplingVerdict:
    """The verdict from the R-hat, bulk ESS, divergences and Pareto ``k̂`` of ``U`` at every sampled width of the
    results ``ds`` (or the ``oneshot.nc`` at that path), by the rules of
    :func:`bayes_attn.verdict.of_sampling`."""
    ds = ds if isinstance(ds, xr.Dataset) else _io.load_dataset(ds)
    if "sample_width" not in ds.dims or not ds.sizes["sample_width"]:
        return SamplingVerdict(verdict.NOT_SAMPLED, [])
    names = {"rhat_U": "max_r_hat", "ess_U": "min_ess_bulk", "divergences": "divergences", "pareto_k": "pareto_k"}
    if "rhat_bound_U" in ds:  # the rule per group (bayes_attn.diagnostics), its group U; else the fixed bounds
        names |= {"rhat_U": "max_r_hat[U]", "rhat_bound_U": "r_hat_bound[U]", "ess_U": "min_ess_bulk[U]",
                  "ess_tail_U": "min_ess_tail[U]", "ess_required": "ess_required"}
    D = ds.sizes.get("path", 0)
    per = {f"N={int(N)} (sampler, on U)": {key: float(ds[v][i]) for v, key in names.items()
                           if v in ds and (np.isfinite(float(ds[v][i])) or key.endswith("[U]"))}
           | ({"entries[U]": float(D * D)} if "rhat_bound_U" in ds else {})
           for i, N in enumerate(ds["sample_width"].values)}
    sampled = verdict.of_sampling(per)
    return SamplingVerdict(sampled.value, list(sampled.reasons))


def _run_oneshot(spec: OneShotSpec, stage: outputs.Staging, data_dir, retrain: bool, progress_bar: bool) -> PruneResult:
    """:func:`run_oneshot` in the held folder ``stage``: a newly trained model is parked in the output folder as
    soon as training ends (:data:`PARKED_FILES`), and a later failure is
    :class:`~bayes_attn._internal.outputs.FailedAfterComputing`."""
    out = stage.staging
    _io.write_text(out / "spec.toml", spec.to_toml())
    clock, seconds = time.perf_counter(), {}

    def lap(name):
        nonlocal clock
        seconds[name] = time.perf_counter() - clock
        clock = time.perf_counter()

    sets = data.datasets(spec, data_dir)
    ev = data.evaluation_episodes(spec, sets)
    lap("data and episodes")
    model = train_model(spec, out, sets=sets, evaluation=ev, retrain=retrain, progress_bar=progress_bar,
                        saved_in=stage.folder)
    lap("training" + (" (reused model)" if model.metrics.reused else ""))
    if not model.metrics.reused:
        outputs.park(stage, dict(zip(MODEL_FILES, PARKED_FILES, strict=True)), command="prune")
    try:
        return _after_training(spec, out, sets, ev, model, lap, seconds, progress_bar)
    except (MemoryError, OSError):  # the command's own messages (a full disk names the model kept: run_oneshot)
        raise
    except Exception as err:  # noqa: BLE001 (XLA's RESOURCE_EXHAUSTED too: one line naming the model kept)
        raise outputs.FailedAfterComputing(f"{_checks.one_line(err)} (after training; {_kept(spec, stage.folder)})") \
            from err


def _temperatures(scan: Scan) -> Temperatures:
    d = scan.dataset
    best = zip(d["width"].values, d["best_temperature"].values, strict=True)
    return Temperatures(d.attrs["temperature_choice"], {int(N): float(t) for N, t in best},
                        float(d["gp_best_temperature"]))


def _after_training(spec: OneShotSpec, out: Path, sets: ImageSets, ev: Evaluation, model: TrainedModel,
                    lap: Callable[[str], None], seconds: dict, progress_bar: bool) -> PruneResult:
    """What :func:`run_oneshot` does with the trained model: scan, sample, score, prune, write."""
    th, heads = spec.theory, model.config.heads
    net, _ = gd_model.to_network(model.params, model.config, width=th.score_width, variances=th.variances)
    tr, val, te = ev.theory_train, ev.validation, ev.test
    scan = temperature_scan(spec, net, (tr.x, tr.y), (val.x, val.y), (te.x, te.y), progress_bar=progress_bar)
    lap("theory scan")
    points = sample_at_widths(spec, net, tr.x, tr.y, te.x, te.y, {N: scan.theory(N) for N in th.sample_widths},
                              progress_bar=progress_bar)
    sampled = points.dataset
    comparisons = {N: width_comparison(r.comparison, r.point.temperature, points.correction_problems[N])
                   for N, r in points.points.items()}
    lap("sampling and the theory against the samples")
    score_point = spec.point(net.with_width(th.score_width), (tr.x, tr.y), (te.x, te.y), th.score_temperature,
                             correction="none")
    score_theory = scan.theories.get((th.score_width, th.score_temperature)) or experiment.solve(
        score_point, gp=False).theory
    scores = head_scores(score_theory.U, heads)
    pruned = pruning.pruning_report(model.params, model.config, te.x, te.y, scores, n_random=spec.pruning.n_random,
                                    seed=spec.pruning.seed)
    trained = gd_model.trained_order_parameters(model.params, model.config)
    trained_scores = head_scores(trained.U, heads)
    result = PruneResult(
        model=model.metrics, pruning=pruned,
        spread=spread(spec, (sets, ev), model, scan, score_theory, pruned, points.points.get(th.score_width),
                      progress_bar),
        score_width=th.score_width, score_temperature=th.score_temperature,
        trained_head_scores=[s.tolist() for s in trained_scores],
        trained_spearman=pruning.spearman(trained_scores, pruned.drops, seed=spec.pruning.seed),
        temperatures=_temperatures(scan), theory_classes=spec.task.theory_part, deviations=deviations(spec),
        sampling=sampling_verdict(sampled), comparisons=comparisons)
    lap("head scores and pruning")
    m = model.metrics
    attrs = {"name": spec.name, "gd_accuracy": m.test.accuracy, "gd_se": m.test.se, "gd_width": model.config.width,
             "nn_accuracy": m.nn_baseline.accuracy, "nn_se": m.nn_baseline.se, "score_width": th.score_width,
             "score_temperature": th.score_temperature, "training_hash": spec.training_hash()}
    ds = results.results_dataset(scan.dataset, sampled, result, {"score": score_theory.U, "trained": trained.U},
                                 heads, attrs)
    write(result, out / "pruning.json")
    results.save_dataset(ds, out / "oneshot.nc")
    results.figures_of(ds, result, out)
    gp = experiment.gp_of(score_point)
    figures.path_kernels(score_theory, gp, _top_paths(score_theory.U, score_theory.net.path_labels),
                         out / "path_kernels.png", max_examples=120)
    lap("files and figures")
    _io.write_text(out / "report.md", results.report_markdown(spec.name, result, ds, seconds))
    return result
