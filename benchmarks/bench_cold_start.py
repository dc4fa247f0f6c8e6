"""Benchmark: ``bayes-attn theory`` on the default spec from a cold start, with and without the compilation cache.

Runs the command as a user does (a fresh Python process each time) with its
compilation cache in a new temporary folder (``BAYES_ATTN_COMPILE_CACHE``):
first run (empty cache: everything compiles and is stored), two more runs
(warm cache), then one with ``--no-compile-cache``, side by side in one run.
Per run: wall seconds, CPU seconds of the process (user + system; on a
shared machine the wall time also counts waiting for a core) and the load
average before it. Output: ``results/cold_start.json``.

Run::

    .venv/bin/python benchmarks/bench_cold_start.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def run_once(label: str, cache: Path, out: Path, flags: list[str]) -> dict:
    env = dict(os.environ, BAYES_ATTN_COMPILE_CACHE=str(cache))
    env.pop("BAYES_ATTN_NO_COMPILE_CACHE", None)
    load = os.getloadavg()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bayes_attn.cli", *flags, "theory", "--out", str(out)], env=env, check=True,
                   capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    files = len(list(cache.glob("*"))) if cache.exists() else 0
    print(f"{label:16s} wall {wall:6.1f} s  cpu {cpu:6.1f} s  load before {load[0]:.1f}  cache files {files}", flush=True)
    return dict(run=label, wall_seconds=wall, cpu_seconds=cpu, load_before=load, cache_files=files)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cache = tmp / "cache"
        runs = [run_once("cold (empty cache)", cache, tmp / "o1", []),
                run_once("warm 1", cache, tmp / "o2", []),
                run_once("warm 2", cache, tmp / "o3", []),
                run_once("no cache", cache, tmp / "o4", ["--no-compile-cache"])]
    record = dict(command="bayes-attn theory (default spec: Fig. 2c, N = 10)", runs=runs, cpu_count=os.cpu_count(),
                  platform=platform.platform(), python=sys.version.split()[0], load_after=os.getloadavg())
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "cold_start.json").write_text(json.dumps(record, indent=1))
    print(f"wrote {a.out / 'cold_start.json'}")


if __name__ == "__main__":
    main()
