"""Benchmark: one pilot against two before ``laplace-is``'s draws (``samplers.laplace.ADAPT_ROUNDS``), on Fig. 2c.

``laplace.adapt`` moves the expansion's proposal to a pilot's weighted mean and covariance where the pilot's
importance-sampling ESS is low (N = 10 here), and with two rounds moves it again from there (docs/theory.md §9).
The first round is the same in both settings (same keys), so one round is the code before the second was added.
Measured in one process, after a compiling call: ``sample_posterior(..., sampler="laplace-is")``, 4 × 5000
draws, temperature 0.01, at ``--seeds`` seeds per setting, the settings alternating within each seed; wall
seconds of the call, the smallest bulk ESS of ``U`` (ArviZ, on the resampled draws), ESS/s, ``k̂``, the
importance-sampling ESS, how many times the proposal moved, and the load average before each call. At N = 100
the pilot finds the expansion good and nothing moves, so the draws are the same in both settings (checked).

    .venv/bin/python benchmarks/bench_adapt.py [--seeds 4] [--quick]

Output: ``benchmarks/results/adapt.json`` (``--quick``: N = 10 only, 4 × 1000 draws, 2 seeds, a temporary
folder). ~6 min on 2 cores.
"""

from __future__ import annotations

import argparse

from harness import Record, ab_rounds, parse, parser
from harness import headline as make_headline


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: N = 10, 4 × 1000 draws, 2 seeds)."""
    ap = parser("adapt", __doc__, "N = 10 only, 4 x 1000 draws, 2 seeds")
    ap.add_argument("--seeds", type=int, default=4)
    a = parse(ap, argv)
    a.widths, a.draws = ([10], 1000) if a.quick else ([10, 100], 5000)
    a.seeds = 2 if a.quick else a.seeds
    return a


def headline(results: dict) -> dict | None:
    """The median ESS/s of ``U`` with two pilots over one, at N = 10."""
    return make_headline("laplace-is ESS/s of U, 2 pilots / 1, Fig. 2c N = 10",
                         results["widths"]["10"]["ess_per_second_ratio"], "x")


if __name__ == "__main__":
    ARGS = parse_args()  # before JAX loads: --help answers at once and writes nothing

import os  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import bayes_attn as ba  # noqa: E402
from bayes_attn import markov  # noqa: E402
from bayes_attn.samplers import laplace  # noqa: E402


def call(problem, rounds: int, seed: int, draws: int) -> dict:
    """One ``laplace-is`` call with ``rounds`` pilots: wall seconds, ESS of ``U``, its diagnostics and draws."""
    net, x, y, xt = problem
    laplace.ADAPT_ROUNDS = rounds
    load = os.getloadavg()
    t0 = time.perf_counter()
    settings = ba.SamplerSettings(name="laplace-is", num_chains=4, num_samples=draws, seed=seed)
    post = ba.sample_posterior(net, x, y, temperature=0.01, x_test=xt, sampler=settings, progress_bar=False)
    wall = time.perf_counter() - t0
    s = post.summary()
    ess = float(s.table[s.table.index.str.startswith("U[")]["ess_bulk"].min())
    a = post.tree.attrs
    return {"rounds": rounds, "seed": seed, "wall_seconds": wall, "min_ess_U": ess, "ess_per_second_U": ess / wall,
            "pareto_k": float(a["pareto_k"]), "is_ess": float(a["is_ess"]), "adapted": int(a["adapted"]),
            "pilot_draws": int(a["pilot_draws"]), "load_before": load,
            "U": post.tree["posterior"]["U"].values}


def width(N: int, a: argparse.Namespace) -> dict:
    """One pilot against two at width ``N``, alternating over the seeds."""
    task, net = markov.fig2c(width=N)
    x, y, xt, _ = task.generate()
    problem = (net, x, y, xt[:100])
    call(problem, 2, 0, a.draws)  # compiles
    rows = ab_rounds({1: lambda r: call(problem, 1, r + 1, a.draws), 2: lambda r: call(problem, 2, r + 1, a.draws)},
                     a.seeds)
    runs = [row["values"][k] for row in rows for k in ((1, 2) if row["first"] == 1 else (2, 1))]
    for r in runs:
        print(f"N={N:4d} rounds {r['rounds']} seed {r['seed']}: {r['wall_seconds']:5.1f} s  ESS(U) "
              f"{r['min_ess_U']:6.0f}  ESS/s {r['ess_per_second_U']:6.1f}  k {r['pareto_k']:.2f}  IS-ESS "
              f"{r['is_ess']:6.0f}  moved {r['adapted']}  load {r['load_before'][0]:.1f}", flush=True)
    same = all(np.array_equal(row["values"][1]["U"], row["values"][2]["U"]) for row in rows)
    for r in runs:
        del r["U"]
    by = {k: [r for r in runs if r["rounds"] == k] for k in (1, 2)}
    med = {k: {m: float(np.median([r[m] for r in v])) for m in ("wall_seconds", "min_ess_U", "ess_per_second_U")}
           for k, v in by.items()}
    ratio = med[2]["ess_per_second_U"] / med[1]["ess_per_second_U"]
    print(f"N={N}: median ESS/s {med[1]['ess_per_second_U']:.1f} (1 round) -> {med[2]['ess_per_second_U']:.1f} "
          f"(2 rounds), x{ratio:.2f}; same draws: {same}", flush=True)
    return {"runs": runs, "median": med, "ess_per_second_ratio": ratio, "same_draws": same}


def main(a: argparse.Namespace) -> dict:
    """Every width, then the envelope."""
    record = Record(a, chains=4)
    results = {"widths": {str(N): width(N, a) for N in a.widths}}
    record.write(results, headline=headline(results))
    return results


if __name__ == "__main__":
    main(ARGS)
