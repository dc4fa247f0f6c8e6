"""Trustworthy verdicts and files: what a hostile but realistic user runs into.

One test (or more) per failure mode of README's "Reproducibility and failure
modes" that spans modules: verdicts, provenance, labels, non-converged theory
points, corrupted caches, seeds and chain methods, checksums and memory
estimates. The output folders' modes (one writer, writability, interrupted and
replaced runs, stale temporaries) are in ``test_outputs.py``, spec types in
``test_spec.py``.
"""

import json
import tomllib

import numpy as np
import pytest
import xarray as xr

import bayes_attn as ba
from bayes_attn import cli
from bayes_attn.sweep import job_seed, table
from bayes_attn.stats import accuracy
from bayes_attn.samplers import memory
from bayes_attn.spec import load_spec, spec_from_dict
from conftest import TINY, forbid_calls as _forbid, spec_file as _spec_file

THEORY_ONLY = TINY | {"compare": TINY["compare"] | {"widths": [3, 30], "sample_widths": []}}


# 1. verdict -----------------------------------------------------------------
@pytest.mark.slow
def test_run_with_failed_diagnostics_is_inconclusive_and_exits_3(tmp_path, capsys):
    path = _spec_file(tmp_path)
    out = tmp_path / "run"
    status = cli.main(["run", str(path), "--out", str(out), "--width", "8", "--temperature", "0.2", "--samples", "30",
                       "--warmup", "20", "--chains", "3", "--seed", "3", "--no-progress"])
    assert status == cli.EXIT_DIAGNOSTICS
    assert "WARNING: the sampler's diagnostics failed" in capsys.readouterr().err
    comp = xr.open_dataset(out / "comparison.nc")
    assert comp.attrs["verdict"] == "inconclusive"
    comp.close()
    assert "INCONCLUSIVE" in (out / "report.md").read_text()
    assert json.loads((out / "manifest.json").read_text())["verdict"] == "inconclusive"

    # 2. provenance: the folder's spec.toml is the run that wrote it
    ran = load_spec(out / "spec.toml")
    assert (ran.network.width, ran.temperature) == (8, 0.2)
    s = ran.sampler
    assert (s.num_samples, s.num_warmup, s.num_chains, s.seed, s.name) == (30, 20, 3, 3, "collapsed")
    assert s.chain_method in ("parallel", "vectorized", "sequential")  # resolved, not "auto"
    post = ba.load_posterior(out / "posterior.nc")
    assert json.loads(post.tree.attrs["settings"]) == s.to_dict()
    versions = json.loads(post.tree.attrs["versions"])
    assert versions["numpyro"] and versions["jax"] and versions["bayes_attn"]


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


def load_spec_text(text):
    return spec_from_dict(tomllib.loads(text))


# 5. labels ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_classification_needs_plus_minus_one_labels(tiny_full):
    net, x, y, xt, post = tiny_full
    with pytest.raises(ValueError, match=r"y must be classification labels \+1/-1.*2\*y - 1"):
        accuracy(np.ones(4), np.array([0.0, 1.0, 1.0, 0.0]))
    theory = ba.solve_theory(net, x, y, temperature=0.1)
    with pytest.raises(ValueError, match="y_test must be classification labels"):
        ba.compare(theory, post, xt, (np.arange(len(xt)) % 2).astype(float))
    # regression targets stay allowed for the theory and the sampler themselves
    ba.solve_theory(net, x, 0.3 * y + 0.1, temperature=0.5)


# 6. non-converged theory points are flagged every time ---------------------------------------------------
def test_non_converged_theory_warns_on_resume_and_is_stored(tmp_path, monkeypatch):
    spec = spec_from_dict(THEORY_ONLY)
    real = table.solve_theory
    with monkeypatch.context() as m:
        m.setattr(table, "solve_theory", lambda *a, **k: real(*a, **k, max_iter=1))
        with pytest.warns(RuntimeWarning, match="did not converge"):
            table.sweep(spec, tmp_path / "sw", progress_bar=False)
    _forbid(monkeypatch, (table, "solve_theory"))
    with pytest.warns(RuntimeWarning, match=r"theory at N=3, temperature=0.1 did not converge"):
        ds = table.sweep(spec, tmp_path / "sw", progress_bar=False)  # resumed from files: still flagged
    assert not bool(ds["converged_theory"].sel(width=3))
    assert "converged_theory" in xr.open_dataset(tmp_path / "sw" / "sweep.nc")


# 8. a corrupt cache entry is recomputed ------------------------------------------------------------------
def test_truncated_cache_file_is_recomputed_with_a_warning(tmp_path):
    spec = spec_from_dict(THEORY_ONLY)
    first = table.sweep(spec, tmp_path / "sw", progress_bar=False)
    cached = tmp_path / "sw" / "widths" / "theory-N30-T0.1.nc"
    cached.write_bytes(cached.read_bytes()[:3000])
    with pytest.warns(RuntimeWarning, match="truncated or corrupted.*recomputing"):
        again = table.sweep(spec, tmp_path / "sw", progress_bar=False)
    xr.testing.assert_allclose(again["U_theory"], first["U_theory"], rtol=1e-12)


# 11. same seed and chain method, same draws, from the library and the command ------------------------------------
@pytest.mark.slow
def test_same_seed_same_draws_from_library_and_command(tmp_path):
    path = _spec_file(tmp_path)
    spec = load_spec(path)
    x, y, xt, _ = spec.data()
    assert cli.main(["sample", str(path), "--out", str(tmp_path / "s"), "--chain-method", "sequential", "--seed", "7",
                     "--no-progress"]) in (0, cli.EXIT_DIAGNOSTICS)
    from_cli = ba.load_posterior(tmp_path / "s" / "posterior.nc")
    lib = ba.sample_posterior(spec.net(), x, y, temperature=spec.temperature, x_test=xt, progress_bar=False,
                              sampler=spec.sampler.replace(seed=7, chain_method="sequential"))
    for v in ("U", "f_test"):
        np.testing.assert_array_equal(from_cli.tree["posterior"][v].values, lib.tree["posterior"][v].values)
    assert json.loads(from_cli.tree.attrs["settings"])["chain_method"] == "sequential"


# 12. checksums: corruption is an error, not new numbers -------------------------------------------------------
@pytest.mark.slow
def test_flipped_byte_in_saved_data_is_an_error(tiny, tmp_path):
    net, x, y, _ = tiny
    theory = ba.solve_theory(net, x, y, temperature=0.5)
    path = theory.save(tmp_path / "theory.nc")
    raw = bytearray(path.read_bytes())
    at = raw.find(np.ascontiguousarray(x[5, 2]).tobytes())  # the training inputs, stored in the file
    assert at > 0
    raw[at + 3] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="truncated or corrupted"):
        ba.load_theory(path)


# 14. a memory estimate before sampling ---------------------------------------------------------------------
@pytest.mark.slow
def test_memory_estimate_refuses_a_run_too_big_before_compiling(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 8 * 2**30)
    spec = spec_from_dict(TINY)
    x, y, xt, _ = spec.data()
    with pytest.raises(ValueError, match=r"needs about .* GiB but 8 GiB are available"):
        ba.sample_posterior(spec.net(100_000), x, y, temperature=0.1, sampler="collapsed", progress_bar=False)
    assert cli.main(["sample", str(_spec_file(tmp_path)), "--width", "100000", "--out", str(tmp_path / "s")]) == 2
    assert "needs about" in capsys.readouterr().err
    # the estimate grows with the latent dimension; the wishart sampler's does not grow with width
    ba.sample_posterior(spec.net(100_000), x, y, temperature=0.1, sampler="wishart", num_chains=1, num_warmup=5,
                        num_samples=5, progress_bar=False)
