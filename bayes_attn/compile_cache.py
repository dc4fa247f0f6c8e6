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

Floating point: a program loaded from the cache is the one the compiler
would build again, so results do not depend on whether the cache was used.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

ENV_DIR = "BAYES_ATTN_COMPILE_CACHE"
ENV_OFF = "BAYES_ATTN_NO_COMPILE_CACHE"


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


def disabled_by_env() -> bool:
    """Whether ``BAYES_ATTN_NO_COMPILE_CACHE`` asks for no cache (any value but ``""``, ``0``, ``false``, ``no``)."""
    return os.environ.get(ENV_OFF, "").strip().lower() not in ("", "0", "false", "no")


def enable_compile_cache(enabled: bool = True) -> Path | None:
    """Turn on JAX's persistent compilation cache in :func:`cache_dir` for this process.

    Every program is cached, however fast it compiled (the theory's compile
    in well under JAX's default threshold of one second). Returns the folder,
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
    return folder
