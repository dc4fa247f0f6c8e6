"""Benchmark: ``sampler="auto"`` solving the finite-width expansion once (shared, ``laplace.GuideOnce``) against
once per sampler it tries (what it did before), side by side (docs/theory.md §9).

Problem: the landed Fig. 3 model of ``inference/results/fig3`` (16 paths, P = 600, float32, its
validation-chosen temperature) at N = 10, where ``laplace-is``'s k̂ fails and ``auto`` goes on to ``wishart``
(started at the expansion's mode), and the Fig. 2c network (``markov.fig2c``, P = 100, T = 0.01, float64) at
N = 10. Short chains (``auto`` with 2 × 200 guided draws, ``wishart`` 2 × (50 + 50)): the benchmark measures
what the expansion costs inside ``auto``, not the samplers' ESS.

In one process, after one untimed call that compiles, the two variants alternate for ``--rounds`` rounds
(default 2). Printed and written: wall time of each call, the number of expansion solves, the time of one
solve (``laplace.guide``, timed alone), the ratio of wall times (once-per-sampler over shared), load average.

Run alone (~10 min on 2 quiet cores)::

    .venv/bin/python benchmarks/bench_auto_guide.py [--rounds 2] [--quick]

Output: ``benchmarks/results/auto_guide.json`` (``--quick``: a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import bayes_attn as ba  # noqa: E402
from bayes_attn import markov  # noqa: E402
from bayes_attn.precision import x64  # noqa: E402
from bayes_attn.samplers import laplace, prepare, wishart  # noqa: E402
from bench_guided import landed_fig3  # noqa: E402
from record import write_record  # noqa: E402  (benchmarks/record.py)

RESULTS = Path(__file__).resolve().parent / "results"


class Counting:
    """``laplace.guide`` that counts its calls."""

    def __init__(self, real):
        self.real, self.calls = real, 0

    def __call__(self, inputs):
        self.calls += 1
        return self.real(inputs)


class EveryTime(laplace.GuideOnce):
    """The behaviour before: every sampler solves the expansion again."""

    def __call__(self, inputs):
        return laplace.guide(inputs)


def image_problem():
    net, tr, te, chosen = landed_fig3()
    return net, tr.x, tr.y, te.x[:100], float(chosen[10]), "float32"


def fig2c_problem():
    task, net = markov.fig2c(width=10)
    x, y, xt, _ = task.generate()
    return net, x, y, xt[:100], 0.01, "float64"


def one_call(problem, variant, n: int, seed: int) -> dict:
    net, x, y, xt, T, dtype = problem
    counting = Counting(laplace.guide)
    laplace.guide = wishart.guide = counting
    saved = laplace.GuideOnce
    if variant == "every sampler":
        laplace.GuideOnce = EveryTime
    try:
        t0 = time.perf_counter()
        post = ba.sample_posterior(net, x, y, temperature=T, x_test=xt, sampler="auto", num_chains=2,
                                   num_warmup=n // 4, num_samples=n // 4, guided_samples=n, seed=seed, dtype=dtype,
                                   progress_bar=False)
        wall = time.perf_counter() - t0
    finally:
        laplace.guide = wishart.guide = counting.real
        laplace.GuideOnce = saved
    tried = json.loads(post.tree.attrs["auto"])
    return {"variant": variant, "wall_seconds": wall, "solves": counting.calls,
            "tried": [(t["sampler"], round(t["seconds"], 2)) for t in tried], "used": post.sampler}


def guide_seconds(problem) -> float:
    net, x, y, xt, T, dtype = problem
    with x64(dtype == "float64"):
        inputs = prepare(net, x, y, None, T, dtype)
        t0 = time.perf_counter()
        jax.block_until_ready(laplace.guide(inputs).chol)
    return time.perf_counter() - t0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="Fig. 2c only, one round, output to a temporary folder")
    a = ap.parse_args(argv)
    record = {"settings": vars(a), "load_before": os.getloadavg()}
    problems = {"fig2c N=10": (fig2c_problem, 200)} | ({} if a.quick else {"fig3 N=10": (image_problem, 200)})
    for label, (make, n) in problems.items():
        problem = make()
        one_call(problem, "shared", n, seed=99)  # compiles
        solve = guide_seconds(problem)
        calls = []
        for r in range(1 if a.quick else a.rounds):
            for variant in ("every sampler", "shared") if r % 2 == 0 else ("shared", "every sampler"):
                c = one_call(problem, variant, n, seed=r)
                print(f"{label}: {variant:13s} {c['wall_seconds']:6.1f} s  {c['solves']} solves  tried {c['tried']}",
                      flush=True)
                calls.append(c)
        mean = {v: float(np.mean([c["wall_seconds"] for c in calls if c["variant"] == v]))
                for v in ("every sampler", "shared")}
        ratio = mean["every sampler"] / mean["shared"]
        print(f"{label}: one expansion solve {solve:.1f} s; wall every sampler / shared {ratio:.2f} "
              f"({mean['every sampler']:.1f} / {mean['shared']:.1f} s); load {os.getloadavg()}", flush=True)
        record[label] = {"calls": calls, "guide_seconds": solve, "mean_wall": mean, "ratio": ratio,
                         "load": os.getloadavg()}
    folder = Path(tempfile.mkdtemp()) if a.quick else RESULTS
    write_record(folder / "auto_guide.json", record)


if __name__ == "__main__":
    main()
