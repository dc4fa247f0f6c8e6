"""netCDF reading and writing that never leaves a half-written file behind.

Every file's whole content (every variable's values, its attributes and dimension sizes, in every group) is
covered by one SHA-256 (attribute ``content_sha256``), and every array variable is also written with HDF5's
Fletcher-32 checksum, so a file corrupted on disk, or edited by anything but this package (an xarray
``to_netcdf`` of changed values, an in-place ``netCDF4`` write), fails to load (:class:`CorruptFileError`)
instead of giving other numbers. (An integrity check, not a signature: whoever recomputes the hash can forge
it.) Files written before it carry ``metadata_sha256``, the SHA-256 of all but the Fletcher-32-covered arrays,
checked as before; a file with neither loads with a warning that they are unchecked.
Every file records the package versions that wrote it (attribute
``versions``, JSON); a file written by another version of this package, or
without that record, loads with a warning, and JSON attributes that do not
parse make it a :class:`CorruptFileError`. A write that fails for
lack of disk space says so (``OSError`` with ``errno.ENOSPC``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import platform
import re
import shutil
import tempfile
import warnings
from collections.abc import Collection, Iterator
from importlib import metadata
from pathlib import Path

import numpy as np
import xarray as xr

TMP_SUFFIX = ".nc.tmp"
TMP_PREFIX = ".bayes_attn-"
"""Temporary files of :func:`atomic` are ``.bayes_attn-<random>.<kind>.tmp``, removed when a run takes its folder."""
_TEMPORARY = re.compile(re.escape(TMP_PREFIX) + r"[A-Za-z0-9_]+\.[A-Za-z0-9]+\.tmp")
JSON_ATTRS = ("versions", "head_names", "settings", "sampler_settings", "failed_jobs")
"""Attributes stored as JSON text; one that does not parse makes the file corrupt."""
CONTENT_ATTR = "content_sha256"
"""Root attribute: the SHA-256 of the whole file (see :func:`_sha256`), written by :func:`save`."""
CHECKSUM_ATTR = "metadata_sha256"
"""Root attribute of files written before :data:`CONTENT_ATTR`: the SHA-256 of what Fletcher-32 does not cover."""
HASH_ATTRS = (CONTENT_ATTR, CHECKSUM_ATTR)
PACKAGES = ("bayes_attn", "jax", "jaxlib", "numpyro", "numpy", "scipy", "xarray", "arviz-stats", "netCDF4")


class CorruptFileError(ValueError):
    """A result file that exists but cannot be read back (truncated, or a checksum failed)."""


def is_temporary(name: str) -> bool:
    """Whether ``name`` is a temporary file name made by :func:`atomic`."""
    return _TEMPORARY.fullmatch(name) is not None


def versions() -> dict[str, str]:
    """Versions of Python and of the packages results depend on."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def digest(text: str) -> str:
    """16 hex digits of the SHA-256 of ``text``: the one hash of cache keys, settings and job seeds."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _checksummed(ds: xr.Dataset) -> dict:
    """Encoding turning on Fletcher-32 for every variable HDF5 can checksum (numeric, at least 1-d)."""
    return {k: {"fletcher32": True} for k, v in ds.variables.items() if v.ndim >= 1 and v.dtype.kind in "fiucb"}


def _canonical(value) -> bytes:
    """Exact bytes of an attribute's or a variable's value as netCDF4 reads it (strings as UTF-8 JSON)."""
    if isinstance(value, str):
        return b"s" + json.dumps(value).encode()
    a = np.asarray(value)
    if a.dtype.kind in "OU":
        return b"t" + json.dumps([a.shape, [str(v) for v in a.ravel()]]).encode()
    a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))  # the same bytes on any machine
    return a.dtype.str.encode() + repr(a.shape).encode() + a.tobytes()


def _sha256(f, everything: bool = True) -> str:
    """SHA-256 of an open ``netCDF4.Dataset``: its attributes, dimension sizes and every variable's values
    (``everything=False``: only the values Fletcher-32 does not cover, scalars and strings, as
    :data:`CHECKSUM_ATTR` was made), in every group, in name order; :data:`HASH_ATTRS` themselves are left out."""
    h = hashlib.sha256()

    def add(*parts: bytes) -> None:
        for part in parts:
            h.update(len(part).to_bytes(8, "little") + part)

    def attrs(obj) -> None:
        for name in sorted(set(obj.ncattrs()) - set(HASH_ATTRS)):
            add(b"attr", name.encode(), _canonical(obj.getncattr(name)))

    groups = [f]
    while groups:
        g = groups.pop()
        g.set_auto_maskandscale(False)
        g.set_auto_chartostring(False)
        add(b"group", g.path.encode())
        attrs(g)
        for name in sorted(g.dimensions):
            add(b"dim", name.encode(), str(len(g.dimensions[name])).encode())
        for name in sorted(g.variables):
            v = g.variables[name]
            add(b"var", name.encode(), json.dumps(v.dimensions).encode())
            attrs(v)
            if everything or not v.filters().get("fletcher32"):
                add(b"value", _canonical(v[...]))
        groups.extend(g.groups[k] for k in sorted(g.groups, reverse=True))
    return h.hexdigest()


def _add_checksum(path: Path) -> None:
    """Store :func:`_sha256` of the netCDF file ``path`` in its root attribute :data:`CONTENT_ATTR`."""
    import netCDF4

    with netCDF4.Dataset(path, "a") as f:
        f.setncattr(CONTENT_ATTR, _sha256(f))


def _verify_checksum(path: Path) -> None:
    """Raise :class:`CorruptFileError` when ``path``'s :data:`CONTENT_ATTR` (or, in an older file,
    :data:`CHECKSUM_ATTR`) differs from its contents; warn when it has neither."""
    import netCDF4

    try:
        with netCDF4.Dataset(path, "r") as f:
            names = set(f.ncattrs())
            kind = next((a for a in HASH_ATTRS if a in names), None)
            stored = None if kind is None else f.getncattr(kind)
            actual = None if kind is None else _sha256(f, everything=kind == CONTENT_ATTR)
    except Exception as err:  # noqa: BLE001  whatever HDF5 raises on a damaged file (AttributeError among them)
        raise _corrupt(path, err) from err
    if kind is None:
        warnings.warn(f"{str(path)!r} records no checksum of its contents (it was written before they were "
                      "checksummed): they are unchecked", RuntimeWarning, stacklevel=5)
    elif stored != actual:
        what = "contents" if kind == CONTENT_ATTR else "scalars and attributes"
        raise CorruptFileError(f"{str(path)!r} cannot be read: its {what} do not match their checksum; the file "
                               "is corrupted or was changed by something other than bayes_attn")


@contextlib.contextmanager
def atomic(path: str | os.PathLike, suffix: str = TMP_SUFFIX) -> Iterator[Path]:
    """Yield a temporary file beside ``path``; when the block ends without error, rename it over ``path``.

    An existing file at ``path`` is replaced only once the new one is complete;
    on an error the temporary file is removed (a killed process leaves it for
    :func:`bayes_attn._internal.outputs.remove_stale`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=suffix, dir=path.parent)
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


def write_json(path: str | os.PathLike, obj) -> Path:
    """Write ``obj`` as indented JSON, atomically (NumPy scalars and arrays as numbers and lists)."""
    return write_text(path, json.dumps(obj, indent=2, default=_json_default) + "\n")


def _json_default(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer, np.bool_)):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def save(obj: xr.Dataset | xr.DataTree, path: str | os.PathLike) -> Path:
    """Write ``obj`` to ``path`` as netCDF, atomically (see :func:`atomic`), with checksums and versions."""
    obj = obj.copy()
    for name in HASH_ATTRS:  # a loaded file's, stale once its contents change
        obj.attrs.pop(name, None)
    obj.attrs.setdefault("versions", json.dumps(versions()))
    if isinstance(obj, xr.DataTree):
        encoding = {node.path: _checksummed(node.to_dataset(inherit=False)) for node in obj.subtree}
    else:
        encoding = _checksummed(obj)
    with atomic(path) as tmp:
        try:
            _to_netcdf(obj, tmp, encoding)
            _add_checksum(tmp)
        except (OSError, RuntimeError) as err:
            full = _no_space(tmp, err, _nbytes(obj))
            if full is None:
                raise
            raise full from err
    return Path(path)


def _to_netcdf(obj: xr.Dataset | xr.DataTree, path: Path, encoding: dict) -> None:
    """``obj.to_netcdf(path, engine="netcdf4", encoding=encoding)``; a Dataset held in memory goes straight to
    xarray's netCDF4 store, without ``to_netcdf``'s query of the Dask scheduler (it imports ``dask.distributed``
    only to choose locks for chunked writes)."""
    if isinstance(obj, xr.DataTree) or any(v.chunks is not None for v in obj.variables.values()):
        obj.to_netcdf(path, engine="netcdf4", encoding=encoding)
        return
    from xarray.backends import NetCDF4DataStore
    from xarray.backends.locks import NETCDFC_LOCK

    store = NetCDF4DataStore.open(path, mode="w", format="NETCDF4", lock=NETCDFC_LOCK)
    try:
        obj.dump_to_store(store, encoding=encoding)
    finally:
        store.close()


def _nbytes(obj: xr.Dataset | xr.DataTree) -> int:
    if isinstance(obj, xr.DataTree):
        return sum(node.to_dataset(inherit=False).nbytes for node in obj.subtree)
    return obj.nbytes


def _no_space(path: Path, err: Exception, need: int) -> OSError | None:
    """An ``ENOSPC`` error naming the folder when writing ``path`` failed for lack of space, else ``None``."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        free = 0
    else:
        try:
            free = shutil.disk_usage(path.parent).free
        except OSError:
            return None
        if free > 2 * need + 2**20:  # the failure was not for want of space
            return None
    return OSError(errno.ENOSPC, f"no space left to write into {str(path.parent)!r} ({free / 2**20:.1f} MiB free, "
                   f"about {need / 2**20:.1f} MiB needed): free some disk space or choose another output folder")


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


def _load(path: str | os.PathLike, open_file, samplers: Collection[str] | None):
    """``open_file(path)``'s tree or dataset read into memory, the file closed, its attributes checked."""
    path = _existing(path)
    _verify_checksum(path)  # before xarray decodes anything of a file that may be damaged
    try:
        with open_file(path, engine="netcdf4") as data:
            data = data.load().copy()
    except Exception as err:  # noqa: BLE001  whatever HDF5 or a decoder raises on a damaged file
        raise _corrupt(path, err) from err
    for name in HASH_ATTRS:
        data.attrs.pop(name, None)
    _check_attrs(data.attrs, path, samplers)
    return data


def load_tree(path: str | os.PathLike, samplers: Collection[str] | None = None) -> xr.DataTree:
    """Read a whole netCDF ``DataTree`` into memory and close the file.

    ``samplers``: the known sampler names; a file naming another (attribute ``sampler``) is refused.
    """
    return _load(path, xr.open_datatree, samplers)


def load_dataset(path: str | os.PathLike, samplers: Collection[str] | None = None) -> xr.Dataset:
    """Read a whole netCDF ``Dataset`` into memory and close the file (``samplers``: as for :func:`load_tree`)."""
    return _load(path, xr.open_dataset, samplers)


def _check_attrs(attrs: dict, path: Path, samplers: Collection[str] | None = None) -> None:
    """JSON attributes parse (else :class:`CorruptFileError`); a sampler name is known; versions are compared (the
    checksum was verified before, :func:`_verify_checksum`)."""
    for name in JSON_ATTRS:
        if name in attrs:
            try:
                json.loads(attrs[name])
            except (TypeError, ValueError) as err:
                raise CorruptFileError(f"{str(path)!r} cannot be read: its attribute {name!r} is not valid JSON "
                                       f"({err}); the file is corrupted") from None
    if samplers is not None and "sampler" in attrs and str(attrs["sampler"]) not in samplers:
        raise CorruptFileError(f"{str(path)!r} names the sampler {str(attrs['sampler'])!r}, which this version "
                               f"does not know (known: {', '.join(samplers)}); it was written by another "
                               "version or is corrupted")
    if "versions" not in attrs:
        warnings.warn(f"{str(path)!r} records no package versions: it was not written by this package's save "
                      "functions, or by a version before they recorded them", RuntimeWarning, stacklevel=4)
        return
    recorded = json.loads(attrs["versions"])
    wrote = recorded.get("bayes_attn") if isinstance(recorded, dict) else None
    here = versions()["bayes_attn"]
    if wrote != here:
        warnings.warn(f"{str(path)!r} was written by bayes_attn {wrote}, this is {here}: results may differ "
                      "between versions", RuntimeWarning, stacklevel=4)

