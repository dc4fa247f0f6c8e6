"""Bartlett factors of the order parameters' Wishart chain (docs/theory.md §7), in pure JAX.

The prior of ``(Ua, U_L, ..., U_1)`` is a chain of Wishart laws; each level
carries a lower-trapezoidal factor ``A_k`` (Bartlett: square roots of
chi-squares on the diagonal, standard normals below), and
``F_k = s_k / sqrt(n_k) · (I_{H_k} ⊗ F_{k+1}) · A_k`` gives ``U_k = F_k F_kᵀ``
at every width, singular levels (``n_k < m_k``) included. The ``wishart``
sampler (:mod:`bayes_attn.samplers._wishart`) samples these factors; the
finite-width correction (:mod:`bayes_attn.theory._correction`) expands the
action in them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["assemble", "chi2_dofs", "factor_chain", "factor_shapes", "level_names", "lower_indices", "num_parameters",
           "order_parameters_from_factors", "sites_of_order_parameters"]


def level_names(L: int) -> list[str]:
    """Level labels in the order of ``widths``: ``["1", ..., "L", "a"]``."""
    return [str(l) for l in range(1, L + 1)] + ["a"]


def factor_shapes(heads: Sequence[int], widths: Sequence[int]) -> list[tuple[int, int]]:
    """Shapes ``(m_k, r_k)`` of ``A_1, ..., A_L, A_a`` (the order of ``widths``)."""
    hs = (*heads, 1)  # H_1..H_L, H_a = 1
    shapes: list[tuple[int, int]] = []
    cols = 1  # cols(F_{L+2}) = 1
    for H, n in reversed(list(zip(hs, widths, strict=True))):  # k = a, L, ..., 1
        m = H * cols
        r = min(m, n)
        shapes.insert(0, (m, r))
        cols = r
    return shapes


def num_parameters(heads: Sequence[int], widths: Sequence[int]) -> int:
    """The sampled dimension ``Σ_k`` (entries of ``A_k``)."""
    return sum(r * m - r * (r - 1) // 2 for m, r in factor_shapes(heads, widths))


def chi2_dofs(m: int, r: int, n: int) -> np.ndarray:
    """Degrees of freedom ``n − i + 1`` (``i = 1..r``) of the diagonal of ``A`` (``m × r``, width ``n``)."""
    return n - np.arange(r, dtype=np.float64)


def lower_indices(m: int, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column indices of the strictly lower entries of an ``m × r`` matrix, column by column."""
    rows, cols = [], []
    for j in range(r):
        for i in range(j + 1, m):
            rows.append(i)
            cols.append(j)
    return np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)


def assemble(c_sqrt: jax.Array, z: jax.Array | None, m: int) -> jax.Array:
    """``A`` (``m × r``) from its diagonal ``sqrt(c)`` ``[r]`` and strictly lower entries ``z`` (column by column)."""
    r = c_sqrt.shape[0]
    A = jnp.zeros((m, r), c_sqrt.dtype).at[jnp.arange(r), jnp.arange(r)].set(c_sqrt)
    if z is not None and z.shape[0]:
        rows, cols = lower_indices(m, r)
        A = A.at[rows, cols].set(z)
    return A


def order_parameters_from_factors(A_list: Sequence[jax.Array], heads: Sequence[int], widths: Sequence[int],
                                  variances: Sequence[float]):
    """``([U_1, ..., U_L], Ua)`` from the Bartlett factors (docs/theory.md §7).

    Args:
        A_list: ``[A_1, ..., A_L, A_a]``, ``A_k`` of shape ``(m_k, r_k)`` of
            :func:`factor_shapes` (only its lower-trapezoidal part is meant
            to be non-zero, but the recursion uses the whole matrix).
        heads: ``(H_1, ..., H_L)``; widths: ``(N_1, ..., N_L, Na)``;
        variances: ``(s0², s1², ..., sL², sa²)`` (``s0²`` unused) as in
            :class:`~bayes_attn.network.Network`.

    Returns:
        ``U_l`` ``[D_l, D_l]`` with ``D_l = H_l ··· H_L`` (``h_l`` slowest) and
        ``Ua`` a scalar. Pure JAX: can be ``vmap``-ed over draws.
    """
    Fs = factor_chain(A_list, heads, widths, variances)
    Us = [F @ F.T for F in Fs]
    return Us[:-1], Us[-1][0, 0]


def factor_chain(A_list: Sequence[jax.Array], heads: Sequence[int], widths: Sequence[int],
                 variances: Sequence[float]) -> list[jax.Array]:
    """The factors ``[F_1, ..., F_L, F_a]`` (``U_k = F_k F_kᵀ``, ``F_k`` ``[D_k, r_k]``) of the recursion of §7.

    Arguments as for :func:`order_parameters_from_factors`.
    """
    L = len(heads)
    if len(A_list) != L + 1 or len(widths) != L + 1 or len(variances) != L + 2:
        raise ValueError(f"need L + 1 = {L + 1} factors and widths and L + 2 variances, got "
                         f"{len(A_list)}, {len(widths)}, {len(variances)}")
    dtype = A_list[-1].dtype
    hs = (*heads, 1)
    F = jnp.ones((1, 1), dtype)  # F_{L+2}
    Fs: list[jax.Array] = []
    for k in reversed(range(L + 1)):  # a, L, ..., 1
        A, H, n = A_list[k], hs[k], widths[k]
        rows, cols = F.shape
        if A.shape[0] != H * cols:
            raise ValueError(f"factor {level_names(L)[k]} must have {H * cols} rows, got shape {A.shape}")
        scale = jnp.asarray(math.sqrt(variances[k + 1] / n), dtype)
        # (I_H ⊗ F) A: row (h, p) is F[p, :] · A[h·cols:(h+1)·cols, :]
        F = scale * jnp.einsum("pq,hqr->hpr", F, A.reshape(H, cols, A.shape[1])).reshape(H * rows, A.shape[1])
        Fs.insert(0, F)
    return Fs


def sites_of_order_parameters(Us: Sequence[np.ndarray], Ua: float, heads: Sequence[int], widths: Sequence[int],
                              variances: Sequence[float]) -> np.ndarray:
    """Bartlett sites ``θ`` (the logs of every level's chi-square diagonals, then its lower entries) of positive
    definite ``[U_1, ..., U_L]`` and ``Ua`` (NumPy float64).

    Level by level from the top, ``F_k = (s_k/√n_k)(I ⊗ F_{k+1}) A_k`` with ``A_k`` the first ``r_k`` columns
    of the Cholesky factor of ``M⁺ U_k M⁺ᵀ``, ``M = (s_k/√n_k)(I ⊗ F_{k+1})``: exactly ``U_k`` where the level
    has full rank, its projection onto rank ``r_k`` where it is singular.
    """
    var = variances
    shapes = factor_shapes(heads, widths)
    hs = (*heads, 1)
    mats = [*(np.asarray(U, np.float64) for U in Us), np.array([[float(Ua)]])]
    F: np.ndarray = np.ones((1, 1))
    logc: list[np.ndarray] = [np.empty(0)] * len(shapes)  # every entry set below
    low: list[np.ndarray] = [np.empty(0)] * len(shapes)
    for k in reversed(range(len(shapes))):
        m, r = shapes[k]
        M = math.sqrt(var[k + 1] / widths[k]) * np.kron(np.eye(hs[k]), F)
        Mp = np.linalg.pinv(M)
        B = Mp @ mats[k] @ Mp.T
        A = np.linalg.cholesky(0.5 * (B + B.T))[:, :r]
        rows, cols = lower_indices(m, r)
        logc[k] = 2.0 * np.log(np.diag(A))
        low[k] = A[rows, cols]
        F = M @ A
    return np.concatenate(logc + low)
