"""Every script the README and inference/README.md send a user to starts: ``--help`` of each script in
``inference/`` answers with its usage and exit 0, computing and writing nothing.

The benchmarks' scripts are held to the same in tests/test_benchmarks.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import snapshot_tree

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (ROOT / "inference").glob("*.py") if 'if __name__ == "__main__"' in p.read_text())
WATCHED = ("inference/results", "models", "data")
"""Folders a ``--help`` must leave byte-identical (a script without a parser would run and write there)."""


HELP_SECONDS = 10
"""A script's ``--help`` answers within this: each parses its arguments before it imports the package's heavy parts
(measured 0.1–0.4 s, ``fig3_sampling.py`` 3.6 s with xarray and pandas, on 2 cores at load 4)."""


def _help(script: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, str(script), "--help"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    return r, time.perf_counter() - t0


def test_the_scripts_are_found():
    names = {p.name for p in SCRIPTS}
    assert {"fig2c.py", "fig2d.py", "fig2e.py", "fig3.py", "alpha_scaling.py", "fig3_plateau.py"} <= names, names


def test_every_inference_script_answers_help(tmp_path):
    """Each script's ``--help``, in parallel processes: exit 0, a usage line, no traceback, within
    :data:`HELP_SECONDS`, and no file written in the results, the specs or the data (nor a ``runs/`` folder
    made)."""
    before = {f: snapshot_tree(ROOT / f) for f in WATCHED}
    had_runs = (ROOT / "runs").exists()
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = dict(zip(SCRIPTS, pool.map(_help, SCRIPTS), strict=True))
    failed = {p.name: (r.returncode, r.stderr.strip().splitlines()[-1:]) for p, (r, _) in done.items()
              if r.returncode != 0 or "usage:" not in r.stdout or "Traceback" in r.stderr}
    assert not failed, failed
    slow = {p.name: round(s, 1) for p, (_, s) in done.items() if s > HELP_SECONDS}
    assert not slow, slow
    assert {f: snapshot_tree(ROOT / f) for f in WATCHED} == before
    assert (ROOT / "runs").exists() == had_runs


def test_the_gpu_script_is_valid_bash():
    """``inference/fig3_gpu.sh`` (run only on a GPU machine) at least parses."""
    subprocess.run(["bash", "-n", str(ROOT / "inference/fig3_gpu.sh")], check=True)


QUICK = {
    "fig2c.py": ["--quick"],
    "fig2d.py": [],
    "path_kernels.py": [],
}
"""The scripts cheap at tiny sizes, with the arguments that make them so (each writes into ``--out``). Left out:
``alpha_scaling.py`` (samples at every point: minutes), ``fig3*.py`` (train the transformer: minutes; their
library parts are tested in tests/oneshot), ``fig3_gpu.sh`` (a GPU), ``fig2e.py`` (``fig2c.py``'s ``sweep_main``
on another spec: each quick run costs ~15 s of CPU, mostly compiling)."""
QUICK_OUTPUTS = {"fig2c.py": "sweep.nc", "fig2d.py": "alignment.png",
                 "path_kernels.py": "kernels.png"}


@pytest.mark.slow
@pytest.mark.validate  # each script end to end at its tiny size
@pytest.mark.parametrize("name", sorted(QUICK))
def test_quick_run_of_a_script(name, tmp_path):
    """The script runs end to end at its tiny size and writes its result into ``--out``."""
    out = tmp_path / ("kernels.png" if name == "path_kernels.py" else "out")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, str(ROOT / "inference" / name), *QUICK[name], "--out", str(out)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    written = out if name == "path_kernels.py" else out / QUICK_OUTPUTS[name]
    assert written.is_file(), (sorted(p.name for p in tmp_path.rglob("*")), r.stdout[-2000:])
