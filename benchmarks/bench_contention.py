"""Benchmark: the same sampling job and theory solve on a quiet machine and beside one CPU-bound process per core.

Job (as the README's library snippet): the Fig. 2c network at N = 1000
(``markov.fig2c``), P = 100, temperature 0.01, ``sample_posterior(...,
sampler="wishart")`` with 4 chains × (``--warmup`` + ``--draws``) and
otherwise the library's defaults, and a warm ``solve_theory`` (median of 5
solves after one that compiles). Each measurement runs in a fresh Python
process (compilation included in the sampling time, as a user's first call
pays it).

Configurations, measured side by side in one run:

- ``defaults``: the library as it is (one BLAS thread inside each call,
  ``chain_method="auto"`` → sequential on a CPU; :mod:`bayes_attn._internal.threads`);
- ``all_threads``: the behaviour before those defaults: BLAS with one thread
  per core (``OMP_NUM_THREADS`` = cores, which :func:`bayes_attn._internal.threads.limits`
  respects) and ``chain_method="vectorized"``.

Conditions: ``quiet`` (nothing started by the benchmark; other users' load is
whatever it is, so the load average is recorded before every measurement)
and ``busy``: one CPU-bound process per core (``os.cpu_count()``), started
by the benchmark, each ending by itself after ``--burn-limit`` seconds and
killed when the measurement ends. The slowdown busy / quiet is the ratio
that counts; absolute times depend on the machine and its other users.

Run::

    .venv/bin/python benchmarks/bench_contention.py            # results/contention.json
    .venv/bin/python benchmarks/bench_contention.py --quick    # smoke test (tiny job), temp folder
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

from harness import Record, busy_cores, parse, parser
from harness import headline as make_headline

CONFIGS = ("defaults", "all_threads")


def child(config: str, width: int, warmup: int, draws: int, chains: int) -> dict:
    """One measurement in this (fresh) process: the sampling call and the warm theory solves."""
    import numpy as np

    import bayes_attn as ba
    from bayes_attn import markov

    task, net = markov.fig2c(width=width)
    x, y = task.sample(100, np.random.default_rng(0))
    settings = ba.SamplerSettings(name="wishart", num_warmup=warmup, num_samples=draws, num_chains=chains,
                                  chain_method="auto" if config == "defaults" else "vectorized")
    t0 = time.perf_counter()
    post = ba.sample_posterior(net, x, y, temperature=0.01, sampler=settings, progress_bar=False)
    sample_s = time.perf_counter() - t0
    ba.solve_theory(net, x, y, temperature=0.01)  # compiles
    theory = []
    for _ in range(5):
        t0 = time.perf_counter()
        ba.solve_theory(net, x, y, temperature=0.01)
        theory.append(time.perf_counter() - t0)
    return dict(sample_seconds=sample_s, theory_seconds=float(np.median(theory)), theory_all=theory,
                threads=json.loads(post.tree.attrs["threads"]),
                steps_per_draw=float(post.tree["sample_stats"]["n_steps"].mean()))


def measure(config: str, busy: bool, a) -> dict:
    """One measurement in a fresh process, quiet or beside one CPU-bound process per core."""
    env = dict(os.environ)
    if config == "all_threads":
        env["OMP_NUM_THREADS"] = str(os.cpu_count())
    load = os.getloadavg()
    with busy_cores(a.burn_limit) if busy else contextlib.nullcontext(0) as burners:
        cmd = [sys.executable, __file__, "--child", config, "--width", str(a.width), "--warmup", str(a.warmup),
               "--draws", str(a.draws), "--chains", str(a.chains)]
        t0 = time.perf_counter()
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.burn_limit)
        wall = time.perf_counter() - t0
    if res.returncode:
        raise RuntimeError(f"{config} busy={busy} failed:\n{res.stderr[-3000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out |= dict(config=config, condition="busy" if busy else "quiet", load_before=load, process_wall_seconds=wall,
                burners=burners)
    print(f"{config:12s} {out['condition']:5s}  sample {out['sample_seconds']:7.1f} s  theory "
          f"{out['theory_seconds']:.3f} s  load before {load[0]:.1f}  threads {out['threads']}", flush=True)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: N = 10, 20 + 20 draws)."""
    ap = parser("contention", __doc__, "N = 10, 20 + 20 draws")
    ap.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    ap.add_argument("--width", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    ap.add_argument("--burn-limit", type=float, default=1800.0, help="seconds a CPU-bound process lives at most")
    a = parse(ap, argv)
    if a.quick and not a.child:
        a.width, a.warmup, a.draws, a.burn_limit = 10, 20, 20, 300.0
    return a


def headline(results: dict) -> dict | None:
    """The sampling job's slowdown beside busy cores, with the library's defaults."""
    s = results["slowdown"].get("defaults")
    return make_headline("sampling job busy / quiet, defaults", s and s["sample"], "x")


def main(argv: list[str] | None = None) -> dict:
    """Each configuration quiet, then busy; the slowdowns; the envelope."""
    a = parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child, a.width, a.warmup, a.draws, a.chains)))
        return {}
    record = Record(a, network="markov.fig2c", P=100, temperature=0.01, sampler="wishart",
                    note="quiet = no processes started by the benchmark (other users' load as recorded); busy = one "
                         "CPU-bound process per core beside the job")
    runs = []
    for busy in (False, True):  # quiet and busy of each configuration one after the other
        for config in a.configs:
            runs.append(measure(config, busy, a))
    by = {(r["config"], r["condition"]): r for r in runs}
    slowdown = {c: dict(sample=by[c, "busy"]["sample_seconds"] / by[c, "quiet"]["sample_seconds"],
                        theory=by[c, "busy"]["theory_seconds"] / by[c, "quiet"]["theory_seconds"]) for c in a.configs}
    for c, s in slowdown.items():
        print(f"slowdown busy/quiet  {c:12s} sample {s['sample']:.2f}x  theory {s['theory']:.2f}x")
    results = {"runs": runs, "slowdown": slowdown}
    record.write(results, headline=headline(results))
    return results


if __name__ == "__main__":
    main()
