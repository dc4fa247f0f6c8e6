"""netCDF reading and writing that never leaves a half-written file behind.

Every array variable is written with HDF5's Fletcher-32 checksum, so a file
corrupted on disk fails to load (:class:`CorruptFileError`) instead of
giving other numbers. Every file records the package versions that wrote it
(attribute ``versions``, JSON).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import xarray as xr

TMP_SUFFIX = ".nc.tmp"
STALE = "*.*.tmp"
"""Temporary files of :func:`atomic` (``<name>.<kind>.tmp``), removed when a run takes its folder."""
PACKAGES = ("bayes_attn", "jax", "jaxlib", "numpyro", "numpy", "scipy", "xarray", "arviz-stats", "netCDF4")


class CorruptFileError(ValueError):
    """A result file that exists but cannot be read back (truncated, or a checksum failed)."""


def versions() -> dict[str, str]:
    """Versions of Python and of the packages results depend on."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _checksummed(ds: xr.Dataset) -> dict:
    """Encoding turning on Fletcher-32 for every variable HDF5 can checksum (numeric, at least 1-d)."""
    return {k: {"fletcher32": True} for k, v in ds.variables.items() if v.ndim >= 1 and v.dtype.kind in "fiucb"}


@contextlib.contextmanager
def atomic(path: str | os.PathLike, suffix: str = TMP_SUFFIX) -> Iterator[Path]:
    """Yield a temporary file beside ``path``; when the block ends without error, rename it over ``path``.

    An existing file at ``path`` is replaced only once the new one is complete;
    on an error the temporary file is removed (a killed process leaves it for
    :func:`bayes_attn.outputs.remove_stale`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    with atomic(path, ".txt.tmp") as tmp:
        tmp.write_text(text)
    return Path(path)


def save(obj: xr.Dataset | xr.DataTree, path: str | os.PathLike) -> Path:
    """Write ``obj`` to ``path`` as netCDF, atomically (see :func:`atomic`), with checksums and versions."""
    obj = obj.copy()
    obj.attrs.setdefault("versions", json.dumps(versions()))
    if isinstance(obj, xr.DataTree):
        encoding = {node.path: _checksummed(node.to_dataset(inherit=False)) for node in obj.subtree}
    else:
        encoding = _checksummed(obj)
    with atomic(path) as tmp:
        obj.to_netcdf(tmp, engine="netcdf4", encoding=encoding)
    return Path(path)


def _existing(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must be an existing netCDF file, got {str(path)!r}")
    return path


def _corrupt(path: Path, err: Exception) -> CorruptFileError:
    return CorruptFileError(
        f"{str(path)!r} cannot be read: it is truncated or corrupted (a checksum failed or the file is not "
        f"netCDF): {type(err).__name__}: {err}"
    )


def load_tree(path: str | os.PathLike) -> xr.DataTree:
    """Read a whole netCDF ``DataTree`` into memory and close the file."""
    path = _existing(path)
    try:
        with xr.open_datatree(path, engine="netcdf4") as tree:
            return tree.load().copy()
    except (OSError, RuntimeError, ValueError, KeyError) as err:
        raise _corrupt(path, err) from err


def load_dataset(path: str | os.PathLike) -> xr.Dataset:
    """Read a whole netCDF ``Dataset`` into memory and close the file."""
    path = _existing(path)
    try:
        with xr.open_dataset(path, engine="netcdf4") as ds:
            return ds.load().copy()
    except (OSError, RuntimeError, ValueError, KeyError) as err:
        raise _corrupt(path, err) from err

