"""One way to write a benchmark's numbers: the record plus the machine it was measured on, as JSON."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path


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
