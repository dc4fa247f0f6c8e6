"""BLAS threads for a sampling process (opt-in: importing the package changes nothing).

JAX's CPU LAPACK calls (Cholesky, triangular solves) go to OpenBLAS, whose
spinning threads oversubscribe the cores when chains run in parallel; for
the small matrices of these models one thread is several times faster
(measured: 17–25 ms per gradient against about 1 ms on a busy 2-core machine).
The ``bayes-attn`` command calls :func:`one_blas_thread` for its own process;
scripts that sample should call it too, first thing.
"""

from __future__ import annotations

import os


def one_blas_thread() -> bool:
    """Use one BLAS thread in this process, unless ``OPENBLAS_NUM_THREADS`` or
    ``OMP_NUM_THREADS`` is set already. Returns whether it changed anything."""
    if "OPENBLAS_NUM_THREADS" in os.environ or "OMP_NUM_THREADS" in os.environ:
        return False
    os.environ["OPENBLAS_NUM_THREADS"] = "1"  # for libraries loaded from now on
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")  # for those loaded already
    return True
