"""Sweeps end to end (bayes_attn.sweep): the same sweep.nc on Dask, the sweep command's failed jobs, verdicts and
errors, its figure, the cluster section of a spec."""

import dataclasses
import json

import numpy as np
import pytest
import xarray as xr
from conftest import TINY, forbid_calls, one_line, spec_file

from bayes_attn import cli, experiment
from bayes_attn._internal import compile_cache
from bayes_attn.spec import spec_from_dict
from bayes_attn.sweep import _table as table
from bayes_attn.sweep._executors import DaskLocal, Job
from bayes_attn.verdict import Verdict


def _values(ds: xr.Dataset) -> xr.Dataset:
    """What must not depend on where the jobs ran (timings and settings text aside)."""
    return ds.drop_vars([v for v in ds.data_vars if v.endswith("seconds")]).drop_attrs()


@pytest.mark.slow
@pytest.mark.validate  # a local Dask cluster end to end
def test_dask_sweep_equals_in_process_sweep(tmp_path, tiny_sweep):
    spec, _, here = tiny_sweep
    # the workers load the programs this process compiled (the run's cache, tests/conftest.py): same values
    executor = DaskLocal(2, compilation_cache=compile_cache.cache_dir())
    there = table.sweep(spec, tmp_path / "there", executor=executor, progress_bar=False)  # spec: SWEEP_SETTINGS
    xr.testing.assert_identical(_values(there), _values(here))
    assert float(here["sample_seconds"].sel(sample_width=3)) > 0


def test_a_failing_job_is_reported_and_the_others_finish(tmp_path, capsys, monkeypatch):
    path = tmp_path / "tiny.toml"
    path.write_text(spec_from_dict(TINY).to_toml())
    real = table.run_job

    def flaky(job: Job):
        if job.name.startswith("theory-N30"):
            raise RuntimeError("solver exploded")
        return real(job)

    monkeypatch.setattr(table, "run_job", flaky)
    status = cli.main(["sweep", str(path), "--out", str(tmp_path / "sw"), "--sample-widths", "--no-progress"])
    assert status == cli.EXIT_FAILED_JOBS
    assert "theory-N30-T0.1" in capsys.readouterr().err
    ds = xr.open_dataset(tmp_path / "sw" / "sweep.nc")
    failed = json.loads(ds.attrs["failed_jobs"])
    assert [f["job"] for f in failed] == ["theory-N30-T0.1"] and "solver exploded" in failed[0]["error"]
    assert list(ds["width"].values) == [3]  # the finished width is there
    ds.close()
    monkeypatch.setattr(table, "run_job", real)
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "sw"), "--sample-widths", "--no-progress"]) == 0


@pytest.mark.slow
def test_sweep_on_unconverged_chains_is_inconclusive_and_exits_3(tmp_path, capsys):
    out = tmp_path / "sw"
    status = cli.main(["sweep", str(spec_file(tmp_path)), "--out", str(out), "--widths", "3", "--sample-widths", "3",
                       "--samples", "8", "--warmup", "4", "--chains", "2", "--seed", "2", "--no-progress"])
    err = capsys.readouterr().err
    assert status == cli.EXIT_DIAGNOSTICS, err
    assert "WARNING: inconclusive" in err and "N=3" in err
    # issue 71 item 1: the stored verdict keeps its reasons and which side failed, so the advice fits the cause
    assert "ESS" in err and "sample longer" in err and "check the spec's scales" not in err, err
    ds = xr.open_dataset(out / "sweep.nc")
    stored = Verdict.from_json(str(ds["verdict_record"].sel(sample_width=3).values))
    assert stored.value == "inconclusive" and stored.sampler_failed and not stored.theory_failed and stored.reasons
    assert ds.attrs["verdict"] == "inconclusive" and str(ds["verdict"].sel(sample_width=3).values) == "inconclusive"
    assert np.isnan(float(ds["accuracy_sampled_se"].sel(sample_width=3)))  # 2 chains: unavailable, not 0
    ds.close()
    assert json.loads((out / "manifest.json").read_text())["verdict"] == "inconclusive"


def test_inconclusive_points_are_ringed_in_the_sweep_figure(tmp_path):
    from bayes_attn.runs import _figures as figures

    ds = xr.Dataset(
        {"accuracy_theory": ("width", [0.8, 0.9]), "accuracy_sampled": ("sample_width", [0.7, 0.85]),
         "accuracy_sampled_se": ("sample_width", [np.nan, 0.01]),
         "verdict": ("sample_width", ["inconclusive", "agree"]),
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


def test_cluster_section_round_trips_and_builds_a_jobqueue_executor(tmp_path):
    import tomllib

    from bayes_attn.sweep._executors import DaskJobqueue, executor_from_options

    data = TINY | {"cluster": {"class": "SLURMCluster", "workers": 3, "queue": "normal", "cores": 1,
                                "memory": "4GB", "walltime": "01:00:00", "env": {"JAX_PLATFORMS": "cpu"}}}
    spec = spec_from_dict(data)
    assert spec_from_dict(tomllib.loads(spec.to_toml())) == spec
    ex = executor_from_options("dask", cluster=spec.cluster)
    assert isinstance(ex, DaskJobqueue) and ex.workers == 3 and ex.cls == "SLURMCluster"
    script = ex.make_cluster().job_script()
    assert "#SBATCH -p normal" in script and "export JAX_PLATFORMS=cpu" in script
    with pytest.raises(ValueError, match="cluster"):
        spec_from_dict(TINY | {"cluster": 5})


def test_empty_width_list_is_a_usage_error(tmp_path, capsys, monkeypatch):
    path = spec_file(tmp_path, TINY | {"compare": TINY["compare"] | {"widths": []}})
    forbid_calls(monkeypatch, (experiment, "solve_theory"))
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "s"), "--no-progress"]) == cli.EXIT_USAGE
    assert "widths must hold at least one width" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())


@pytest.mark.parametrize("argv, match", [
    (["--sampler", "auto", "--guided-samples", str(10**11)], "guided_samples=100000000000 cannot be honoured"),
    (["--sample-widths", "3", str(10**8), "--sampler", "full"], "sampling with 'full'"),
])
def test_sweep_refuses_what_sampling_would_refuse_before_the_first_job(tmp_path, capsys, monkeypatch, argv, match):
    """A setting ``run`` and ``sample`` refuse (guided draws or a width too big for any memory) is refused by
    ``sweep`` with exit 2 before any job runs, not by its sampling job after the theory's (issue 59)."""
    forbid_calls(monkeypatch, (table, "run_job"), (experiment, "solve_theory"))
    out = tmp_path / "sw"
    assert cli.main(["sweep", str(spec_file(tmp_path)), "--out", str(out), *argv, "--no-progress"]) == cli.EXIT_USAGE
    line = one_line(capsys.readouterr().err)
    assert match in line and "needs about" in line and "GiB" in line, line
    assert not out.exists()


def test_sweep_library_refuses_before_the_first_job_on_any_executor(tmp_path, monkeypatch):
    """The library's ``sweep`` makes the same refusals before submitting jobs, a Dask executor's included (no
    cluster is started), and refuses a temperature its sampler's dtype cannot hold."""
    forbid_calls(monkeypatch, (table, "run_jobs"))
    spec = spec_from_dict(TINY)
    with pytest.raises(ValueError, match="guided_samples=100000000000 cannot be honoured"):
        auto = dataclasses.replace(spec, sampler=spec.sampler.replace(name="auto", guided_samples=10**11))
        table.sweep(auto, tmp_path / "a", executor=DaskLocal(1), progress_bar=False)
    with pytest.raises(ValueError, match="temperature 1e\\+30 is out of range for dtype float32"):
        f32 = dataclasses.replace(spec, sampler=spec.sampler.replace(dtype="float32"))
        table.sweep(f32, tmp_path / "b", temperatures=[0.1, 1e30], progress_bar=False)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
