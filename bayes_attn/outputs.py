"""Output folders: one writer at a time, checked before computing, replaced together.

:func:`output_folder` holds a folder for one run:

1. it checks that the folder can be created and written (a file of that name,
   a missing permission or a read-only place fail at once, before any
   computation), and that it is empty or was written by this package
   (:data:`MARKER` or a ``manifest.json`` of :data:`FORMAT`): a folder with
   other files is refused unless ``force=True`` (``--force``);
2. it takes a lock (``.lock``, an advisory ``flock``, never followed through
   a symbolic link): a second run into the same folder fails at once with
   :class:`FolderBusyError`, naming the holder;
3. it removes temporaries that a killed run left behind: only files named by
   this package (``.bayes_attn-*.<kind>.tmp``, see :func:`bayes_attn._io.atomic`)
   directly in the folder or in its cache folders (:data:`CACHE_FOLDERS`), and
   ``.bayes_attn-staging-*`` folders holding only plain files; never
   recursively, never through symbolic links;
4. the run writes its files into a staging folder; when it finishes, they
   replace the previous run's files together (files listed in the previous
   run's own manifest that the new one does not write are removed, nothing
   else), and ``manifest.json`` lists the run's files with :data:`FORMAT`, the
   run's id and the package versions. An interrupted run leaves the previous
   run's files as they were.

Resumable caches (a sweep's ``widths/``) are written straight into the held
folder, one atomic file at a time, and are not part of the replacement.

The package's netCDF files (checksummed, with the package versions) are
written by :func:`save` and read by :func:`load_dataset`, which raises
:class:`CorruptFileError` for a file that fails its checks.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import logging
import os
import shutil
import stat
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ._io import TMP_PREFIX, CorruptFileError, is_temporary, load_dataset, save, versions

log = logging.getLogger(__name__)

LOCK = ".lock"
MANIFEST = "manifest.json"
MARKER = ".bayes_attn-folder"
"""Written when a run first takes a folder: the folder is this package's (a rerun of an interrupted run may use it)."""
FORMAT = "bayes_attn-output/1"
"""Format marker of ``manifest.json`` and :data:`MARKER`; a manifest without it is not this package's."""
STAGING_PREFIX = f"{TMP_PREFIX}staging-"
CACHE_FOLDERS = ("widths",)
"""Subfolders where runs write resumable caches (their stale temporaries are removed too)."""


class FolderBusyError(RuntimeError):
    """Another run holds the output folder."""


class ForeignFolderError(ValueError):
    """The output folder holds files this package did not write (pass ``force=True`` to write there anyway)."""


@dataclass(frozen=True)
class Staging:
    """Where a held run writes: ``path(name)`` in the staging folder; ``folder`` is the final place.

    ``record``: JSON-serialisable entries the run adds for ``manifest.json`` (e.g. its settings).
    """

    folder: Path
    staging: Path
    record: dict = field(default_factory=dict)

    def path(self, name: str) -> Path:
        """The staged location of the output ``name`` (a plain file name, no folders)."""
        if Path(name).name != name or name in {"", ".", ".."} or name.startswith("."):
            raise ValueError(f"output name must be a plain file name, got {name!r}")
        return self.staging / name


def check_writable(folder: str | os.PathLike, what: str = "out") -> Path:
    """Create ``folder`` if needed and check that files can be written there; clear error otherwise."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{what} must be a folder, but {str(folder)!r} is an existing file")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as err:
        raise ValueError(f"{what}: cannot write into {str(folder)!r}: {err.strerror or err}") from err
    return folder


def _plain_file(path: Path) -> bool:
    """A regular file, not a symbolic link."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _real_dir(path: Path) -> bool:
    """A folder, not a symbolic link."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def remove_stale(folder: Path) -> list[Path]:
    """Remove temporaries a killed run of this package left in ``folder`` (call only while holding it).

    Only plain files named by :func:`bayes_attn._io.atomic` directly in ``folder``
    or in its :data:`CACHE_FOLDERS`, and staging folders holding only plain
    files; symbolic links are never followed or removed.
    """
    stale: list[Path] = []
    for where in (folder, *(folder / c for c in CACHE_FOLDERS if _real_dir(folder / c))):
        for p in where.iterdir():
            if is_temporary(p.name) and _plain_file(p):
                p.unlink(missing_ok=True)
                stale.append(p)
    for p in folder.glob(f"{STAGING_PREFIX}*"):
        if not _real_dir(p):
            continue
        inside = list(p.iterdir())
        if all(_plain_file(q) for q in inside):
            for q in inside:
                q.unlink(missing_ok=True)
            p.rmdir()
            stale.append(p)
    if stale:
        log.info(f"removed {len(stale)} temporary file(s) left by an interrupted run in {folder}: "
                 + ", ".join(str(p.relative_to(folder)) for p in stale))
    return stale


def _own_manifest(folder: Path) -> dict | None:
    """``manifest.json`` of ``folder`` when this package wrote it (:data:`FORMAT`, a run id, a file list)."""
    path = folder / MANIFEST
    if not _plain_file(path):
        return None
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = (isinstance(m, dict) and m.get("format") == FORMAT and isinstance(m.get("run_id"), str)
          and isinstance(m.get("files"), list) and all(isinstance(f, str) for f in m["files"]))
    return m if ok else None


def _is_ours(folder: Path) -> bool:
    if _own_manifest(folder) is not None:
        return True
    if not _plain_file(folder / MARKER):
        return False
    try:
        return json.loads((folder / MARKER).read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _foreign_entries(folder: Path) -> list[str]:
    """Entries of ``folder`` other than this package's lock, marker, temporaries and staging folders."""
    return sorted(p.name for p in folder.iterdir()
                  if p.name not in (LOCK, MARKER) and not is_temporary(p.name) and not p.name.startswith(STAGING_PREFIX))


def check_ours(folder: Path, what: str = "out", force: bool = False) -> None:
    """Refuse a non-empty ``folder`` this package did not write, unless ``force``."""
    if force or _is_ours(folder):
        return
    foreign = _foreign_entries(folder)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ForeignFolderError(
            f"{what}: {str(folder)!r} holds files this package did not write ({shown}); choose a new or empty "
            "folder, or pass --force (force=True) to write there anyway (then only this package's own files "
            "are ever replaced or removed)")


def _open_lock(folder: Path, what: str) -> int:
    path = folder / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise ValueError(f"{what}: {str(path)!r} is not a plain file (a symbolic link or a folder): remove it, "
                             "or choose another output folder") from None
        raise ValueError(f"{what}: cannot create the lock {str(path)!r}: {err.strerror or err}") from err
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"{what}: {str(path)!r} is not a plain file: remove it, or choose another output folder")
    return fd


@contextlib.contextmanager
def hold(folder: str | os.PathLike, what: str = "out", *, force: bool = False) -> Iterator[Path]:
    """Lock ``folder`` for this process (see the module docstring); yields the folder.

    Raises :class:`ForeignFolderError` when ``folder`` holds files this
    package did not write (unless ``force``), :class:`FolderBusyError` when
    another run holds it.
    """
    folder = check_writable(folder, what)
    check_ours(folder, what, force)
    fd = _open_lock(folder, what)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
            raise FolderBusyError(
                f"output folder {str(folder)!r} is in use by another run ({holder}); wait for it to finish or "
                "choose another output folder"
            ) from None
        info = f"pid {os.getpid()}, started {datetime.datetime.now().isoformat(timespec='seconds')}, " \
               f"command {' '.join(sys.argv)!r}"
        os.ftruncate(fd, 0)
        os.pwrite(fd, info.encode(), 0)
        if not _is_ours(folder):
            _write_json(folder / MARKER, {"format": FORMAT,
                                          "created": datetime.datetime.now().isoformat(timespec="seconds")})
        remove_stale(folder)
        yield folder
    finally:
        os.close(fd)  # releases the lock


def _write_json(path: Path, obj: dict) -> None:
    """Write ``obj`` atomically; the temporary is named like :func:`bayes_attn._io.atomic`'s."""
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=".json.tmp", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(obj, indent=1, default=str) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def commit(folder: Path, staging: Path, record: dict | None = None) -> list[str]:
    """Move the staged files into ``folder``, removing the previous run's other files; write the manifest.

    Only names listed in the previous run's own manifest (:data:`FORMAT`) are
    removed, and only plain files or links (never a folder, never followed).
    """
    names = sorted(p.name for p in staging.iterdir())
    previous = _own_manifest(folder)
    (folder / MANIFEST).unlink(missing_ok=True)  # from here on the folder is not a finished run
    for old in previous["files"] if previous else []:
        path = folder / old
        if old not in names and Path(old).name == old and old not in {"", ".", ".."} and not _real_dir(path):
            path.unlink(missing_ok=True)
    for name in names:
        if _real_dir(folder / name):
            raise ValueError(f"cannot write {name!r} into {str(folder)!r}: a folder of that name is in the way")
        os.replace(staging / name, folder / name)
    manifest = {"format": FORMAT, "run_id": uuid.uuid4().hex, "files": names,
                "finished": datetime.datetime.now().isoformat(timespec="seconds"), "versions": versions()}
    _write_json(folder / MANIFEST, manifest | (record or {}))
    return names


@contextlib.contextmanager
def output_folder(folder: str | os.PathLike, what: str = "out", *, force: bool = False) -> Iterator[Staging]:
    """Hold ``folder`` (see :func:`hold`), stage a run's files and replace the previous run's files together on success.

    On an exception (or Ctrl-C) nothing in ``folder`` changes and the staged files are removed.
    """
    with hold(folder, what, force=force) as held:
        staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=held))
        try:
            stage = Staging(held, staging)
            yield stage
            commit(held, staging, stage.record)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
