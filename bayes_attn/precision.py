"""Floating-point precision without global side effects.

Importing :mod:`bayes_attn` leaves ``jax_enable_x64`` as the caller set it. The
theory enters 64-bit mode itself (:func:`float64`), and a sampler run in
float64 does the same, for the duration of the call only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax

DTYPES = ("float64", "float32")


@contextlib.contextmanager
def x64(enabled: bool = True) -> Iterator[None]:
    """Context in which JAX's 64-bit mode is ``enabled`` (restored afterwards)."""
    if hasattr(jax, "enable_x64"):
        ctx = jax.enable_x64(enabled)
    else:  # older JAX
        from jax import experimental

        ctx = experimental.enable_x64() if enabled else experimental.disable_x64()
    with ctx:
        yield


def float64() -> contextlib.AbstractContextManager[None]:
    """Context in which JAX computes in float64 (used by the theory)."""
    return x64(True)
