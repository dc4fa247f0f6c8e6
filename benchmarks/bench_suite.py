"""Benchmark: where the test suite's time goes (issue 63, item 3: ``make test`` under 480 s on 2 cores).

Runs pytest as ``make test`` does (xdist workers, ``--dist loadgroup``) over ``PATHS`` with the plugin
``benchmarks/suite_pytest.py``, which records for every test its wall seconds and the seconds JAX spent in it on
compiling (XLA's backend compile, tracing, lowering; and what the persistent cache saved). Compilation in the
processes a test starts (commands, scripts, benchmarks) is not seen by the plugin and counts as wall time only.

Reported: pytest's wall seconds, the summed test seconds and their compile share, the same per test file, the
slowest tests with their compile seconds, the number of programs compiled, the backend compile seconds per
program name (``by_program``), and ``wall_without_compiling``: the test seconds less their compiling, over the
workers (what pytest's wall would be if no test compiled anything in its own process).

Run alone (the whole suite: ~18 min on 2 cores)::

    .venv/bin/python benchmarks/bench_suite.py [PATHS ...] [--workers 2] [--top 40] [--quick]

Output: ``benchmarks/results/suite.json`` (``--quick``: ``tests/test_verdict.py`` alone, to a temporary folder).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import Record, parse, parser
from harness import headline as make_headline

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("backend_compile", "trace", "lower")
"""The compile stages summed into a test's compile seconds (``cache_saved`` is reported beside them)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = parser("suite", __doc__, "tests/test_verdict.py alone")
    ap.add_argument("paths", nargs="*", default=["tests"], help="what pytest collects (default: tests)")
    ap.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (make test: one per core, at most 4)")
    ap.add_argument("--top", type=int, default=40, help="how many of the slowest tests to list")
    ap.add_argument("--marker", default="not validate",
                    help="pytest's -m: which tier (default: make test's; 'validate': make validate's; '': both)")
    return parse(ap, argv)


def run_pytest(paths: list[str], workers: int, folder: Path, marker: str = "") -> tuple[int, float, str]:
    """pytest over ``paths`` (the tests ``marker`` selects, pytest's ``-m``; all where empty) with the plugin writing
    to ``folder``: exit status, wall seconds, the output's tail."""
    env = dict(os.environ, BENCH_SUITE_DIR=str(folder),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")])))
    args = [sys.executable, "-m", "pytest", "-q", "-p", "suite_pytest", "-p", "no:cacheprovider",
            *(["-n", str(workers), "--dist", "loadgroup"] if workers > 0 else ["-p", "no:xdist"]),
            *(["-m", marker] if marker else []), *paths]
    t0 = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    return done.returncode, time.perf_counter() - t0, (done.stdout + done.stderr)[-3000:]


def rows_of(folder: Path) -> list[dict]:
    """Every test's row (:mod:`suite_pytest`), from every worker's file."""
    return [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.read_text().splitlines()]


def summarise(rows: list[dict], top: int, workers: int) -> dict:
    """Totals, per file (slowest first), per program name and the ``top`` slowest tests, each with its compile
    seconds; and the test seconds less their compiling over the ``workers``."""
    compile_s = lambda r: sum(r[s] for s in STAGES)  # noqa: E731
    files: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in rows:
        files[r["test"].split("::")[0]].update(wall=r["wall"], compile=compile_s(r), tests=1, programs=r["programs"])
    total = {"tests": len(rows), "wall": sum(r["wall"] for r in rows), "compile": sum(map(compile_s, rows)),
             "programs": sum(r["programs"] for r in rows)}
    total |= {s: sum(r[s] for r in rows) for s in (*STAGES, "cache_saved")}
    total["compile_share"] = total["compile"] / total["wall"] if total["wall"] else None
    by_file = [{"file": f, **{k: round(v, 2) for k, v in c.items()},
                "compile_share": round(c["compile"] / c["wall"], 3) if c["wall"] else None}
               for f, c in sorted(files.items(), key=lambda fc: -fc[1]["wall"])]
    slowest = [{"test": r["test"], "wall": round(r["wall"], 2), "compile": round(compile_s(r), 2),
                "programs": r["programs"]} for r in sorted(rows, key=lambda r: -r["wall"])[:top]]
    return {"total": {k: round(v, 3) if isinstance(v, float) else v for k, v in total.items()}, "by_file": by_file,
            "by_program": by_program(rows, top), "slowest": slowest,
            "wall_without_compiling": round((total["wall"] - total["compile"]) / max(workers, 1), 1)}


def by_program(rows: list[dict], top: int) -> list[dict]:
    """The ``top`` program names (JAX's ``fun_name``) by backend compile seconds over all tests: seconds, count
    (programs of that name compiled, each shape or constant its own) and seconds per program."""
    seconds: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    for r in rows:
        for name, (s, n) in r.get("by_name", {}).items():
            seconds[name] += s
            count[name] += n
    return [{"name": name, "seconds": round(s, 2), "programs": count[name], "per_program": round(s / count[name], 3)}
            for name, s in seconds.most_common(top)]


def main(a: argparse.Namespace) -> dict:
    paths = ["tests/test_verdict.py"] if a.quick else a.paths
    record = Record(a, paths=paths)
    with tempfile.TemporaryDirectory(prefix="bench_suite_") as tmp:
        code, seconds, tail = run_pytest(paths, a.workers, Path(tmp), a.marker)
        if code != 0:
            raise SystemExit(f"pytest exited {code}:\n{tail}")
        results = {"pytest_seconds": round(seconds, 1)} | summarise(rows_of(Path(tmp)), a.top, a.workers)
    t = results["total"]
    print(f"pytest {seconds:.0f} s on {a.workers} workers; {t['tests']} tests, {t['wall']:.0f} test seconds, of them "
          f"{t['compile']:.0f} compiling ({t['programs']} programs; the cache saved {t['cache_saved']:.0f} s)")
    for f in results["by_file"][:15]:
        print(f"  {f['wall']:7.1f} s  compile {f['compile']:6.1f} s  {f['file']}")
    print(f"the test seconds less their compiling, over {a.workers} workers: {results['wall_without_compiling']:.0f} s "
          "(a floor for pytest's wall if nothing compiled in-process)")
    for g in results["by_program"][:15]:
        print(f"  {g['seconds']:7.1f} s  {g['programs']:5d} programs  {g['per_program']:6.2f} s each  {g['name']}")
    record.write(results, headline=make_headline("pytest wall seconds", seconds, "s"),
                 notes="Compilation inside processes a test starts counts as wall time only.")
    return results


if __name__ == "__main__":
    main(parse_args())
