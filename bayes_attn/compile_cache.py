"""JAX's persistent compilation cache for the ``bayes-attn`` command.

Compiling the theory's and the samplers' programs dominates a short run of
the command. With the cache each program compiles once per machine, JAX
version and shape; later runs load it from disk. The command turns the cache
on (the library leaves JAX's configuration as the caller set it); the folder
is the user's cache folder, never an output folder:

    $BAYES_ATTN_COMPILE_CACHE, else $XDG_CACHE_HOME/bayes_attn/jax, else ~/.cache/bayes_attn/jax

``--no-compile-cache`` or ``BAYES_ATTN_NO_COMPILE_CACHE=1`` turn it off. A
Dask sweep can hand :func:`cache_dir` to its workers
(``JAX_COMPILATION_CACHE_DIR``) so that they share it.

Tracing and lowering a program costs as much as loading it compiled: the
theory's entry points (:func:`exported_jit`) also keep their traced program
(StableHLO, :mod:`jax.export`) in ``exported/`` under the same folder, keyed by
the package's source, the JAX version, the arguments' shapes, dtypes and
static structure, so that a later run skips the trace too
(``BAYES_ATTN_NO_EXPORTED_PROGRAMS=1`` keeps compiled programs only).

Floating point: a program loaded from the cache is the one the compiler
would build again, so results do not depend on whether the cache was used.
An exported program is checked against the traced one in the tests (equal
to the last bit on the CPU).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import stat
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

ENV_DIR = "BAYES_ATTN_COMPILE_CACHE"
ENV_OFF = "BAYES_ATTN_NO_COMPILE_CACHE"
ENV_NO_EXPORTED = "BAYES_ATTN_NO_EXPORTED_PROGRAMS"
_log = logging.getLogger(__name__)
_exported_dir: Path | None = None  # set by enable_compile_cache: where exported_jit keeps its programs
_programs: dict[str, Callable] = {}  # this process's programs of exported_jit, by key


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
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
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
    off, or the folder cannot be created (then the run goes on without it).
    """
    if not enabled or disabled_by_env():
        return None
    folder = cache_dir()
    try:
        own_folder(folder)
    except (OSError, ValueError) as err:
        warnings.warn(f"running without the compilation cache: {err}", RuntimeWarning, stacklevel=2)
        return None
    import jax

    jax.config.update("jax_compilation_cache_dir", os.fspath(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    global _exported_dir
    _exported_dir = None if disabled_by_env(ENV_NO_EXPORTED) else folder / "exported"
    return folder


def exported_jit(fn: Callable) -> Callable:
    """``jax.jit(fn)`` that, once :func:`enable_compile_cache` turned the cache on, keeps its traced
    program on disk (:mod:`jax.export`) and loads it in later processes instead of tracing ``fn`` again.

    For functions of arrays and pytrees of arrays only (static information in
    the pytrees' structure, which is part of the key), whose program depends on
    nothing else than their arguments' structure and this package's source.
    Any failure to export, write or read a program falls back to tracing.
    """
    import jax

    jitted = jax.jit(fn)

    @functools.wraps(fn)
    def call(*args):
        if _exported_dir is None:
            return jitted(*args)
        leaves, treedef = jax.tree.flatten(args)
        key = _key(fn, treedef, leaves)
        program = _programs.get(key)
        if program is None:
            program = _programs[key] = _load_or_export(jitted, treedef, leaves, _exported_dir / f"{key}.jaxexport")
        return program(*leaves)

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
    """The key under which :func:`exported_jit` keeps ``fn``'s program for arguments like ``args``: the
    package's source, JAX's version, backend and precision, the arguments' structure, shapes and dtypes."""
    import jax

    leaves, treedef = jax.tree.flatten(args)
    return _key(fn, treedef, leaves)


def _key(fn: Callable, treedef, leaves) -> str:
    import jax
    import jaxlib

    parts = [fn.__module__, fn.__qualname__, str(treedef), jax.__version__, jaxlib.__version__,
             jax.default_backend(), str(bool(jax.config.jax_enable_x64)), _source_digest()]
    parts += [f"{a.shape}{a.dtype}{getattr(a, 'weak_type', False)}" for a in map(jax.typeof, leaves)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _load_or_export(jitted: Callable, treedef, leaves, path: Path) -> Callable:
    """The program at ``path`` as a jitted callable of the flat ``leaves``; exported and written there first if
    absent; ``jitted`` itself (of the unflattened arguments) when either fails."""
    import jax

    flat = lambda *xs: jitted(*jax.tree.unflatten(treedef, xs))  # noqa: E731
    try:
        program = jax.export.deserialize(bytearray(path.read_bytes()))
    except FileNotFoundError:
        program = None
    except Exception as err:  # a damaged or foreign file: export again
        _log.debug("cannot read the exported program %s: %s", path, err)
        program = None
    if program is None:
        if importlib.util.find_spec("flatbuffers") is None:  # jax.export's serialisation needs it
            return flat
        try:
            avals = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) for a in map(jax.typeof, leaves)]
            program = jax.export.export(jax.jit(flat))(*avals)
            _write_atomic(path, program.serialize())
        except Exception as err:  # e.g. a program jax.export cannot serialise, or a folder that cannot be written
            _log.debug("exported programs off for %s: %s", path.name, err)
            return flat
    return jax.jit(program.call)


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
