"""Floating-point precision without global side effects.

Importing :mod:`bayes_attn` leaves ``jax_enable_x64`` as the caller set it. The
theory enters 64-bit mode itself (:func:`float64`), and a sampler run in
float64 does the same, for the duration of the call only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax

__all__ = ["DTYPES", "check_temperature", "float64", "temperature_range", "x64"]

DTYPES = ("float64", "float32")


@contextlib.contextmanager
def x64(enabled: bool = True) -> Iterator[None]:
    """Context in which JAX's 64-bit mode is ``enabled``; the caller's setting is restored afterwards.

    It sets the process-wide flag rather than JAX's thread-local context, so
    that threads JAX starts meanwhile (host callbacks such as NumPyro's
    progress bar, parallel chains) see the same mode. Not for concurrent use
    from several threads.
    """
    before = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", bool(enabled))
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", before)


def float64() -> contextlib.AbstractContextManager[None]:
    """Context in which JAX computes in float64 (used by the theory)."""
    return x64(True)


def temperature_range(dtype: str) -> tuple[float, float]:
    """The temperatures a sampler in ``dtype`` takes: ``T`` and ``1/T`` at most the square root of the dtype's
    largest number, so that the likelihood's squares and sums over examples stay finite."""
    import numpy as np

    top = float(np.sqrt(np.finfo(np.dtype(dtype)).max))
    return 1.0 / top, top


def check_temperature(temperature, dtype: str, name: str = "temperature") -> float:
    """``temperature`` as a float, checked finite, > 0 and within :func:`temperature_range` of ``dtype`` (a
    one-line ``ValueError`` naming both, before computing)."""
    from . import checks as _checks

    t = _checks.positive(name, temperature)
    low, high = temperature_range(dtype)
    if not low <= t <= high:
        raise ValueError(f"{name} {t:.6g} is out of range for dtype {dtype}: T and 1/T must stay below "
                         f"{high:.2g} (the square root of its largest number); choose a temperature in "
                         f"[{low:.2g}, {high:.2g}]" + (" or float64" if dtype != "float64" else ""))
    return t
