"""One way to write a benchmark's numbers: the record plus the machine it was measured on, as JSON."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

BURNER = "import time\nend = time.time() + {limit}\nx = 0\nwhile time.time() < end:\n    for i in range(100000):\n        x += i\n"
"""A CPU-bound Python process that ends by itself after ``limit`` seconds."""


def machine() -> dict:
    """CPU count, platform, Python, JAX (when loaded), BLAS thread setting and the load average (1, 5, 15 min) now."""
    return {"cpu_count": os.cpu_count(), "platform": platform.platform(), "python": sys.version.split()[0],
            "jax": getattr(sys.modules.get("jax"), "__version__", None),
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"), "load_after": os.getloadavg()}


def write_record(path: str | os.PathLike, record: dict) -> Path:
    """Write ``record | {"machine": machine()}`` to ``path`` (folders made), print where, return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record | {"machine": machine()}, indent=1) + "\n")
    print(f"wrote {path}")
    return path


def run_worker(script: str | os.PathLike, args: list[str], code: str | os.PathLike, **env: str) -> dict:
    """Run ``script --worker *args`` in a fresh Python process with the package folder ``code`` first on its path
    (this checkout's or an earlier copy's) and the environment variables ``env``; return the JSON of its last
    line of output, with the load average before it started (``load_before``)."""
    load = os.getloadavg()
    out = subprocess.run([sys.executable, str(script), "--worker", *args], check=True, capture_output=True,
                         text=True, cwd="/", env=dict(os.environ, PYTHONPATH=str(code), **env))
    return {"load_before": load, **json.loads(out.stdout.strip().splitlines()[-1])}


def alternated(rounds: int, trees: dict) -> list[tuple[int, str]]:
    """``(round, label)`` for the codes ``trees`` (``"new"``, maybe ``"old"``) over ``rounds``, the order swapped
    every round (so that neither code always runs first on a machine whose load drifts)."""
    return [(r, label) for r in range(rounds) for label in (("old", "new") if r % 2 else ("new", "old"))
            if label in trees]


@contextlib.contextmanager
def busy_cores(limit: float = 1800.0) -> Iterator[int]:
    """The block runs beside one CPU-bound process per core (:data:`BURNER`, each ending by itself after ``limit``
    seconds), started 2 s before it and killed when it ends; yields how many."""
    burners = [subprocess.Popen([sys.executable, "-c", BURNER.format(limit=limit)]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(2.0)
        yield len(burners)
    finally:
        for p in burners:
            p.kill()
        for p in burners:
            p.wait()
