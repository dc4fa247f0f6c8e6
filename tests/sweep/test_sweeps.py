"""Sweeps as job records: the same sweep.nc in this process and on Dask; temperature grids; failed jobs."""

import json

import numpy as np
import pytest
import xarray as xr

import bayes_attn as ba
from bayes_attn import cli, compile_cache
from bayes_attn.spec import spec_from_dict
from bayes_attn.sweep import table
from bayes_attn.sweep.executors import DaskLocal, Job
from conftest import SWEEP_SETTINGS, TINY, forbid_calls, one_line, spec_file

SMALL = TINY | {"compare": TINY["compare"] | {"widths": [3, 30], "sample_widths": [3]}}


def _values(ds: xr.Dataset) -> xr.Dataset:
    """What must not depend on where the jobs ran (timings and settings text aside)."""
    return ds.drop_vars([v for v in ds.data_vars if v.endswith("seconds")]).drop_attrs()


@pytest.mark.slow
def test_dask_sweep_equals_in_process_sweep(tmp_path, tiny_sweep):
    spec, _, here = tiny_sweep
    # the workers load the programs this process compiled (the run's cache, tests/conftest.py): same values
    executor = DaskLocal(2, compilation_cache=compile_cache.cache_dir())
    there = table.sweep(spec, tmp_path / "there", executor=executor, progress_bar=False, **SWEEP_SETTINGS)
    xr.testing.assert_identical(_values(there), _values(here))
    assert float(here["sample_seconds"].sel(sample_width=3)) > 0


@pytest.mark.slow
def test_temperature_grid_picks_the_best_on_validation_not_test(tmp_path):
    spec = spec_from_dict(SMALL)
    temps = [0.01, 0.3, 3.0]
    ds = table.sweep(spec, tmp_path / "grid", temperatures=temps, sample_widths=[], progress_bar=False)
    assert list(ds["temperature"].values) == temps
    for N in (3, 30):
        val = ds["accuracy_validation_theory"].sel(width=N).values
        best = float(ds["best_temperature_theory"].sel(width=N))
        assert best == temps[int(np.argmax(val))]  # argmax of validation accuracy, first among ties
        assert float(ds["accuracy_theory_at_best"].sel(width=N)) == float(ds["accuracy_theory"].sel(width=N, temperature=best))
    assert float(ds["best_temperature_gp"]) == temps[int(np.argmax(ds["accuracy_gp_validation"].values))]
    assert (tmp_path / "grid" / "accuracy_vs_width.png").exists()
    with pytest.raises(ValueError, match="sample_widths must be among widths"):
        table.sweep(spec, tmp_path / "bad", temperatures=temps, widths=[30], sample_widths=[3])


def test_best_temperature_view_where_the_theory_and_the_gp_limit_choose_differently():
    """The theory's best temperature varies with width and differs from the GP limit's: the one-temperature view
    takes each at its own choice (at offset 2 of a fresh clone the figures of a grid sweep failed on the clash of
    the selected temperatures as coordinates)."""
    temps, widths, sample_widths = [0.01, 0.3, 3.0], [3, 30], [3]
    grid = np.arange(6.0).reshape(2, 3)  # [width, temperature]
    ds = xr.Dataset(
        {"accuracy_theory": (("width", "temperature"), grid),
         "U_theory": (("width", "temperature", "path", "path_"), grid[:, :, None, None] * np.ones((1, 1, 2, 2))),
         "accuracy_gp": ("temperature", [0.5, 0.6, 0.7]),
         "accuracy_sampled": (("sample_width", "temperature"), [[10.0, 11.0, 12.0]]),
         "best_temperature_theory": ("width", [0.01, 3.0]), "best_temperature_gp": 0.3},
        coords={"width": widths, "temperature": temps, "sample_width": sample_widths},
    )
    for v in ("U_sampled", "U_mcse", "accuracy_sampled_se", "verdict"):
        ds[v] = ds["accuracy_sampled"]
    view = table.best_temperature_view(ds)
    assert "temperature" not in view.dims and "temperature" not in view.coords
    assert view["accuracy_theory"].values.tolist() == [0.0, 5.0]
    assert view["U_theory"].values[:, 0, 0].tolist() == [0.0, 5.0]
    assert float(view["accuracy_gp"]) == 0.6 and view["accuracy_sampled"].values.tolist() == [10.0]


def test_job_seeds_do_not_depend_on_the_folder():
    spec = spec_from_dict(SMALL)
    a = table.sweep_jobs(spec, "/a", [3], [3, 30], [0.1])
    b = table.sweep_jobs(spec, "/elsewhere", [3], [3, 30], [0.1])
    assert [j.seed for j in a] == [j.seed for j in b]
    samples = [j for j in a if j.params["kind"] == "sample"]
    assert len({j.seed for j in samples}) == 2  # different widths, different chains


def test_a_failing_job_is_reported_and_the_others_finish(tmp_path, capsys, monkeypatch):
    path = tmp_path / "tiny.toml"
    path.write_text(spec_from_dict(SMALL).to_toml())
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


def test_cluster_section_round_trips_and_builds_a_jobqueue_executor(tmp_path):
    import tomllib

    from bayes_attn.sweep.executors import DaskJobqueue, executor_from_options

    data = SMALL | {"cluster": {"class": "SLURMCluster", "workers": 3, "queue": "normal", "cores": 1,
                                "memory": "4GB", "walltime": "01:00:00", "env": {"JAX_PLATFORMS": "cpu"}}}
    spec = spec_from_dict(data)
    assert spec_from_dict(tomllib.loads(spec.to_toml())) == spec
    ex = executor_from_options("dask", cluster=spec.cluster)
    assert isinstance(ex, DaskJobqueue) and ex.workers == 3 and ex.cls == "SLURMCluster"
    script = ex.make_cluster().job_script()
    assert "#SBATCH -p normal" in script and "export JAX_PLATFORMS=cpu" in script
    with pytest.raises(ValueError, match="cluster"):
        spec_from_dict(SMALL | {"cluster": 5})


# issue 33, row 4: a cached job's file is trusted for what it holds, not for its name ---------------------------
def _swap(a, b) -> None:
    data = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(data)


def test_swapped_theory_width_files_are_recomputed(tmp_path):
    """``widths/theory-N3-...nc`` and ``...-N30-...nc`` swapped: each is recomputed at its own width."""
    spec = spec_from_dict(SMALL)
    paths = [table.theory_job(spec, N, 0.1, tmp_path) for N in (3, 30)]
    first = [xr.load_dataset(p)[["U", "accuracy", "Ua"]] for p in paths]
    _swap(*paths)
    for path, N, ds in zip(paths, (3, 30), first, strict=True):
        assert table.theory_job(spec, N, 0.1, tmp_path) == path
        xr.testing.assert_equal(xr.load_dataset(path)[["U", "accuracy", "Ua"]], ds)


@pytest.mark.slow
def test_swapped_sampling_width_files_are_recomputed(tmp_path):
    """The same for the sampling jobs' files (the Wishart sampler: one program for both widths)."""
    spec = spec_from_dict(SMALL)
    settings = spec.sampler.replace(name="wishart", num_warmup=20, num_samples=10, chain_method="sequential")
    paths = [table.sample_job(spec, N, 0.1, tmp_path, settings, False) for N in (3, 30)]
    first = [xr.load_dataset(p)["U_sampled"] for p in paths]
    _swap(*paths)
    for path, N, U in zip(paths, (3, 30), first, strict=True):
        assert table.sample_job(spec, N, 0.1, tmp_path, settings, False) == path
        xr.testing.assert_equal(xr.load_dataset(path)["U_sampled"], U)


def test_empty_width_list_is_a_usage_error(tmp_path, capsys, monkeypatch):
    path = spec_file(tmp_path, TINY | {"compare": TINY["compare"] | {"widths": []}})
    forbid_calls(monkeypatch, (ba.sweep.table, "solve_theory"))
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "s"), "--no-progress"]) == cli.EXIT_USAGE
    assert "widths must hold at least one width" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())
