"""Benchmark: ``bayes-attn theory`` on the default spec from a cold start, with and without the compilation cache.

Runs the command as a user does (a fresh Python process each time) with its
compilation cache in a new temporary folder (``BAYES_ATTN_COMPILE_CACHE``):
first run (empty cache: everything compiles and is stored), two more runs
(warm cache), then one with ``--no-compile-cache``, side by side in one run,
and two warm runs with Dask made unimportable (as where the ``dask`` and
``test`` extras are not installed, e.g. after ``make demo``).
Per run: wall seconds, CPU seconds of the process (user + system; on a
shared machine the wall time also counts waiting for a core) and the load
average before it. Output: ``results/cold_start.json``.

``--old DIR`` runs an earlier copy of the package as well (a folder holding
``bayes_attn``, e.g. from ``git archive <commit> bayes_attn | tar -x -C DIR``),
with its own cache folder, each step alternately with this one, so that both
see the same machine load.

Run::

    .venv/bin/python benchmarks/bench_cold_start.py [--old DIR] [--quick]

``--quick``: the cold run, one warm run and one warm run without Dask (seconds).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import REPO, Record, parse, parser
from harness import headline as make_headline

STEPS = (("cold (empty cache)", []), ("warm 1", []), ("warm 2", []), ("warm 3", []),
         ("no cache", ["--no-compile-cache"]))


def command(code: Path, flags: list[str], out: Path, dask: bool) -> list[str]:
    """The console script's command line (``python -m bayes_attn``; ``bayes_attn.cli`` for code older than it)."""
    args = [*flags, "theory", "--out", str(out)]
    if not (code / "bayes_attn" / "__main__.py").exists():
        return [sys.executable, "-m", "bayes_attn.cli", *args]
    if dask:
        return [sys.executable, "-m", "bayes_attn", *args]
    hide = f"import sys; sys.modules['dask'] = None; sys.argv = ['bayes-attn', *{args!r}]; " \
           "from bayes_attn.__main__ import console; console()"
    return [sys.executable, "-c", hide]


def run_once(label: str, cache: Path, out: Path, flags: list[str], code: Path = REPO, dask: bool = True) -> dict:
    """One run of the command in a fresh process: wall and CPU seconds, load before, files in the cache."""
    env = dict(os.environ, BAYES_ATTN_COMPILE_CACHE=str(cache), PYTHONPATH=str(code))
    env.pop("BAYES_ATTN_NO_COMPILE_CACHE", None)
    load = os.getloadavg()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # run outside the repository: ``-m`` puts the working folder first on sys.path, before PYTHONPATH
    subprocess.run(command(code, flags, out, dask), env=env, check=True, capture_output=True, text=True,
                   cwd=out.parent)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    files = len(list(cache.glob("*"))) if cache.exists() else 0
    print(f"{code.name[:12]:12s} {label:16s} wall {wall:6.1f} s  cpu {cpu:6.1f} s  load before {load[0]:.1f}  "
          f"cache files {files}", flush=True)
    return dict(run=label, code="new" if code == REPO else "old", dask_importable=dask, wall_seconds=wall,
                cpu_seconds=cpu, load_before=load, cache_files=files)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: the cold run, one warm run, one warm run without Dask)."""
    ap = parser("cold_start", __doc__, "the cold run, one warm run and one warm run without Dask")
    ap.add_argument("--old", type=Path, help="folder holding an earlier bayes_attn package, run alternately")
    return parse(ap, argv)


def headline(results: dict) -> dict | None:
    """This code's median wall time with a warm cache, Dask importable."""
    warm = [r["wall_seconds"] for r in results["runs"] if r["code"] == "new" and r["dask_importable"]
            and r["run"].startswith("warm ")]
    return make_headline("bayes-attn theory, fresh process, warm cache", statistics.median(warm) if warm else None,
                         "s")


def main(argv: list[str] | None = None) -> dict:
    """Run the command in fresh processes, step by step (alternating codes), and write the envelope."""
    a = parse_args(argv)
    record = Record(a, command="bayes-attn theory (default spec: Fig. 2c, N = 10)",
                    old_code=a.old.name if a.old else None)
    codes = [REPO] + ([a.old.resolve()] if a.old else [])
    steps = STEPS[:2] if a.quick else STEPS
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i, (label, flags) in enumerate(steps):
            for code in (codes if i % 2 == 0 else codes[::-1]):
                tag = "new" if code == REPO else "old"
                runs.append(run_once(label, tmp / f"cache-{tag}", tmp / f"o{i}-{tag}", flags, code))
        for j in range(1 if a.quick else 2):  # this code, warm cache, Dask not importable
            runs.append(run_once(f"warm, no dask {j + 1}", tmp / "cache-new", tmp / f"nd{j}", [], REPO, dask=False))
    results = {"runs": runs}
    record.write(results, headline=headline(results))
    return results


if __name__ == "__main__":
    main()
