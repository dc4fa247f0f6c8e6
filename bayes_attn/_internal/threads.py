"""CPU thread settings for the small dense problems of this package, as a context.

The matrices here are small (``P × P`` Cholesky factors with ``P`` in the
hundreds, a few ``D × D`` order parameters), so extra threads only help when
cores are idle; on a shared machine a thread that spins while waiting for a
busy core turns each millisecond-sized step into a wait for the scheduler.
Three settings decide how a sampling call or a theory solve uses the cores:

===================  ==========================================  =============================
setting              what it governs                             when it can change
===================  ==========================================  =============================
BLAS threads         OpenBLAS under NumPy and SciPy, which JAX's  any time (``threadpoolctl``):
                     CPU LAPACK calls (Cholesky, triangular       :func:`limits` sets them for
                     solves, ``eigh``)                            the duration of a call
XLA intra-op         Eigen's thread pool for XLA's own CPU ops    only before JAX's CPU backend
threads              (dots, reductions)                           starts (``XLA_FLAGS``):
                                                                  :func:`single_thread_xla`
chain method         NumPyro's ``parallel`` (one device per       per call
                     chain; the device count is fixed when JAX
                     starts), ``vectorized``, ``sequential``
===================  ==========================================  =============================

The library's defaults: :func:`limits` (one BLAS thread) wraps every
:func:`~bayes_attn.sample_posterior` call and every theory solve and restores
the caller's setting afterwards; ``chain_method="auto"`` runs chains in
parallel when there is a device per chain, vectorized on an accelerator, and
one after another on a CPU with fewer devices than chains (vectorized NUTS
waits at every draw for the longest trajectory of all chains, and its batched
steps are what extra threads would be needed for). XLA's thread pool is left
as JAX started it: a library cannot change it once JAX runs, and no single
choice wins: one intra-op thread helps small problems and hurts image-scale
matrix products. A script of small problems on a shared machine can
call :func:`single_thread_xla` before it first uses JAX.
``benchmarks/bench_contention.py`` measures the library's defaults quiet and
beside one CPU-bound process per core.

Every posterior records the settings it ran under (:func:`record`, the
attribute ``threads`` of its tree).

Floating point: the thread counts and the chain method decide how sums are
split and in which order partial results are added, so results are
bit-for-bit reproducible for the same settings, versions and machine, and
differ at rounding level otherwise. A NUTS trajectory amplifies a rounding
difference into a different (equally valid) chain, so draws made under other
settings agree only in distribution, not draw by draw.

Not for concurrent use from several threads of one process (``threadpoolctl``
changes process-wide state, as :mod:`bayes_attn._internal.precision` does).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

DEFAULT_BLAS_THREADS = 1
"""BLAS threads inside :func:`limits` (measured: ``benchmarks/results/contention.json``)."""

_ACTIVE: list[int] = []  # BLAS limits of the enclosing :func:`limits` contexts

ENV_BLAS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
XLA_SINGLE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def cores() -> int:
    """CPU cores this process may run on (its affinity where the platform says, else the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _blas_loaded() -> None:
    """Load the BLAS libraries JAX's CPU LAPACK uses, so that a limit reaches them."""
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401  (JAX's CPU LAPACK kernels are SciPy's)


def blas_threads() -> int | None:
    """Threads of the BLAS libraries loaded now (the largest; ``None`` if none is loaded)."""
    from threadpoolctl import threadpool_info

    counts = [int(i["num_threads"]) for i in threadpool_info() if i.get("user_api") == "blas"]
    return max(counts) if counts else None


@contextlib.contextmanager
def limits(blas: int | None = DEFAULT_BLAS_THREADS) -> Iterator[None]:
    """Context (also a decorator) with ``blas`` BLAS threads; the caller's setting is restored afterwards.

    ``blas=None`` leaves them alone, as does an explicit ``OPENBLAS_NUM_THREADS``,
    ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` in the environment (the user's choice wins).
    """
    if blas is not None and (isinstance(blas, bool) or not isinstance(blas, int) or blas < 1):
        raise ValueError(f"blas must be a positive int or None, got {blas!r}")
    if blas is None or any(v in os.environ for v in ENV_BLAS) or (_ACTIVE and _ACTIVE[-1] == blas):
        yield  # nothing to change (nested calls cost nothing)
        return
    _blas_loaded()
    from threadpoolctl import threadpool_limits

    with threadpool_limits(blas, user_api="blas"):
        _ACTIVE.append(blas)
        try:
            yield
        finally:
            _ACTIVE.pop()


def one_blas_thread() -> bool:
    """Use one BLAS thread in this whole process from now on (for scripts; the library's calls need not).

    Does nothing when ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS`` or
    ``MKL_NUM_THREADS`` is set already. Returns whether it changed anything.
    """
    if any(v in os.environ for v in ENV_BLAS):
        return False
    os.environ["OPENBLAS_NUM_THREADS"] = "1"  # for libraries loaded from now on
    _blas_loaded()
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")  # for those loaded already
    return True


def jax_started() -> bool:
    """Whether JAX has started a backend in this process (then XLA's flags are fixed)."""
    import sys

    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge._backends)
    except (ImportError, AttributeError):  # unknown JAX internals: assume started
        return True


def single_thread_xla() -> bool:
    """Ask XLA's CPU backend for one intra-op thread, if JAX has not started yet.

    Appends :data:`XLA_SINGLE_THREAD` to ``XLA_FLAGS`` unless the variable
    already names ``xla_cpu_multi_thread_eigen`` (the user's choice wins).
    Returns whether the setting will take effect; ``False`` once JAX's
    backend runs (it reads ``XLA_FLAGS`` once, when it starts).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" in flags or jax_started():
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {XLA_SINGLE_THREAD}".strip()
    return True


def xla_threads() -> str:
    """XLA's CPU intra-op setting as read from ``XLA_FLAGS``: ``"single"`` or ``"default"`` (all cores)."""
    flags = os.environ.get("XLA_FLAGS", "")
    return "single" if re.search(r"xla_cpu_multi_thread_eigen=(false|0)", flags) else "default"


def record(chain_method: str | None = None) -> dict:
    """The settings in force now, for a result's provenance (JSON-ready)."""
    import jax

    out = {
        "blas_threads": blas_threads(),
        "xla_intra_op": xla_threads(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "devices": f"{jax.local_device_count()} x {jax.devices()[0].platform}",
        "cpu_count": os.cpu_count(),
    }
    if chain_method is not None:
        out["chain_method"] = chain_method
    return out


__all__ = ["DEFAULT_BLAS_THREADS", "blas_threads", "jax_started", "limits", "one_blas_thread", "record",
           "single_thread_xla", "xla_threads"]
