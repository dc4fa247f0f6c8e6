"""Thread settings as a context (bayes_attn._internal.threads) and the command's compilation cache
(bayes_attn._internal.compile_cache)."""

import importlib
import json
import logging
import os
import stat
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import random_data, random_network, spec_file
from threadpoolctl import threadpool_limits

import bayes_attn as ba
from bayes_attn import cli
from bayes_attn._internal import compile_cache, threads


def test_the_moved_modules_old_names_are_gone():
    """The old names of the modules moved in 0.1.0 (``bayes_attn.threads``, ``bayes_attn.run``, ...) imported for
    one release with a warning; that release is out, so they are gone (CHANGELOG)."""
    for old in ("bayes_attn.threads", "bayes_attn.run", "bayes_attn.bartlett", "bayes_attn.precision"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
    assert not hasattr(ba, "MOVED")


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
    kw = dict(temperature=0.1, sampler=ba.SamplerSettings(name="wishart", num_warmup=30, num_samples=20, num_chains=2),
              progress_bar=False)
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
    code = ("import os, json; from bayes_attn._internal import threads; first = threads.single_thread_xla(); "
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
        subprocess.run([sys.executable, "-m", "bayes_attn", *flag, "theory", str(spec), "--correction", "none",
                        "--out", str(tmp_path / f"out-{folder}")],
                       capture_output=True, text=True, env=env, check=True)
        assert not any(p.name == "jax" or "cache" in p.name for p in (tmp_path / f"out-{folder}").iterdir())
    assert len(list((tmp_path / "on" / "bayes_attn" / "jax").iterdir())) > 0
    assert len(list((tmp_path / "on" / "bayes_attn" / "jax" / "exported").glob("*.jaxexport"))) > 0
    assert not (tmp_path / "off" / "bayes_attn").exists()


# no code from a received folder: the workers' compiled programs are not read from the output folder
def test_dask_compilation_cache_lives_in_the_users_cache_folder(tmp_path, monkeypatch):
    from bayes_attn.sweep import _table as table

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
    assert cli.main(["sweep", str(spec_file(tmp_path)), "--out", str(out), "--executor", "dask",
                     "--workers", "1"]) == cli.EXIT_USAGE
    cache = Path(seen["executor"].compilation_cache)
    assert cache == tmp_path / "cache" / "bayes_attn" / "jax"
    assert out.resolve() not in cache.resolve().parents


def test_exported_programs_are_loaded_not_traced_and_equal_the_traced(monkeypatch, tmp_path):
    """With the cache on, the theory's entry points keep their traced program on disk; a later process (here:
    an emptied memo) loads it without tracing; traced, exported and loaded programs agree to the last bit; a
    damaged file is exported again; another head structure is another key."""
    import jax

    from bayes_attn.theory import _objective as objective

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
                                      objective.make_problem(random_network(h), x, y, 0.1))
            for h in ((2, 2), (4, 1), (2, 2))}
    assert len(keys) == 2  # the head structure is part of the key


# issue 33: the exported programs never change a number ------------------------------------------------------------
def _theory_values(fn=None) -> list[np.ndarray]:
    """``fn`` (default: the theory's log-Cholesky value, gradient and Hessian) of a small fixed problem."""
    from bayes_attn.theory import _objective as objective

    net = random_network((2, 2))
    x, y = random_data(7)
    problem = objective.make_problem(net, x, y, 0.1)
    psi = np.linspace(-0.3, 0.4, sum(m * (m + 1) // 2 for m in objective.sizes(net.heads)))
    out = (fn or objective.log_cholesky_value_grad_hess)(psi, problem)
    return [np.asarray(v) for v in (out if isinstance(out, tuple) else (out,))]


@pytest.fixture
def exported(monkeypatch, tmp_path):
    """``(folder, traced)``: exported programs kept in ``folder`` (made here, empty); ``traced(fn)`` the values
    of :func:`_theory_values` traced, without exported programs."""
    monkeypatch.setattr(compile_cache, "_programs", {})
    monkeypatch.setattr(compile_cache, "_exported_dir", None)
    cache = {}

    def traced(fn=None):
        if fn not in cache:
            monkeypatch.setattr(compile_cache, "_exported_dir", None)
            cache[fn] = _theory_values(fn)
            monkeypatch.setattr(compile_cache, "_exported_dir", folder)
        return cache[fn]

    folder = tmp_path / "exported"
    monkeypatch.setattr(compile_cache, "_exported_dir", folder)
    return folder, traced


def _later_process(monkeypatch, caplog) -> None:
    """As in a later process: no program in memory; debug messages of the cache recorded from here on."""
    monkeypatch.setattr(compile_cache, "_programs", {})
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger=compile_cache.__name__)


def _debug_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == compile_cache.__name__]


def _assert_equal(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b) and all(np.array_equal(u, v, equal_nan=True) for u, v in zip(a, b, strict=True))


@pytest.mark.parametrize("damage", ["one bit", "40 bytes"])
def test_damaged_exported_program_is_traced_again_and_rewritten(exported, monkeypatch, caplog, damage):
    """Issue 33, rows 1 and 6: one flipped bit (wrong numbers, converged, exit 0) or 40 XORed bytes (a
    traceback on every later run) in a program file: the numbers are the traced ones, the file is rewritten,
    one debug line says so, and the next process loads the rewritten file silently."""
    folder, traced = exported
    _theory_values()
    (program,) = folder.glob("*.jaxexport")
    data = bytearray(program.read_bytes())
    if damage == "one bit":  # the constant 2.0 (float64, little-endian) becomes 4.0: it loads and runs
        at = data.find(struct.pack("<d", 2.0))
        assert at > 0, "the program holds no constant 2.0 to flip"
        data[at + 6] ^= 0x10
    else:
        at = len(data) * 3 // 4
        data[at:at + 40] = bytes(b ^ 0xFF for b in data[at:at + 40])
    program.write_bytes(bytes(data))
    _later_process(monkeypatch, caplog)
    _assert_equal(_theory_values(), traced())
    assert len(_debug_lines(caplog)) == 1 and program.read_bytes() != bytes(data)
    _later_process(monkeypatch, caplog)
    _assert_equal(_theory_values(), traced())
    assert _debug_lines(caplog) == []


def test_program_of_another_function_under_the_name_is_traced_again(exported, monkeypatch, caplog):
    """Issue 33, row 1b: one program file copied over another of the same signature (``value`` and
    ``log_cholesky_value``: a vector and a problem to a number) is not run: the numbers are the traced ones."""
    from bayes_attn.theory import _objective as objective

    folder, traced = exported
    _theory_values(objective.value)
    (theirs,) = folder.glob("*.jaxexport")
    _theory_values(objective.log_cholesky_value)
    (mine,) = set(folder.glob("*.jaxexport")) - {theirs}
    mine.write_bytes(theirs.read_bytes())
    _later_process(monkeypatch, caplog)
    _assert_equal(_theory_values(objective.log_cholesky_value), traced(objective.log_cholesky_value))
    assert len(_debug_lines(caplog)) == 1 and mine.read_bytes() != theirs.read_bytes()
    _later_process(monkeypatch, caplog)
    _assert_equal(_theory_values(objective.value), traced(objective.value))  # the other one still loads
    assert _debug_lines(caplog) == []


def _foreign(kind: str, folder: Path, monkeypatch) -> Path:
    """Make the program in ``folder`` untrusted as ``kind`` says; returns the folder the cache now reads."""
    (program,) = folder.glob("*.jaxexport")
    if kind == "symlinked folder":  # the cache folder a link to another user's folder holding the program
        link = folder.with_name("link")
        link.symlink_to(folder, target_is_directory=True)
        monkeypatch.setattr(compile_cache, "_exported_dir", link)
        return link
    if kind == "folder of another user":
        monkeypatch.setattr(os, "getuid", lambda: os.stat(folder).st_uid + 1)
    elif kind == "file of another user":
        os.chown(program, os.stat(program).st_uid + 1, -1)
    elif kind == "symlinked file":
        elsewhere = folder.with_name("elsewhere.jaxexport")
        program.rename(elsewhere)
        program.symlink_to(elsewhere)
    return folder


@pytest.mark.parametrize("kind", [
    "symlinked folder", "folder of another user", "symlinked file",
    pytest.param("file of another user", marks=pytest.mark.skipif(
        not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file to another user needs root")),
])
def test_program_not_owned_by_the_user_is_never_loaded(exported, monkeypatch, caplog, kind):
    """Issue 33, row 1c: reading applies the rules of writing: a program in a folder or file of another user, or
    reached through a symbolic link, is not deserialised; the numbers are traced; one debug line; a file in the
    user's own folder is rewritten as the user's own plain file."""
    import jax

    folder, traced = exported
    traced()
    _theory_values()
    read = _foreign(kind, folder, monkeypatch)
    deserialise, loads = jax.export.deserialize, []
    monkeypatch.setattr(jax.export, "deserialize", lambda data: loads.append(1) or deserialise(data))
    _later_process(monkeypatch, caplog)
    _assert_equal(_theory_values(), traced())
    assert loads == [] and len(_debug_lines(caplog)) == 1
    if kind in ("file of another user", "symlinked file"):
        (program,) = read.glob("*.jaxexport")
        st = os.lstat(program)
        assert stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()


def test_program_failing_at_its_first_call_is_traced_again(exported, monkeypatch, caplog):
    """Issue 33, row 6: a program that deserialises but fails when first called (``Failed to deserialize
    StableHLO``) falls back to tracing, rewrites the file, with one debug line."""
    import jax

    folder, traced = exported
    traced()
    _theory_values()
    deserialise = jax.export.deserialize

    class Broken:
        def __init__(self, data):
            self.exported = deserialise(data)

        def call(self, *args):
            raise RuntimeError("Failed to deserialize StableHLO")

    monkeypatch.setattr(jax.export, "deserialize", Broken)
    _later_process(monkeypatch, caplog)
    _assert_equal(_theory_values(), traced())
    assert len(_debug_lines(caplog)) == 1


def test_a_read_only_cache_is_one_warning_and_off(monkeypatch, tmp_path):
    """A cache folder this user cannot write turns the cache off with one warning, instead of JAX's two-line
    PermissionError at every program it compiles (issue 53)."""
    import warnings

    import jax

    monkeypatch.delenv(compile_cache.ENV_OFF, raising=False)
    monkeypatch.setenv(compile_cache.ENV_DIR, str(tmp_path / "ro"))
    (tmp_path / "ro").mkdir(mode=0o700)
    real_access = os.access
    monkeypatch.setattr(compile_cache.os, "access", lambda p, mode: False if os.fspath(p) == str(tmp_path / "ro")
                        else real_access(p, mode))  # a read-only folder, also when the tests run as root
    before = jax.config.jax_compilation_cache_dir
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert compile_cache.enable_compile_cache() is None
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and said[0].startswith("running without the persistent cache:") and "not writable" in said[0]
    assert jax.config.jax_compilation_cache_dir == before


@pytest.mark.slow
def test_unreadable_cache_entries_are_one_line_and_recompiled(tmp_path):
    """Truncated entries of the compile cache: one warning line for the run (JAX wrote one per program, 16 for the tiny
    theory) beside the run's own messages, each compiled afresh and written again (JAX keeps an existing file, so they
    are removed first), the same result; the next run reads them without a message (issue 53 row 9)."""
    import subprocess
    import sys

    spec, env = spec_file(tmp_path), {**os.environ, compile_cache.ENV_DIR: str(tmp_path / "cache")}
    env.pop(compile_cache.ENV_OFF, None)

    def theory(out: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bayes_attn", "theory", str(spec), "--out", str(tmp_path / out)],
                              capture_output=True, text=True, env=env, timeout=300)

    first = theory("a")
    entries = list((tmp_path / "cache").glob("*-cache"))
    assert first.returncode == 0 and len(entries) > 2, first.stderr
    for entry in entries:
        entry.write_bytes(entry.read_bytes()[:10])
    def said(run: subprocess.CompletedProcess) -> tuple[list[str], list[str]]:
        """stderr's lines on the compile cache, and the others (the run's own: at some seeds the tiny theory's
        correction is unreliable, and says so in every run)."""
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        return [s for s in lines if "compile cache" in s], [s for s in lines if "compile cache" not in s]

    second = theory("b")
    cache, own = said(second)
    assert second.returncode == 0 and len(cache) == 1 and own == said(first)[1], second.stderr
    line = cache[0]
    assert line.startswith("WARNING: compile cache") and "unreadable entries" in line and "written again" in line
    third = theory("c")  # from the entries written again: no message
    assert third.returncode == 0 and said(third) == ([], said(first)[1]), third.stderr
    assert all(entry.stat().st_size > 10 for entry in entries)
    accuracy = [[line for line in run.stdout.splitlines() if line.startswith("test accuracy")]
                for run in (first, second, third)]
    assert accuracy[0] == accuracy[1] == accuracy[2] and accuracy[0]


_API_SOLVE = """
import sys
import jax
if sys.argv[1] != "-":
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])  # the caller's own configuration,
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # every program (JAX's default: >= 1 s)
import numpy as np
import bayes_attn as ba
net, x, _ = ba.calibration.random_problem((1,), width=3, N0=3, T=2, P=6, P_test=2, seed=0)
ba.solve_theory(net, x, np.sign(np.arange(6) - 2.5), temperature=0.5)
"""


@pytest.mark.slow
@pytest.mark.parametrize("case", ["default", "opted out", "caller's own cache"])
def test_the_api_uses_the_commands_cache_unless_told_or_configured_otherwise(tmp_path, case):
    """Issue 71 item 6: the first ``solve_theory`` of a process turns the command's persistent cache on
    (:func:`~bayes_attn._internal.compile_cache.for_library`); ``BAYES_ATTN_NO_COMPILE_CACHE=1`` opts out, and a
    cache the caller configured in JAX is left as it is."""
    env = {k: v for k, v in os.environ.items() if k not in (compile_cache.ENV_OFF, "JAX_COMPILATION_CACHE_DIR")}
    env[compile_cache.ENV_DIR] = str(tmp_path / "ours")
    if case == "opted out":
        env[compile_cache.ENV_OFF] = "1"
    own = str(tmp_path / "theirs") if case == "caller's own cache" else "-"
    subprocess.run([sys.executable, "-c", _API_SOLVE, own], env=env, check=True, capture_output=True, text=True)
    ours = list((tmp_path / "ours").glob("*")) if (tmp_path / "ours").exists() else []
    assert bool(ours) is (case == "default"), ours
    if case == "caller's own cache":
        assert list((tmp_path / "theirs").glob("*-cache")), "the caller's cache holds the programs"
