"""Benchmark: ``Posterior.summary()``'s ArviZ table in one thread against one per core
(``bayes_attn.diagnostics.summary_table``), quiet and beside one CPU-bound process per core.

The table (``arviz_stats.summary(kind="all")``: R-hat, bulk and tail ESS, MCSE, on rank-normalised draws) is as
dear as the sampling it checks where draws are cheap: for ``laplace-is`` on Fig. 2c at N = 100 (4 × 5000 draws
of 221 entries: ``U``, ``U_2``, ``Ua``, 100 ``f_train``, 100 ``f_test``) it took 7 of a call's 15 s, and ``auto``
computes it to choose. ``summary_table`` cuts the entries into pieces that ArviZ summarises in threads; the
tables are checked equal. Measured in one process on the same draws, the two settings alternating within each
of ``--rounds`` rounds, median seconds; the load average before each condition is recorded.

    .venv/bin/python benchmarks/bench_summary.py [--rounds 3] [--quick]

Output: ``benchmarks/results/summary.json`` (``--quick``: 4 × 500 draws, a temporary folder). ~3 min.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import bayes_attn as ba  # noqa: E402
from bayes_attn import markov, threads  # noqa: E402
from bayes_attn.diagnostics import summary_table  # noqa: E402
from record import busy_cores, write_record  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def condition(draws, settings: dict, rounds: int, busy: bool) -> dict:
    """Median seconds of ``summary_table(draws, workers)`` per setting, alternating, ``busy``: beside one
    CPU-bound process per core (each ends by itself after 30 min and is killed at the end)."""
    load = os.getloadavg()
    with busy_cores() if busy else contextlib.nullcontext():
        times = {name: [] for name in settings}
        for r in range(rounds):
            order = list(settings) if r % 2 == 0 else list(settings)[::-1]
            for name in order:
                times[name].append(seconds(lambda: summary_table(draws, settings[name])))
    med = {name: float(np.median(t)) for name, t in times.items()}
    out = {"load_before": load, "seconds": times, "median_seconds": med,
           "speedup": med["one thread"] / med["threads"]}
    print(f"{'busy' if busy else 'quiet':5s} one thread {med['one thread']:6.2f} s  threads {med['threads']:6.2f} s  "
          f"speedup {out['speedup']:.2f}x  load before {load[0]:.1f}", flush=True)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="4 x 500 draws, one round; output to a temporary folder")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    draws_per_chain, rounds = (500, 1) if a.quick else (5000, a.rounds)
    task, net = markov.fig2c(width=100)
    x, y, xt, _ = task.generate()
    post = ba.sample_posterior(net, x, y, temperature=0.01, x_test=xt[:100], sampler="laplace-is", num_chains=4,
                               num_samples=draws_per_chain, seed=0, progress_bar=False)
    draws = post.tree["posterior"].to_dataset()[post.observables]
    cores = threads.cores()
    settings = {"one thread": 1, "threads": None}
    pd.testing.assert_frame_equal(summary_table(draws, 1), summary_table(draws))  # also the untimed first call
    record = {"problem": {"network": "markov.fig2c", "width": 100, "sampler": "laplace-is", "chains": 4,
                          "draws": draws_per_chain, "entries": int(sum(np.prod(draws[v].shape[2:]) for v in draws))},
              "cores": cores, "rounds": rounds,
              "quiet": condition(draws, settings, rounds, busy=False),
              "busy": condition(draws, settings, rounds, busy=True)}
    write_record((a.out or (Path(tempfile.mkdtemp()) if a.quick else RESULTS)) / "summary.json", record)


if __name__ == "__main__":
    main()
