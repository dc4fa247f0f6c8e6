"""Benchmark: ``Posterior.summary()``'s ArviZ table in one thread against one per core
(``bayes_attn.diagnostics.summary_table``), quiet and beside one CPU-bound process per core.

The table (``arviz_stats.summary(kind="all")``: R-hat, bulk and tail ESS, MCSE, on rank-normalised draws) is as
dear as the sampling it checks where draws are cheap: for ``laplace-is`` on Fig. 2c at N = 100 (4 × 5000 draws
of 221 entries: ``U``, ``U_2``, ``Ua``, 100 ``f_train``, 100 ``f_test``) it took 7 of a call's 15 s, and ``auto``
computes it to choose. ``summary_table`` cuts the entries into pieces that ArviZ summarises in threads; the
tables are checked equal. Measured in one process on the same draws, the two settings alternating within each
of ``--rounds`` rounds, median seconds; the load average before each condition is recorded.

    .venv/bin/python benchmarks/bench_summary.py [--rounds 3] [--quick]

Output: ``benchmarks/results/summary.json`` (``--quick``: 4 × 500 draws, one round, a temporary folder). ~3 min.
"""

from __future__ import annotations

import argparse

from harness import Record, ab_rounds, ab_summary, busy_cores, parse, parser
from harness import headline as make_headline


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: 4 × 500 draws, one round)."""
    ap = parser("summary", __doc__, "4 x 500 draws, one round")
    ap.add_argument("--rounds", type=int, default=3)
    a = parse(ap, argv)
    a.draws, a.rounds = (500, 1) if a.quick else (5000, a.rounds)
    return a


def headline(results: dict) -> dict | None:
    """The table in threads against one thread, quiet (median seconds)."""
    return make_headline("ArviZ summary table, one thread / threads, quiet", results["quiet"]["speedup"], "x")


if __name__ == "__main__":
    ARGS = parse_args()  # before JAX loads: --help answers at once and writes nothing

import contextlib  # noqa: E402
import os  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import bayes_attn as ba  # noqa: E402
from bayes_attn import markov  # noqa: E402
from bayes_attn.diagnostics import summary_table  # noqa: E402


def condition(draws, settings: dict, rounds: int, busy: bool) -> dict:
    """Seconds of ``summary_table(draws, workers)`` per setting, alternating; ``busy``: beside one CPU-bound process
    per core (each ends by itself after 30 min and is killed at the end)."""
    load = os.getloadavg()
    with busy_cores() if busy else contextlib.nullcontext():
        rows = ab_rounds({name: lambda r, w=w: summary_table(draws, w) for name, w in settings.items()}, rounds)
    for row in rows:
        del row["values"]
    med = ab_summary(rows)["median_seconds"]
    out = {"load_before": load, "seconds": {name: [row["seconds"][name] for row in rows] for name in settings},
           "median_seconds": med, "speedup": med["one thread"] / med["threads"], "rounds": rows}
    print(f"{'busy' if busy else 'quiet':5s} one thread {med['one thread']:6.2f} s  threads {med['threads']:6.2f} s  "
          f"speedup {out['speedup']:.2f}x  load before {load[0]:.1f}", flush=True)
    return out


def main(a: argparse.Namespace) -> dict:
    """Sample once, check the two tables equal, time them quiet and busy; the envelope."""
    task, net = markov.fig2c(width=100)
    x, y, xt, _ = task.generate()
    post = ba.sample_posterior(net, x, y, temperature=0.01, x_test=xt[:100],
                               sampler=ba.SamplerSettings(name="laplace-is", num_chains=4, num_samples=a.draws, seed=0),
                               progress_bar=False)
    draws = post.tree["posterior"].to_dataset()[post.observables]
    cores = len(os.sched_getaffinity(0))  # usable by this process
    record = Record(a, network="markov.fig2c", width=100, sampler="laplace-is", chains=4, cores=cores,
                    entries=int(sum(np.prod(draws[v].shape[2:]) for v in draws)))
    settings = {"one thread": 1, "threads": None}
    pd.testing.assert_frame_equal(summary_table(draws, 1), summary_table(draws))  # also the untimed first call
    results = {"quiet": condition(draws, settings, a.rounds, busy=False),
               "busy": condition(draws, settings, a.rounds, busy=True)}
    record.write(results, headline=headline(results))
    return results


if __name__ == "__main__":
    main(ARGS)
