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
import os
import tempfile
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import bayes_attn as ba  # noqa: E402
from bayes_attn import markov  # noqa: E402
from bayes_attn.samplers import laplace  # noqa: E402
from record import write_record  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def call(problem, rounds: int, seed: int, draws: int) -> dict:
    net, x, y, xt = problem
    laplace.ADAPT_ROUNDS = rounds
    load = os.getloadavg()
    t0 = time.perf_counter()
    post = ba.sample_posterior(net, x, y, temperature=0.01, x_test=xt, sampler="laplace-is", num_chains=4,
                               num_samples=draws, seed=seed, progress_bar=False)
    wall = time.perf_counter() - t0
    s = post.summary()
    ess = float(s.table[s.table.index.str.startswith("U[")]["ess_bulk"].min())
    a = post.tree.attrs
    return {"rounds": rounds, "seed": seed, "wall_seconds": wall, "min_ess_U": ess, "ess_per_second_U": ess / wall,
            "pareto_k": float(a["pareto_k"]), "is_ess": float(a["is_ess"]), "adapted": int(a["adapted"]),
            "pilot_draws": int(a["pilot_draws"]), "load_before": load,
            "U": post.tree["posterior"]["U"].values}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    widths, draws, seeds = ((10,), 1000, 2) if a.quick else ((10, 100), 5000, a.seeds)
    record = {"settings": {"draws": draws, "chains": 4, "seeds": seeds}, "widths": {}}
    for N in widths:
        task, net = markov.fig2c(width=N)
        x, y, xt, _ = task.generate()
        problem = (net, x, y, xt[:100])
        call(problem, 2, 0, draws)  # compiles
        runs = []
        for seed in range(1, seeds + 1):
            for rounds in ((1, 2) if seed % 2 else (2, 1)):
                runs.append(call(problem, rounds, seed, draws))
                r = runs[-1]
                print(f"N={N:4d} rounds {rounds} seed {seed}: {r['wall_seconds']:5.1f} s  ESS(U) {r['min_ess_U']:6.0f}  "
                      f"ESS/s {r['ess_per_second_U']:6.1f}  k {r['pareto_k']:.2f}  IS-ESS {r['is_ess']:6.0f}  "
                      f"moved {r['adapted']}  load {r['load_before'][0]:.1f}", flush=True)
        same = all(np.array_equal(p["U"], q["U"]) for p, q in zip(runs[::2], runs[1::2]))
        for r in runs:
            del r["U"]
        by = {k: [r for r in runs if r["rounds"] == k] for k in (1, 2)}
        med = {k: {m: float(np.median([r[m] for r in v])) for m in ("wall_seconds", "min_ess_U", "ess_per_second_U")}
               for k, v in by.items()}
        ratio = med[2]["ess_per_second_U"] / med[1]["ess_per_second_U"]
        print(f"N={N}: median ESS/s {med[1]['ess_per_second_U']:.1f} (1 round) -> {med[2]['ess_per_second_U']:.1f} "
              f"(2 rounds), x{ratio:.2f}; same draws: {same}", flush=True)
        record["widths"][str(N)] = {"runs": runs, "median": med, "ess_per_second_ratio": ratio, "same_draws": same}
    write_record((a.out or (Path(tempfile.mkdtemp()) if a.quick else RESULTS)) / "adapt.json", record)


if __name__ == "__main__":
    main()
