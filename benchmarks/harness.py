"""The benchmarks' one harness: the command line, the machine record, A/B rounds and the result envelope.

Every script in ``benchmarks/`` builds its parser with :func:`parser` (``--quick``, ``--out``), parses its
arguments before it imports JAX or ``bayes_attn`` (so that ``--help`` is fast and writes nothing), opens a
:class:`Record` (the date, the settings, the load average before) and ends with :meth:`Record.write`, which
writes one envelope (:data:`SCHEMA`)::

    {"schema": "bayes_attn.benchmark/1", "benchmark": NAME, "date": ISO 8601, "settings": {...},
     "machine": {"cpu_count", "platform", "python", "load_before", "load_after", ...}, "versions": {...},
     "results": {...}, "headline": {"name", "value", "unit"}, "files": [...], "notes": "..."}

``headline``, ``files`` (other outputs beside the JSON file, by name), ``notes`` and ``versions`` are optional;
:func:`validate` checks a record against the envelope. Importing this module loads neither JAX nor the package.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

SCHEMA = "bayes_attn.benchmark/1"
HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
REPO = HERE.parent
REQUIRED = {"schema": str, "benchmark": str, "date": str, "settings": dict, "machine": dict, "results": dict}
OPTIONAL = {"versions": dict, "headline": dict, "files": list, "notes": str}
VERSIONED = ("jax", "jaxlib", "numpyro", "numpy", "scipy", "arviz", "optax", "dask")
BURNER = ("import time\nend = time.time() + {limit}\nx = 0\nwhile time.time() < end:\n"
          "    for i in range(100000):\n        x += i\n")
"""A CPU-bound Python process that ends by itself after ``limit`` seconds."""


# ----------------------------------------------------------------------------
# the command line
# ----------------------------------------------------------------------------
def parser(name: str, doc: str | None, quick: str) -> argparse.ArgumentParser:
    """A script's parser: its docstring as the description, ``--quick`` (``quick`` says what it runs) and ``--out``
    (the result file; default ``benchmarks/results/<name>.json``, with ``--quick`` a temporary folder)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help=f"tiny sizes, seconds, numbers meaningless: {quick}; to a temporary folder unless --out")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"the result file (default benchmarks/results/{name}.json; --quick: a temporary folder)")
    ap.set_defaults(benchmark=name)
    return ap


NO_COMPILE_CACHE = "BAYES_ATTN_NO_COMPILE_CACHE"
"""The library turns the command's persistent compilation cache on at its first theory solve or sampling call;
the benchmarks time cold compiles unless they say otherwise, so :func:`parse` sets this to ``1`` where it is unset
(a benchmark that measures the cache, or the command, sets its own processes' environment)."""


def parse(ap: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """Parse ``argv`` and resolve ``--out`` (see :func:`parser`) to a file path; the persistent compilation cache
    off (:data:`NO_COMPILE_CACHE`) unless the environment says otherwise."""
    a = resolve_out(ap.parse_args(argv))
    os.environ.setdefault(NO_COMPILE_CACHE, "1")
    return a


def resolve_out(a: argparse.Namespace) -> argparse.Namespace:
    """``a.out`` as a file: as given, or ``<name>.json`` in ``benchmarks/results`` (``--quick``: a temporary folder)."""
    if a.out is None:
        folder = Path(tempfile.mkdtemp(prefix=f"bench_{a.benchmark}_")) if a.quick else RESULTS
        a.out = folder / f"{a.benchmark}.json"
    return a


def settings_of(a: argparse.Namespace, **more: Any) -> dict:
    """The arguments as JSON (paths as strings; ``out``, ``benchmark`` and a worker's flags left out), with ``more``."""
    skip = {"out", "benchmark", "worker", "child"}
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items() if k not in skip} | more


# ----------------------------------------------------------------------------
# the machine
# ----------------------------------------------------------------------------
def load() -> list[float]:
    """The load average (1, 5, 15 min) now."""
    return list(os.getloadavg())


def machine(load_before: list[float] | None = None) -> dict:
    """CPU count, usable cores, platform, Python, thread settings and the load average before (given) and now."""
    env = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()  # not on macOS
    return {"cpu_count": os.cpu_count(), "usable_cores": usable, "platform": platform.platform(),
            "python": platform.python_version(), **env, "load_before": load_before, "load_after": load()}


def versions() -> dict:
    """Versions of the installed packages that the timings depend on, and the checkout's commit."""
    out = {}
    for name in VERSIONED:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[name] = importlib.metadata.version(name)
    try:
        run = lambda *args: subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,  # noqa: E731
                                           check=True).stdout.strip()
        out["commit"] = run("rev-parse", "--short", "HEAD")
        out["package_modified"] = bool(run("status", "--porcelain", "--", "bayes_attn"))
    except (OSError, subprocess.CalledProcessError):
        out["commit"] = None
    return out


BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""The variables that fix the BLAS threads; set, they win over :func:`one_blas_thread_here` (as in the library)."""


@contextlib.contextmanager
def x64(enabled: bool = True) -> Iterator[None]:
    """A block in JAX's 64-bit mode if ``enabled``, the process-wide flag restored afterwards (as the library
    switches it: a scoped ``jax.enable_x64`` would override the library's own float64 inside the block)."""
    import jax

    before = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", bool(enabled))
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", before)


def one_blas_thread_here() -> contextlib.AbstractContextManager:
    """A block with one BLAS thread (threadpoolctl), as the library runs each of its own calls; nothing changes
    when one of :data:`BLAS_ENV` is set (the user's choice wins)."""
    if any(v in os.environ for v in BLAS_ENV):
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1, user_api="blas")


def one_blas_thread() -> None:
    """One BLAS thread in this whole process from now on, unless one of :data:`BLAS_ENV` is set (call it before
    NumPy's BLAS does work: the variable for libraries loaded later, threadpoolctl for those loaded already)."""
    if any(v in os.environ for v in BLAS_ENV):
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")


def threads_now() -> dict:
    """The thread settings in force (JSON-ready): BLAS threads per library, ``XLA_FLAGS``, JAX's devices."""
    import jax
    from threadpoolctl import threadpool_info

    return {"blas_threads": {i["internal_api"]: i["num_threads"] for i in threadpool_info()},
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "devices": f"{jax.local_device_count()} x {jax.devices()[0].platform}", "cpu_count": os.cpu_count()}


def headline(name: str, value: float | None, unit: str) -> dict | None:
    """The one number a summary table shows for a result file (``None`` where it was not measured)."""
    return None if value is None else {"name": name, "value": float(value), "unit": unit}


class Record:
    """One run of a benchmark: opened before the measurement (date, load before), written as one envelope."""

    def __init__(self, a: argparse.Namespace, **settings: Any) -> None:
        self.name, self.path, self.settings = a.benchmark, Path(a.out), settings_of(a, **settings)
        self.date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        self.load_before, self.t0 = load(), time.perf_counter()

    def write(self, results: dict, *, headline: dict | None = None, files: list[str] = (), notes: str = "",
              hardware: dict | None = None) -> Path:
        """Write the envelope to ``--out`` (folders made; ``hardware``: more for ``machine``), print where, return
        the path."""
        record = {"schema": SCHEMA, "benchmark": self.name, "date": self.date, "settings": self.settings,
                  "machine": machine(self.load_before) | {"seconds": time.perf_counter() - self.t0} | (hardware or {}),
                  "versions": versions(), "results": results}
        record |= {k: v for k, v in (("headline", headline), ("files", list(files)), ("notes", notes)) if v}
        problems = validate(record)
        if problems:
            raise ValueError(f"not a benchmark envelope: {problems}")
        return write_json(self.path, record)


def write_json(path: str | os.PathLike, record: dict) -> Path:
    """``record`` as JSON (one space indent) to ``path``, folders made; prints where."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}", flush=True)
    return path


def validate(record: Any) -> list[str]:
    """What makes ``record`` not a benchmark envelope (empty: it is one)."""
    if not isinstance(record, dict):
        return ["not a JSON object"]
    bad = [f"{k}: missing or not {t.__name__}" for k, t in REQUIRED.items() if not isinstance(record.get(k), t)]
    bad += [f"{k}: not {t.__name__}" for k, t in OPTIONAL.items() if k in record and not isinstance(record[k], t)]
    bad += [f"unknown key {k}" for k in record if k not in REQUIRED and k not in OPTIONAL]
    if record.get("schema") != SCHEMA:
        bad.append(f"schema: not {SCHEMA!r}")
    if isinstance(record.get("date"), str):
        try:
            datetime.datetime.fromisoformat(record["date"])
        except ValueError:
            bad.append(f"date: not ISO 8601: {record['date']!r}")
    m = record.get("machine")
    if isinstance(m, dict):
        if not isinstance(m.get("cpu_count"), int):
            bad.append("machine.cpu_count: missing or not an int")
        loads = [m.get(k) for k in ("load_before", "load_after") if m.get(k) is not None]
        if not loads or not all(_numbers(v, 3) for v in loads):
            bad.append("machine: no load_before or load_after of 3 numbers")
    h = record.get("headline")
    if isinstance(h, dict) and not (isinstance(h.get("name"), str) and isinstance(h.get("unit"), str)
                                    and isinstance(h.get("value"), (int, float)) and not isinstance(h["value"], bool)):
        bad.append("headline: needs name (str), value (number), unit (str)")
    if isinstance(record.get("files"), list) and not all(isinstance(f, str) for f in record["files"]):
        bad.append("files: not a list of names")
    return bad


def _numbers(v: Any, n: int) -> bool:
    return isinstance(v, list) and len(v) == n and all(isinstance(x, (int, float)) for x in v)


# ----------------------------------------------------------------------------
# timing
# ----------------------------------------------------------------------------
def times(fn: Callable[[], Any], repeats: int = 1) -> list[float]:
    """Wall seconds of ``repeats`` calls of ``fn`` (which blocks until its result is ready)."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def alternated(rounds: int, labels: Mapping | list) -> list[tuple[int, str]]:
    """``(round, label)`` for two labels (``"new"``, maybe ``"old"``; those in ``labels``) over ``rounds``, the
    order swapped every round (so that neither always runs first on a machine whose load drifts)."""
    order = [k for k in ("new", "old") if k in labels] or list(labels)
    return [(r, label) for r in range(rounds) for label in (order if r % 2 == 0 else order[::-1])]


def ab_rounds(fns: Mapping[str, Callable[[int], Any]], rounds: int) -> list[dict]:
    """Two callables ``{label: fn(round)}`` run alternately for ``rounds`` rounds, the order swapped every round.

    Per round: ``first`` (the label run first), ``seconds`` of each, ``ratio`` (the first label's seconds over the
    second's, in the order of ``fns``), ``load_before`` (1 min) and ``values``: what each call returned (not JSON:
    pop it before writing)."""
    a, b = list(fns)
    out = []
    for r in range(rounds):
        order = (a, b) if r % 2 == 0 else (b, a)
        row = {"round": r, "first": order[0], "load_before": os.getloadavg()[0], "seconds": {}, "values": {}}
        for label in order:
            t0 = time.perf_counter()
            row["values"][label] = fns[label](r)
            row["seconds"][label] = time.perf_counter() - t0
        row["ratio"] = row["seconds"][a] / row["seconds"][b]
        out.append(row)
    return out


def ab_summary(rows: list[dict]) -> dict:
    """Median seconds per label and the median, least and largest ratio of :func:`ab_rounds`' rows."""
    ratios = [r["ratio"] for r in rows]
    return {"median_seconds": {k: statistics.median(r["seconds"][k] for r in rows) for k in rows[0]["seconds"]},
            "median_ratio": statistics.median(ratios), "min_ratio": min(ratios), "max_ratio": max(ratios)}


def run_worker(script: str | os.PathLike, args: list[str], code: str | os.PathLike, **env: str) -> dict:
    """Run ``script --worker *args`` in a fresh Python process with the package folder ``code`` first on its path
    (this checkout's or an earlier copy's) and the environment variables ``env``; return the JSON of its last
    line of output, with the load average before it started (``load_before``)."""
    before = load()
    out = subprocess.run([sys.executable, str(script), "--worker", *args], check=True, capture_output=True,
                         text=True, cwd="/", env=dict(os.environ, PYTHONPATH=str(code), **env))
    return {"load_before": before, **json.loads(out.stdout.strip().splitlines()[-1])}


@contextlib.contextmanager
def busy_cores(limit: float = 1800.0) -> Iterator[int]:
    """The block runs beside one CPU-bound process per core (:data:`BURNER`, each ending by itself after ``limit``
    seconds), started 2 s before it and killed when it ends; yields how many."""
    burners = [subprocess.Popen([sys.executable, "-c", BURNER.format(limit=limit)]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(2.0)
        yield len(burners)
    finally:
        for p in burners:
            p.kill()
        for p in burners:
            p.wait()


COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")


class CompileTimer:
    """Collects JAX's trace, lowering and compile intervals (wall clock) through ``jax.monitoring``; nested events
    overlap, so :meth:`seconds_in` gives the length of their union inside ``[t0, t1]``."""

    def __init__(self) -> None:
        import jax.monitoring

        self.intervals: list[tuple[float, float]] = []
        self.compilations = 0
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event: str, duration: float, **kwargs: Any) -> None:
        if event in COMPILE_EVENTS:
            end = time.perf_counter()
            self.intervals.append((end - duration, end))
            self.compilations += event == COMPILE_EVENTS[-1]

    def seconds_in(self, t0: float, t1: float) -> float:
        """Seconds inside ``[t0, t1]`` that JAX spent tracing, lowering or compiling."""
        total, end = 0.0, -math.inf
        for a, b in sorted((max(a, t0), min(b, t1)) for a, b in self.intervals if b > t0 and a < t1):
            total += max(0.0, b - max(a, end))
            end = max(end, b)
        return total


def trained_image(folder: str | os.PathLike, *, width: int = 10, variances=None, data_dir=REPO / "data/omniglot"):
    """A shipped trained one-shot model (``inference/results/fig3/<run>``; its training reused, never rerun):
    ``(spec, episodes, network at width)``, the network's variances the spec's unless given. ``data_dir``: the
    images (the runs' spec.toml names them relative to the repository; ``None``: the spec's own)."""
    from bayes_attn.oneshot import datasets, evaluation_episodes, load_oneshot_spec, to_network, train_model

    folder = Path(folder)
    spec = load_oneshot_spec(folder / "spec.toml")
    sets = datasets(spec, data_dir)
    ev = evaluation_episodes(spec, sets)
    model = train_model(spec, folder, sets=sets, evaluation=ev)
    net, _ = to_network(model.params, model.config, width=width,
                        variances=spec.theory.variances if variances is None else variances)
    return spec, ev, net


def timed_nuts(smp, inputs, model, args, options, *, num_warmup: int, num_samples: int, num_chains: int,
               chain_method: str, target_accept: float, seed: int, extra_fields: tuple[str, ...],
               max_tree_depth: int = 10):
    """NUTS as ``sample_posterior`` runs it (built by :func:`bayes_attn.samplers.mcmc`), the phases timed apart.

    Returns ``(mcmc, draws, extra, (t0, t1, t2, t3))``: ``draws`` include the sampler's conditional draws; warm-up
    is ``[t0, t1]``, sampling ``[t1, t2]``, the conditional draws ``[t2, t3]`` (``time.perf_counter`` seconds)."""
    import jax

    from bayes_attn.samplers import SamplerSettings, mcmc

    settings = SamplerSettings(name=smp.name, num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                               seed=seed, dtype=str(inputs.dtype), target_accept=target_accept,
                               max_tree_depth=max_tree_depth, chain_method=chain_method)
    mcmc = mcmc(smp, settings, model, inputs, options)
    k_mcmc, k_cond = jax.random.split(jax.random.key(seed))
    t0 = time.perf_counter()
    mcmc.warmup(k_mcmc, *args, extra_fields=extra_fields)
    jax.block_until_ready(mcmc.post_warmup_state)
    t1 = time.perf_counter()
    mcmc.run(mcmc.post_warmup_state.rng_key, *args, extra_fields=extra_fields)
    draws = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    t2 = time.perf_counter()
    draws |= jax.block_until_ready(smp.conditional(draws, k_cond, inputs, options))
    t3 = time.perf_counter()
    return mcmc, draws, mcmc.get_extra_fields(group_by_chain=True), (t0, t1, t2, t3)
