"""Benchmark: exact sampling at the image scale's N = 10, each lever side by side (issue 63, docs/theory.md §9).

Problem: the default spec's trained models (``inference/results/fig3/rotations`` and its ``seed1``, ``seed2``;
never retrained: 16 paths, P = 600, 200 test episodes' queries, float32), the network at N = 10 and the
temperature each run's scan chose on validation episodes, the theory corrected at finite width (§8) as ``prune``
compares it. One experiment point per run and lever (:func:`bayes_attn.experiment.evaluate`, the theory solved
once per run before), each in a fresh process with the compilation cache off (a cold start, as a user's first
run). Levers (``wishart`` from the expansion's mode with its metric, 4 chains, ``--levers`` picks some):

- ``fixed``: 150 warm-up + 350 draws, tree depth 5: what the shipped runs did;
- ``blocks``: 150 warm-up, then blocks of 50 draws until R-hat <= 1.01 and bulk ESS >= 400 (at most 350);
- ``blocks-warmup75``: the same after 75 warm-up iterations (the metric comes from the expansion; warm-up adapts
  the step size only);
- ``blocks-depth4``: the same at tree depth 4;
- ``blocks-accept65``: ``blocks`` with the step size adapted to an acceptance of 0.65 (the default is 0.8):
  longer steps, fewer per draw where the trees fill their depth;
- ``blocks-precision``: blocks until the comparison's precision (every check's Monte-Carlo bound at most its
  tolerance, ``target_precision = 1``) as well, at most 750 draws;
- ``blocks-float64``: ``blocks`` in float64;
- ``rule``: blocks of 50 until the convergence rule holds (``bayes_attn.diagnostics``: each group's R-hat within
  its bound, bulk and tail ESS of 800 with 4 chains) and the checks' own statistics converged, at most 1200 s;
- ``rule-2chains``: the same with 2 chains (the rule asks 400), one after the other (``chain_method="auto"`` in a
  process of one CPU device, as the library's API runs them);
- ``rule-2chains-parallel``: the same, the chains side by side, one CPU device each (as the command runs them:
  ``bayes-attn`` sets a device per chain); ``rule-2chains-parallel-warmup50``: after 50 warm-up iterations (the
  metric comes from the expansion; warm-up adapts the step size only).

Measured per point: the sampling stage's wall time (compilation included), draws per chain, max R-hat and min bulk
ESS over every observable, whether the targets were met (the stopping record), the verdict, the load average.

Run alone (~5 min per run and lever on 2 cores)::

    .venv/bin/python benchmarks/bench_image_n10.py [--runs rotations rotations/seed1 ...] [--levers fixed blocks]
                                                   [--quick]

Output: ``benchmarks/results/image_n10.json`` (``--quick``: a tiny random problem, two levers, a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness import Record, parse, parser
from harness import headline as make_headline

ROOT = Path(__file__).resolve().parents[1]
LEVERS = {
    "fixed": dict(num_warmup=150, num_samples=350, max_tree_depth=5),
    "blocks": dict(num_warmup=150, num_samples=50, max_tree_depth=5, target_ess=400.0, max_samples=350),
    "blocks-warmup75": dict(num_warmup=75, num_samples=50, max_tree_depth=5, target_ess=400.0, max_samples=350),
    "blocks-depth4": dict(num_warmup=150, num_samples=50, max_tree_depth=4, target_ess=400.0, max_samples=350),
    "blocks-accept65": dict(num_warmup=150, num_samples=50, max_tree_depth=5, target_accept=0.65, target_ess=400.0,
                            max_samples=350),
    "blocks-precision": dict(num_warmup=150, num_samples=50, max_tree_depth=5, target_ess=400.0,
                             target_precision=1.0, max_samples=750),
    "blocks-float64": dict(num_warmup=150, num_samples=50, max_tree_depth=5, target_ess=400.0, max_samples=350,
                           dtype="float64"),
    "rule": dict(num_warmup=150, num_samples=50, max_tree_depth=5, max_seconds=1200.0),
    "rule-2chains": dict(num_warmup=150, num_samples=50, max_tree_depth=5, max_seconds=1200.0, num_chains=2),
    "rule-2chains-parallel": dict(num_warmup=150, num_samples=50, max_tree_depth=5, max_seconds=1200.0,
                                  num_chains=2, chain_method="parallel"),
    "rule-2chains-parallel-warmup50": dict(num_warmup=50, num_samples=50, max_tree_depth=5, max_seconds=1200.0,
                                           num_chains=2, chain_method="parallel"),
}
"""Each lever's sampler settings (over ``wishart``, 4 chains, float32, seed 0)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = parser("image_n10", __doc__, "a tiny random problem, levers fixed and blocks")
    ap.add_argument("--runs", nargs="+", default=["rotations", "rotations/seed1", "rotations/seed2"],
                    help="prune folders under inference/results/fig3")
    ap.add_argument("--levers", nargs="+", choices=list(LEVERS), default=list(LEVERS))
    ap.add_argument("--worker", nargs=2, metavar=("RUN", "LEVER"), help=argparse.SUPPRESS)
    return parse(ap, argv)


def problem(run: str, quick: bool):
    """``(point settings)``: the network at N = 10, theory episodes, test episodes, temperature, theory."""
    from bayes_attn import calibration
    from bayes_attn.theory import solve_theory

    if quick:
        import numpy as np

        net, x, xt = calibration.random_problem((2, 2), width=3, N0=4, T=3, P=20, P_test=4, seed=0)
        y = np.sign(np.random.default_rng(1).normal(size=20))
        yt = np.array([1.0, -1.0, 1.0, -1.0])
        T = 0.1
    else:
        from bayes_attn.oneshot import (
            datasets,
            evaluation_episodes,
            load_oneshot_spec,
            load_pruning,
            to_network,
            train_model,
        )

        folder = ROOT / "inference/results/fig3" / run
        spec = load_oneshot_spec(folder / "spec.toml")
        T = float(load_pruning(folder).temperatures.finite_width[10])
        sets = datasets(spec, ROOT / "data/omniglot")  # the run's spec.toml names it relative to the repository
        ev = evaluation_episodes(spec, sets)
        model = train_model(spec, folder, sets=sets, evaluation=ev)
        net, _ = to_network(model.params, model.config, width=10, variances=spec.theory.variances)
        x, y, xt, yt = ev.theory_train.x, ev.theory_train.y, ev.test.x, ev.test.y
    theory = solve_theory(net, x, y, temperature=T, correction="laplace")
    return net, x, y, xt, yt, T, theory


def worker(run: str, lever: str, quick: bool) -> dict:
    """One point in this (fresh) process: the sampling stage timed, its diagnostics and verdict."""
    import bayes_attn as ba
    from bayes_attn import experiment
    from bayes_attn.samplers import Stopping

    net, x, y, xt, yt, T, theory = problem(run, quick)
    settings = dict(LEVERS[lever])
    if quick:
        settings |= dict(num_warmup=20, num_samples=10 if "max_samples" in settings else 30, max_tree_depth=3)
        settings["max_samples"] = 40 if "max_samples" in settings else None
    cfg = ba.SamplerSettings(name="wishart", num_chains=4, seed=0, dtype="float32").replace(**settings)
    point = experiment.Point(net, x, y, xt, yt, T, correction="laplace", sampler=cfg)
    load = os.getloadavg()[0]
    result = experiment.evaluate(point, theory=theory)
    s = result.posterior.summary()
    stop = s.stopping or Stopping(1, cfg.num_samples, result.sampling_seconds, not s.failures())
    return {"run": run, "lever": lever, "seconds": result.sampling_seconds, "draws_per_chain": stop.draws,
            "blocks": stop.blocks, "targets_met": stop.met, "unmet": list(stop.unmet),
            "max_rhat": s.max_rhat, "min_ess_bulk": float(s.table["ess_bulk"].min()),
            "min_ess_bulk_U": float(s.table[s.table.index.str.startswith("U[")]["ess_bulk"].min()),
            "mean_steps": s.mean_steps, "chains": cfg.num_chains, "rewarmed": list(stop.rewarmed),
            "verdict": result.outcome.value, "reasons": list(result.outcome.reasons),
            "load_before": load, "load_after": os.getloadavg()[0], "settings": cfg.to_dict()}


def measure(run: str, lever: str, quick: bool) -> dict:
    """:func:`worker` in a fresh process, the compilation cache off: a cold start."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), BAYES_ATTN_NO_COMPILE_CACHE="1", JAX_ENABLE_COMPILATION_CACHE="false")
    if LEVERS[lever].get("chain_method") == "parallel":  # a CPU device per chain, as the command sets them
        chains = LEVERS[lever].get("num_chains", 4)
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={chains}".strip()
    args = [sys.executable, __file__, "--worker", run, lever] + (["--quick"] if quick else [])
    t0 = time.perf_counter()
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{run} {lever}: {out.stderr[-2000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1]) | {"process_seconds": time.perf_counter() - t0}
    print(f"{run:18s} {lever:17s} {r['seconds']:6.0f} s  {r['draws_per_chain']:4d} draws/chain  R-hat "
          f"{r['max_rhat']:.4f}  ESS {r['min_ess_bulk']:6.0f}  targets {'met' if r['targets_met'] else 'not met'}  "
          f"{r['verdict']}  load {r['load_before']:.1f}", flush=True)
    return r


def main(a: argparse.Namespace) -> dict:
    runs = ["tiny"] if a.quick else a.runs
    levers = ["fixed", "blocks"] if a.quick else a.levers
    record = Record(a, runs=runs, levers={k: LEVERS[k] for k in levers})
    results: dict = {"points": []}
    for run in runs:
        for lever in levers:
            results["points"].append(measure(run, lever, a.quick))
            record.write(results, headline=headline(results))  # after each point: a long run keeps its parts
    return results


def headline(results: dict) -> dict | None:
    """The largest sampling time of the ``blocks`` lever over the runs measured."""
    times = [p["seconds"] for p in results["points"] if p["lever"] == "blocks"]
    return make_headline("slowest run's sampling at N = 10, lever blocks", max(times), "s") if times else None


if __name__ == "__main__":
    ARGS = parse_args()
    if ARGS.worker:
        print(json.dumps(worker(*ARGS.worker, ARGS.quick)))
    else:
        main(ARGS)
