"""Coordinates of the order parameters ``U_1, ..., U_L`` (docs/theory.md §4).

``U_l`` is symmetric of linear size ``m_l = H_l H_{l+1} ... H_L``. Two flat
coordinate systems cover all of them at once:

- *vech*: the upper-triangular entries of every ``U_l`` (row-major), concatenated,
  ``[n]`` with ``n = sum_l m_l (m_l + 1) / 2``;
- *log-Cholesky*: ``U_l = L_l L_lᵀ`` with ``L_l`` lower triangular; the
  lower-triangular entries of every ``L_l`` (row-major), the log taken on the
  diagonal, concatenated, also ``[n]``. Every point is positive definite.

The functions taking flat vectors accept NumPy arrays (and then compute and
return NumPy, whatever JAX's precision) or JAX arrays and tracers (then JAX:
they can be jit-compiled and differentiated).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache

import jax.numpy as jnp
import numpy as np

__all__ = [
    "sizes",
    "pack",
    "symmetric",
    "unpack",
    "vech_weights",
    "matrix_gradients",
    "log_cholesky",
    "log_cholesky_to_vech",
]


def sizes(heads: Sequence[int]) -> tuple[int, ...]:
    """Linear sizes ``(m_1, ..., m_L)`` of ``U_1..U_L``: ``m_l = H_l ... H_L``."""
    return tuple(math.prod(heads[l:]) for l in range(len(heads)))


def _xp(a):
    return np if isinstance(a, np.ndarray) else jnp


@cache
def _symmetric_index(m: int) -> np.ndarray:
    """``[m, m]``: position in the vech of ``U[i, j]`` (``U[j, i]`` for ``i > j``)."""
    idx = np.empty((m, m), dtype=np.intp)
    i, j = np.triu_indices(m)
    idx[i, j] = idx[j, i] = np.arange(len(i))
    return idx


@cache
def _lower_index(m: int) -> np.ndarray:
    """``[m, m]``: position of ``L[i, j]`` among the row-major lower-triangular
    entries, or ``m (m + 1) / 2`` (a zero appended) above the diagonal."""
    n = m * (m + 1) // 2
    idx = np.full((m, m), n, dtype=np.intp)
    i, j = np.tril_indices(m)
    idx[i, j] = np.arange(n)
    return idx


def pack(Us: Sequence[np.ndarray]) -> np.ndarray:
    """Symmetric matrices ``[U_1, ..., U_L]`` (``[m_l, m_l]``) -> vech ``[n]`` (NumPy)."""
    return np.concatenate([np.asarray(U)[np.triu_indices(U.shape[0])] for U in Us])


def symmetric(v, m: int):
    """Upper-triangular entries ``[m (m + 1) / 2]`` -> the symmetric matrix ``[m, m]``."""
    return v[_symmetric_index(m)]


def unpack(theta, heads: Sequence[int]) -> list:
    """Vech ``[n]`` -> symmetric matrices ``[U_1, ..., U_L]``, ``U_l`` ``[m_l, m_l]``."""
    Us, k = [], 0
    for m in sizes(heads):
        n = m * (m + 1) // 2
        Us.append(symmetric(theta[k : k + n], m))
        k += n
    return Us


def vech_weights(heads: Sequence[int]) -> np.ndarray:
    """``[n]``: 1 on diagonal entries, 2 off it, so that ``∂f/∂vech = weights · ∂f/∂U``
    (``f`` read as a function of the symmetric ``U``)."""
    return np.concatenate([np.where(i == j, 1.0, 2.0) for m in sizes(heads) for i, j in [np.triu_indices(m)]])


def matrix_gradients(g, heads: Sequence[int]) -> list[np.ndarray]:
    """Vech gradient ``[n]`` -> symmetric matrix gradients ``∂f/∂U_l`` ``[m_l, m_l]`` (NumPy)."""
    return unpack(np.asarray(g, dtype=np.float64) / vech_weights(heads), heads)


def log_cholesky(Us: Sequence[np.ndarray]) -> np.ndarray:
    """SPD matrices ``[U_1, ..., U_L]`` -> log-Cholesky coordinates ``[n]`` (NumPy).

    Raises ``numpy.linalg.LinAlgError`` if some ``U_l`` is not positive definite.
    """
    out = []
    for U in Us:
        Lc = np.linalg.cholesky(np.asarray(U, dtype=np.float64))
        i, j = np.tril_indices(Lc.shape[0])
        v = Lc[i, j]
        out.append(np.where(i == j, np.log(np.where(i == j, v, 1.0)), v))
    return np.concatenate(out)


def log_cholesky_to_vech(psi, heads: Sequence[int]):
    """Log-Cholesky coordinates ``[n]`` -> vech ``[n]`` of every ``U_l = L_l L_lᵀ``."""
    xp = _xp(psi)
    out, k = [], 0
    for m in sizes(heads):
        n = m * (m + 1) // 2
        i, j = np.tril_indices(m)
        v = xp.where(i == j, xp.exp(psi[k : k + n]), psi[k : k + n])
        Lc = xp.concatenate([v, xp.zeros(1, dtype=v.dtype)])[_lower_index(m)]  # [m, m], zero above
        out.append((Lc @ Lc.T)[np.triu_indices(m)])
        k += n
    return xp.concatenate(out)
