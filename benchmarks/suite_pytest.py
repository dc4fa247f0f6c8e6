"""pytest plugin of ``benchmarks/bench_suite.py`` (``-p suite_pytest``): each test's wall seconds (setup, call and
teardown) and the seconds JAX spent compiling in it, one JSON line per test in ``$BENCH_SUITE_DIR/<pid>.jsonl``.

JAX's own duration events (:mod:`jax.monitoring`) are summed per test: ``backend_compile`` (XLA), ``trace`` (to a
jaxpr), ``lower`` (to StableHLO), and ``cache_saved`` (what the persistent cache says a loaded program would have
cost). The backend compile seconds are also kept per program name (JAX's ``fun_name``: ``jit(_fun)`` is a
``pmap``, e.g. NUTS chains in parallel). Compilation in processes a test starts (the commands, scripts and
benchmarks run as subprocesses) is not seen: it counts as the test's wall time only.
"""

from __future__ import annotations

import collections
import json
import os
import time

import pytest
from harness import COMPILE_EVENTS

EVENTS = dict(zip(COMPILE_EVENTS, ("trace", "lower", "backend_compile"), strict=True)) | {
    "/jax/compilation_cache/compile_time_saved_sec": "cache_saved"}
_tally: collections.Counter = collections.Counter()  # this test's seconds per stage, and its programs compiled
_programs: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])  # name: [backend seconds, count]


def _listener(event: str, duration: float, fun_name: str = "?", **_: object) -> None:
    name = EVENTS.get(event)
    if name is not None:
        _tally[name] += duration
        if name == "backend_compile":
            _tally["programs"] += 1
            _programs[fun_name][0] += duration
            _programs[fun_name][1] += 1


def pytest_configure(config) -> None:
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_listener)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _tally.clear()
    _programs.clear()
    t0 = time.perf_counter()
    yield
    row = {"test": item.nodeid, "wall": time.perf_counter() - t0,
           **{name: _tally[name] for name in (*EVENTS.values(), "programs")}, "by_name": dict(_programs)}
    folder = os.environ.get("BENCH_SUITE_DIR")
    if folder:
        with open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")
