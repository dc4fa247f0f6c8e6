"""The sweep's jobs, their per-job files and the assembled table (bayes_attn.sweep.table)."""

import json
import tomllib

import pytest
import xarray as xr

from bayes_attn.spec import spec_from_dict
from bayes_attn.sweep import job_seed, table
from conftest import THEORY_ONLY, forbid_calls


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
    real = table.solve_theory
    with monkeypatch.context() as m:
        m.setattr(table, "solve_theory", lambda *a, **k: real(*a, **k, max_iter=1))
        with pytest.warns(RuntimeWarning, match="did not converge"):
            table.sweep(spec, tmp_path / "sw", progress_bar=False)
    forbid_calls(monkeypatch, (table, "solve_theory"))
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
