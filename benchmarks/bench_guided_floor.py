"""Benchmark: how far the guided samplers are from their floor, the dense linear algebra every draw needs
(docs/theory.md §9).

Fig. 2c at N = 100 (``markov.fig2c``: 4 paths, P = 100, 100 test inputs, temperature 0.01, float64). A
``laplace-is`` draw costs one evaluation of ``S`` (a ``P × P`` Cholesky factorisation of the kernel), and the
exact draw of ``f`` given ``U`` made with it solves with the same factor (before, the draw of ``f`` factorised
again), so one factorisation per draw bounds its speed from below. Measured in one process, in alternated
rounds, after compilation:

- ``S``: 20 000 proposals and their exact log weights (``samplers._laplace.propose``), per draw;
- ``S and f``: the same with ``f_train``, ``f_test`` drawn with each (``propose(..., inputs)``, what the
  samplers run), per draw;
- ``conditional``: ``f_train``, ``f_test`` for 20 000 draws of ``U`` on their own (``samplers.conditional_outputs``,
  the NUTS samplers' draws and ``laplace-is``'s repeated copies), per draw;
- ``cholesky``: one batched ``P × P`` Cholesky factorisation (jitted, batches of 1024), per matrix
  (these three inside one BLAS thread (``harness.one_blas_thread_here``), as the library runs them);
- ``laplace-is`` and ``wishart`` 4 × (500 + 2000) through ``sample_posterior`` (second calls), with their
  ESS of ``U``.

Printed: each phase per draw in Cholesky units, and the bound on ``laplace-is``'s ESS/s over ``wishart``'s if
a draw cost exactly one factorisation and nothing else (same ESS per draw).

The image scale (the landed Fig. 3 model's shapes: 16 paths, P = 600, N0 = 64, float32, N = 10) is bounded by
the kernel itself: forming ``K(U) = Φ Φᵀ`` (``Φ`` ``[P, r N0]``, ``r = 10``: ``2 P² r N0`` flops) costs more
than its factorisation. Measured: one ``Φ Φᵀ`` product and one ``P × P`` Cholesky, against one gradient of the
``wishart`` potential (ξ form) on random inputs of those shapes (``benchmarks/bench_kernel_forms.py``'s
``problem``), and the sampling time that gradient gives for ``prune``'s N = 10 setting (4 × (150 + 350) draws
at 22 leapfrog steps per draw, as measured on the landed model).

    .venv/bin/python benchmarks/bench_guided_floor.py [--rounds 3] [--quick]

Output: ``benchmarks/results/guided_floor.json`` (``--quick``: 2000 proposals, 4 × (50 + 50) draws, the image
case at heads (2, 2), P = 120, N0 = 16; a temporary folder). ~3 min on 2 quiet cores.
"""

from __future__ import annotations

import argparse

from harness import Record, parse, parser
from harness import headline as make_headline


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: tiny sizes)."""
    ap = parser("guided_floor", __doc__, "2000 proposals, 4 x (50 + 50) draws, a small image-scale case")
    ap.add_argument("--rounds", type=int, default=3)
    return parse(ap, argv)


def headline(results: dict) -> dict | None:
    """A ``laplace-is`` proposal with its draw of ``f``, in batched ``P × P`` Cholesky factorisations (Fig. 2c)."""
    return make_headline("laplace-is draw (S and f) in P x P Choleskys, Fig. 2c N = 100",
                         results["fig2c"]["in_cholesky_units"]["S and f"], "Choleskys")


if __name__ == "__main__":
    ARGS = parse_args()  # before JAX loads: --help answers at once and writes nothing

import os  # noqa: E402
import statistics  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from bench_guided import measure  # noqa: E402  (benchmarks/bench_guided.py)
from harness import one_blas_thread_here, times, x64  # noqa: E402

from bayes_attn import markov  # noqa: E402
from bayes_attn.samplers import _laplace as laplace  # noqa: E402
from bayes_attn.samplers import conditional_outputs, prepare  # noqa: E402

NUTS_STEPS_PER_DRAW = 22.0
"""Leapfrog steps per draw of ``prune``'s N = 10 ``wishart`` runs on the landed Fig. 3 models (README, Fig. 3:
15-23)."""


def timed(fn, reps: int = 1) -> float:
    """Median seconds of ``fn()`` (its result blocked on) over ``reps`` calls."""
    return statistics.median(times(lambda: jax.block_until_ready(fn()), reps))


def phase_rounds(phases: dict, rounds: int, reps: int = 1) -> dict[str, float]:
    """Median seconds of one call of each phase ``fn(r)`` (``r``: the round; ``-1``: the untimed compiling call),
    the phases taking turns within each of ``rounds`` rounds."""
    for fn in phases.values():
        jax.block_until_ready(fn(-1))
    times = {name: [] for name in phases}
    for r in range(rounds):
        for name, fn in phases.items():
            times[name].append(timed(lambda fn=fn, r=r: fn(r), reps))
    return {name: float(np.median(v)) for name, v in times.items()}


def spd_batch(n: int, P: int, dtype) -> jax.Array:
    """``n`` random symmetric positive definite ``P × P`` matrices."""
    a = np.random.default_rng(0).normal(size=(n, P, P))
    return jnp.asarray(a @ a.transpose(0, 2, 1) / P + np.eye(P), dtype)


def fig2c(rounds: int, quick: bool) -> dict:
    """The per-draw phases against one Cholesky, and the two samplers' calls, on Fig. 2c at N = 100."""
    task, net = markov.fig2c(width=100)
    x, y, xt, _ = task.generate()
    inputs = prepare(net, x, y, xt[:100], 0.01, "float64")
    g = laplace.guide(inputs)
    count = 2000 if quick else 20000
    chol = jax.jit(lambda a: jnp.linalg.cholesky(a))
    mats = spd_batch(1024, y.shape[0], jnp.float64)
    U = laplace.observables_of(g, laplace.propose(g, jax.random.key(0), count)[0].reshape(4, count // 4, -1))["U"]
    phases = {"S": lambda r: laplace.propose(g, jax.random.key(2 + r), count),
              "S and f": lambda r: laplace.propose(g, jax.random.key(2 + r), count, inputs),
              "conditional": lambda r: conditional_outputs(U, jax.random.key(2 + r), inputs),
              "cholesky": lambda r: chol(mats)}
    per = {"S": count, "S and f": count, "conditional": count, "cholesky": mats.shape[0]}
    with one_blas_thread_here():  # as the library runs them (one BLAS thread per call)
        sec = {name: s / per[name] for name, s in phase_rounds(phases, rounds).items()}
    settings = {"laplace-is": dict(num_chains=4, num_samples=count // 4),
                "wishart": dict(num_chains=4, num_warmup=50 if quick else 500, num_samples=50 if quick else 2000)}
    calls = {}
    for name, kw in settings.items():
        measure(net, x, y, xt[:100], 0.01, name, kw, 0)  # compiles
        calls[name] = measure(net, x, y, xt[:100], 0.01, name, kw, 1)
    lis, w = calls["laplace-is"], calls["wishart"]
    ess_per_draw = lis["min_ess_U"] / count
    bound = ess_per_draw / sec["cholesky"]
    out = {"seconds_per_draw": sec, "in_cholesky_units": {k: v / sec["cholesky"] for k, v in sec.items()},
           "laplace-is": {k: lis[k] for k in ("wall_seconds", "min_ess_U", "ess_per_second_U", "pareto_k")},
           "wishart": {k: w[k] for k in ("wall_seconds", "min_ess_U", "ess_per_second_U", "max_rhat")},
           "laplace-is seconds per draw, all in": lis["wall_seconds"] / count,
           "ESS of U per laplace-is draw": ess_per_draw,
           "bound: ESS/s at one Cholesky per draw": bound,
           "ratio laplace-is/wishart ESS/s, measured": lis["ess_per_second_U"] / w["ess_per_second_U"],
           "ratio laplace-is/wishart ESS/s, bound": bound / w["ess_per_second_U"],
           "load": os.getloadavg()}
    for k, v in out.items():
        print(f"fig2c N=100 {k}: {v}", flush=True)
    return out


def image(rounds: int, quick: bool) -> dict:
    from bench_kernel_forms import gradient_fn, problem  # benchmarks/bench_kernel_forms.py

    from bayes_attn.theory._bartlett import factor_shapes

    cfg = dict(heads=(2, 2), P=120, N0=16, T=8, width=10) if quick else dict(heads=(4, 4), P=600, N0=64, T=8, width=10)
    net, x, y = problem(**cfg)
    P, N0, r = cfg["P"], cfg["N0"], factor_shapes(net.heads, net.widths)[0][1]
    with x64(False), one_blas_thread_here():
        inputs = prepare(net, x, y, None, 0.5, "float32")
        grad = gradient_fn(inputs, "xi")[0]
        phi = jnp.asarray(np.random.default_rng(0).normal(size=(P, r * N0)) / np.sqrt(r * N0), jnp.float32)
        gram = jax.jit(lambda f: f @ f.T)
        chol = jax.jit(lambda a: jnp.linalg.cholesky(a))
        K = gram(phi) + jnp.eye(P, dtype=jnp.float32)
        sec = phase_rounds({"gram": lambda r: gram(phi), "cholesky": lambda r: chol(K), "gradient": lambda r: grad()},
                           rounds, reps=5)
    gradients = 4 * (150 + 350) * NUTS_STEPS_PER_DRAW
    out = {"shapes": {"P": P, "D": net.D, "N0": N0, "N": 10, "r": r}, "seconds": sec,
           "gram GFLOP/s": 2 * P * P * r * N0 / sec["gram"] / 1e9,
           "gradient in gram units": sec["gradient"] / sec["gram"],
           "cholesky in gram units": sec["cholesky"] / sec["gram"],
           "prune N=10 sampling at this gradient, seconds": gradients * sec["gradient"],
           "load": os.getloadavg()}
    for k, v in out.items():
        print(f"image N=10 {k}: {v}", flush=True)
    return out


def main(a: argparse.Namespace) -> dict:
    """Fig. 2c and the image scale; the envelope."""
    record = Record(a)
    results = {"fig2c": fig2c(a.rounds, a.quick), "image": image(a.rounds, a.quick)}
    record.write(results, headline=headline(results))
    return results


if __name__ == "__main__":
    main(ARGS)
