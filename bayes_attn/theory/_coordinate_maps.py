"""The coordinates ``θ`` of the finite-width correction (docs/theory.md §8): ``θ → ([U_1..U_L], Ua)`` and the prior
part of ``S(θ)`` (``− log p(U) − log |∂U/∂θ|``, no training data), in Bartlett sites and in log-Cholesky coordinates.

Pure JAX, traced by :mod:`bayes_attn.theory._correction`: ``theta`` ``[n]``, ``problem`` a
:class:`~bayes_attn.theory._objective.Problem`, ``shapes`` the factor shapes ``[(m_k, r_k)]`` of
:func:`bayes_attn.theory._bartlett.factor_shapes` (Bartlett sites only).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve

from ._bartlett import assemble, order_parameters_from_factors
from ._coordinates import log_cholesky_to_vech, sizes, unpack
from ._objective import Problem

__all__ = ["MAPS", "bartlett_order_parameters", "bartlett_prior", "log_cholesky_order_parameters", "log_cholesky_prior",
           "log_cholesky_split", "n_diagonals", "n_lower"]


def n_diagonals(shapes) -> int:
    return sum(r for _, r in shapes)


def n_lower(m: int, r: int) -> int:
    return r * m - r * (r + 1) // 2


def bartlett_order_parameters(theta, problem: Problem, shapes):
    """``([U_1..U_L], Ua)`` from Bartlett-site coordinates ``θ = (log c, lower entries)``."""

    L = len(problem.heads)
    nr = n_diagonals(shapes)
    logc, low = theta[:nr], theta[nr:]
    A, i, j = [], 0, 0
    for k, (m, r) in enumerate(shapes):  # levels 1..L, a
        nl = n_lower(m, r)
        a = assemble(jnp.exp(0.5 * logc[i : i + r]), low[j : j + nl] if nl else None, m)
        A.append(jnp.sqrt(problem.variances[k + 1] / problem.widths[k]) * a)  # the scale s_k / sqrt(n_k), traced
        i, j = i + r, j + nl
    # scales already applied: unit widths and variances in the recursion
    return order_parameters_from_factors(A, problem.heads, (1,) * (L + 1), (1.0,) * (L + 2))


def bartlett_prior(theta, problem: Problem, shapes):
    """``− log`` of the site density: ``Σ (e^{u}/2 − ν u/2)`` over ``u = log c``, ``c ~ χ²(ν)``, plus ``|z|²/2``."""
    nr = n_diagonals(shapes)
    logc, low = theta[:nr], theta[nr:]
    nu = _site_degrees(theta, problem, shapes)
    return jnp.sum(0.5 * jnp.exp(logc) - 0.5 * nu * logc) + 0.5 * jnp.sum(low * low)


def _site_degrees(theta, problem: Problem, shapes):
    """The degrees of freedom ``ν`` of every diagonal site, level by level (``N_k − i`` for row ``i``)."""
    return jnp.concatenate([problem.widths[k] - jnp.arange(r, dtype=theta.dtype) for k, (_, r) in enumerate(shapes)])


def cbrt_to_log(theta, shapes):
    """Bartlett sites in cube-root coordinates ``(w, z)``, ``w = c^{1/3}``, to ``(log c, z)``."""
    nr = n_diagonals(shapes)
    return jnp.concatenate([3.0 * jnp.log(theta[:nr]), theta[nr:]])


def bartlett_cbrt_order_parameters(theta, problem: Problem, shapes):
    """``([U_1..U_L], Ua)`` from cube-root Bartlett coordinates ``θ = (c^{1/3}, lower entries)``."""
    return bartlett_order_parameters(cbrt_to_log(theta, shapes), problem, shapes)


def bartlett_cbrt_prior(theta, problem: Problem, shapes):
    """``− log`` of the site density in ``w = c^{1/3}`` (Wilson–Hilferty: near normal for a few degrees of
    freedom): ``c ~ χ²(ν)`` gives ``p(w) ∝ w^{3ν/2 − 1} e^{−w³/2}``, so ``Σ (w³/2 − (3ν/2 − 1) log w)``, plus
    ``|z|²/2``."""
    nr = n_diagonals(shapes)
    w, low = theta[:nr], theta[nr:]
    nu = _site_degrees(theta, problem, shapes)
    return jnp.sum(0.5 * w**3 - (1.5 * nu - 1.0) * jnp.log(w)) + 0.5 * jnp.sum(low * low)


def log_cholesky_split(theta, heads):
    """Cholesky factors ``L_l``, their log-diagonals, and ``log Ua`` from log-Cholesky coordinates."""
    chols, logdiags, k = [], [], 0
    for m in sizes(heads):
        n = m * (m + 1) // 2
        seg = theta[k : k + n]
        i, j = np.tril_indices(m)
        diag_pos = np.flatnonzero(i == j)  # row-major: the diagonal of row i
        logdiags.append(seg[diag_pos])
        vals = jnp.where(i == j, jnp.exp(seg), seg)
        Lc = jnp.zeros((m, m), theta.dtype).at[i, j].set(vals)
        chols.append(Lc)
        k += n
    return chols, logdiags, theta[k]


def log_cholesky_order_parameters(theta, problem: Problem, shapes=None):
    n = theta.shape[0] - 1
    Us = unpack(log_cholesky_to_vech(theta[:n], problem.heads), problem.heads)
    return Us, jnp.exp(theta[n])


def log_cholesky_prior(theta, problem: Problem, shapes=None):
    """``− log p(U) − log |∂U/∂θ|`` of docs/theory.md §8 without the data term (log-Cholesky coordinates)."""
    heads = problem.heads
    L = len(heads)
    N, s2 = problem.widths, problem.variances
    chols, logdiags, log_ua = log_cholesky_split(theta, heads)
    Ua = jnp.exp(log_ua)
    logdets = [2.0 * jnp.sum(d) for d in logdiags]
    Na, sa2 = N[L], s2[L + 1]
    S = Na * Ua / (2.0 * sa2) - (Na / 2.0 - 1.0) * log_ua
    ms = sizes(heads)
    for l in range(L):  # 0-based level: layer l+1, width N[l], variance s2[l+1]
        D, H = ms[l], heads[l]
        U = chols[l] @ chols[l].T
        if l == L - 1:
            tr = jnp.trace(U) / (s2[l + 1] * Ua)
            logdet_above = log_ua
        else:
            M = ms[l + 1]
            trl = jnp.einsum("iaib->ab", U.reshape(H, M, H, M))  # tr_l(U_l)
            tr = jnp.trace(cho_solve((chols[l + 1], True), trl)) / s2[l + 1]
            logdet_above = logdets[l + 1]
        S = S + 0.5 * N[l] * tr - 0.5 * (N[l] - D - 1.0) * logdets[l] + 0.5 * N[l] * H * logdet_above
    # minus log Jacobian: U = L Lᵀ gives 2^m Π L_ii^{m−i+1}; L_ii = e^{ψ_ii} one more L_ii; Ua = e^{ψ_a}
    for m, d in zip(ms, logdiags, strict=True):
        S = S - m * math.log(2.0) - jnp.sum((m + 1.0 - jnp.arange(m, dtype=theta.dtype)) * d)
    return S - log_ua


MAPS = {"bartlett": (bartlett_order_parameters, bartlett_prior),
        "bartlett_cbrt": (bartlett_cbrt_order_parameters, bartlett_cbrt_prior),
        "log_cholesky": (log_cholesky_order_parameters, log_cholesky_prior)}
"""Per coordinate choice: ``(θ → ([U_1..U_L], Ua), θ → prior part of S)``."""
