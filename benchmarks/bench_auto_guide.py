"""Benchmark: what ``sampler="auto"`` costs with the finite-width expansion solved once per call and shared by the
samplers it tries (``laplace.GuideOnce``, docs/theory.md §9): the solves counted, one solve timed alone.

Problem: the landed Fig. 3 model of ``inference/results/fig3`` (16 paths, P = 600, float32, its
validation-chosen temperature) at N = 10, where ``laplace-is``'s k̂ fails and ``auto`` goes on to ``wishart``
(started at the expansion's mode), and the Fig. 2c network (``markov.fig2c``, P = 100, T = 0.01, float64) at
N = 10. Short chains (``auto`` with 2 × 200 guided draws, ``wishart`` 2 × (50 + 50)): the benchmark measures
what the expansion costs inside ``auto``, not the samplers' ESS.

In one process, after one untimed call that compiles, ``--rounds`` timed calls (default 2). Printed and written:
wall time of each call, the number of expansion solves (one per call), the time of one solve (``laplace.guide``,
timed alone), the load average.

``results/auto_guide.json`` (2026-12-02) also holds the comparison with one solve per sampler tried (``every
sampler``: the code of 980889d, before ``GuideOnce``), alternated with the shared solve: at the image scale one
solve instead of two, 121 -> 113 s a call (1.07x); Fig. 2c within noise (0.94x). That code is no longer kept here.

Run alone (~10 min on 2 quiet cores)::

    .venv/bin/python benchmarks/bench_auto_guide.py [--rounds 2] [--quick]

Output: ``benchmarks/results/auto_guide.json`` (``--quick``: Fig. 2c only, one round, a temporary folder).
"""

from __future__ import annotations

import argparse

from harness import Record, parse, parser
from harness import headline as make_headline


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: Fig. 2c only, one round)."""
    ap = parser("auto_guide", __doc__, "Fig. 2c only, one round")
    ap.add_argument("--rounds", type=int, default=2)
    a = parse(ap, argv)
    a.rounds = 1 if a.quick else a.rounds
    return a


def headline(results: dict) -> dict | None:
    """The mean wall time of an ``auto`` call with the expansion shared, on Fig. 2c at N = 10."""
    return make_headline("auto call (expansion shared), Fig. 2c N = 10",
                         results["fig2c N=10"]["mean_wall"]["shared"], "s")


if __name__ == "__main__":
    ARGS = parse_args()  # before JAX loads: --help answers at once and writes nothing

import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from bench_guided import landed_fig3  # noqa: E402
from harness import x64  # noqa: E402

import bayes_attn as ba  # noqa: E402
from bayes_attn import markov  # noqa: E402
from bayes_attn.samplers import _laplace as laplace  # noqa: E402
from bayes_attn.samplers import _wishart as wishart  # noqa: E402
from bayes_attn.samplers import prepare  # noqa: E402


class Counting:
    """``laplace.guide`` that counts its calls."""

    def __init__(self, real):
        self.real, self.calls = real, 0

    def __call__(self, inputs):
        self.calls += 1
        return self.real(inputs)


def image_problem():
    net, tr, te, chosen = landed_fig3()
    return net, tr.x, tr.y, te.x[:100], float(chosen[10]), "float32"


def fig2c_problem():
    task, net = markov.fig2c(width=10)
    x, y, xt, _ = task.generate()
    return net, x, y, xt[:100], 0.01, "float64"


def one_call(problem, n: int, seed: int) -> dict:
    """One ``sampler="auto"`` call: wall seconds, expansion solves, the samplers tried and the one used."""
    net, x, y, xt, T, dtype = problem
    counting = Counting(laplace.guide)
    laplace.guide = wishart.guide = counting
    try:
        t0 = time.perf_counter()
        post = ba.sample_posterior(net, x, y, temperature=T, x_test=xt,
                                   sampler=ba.SamplerSettings(name="auto", num_chains=2, num_warmup=n // 4,
                                                              num_samples=n // 4, guided_samples=n, seed=seed,
                                                              dtype=dtype),
                                   progress_bar=False)
        wall = time.perf_counter() - t0
    finally:
        laplace.guide = wishart.guide = counting.real
    tried = json.loads(post.tree.attrs["auto"])
    return {"variant": "shared", "wall_seconds": wall, "solves": counting.calls,
            "tried": [(t["sampler"], round(t["seconds"], 2)) for t in tried], "used": post.sampler}


def guide_seconds(problem) -> float:
    """Seconds of one expansion solve (``laplace.guide``) alone."""
    net, x, y, xt, T, dtype = problem
    with x64(dtype == "float64"):
        inputs = prepare(net, x, y, None, T, dtype)
        t0 = time.perf_counter()
        jax.block_until_ready(laplace.guide(inputs).chol)
    return time.perf_counter() - t0


def main(a: argparse.Namespace) -> dict:
    """Each problem: a compiling call, one solve timed alone, ``--rounds`` timed calls; then the envelope."""
    record = Record(a)
    problems = {"fig2c N=10": (fig2c_problem, 200)} | ({} if a.quick else {"fig3 N=10": (image_problem, 200)})
    results = {}
    for label, (make, n) in problems.items():
        problem = make()
        one_call(problem, n, seed=99)  # compiles
        solve = guide_seconds(problem)
        calls = []
        for r in range(a.rounds):
            calls.append(one_call(problem, n, seed=r))
            c = calls[-1]
            print(f"{label}: {c['wall_seconds']:6.1f} s  {c['solves']} solves  tried {c['tried']}", flush=True)
        mean = {"shared": float(np.mean([c["wall_seconds"] for c in calls]))}
        print(f"{label}: one expansion solve {solve:.1f} s; auto {mean['shared']:.1f} s a call; load "
              f"{os.getloadavg()}", flush=True)
        results[label] = {"calls": calls, "guide_seconds": solve, "mean_wall": mean, "load": os.getloadavg()}
    record.write(results, headline=headline(results))
    return results


if __name__ == "__main__":
    main(ARGS)
