"""JAX's persistent compilation cache for the ``bayes-attn`` command and the library.

Compiling the theory's and the samplers' programs dominates a short run of
the command. With the cache each program compiles once per machine, JAX
version and shape; later runs load it from disk. The command turns the cache
on, and so does the library's first theory solve or sampling call
(:func:`for_library`) unless the caller configured JAX's cache already; the
folder is the user's cache folder, never an output folder:

    $BAYES_ATTN_COMPILE_CACHE, else $XDG_CACHE_HOME/bayes_attn/jax, else ~/.cache/bayes_attn/jax

``--no-compile-cache`` or ``BAYES_ATTN_NO_COMPILE_CACHE=1`` (the library's
opt-out too) turn it off. A
Dask sweep can hand :func:`cache_dir` to its workers
(``JAX_COMPILATION_CACHE_DIR``) so that they share it.

Tracing and lowering a program costs as much as loading it compiled: the
theory's entry points (:func:`exported_jit`) also keep their traced program
(StableHLO, :mod:`jax.export`) in ``exported/`` under the same folder, keyed by
the package's source, the JAX version, the arguments' shapes, dtypes and
static structure, so that a later run skips the trace too
(``BAYES_ATTN_NO_EXPORTED_PROGRAMS=1`` keeps compiled programs only; what this
saves is measured in the README). Each file holds its full key and the SHA-256 of
the program, checked before the program is deserialised; it is read only as
this user's own plain file in this user's own folder, never through a symbolic
link. A file failing any check, or a program failing to load or at its first
call, is traced again and rewritten (one debug line, ``bayes-attn -v``).

Floating point: a program loaded from the cache is the one the compiler
would build again, so results do not depend on whether the cache was used.
An exported program is checked against the traced one in the tests (equal
to the last bit on the CPU).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import importlib.util
import json
import logging
import os
import stat
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

__all__ = ["ENV_DIR", "ENV_NO_EXPORTED", "ENV_OFF", "UNREADABLE", "cache_dir", "disabled_by_env",
           "enable_compile_cache", "exported_jit", "for_library", "own_folder", "program_key"]

ENV_DIR = "BAYES_ATTN_COMPILE_CACHE"
ENV_OFF = "BAYES_ATTN_NO_COMPILE_CACHE"
ENV_NO_EXPORTED = "BAYES_ATTN_NO_EXPORTED_PROGRAMS"
_log = logging.getLogger(__name__)
_exported_dir: Path | None = None  # set by enable_compile_cache: where exported_jit keeps its programs
_programs: dict[str, Callable] = {}  # this process's programs of exported_jit, by key
_library_checked = False  # whether this process decided on the cache (enable_compile_cache, for_library)


def cache_dir() -> Path:
    """The compilation cache's folder (see the module docstring); not created here."""
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bayes_attn" / "jax"


def own_folder(path: str | os.PathLike) -> str:
    """Create ``path`` (mode 0700) if needed and return it; ``ValueError`` for a symbolic link or a folder of
    another user (compiled code is loaded from there, so it must be this user's own)."""
    path = os.fspath(path)
    os.makedirs(path, mode=0o700, exist_ok=True)
    if not _is_own(os.lstat(path), stat.S_ISDIR):
        raise ValueError(f"compilation cache {path!r} must be a folder of this user, not a symbolic link; remove "
                         f"it, or set {ENV_DIR} or XDG_CACHE_HOME")
    return path


def disabled_by_env(name: str = ENV_OFF) -> bool:
    """Whether the variable ``name`` (``BAYES_ATTN_NO_COMPILE_CACHE`` or ``BAYES_ATTN_NO_EXPORTED_PROGRAMS``) is
    set to turn its part off (any value but ``""``, ``0``, ``false``, ``no``)."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def enable_compile_cache(enabled: bool = True) -> Path | None:
    """Turn on JAX's persistent compilation cache in :func:`cache_dir` for this process.

    Every program is cached, however fast it compiled (the theory's compile
    in well under JAX's default threshold of one second); unless
    ``BAYES_ATTN_NO_EXPORTED_PROGRAMS`` is set, the theory's traced programs are kept there too
    (:func:`exported_jit`). Returns the folder,
    or ``None`` when ``enabled`` is False, the environment turns the cache
    off, or the folder cannot be created or written (then the run goes on without it, after one warning).
    """
    global _library_checked
    _library_checked = True  # a decision made here (the command's --no-compile-cache too) is the library's
    if not enabled or disabled_by_env():
        return None
    folder = cache_dir()
    try:
        own_folder(folder)
        if not os.access(folder, os.W_OK | os.X_OK):  # else JAX warns at every program it cannot write
            raise PermissionError(f"{os.fspath(folder)!r} is not writable")
    except (OSError, ValueError) as err:
        warnings.warn(f"running without the persistent cache: {err}", RuntimeWarning, stacklevel=2)
        return None
    import jax

    jax.config.update("jax_compilation_cache_dir", os.fspath(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    global _exported_dir
    _exported_dir = None if disabled_by_env(ENV_NO_EXPORTED) else folder / "exported"
    _one_line_for_unreadable_entries(folder)
    return folder


def for_library() -> Path | None:
    """The library's own entry points (``solve_theory``, ``gp_limit``, ``sample_posterior``) call this first: once
    per process it turns the command's cache on (:func:`enable_compile_cache`), unless the caller configured JAX's
    cache already (``jax_compilation_cache_dir`` set, or ``jax_enable_compilation_cache`` off) or set
    ``BAYES_ATTN_NO_COMPILE_CACHE=1``, the opt-out. Returns the folder it turned on, else ``None``."""
    global _library_checked
    if _library_checked:
        return None
    _library_checked = True
    import jax

    if jax.config.jax_compilation_cache_dir or not jax.config.jax_enable_compilation_cache:
        return None
    return enable_compile_cache()


UNREADABLE = "Error reading persistent compilation cache entry"
"""How JAX's warning for a cache entry it cannot read begins (one per program; it then compiles and rewrites it)."""


def _one_line_for_unreadable_entries(folder: Path) -> None:
    """JAX's warnings for unreadable entries of the cache (truncated or corrupt files: one per program, each
    compiled afresh) become one warning line at the first (logger ``bayes_attn``), the rest counted in
    :data:`unreadable_entries`; the entries that fail to decompress are removed (:func:`_remove_unreadable`), so
    that JAX writes them afresh. Other warnings are shown as before. Installed once per process."""
    shown = warnings.showwarning
    if getattr(shown, "_bayes_attn", False):
        return

    def show(message, category, filename, lineno, file=None, line=None):
        text = str(message)
        if not text.startswith(UNREADABLE):
            return shown(message, category, filename, lineno, file, line)
        unreadable_entries[0] += 1
        what = text[len(UNREADABLE):].removeprefix(" for ")
        removed = _remove_unreadable(folder, what.split("'")[1] if what.count("'") >= 2 else "")
        if unreadable_entries[0] == 1:
            _log.warning(f"compile cache {os.fspath(folder)!r}: unreadable entries (the first: {what}) are "
                         + ("compiled afresh and written again" if removed else "compiled afresh (remove the folder to "
                            "rebuild the cache)") + "; no further message for them in this run")
        return None

    show._bayes_attn = True  # type: ignore[attr-defined]  # marks the hook as this package's
    warnings.showwarning = show


def _remove_unreadable(folder: Path, name: str) -> bool:
    """Remove the entries of program ``name`` (``<name>-<hash>-cache``, this user's plain files) in ``folder`` that
    JAX cannot decompress; whether any was removed (JAX skips writing an entry whose file exists)."""
    try:
        from jax._src.compilation_cache import decompress_executable
    except ImportError:
        return False
    removed = False
    for path in folder.glob(f"{glob.escape(name)}-*-cache") if name else ():
        try:
            if not _is_own(os.lstat(path), stat.S_ISREG):
                continue
            decompress_executable(path.read_bytes())
        except OSError:
            continue
        except Exception:  # noqa: BLE001 (zlib.error, zstd's): truncated or corrupt
            with contextlib.suppress(OSError):
                path.unlink()
                removed = True
    return removed


unreadable_entries = [0]
"""Unreadable cache entries this process met (:func:`_one_line_for_unreadable_entries`)."""


def exported_jit(fn: Callable) -> Callable:
    """``jax.jit(fn)`` that, once :func:`enable_compile_cache` turned the cache on, keeps its traced
    program on disk (:mod:`jax.export`) and loads it in later processes instead of tracing ``fn`` again.

    For functions of arrays and pytrees of arrays only (static information in
    the pytrees' structure, which is part of the key), whose program depends on
    nothing else than their arguments' structure and this package's source.
    A program is loaded only from this user's own plain file in this user's own
    folder (no symbolic link), holding the full key and the SHA-256 of the
    program's bytes, both checked before it is deserialised; any failure, up to
    its first call, traces ``fn`` again and rewrites the file (one debug line).
    """
    import jax

    jitted = jax.jit(fn)

    @functools.wraps(fn)
    def call(*args):
        if _exported_dir is None:
            return jitted(*args)
        leaves, treedef = jax.tree.flatten(args)
        key = _key_text(fn, treedef, leaves)
        name = _name(key)
        program = _programs.get(name)
        if program is not None:
            return program(*leaves)
        flat = lambda *xs: jitted(*jax.tree.unflatten(treedef, xs))  # noqa: E731
        _programs[name], out = _first_call(flat, leaves, _exported_dir / f"{name}.jaxexport", key)
        return out

    return call


@functools.cache
def _source_digest() -> str:
    """SHA-256 of this package's Python source (a program of an older source is never loaded)."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def program_key(fn: Callable, *args) -> str:
    """The name under which :func:`exported_jit` keeps ``fn``'s program for arguments like ``args``: a hash of
    the package's source, JAX's version, backend and precision, the arguments' structure, shapes and dtypes."""
    import jax

    leaves, treedef = jax.tree.flatten(args)
    return _name(_key_text(fn, treedef, leaves))


def _key_text(fn: Callable, treedef, leaves) -> str:
    """The full key of ``fn``'s program for ``leaves`` (stored in its file, compared when it is read)."""
    import jax
    import jaxlib

    parts = [fn.__module__, fn.__qualname__, str(treedef), jax.__version__, jaxlib.__version__,
             jax.default_backend(), str(bool(jax.config.jax_enable_x64)), _source_digest()]
    parts += [f"{a.shape}{a.dtype}{getattr(a, 'weak_type', False)}" for a in map(jax.typeof, leaves)]
    return "\n".join(parts)


def _name(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _first_call(flat: Callable, leaves: list, path: Path, key: str) -> tuple[Callable, object]:
    """The program of ``flat`` for ``leaves`` and its first result: loaded from ``path`` when the file is
    trusted and its program runs; else exported again and written there (``flat`` itself when that fails)."""
    reason = None
    try:
        program = _load(path, key)
        if program is not None:
            return program, program(*leaves)
    except Exception as err:  # untrusted, damaged, foreign or failing at its first call
        reason = f"{type(err).__name__}: {err}"
    program, note = _export(flat, leaves, path, key)
    try:
        out = program(*leaves)
    except Exception as err:  # an exported program that does not run: the traced one
        program, out, note = flat, flat(*leaves), f"{note}; not run: {type(err).__name__}: {err}"
    if reason is not None or note != "written":
        _log.debug("exported program %s: %s; traced again, %s", path.name, reason or "absent", note)
    return program, out


def _export(flat: Callable, leaves: list, path: Path, key: str) -> tuple[Callable, str]:
    """``flat`` exported for ``leaves`` and written to ``path``, with a note: ``"written"`` or what failed."""
    import jax

    if importlib.util.find_spec("flatbuffers") is None:  # jax.export's serialisation needs it
        return flat, "not exported: flatbuffers is not installed"
    try:
        avals = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) for a in map(jax.typeof, leaves)]
        exported = jax.export.export(jax.jit(flat))(*avals)
        data = exported.serialize()
    except Exception as err:  # e.g. a program jax.export cannot serialise
        return flat, f"not exported: {type(err).__name__}: {err}"
    program = jax.jit(exported.call)
    try:
        _write_atomic(path, _pack(key, data))
    except Exception as err:  # e.g. a folder that cannot be written, or not this user's
        return program, f"not written: {type(err).__name__}: {err}"
    return program, "written"


_MAGIC = b"bayes_attn exported program 1"


def _pack(key: str, program: bytes | bytearray) -> bytes:
    """A program file: a magic line, a JSON line with the full key and the program's SHA-256, the program."""
    header = json.dumps({"key": key, "sha256": hashlib.sha256(program).hexdigest()}).encode()
    return _MAGIC + b"\n" + header + b"\n" + program


def _unpack(data: bytes, key: str) -> bytes:
    """The program in the file ``data``; ``ValueError`` unless it is one, made for ``key``, with its digest."""
    parts = data.split(b"\n", 2)
    if len(parts) < 3 or parts[0] != _MAGIC:
        raise ValueError("not a program file of this package")
    try:
        header = json.loads(parts[1])
    except ValueError as err:
        raise ValueError(f"unreadable header: {err}") from None
    if not isinstance(header, dict) or header.get("key") != key:
        raise ValueError("made for another key")
    if header.get("sha256") != hashlib.sha256(parts[2]).hexdigest():
        raise ValueError("the program's SHA-256 does not match its bytes")
    return parts[2]


def _load(path: Path, key: str) -> Callable | None:
    """The program kept at ``path`` for ``key``, jitted; ``None`` when there is none; ``ValueError`` when the
    file or its folder is not to be trusted (see :func:`exported_jit`)."""
    import jax

    data = _read_own(path)
    if data is None:
        return None
    return jax.jit(jax.export.deserialize(bytearray(_unpack(data, key))).call)


def _read_own(path: Path) -> bytes | None:
    """The bytes of ``path``, ``None`` when it or its folder is absent; ``ValueError`` when either is a symbolic
    link, not a plain file or folder, or another user's."""
    try:
        _check_own(path.parent, os.lstat(path.parent), stat.S_ISDIR)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        return None
    except OSError:
        if os.path.islink(path):
            raise ValueError(f"{os.fspath(path)!r} is a symbolic link") from None
        raise
    with os.fdopen(fd, "rb") as f:
        _check_own(path, os.fstat(f.fileno()), stat.S_ISREG)
        return f.read()


def _is_own(st: os.stat_result, kind: Callable[[int], bool]) -> bool:
    """Whether ``st`` (not followed) is of ``kind`` (``stat.S_ISREG`` or ``stat.S_ISDIR``: not a symbolic link)
    and this user's."""
    return kind(st.st_mode) and (not hasattr(os, "getuid") or st.st_uid == os.getuid())


def _check_own(path: str | os.PathLike, st: os.stat_result, kind: Callable[[int], bool]) -> None:
    """``ValueError`` unless ``st``, of ``path``, passes :func:`_is_own`."""
    if not _is_own(st, kind):
        what = "folder" if kind is stat.S_ISDIR else "plain file"
        raise ValueError(f"{os.fspath(path)!r} is not a {what} of this user (a symbolic link, or another user's)")


def _write_atomic(path: Path, data: bytes) -> None:
    own_folder(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
