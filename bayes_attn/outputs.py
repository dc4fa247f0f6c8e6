"""Output folders: one writer at a time, checked before computing, replaced together.

:func:`output_folder` holds a folder for one run:

1. it checks that the folder can be created and written (a file of that name,
   a missing permission or a read-only place fail at once, before any
   computation);
2. it takes a lock (``.lock``, an advisory ``flock``): a second run into the
   same folder fails at once with :class:`FolderBusyError`, naming the holder;
3. it removes temporaries that a killed run left behind (``*.nc.tmp``, ``*.npz.tmp``, … and
   ``.staging-*`` folders);
4. the run writes its files into a staging folder; when it finishes, they
   replace the previous run's files together (files of the previous run that
   the new one does not write are removed), and ``manifest.json`` lists the
   run's files with the package versions. An interrupted run leaves the
   previous run's files as they were.

Resumable caches (a sweep's ``widths/``) are written straight into the held
folder, one atomic file at a time, and are not part of the replacement.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ._io import STALE, TMP_SUFFIX, versions

LOCK = ".lock"
MANIFEST = "manifest.json"
STAGING_PREFIX = ".staging-"


class FolderBusyError(RuntimeError):
    """Another run holds the output folder."""


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


def remove_stale(folder: Path) -> list[Path]:
    """Remove temporaries a killed run left in ``folder`` (call only while holding it)."""
    stale = [p for p in folder.rglob(STALE) if p.is_file()]
    stale += [p for p in folder.glob(f"{STAGING_PREFIX}*") if p.is_dir()]
    for p in stale:
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    if stale:
        print(f"removed {len(stale)} temporary file(s) left by an interrupted run in {folder}", file=sys.stderr)
    return stale


@contextlib.contextmanager
def hold(folder: str | os.PathLike, what: str = "out") -> Iterator[Path]:
    """Lock ``folder`` for this process (see the module docstring); yields the folder."""
    folder = check_writable(folder, what)
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
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
        remove_stale(folder)
        yield folder
    finally:
        os.close(fd)  # releases the lock


def _previous_files(folder: Path) -> list[str]:
    try:
        return list(json.loads((folder / MANIFEST).read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return []


def commit(folder: Path, staging: Path, record: dict | None = None) -> list[str]:
    """Move the staged files into ``folder``, removing the previous run's other files; write the manifest."""
    names = sorted(p.name for p in staging.iterdir())
    previous = _previous_files(folder)
    (folder / MANIFEST).unlink(missing_ok=True)  # from here on the folder is not a finished run
    for old in previous:
        if old not in names and Path(old).name == old:
            (folder / old).unlink(missing_ok=True)
    for name in names:
        os.replace(staging / name, folder / name)
    manifest = {"files": names, "finished": datetime.datetime.now().isoformat(timespec="seconds"),
                "versions": versions()} | (record or {})
    tmp = folder / f"{MANIFEST}{TMP_SUFFIX}"
    tmp.write_text(json.dumps(manifest, indent=1, default=str) + "\n")
    os.replace(tmp, folder / MANIFEST)
    return names


@contextlib.contextmanager
def output_folder(folder: str | os.PathLike, what: str = "out") -> Iterator[Staging]:
    """Hold ``folder``, stage a run's files and replace the previous run's files together on success.

    On an exception (or Ctrl-C) nothing in ``folder`` changes and the staged files are removed.
    """
    with hold(folder, what) as held:
        staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=held))
        try:
            stage = Staging(held, staging)
            yield stage
            commit(held, staging, stage.record)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
