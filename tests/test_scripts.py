"""Every script the README and inference/README.md send a user to starts: ``--help`` of each script in
``inference/`` answers with its usage and exit 0, computing and writing nothing.

The benchmarks' scripts are held to the same in tests/test_benchmarks.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conftest import snapshot_tree

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (ROOT / "inference").glob("*.py") if 'if __name__ == "__main__"' in p.read_text())
WATCHED = ("inference/results", "models", "data")
"""Folders a ``--help`` must leave byte-identical (a script without a parser would run and write there)."""


def _help(script: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(script), "--help"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_scripts_are_found():
    names = {p.name for p in SCRIPTS}
    assert {"fig2c.py", "fig2d.py", "fig2e.py", "fig3.py", "alpha_scaling.py", "fig3_plateau.py"} <= names, names


def test_every_inference_script_answers_help(tmp_path):
    """Each script's ``--help``, in parallel processes: exit 0, a usage line, no traceback, and no file written in
    the results, the specs or the data (nor a ``runs/`` folder made)."""
    before = {f: snapshot_tree(ROOT / f) for f in WATCHED}
    had_runs = (ROOT / "runs").exists()
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = dict(zip(SCRIPTS, pool.map(_help, SCRIPTS), strict=True))
    failed = {p.name: (r.returncode, r.stderr.strip().splitlines()[-1:]) for p, r in done.items()
              if r.returncode != 0 or "usage:" not in r.stdout or "Traceback" in r.stderr}
    assert not failed, failed
    assert {f: snapshot_tree(ROOT / f) for f in WATCHED} == before
    assert (ROOT / "runs").exists() == had_runs


def test_the_gpu_script_is_valid_bash():
    """``inference/fig3_gpu.sh`` (run only on a GPU machine) at least parses."""
    subprocess.run(["bash", "-n", str(ROOT / "inference/fig3_gpu.sh")], check=True)
