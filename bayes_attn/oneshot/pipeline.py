"""The one-shot image task end to end: paper Fig. 3 (docs/theory.md §6).

Pure steps, each small, and :func:`run_oneshot`, the whole job:

1. :func:`datasets`: read the images and split the classes into three
   disjoint sets — ``gd_train`` (with rotations and mirror images as new classes when asked),
   ``validation``, ``test`` — plus the OOD sets. The theory's training
   episodes come from the ``gd_train`` classes, unrotated and unshifted (as
   the authors replay their training split), unless the split names its own
   ``theory_train`` classes.
2. :func:`evaluation_episodes`: the fixed episodes and their tokens ``x0``
   ``[n, T, N0]`` (``P`` theory-training episodes, validation, test, OOD);
   :func:`theory_draws`: further draws of the ``P`` episodes;
   :func:`gd_episodes`: fresh training episodes of one epoch.
3. :func:`train_model`: gradient descent on fresh episodes every epoch
   (``model.npz``), its test and OOD accuracy and the pixel baseline.
4. :func:`temperature_scan` (:mod:`bayes_attn.oneshot.scan`): theory at every
   width × temperature and the GP limit per temperature on the frozen
   query/key; temperature chosen on the *validation* episodes.
5. :func:`sample_at_widths`: the posterior (``[sampler]``) at the chosen temperatures.
6. :func:`run_oneshot`: head scores from the theory's ``U`` at ``score_width``,
   ``score_temperature``; single-head drops and cumulative pruning of the
   gradient-descent model on the test episodes; the same removal in the
   theory (a head's paths out of ``U``); the spread of the score–drop ρ
   over draws of the ``P`` episodes × class bootstraps of the test
   episodes; files and figures.

**Temperature choice.** The paper chose the temperature per width by *test* accuracy.
Here it is chosen by accuracy on separate validation episodes drawn from a
alphabet of its own (default Tagalog, :data:`~bayes_attn.oneshot.spec.ONESHOT_SPLIT`),
disjoint from the gradient-descent (and theory-training) and test classes,
so that validation episodes are new classes like the test episodes, and the
test accuracy at the chosen temperature is an honest estimate. Standard errors of
test accuracies come from a bootstrap over the query's class
(:func:`~bayes_attn.oneshot.pruning.class_bootstrap`).

Symbols (docs/theory.md): ``x0`` tokens ``[n, T, N0]``, labels ``y`` ±1, ``P``
training episodes, ``N`` width, ``U`` ``[D, D]`` order parameter over paths,
``temperature`` the likelihood variance.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import xarray as xr

from .. import _checks, _io, outputs, stats
from . import checkpoints, figures, model as gd_model, results, pruning, training
from .scan import Scan, path_inputs, predictor_mean, sample_at_widths, temperature_scan
from .spec import OneShotSpec, deviations, load_oneshot_spec
from ..tasks import Episodes, ImageSet, Tokenizer, make_episodes, read_digits, read_omniglot, read_omniglot_runs, split_by_group
from ..compare import diagnostics_verdict
from ..theory import gp_limit, head_scores, solve_theory
from .model import ModelConfig, Params

log = logging.getLogger(__name__)

__all__ = [
    "EpisodeSet",
    "ImageSets",
    "OneShotSpec",
    "Scan",
    "TrainedModel",
    "datasets",
    "evaluation_episodes",
    "gd_episodes",
    "load_oneshot_spec",
    "predictor_mean",
    "run_oneshot",
    "sample_at_widths",
    "temperature_scan",
    "theory_draws",
    "tokenizer",
    "train_model",
]

FULL_ZIPS = ("images_background.zip", "images_evaluation.zip")
"""Omniglot's full archives, which a spec reads when ``task.files`` names them (the default: the small ones)."""
MODEL_FILES = ("model.npz", "model.json")
"""The trained model, moved into the output folder as soon as training ends."""
PRUNE_FILES = ("spec.toml", "model.npz", "model.json", "pruning.json", "oneshot.nc", "report.md", *results.FIGURES)
"""Every file :func:`run_oneshot` writes into its folder (besides ``manifest.json``)."""

SEED_TAGS = {"theory_train": 1, "validation": 2, "test": 3, "ood/all_runs": 4, "ood/digits": 5, "gd_train": 6}
"""Every episode set draws from its own seed ``SeedSequence([task.seed, tag])``."""


def _log(progress_bar: bool, msg: str) -> None:
    if progress_bar:
        log.info(msg)


def _check_spec(spec) -> OneShotSpec:
    if not isinstance(spec, OneShotSpec):
        raise ValueError(f"spec must be a OneShotSpec (see load_oneshot_spec), got {type(spec).__name__}")
    return spec


def episode_seed(spec: OneShotSpec, tag: str, *extra: int) -> int:
    """The seed of the episode set ``tag`` (a key of :data:`SEED_TAGS`), with ``extra`` entropy (e.g. an epoch)."""
    return int(np.random.SeedSequence([spec.task.seed, SEED_TAGS[tag], *extra]).generate_state(1)[0])


# ----- 1. images ---------------------------------------------------------------
class ImageSets(NamedTuple):
    """The image sets: ``gd_train`` (with rotations and mirrors when asked), ``theory_train`` (the
    unrotated ``gd_train`` classes, or the split's own ``theory_train``),
    ``validation``, ``test`` (class-disjoint from the others) and the OOD sets by name."""

    gd_train: ImageSet
    theory_train: ImageSet
    validation: ImageSet
    test: ImageSet
    ood: dict[str, ImageSet]


def datasets(spec: OneShotSpec, data_dir: str | os.PathLike | None = None) -> ImageSets:
    """Read, split and augment the images of ``spec.task``.

    ``data_dir`` (default :meth:`OneShotSpec.data_path`: ``task.data_dir``
    relative to the spec file) holds the zip files; ``kind = "digits"`` needs
    it only for the ``all_runs`` OOD set. Omniglot is split by alphabet,
    digits by class name.
    """
    task = _check_spec(spec).task
    folder = spec.data_path(data_dir)
    if task.kind == "omniglot":
        parts = split_by_group(read_omniglot(folder, task.files, task.size), task.split)
    else:
        digits = read_digits(task.size)
        index = {n: i for i, n in enumerate(digits.class_names)}
        bad = [n for names in task.split.values() for n in names if n not in index]
        if bad:
            raise ValueError(f"task.split names unknown digit classes {bad}; known: {list(index)}")
        parts = {p: digits.subset([index[n] for n in names]) for p, names in task.split.items()}
    gd = parts["gd_train"].with_rotations() if task.rotations else parts["gd_train"]
    gd = gd.with_mirrors() if task.mirrors else gd
    ood = {}
    for name in task.ood:
        ood[name] = read_omniglot_runs(folder, task.size, task.runs_file) if name == "all_runs" else read_digits(task.size)
    return ImageSets(gd, parts[task.theory_part], parts["validation"], parts["test"], ood)


# ----- 2. episodes and tokens --------------------------------------------------
class EpisodeSet(NamedTuple):
    """Episodes with their tokens: ``x`` ``[n, T, N0]`` float64 and targets ``y`` ``[n]`` ±1."""

    episodes: Episodes
    x: np.ndarray
    y: np.ndarray


def tokenizer(spec: OneShotSpec) -> Tokenizer:
    """The frozen :class:`Tokenizer` of ``spec.task`` (its label embeddings are seeded by ``task.seed``)."""
    t = _check_spec(spec).task
    return Tokenizer(size=t.size, patch=t.patch, channels=t.channels, label_scale=t.label_scale, seed=t.seed)


def _episode_set(spec: OneShotSpec, images: ImageSet, n: int, tag: str, *extra: int, shift: int = 0,
                 within_group: bool = False) -> EpisodeSet:
    try:
        ep = make_episodes(images, n, seed=episode_seed(spec, tag, *extra), shift=shift, within_group=within_group)
    except ValueError as err:  # name the split and its alphabets (task.split), not only the image set
        groups = sorted(set(images.groups))
        raise ValueError(f"the {tag!r} episodes (alphabets {groups[:5]}{' …' if len(groups) > 5 else ''}; "
                         f"see task.split): {err}") from None
    return EpisodeSet(ep, tokenizer(spec)(ep), ep.y)


def evaluation_episodes(spec: OneShotSpec, sets: ImageSets) -> dict[str, EpisodeSet]:
    """The fixed episode sets: ``theory_train`` (``P`` episodes), ``validation``, ``test`` and ``ood/<name>``.

    OOD ``all_runs`` episodes take both classes from one run (``within_group=True``:
    classes of different runs may be the same character).
    """
    t = _check_spec(spec).task
    out = {
        "theory_train": _episode_set(spec, sets.theory_train, t.n_theory_train, "theory_train"),
        "validation": _episode_set(spec, sets.validation, t.n_validation, "validation"),
        "test": _episode_set(spec, sets.test, t.n_test, "test"),
    }
    for name, images in sets.ood.items():
        out[f"ood/{name}"] = _episode_set(spec, images, t.n_ood, f"ood/{name}", within_group=name == "all_runs")
    return out


def theory_draws(spec: OneShotSpec, sets: ImageSets, first: EpisodeSet | None = None) -> list[EpisodeSet]:
    """``task.n_theory_draws`` draws of the ``P`` theory-training episodes; draw 0 is ``evaluation_episodes``' (``first``)."""
    t = _check_spec(spec).task
    first = _episode_set(spec, sets.theory_train, t.n_theory_train, "theory_train") if first is None else first
    return [first] + [_episode_set(spec, sets.theory_train, t.n_theory_train, "theory_train", k)
                      for k in range(1, t.n_theory_draws)]


def gd_episodes(spec: OneShotSpec, sets: ImageSets, epoch: int) -> EpisodeSet:
    """``task.n_gd_train`` fresh gradient-descent episodes of ``epoch`` (images shifted by up to ``task.shift``;
    both classes from one alphabet with ``task.within_alphabet``)."""
    epoch = _checks.positive_int("epoch", epoch, minimum=0)
    t = _check_spec(spec).task
    return _episode_set(spec, sets.gd_train, t.n_gd_train, "gd_train", epoch, shift=t.shift,
                        within_group=t.within_alphabet)


# ----- 3. the gradient-descent model -------------------------------------------
class TrainedModel(NamedTuple):
    """The trained model and what was measured on it.

    metrics: ``test`` / ``validation`` ``{"accuracy", "se"}``, ``nn_baseline``
    (pixel nearest neighbour on the same test episodes), ``ood`` ``{name:
    {"accuracy", "se", "nn_accuracy", "nn_se"}}``, ``train_seconds``, ``reused``.
    """

    params: Params
    config: ModelConfig
    history: training.History | None
    metrics: dict


def write_json(path: str | os.PathLike, obj) -> Path:
    """Write ``obj`` as indented JSON, atomically."""
    return _io.write_text(Path(path), json.dumps(obj, indent=2, default=_json_default) + "\n")


def _json_default(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer, np.bool_)):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _saved_model(spec: OneShotSpec, out: Path):
    """The model in ``out`` when it was trained with the same settings, else ``None``."""
    try:
        meta = json.loads((out / "model.json").read_text())
        if meta.get("training_hash") != spec.training_hash():
            return None, None
        saved = checkpoints.load_model(out / "model.npz")
    except (OSError, ValueError):
        return None, None
    return saved, meta


def _accuracy_se(correct: np.ndarray) -> dict:
    return dict(zip(("accuracy", "se"), stats.proportion(correct)))


def train_model(
    spec: OneShotSpec,
    out: str | os.PathLike,
    *,
    sets: ImageSets | None = None,
    evaluation: dict[str, EpisodeSet] | None = None,
    data_dir: str | os.PathLike | None = None,
    retrain: bool = False,
    progress_bar: bool = True,
) -> TrainedModel:
    """Train the gradient-descent model of docs/theory.md §6, or load ``out/model.npz`` made with the same settings.

    Every epoch trains on fresh shifted episodes (:func:`gd_episodes`); the
    validation accuracy is recorded per epoch. Writes ``model.npz`` and
    ``model.json`` (settings, their hash, history, wall time). Returns the
    model with its test accuracy ± se, the pixel nearest-neighbour baseline on
    the same test episodes and the OOD accuracies.
    """
    spec, out = _check_spec(spec), Path(out)
    sets = datasets(spec, data_dir) if sets is None else sets
    evaluation = evaluation_episodes(spec, sets) if evaluation is None else evaluation
    config = spec.model_config
    saved, meta = (None, None) if retrain else _saved_model(spec, out)
    if saved is not None:
        params, history, seconds = saved.params, saved.history, float(meta.get("train_seconds", float("nan")))
        _log(progress_bar, f"reusing {out / 'model.npz'} (same training settings)")
    else:
        val = evaluation["validation"]
        t0 = time.perf_counter()
        params, history = training.train(
            config, None, None, spec.training, x_val=val.x, y_val=val.y, progress_bar=progress_bar,
            augment=lambda epoch, rng: gd_episodes(spec, sets, epoch)[1:],
        )
        seconds = time.perf_counter() - t0
        checkpoints.save_model(out / "model.npz", params, config, spec.training, history)
        write_json(out / "model.json", {"training_hash": spec.training_hash(), "settings": spec.training_settings(),
                                        "history": history.to_dict(), "train_seconds": seconds})
    metrics = {"train_seconds": seconds, "reused": saved is not None, "epochs_run": len(history.loss),
               "kept_epoch": history.kept_epoch}
    for name in ("test", "validation"):
        s = evaluation[name]
        metrics[name] = _accuracy_se(gd_model.correct(params, s.x, s.y))
    test = evaluation["test"]
    acc, se = gd_model.nearest_neighbour_accuracy(test.episodes.images, test.y)
    metrics["nn_baseline"] = {"accuracy": acc, "se": se}
    metrics["ood"] = {}
    for key, s in evaluation.items():
        if key.startswith("ood/"):
            nn, nn_se = gd_model.nearest_neighbour_accuracy(s.episodes.images, s.y)
            metrics["ood"][key[4:]] = {**_accuracy_se(gd_model.correct(params, s.x, s.y)), "nn_accuracy": nn, "nn_se": nn_se}
    return TrainedModel(params, config, history, metrics)


# ----- 5. uncertainty -------------------------------------------------------------
PAPER_SPEARMAN_RHO = 0.86
"""The paper's head score vs single-head drop Spearman ρ (its Fig. 3, 2 × 4 heads)."""


def _uncertainty(spec: OneShotSpec, sets: ImageSets, net, model: TrainedModel, scan: Scan, ev: dict,
                 scores, score_theory, report: dict, progress_bar: bool) -> dict:
    """Class-bootstrap standard errors, theory/GP test accuracy, the theory-side ablation and the spread of ρ."""
    th, pr = spec.theory, spec.pruning
    tr, te = ev["theory_train"], ev["test"]
    heads = model.config.heads
    query_class = te.episodes.classes[:, 2]
    boots = pruning.class_bootstrap(query_class, pr.n_bootstrap, seed=pr.seed)
    c0, rows = pruning.head_correctness(model.params, model.config, te.x, te.y)
    out = dict(zip(("base_accuracy", "base_se"), pruning.bootstrap_accuracy(c0, boots)))
    out["se_method"] = (f"bootstrap over the query's class ({len(np.unique(query_class))} test classes, "
                        f"{pr.n_bootstrap} resamples)")
    xi_tr, xi_te, s0 = path_inputs(net, tr.x), path_inputs(net, te.x), net.variances[0]

    def acc_se(U, temperature):
        f = predictor_mean(U, temperature, xi_tr, tr.y, xi_te, s0sq=s0)
        return pruning.bootstrap_accuracy(stats.sign(f) == te.y, boots)

    temp_th, temp_gp = scan.best_temperature(th.score_width), float(scan.dataset["gp_best_temperature"])
    out["theory_accuracy"], out["theory_se"] = acc_se(scan.theory(th.score_width).U, temp_th)
    out["theory_temperature"], out["theory_width"] = temp_th, th.score_width
    out["gp_accuracy"], out["gp_se"] = acc_se(net.gp_U, temp_gp)
    out["gp_temperature"] = temp_gp
    ablation = pruning.theory_head_drops(score_theory.U, th.score_temperature, xi_tr, tr.y, xi_te, te.y, heads, s0sq=s0)
    ablation["spearman_score"] = pruning.spearman(scores, ablation["drops"], seed=pr.seed)
    ablation["spearman_gd_drops"] = pruning.spearman(ablation["drops"], report["accuracy_drops"], seed=pr.seed)
    out["theory_ablation"] = ablation
    # the spread of ρ: draws of the P episodes × class bootstraps of the test episodes
    score_draws = [np.concatenate([np.ravel(s) for s in scores])]
    net_score = net.with_width(th.score_width)
    for k, d in enumerate(theory_draws(spec, sets, tr)[1:], start=1):
        t = solve_theory(net_score, d.x, d.y, temperature=th.score_temperature)
        score_draws.append(np.concatenate([np.ravel(s) for s in head_scores(t.U, heads)]))
        _log(progress_bar, f"theory draw {k}: head scores {np.round(score_draws[-1], 3).tolist()}")
    removable = np.array([heads[l] > 1 for l, _ in pruning.all_heads(heads)])
    drop_rows = []
    for i in pruning.class_bootstrap(query_class, pr.spread_bootstrap, seed=pr.seed + 1):
        d = c0[i].mean() - rows[:, i].mean(axis=1)
        drop_rows.append(np.where(removable, d, np.nan))
    out |= pruning.spearman_spread(score_draws, drop_rows)
    out["spearman_score_draws"] = [s.tolist() for s in score_draws]
    out["paper_spearman_rho"] = PAPER_SPEARMAN_RHO
    return out


# ----- 6. the whole job ----------------------------------------------------------
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
) -> dict:
    """Paper Fig. 3 end to end; returns the ``pruning.json`` dict.

    Trains (or reuses) the model, scans the theory over widths × temperatures
    (validation-chosen ``T``), samples at ``theory.sample_widths``, reads the
    head scores off the theory's ``U`` at ``(score_width, score_temperature)``,
    prunes the gradient-descent model on the test episodes (single-head drops,
    cumulative pruning), and writes into ``out``: ``model.npz``,
    ``model.json``, ``spec.toml``, ``pruning.json`` (``base_accuracy``,
    ``base_se``, ``head_scores``, ``accuracy_drops``, ``drop_se``,
    ``spearman``, ``cumulative``, ``nn_baseline``, ``ood``, ``model``,
    ``temperatures``, ``trained_head_scores``, ``trained_spearman``, …),
    ``oneshot.nc``, ``report.md`` and the figures of
    :data:`bayes_attn.oneshot.results.FIGURES`. ``verdict`` is
    ``"inconclusive"`` (with ``inconclusive_reasons``) when the sampler's
    R-hat or divergences failed at some sampled width. The folder is held and
    its files replaced together, as for every job (``force``: write into a
    non-empty folder this package did not write).
    """
    spec, out = _check_spec(spec), Path(out)
    if not isinstance(retrain, bool):
        raise ValueError(f"retrain must be a bool, got {retrain!r}")
    check_data(spec, data_dir)
    if spec.theory.sample_widths:  # an explicit guided_samples that cannot fit: refused before training
        from ..samplers.memory import check_guided_draws

        check_guided_draws(spec.sampler, "prune's [sampler]")
    with outputs.output_folder(out, force=force, command="prune", files=PRUNE_FILES) as stage:  # checked, held
        for name in MODEL_FILES:  # a model trained with the same settings is reused
            if (out / name).is_file() and not (out / name).is_symlink():
                shutil.copy2(out / name, stage.staging / name)
        publish = lambda: outputs.publish(stage, MODEL_FILES, command="prune")  # noqa: E731
        report = _run_oneshot(spec, stage.staging, data_dir, retrain, progress_bar, publish)
        stage.record.update(verdict=report["verdict"])
    return report


def check_data(spec: OneShotSpec, data_dir: str | os.PathLike | None = None) -> None:
    """One-line ``ValueError`` when the data folder is missing, a file, or lacks a zip the task reads."""
    t = spec.task
    files = (list(t.files) if t.kind == "omniglot" else []) + ([t.runs_file] if "all_runs" in t.ood else [])
    if not files:
        return
    folder = spec.data_path(data_dir)
    try:
        _checks.data_folder("data_dir", folder, files)
    except ValueError as err:
        full = [f for f in FULL_ZIPS if (Path(folder) / f).is_file() and f not in files]
        if not full:
            raise
        raise ValueError(f"{err}; the folder holds {', '.join(full)}: to read it instead, set task.files = "
                         f"{full!r} in the spec") from None


def sampling_verdict(ds: xr.Dataset | str | os.PathLike) -> dict:
    """``{"verdict", "inconclusive_reasons"}`` from the R-hat, bulk ESS, divergences and Pareto ``k̂`` of ``U`` at
    every sampled width of the results ``ds`` (or the ``oneshot.nc`` at that path), by the rules of
    :func:`bayes_attn.diagnostics.diagnostic_failures`."""
    ds = ds if isinstance(ds, xr.Dataset) else _io.load_dataset(ds)
    if "sample_width" not in ds.dims or not ds.sizes["sample_width"]:
        return {"verdict": "not sampled", "inconclusive_reasons": []}
    names = {"rhat_U": "max_r_hat", "ess_U": "min_ess_bulk", "divergences": "divergences", "pareto_k": "pareto_k"}
    per = {f"N={int(N)}": {key: float(ds[v][i]) for v, key in names.items()
                           if v in ds and np.isfinite(float(ds[v][i]))}
           for i, N in enumerate(ds["sample_width"].values)}
    verdict, reasons = diagnostics_verdict(per)
    return {"verdict": verdict, "inconclusive_reasons": reasons}


def _run_oneshot(spec: OneShotSpec, out: Path, data_dir, retrain: bool, progress_bar: bool,
                 publish: Callable[[], None] = lambda: None) -> dict:
    """:func:`run_oneshot` in the staging folder ``out``; ``publish`` moves a newly trained model into the output
    folder as soon as training ends, and a later failure is :class:`~bayes_attn.outputs.FailedAfterComputing`."""
    _io.write_text(out / "spec.toml", spec.to_toml())
    clock, seconds = time.perf_counter(), {}

    def lap(name):
        nonlocal clock
        seconds[name] = time.perf_counter() - clock
        clock = time.perf_counter()

    sets = datasets(spec, data_dir)
    ev = evaluation_episodes(spec, sets)
    lap("data and episodes")
    model = train_model(spec, out, sets=sets, evaluation=ev, retrain=retrain, progress_bar=progress_bar)
    lap("training" + (" (reused model)" if model.metrics["reused"] else ""))
    if not model.metrics["reused"]:
        publish()
    try:
        return _after_training(spec, out, sets, ev, model, lap, seconds, progress_bar)
    except ValueError as err:
        raise outputs.FailedAfterComputing(f"{err} (after training; the trained model is kept in the output folder "
                                           "and a rerun with the same training settings reuses it)") from err


def _after_training(spec: OneShotSpec, out: Path, sets: ImageSets, ev: dict, model: TrainedModel,
                    lap: Callable[[str], None], seconds: dict, progress_bar: bool) -> dict:
    """What :func:`run_oneshot` does with the trained model: scan, sample, score, prune, write."""
    th = spec.theory
    net, _ = gd_model.to_network(model.params, model.config, width=th.score_width, variances=th.variances)
    tr, val, te = ev["theory_train"], ev["validation"], ev["test"]
    scan = temperature_scan(spec, net, tr.x, tr.y, val.x, val.y, te.x, te.y, progress_bar=progress_bar)
    lap("theory scan")
    sampled, _ = sample_at_widths(spec, net, tr.x, tr.y, te.x, te.y, scan, progress_bar=progress_bar)
    lap("sampling")
    key = (th.score_width, th.score_temperature)
    score_theory = scan.theories.get(key) or solve_theory(net.with_width(th.score_width), tr.x, tr.y,
                                                          temperature=th.score_temperature)
    heads = model.config.heads
    scores = head_scores(score_theory.U, heads)
    report = pruning.pruning_report(model.params, model.config, te.x, te.y, scores,
                                    n_random=spec.pruning.n_random, seed=spec.pruning.seed)
    trained = gd_model.trained_order_parameters(model.params, model.config)
    trained_scores = head_scores(trained.U, heads)
    report |= _uncertainty(spec, sets, net, model, scan, ev, scores, score_theory, report, progress_bar)
    report |= {
        "nn_baseline": model.metrics["nn_baseline"],
        "ood": model.metrics["ood"],
        "model": {k: model.metrics[k] for k in ("test", "validation", "train_seconds", "reused", "epochs_run",
                                                "kept_epoch")},
        "score_width": th.score_width,
        "score_temperature": th.score_temperature,
        "trained_head_scores": [s.tolist() for s in trained_scores],
        "trained_spearman": pruning.spearman(trained_scores, report["accuracy_drops"], seed=spec.pruning.seed),
        "temperatures": {"choice": scan.dataset.attrs["temperature_choice"],
                         "finite_width": {str(int(N)): float(temp) for N, temp in zip(scan.dataset["width"].values,
                                                                                  scan.dataset["best_temperature"].values)},
                         "gp": float(scan.dataset["gp_best_temperature"])},
        "theory_classes": spec.task.theory_part,
        "deviations": deviations(spec),
    }
    lap("head scores and pruning")
    U = {"score": score_theory.U, "trained": trained.U}
    attrs = {"name": spec.name, "gd_accuracy": model.metrics["test"]["accuracy"], "gd_se": model.metrics["test"]["se"],
             "gd_width": model.config.width, "nn_accuracy": model.metrics["nn_baseline"]["accuracy"],
             "nn_se": model.metrics["nn_baseline"]["se"], "score_width": th.score_width,
             "score_temperature": th.score_temperature, "training_hash": spec.training_hash()}
    ds = results.results_dataset(scan.dataset, sampled, report, U, model.config.heads, attrs)
    report |= sampling_verdict(ds)
    write_json(out / "pruning.json", report)
    results.save_dataset(ds, out / "oneshot.nc")
    results.figures_of(ds, report, out)
    gp = gp_limit(score_theory.net, tr.x, tr.y, temperature=th.score_temperature)
    figures.path_kernels(score_theory, gp, _top_paths(score_theory.U, score_theory.net.path_labels),
                                 out / "path_kernels.png", max_examples=120)
    lap("files and figures")
    _io.write_text(out / "report.md", results.report_markdown(spec.name, report, ds, seconds))
    return report
