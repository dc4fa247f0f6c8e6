"""The sweep's jobs, their per-job files and the assembled table (bayes_attn.sweep._table)."""

import dataclasses
import json
import tomllib

import numpy as np
import pytest
import xarray as xr
from conftest import THEORY_ONLY, TINY, forbid_calls

from bayes_attn import experiment
from bayes_attn import posterior as ba_posterior
from bayes_attn import theory as ba_theory
from bayes_attn.spec import load_spec, spec_from_dict
from bayes_attn.sweep import _table as table
from bayes_attn.sweep import job_seed


def load_spec_text(text):
    return spec_from_dict(tomllib.loads(text))


@pytest.mark.slow
def test_sweep_records_its_provenance(tiny_sweep):
    spec, folder, ds = tiny_sweep
    saved = xr.open_dataset(folder / "sweep.nc")
    settings = json.loads(saved.attrs["sampler_settings"])
    assert (settings["thinning"], settings["target_accept"], settings["name"]) == (2, 0.9, "collapsed")
    assert load_spec_text(saved.attrs["spec"]).sampler.thinning == 2
    assert set(json.loads(saved.attrs["data_fingerprint"])) == {"train", "test", "validation"}
    assert "numpyro" in json.loads(saved.attrs["versions"])
    # the seed of every sampled width is stored, derived from the sampler seed, width and temperature
    seed = int(saved["sampler_seed"].sel(sample_width=3))
    assert seed == job_seed(spec.sampler.seed, kind="sample", width=3, temperature=spec.temperature)
    assert str(saved["chain_method"].sel(sample_width=3).values) in ("parallel", "vectorized", "sequential")
    assert bool(saved["converged_theory"].all())
    saved.close()
    assert ds.attrs["failed_jobs"] == "[]"


def test_non_converged_theory_warns_on_resume_and_is_stored(tmp_path, monkeypatch):
    spec = spec_from_dict(THEORY_ONLY)
    real = experiment.solve_theory
    with monkeypatch.context() as m:
        m.setattr(experiment, "solve_theory", lambda *a, **k: real(*a, **k, solver=ba_theory.NewtonSolver(max_iter=1)))
        with pytest.warns(RuntimeWarning, match="did not converge"):
            table.sweep(spec, tmp_path / "sw", progress_bar=False)
    forbid_calls(monkeypatch, (experiment, "solve_theory"))
    with pytest.warns(RuntimeWarning, match=r"theory at N=3, temperature=0.1 did not converge"):
        ds = table.sweep(spec, tmp_path / "sw", progress_bar=False)  # resumed from files: still flagged
    assert not bool(ds["converged_theory"].sel(width=3))
    assert "converged_theory" in xr.open_dataset(tmp_path / "sw" / "sweep.nc")


def test_truncated_cache_file_is_recomputed_with_a_warning(tmp_path):
    spec = spec_from_dict(THEORY_ONLY)
    first = table.sweep(spec, tmp_path / "sw", progress_bar=False)
    cached = tmp_path / "sw" / "widths" / "theory-N30-T0.1.nc"
    cached.write_bytes(cached.read_bytes()[:3000])
    with pytest.warns(RuntimeWarning, match="truncated or corrupted.*recomputing"):
        again = table.sweep(spec, tmp_path / "sw", progress_bar=False)
    xr.testing.assert_allclose(again["U_theory"], first["U_theory"], rtol=1e-12)


def test_a_cache_file_edited_in_place_is_recomputed_with_a_warning(tmp_path):
    """Issue 74 row B: ``U`` and ``U_1`` of a finished width's file multiplied by 3 in place (netCDF4, every
    attribute kept): the resumed sweep refuses it, says so and recomputes it, so ``sweep.nc`` is the untouched
    sweep's."""
    import netCDF4

    spec = spec_from_dict(THEORY_ONLY)
    first = table.sweep(spec, tmp_path / "sw", progress_bar=False)
    cached = tmp_path / "sw" / "widths" / "theory-N30-T0.1.nc"
    with netCDF4.Dataset(cached, "r+") as f:
        for name in ("U", "U_1"):
            if name in f.variables:
                f.variables[name][...] = 3 * f.variables[name][...]
    with pytest.warns(RuntimeWarning, match="changed by something other than bayes_attn.*recomputing"):
        again = table.sweep(spec, tmp_path / "sw", progress_bar=False)
    xr.testing.assert_allclose(again["U_theory"], first["U_theory"], rtol=1e-12)


@pytest.mark.slow
def test_sweep_resumes_without_recomputing(tmp_path, monkeypatch):
    spec = spec_from_dict(TINY)
    ds = table.sweep(spec, tmp_path / "sw", progress_bar=False)
    assert ds.sizes["width"] == 2 and ds.sizes["sample_width"] == 1
    assert set(ds["gp_model"].values) == {"whole network", "good path", "good + denoising paths"}
    assert (tmp_path / "sw" / "accuracy_vs_width.png").exists() and (tmp_path / "sw" / "finite_size.png").exists()
    # leading and corrected theory side by side, each with gap, MCSE and verdict
    assert ds.attrs["correction"] == "laplace" and ds.attrs["alternative_correction"] == "none"
    for v in ("alternative_check_gap", "alternative_check_mcse", "alternative_verdict", "U_sd_theory", "U_sd_sampled"):
        assert v in ds and "sample_width" in ds[v].dims, v
    assert (tmp_path / "sw" / "order_parameter_sd.png").exists()

    def fail(*a, **k):
        raise AssertionError("a finished width was recomputed")

    with monkeypatch.context() as m:
        m.setattr(ba_posterior, "sample_posterior", fail)
        m.setattr(experiment, "solve_theory", fail)
        again = table.sweep(spec, tmp_path / "sw", progress_bar=False)
    xr.testing.assert_identical(again.drop_attrs(), ds.drop_attrs())
    # other settings: finished widths are not reused
    hot = table.sweep(spec, tmp_path / "sw", widths=[3], sample_widths=[], temperatures=[0.5], progress_bar=False)
    assert float(hot["Ua"].sel(width=3)) != float(ds["Ua"].sel(width=3))  # recomputed at the new temperature


# a cached job's file is trusted for what it holds, not for its name
def _swap(a, b) -> None:
    data = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(data)


def test_swapped_theory_width_files_are_recomputed(tmp_path):
    """``widths/theory-N3-...nc`` and ``...-N30-...nc`` swapped: each is recomputed at its own width."""
    spec = spec_from_dict(TINY)
    paths = [table.theory_job(spec, N, 0.1, tmp_path) for N in (3, 30)]
    first = [xr.load_dataset(p)[["U", "accuracy", "Ua"]] for p in paths]
    _swap(*paths)
    for path, N, ds in zip(paths, (3, 30), first, strict=True):
        assert table.theory_job(spec, N, 0.1, tmp_path) == path
        xr.testing.assert_equal(xr.load_dataset(path)[["U", "accuracy", "Ua"]], ds)


@pytest.mark.slow
def test_swapped_sampling_width_files_are_recomputed(tmp_path):
    """The same for the sampling jobs' files (the Wishart sampler: one program for both widths)."""
    spec = spec_from_dict(TINY)
    settings = spec.sampler.replace(name="wishart", num_warmup=20, num_samples=10, chain_method="sequential")
    paths = [table.sample_job(spec, N, 0.1, tmp_path, settings, False) for N in (3, 30)]
    first = [xr.load_dataset(p)["U_sampled"] for p in paths]
    _swap(*paths)
    for path, N, U in zip(paths, (3, 30), first, strict=True):
        assert table.sample_job(spec, N, 0.1, tmp_path, settings, False) == path
        xr.testing.assert_equal(xr.load_dataset(path)["U_sampled"], U)


@pytest.mark.slow
def test_temperature_grid_picks_the_best_on_validation_not_test(tmp_path):
    spec = spec_from_dict(TINY)
    temps = [0.01, 0.3, 3.0]
    ds = table.sweep(spec, tmp_path / "grid", temperatures=temps, sample_widths=[], progress_bar=False)
    assert list(ds["temperature"].values) == temps
    for N in (3, 30):
        val = ds["accuracy_validation_theory"].sel(width=N).values
        best = float(ds["best_temperature_theory"].sel(width=N))
        assert best == temps[int(np.argmax(val))]  # argmax of validation accuracy, first among ties
        at_best = float(ds["accuracy_theory"].sel(width=N, temperature=best))
        assert float(ds["accuracy_theory_at_best"].sel(width=N)) == at_best
    assert float(ds["best_temperature_gp"]) == temps[int(np.argmax(ds["accuracy_gp_validation"].values))]
    assert (tmp_path / "grid" / "accuracy_vs_width.png").exists()
    # issue 71 item 5: each choice's lead in standard errors, the pooled choice as a spec that runs, test-set errors
    n_val, n_test = len(spec.validation()[1]), len(spec.data()[3])
    for N in (3, 30):
        val = np.sort(ds["accuracy_validation_theory"].sel(width=N).values)[::-1]
        se = np.hypot(*np.sqrt(val[:2] * (1 - val[:2]) / n_val))
        want = np.inf if val[0] > val[1] and se == 0 else (val[0] - val[1]) / se if se else 0.0
        assert float(ds["best_temperature_margin"].sel(width=N)) == pytest.approx(want)
    pooled = temps[int(np.argmax(ds["accuracy_validation_theory"].mean("width").values))]
    assert float(ds["pooled_temperature"]) == pooled
    chosen = load_spec(tmp_path / "grid" / "chosen.toml")
    assert chosen.temperature == pooled and dataclasses.replace(chosen, temperature=spec.temperature) == spec
    acc = ds["accuracy_theory"].values
    np.testing.assert_allclose(ds["accuracy_theory_test_se"].values, np.sqrt(acc * (1 - acc) / n_test))
    assert ds["accuracy_theory_test_se"].attrs["long_name"] == "test-set error"
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


def test_a_grid_choice_within_noise_says_so():
    """A lead of 0.02 in accuracy is 0.35 standard errors on 100 validation examples (within noise) and 11 on
    100,000; a single eligible temperature leads by ``inf``."""
    from bayes_attn.sweep import _temperature as temperature

    assert temperature.margin([0.78, 0.80, 0.5], 100) == pytest.approx(0.02 / np.hypot(0.04, np.sqrt(0.1716) / 10))
    assert temperature.margin([0.78, 0.80], 100_000) > 10
    assert temperature.margin([0.78, 0.80], 100, eligible=[False, True]) == np.inf
    ds = xr.Dataset({"pooled_temperature": 0.3, "pooled_temperature_margin": 0.35,
                     "best_temperature_theory": ("width", [0.3, 3.0]),
                     "best_temperature_margin": ("width", [5.0, 1.2])}, coords={"width": [3, 30]})
    lines = temperature.choice_lines(ds)
    assert "0.3" in lines[0] and "(within noise)" in lines[0]
    assert len(lines) == 2 and lines[1].startswith("N=30: the best temperature 3 leads") and "within noise" in lines[1]


def test_a_grid_sweeps_figure_labels_each_widths_temperature_and_breaks_the_line_where_it_changes(tmp_path):
    """Issue 71 item 5: the view puts each width at its own best temperature; the panels say which (``T=…`` above
    each width) and draw no line across a change of temperature (the unlabelled joined line made a peak that
    sweep.nc does not have)."""
    from bayes_attn.runs import _figures as figures

    temps = [0.01, 0.3]
    ds = xr.Dataset(
        {"accuracy_theory": (("width", "temperature"), [[0.6, 0.7], [0.8, 0.9], [0.7, 0.75]]),
         "U_theory": (("width", "temperature", "path", "path_"), np.ones((3, 2, 1, 1))),
         "accuracy_gp": ("temperature", [0.5, 0.6]), "best_temperature_gp": 0.3,
         "best_temperature_theory": ("width", [0.01, 0.01, 0.3])},
        coords={"width": [3, 10, 30], "temperature": temps, "path": ["1-1"], "path_": ["1-1"]})
    view = table.best_temperature_view(ds).assign(gp_model=["whole"])
    view["accuracy_gp"] = view["accuracy_gp"].expand_dims(gp_model=["whole"])
    calls = []
    real = figures.Figure.subplots

    def spy(fig, *a, **k):
        calls.append(real(fig, *a, **k))
        return calls[-1]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(figures.Figure, "subplots", spy)
        figures.sweep_accuracy(view, tmp_path / "a.png")
    for ax in calls[0]:
        assert [t.get_text() for t in ax.texts] == ["T=0.01", "T=0.01", "T=0.3"]
        assert "best validation T" in ax.get_title() or any("best validation T" in lbl
                                                            for lbl in ax.get_legend_handles_labels()[1])
    for ax in calls[0]:
        xs = [[int(v) for v in line.get_xdata()] for line in ax.get_lines() if line.get_xdata()[0] >= 3]
        assert [3, 10] in xs and [30] in xs and [3, 10, 30] not in xs, xs
        split = [line.get_color() for line in ax.get_lines() if list(line.get_xdata()) in ([3, 10], [30])]
        assert len(set(split)) == 1  # one theory curve, in one colour


def test_job_seeds_do_not_depend_on_the_folder():
    spec = spec_from_dict(TINY)
    a = table.sweep_jobs(spec, "/a", [3], [3, 30], [0.1])
    b = table.sweep_jobs(spec, "/elsewhere", [3], [3, 30], [0.1])
    assert [j.seed for j in a] == [j.seed for j in b]
    samples = [j for j in a if j.params["kind"] == "sample"]
    assert len({j.seed for j in samples}) == 2  # different widths, different chains
