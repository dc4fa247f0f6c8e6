"""Output folders: one writer at a time, checked before computing, replaced together, no user file replaced.

:func:`output_folder` holds a folder for one run (docs/files.md, "One writer per folder"): (1) the folder can be
created and written and is empty or this package's (:data:`MARKER` or a ``manifest.json`` of :data:`FORMAT`;
else ``force``); (2) every name clash is settled before computing: a file the run will write that this package did
not write is never replaced, even with ``force``, and removing another command's results needs ``force``; (3) a
lock (``.lock``, an advisory ``flock``, never through a link) makes a second run fail at once with
:class:`FolderBusyError`; (4) temporaries a killed run left (``.bayes_attn-*.<kind>.tmp``, staging folders of plain
files) are removed, never recursively nor through links; (5) the run writes into a staging folder, and when its
set is complete the files move in under a ``manifest.json`` that names old and new files while replacing
(``"state": "replacing"``), the previous run's files it does not write are removed (only those its own manifest
lists), and the final manifest lists the run's files, command, id and versions. An interrupted run leaves the
previous files as they were; a run that fails having written nothing leaves the folder as it was.

A file a failed run should not lose (prune's trained model) is *parked* by :func:`park`: moved into the folder at
once under another name (``model.parked.npz``), claimed by ``manifest.json`` (``files``, ``parked``), beside the
previous run's files, which stay one set; the run's commit moves it to its own name. Resumable caches (a sweep's
``widths/``) are written straight into the held folder, one atomic file at a time, with their own :data:`MARKER`
(:func:`cache_folder`).
The package's netCDF files are written and read by :mod:`~bayes_attn._internal.io`.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import functools
import itertools
import json
import logging
import os
import re
import shutil
import stat
import sys
import tempfile
import uuid
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .io import TMP_PREFIX, CorruptFileError, is_temporary, load_dataset, save, versions, write_json  # noqa: F401

__all__ = ["CACHE_FOLDERS", "ClashError", "FORMAT", "FailedAfterComputing", "FolderBusyError", "ForeignFolderError",
           "LOCK", "MANIFEST", "MARKER", "ReplacesResultsError", "STAGING_PREFIX", "Staging", "cache_folder",
           "check_ours", "check_writable", "clashes", "commit", "hold", "output_folder", "park", "remove_stale"]

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


class ClashError(ValueError):
    """A file the run would write exists and was not written by this package, or a folder is in its way."""


class ReplacesResultsError(ValueError):
    """The run would remove another command's results in the folder (pass ``force=True`` to replace them)."""


class FailedAfterComputing(RuntimeError):
    """A run failed after it computed something: not bad input (the message names what was kept)."""


@dataclass(frozen=True)
class Staging:
    """Where a held run writes: ``path(name)`` in the staging folder; ``folder`` is the final place.

    ``record``: JSON-serialisable entries the run adds for ``manifest.json`` (e.g. its settings);
    ``parked``: the run's files parked in the folder (:func:`park`), parked name → the name they take on commit;
    ``files``: the names the run declared (``None``: any).
    """

    folder: Path
    staging: Path
    record: dict = field(default_factory=dict)
    parked: dict[str, str] = field(default_factory=dict)
    files: frozenset[str] | None = None

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


def _lstat_says(path: Path, test) -> bool:
    """``test(os.lstat(path))`` (a symbolic link itself, not followed); False where ``path`` cannot be read."""
    try:
        return bool(test(os.lstat(path)))
    except OSError:
        return False


def _plain_file(path: Path) -> bool:
    """A regular file, not a symbolic link."""
    return _lstat_says(path, lambda st: stat.S_ISREG(st.st_mode))


def _empty(path: Path) -> bool:
    return _lstat_says(path, lambda st: st.st_size == 0)


def _real_dir(path: Path) -> bool:
    """A folder, not a symbolic link."""
    return _lstat_says(path, lambda st: stat.S_ISDIR(st.st_mode))


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


def _marker_ok(path: Path) -> bool:
    """``path`` is a :data:`MARKER` this package wrote."""
    if not _plain_file(path):
        return False
    try:
        return json.loads(path.read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _is_ours(folder: Path) -> bool:
    return _own_manifest(folder) is not None or _marker_ok(folder / MARKER)


def _foreign_entries(folder: Path) -> list[str]:
    """Entries of ``folder`` other than this package's lock, marker, temporaries and staging folders."""
    return sorted(p.name for p in folder.iterdir() if p.name not in (LOCK, MARKER)
                  and not is_temporary(p.name) and not p.name.startswith(STAGING_PREFIX))


def check_ours(folder: Path, what: str = "out", force: bool = False) -> None:
    """Refuse a non-empty ``folder`` this package did not write, unless ``force``."""
    if force or _is_ours(folder):
        return
    foreign = _foreign_entries(folder)
    if foreign:
            raise ForeignFolderError(
            f"{what}: {str(folder)!r} holds files this package did not write ({_shown(foreign)}); choose a new or "
            "empty folder, or pass --force (force=True) to write there anyway (then only this package's own "
            "files are ever replaced or removed)")


def _open_lock(folder: Path, what: str) -> int:
    path = folder / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise ValueError(f"{what}: {str(path)!r} is not a plain file (a symbolic link or a folder): remove it, "
                             "or choose another output folder") from None
        raise ValueError(f"{what}: cannot create the lock {str(path)!r}: {err.strerror or err}") from err
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ValueError(f"{what}: {str(path)!r} is not a plain file: remove it, or choose another output folder")
    if st.st_nlink != 1:  # a hard link: writing the holder line would change the other name's file too
        os.close(fd)
        raise ValueError(f"{what}: {str(path)!r} is a hard link to another file ({st.st_nlink} names): remove it, "
                         "or choose another output folder")
    return fd


_HOLDER = re.compile(r"pid \d+, started ")
"""How the holder line this package writes into :data:`LOCK` starts."""


def _safe_name(name: str) -> bool:
    return Path(name).name == name and name not in {"", ".", ".."}


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def clashes(folder: Path, files: Collection[str], previous: dict | None = None) -> list[str]:
    """Entries of ``folder`` a run writing ``files`` would replace although this package did not write them.

    ``previous``: the folder's own manifest (:func:`_own_manifest`). Covers
    ``files`` and ``manifest.json``, a folder in the way of any of them, a
    :data:`MARKER` that is not this package's, and a :data:`LOCK` that is not
    (an empty marker or lock holds nothing to lose; a lock of this package's
    holds its holder line).
    """
    ours = {*previous["files"], MANIFEST} if previous else set()
    found = []
    for name in sorted({*files, MANIFEST}):
        path = folder / name
        if _real_dir(path):
            found.append(f"{name} (a folder)")
        elif os.path.lexists(path) and name not in ours:
            found.append(name)
    marker = folder / MARKER
    if os.path.lexists(marker) and not _marker_ok(marker) and not (_plain_file(marker) and _empty(marker)):
        found.append(MARKER)
    lock = folder / LOCK
    if _plain_file(lock) and os.lstat(lock).st_nlink == 1:  # links and folders are refused by the lock itself
        try:
            head = lock.read_bytes()[:64].decode(errors="replace")
        except OSError:
            head = ""
        if head and not _HOLDER.match(head):
            found.append(LOCK)
    return found


def _check_clashes(folder: Path, files: Collection[str], previous: dict | None, what: str) -> None:
    found = clashes(folder, files, previous)
    if found:
        raise ClashError(f"{what}: {str(folder)!r} holds {_shown(found)}, which this package did not write and this "
                         "run would replace; it never replaces files it did not write: move them away, or choose "
                         "another output folder")


def _check_replaced(folder: Path, files: Collection[str] | None, previous: dict | None, command: str | None,
                    what: str, force: bool) -> None:
    """Refuse (unless ``force``) a run that would remove another command's results; warn when ``force`` lets it."""
    if previous is None or files is None or previous.get("command") == command:
        return
    removed = sorted(set(filter(_safe_name, previous["files"])) - set(files))
    if not removed:
        return
    by = f"`bayes-attn {previous['command']}`" if previous.get("command") else "another run"
    if not force:
        raise ReplacesResultsError(
            f"{what}: {str(folder)!r} holds the results of {by} ({_shown(removed)}), which {command or 'this run'} "
            "would remove: choose another output folder, or pass --force (force=True) to replace them")
    log.warning(f"replacing the results of {by} in {folder}: {_shown(removed)} will be removed when this run finishes")


@contextlib.contextmanager
def hold(folder: str | os.PathLike, what: str = "out", *, force: bool = False, command: str | None = None,
         files: Collection[str] | None = None) -> Iterator[Path]:
    """Lock ``folder`` for this process (see the module docstring); yields the folder.

    ``files``: the names the run may write (checked for clashes now); ``command``: what writes them.
    Raises :class:`ForeignFolderError` when ``folder`` holds files this
    package did not write (unless ``force``), :class:`ClashError` when a file
    the run would write is not this package's, :class:`ReplacesResultsError`
    when it would remove another command's results (unless ``force``),
    :class:`FolderBusyError` when another run holds it. A run that fails having written nothing leaves the folder
    as it was: the lock and marker it made and the folders it created are removed (:func:`_undo`).
    """
    made = _missing_folders(Path(folder))
    try:
        folder = check_writable(folder, what)
        check_ours(folder, what, force)
        previous = _own_manifest(folder)
        _check_clashes(folder, files or (), previous, what)
        _check_replaced(folder, files, previous, command, what, force)
        before = {p.name for p in folder.iterdir()}
        fd = _lock(folder, what)
    except BaseException:
        _remove_empty(made)
        raise
    try:
        holder = os.pread(fd, 4096, 0)
        info = f"pid {os.getpid()}, started {datetime.datetime.now().isoformat(timespec='seconds')}, " \
               f"command {' '.join(sys.argv)!r}"
        os.ftruncate(fd, 0)
        os.pwrite(fd, info.encode(), 0)
        if not _is_ours(folder):
            _write_json(folder / MARKER, {"format": FORMAT,
                                          "created": datetime.datetime.now().isoformat(timespec="seconds")})
        remove_stale(folder)
        yield folder
    except BaseException:
        _undo(folder, fd, before, holder, made)
        raise
    finally:
        os.close(fd)  # releases the lock


def _lock(folder: Path, what: str) -> int:
    """The open :data:`LOCK` of ``folder``, locked (:class:`FolderBusyError` when another run holds it); a lock
    that a failed run removed (:func:`_undo`) while this one opened it is opened anew."""
    while True:
        fd = _open_lock(folder, what)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise FolderBusyError(
                f"output folder {str(folder)!r} is in use by another run ({holder}); wait for it to finish or "
                "choose another output folder"
            ) from None
        if _lstat_says(folder / LOCK, functools.partial(os.path.samestat, os.fstat(fd))):  # still the folder's lock
            return fd
        os.close(fd)


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and those of its parents that do not exist yet, innermost first."""
    return list(itertools.takewhile(lambda p: not os.path.lexists(p), (folder, *folder.parents)))


def _undo(folder: Path, fd: int, before: set[str], holder: bytes, made: list[Path]) -> None:
    """After a run failed having written nothing (no entry but the lock and the marker is new): the marker and
    lock it made removed, a lock it found given back its ``holder`` line, the folders it created removed."""
    try:
        if not {p.name for p in folder.iterdir()} <= before | {LOCK, MARKER}:
            return  # the run wrote something (a cache, a published file): the folder stays this package's
        for name in {LOCK, MARKER} - before:
            (folder / name).unlink(missing_ok=True)
        if LOCK in before:
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder, 0)
        _remove_empty(made)
    except OSError as err:  # the run's own error is the one to report
        log.debug(f"could not undo the hold of {folder}: {err}")


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` in order while they are empty."""
    with contextlib.suppress(OSError):  # the first one not empty ends it
        for p in folders:
            p.rmdir()


def _write_json(path: Path, obj: dict) -> None:
    """Write ``obj`` atomically; the temporary is named like :func:`bayes_attn._io.atomic`'s."""
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=".json.tmp", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(obj, indent=1, default=str) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def commit(folder: Path, staging: Path, record: dict | None = None, *, command: str | None = None,
           files: Collection[str] | None = None, what: str = "out",
           parked: Mapping[str, str] | None = None) -> list[str]:
    """Move the staged files into ``folder``, removing the previous run's other files; write the manifest.

    The clashes are checked again first (a file made meanwhile is not replaced:
    :class:`ClashError`, nothing moved). Only names listed in the previous
    run's own manifest (:data:`FORMAT`) are removed, and only plain files or
    links (never a folder, never followed). ``files``: the names the run
    declared; staging another is an error of the package (nothing moved). ``parked``: files the run parked in
    the folder already (:func:`park`), parked name → final name; they move to their final names.
    """
    parked = dict(parked or {})
    names = sorted({*(p.name for p in staging.iterdir()), *parked.values()})
    if files is not None and not set(names) <= set(files):
        raise RuntimeError(f"{command or 'the run'} wrote {sorted(set(names) - set(files))}, which it did not declare "
                           "(their clashes were not checked before computing)")
    previous = _own_manifest(folder)
    _check_clashes(folder, names, previous, what)
    old = [f for f in previous["files"] if _safe_name(f)] if previous else []
    head = {"format": FORMAT, "command": command}
    # while files move, the manifest names the old and the new ones: an interruption leaves none unclaimed
    _write_json(folder / MANIFEST, head | {"run_id": uuid.uuid4().hex, "state": "replacing",
                                           "files": sorted({*old, *names, *parked})})
    for name in parked:
        os.replace(folder / name, folder / parked[name])
    for name in names:
        if name not in parked.values():
            os.replace(staging / name, folder / name)
    for name in old:
        if name not in names and not _real_dir(folder / name):
            (folder / name).unlink(missing_ok=True)
    manifest = head | {"run_id": uuid.uuid4().hex, "files": names,
                       "finished": datetime.datetime.now().isoformat(timespec="seconds"), "versions": versions()}
    _write_json(folder / MANIFEST, manifest | (record or {}))
    return names


def park(stage: Staging, names: Mapping[str, str], *, command: str | None = None, what: str = "out") -> None:
    """Move the staged files ``names`` (staged name → parked name) into the folder now under their parked names,
    each atomically, and claim them in its manifest (``files`` and ``parked``), so that a later failure of the
    run keeps them (a trained model) beside the previous run's files, which stay as they were; the run's commit
    moves them to their staged names."""
    folder, parked = stage.folder, {p: s for s, p in names.items()}
    if not all(_safe_name(n) and not n.startswith(".") for n in (*parked, *names)):
        raise ValueError(f"parked names must be plain file names, got {dict(names)!r}")
    if stage.files is not None and not {*parked, *names} <= stage.files:
        raise RuntimeError(f"{command or 'the run'} parked {sorted({*parked, *names} - stage.files)}, which it did "
                           "not declare (their clashes were not checked before computing)")
    previous = _own_manifest(folder)
    _check_clashes(folder, parked, previous, what)
    old = [f for f in previous["files"] if _safe_name(f)] if previous else []
    base = previous or {"format": FORMAT, "command": command}
    before = prior if isinstance(prior := base.get("parked"), dict) else {}
    _write_json(folder / MANIFEST, base | {"run_id": uuid.uuid4().hex, "files": sorted({*old, *parked}),
                                           "parked": before | parked})
    for name, staged in parked.items():
        os.replace(stage.staging / staged, folder / name)
    stage.parked.update(parked)


def cache_folder(held: Path, name: str, what: str = "out") -> Path:
    """``held/name``, a resumable cache of runs into ``held`` (held by the caller): created with its own
    :data:`MARKER` if missing; refused when it is a link, not a folder, or holds files this package did not
    write (no marker, not empty, and ``held`` holds no finished run of this package)."""
    cache = held / name
    if cache.is_symlink() or (cache.exists() and not cache.is_dir()):
        raise ValueError(f"{what}: {str(cache)!r} is a symbolic link or not a folder; runs keep their resumable "
                         "results there: remove it, or choose another output folder")
    marker = cache / MARKER
    if cache.exists() and not _marker_ok(marker):
        if os.path.lexists(marker) or (any(cache.iterdir()) and _own_manifest(held) is None):
            raise ClashError(f"{what}: {str(cache)!r} holds files this package did not write; it keeps its "
                             "resumable results there: move them away, or choose another output folder")
    cache.mkdir(exist_ok=True)
    if not _marker_ok(marker):
        _write_json(marker, {"format": FORMAT, "created": datetime.datetime.now().isoformat(timespec="seconds")})
    return cache


@contextlib.contextmanager
def output_folder(folder: str | os.PathLike, what: str = "out", *, force: bool = False, command: str | None = None,
                  files: Collection[str] | None = None) -> Iterator[Staging]:
    """Hold ``folder`` (see :func:`hold`), stage a run's files and replace the previous run's files together on success.

    ``command``: the command whose results these are (recorded in the manifest);
    ``files``: every name the run may write, so that clashes and the removal of
    another command's results are settled before computing (see the module docstring).
    On an exception (or Ctrl-C) nothing in ``folder`` changes and the staged files are removed.
    """
    with hold(folder, what, force=force, command=command, files=files) as held:
        staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=held))
        try:
            stage = Staging(held, staging, files=None if files is None else frozenset(files))
            yield stage
            commit(held, staging, stage.record, command=command, files=files, what=what, parked=stage.parked)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
