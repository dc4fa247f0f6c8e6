"""The one-shot image pipeline of paper Fig. 3 (bayes_attn.oneshot; docs/theory.md §6)."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from conftest import seed_of

from bayes_attn import oneshot
from bayes_attn._internal import outputs
from bayes_attn.oneshot import _checkpoints as checkpoints
from bayes_attn.oneshot import _model as model
from bayes_attn.oneshot import _prune_result as prune_result
from bayes_attn.oneshot import _training as training
from bayes_attn.oneshot._spec import ModelSpec, OneShotSpec, PruningSpec, TaskSpec, TheorySpec, load_oneshot_spec
from bayes_attn.oneshot._training import TrainConfig
from bayes_attn.samplers import SamplerSettings
from bayes_attn.theory import head_scores

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data/omniglot"
SPECS = sorted((ROOT / "models").glob("*oneshot*.toml")) + sorted((ROOT / "models").glob("omniglot_*.toml"))
SHIPPED_RUN = ROOT / "inference/results/fig3"


def fake_result(rho: float | None = 0.5, p_value: float | None = 0.01, verdict: str = "diagnostics passed",
                reasons: tuple[str, ...] = ()) -> prune_result.PruneResult:
    """The shipped run's result with its ρ, base accuracy 0.9 ± 0.01 and verdict replaced (what a fake
    ``run_oneshot`` returns to the command)."""
    r = prune_result.load_pruning(SHIPPED_RUN)
    pruned = dataclasses.replace(r.pruning, spearman=dataclasses.replace(r.pruning.spearman, rho=rho, p_value=p_value))
    spread = dataclasses.replace(r.spread, base=prune_result.Accuracy(0.9, 0.01))
    return dataclasses.replace(r, pruning=pruned, spread=spread,
                               sampling=prune_result.SamplingVerdict(verdict, list(reasons)))


# ----- the spec ---------------------------------------------------------------------
@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_spec_files_load_and_round_trip(path):
    spec = load_oneshot_spec(path)
    assert OneShotSpec.from_dict(tomllib.loads(spec.to_toml())) == spec


def test_prune_default_spec_is_the_shipped_toml(tmp_path, monkeypatch):
    shipped = load_oneshot_spec(ROOT / "models/omniglot_oneshot.toml")
    embedded = load_oneshot_spec()
    assert embedded == shipped and embedded.to_toml() == shipped.to_toml()
    assert embedded.data_path() == shipped.data_path()  # the relative data_dir resolves to the same folder
    # the command without a spec file runs on it (the pipeline itself replaced, not run)
    import bayes_attn.oneshot._pipeline as oneshot_pipeline
    from bayes_attn import cli

    seen = {}

    def fake_run_oneshot(spec, out, **kwargs):
        seen["spec"] = spec
        return fake_result()

    monkeypatch.setattr(oneshot_pipeline, "run_oneshot", fake_run_oneshot)
    assert cli.main(["prune", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    assert seen["spec"] == shipped and seen["spec"].to_toml() == shipped.to_toml()


def test_default_spec_trains_as_the_validation_alphabet_chose():
    """The default spec trains exactly as the variant the recorded choice names (``inference/results/fig3/
    choices.json``, made by ``inference/fig3_choices.py`` on validation episodes only): of the variants whose best
    validation accuracy is within one binomial standard error of the highest (differences below it are noise),
    the one with the fewest changes, then the highest. The two cannot drift apart unnoticed. Variants that change
    the head count are not candidates: the default keeps the paper's 2 x 4 heads."""
    choices = json.loads((ROOT / "inference/results/fig3/choices.json").read_text())
    candidates = {k: v for k, v in choices.items() if "model.heads" not in v["changes"]}
    top = max(candidates.values(), key=lambda v: v["best_validation"])
    level = top["best_validation"] - top["best_validation_se"]
    best = min((k for k, v in candidates.items() if v["best_validation"] >= level),
               key=lambda k: (len(candidates[k]["changes"]), -candidates[k]["best_validation"]))
    assert best == "rotations" and choices[best]["changes"] == {"task.rotations": True}
    default = load_oneshot_spec()
    assert default.training_hash() == choices[best]["training_hash"]
    assert default.task.rotations and default.training.patience == 16
    plain = load_oneshot_spec(ROOT / "models/omniglot_oneshot_plain.toml")
    assert not plain.task.rotations and plain.training.patience is None


def test_default_spec_round_trips_and_hash_ignores_evaluation_settings():
    spec = OneShotSpec()
    assert OneShotSpec.from_dict(tomllib.loads(spec.to_toml())) == spec
    assert set(spec.task.split) == {"gd_train", "validation", "test"} and spec.task.theory_part == "gd_train"
    other = OneShotSpec(task=TaskSpec(n_test=2000, data_dir="elsewhere"))
    assert other.training_hash() == spec.training_hash()
    assert OneShotSpec(training=TrainConfig(epochs=3)).training_hash() != spec.training_hash()


@pytest.mark.parametrize("path", [p for p in SPECS if "omniglot" in p.stem], ids=lambda p: p.stem)
def test_data_check_resolves_the_spec_files_relative_data_dir(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the spec's data_dir is relative to its file, not to the working folder
    spec = load_oneshot_spec(path)
    oneshot._data.check_data(spec)
    with pytest.raises(ValueError, match="data_dir: the folder .* does not exist"):
        oneshot._data.check_data(spec, tmp_path / "missing")


@pytest.mark.parametrize("table, match", [
    ({"model": {"width": "big"}}, "model.width must be an integer"),
    ({"task": {"rotations": 1}}, "task.rotations must be true or false"),
    ({"task": {"mirrors": "yes"}}, "task.mirrors must be true or false"),
    ({"task": {"within_alphabet": 1}}, "task.within_alphabet must be true or false"),
    ({"task": {"channels": 1.5}}, "task.channels must be an integer"),
    ({"theory": {"temperatures": [0.1, "hot"]}}, r"theory.temperatures\[1\] must be a number"),
    ({"training": {"lr": "fast"}}, "training.lr must be a number"),
    ({"sampler": {"num_chains": 0}}, "num_chains"),
    ({"task": {"split": {"gd_train": ["Greek"]}}}, "task.split must be a table with the parts"),
    ({"task": {"kind": "cifar"}}, "task.kind"),
    ({"theory": {"sample_widths": [5]}}, "theory.sample_widths must be among"),
    ({"model": {"depth": 2}}, r"\[model\] has unknown keys"),
    ({"name": "../x"}, "name must be"),
    ({"extra": {}}, "unknown keys"),
])
def test_spec_errors_name_the_field(table, match):
    with pytest.raises(ValueError, match=match):
        OneShotSpec.from_dict(table)


def test_dataclass_checks_apply_without_toml():
    with pytest.raises(ValueError, match="task.n_test must be even"):
        TaskSpec(n_test=1001)
    with pytest.raises(ValueError, match="disjoint"):
        TaskSpec(split={"gd_train": ("Greek",), "theory_train": ("Greek",), "validation": ("Latin",),
                        "test": ("Korean",)})
    with pytest.raises(ValueError, match="theory.temperatures repeats"):
        TheorySpec(temperatures=(0.1, 0.1))
    with pytest.raises(ValueError, match="heads"):
        ModelSpec(heads=())
    with pytest.raises(ValueError, match="not out of distribution"):
        TaskSpec(kind="digits", ood=("digits",))


# ----- end to end on the real Omniglot files ------------------------------------------------
TINY = OneShotSpec(
    name="tiny",
    task=TaskSpec(data_dir=str(DATA), rotations=True, mirrors=True, shift=2, n_gd_train=200, n_theory_train=40,
                  n_theory_draws=3, n_validation=40, n_test=60, n_ood=20, seed=seed_of(0)),
    model=ModelSpec(width=8, d_qk=4, heads=(2, 2), qk_scale=0.5),
    training=TrainConfig(lr=1e-3, batch=50, epochs=1, seed=seed_of(0)),
    theory=TheorySpec(widths=(10,), temperatures=(0.1, 1.0), sample_widths=(10,), score_width=10,
                      score_temperature=1.0),
    sampler=SamplerSettings(num_chains=2, num_warmup=10, num_samples=10, max_tree_depth=4, seed=seed_of(0)),
    pruning=PruningSpec(n_random=2, n_bootstrap=20, spread_bootstrap=5, seed=seed_of(0)),
)


def needs_omniglot():
    assert (DATA / "images_background_small1.zip").is_file(), f"the shipped Omniglot subset is missing from {DATA}"


def test_prune_refuses_guided_samples_too_big_before_training(tmp_path, monkeypatch):
    """An explicit ``guided_samples`` no memory can hold is refused before the data are read or a model trained,
    not left for ``auto``'s ``wishart`` at the end (issue 53)."""
    from conftest import forbid_calls

    from bayes_attn.oneshot import _data as data
    from bayes_attn.oneshot import _pipeline as pipeline

    needs_omniglot()
    forbid_calls(monkeypatch, (data, "datasets"), (pipeline, "train_model"))
    spec = dataclasses.replace(TINY, sampler=TINY.sampler.replace(name="auto", guided_samples=100_000_000_000))
    with pytest.raises(ValueError, match=r"guided_samples=100000000000 cannot be honoured"):
        oneshot.run_oneshot(spec, tmp_path / "out", progress_bar=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # trains TINY's model (one epoch)
def test_prune_keeps_the_trained_model_when_it_fails_later(tmp_path, monkeypatch, capsys):
    """A failure after training (here the theory scan) keeps the trained model in the output folder, parked and
    claimed by its manifest; the command exits 1 (failed after computing, not 2: bad input) with one line naming
    where the model is; a rerun reuses the model instead of training again (issues 53, 59)."""
    from conftest import forbid_calls, one_line

    from bayes_attn import cli
    from bayes_attn.oneshot import _pipeline as pipeline

    needs_omniglot()
    spec_path, out = tmp_path / "tiny.toml", tmp_path / "out"
    spec_path.write_text(TINY.to_toml())

    def no_rho(*a, **k):
        raise ValueError("every pair of scores and drops has a constant side: no ρ")

    monkeypatch.setattr(pipeline, "temperature_scan", no_rho)
    assert cli.main(["prune", str(spec_path), "--out", str(out), "--no-progress"]) == cli.EXIT_FAILED == 1
    line = one_line(capsys.readouterr().err)
    assert "no ρ" in line and f"the trained model is kept in {str(out / 'model.parked.npz')!r}" in line
    assert (out / "model.parked.npz").is_file() and (out / "model.parked.json").is_file()
    assert not (out / "model.npz").exists()  # the folder's model is the model of its results: none yet
    assert {"model.parked.npz", "model.parked.json"} <= set(json.loads((out / "manifest.json").read_text())["files"])
    forbid_calls(monkeypatch, (training, "train"))

    def out_of_memory(*a, **k):  # not a ValueError: what XLA raises, many lines long
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 9.3GiB.\n  buffer 0: ...")

    monkeypatch.setattr(pipeline, "temperature_scan", out_of_memory)
    assert cli.main(["prune", str(spec_path), "--out", str(out), "--no-progress"]) == 1  # reused, not trained
    line = one_line(capsys.readouterr().err)
    assert "RuntimeError: RESOURCE_EXHAUSTED" in line and "buffer 0" not in line, line
    assert f"the trained model is kept in {str(out / 'model.parked.npz')!r}" in line, line
    assert (out / "model.parked.npz").is_file()


SEVEN = dataclasses.replace(TINY, training=dataclasses.replace(TINY.training, seed=seed_of(7)))
"""TINY retrained: another ``[training] seed``."""


def fake_after_training(monkeypatch, fail: list) -> None:
    """Replace prune's stages after training (scan, sampling, pruning, files): they write ``report.md`` naming the
    training seed and return :func:`fake_result`, or raise ``fail[0]`` when ``fail`` holds an error."""
    from bayes_attn.oneshot import _pipeline as pipeline

    def after(spec, out, *args):
        if fail:
            raise fail[0]
        (out / "report.md").write_text(f"training seed {spec.training.seed}\n")
        return fake_result()

    monkeypatch.setattr(pipeline, "_after_training", after)


@pytest.mark.slow  # trains TINY's model twice (one epoch each)
def test_a_failed_retrain_leaves_one_consistent_folder_and_its_rerun_reuses_it(tmp_path, monkeypatch, capsys,
                                                                               caplog):
    """Issue 59: a retrain (another ``[training] seed``) that fails after training leaves the folder's model,
    results and ``spec.toml`` as they were, with the new model parked beside them (``model.parked.npz``, claimed
    by the manifest); the rerun reuses the parked model and its commit makes it the folder's one model."""
    import logging

    from conftest import forbid_calls, one_line

    from bayes_attn import cli

    needs_omniglot()
    out, fail, spec_path = tmp_path / "out", [], tmp_path / "seven.toml"
    fake_after_training(monkeypatch, fail)
    oneshot.run_oneshot(TINY, out, progress_bar=False)
    before = {n: (out / n).read_bytes() for n in ("model.npz", "model.json", "spec.toml", "report.md")}
    spec_path.write_text(SEVEN.to_toml())
    fail.append(ValueError("every pair of scores and drops has a constant side: no ρ"))
    assert cli.main(["prune", str(spec_path), "--out", str(out), "--no-progress"]) == cli.EXIT_FAILED
    assert {n: (out / n).read_bytes() for n in before} == before  # the seed-0 set, whole
    assert f"the trained model is kept in {str(out / 'model.parked.npz')!r}" in one_line(capsys.readouterr().err)
    assert json.loads((out / "model.parked.json").read_text())["training_hash"] == SEVEN.training_hash()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parked"] == {"model.parked.npz": "model.npz", "model.parked.json": "model.json"}
    assert {*before, *manifest["parked"]} <= set(manifest["files"])
    parked = (out / "model.parked.npz").read_bytes()
    fail.clear()
    forbid_calls(monkeypatch, (training, "train"))  # the rerun reuses the new training
    caplog.set_level(logging.INFO, logger="bayes_attn")
    oneshot.run_oneshot(SEVEN, out, progress_bar=True)
    assert f"reusing {out / 'model.parked.npz'} (same training settings)" in caplog.messages
    assert (out / "model.npz").read_bytes() == parked and not list(out.glob("model.parked.*"))
    assert checkpoints.load_model(out / "model.npz").training_hash == SEVEN.training_hash()
    assert json.loads((out / "model.json").read_text())["training_hash"] == SEVEN.training_hash()
    assert load_oneshot_spec(out / "spec.toml") == SEVEN
    assert (out / "report.md").read_text() == f"training seed {SEVEN.training.seed}\n"
    manifest = json.loads((out / "manifest.json").read_text())
    assert "parked" not in manifest and not {n for n in manifest["files"] if "parked" in n}


@pytest.mark.slow  # trains TINY's model three times (one epoch each)
def test_reuse_checks_the_settings_stored_in_model_npz(tmp_path, tiny_sets, caplog):
    """Issue 59: a ``model.npz`` of another run (seed 7) under a seed-0 ``model.json`` is not reused but retrained,
    with a warning naming the file and the setting; a file written before ``model.npz`` held the settings' hash
    (its configs only) is still reused when they match."""
    import logging

    sets, ev = tiny_sets
    ours, other = tmp_path / "ours", tmp_path / "other"
    for spec, folder in ((TINY, ours), (SEVEN, other)):
        folder.mkdir()
        oneshot.train_model(spec, folder, sets=sets, evaluation=ev, progress_bar=False)
    (ours / "model.npz").write_bytes((other / "model.npz").read_bytes())
    caplog.set_level(logging.WARNING, logger="bayes_attn")
    assert not oneshot.train_model(TINY, ours, sets=sets, evaluation=ev, progress_bar=False).metrics.reused
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert line.startswith(f"not reusing {ours / 'model.npz'}: ") and "training.seed" in line, line
    assert checkpoints.load_model(ours / "model.npz").train_config == TINY.training
    saved = checkpoints.load_model(ours / "model.npz")  # as written before: no training_hash in the file
    checkpoints.save_model(ours / "model.npz", saved.params, saved.config, saved.train_config, saved.history)
    assert checkpoints.load_model(ours / "model.npz").training_hash is None
    again = oneshot.train_model(TINY, ours, sets=sets, evaluation=ev, progress_bar=False)
    assert again.metrics.reused and np.array_equal(again.params.a, saved.params.a)


@pytest.mark.slow  # trains TINY's model twice (one epoch each)
def test_a_corrupt_model_is_retrained_saying_why(tmp_path, tiny_sets, caplog):
    """Issue 59: a truncated ``model.npz`` is retrained with one warning naming the file and why it was not reused."""
    import logging

    sets, ev = tiny_sets
    oneshot.train_model(TINY, tmp_path, sets=sets, evaluation=ev, progress_bar=False)
    npz = tmp_path / "model.npz"
    npz.write_bytes(npz.read_bytes()[: npz.stat().st_size // 2])
    caplog.set_level(logging.WARNING, logger="bayes_attn")
    assert not oneshot.train_model(TINY, tmp_path, sets=sets, evaluation=ev, progress_bar=False).metrics.reused
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert line.startswith(f"not reusing {npz}: not a readable model file") and "\n" not in line, line
    assert checkpoints.load_model(npz).training_hash == TINY.training_hash()  # trained and written anew


@pytest.mark.slow  # trains TINY's model once (one epoch)
def test_reusing_names_the_model_in_the_output_folder(tmp_path, monkeypatch, caplog):
    """Issue 59: the "reusing …" line names the model in the output folder, not the hidden staging folder."""
    import logging

    needs_omniglot()
    out = tmp_path / "out"
    fake_after_training(monkeypatch, [])
    oneshot.run_oneshot(TINY, out, progress_bar=False)
    caplog.set_level(logging.INFO, logger="bayes_attn")
    assert oneshot.run_oneshot(TINY, out, progress_bar=True).model is not None
    assert f"reusing {out / 'model.npz'} (same training settings)" in caplog.messages
    assert not [m for m in caplog.messages if outputs.STAGING_PREFIX in m]


@pytest.mark.slow  # trains TINY's model once (one epoch)
def test_a_full_disk_after_training_says_where_the_model_is_kept(tmp_path, monkeypatch, capsys):
    """Issue 59: a full disk after training exits 1 (issue 74: a failure after computing, not bad input) with one
    line saying where the trained model is kept."""
    import errno

    from conftest import one_line

    from bayes_attn import cli

    needs_omniglot()
    out, spec_path = tmp_path / "out", tmp_path / "tiny.toml"
    spec_path.write_text(TINY.to_toml())
    fake_after_training(monkeypatch, [OSError(errno.ENOSPC, "No space left on device")])
    assert cli.main(["prune", str(spec_path), "--out", str(out), "--no-progress"]) == cli.EXIT_FAILED
    line = one_line(capsys.readouterr().err)
    assert "no space left" in line and f"the trained model is kept in {str(out / 'model.parked.npz')!r}" in line
    assert checkpoints.load_model(out / "model.parked.npz").training_hash == TINY.training_hash()


def test_only_the_full_zip_gets_a_hint_to_set_task_files(tmp_path):
    """A folder with Omniglot's full ``images_background.zip`` but not the small zips the spec reads is refused
    with the hint to set ``task.files`` (issue 53)."""
    from bayes_attn.oneshot import _data as data

    (tmp_path / "images_background.zip").write_bytes(b"")
    spec = dataclasses.replace(TINY, task=dataclasses.replace(TINY.task, data_dir=str(tmp_path)))
    with pytest.raises(ValueError, match=r"lacks images_background_small1\.zip.*set task\.files = "
                                         r"\['images_background\.zip'\]") as err:
        data.check_data(spec)
    assert "\n" not in str(err.value)


def test_too_few_classes_names_the_split(tiny_sets):
    """An episode set drawn from one class names its split and alphabets, not only "imageset" (issue 53)."""
    sets, _ = tiny_sets
    one = sets._replace(validation=sets.validation.subset([0]))
    with pytest.raises(ValueError, match=r"'validation' episodes \(alphabets \[.+\]; see task\.split\): imageset "
                                         r"must hold at least 2 classes, got 1"):
        oneshot.evaluation_episodes(TINY, one)


def test_prune_prints_rho_rounded(tmp_path, monkeypatch, capsys):
    """The command prints ρ and its p-value rounded, not with every digit of a float (issue 53), and says when ρ is
    undefined."""
    from bayes_attn import cli
    from bayes_attn.oneshot import _pipeline as pipeline

    monkeypatch.setattr(pipeline, "run_oneshot", lambda *a, **k: fake_result(0.123456789012, 0.0123456789))
    assert cli.main(["prune", "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "rho = 0.123, p = 0.012" in out and "0.1234" not in out, out
    # all heads' drops equal (a tiny model at seed offset 3): ρ is undefined, said so, and the command ends normally
    monkeypatch.setattr(pipeline, "run_oneshot", lambda *a, **k: fake_result(None, None))
    assert cli.main(["prune", "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    assert "Spearman rho undefined (constant input)" in capsys.readouterr().out


def test_prune_no_progress_keeps_the_result_on_stdout_and_stderr_quiet(tmp_path, monkeypatch, capsys):
    """--no-progress leaves stderr to warnings and errors; the result (base accuracy, ρ) stays on stdout, as
    ``sample``'s summary does, and the option's help says so (issue 53 row 10)."""
    import logging

    from bayes_attn import cli
    from bayes_attn.oneshot import _pipeline as pipeline

    def fake(*a, **k):
        logging.getLogger("bayes_attn.oneshot").info("epoch 1: val accuracy 0.5")  # a progress line
        return fake_result()

    monkeypatch.setattr(pipeline, "run_oneshot", fake)
    assert cli.main(["prune", "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("base accuracy 0.900 ± 0.010") and err == ""
    assert cli.main(["prune", "--out", str(tmp_path / "o")]) == 0
    assert "epoch 1" in capsys.readouterr().err
    commands = cli.parser()._subparsers._group_actions[0].choices
    helps = [a.help for name in ("prune", "sample") for a in commands[name]._actions
             if "--no-progress" in a.option_strings]
    assert helps[0] == helps[1] and "result still goes to stdout" in helps[0]  # the same help as the other commands


def test_prune_verdict_from_rhat_and_divergences(tmp_path, capsys, monkeypatch):
    import xarray as xr

    from bayes_attn import cli
    from bayes_attn._internal import outputs
    from bayes_attn.oneshot import _pipeline as pipeline

    ds = xr.Dataset({"rhat_U": ("sample_width", [2.49, 1.0]), "divergences": ("sample_width", [9, 0])},
                    coords={"sample_width": [10, 100]})
    outputs.save(ds, tmp_path / "oneshot.nc")
    v = pipeline.sampling_verdict(tmp_path / "oneshot.nc")
    assert v.verdict == "inconclusive" and v.reasons[0].startswith("N=10 (sampler, on U): ")
    assert "R-hat 2.49" in v.reasons[0] and "9 divergent" in v.reasons[0]
    monkeypatch.setattr(pipeline, "run_oneshot", lambda *a, **k: fake_result(verdict=v.verdict, reasons=v.reasons))
    assert cli.main(["prune", "--out", str(tmp_path / "p")]) == cli.EXIT_DIAGNOSTICS
    captured = capsys.readouterr()
    assert "WARNING: inconclusive" in captured.err and captured.out.count("wrote") == 1



def test_prune_labels_the_samplers_and_the_comparisons_r_hat(tmp_path, capsys, monkeypatch):
    """Two R-hats at one width, the sampler's on ``U`` and the comparison's on every observable, each named as
    such in the inconclusive warning (not "N=10: max R-hat …" twice)."""
    from bayes_attn import cli
    from bayes_attn.oneshot import _pipeline as pipeline

    r = prune_result.load_pruning(SHIPPED_RUN / "compared" / "pruning.json")
    N = min(r.comparisons)
    c = r.comparisons[N]
    head = dataclasses.replace(c.theories[c.headline], verdict="inconclusive", reasons=["max R-hat 1.89 > 1.01"])
    comparisons = {**r.comparisons, N: dataclasses.replace(c, theories={**c.theories, c.headline: head})}
    r = dataclasses.replace(r, comparisons=comparisons, sampling=prune_result.SamplingVerdict(
        "inconclusive", [f"N={N} (sampler, on U): max R-hat 1.33 > 1.01"]))
    monkeypatch.setattr(pipeline, "run_oneshot", lambda *a, **k: r)
    assert cli.main(["prune", "--out", str(tmp_path / "p")]) == cli.EXIT_DIAGNOSTICS
    err = capsys.readouterr().err
    assert f"N={N} (sampler, on U): max R-hat 1.33" in err, err
    assert f"N={N} (comparison, on every observable): max R-hat 1.89" in err, err


SOLVES: list[tuple] = []
"""``(widths, temperature, digest of x)`` of every ``solve_theory`` call of the ``tiny_run`` fixture's prune."""


def _digest(x) -> str:
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(x, dtype=np.float64)).hexdigest()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A tiny ``prune`` (module scope), every theory solve it makes recorded in :data:`SOLVES`."""
    import sys

    from bayes_attn.theory import solve_theory

    def counted(net, x, y, **kw):
        SOLVES.append((tuple(net.widths), kw["temperature"], _digest(x)))
        return solve_theory(net, x, y, **kw)

    needs_omniglot()
    out = tmp_path_factory.mktemp("fig3")
    with pytest.MonkeyPatch.context() as m:
        for name, module in list(sys.modules.items()):
            if name.startswith("bayes_attn") and getattr(module, "solve_theory", None) is solve_theory:
                m.setattr(module, "solve_theory", counted)
        return out, oneshot.run_oneshot(TINY, out, progress_bar=False)


@pytest.mark.slow
def test_prune_solves_the_theory_once_per_width_and_temperature(tiny_run, tiny_sets):
    """The scan's theory is the one compared with the samples at each sampled width, never solved again (issue
    61): on the theory-training episodes each scanned ``(width, temperature)`` is solved once; every other solve
    is one of the spread's further draws of the episodes, each on its own."""
    _, ev = tiny_sets
    th, train = TINY.theory, _digest(ev.theory_train.x)
    on_train = sorted((w[0], t) for w, t, d in SOLVES if d == train)
    assert on_train == sorted((N, T) for N in th.widths for T in th.temperatures), SOLVES
    others = [d for _, _, d in SOLVES if d != train]
    assert len(others) == len(set(others)) == TINY.task.n_theory_draws - 1, SOLVES  # draw 0 is the scan's


@pytest.fixture(scope="module")
def tiny_sets():
    needs_omniglot()
    sets = oneshot.datasets(TINY)
    return sets, oneshot.evaluation_episodes(TINY, sets)


@pytest.mark.slow
def test_theory_episodes_come_from_training_classes_and_test_classes_are_disjoint(tiny_sets):
    sets, ev = tiny_sets
    parts = (sets.gd_train, sets.validation, sets.test)
    names = [{re.split("[@~]", n)[0] for n in s.class_names} for s in parts]  # source characters
    assert all(not (a & b) for i, a in enumerate(names) for b in names[i + 1:])
    assert set(sets.validation.groups) == {"Tagalog"} and "Tagalog" not in set(sets.gd_train.groups)
    assert set(sets.test.groups) == {"Balinese", "Early_Aramaic"}
    # every source character of gradient-descent training in all 8 symmetries of the square, each its own class;
    # validation and test classes in none but the identity
    assert sets.gd_train.n_classes == 8 * len(names[0]) == len(set(sets.gd_train.class_names))
    assert not any(c in n for c in "@~" for s in (sets.validation, sets.test) for n in s.class_names)
    # the theory's P episodes: unrotated, unmirrored drawings of the gradient-descent classes, every draw
    assert set(sets.theory_train.class_names) == {n for n in sets.gd_train.class_names if not set("@~") & set(n)}
    draws = oneshot.theory_draws(TINY, sets, ev.theory_train)
    assert len(draws) == 3 and draws[0] is ev.theory_train
    assert not np.array_equal(draws[1].episodes.indices, draws[0].episodes.indices)
    for d in draws:
        used = {d.episodes.class_names[c] for c in np.unique(d.episodes.classes)}
        assert used <= names[0] and not used & (names[1] | names[2])
        assert np.array_equal(d.episodes.images, sets.theory_train.images[d.episodes.indices])  # unshifted
    assert ev.theory_train.x.shape == (40, 48, 64) and set(ev.ood) == {"all_runs", "digits"}


@pytest.mark.slow
def test_within_alphabet_training_episodes_pair_classes_of_one_alphabet(tiny_sets):
    """``task.within_alphabet``: both classes of every gradient-descent episode from one alphabet; without it
    some episodes cross alphabets (of 200, all within one by chance with probability ~0.2^200)."""
    sets, _ = tiny_sets
    groups = np.asarray(sets.gd_train.groups)
    within = dataclasses.replace(TINY, task=dataclasses.replace(TINY.task, within_alphabet=True))
    for spec, expect in ((within, True), (TINY, False)):
        classes = oneshot.gd_episodes(spec, sets, 1).episodes.classes
        same = groups[classes[:, 0]] == groups[classes[:, 1]]
        assert bool(same.all()) is expect and (groups[classes[:, 2]] == groups[classes[:, 0]]).any()
    assert within.training_hash() != TINY.training_hash()
    assert "within_alphabet" not in TINY.training_settings()["task"]  # older settings keep their hash


@pytest.mark.slow
def test_prune_writes_every_file_with_the_right_keys(tiny_run):
    out, result = tiny_run
    for f in ("model.npz", "model.json", "spec.toml", "pruning.json", "oneshot.nc", "report.md",
              "accuracy_vs_width.png", "score_vs_drop.png", "cumulative_pruning.png", "order_parameters.png",
              "path_kernels.png", "finite_size.png"):
        assert (out / f).is_file(), f
    saved = json.loads((out / "pruning.json").read_text())
    assert {"base_accuracy", "head_scores", "accuracy_drops", "spearman", "base_se", "drop_se", "cumulative",
            "nn_baseline", "ood", "theory_accuracy", "gp_accuracy", "spearman_draws", "spearman_median",
            "spearman_q05", "spearman_q95", "theory_ablation", "deviations"} <= set(saved)
    assert len(saved["spearman_draws"]) + saved["n_constant"] == 3 * 5
    assert saved["spearman_median"] == pytest.approx(float(np.median(saved["spearman_draws"])))
    assert saved["spearman_q05"] <= saved["spearman_median"] <= saved["spearman_q95"]
    assert set(saved["ood"]) == {"all_runs", "digits"}
    assert [len(s) for s in saved["head_scores"]] == [2, 2]
    assert set(saved["cumulative"]) == {"ascending", "descending", "random"}
    assert load_oneshot_spec(out / "spec.toml") == TINY
    # the file is the returned value, written by its one serialiser and read back by its one loader
    assert saved.pop(prune_result.SHA256_KEY) == prune_result.content_sha256(saved)  # the file carries its hash
    assert prune_result.load_pruning(out) == result and saved == json.loads(json.dumps(prune_result.to_json(result)))
    # at every sampled width, the corrected theory against the exact posterior, the leading order beside it
    assert list(result.comparisons) == list(TINY.theory.sample_widths)
    for N, c in result.comparisons.items():
        missing = any(p.startswith(("the correction was not computed", "the correction was skipped"))
                      for p in c.correction_problems)
        assert list(c.theories) == (["none"] if missing else ["laplace", "none"]), (c.theories, c.correction_problems)
        assert c.verdict in ("agree", "disagree", "inconclusive")
        names = [k.name for k in c.theories[c.headline].checks]
        assert names[0] == "U (relative Frobenius)" and any("mean" in n for n in names), names
        assert saved["comparisons"][str(N)]["summary"] == c.summary() in (out / "report.md").read_text()
    assert saved["headline_verdict"] == result.verdict in ("agree", "disagree", "inconclusive")
    per = ", ".join(f"N = {N}: {c.verdict}" for N, c in result.comparisons.items())
    assert f"Verdict of the theory against the samples: **{result.verdict}** ({per};" in (out / "report.md").read_text()
    # ρ of every predictor of the drops, with the same spread as the leading-order score's
    o, lead = result.spread.others, result.spread.rho
    assert o.posterior is not None and o.posterior.n_draws == 1
    assert o.posterior_temperature == result.comparisons[10].temperature
    for s in (o.corrected, o.ablation):
        assert s is not None and (s.n_draws, s.n_resamples) == (lead.n_draws, lead.n_resamples), s
    assert "Which predicts the single-head drops" in (out / "report.md").read_text()
    assert json.loads((out / "manifest.json").read_text())["verdict"] == result.verdict
    # the verdict of the sampling is in the returned result, the file and report.md alike
    assert saved["verdict"] == result.sampling.verdict in ("diagnostics passed", "inconclusive", "not sampled")
    assert f"Verdict of the sampling: **{saved['verdict']}**" in (out / "report.md").read_text()
    import xarray as xr

    with xr.open_dataset(out / "oneshot.nc") as ds:
        for v in ("accuracy_theory", "accuracy_gp", "accuracy_sampled", "accuracy_validation", "best_temperature",
                  "U_trained", "U_score", "U_sampled", "head_score", "accuracy_drop", "pruned_ascending", "check_gap",
                  "alternative_check_gap", "comparison_verdict"):
            assert v in ds, v
        c10 = result.comparisons[10]
        gaps = ds["check_gap"].sel(sample_width=10, check="U (relative Frobenius)")
        assert float(gaps) == c10.theories[c10.headline].checks[0].gap
        assert ds["accuracy_validation"].shape == (1, 2)
        assert float(ds.attrs["gd_accuracy"]) == pytest.approx(saved["base_accuracy"])


@pytest.mark.slow
def test_model_is_reused_only_with_the_same_settings(tiny_run, tiny_sets):
    out, _ = tiny_run
    sets, ev = tiny_sets
    again = oneshot.train_model(TINY, out, sets=sets, evaluation=ev, progress_bar=False)
    assert again.metrics.reused
    other = dataclasses.replace(TINY, training=TrainConfig(lr=1e-3, batch=50, epochs=1, seed=seed_of(1)))
    trained = oneshot.train_model(other, out / "other", sets=sets, evaluation=ev, progress_bar=False)
    assert trained.metrics.reused is False


@pytest.mark.slow
def test_trained_U_is_trained_order_parameters_and_network_forward_matches(tiny_run, tiny_sets):
    out, _ = tiny_run
    saved = checkpoints.load_model(out / "model.npz")
    import xarray as xr

    with xr.open_dataset(out / "oneshot.nc") as ds:
        U = ds["U_trained"].values
    np.testing.assert_allclose(U, model.trained_order_parameters(saved.params, saved.config).U, rtol=1e-6)
    np.testing.assert_allclose(head_scores(U, saved.config.heads)[0], json.loads((out / "pruning.json").read_text())
                               ["trained_head_scores"][0], rtol=1e-6)
    # the frozen model as a Network (readout "mean", W = K^T Q / sqrt(d_qk)) on real tokens
    x = tiny_sets[1].test.x[:12]
    net, weights = model.to_network(saved.params, saved.config)
    f_gd = model.predict(saved.params, x)
    for form in ("token", "path"):
        np.testing.assert_allclose(np.asarray(net.forward(weights, x, form=form)), f_gd, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_prune_command_holds_its_folder_and_reuses_the_model(tiny_run, capsys):
    from bayes_attn import cli
    from bayes_attn._internal import outputs

    out, result = tiny_run
    spec_path = out.parent / "tiny_cli.toml"
    spec_path.write_text(TINY.to_toml())
    with outputs.hold(out):
        assert cli.main(["prune", str(spec_path), "--out", str(out), "--no-progress"]) == cli.EXIT_USAGE
    assert "is in use by another run" in capsys.readouterr().err
    status = cli.main(["prune", str(spec_path), "--out", str(out), "--no-progress"])
    assert status == (cli.EXIT_DIAGNOSTICS if result.sampling.verdict == "inconclusive" else 0)
    assert "Spearman rho" in capsys.readouterr().out
    again = prune_result.load_pruning(out)
    assert again.model.reused and again.spread.base == result.spread.base
