"""netCDF reading and writing that never leaves a half-written file behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import xarray as xr


def save(obj: xr.Dataset | xr.DataTree, path: str | os.PathLike) -> Path:
    """Write ``obj`` to ``path`` via a temporary file and an atomic rename.

    An existing file at ``path`` is replaced only once the new one is complete.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".nc.tmp", dir=path.parent)
    os.close(fd)
    try:
        obj.to_netcdf(tmp, engine="netcdf4")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _existing(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must be an existing netCDF file, got {str(path)!r}")
    return path


def load_tree(path: str | os.PathLike) -> xr.DataTree:
    """Read a whole netCDF ``DataTree`` into memory and close the file."""
    with xr.open_datatree(_existing(path), engine="netcdf4") as tree:
        return tree.load().copy()


def load_dataset(path: str | os.PathLike) -> xr.Dataset:
    """Read a whole netCDF ``Dataset`` into memory and close the file."""
    with xr.open_dataset(_existing(path), engine="netcdf4") as ds:
        return ds.load().copy()
