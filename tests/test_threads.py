"""Thread settings as a context (bayes_attn.threads) and the command's compilation cache (bayes_attn.compile_cache)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import random_data, random_network
from threadpoolctl import threadpool_limits

import bayes_attn as ba
from bayes_attn import compile_cache, threads


def test_threads_reachable_after_plain_import():
    code = "import bayes_attn; print(bayes_attn.threads.one_blas_thread.__name__, bayes_attn.threads.limits.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["one_blas_thread", "limits"]


@pytest.fixture
def no_blas_env(monkeypatch):
    for v in threads.ENV_BLAS:
        monkeypatch.delenv(v, raising=False)


def test_limits_sets_and_restores_blas_threads(no_blas_env):
    with threadpool_limits(2, user_api="blas"):
        assert threads.blas_threads() == 2
        with threads.limits():
            assert threads.blas_threads() == 1
            with threads.limits(1):  # nested: nothing to change
                assert threads.blas_threads() == 1
            assert threads.blas_threads() == 1
        assert threads.blas_threads() == 2
        with threads.limits(None):
            assert threads.blas_threads() == 2


def test_limits_respects_the_users_environment(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    with threadpool_limits(2, user_api="blas"), threads.limits():
        assert threads.blas_threads() == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_limits_rejects_bad_counts(bad):
    with pytest.raises(ValueError, match="blas"):
        with threads.limits(bad):
            pass


@pytest.mark.slow
def test_sampling_records_settings_restores_blas_and_repeats_bit_for_bit(no_blas_env):
    """Inside the call one BLAS thread, recorded with the chain method; the caller's setting afterwards;
    ``auto`` is sequential on one CPU device; the same settings give the same draws bit for bit."""
    net = random_network((2,), width=3)
    x, y = random_data(8)
    kw = dict(temperature=0.1, sampler="wishart", num_warmup=30, num_samples=20, num_chains=2, progress_bar=False)
    with threadpool_limits(2, user_api="blas"):
        posts = [ba.sample_posterior(net, x, y, **kw) for _ in range(2)]
        assert threads.blas_threads() == 2
    rec = json.loads(posts[0].tree.attrs["threads"])
    assert rec["blas_threads"] == 1
    assert rec["chain_method"] == json.loads(posts[0].tree.attrs["settings"])["chain_method"]
    assert rec["chain_method"] == ("sequential" if rec["devices"] == "1 x cpu" else rec["chain_method"])
    for name in ("U", "f_train"):
        np.testing.assert_array_equal(posts[0].tree["posterior"][name].values, posts[1].tree["posterior"][name].values)


def test_single_thread_xla_only_before_jax_starts():
    code = ("import os, json; from bayes_attn import threads; first = threads.single_thread_xla(); "
            "import jax; jax.numpy.ones(2).block_until_ready(); second = threads.single_thread_xla(); "
            "print(json.dumps([first, second, threads.xla_threads(), threads.jax_started()]))")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [True, False, "single", True]


def test_compile_cache_folder_and_switches(monkeypatch, tmp_path):
    monkeypatch.delenv(compile_cache.ENV_DIR, raising=False)
    monkeypatch.delenv(compile_cache.ENV_OFF, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache.cache_dir() == tmp_path / "xdg" / "bayes_attn" / "jax"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compile_cache.cache_dir() == tmp_path / "home" / ".cache" / "bayes_attn" / "jax"
    monkeypatch.setenv(compile_cache.ENV_DIR, str(tmp_path / "mine"))
    assert compile_cache.cache_dir() == tmp_path / "mine"
    assert compile_cache.enable_compile_cache(False) is None
    for off, disabled in (("1", True), ("yes", True), ("0", False), ("", False)):
        monkeypatch.setenv(compile_cache.ENV_OFF, off)
        assert compile_cache.disabled_by_env() is disabled
    monkeypatch.setenv(compile_cache.ENV_OFF, "1")
    assert compile_cache.enable_compile_cache() is None and not (tmp_path / "mine").exists()


@pytest.mark.slow
def test_command_fills_the_cache_unless_told_not_to(tmp_path):
    """``bayes-attn theory`` writes compiled (and the theory's traced) programs to the user's cache folder, not
    to the output folder; ``--no-compile-cache`` writes none."""
    spec = tmp_path / "tiny.toml"
    spec.write_text('name = "tiny"\ntemperature = 0.1\n[task]\nfeature_dim = 4\nseq_len = 3\nn_train = 8\nn_test = 8\n'
                    '[network]\nwidth = 3\n')
    env = {k: v for k, v in os.environ.items()
           if k not in (compile_cache.ENV_DIR, compile_cache.ENV_OFF, compile_cache.ENV_NO_EXPORTED)}
    for flag, folder in (([], "on"), (["--no-compile-cache"], "off")):
        env["XDG_CACHE_HOME"] = str(tmp_path / folder)
        subprocess.run([sys.executable, "-m", "bayes_attn", *flag, "theory", str(spec), "--out", str(tmp_path / f"out-{folder}")],
                       capture_output=True, text=True, env=env, check=True)
        assert not any(p.name == "jax" or "cache" in p.name for p in (tmp_path / f"out-{folder}").iterdir())
    assert len(list((tmp_path / "on" / "bayes_attn" / "jax").iterdir())) > 0
    assert len(list((tmp_path / "on" / "bayes_attn" / "jax" / "exported").glob("*.jaxexport"))) > 0
    assert not (tmp_path / "off" / "bayes_attn").exists()


def test_exported_programs_are_loaded_not_traced_and_equal_the_traced(monkeypatch, tmp_path):
    """With the cache on, the theory's entry points keep their traced program on disk; a later process (here:
    an emptied memo) loads it without tracing; traced, exported and loaded programs agree to the last bit; a
    damaged file is exported again; another head structure is another key."""
    import jax

    from bayes_attn.theory import objective

    def values(net):
        x, y = random_data(7)
        problem = objective.make_problem(net, x, y, 0.1)
        psi = np.linspace(-0.3, 0.4, sum(m * (m + 1) // 2 for m in objective.sizes(net.heads)))
        return [np.asarray(v) for v in objective.log_cholesky_value_grad_hess(psi, problem)]

    net = random_network((2, 2))
    monkeypatch.setattr(compile_cache, "_exported_dir", None)
    traced = values(net)
    monkeypatch.setattr(compile_cache, "_exported_dir", tmp_path)
    monkeypatch.setattr(compile_cache, "_programs", {})
    exported = values(net)
    (program,) = tmp_path.glob("*.jaxexport")
    export = jax.export.export

    def no_trace(*args, **kwargs):
        raise AssertionError("traced again although the program is on disk")

    monkeypatch.setattr(compile_cache, "_programs", {})
    monkeypatch.setattr(jax.export, "export", no_trace)
    loaded = values(net)
    monkeypatch.setattr(jax.export, "export", export)
    program.write_bytes(b"not a program")
    monkeypatch.setattr(compile_cache, "_programs", {})
    again = values(net)
    for t, e, lo, a in zip(traced, exported, loaded, again, strict=True):
        assert np.array_equal(t, e) and np.array_equal(t, lo) and np.array_equal(t, a)
    assert program.read_bytes() != b"not a program"
    x, y = random_data(7)
    psi = np.zeros(11)
    keys = {compile_cache.program_key(objective.log_cholesky_value_grad_hess, psi,
                                      objective.make_problem(random_network(h), x, y, 0.1)) for h in ((2, 2), (4, 1), (2, 2))}
    assert len(keys) == 2  # the head structure is part of the key
