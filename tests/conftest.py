"""Shared fixtures: small random networks and data, two CPU devices for chains.

The tests compare against NumPy/SciPy in float64, so this process turns on
JAX's 64-bit mode (the package itself never does: see test_package.py).
"""

import contextlib
import dataclasses
import datetime
import functools
import gc
import json
import logging
import math
import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads: chains in parallel on 2 cores
# One persistent compilation cache per test run, in a temporary folder (never the user's cache folder): the
# xdist workers and the commands the tests start in subprocesses load what another process compiled. Results
# do not depend on it (bayes_attn._internal.compile_cache). tests/test_threads.py checks the command's cache switches
# with its own settings. The controlling process makes the folder before the workers start and removes it.
os.environ.pop("BAYES_ATTN_NO_COMPILE_CACHE", None)

import jax  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import pytest  # noqa: E402

import bayes_attn as ba  # noqa: E402
from bayes_attn.diagnostics import MIN_ESS as COMPARE_MIN_ESS  # noqa: E402
from bayes_attn.oneshot._model import ModelConfig, Params, init_params  # noqa: E402

numpyro.set_host_device_count(2)
jax.config.update("jax_enable_x64", True)


_RUN_CACHE = pytest.StashKey[str]()  # the run's cache folder, in the controlling process's config

# ----------------------------------------------------------------------------
# the suite's seed offset
# ----------------------------------------------------------------------------
SEED_ENV = "BAYES_ATTN_TEST_SEED"
SEED_STRIDE = 1000  # offsets move every seed by whole thousands: no test's seeds run into another offset's


def _seed_offset() -> int:
    raw = os.environ.get(SEED_ENV, "0").strip() or "0"
    if not raw.isdigit():
        raise pytest.UsageError(f"{SEED_ENV} must be an integer >= 0, got {raw!r}")
    return int(raw)


SEED_OFFSET = _seed_offset()


def seed_of(s: int) -> int:
    """The test seed ``s`` shifted by the suite's offset (``BAYES_ATTN_TEST_SEED``, default 0):
    ``s + 1000 · offset``. Every seed a test uses goes through here: data, networks, chains, bootstraps, SBC."""
    return int(s) + SEED_STRIDE * SEED_OFFSET


def rng_of(s: int) -> np.random.Generator:
    """``np.random.default_rng(seed_of(s))``."""
    return np.random.default_rng(seed_of(s))


def key_of(s: int) -> jax.Array:
    """``jax.random.key(seed_of(s))``."""
    return jax.random.key(seed_of(s))


MIN_ESS = COMPARE_MIN_ESS  # the ESS a comparison needs (bayes_attn.compare): the tests' precondition on chains


def z_bound(comparisons: int, rate: float = 1e-3, df: float | None = None) -> float:
    """The ``|z|`` bound at which ``comparisons`` independent (or positively dependent) z-scores give a false
    failure with probability at most ``rate`` (Bonferroni: each two-sided tail ``rate / comparisons``). With
    ``df``, the tails of Student's t with ``df`` degrees of freedom: z-scores whose standard error is itself
    estimated (MCMC standard errors from ``df`` ≈ the smallest effective sample size)."""
    return float(_z_law(df).isf(rate / (2 * comparisons)))


def _z_law(df: float | None):
    """The law of one z-score under the null: standard normal, or Student t with ``df`` degrees of freedom."""
    import scipy.stats

    return scipy.stats.norm if df is None else scipy.stats.t(df)


# ----------------------------------------------------------------------------
# checked statistics: recorded with their thresholds, so that tests/robustness.py can put each threshold in
# the statistic's distribution over seed offsets (its mean, spread and the distance in standard deviations)
# ----------------------------------------------------------------------------
TAIL = 1e-3  # the false-failure rate each stochastic check is held to (one-sided)
SCALES = ("linear", "log", "p", "z")
STAT_PREFIX = "stat:"  # the property names of checked statistics in the JUnit report


def record_check(record_property, name: str, value: float, threshold: float, *, fails: str = "above",
                 scale: str = "linear", attempts: int = 1) -> bool:
    """Record the statistic ``name`` with its threshold (pytest's ``record_property``, read back by
    tests/robustness.py) and say whether it passes; :func:`check` asserts it.

    ``fails``: ``"above"`` when the test fails for ``value >= threshold`` (a |z|, a distance, R-hat), ``"below"``
    when it fails for ``value <= threshold`` (an ESS, a p-value, an accuracy). ``scale``: where the statistic is
    near normal over seeds: ``"linear"``, ``"log"`` (an ESS, a ratio of positive numbers), ``"p"`` (a p-value,
    uniform under the null: its tail at the threshold is the threshold itself) or ``"z"`` (one ``|z|`` that is
    standard normal under the null: its tail is ``2 Φ(−threshold)``). ``attempts``: the test draws the
    statistic afresh (another seed) up to this many times and fails only if every draw fails; ``value`` is then the
    first draw's, and the false-failure rate is its tail to the power ``attempts``."""
    if fails not in ("above", "below") or scale not in SCALES or not (isinstance(attempts, int) and attempts >= 1):
        raise ValueError(f"fails must be 'above' or 'below', scale one of {SCALES} and attempts a positive int, got "
                         f"{fails!r}, {scale!r}, {attempts!r}")
    value, threshold = float(value), float(threshold)
    record_property(STAT_PREFIX + name, json.dumps({"value": value, "threshold": threshold, "fails": fails,
                                                    "scale": scale} | ({"attempts": attempts} if attempts > 1 else {})))
    return value < threshold if fails == "above" else value > threshold


def check_max_abs_z(check, name: str, z, comparisons: int, df: float | None = None, detail: object = None) -> None:
    """Assert that the largest ``|z|`` is below :func:`z_bound` ``(comparisons, TAIL, df)``, recorded as its
    Bonferroni p-value ``min(1, comparisons · 2 · tail(max |z|))`` (normal tails, or Student t with ``df``)
    on the ``"p"`` scale: the same decision, but a statistic whose null distribution is known (uniform, or larger
    where the z-scores are dependent), so that tests/robustness.py reads its tail at the threshold as ``TAIL``
    instead of estimating the spread of a maximum from a dozen seeds."""
    z = np.asarray(z, dtype=float)
    top = float(np.max(np.abs(z)))
    p = min(1.0, 2 * comparisons * float(_z_law(df).sf(top)))
    check(name, p, TAIL, fails="below", scale="p",
          detail=f"max |z| {top:.4g} of {comparisons}: " + str(np.round(z, 2) if detail is None else detail))


@pytest.fixture
def check(record_property):
    """``check(name, value, threshold, fails="above", scale="linear", detail="")``: record the statistic with
    its threshold (:func:`record_check`) and assert that it passes, with every digit needed to see why not."""

    def _check(name: str, value: float, threshold: float, *, fails: str = "above", scale: str = "linear",
               detail: object = "") -> None:
        ok = record_check(record_property, name, value, threshold, fails=fails, scale=scale)
        side = ">=" if fails == "above" else "<="
        assert ok, f"{name} = {float(value):.6g} {side} threshold {float(threshold):.6g}" + (
            f": {detail}" if detail != "" else "")

    return _check


STATS_ENV = "BAYES_ATTN_STATS_JSON"  # where a run writes every checked statistic (make validate sets it)
_stats_run: dict | None = None  # the controlling process's rows for that file, by test id


def pytest_runtest_logreport(report):
    """In the controlling process, where ``BAYES_ATTN_STATS_JSON`` is set: keep each test's outcome, seconds and
    checked statistics (:func:`record_check`), so that a later run can be compared with this one."""
    if _stats_run is None or report.when != "call":
        return
    _stats_run[report.nodeid] = {"outcome": report.outcome, "seconds": round(report.duration, 2), "stats": {
        k.removeprefix(STAT_PREFIX): json.loads(v) for k, v in report.user_properties if k.startswith(STAT_PREFIX)}}


def _write_stats(config, exitstatus) -> None:
    path = Path(os.environ[STATS_ENV])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps({"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                               "seed_offset": SEED_OFFSET, "marker": config.getoption("markexpr"),
                               "exit_status": int(exitstatus), "tests": _stats_run}, indent=1, sort_keys=True))
    tmp.replace(path)


def pytest_sessionfinish(session, exitstatus):
    if _stats_run is not None:
        _write_stats(session.config, exitstatus)


def pytest_report_header(config):
    return f"test seed offset: {SEED_OFFSET} ({SEED_ENV})"


def pytest_sessionstart(session):
    """The offset is named under ``-q`` too, where pytest prints no header."""
    config = session.config
    if config.get_verbosity() < 0 and not hasattr(config, "workerinput"):
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(pytest_report_header(config))


def pytest_configure(config):
    from bayes_attn._internal.compile_cache import ENV_DIR, ENV_NO_EXPORTED, enable_compile_cache

    if not hasattr(config, "workerinput"):  # the controlling process (or the only one)
        if os.environ.get(STATS_ENV):
            global _stats_run
            _stats_run = {}
        os.environ[ENV_DIR] = config.stash[_RUN_CACHE] = tempfile.mkdtemp(prefix="bayes_attn-test-jax-")
        # the theory's programs traced as the library does, in the test processes and in the commands they
        # start, so that both share compiled programs (an exported program compiles to another entry); the
        # exported programs themselves are tested in test_threads.py
        os.environ[ENV_NO_EXPORTED] = "1"
    enable_compile_cache()


def pytest_unconfigure(config):
    if _RUN_CACHE in config.stash:
        shutil.rmtree(config.stash[_RUN_CACHE], ignore_errors=True)


try:  # the kernel's limit on this process's memory mappings; None off Linux
    MAX_MAP_COUNT = int(Path("/proc/sys/vm/max_map_count").read_text())
except OSError:
    MAX_MAP_COUNT = None


def _memory_maps() -> int:
    """The number of memory mappings this process holds."""
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


@pytest.fixture(autouse=True)
def _release_compiled_programs():
    """After each test, drop JAX's compiled programs when this process holds over half the memory
    mappings the kernel allows. XLA's CPU backend maps each executable into memory (about three mappings
    each); the suite compiles thousands of programs in one process, and at the limit (65530 by
    default) XLA aborted or segfaulted while compiling, reading or writing a cache entry."""
    yield
    if MAX_MAP_COUNT is not None and _memory_maps() > MAX_MAP_COUNT // 2:
        jax.clear_caches()
        gc.collect()


# Costly fixtures (module or session scope, setup ≥ 5 s) and cached results: pytest-xdist's ``loadgroup``
# keeps the tests that share one on one worker, so it is computed once per run, not once per worker.
SHARED_FIXTURES = ("tiny_sweep", "tiny_run", "runs", "tiny_full", "corrected")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            shared = [f for f in SHARED_FIXTURES if f in item.fixturenames]
            if shared:
                item.add_marker(pytest.mark.xdist_group(shared[0]))


@contextlib.contextmanager
def traced_programs():
    """The programs JAX makes inside the block, from its own logs: the name of each function ``jax.jit`` traces
    (a miss of its in-memory cache: ``Finished tracing <name> for jit``), and ``compiled <program>`` for each
    program compiled or read from the persistent cache (``jit(<name>)``; eager ``lax.map`` too). A test that a
    second call reuses what the first compiled."""
    names: list[str] = []

    class _Record(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if msg.startswith("Finished tracing ") and " for jit in " in msg:
                names.append(msg.removeprefix("Finished tracing ").split(" for jit in ")[0])
            elif msg.startswith("Finished XLA compilation of "):
                names.append("compiled " + msg.removeprefix("Finished XLA compilation of ").split(" in ")[0])
            elif msg.startswith("Persistent compilation cache hit for "):
                names.append("compiled " + msg.split("'")[1])

    loggers = [logging.getLogger(n) for n in ("jax._src.dispatch", "jax._src.interpreters.pxla", "jax._src.compiler")]
    handler, levels = _Record(), [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.DEBUG)
        lg.addHandler(handler)
    try:
        yield names
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)


def random_network(heads, *, N0=6, width=4, variances=1.0, readout="last", seed=0, scale=1.0):
    """A network with random bilinear attention, ``heads`` per layer (from ``seed_of(seed)``)."""
    rng = rng_of(seed)
    att = [scale * rng.normal(size=(h, N0, N0)) for h in heads]
    return ba.Network(att, width, variances, readout)


def random_data(P, *, T=4, N0=6, seed=1):
    """``P`` random sequences ``[P, T, N0]`` and ±1 labels (from ``seed_of(seed)``)."""
    rng = rng_of(seed)
    x = rng.normal(size=(P, T, N0))
    y = np.where(rng.random(P) < 0.5, -1.0, 1.0)
    return x, y


TINY = {  # a tiny Markov run spec (as TOML tables) for the command's and the jobs' tests
    "name": "tiny",
    "temperature": 0.1,
    "task": {"kind": "markov", "feature_dim": 8, "seq_len": 5, "n_train": 12, "n_test": 20, "seed": seed_of(3)},
    "network": {"layers": [["same_token", "random"], ["uniform", "random"]], "width": 3, "beta": 2.0,
                "random_seed": seed_of(1)},
    "sampler": {"name": "collapsed", "num_warmup": 60, "num_samples": 40, "num_chains": 2, "seed": seed_of(1)},
    "compare": {"widths": [3, 30], "sample_widths": [3],
                "gp_paths": {"good path": ["1-1"], "good + denoising paths": ["1-1", "2-1"]}},
}


THEORY_ONLY = TINY | {"compare": TINY["compare"] | {"widths": [3, 30], "sample_widths": []}}  # a sweep sampling nothing
FAST = ["--samples", "10", "--warmup", "10", "--chains", "2", "--no-progress"]  # the command's quickest sampling

SWEEP_SETTINGS = {"thinning": 2, "target_accept": 0.9}  # not the defaults, so that their provenance shows


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory):
    """The TINY sweep with :data:`SWEEP_SETTINGS`, run once per test process: ``(spec, folder, dataset)``."""
    from bayes_attn.spec import spec_from_dict
    from bayes_attn.sweep import _table as table

    spec = spec_from_dict(TINY)
    spec = dataclasses.replace(spec, sampler=spec.sampler.replace(**SWEEP_SETTINGS))
    folder = tmp_path_factory.mktemp("tiny_sweep") / "sw"
    return spec, folder, table.sweep(spec, folder, progress_bar=False)


def spec_file(tmp_path, data=TINY):
    """``data`` (a spec's tables) written as ``tmp_path/tiny.toml``."""
    from bayes_attn.spec import spec_from_dict

    path = tmp_path / "tiny.toml"
    path.write_text(spec_from_dict(data).to_toml())
    return path


def one_line(err: str) -> str:
    """The one line of an error message (stderr), checked to be one line and no traceback."""
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def forbid_calls(monkeypatch, *names):
    """Make each ``(module, name)`` raise when called: a check that nothing is computed."""

    def fail(*a, **k):
        raise AssertionError("computation started")

    for module, name in names:
        monkeypatch.setattr(module, name, fail)


@pytest.fixture
def tiny():
    """Tiny problem: N=4, 2×2 heads (4 paths), P=20, 7 test inputs."""
    return tiny_problem()


def tiny_problem():
    """The problem of :func:`tiny`: ``(net, x, y, xt)``."""
    net = random_network((2, 2), width=4)
    x, y = random_data(20)
    xt, _ = random_data(7, seed=2)
    return net, x, y, xt


@pytest.fixture(scope="session")
def tiny_full():
    """The problem of :func:`tiny` at temperature 0.1, sampled with ``full`` (2 chains × (300 + 300), effective
    weights kept): ``(net, x, y, xt, posterior)``."""
    net, x, y, xt = tiny_problem()
    post = ba.sample_posterior(net, x, y, temperature=0.1, x_test=xt,
                               sampler=ba.SamplerSettings(name="full", num_warmup=300, num_samples=300, num_chains=2,
                                                          seed=seed_of(3), target_accept=0.9),
                               progress_bar=False, keep_effective_weights=True)
    return net, x, y, xt, post


# ----------------------------------------------------------------------------
# random problems of the theory's tests (tests/theory/)
# ----------------------------------------------------------------------------
N0, TOKENS, P = 6, 5, 16  # their feature dimension, tokens per sequence and training examples


def random_problem(heads, widths, variances=1.0, seed=0, p=P):
    """A network with random attention (``heads`` per layer), ``widths`` and ``variances``, ``p`` random sequences
    ``[p, TOKENS, N0]`` and ±1 labels (all from ``seed_of(seed)``): ``(net, x, y)``."""
    rng = rng_of(seed)
    att = [rng.normal(size=(h, N0, N0)) for h in heads]
    net = ba.Network(att, widths, variances)
    x = rng.normal(size=(p, TOKENS, N0))
    y = np.where(rng.random(p) < 0.5, 1.0, -1.0)
    return net, x, y


def random_spd(rng, U, eps=0.3):
    """``U`` plus a random positive semi-definite matrix of size ``eps`` (from ``rng``)."""
    A = rng.normal(size=U.shape)
    return U + eps * A @ A.T / U.shape[0]


CONFIGS = [  # (heads, widths, variances) of networks of one, two and three layers
    ((3,), [5, 8], [1.0, 1.3, 0.7]),
    ((2, 2), [6, 4, 9], [0.8, 1.2, 1.1, 0.9]),
    ((2, 1, 2), [5, 7, 6, 8], [1.0, 1.1, 0.9, 1.2, 0.8]),
]


# ----------------------------------------------------------------------------
# the gradient-descent model of the one-shot task (tests/oneshot/)
# ----------------------------------------------------------------------------
SMALL_MODEL = ModelConfig(N0=10, width=6, d_qk=4, heads=(2, 3), qk_scale=1.0)


def small_model(seed=0, config=SMALL_MODEL):
    """Initial parameters of the model ``config`` (from ``seed_of(seed)``)."""
    return init_params(config, jax.random.PRNGKey(seed_of(seed)))


def small_x(P=7, T=5, N0=10, seed=3):
    """``P`` random sequences ``[P, T, N0]`` (from ``seed_of(seed)``)."""
    return rng_of(seed).normal(size=(P, T, N0))


def numpy_forward(params: Params, x, removed=None):
    """§6 forward written out with loops over heads; ``removed`` {layer: head} drops one head and
    divides the layer by sqrt(H-1) instead of sqrt(H) (the hand-computed ablation)."""
    removed = removed or {}
    V0 = np.asarray(params.V0)
    out = []
    for xp in x:  # [T, N0]
        z = xp @ V0.T  # [T, d]
        for l, (Q, K, V) in enumerate(zip(params.Q, params.K, params.V, strict=True)):
            Q, K, V = map(np.asarray, (Q, K, V))
            H = V.shape[0]
            new = np.zeros((xp.shape[0], V.shape[1]))
            for h in range(H):
                if removed.get(l) == h:
                    continue
                score = (xp @ K[h].T) @ (xp @ Q[h].T).T / math.sqrt(Q.shape[1])  # [s, t]
                om = np.exp(score - score.max(axis=0))
                om /= om.sum(axis=0)
                new += (om.T @ z) @ V[h].T  # token t gets sum_s om[s, t] z_s
            z = new / math.sqrt(H - (1 if l in removed else 0))
        out.append(z.mean(axis=0) @ np.asarray(params.a))
    return np.array(out)


# ----------------------------------------------------------------------------
# exact posteriors shared by several test files (cached per worker; their tests share an xdist_group)
# ----------------------------------------------------------------------------
WISHART = ba.SamplerSettings(name="wishart", num_warmup=300, num_chains=2)


@functools.cache
def fig2c_wishart(N: int):
    """Fig. 2c network (``models/markov_4paths.toml``: P = 100, T = 0.01), 40 test inputs, and 2 × 800 (N = 10) or
    2 × 1500 draws of the ``wishart`` sampler (Monte-Carlo floor of the distance of ``U`` about 0.008 and 0.003):
    ``(net, x, y, x_test, posterior)``. Tests that read it share the xdist group ``fig2c_<N>``."""
    from bayes_attn import markov

    task = markov.MarkovTask(seed=seed_of(0))
    net = task.network(markov.FIG2C_LAYERS, width=N, random_strength=1.0, random_seed=seed_of(1))
    x, y, xt, _ = task.generate()
    xt = xt[:40]
    post = ba.sample_posterior(net, x, y, temperature=0.01, x_test=xt, progress_bar=False,
                               sampler=WISHART.replace(seed=seed_of(N), num_samples=800 if N <= 10 else 1500))
    s = post.summary()
    assert s.max_rhat < 1.02 and s.min_ess > 400 and s.divergences == 0, s.by_variable()
    return net, x, y, xt, post


@functools.cache
def three_layers_wishart():
    """Three layers with heads (2, 1, 2), widths (10, 8, 12, 9), unequal variances, readout ``mean``, P = 30,
    T = 0.1, and 2 × 8000 ``wishart`` draws (the Monte-Carlo floor of the distance of ``U_1`` about 1/15 of the
    leading order's error, so that the correction's share of it is resolved): ``(net, x, y, posterior)`` (xdist
    group ``three_layers``)."""
    from bayes_attn import markov

    task = markov.MarkovTask(feature_dim=10, seq_len=5, n_train=30, n_test=20, seed=seed_of(0))
    layers = (("same_token", "random"), ("uniform",), ("uniform", "random"))
    net = task.network(layers, width=[10, 8, 12, 9], variances=[1.0, 0.7, 1.3, 0.8, 1.5], readout="mean",
                       random_seed=seed_of(1))
    x, y, _, _ = task.generate()
    post = ba.sample_posterior(net, x, y, temperature=0.1, progress_bar=False,
                               sampler=WISHART.replace(seed=seed_of(3), num_samples=8000))
    s = post.summary()
    assert s.max_rhat < 1.02 and s.min_ess > 400, s.by_variable()
    return net, x, y, post


def users_folder(tmp_path):
    """A folder of a user's own files (data, temporaries, a hidden folder): ``tmp_path / "mine"``."""
    out = tmp_path / "mine"
    (out / "data" / "raw").mkdir(parents=True)
    (out / "data" / "raw" / "survey.csv.tmp").write_text("answers")
    (out / "backup.tar.tmp").write_text("backup")
    (out / ".staging-notes").mkdir()
    (out / ".staging-notes" / "todo.txt").write_text("notes")
    return out


def snapshot_tree(folder):
    """Every file below ``folder`` by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
