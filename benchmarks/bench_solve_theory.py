"""Benchmark: ``solve_theory`` end to end, warm, on the Fig. 2c network at N = 10, 100, 1000, with its phases.

Per width, in one process after a first (compiling) call, the median of
``--repeats`` timings of:

- ``total``: ``solve_theory(net, x, y, temperature=0.01, basis=basis)`` with the
  kernel basis of these data computed before, as a sweep over widths calls it
  (code older than ``theory.kernel_basis`` kept the last basis itself);
- ``total_new_data``: ``solve_theory`` computing the kernel basis afresh;
- ``setup``: ``make_problem`` computing the kernel basis (attention, ξ, C);
- ``newton``: ``NewtonSolver().minimise`` from the GP point.

``--old DIR`` also runs an earlier copy of the package (e.g. ``git archive
<commit> bayes_attn | tar -x -C DIR``) in alternation with this one, each in a
fresh process, ``--rounds`` times, so that both see the same machine load;
the load average is recorded before every process. Output:
``results/solve_theory.json``.

Run::

    .venv/bin/python benchmarks/bench_solve_theory.py --old /tmp/old_tree --rounds 3

``--quick``: N = 10, one repeat, one round (seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from harness import REPO, Record, alternated, parse, parser, run_worker
from harness import headline as make_headline

WIDTHS = (10, 100, 1000)
TEMPERATURE = 0.01
PHASES = ("total_s", "total_new_data_s", "setup_s", "newton_s")


def worker(repeats: int, widths: list[int]) -> dict:
    """Time the phases in this process (the package on ``sys.path``)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import numpy as np

    from bayes_attn import markov
    from bayes_attn import theory as th

    # an --old copy of the package that kept a module-level basis cache: cleared between timings
    clear = getattr(getattr(th, "objective", None), "clear_basis_cache", lambda: None)
    task, net0 = markov.fig2c(10)
    x, y, _, _ = task.generate()
    given = {"basis": th.kernel_basis(net0, x)} if hasattr(th, "kernel_basis") else {}
    rows = []
    for N in widths:
        net = net0.with_width(N)
        th.solve_theory(net, x, y, temperature=TEMPERATURE)  # compiles (first width) and fills the cache
        t = {"total": [], "total_new_data": [], "setup": [], "newton": []}
        for _ in range(repeats):
            t0 = time.perf_counter()
            sol = th.solve_theory(net, x, y, temperature=TEMPERATURE, **given)
            t["total"].append(time.perf_counter() - t0)
            clear()
            t0 = time.perf_counter()
            th.solve_theory(net, x, y, temperature=TEMPERATURE)
            t["total_new_data"].append(time.perf_counter() - t0)
            clear()
            t0 = time.perf_counter()
            problem = th.make_problem(net, x, y, TEMPERATURE)
            t["setup"].append(time.perf_counter() - t0)
            Us0 = th.gp_order_parameters(net)[0]
            t0 = time.perf_counter()
            th.NewtonSolver().minimise(Us0, problem)
            t["newton"].append(time.perf_counter() - t0)
        rows.append({"N": N, **{f"{k}_s": float(np.median(v)) for k, v in t.items()},
                     "iterations": sol.iterations, "action": sol.action, "U": np.asarray(sol.U).tolist()})
    return {"rows": rows}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: N = 10, one repeat, one round)."""
    ap = parser("solve_theory", __doc__, "N = 10, one repeat, one round")
    ap.add_argument("--old", type=Path, help="folder holding an earlier bayes_attn package, timed alternately")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = parse(ap, argv)
    if a.quick:
        a.widths, a.repeats, a.rounds = [10], 1, 1
    return a


def headline(results: dict) -> dict | None:
    """This code's warm ``solve_theory`` at the largest width (same data, basis given)."""
    N = max(int(k.rsplit("=", 1)[1]) for k in results["summary"] if k.startswith("new N="))
    return make_headline(f"solve_theory warm, Fig. 2c N = {N}", 1e3 * results["summary"][f"new N={N}"]["total_s"], "ms")


def summarise(runs: list[dict], labels: list[str], widths: list[int]) -> dict:
    """Per code and width the best process's median of each phase; with two codes, how far their ``U`` differ."""
    summary = {}
    for label in labels:
        for N in widths:
            rows = [row for run in runs if run["code"] == label for row in run["rows"] if row["N"] == N]
            summary[f"{label} N={N}"] = {k: min(row[k] for row in rows) for k in PHASES}
    if "old" in labels:
        import numpy as np

        for N in widths:
            U = {lab: np.asarray(next(row["U"] for run in runs if run["code"] == lab for row in run["rows"]
                                      if row["N"] == N)) for lab in labels}
            summary[f"max relative U difference new vs old N={N}"] = float(
                np.abs(U["new"] - U["old"]).max() / np.abs(U["old"]).max())
    return summary


def main(argv: list[str] | None = None) -> dict:
    """Time the workers (alternating codes), print them, write the envelope."""
    a = parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.repeats, a.widths)))
        return {}
    record = Record(a, description="solve_theory warm end to end, Fig. 2c network (D=4, P=100, temperature 0.01)",
                    timing="median of repeats per process; summary: best process per code and width")
    trees = {"new": REPO} | ({"old": a.old.resolve()} if a.old else {})
    runs = []
    for r, label in alternated(a.rounds, trees):
        res = run_worker(__file__, ["--repeats", str(a.repeats), "--widths", *map(str, a.widths)], trees[label],
                         OPENBLAS_NUM_THREADS="1")
        runs.append({"code": label, "round": r, **res})
        for row in res["rows"]:
            print(f"round {r} {label:3s} N={row['N']:5d}: total {row['total_s'] * 1e3:6.1f} ms  new data "
                  f"{row['total_new_data_s'] * 1e3:6.1f} ms  setup {row['setup_s'] * 1e3:6.1f} ms  newton "
                  f"{row['newton_s'] * 1e3:6.1f} ms  ({row['iterations']} it)  load {res['load_before'][0]:.1f}",
                  flush=True)
    results = {"summary": summarise(runs, list(trees), a.widths), "runs": runs}
    print(json.dumps(results["summary"], indent=1))
    record.write(results, headline=headline(results))
    return results


if __name__ == "__main__":
    main()
