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
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from record import alternated, run_worker, write_record  # benchmarks/record.py

WIDTHS = (10, 100, 1000)
TEMPERATURE = 0.01
RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent


def worker(repeats: int) -> dict:
    """Time the phases in this process (the package on ``sys.path``)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import numpy as np

    from bayes_attn import markov
    from bayes_attn import theory as th
    from bayes_attn.theory import objective

    clear = getattr(objective, "clear_basis_cache", lambda: None)  # code with a module-level basis cache
    task, net0 = markov.fig2c(10)
    x, y, _, _ = task.generate()
    given = {"basis": th.kernel_basis(net0, x)} if hasattr(th, "kernel_basis") else {}
    rows = []
    for N in WIDTHS:
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


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, help="folder holding an earlier bayes_attn package, timed alternately")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.repeats)))
        return {}
    trees = {"new": REPO} | ({"old": a.old.resolve()} if a.old else {})
    runs = []
    for r, label in alternated(a.rounds, trees):
        res = run_worker(__file__, ["--repeats", str(a.repeats)], trees[label], OPENBLAS_NUM_THREADS="1")
        runs.append({"code": label, "round": r, **res})
        for row in res["rows"]:
            print(f"round {r} {label:3s} N={row['N']:5d}: total {row['total_s'] * 1e3:6.1f} ms  new data "
                  f"{row['total_new_data_s'] * 1e3:6.1f} ms  setup {row['setup_s'] * 1e3:6.1f} ms  newton "
                  f"{row['newton_s'] * 1e3:6.1f} ms  ({row['iterations']} it)  load {res['load_before'][0]:.1f}", flush=True)
    summary = {}
    for label in trees:
        for N in WIDTHS:
            rows = [row for run in runs if run["code"] == label for row in run["rows"] if row["N"] == N]
            summary[f"{label} N={N}"] = {k: min(row[k] for row in rows)
                                         for k in ("total_s", "total_new_data_s", "setup_s", "newton_s")}
    if "old" in trees:
        import numpy as np

        for N in WIDTHS:
            U = {lab: np.asarray(next(row["U"] for run in runs if run["code"] == lab for row in run["rows"]
                                      if row["N"] == N)) for lab in trees}
            summary[f"max relative U difference new vs old N={N}"] = float(
                np.abs(U["new"] - U["old"]).max() / np.abs(U["old"]).max())
    record = {"benchmark": "solve_theory warm end to end, Fig. 2c network (D=4, P=100, temperature 0.01)",
              "timing": "median of repeats per process; summary: best process per code and width",
              "summary": summary, "runs": runs}
    print(json.dumps(summary, indent=1))
    write_record(a.out / "solve_theory.json", record)
    return record


if __name__ == "__main__":
    main()
