"""Benchmark: what a guided sampler compiles on its first calls, this code against an earlier copy.

A guided call (``laplace-is``, ``laplace-mh``: docs/theory.md §9) runs three vectorised programs: the
proposals of its pilot, those it keeps, and the fresh draws of ``f`` for repeated copies. Where each ran in
batches of ``min(most, 2^⌈log₂ count⌉)``, a pilot or a count of repeats below the batch size compiled a program
of its own size; with one batch size per problem (``samplers.base.map_batches``, ``batch_size``) each program
compiles once. The effect is largest for small runs: quick looks, tests, tiny networks.

Each worker is a fresh Python process (no persistent compilation cache: ``BAYES_ATTN_NO_COMPILE_CACHE``) on one
problem, making in order: ``laplace-is`` 2 × 500 (first call), ``laplace-is`` 2 × 500 at another seed (second
call), ``laplace-mh`` 2 × (100 + 500), ``laplace-is`` 4 × 5000. Per call: wall seconds, JAX compile seconds
(:class:`timing.CompileTimer`) and the number of backend compilations, ``k̂`` and the mean of ``U`` (the two
codes draw alike up to the batching). Problems: Fig. 2c at N = 100 (P = 100, 100 test inputs, float64) and a
small network (heads (2, 2), N = 12, P = 8, float64). The codes alternate, ``--rounds`` each.

Run (about 6 min on 2 cores with ``--old``)::

    git worktree add /tmp/old <commit> && .venv/bin/python benchmarks/bench_guided_compiles.py --old /tmp/old

Output: ``benchmarks/results/guided_compiles.json`` (``--quick``: one round, a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from harness import REPO, Record, alternated, parse, parser, run_worker
from harness import headline as make_headline

CALLS = (("laplace-is", 2, 500, 1), ("laplace-is", 2, 500, 2), ("laplace-mh", 2, 500, 3), ("laplace-is", 4, 5000, 4))


def problem(name: str):
    """``(net, x, y, x_test, temperature)`` of the problem ``name``."""
    import numpy as np

    from bayes_attn import calibration
    from bayes_attn.tasks import markov

    if name == "fig2c N=100":
        task, net = markov.fig2c(width=100)
        x, y, xt, _ = task.generate()
        return net, x, y, xt[:100], 0.01
    net, x, xt = calibration.random_problem((2, 2), width=12, N0=4, T=3, P=8, P_test=2, seed=0)
    return net, x, np.random.default_rng(1).normal(size=8), xt, 0.1


def worker(name: str) -> dict:
    """The calls of :data:`CALLS` in this fresh process: wall and compile seconds, programs compiled."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np
    from harness import CompileTimer

    import bayes_attn as ba

    timer = CompileTimer()
    net, x, y, xt, T = problem(name)
    rows = []
    for sampler, chains, draws, seed in CALLS:
        n0, t0 = timer.compilations, time.perf_counter()
        post = ba.sample_posterior(net, x, y, temperature=T, x_test=xt,
                                   sampler=ba.SamplerSettings(name=sampler, num_chains=chains, num_warmup=100,
                                                              num_samples=draws, seed=seed),
                                   progress_bar=False)
        t1 = time.perf_counter()
        rows.append({"sampler": sampler, "chains": chains, "draws": draws, "seed": seed, "wall_seconds": t1 - t0,
                     "compile_seconds": timer.seconds_in(t0, t1), "compilations": timer.compilations - n0,
                     "pareto_k": float(post.tree.attrs.get("pareto_k", float("nan"))),
                     "U_mean": np.asarray(post.tree["posterior"]["U"].mean(("chain", "draw"))).tolist()})
    return {"problem": name, "calls": rows}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: one round of the small network)."""
    ap = parser("guided_compiles", __doc__, "one round of the small network")
    ap.add_argument("--old", type=Path, help="folder holding an earlier bayes_attn package, run alternately")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    return parse(ap, argv)


def headline(results: dict) -> dict | None:
    """This code's first ``laplace-is`` call on the small network: programs compiled."""
    key = next(k for k in results["summary"] if k.startswith("small: call 1 "))
    return make_headline(f"programs compiled, {key}", results["summary"][key]["new"]["compilations"], "programs")


def summarise(runs: list[dict], problems: list[str], labels: list[str]) -> dict:
    """Per problem, call and code the best process's wall and compile seconds and its programs compiled."""
    summary = {}
    for name in problems:
        for i, (sampler, chains, draws, _) in enumerate(CALLS):
            key = f"{name}: call {i + 1} {sampler} {chains} x {draws}"
            summary[key] = {label: {m: min(run["calls"][i][m] for run in runs
                                           if run["code"] == label and run["problem"] == name)
                                    for m in ("wall_seconds", "compile_seconds", "compilations")}
                            for label in labels}
            if "old" in labels:
                summary[key]["wall old/new"] = summary[key]["old"]["wall_seconds"] / summary[key]["new"]["wall_seconds"]
    return summary


def main(argv: list[str] | None = None) -> dict:
    """The workers, alternating codes and problems; the summary; the envelope."""
    a = parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker)))
        return {}
    record = Record(a, description="guided samplers' first calls: compilations and wall time, fresh process per run",
                    timing="summary: best process per code, problem and call")
    trees = {"new": REPO} | ({"old": a.old.resolve()} if a.old else {})
    problems = ["small"] if a.quick else ["small", "fig2c N=100"]
    runs = []
    for r, label in alternated(1 if a.quick else a.rounds, trees):
        for name in problems:
            res = run_worker(__file__, [name], trees[label], BAYES_ATTN_NO_COMPILE_CACHE="1")
            runs.append({"code": label, "round": r, **res})
            for c in res["calls"]:
                print(f"round {r} {label:3s} {name:12s} {c['sampler']:10s} {c['chains']} x {c['draws']:5d}: "
                      f"{c['wall_seconds']:6.1f} s, compiling {c['compile_seconds']:5.1f} s "
                      f"({c['compilations']:3d} programs)  load {res['load_before'][0]:.1f}", flush=True)
    results = {"summary": summarise(runs, problems, list(trees)), "runs": runs}
    print(json.dumps(results["summary"], indent=1))
    record.write(results, headline=headline(results))
    return results


if __name__ == "__main__":
    main()
