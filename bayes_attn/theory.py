"""Finite-width theory of THEORY.md §3–4: the action, its minimiser, predictors.

Symbols (THEORY.md):

- ``C[pi, pi'](mu, nu)``: path–path kernel ``[D, D, P, P]`` (§3);
- ``U_l``: order parameter of hidden layer ``l`` (``l = 1..L``), symmetric
  positive definite, of size ``H_l H_{l+1} ... H_L`` with ``h_l`` slowest;
  ``U = U_1`` is the ``D × D`` matrix over paths;
- ``Ua``: readout order parameter (a positive scalar), eliminated through its
  closed form given ``U_L``;
- ``K(U_1) = sum U_1[pi, pi'] C[pi, pi']``: the renormalised kernel ``[P, P]``;
- ``G = K + temperature · I``;
- ``S``: the action of §4, minimised over all ``U_l``.

The solver minimises ``S / N_max`` (``N_max`` = largest width) with ``Ua``
eliminated, by damped Newton steps with exact derivatives (``jax`` autodiff
for the width terms; closed-form gradient and Hessian for the data term
``ln det G + Yᵀ G⁻¹ Y``). It steps in log-Cholesky coordinates of every ``U_l``
(``U_l = L_l L_lᵀ``, log of ``L_l``'s diagonal), so iterates stay positive
definite and ``−ln det U_l`` is linear; a backtracking Armijo line search
rejects non-finite values (a failed Cholesky gives NaN), and where the Hessian
is not positive definite its eigenvalues are replaced by their absolute
values. Convergence, ``max_gradient`` and the reported Hessian refer to the
independent (upper-triangular, "vech") entries of the ``U_l`` themselves.
Everything is jit-compiled once per head structure and training-set size;
widths, variances and temperature are traced, so changing them does not
recompile. No inverse is ever formed: every solve and log-determinant goes
through a Cholesky factor and triangular solves.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from . import _checks
from .network import Network, kernel_from_xi, path_kernel_from_xi

__all__ = ["Theory", "solve_theory", "gp_limit", "action", "action_gradient", "gp_order_parameters"]

C_MAX_ENTRIES = 20_000_000
"""Precompute ``C`` (folded onto the vech entries of ``U_1``, ``[D(D+1)/2, P, P]``)
when ``D² P²`` is at most this; else work through ``xi`` (``[P, D, N0]``)."""


# ----------------------------------------------------------------------------
# structure: sizes, packing of the vech entries
# ----------------------------------------------------------------------------
def _sizes(heads: Sequence[int]) -> tuple[int, ...]:
    """Linear sizes of ``U_1..U_L``: ``H_l ... H_L``."""
    return tuple(math.prod(heads[l:]) for l in range(len(heads)))


def _unpack(theta: jax.Array, heads: tuple[int, ...]) -> list[jax.Array]:
    """Vech entries ``[n]`` -> symmetric matrices ``[U_1, ..., U_L]``."""
    Us, k = [], 0
    for m in _sizes(heads):
        iu = np.triu_indices(m)
        n = len(iu[0])
        A = jnp.zeros((m, m), theta.dtype).at[iu].set(theta[k : k + n])
        Us.append(A + A.T - jnp.diag(jnp.diag(A)))
        k += n
    return Us


def _pack(Us: Sequence[np.ndarray]) -> np.ndarray:
    """Symmetric matrices -> their upper-triangular entries, concatenated."""
    return np.concatenate([np.asarray(U)[np.triu_indices(U.shape[0])] for U in Us])


def _vech_weights(heads: Sequence[int]) -> np.ndarray:
    """1 on diagonal entries, 2 off it: ``d f / d vech = weights * (matrix gradient)``."""
    return np.concatenate([np.where(i == j, 1.0, 2.0) for m in _sizes(heads) for i, j in [np.triu_indices(m)]])


def _vech_to_matrices(v: np.ndarray, heads: Sequence[int]) -> list[np.ndarray]:
    """Vech entries -> symmetric matrices ``[U_1, ..., U_L]`` (numpy)."""
    out, k = [], 0
    for m in _sizes(heads):
        iu = np.triu_indices(m)
        n = len(iu[0])
        A = np.zeros((m, m))
        A[iu] = v[k : k + n]
        out.append(A + A.T - np.diag(np.diag(A)))
        k += n
    return out


def _matrix_gradients(g: np.ndarray, heads: Sequence[int]) -> list[np.ndarray]:
    """Vech gradient -> symmetric matrix gradients ``∂f/∂U_l`` (``f`` read as ``f((U+U^T)/2)``)."""
    return _vech_to_matrices(np.asarray(g) / _vech_weights(heads), heads)


def gp_order_parameters(net: Network) -> tuple[list[np.ndarray], float]:
    """GP values: ``U_L = sL² sa² I``, ``U_l = s_l² I ⊗ U_{l+1}``, ``Ua = sa²``."""
    s2 = net.variances
    Ua = float(s2[-1])
    Us = [s2[net.L] * Ua * np.eye(net.heads[-1])]
    for l in reversed(range(net.L - 1)):  # 0-based layer index l (layer l+1)
        Us.insert(0, s2[l + 1] * np.kron(np.eye(net.heads[l]), Us[0]))
    return Us, Ua


# ----------------------------------------------------------------------------
# the action (jax)
# ----------------------------------------------------------------------------
def _chol_logdet(A: jax.Array) -> tuple[jax.Array, jax.Array]:
    Lc = jnp.linalg.cholesky(A)  # NaN when A is not positive definite
    return Lc, 2.0 * jnp.sum(jnp.log(jnp.diagonal(Lc)))


def _readout_closed_form(UL: jax.Array, heads, widths, variances) -> jax.Array:
    """``Ua`` minimising ``S`` given ``U_L``: the positive root of ``Ua² + b Ua − g = 0``."""
    L = len(heads)
    Na, NL, sa2, sL2 = widths[L], widths[L - 1], variances[L + 1], variances[L]
    b = sa2 * (heads[-1] * NL / Na - 1.0)
    g = jnp.trace(UL) * NL * sa2 / (Na * sL2)
    r = jnp.sqrt(b * b + 4.0 * g)
    # Both forms equal the root; pick the one without cancellation.
    return jnp.where(b >= 0, 2.0 * g / (b + r), (r - b) / 2.0)


def _kernel(U1: jax.Array, basis: jax.Array, mode: str) -> jax.Array:
    """``K = sum U_1 C`` on the training set, ``[P, P]``.

    mode ``"C"``: ``basis`` is ``C`` folded onto the vech entries of ``U_1``,
    ``[n_1, P, P]`` (``C[i,j] + C[j,i]`` off the diagonal, ``C[i,i]`` on it);
    mode ``"xi"``: ``basis`` is ``xi · sqrt(s0² / (N0 D))``, ``[P, D, N0]``.
    """
    if mode == "C":
        iu = np.triu_indices(U1.shape[0])
        return jnp.einsum("k,kpq->pq", U1[iu], basis)
    return jnp.einsum("adi,de,bei->ab", basis, U1, basis, optimize="optimal")


def _entropy(Us: list[jax.Array], Ua: jax.Array, data: dict, heads: tuple[int, ...]) -> jax.Array:
    """The width terms of ``S`` (all but ``ln det G + Yᵀ G⁻¹ Y``), unscaled."""
    L = len(heads)
    N, s2 = data["widths"], data["variances"]
    chols, logdets = zip(*[_chol_logdet(U) for U in Us])
    Na, sa2, NL, sL2 = N[L], s2[L + 1], N[L - 1], s2[L]
    S = Na * (Ua / sa2 - jnp.log(Ua))
    S = S + NL * (jnp.trace(Us[-1]) / (sL2 * Ua) - logdets[-1] + heads[-1] * jnp.log(Ua))
    for l in range(L - 1):  # 0-based: layer l+1, width N[l], variance s2[l+1]
        H, M = heads[l], Us[l + 1].shape[0]
        trl = jnp.einsum("iaib->ab", Us[l].reshape(H, M, H, M))  # tr_l(U_l)
        X = jax.scipy.linalg.cho_solve((chols[l + 1], True), trl)
        S = S + N[l] * (jnp.trace(X) / s2[l + 1] - logdets[l] + H * logdets[l + 1])
    return S


def _data_term(U1: jax.Array, data: dict, mode: str) -> jax.Array:
    """``ln det G + Yᵀ G⁻¹ Y`` with ``G = K(U_1) + temperature I``."""
    K = _kernel(U1, data["basis"], mode)
    Gm = K + data["temperature"] * jnp.eye(K.shape[0], dtype=K.dtype)
    Lg, logdet_G = _chol_logdet(Gm)
    z = jax.scipy.linalg.solve_triangular(Lg, data["y"], lower=True)
    return logdet_G + z @ z


def _action(Us: list[jax.Array], Ua: jax.Array, data: dict, heads: tuple[int, ...], mode: str) -> jax.Array:
    """``S`` of THEORY.md §4 (unscaled)."""
    return _entropy(Us, Ua, data, heads) + _data_term(Us[0], data, mode)


def _reduced(theta: jax.Array, data: dict, heads: tuple[int, ...], mode: str) -> jax.Array:
    """``S / N_max`` with ``Ua`` at its closed form, as a function of the vech entries."""
    Us = _unpack(theta, heads)
    Ua = _readout_closed_form(Us[-1], heads, data["widths"], data["variances"])
    return _action(Us, Ua, data, heads, mode) * data["scale"]


def _reduced_entropy(theta: jax.Array, data: dict, heads: tuple[int, ...]) -> jax.Array:
    Us = _unpack(theta, heads)
    Ua = _readout_closed_form(Us[-1], heads, data["widths"], data["variances"])
    return _entropy(Us, Ua, data, heads) * data["scale"]


def _data_derivatives(theta1: jax.Array, data: dict, heads: tuple[int, ...], mode: str):
    """Value, gradient ``[n_1]`` and Hessian ``[n_1, n_1]`` of the data term in the vech entries of ``U_1``.

    With ``C_k = ∂K/∂θ_k``, ``G = Lg Lgᵀ``, ``Ĉ_k = Lg⁻¹ C_k Lg⁻ᵀ`` (two
    triangular solves) and ``z = Lg⁻¹ Y``:
    ``∂_k = tr Ĉ_k − zᵀ Ĉ_k z`` and ``∂_k ∂_l = −tr(Ĉ_k Ĉ_l) + 2 (Ĉ_k z)·(Ĉ_l z)``.
    """
    D = _sizes(heads)[0]
    iu = np.triu_indices(D)
    A = jnp.zeros((D, D), theta1.dtype).at[iu].set(theta1)
    U1 = A + A.T - jnp.diag(jnp.diag(A))
    basis = data["basis"]
    K = _kernel(U1, basis, mode)
    P = K.shape[0]
    Lg, logdet_G = _chol_logdet(K + data["temperature"] * jnp.eye(P, dtype=K.dtype))
    z = jax.scipy.linalg.solve_triangular(Lg, data["y"], lower=True)
    solve = partial(jax.scipy.linalg.solve_triangular, Lg, lower=True)
    if mode == "C":
        n = basis.shape[0]
        Lb = jnp.broadcast_to(Lg, (n, P, P))
        Ak = jax.lax.linalg.triangular_solve(Lb, basis, left_side=True, lower=True)  # Lg⁻¹ C_k
        Ch = jax.lax.linalg.triangular_solve(Lb, Ak, left_side=False, lower=True, transpose_a=True)  # · Lg⁻ᵀ
    else:
        N0 = basis.shape[2]
        Z = solve(basis.reshape(P, D * N0)).reshape(P, D, N0)  # Lg⁻¹ xi
        i, j = iu
        Zi, Zj = Z[:, i, :], Z[:, j, :]  # [P, n, N0]
        Ch = jnp.einsum("pki,qki->kpq", Zi, Zj)
        Ch = jnp.where((i == j)[:, None, None], Ch, Ch + jnp.transpose(Ch, (0, 2, 1)))
    Cz = jnp.einsum("kpq,q->kp", Ch, z)  # Ĉ_k z
    value = logdet_G + z @ z
    grad = jnp.einsum("kpp->k", Ch) - Cz @ z
    hess = -jnp.einsum("kpq,lpq->kl", Ch, Ch) + 2.0 * Cz @ Cz.T
    return value, grad, hess


@partial(jax.jit, static_argnames=("heads", "mode"))
def _value(theta, data, heads, mode):
    return _reduced(theta, data, heads, mode)


def _vgh(theta, data, heads, mode):
    """``S/N_max``, its gradient and Hessian in the vech entries (``Ua`` eliminated)."""
    fe, ge = jax.value_and_grad(_reduced_entropy)(theta, data, heads)
    He = jax.hessian(_reduced_entropy)(theta, data, heads)
    D = _sizes(heads)[0]
    n1 = D * (D + 1) // 2
    fd, gd, Hd = _data_derivatives(theta[:n1], data, heads, mode)
    s = data["scale"]
    return fe + s * fd, ge.at[:n1].add(s * gd), He.at[:n1, :n1].add(s * Hd)


_value_grad_hess = partial(jax.jit, static_argnames=("heads", "mode"))(_vgh)


# ----- log-Cholesky coordinates: U_l = L_l L_lᵀ, L_l lower triangular, log of its diagonal
def _chol_params(Us: Sequence[np.ndarray]) -> np.ndarray:
    """SPD matrices -> log-Cholesky coordinates (lower-triangular entries, log on the diagonal)."""
    out = []
    for U in Us:
        Lc = np.linalg.cholesky(U)
        i, j = np.tril_indices(U.shape[0])
        v = Lc[i, j].copy()
        v[i == j] = np.log(v[i == j])
        out.append(v)
    return np.concatenate(out)


def _chol_to_vech(psi: jax.Array, heads: tuple[int, ...]) -> jax.Array:
    """Log-Cholesky coordinates -> vech entries of every ``U_l = L_l L_lᵀ``."""
    out, k = [], 0
    for m in _sizes(heads):
        i, j = np.tril_indices(m)
        n = len(i)
        v = jnp.where(i == j, jnp.exp(psi[k : k + n]), psi[k : k + n])
        Lc = jnp.zeros((m, m), psi.dtype).at[i, j].set(v)
        out.append((Lc @ Lc.T)[np.triu_indices(m)])
        k += n
    return jnp.concatenate(out)


_chol_to_vech_jit = jax.jit(_chol_to_vech, static_argnames=("heads",))


@partial(jax.jit, static_argnames=("heads", "mode"))
def _psi_value(psi, data, heads, mode):
    return _reduced(_chol_to_vech(psi, heads), data, heads, mode)


@partial(jax.jit, static_argnames=("heads", "mode"))
def _psi_value_grad_hess(psi, data, heads, mode):
    """In log-Cholesky coordinates ``psi``: value, gradient, Hessian (chain rule), plus the
    vech gradient and Hessian at the same point."""
    theta = _chol_to_vech(psi, heads)
    f, g, H = _vgh(theta, data, heads, mode)
    J = jax.jacfwd(_chol_to_vech)(psi, heads)
    curv = jax.hessian(lambda q: jax.lax.stop_gradient(g) @ _chol_to_vech(q, heads))(psi)
    return f, J.T @ g, J.T @ H @ J + curv, g, H


@partial(jax.jit, static_argnames=("heads", "mode"))
def _full_value(theta, Ua, data, heads, mode):
    """Unscaled ``S`` at explicit ``Ua``."""
    return _action(_unpack(theta, heads), Ua, data, heads, mode)


@partial(jax.jit, static_argnames=("heads", "mode"))
def _full_value_grad(theta, Ua, data, heads, mode):
    """Unscaled ``S`` at explicit ``Ua`` and its gradients (vech, ``Ua``)."""

    def f(t, a):
        return _action(_unpack(t, heads), a, data, heads, mode)

    return jax.value_and_grad(f, argnums=(0, 1))(theta, Ua)


@partial(jax.jit, static_argnames=("heads",))
def _readout(theta, widths, variances, heads):
    return _readout_closed_form(_unpack(theta, heads)[-1], heads, widths, variances)


# ----------------------------------------------------------------------------
# problem set-up and argument checks
# ----------------------------------------------------------------------------
def _check_problem(net, x, y, temperature) -> tuple[np.ndarray, np.ndarray, float]:
    if not isinstance(net, Network):
        raise ValueError(f"net must be a bayes_attn.Network, got {type(net).__name__}")
    x = net.check_inputs(x, "x")
    y = _checks.labels("y", y, x.shape[0])
    temperature = _checks.positive("temperature", temperature)
    return x, y, temperature


def _check_order_parameters(name: str, Us, net: Network) -> list[np.ndarray]:
    if isinstance(Us, np.ndarray) or not isinstance(Us, Sequence) or len(Us) != net.L:
        raise ValueError(f"{name} must be a list of {net.L} matrices [U_1, ..., U_L]")
    out = []
    for l, (U, m) in enumerate(zip(Us, _sizes(net.heads))):
        U = _checks.array(f"{name}[{l}]", U, shape=(m, m))
        if not np.allclose(U, U.T, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(U).max())):
            raise ValueError(f"{name}[{l}] must be symmetric")
        try:
            np.linalg.cholesky(U)
        except np.linalg.LinAlgError:
            raise ValueError(f"{name}[{l}] must be positive definite") from None
        out.append((U + U.T) / 2)
    return out


def _problem_data(net: Network, x: np.ndarray, y: np.ndarray, temperature: float) -> tuple[dict, str]:
    """Arrays the jitted action needs (all traced, so widths can change without recompiling)."""
    xi = net.xi(x)
    P, D, N0 = xi.shape
    if D * D * P * P <= C_MAX_ENTRIES:
        C = np.asarray(path_kernel_from_xi(xi, xi, net.variances[0]))  # [D, D, P, P]
        i, j = np.triu_indices(D)
        basis = np.where((i == j)[:, None, None], C[i, j], C[i, j] + C[j, i])  # [n_1, P, P]
        basis, mode = 0.5 * (basis + basis.transpose(0, 2, 1)), "C"
    else:
        basis, mode = xi * math.sqrt(net.variances[0] / (N0 * D)), "xi"
    data = {
        "basis": jnp.asarray(basis),
        "y": jnp.asarray(y),
        "widths": jnp.asarray(net.widths, dtype=jnp.float64),
        "variances": jnp.asarray(net.variances, dtype=jnp.float64),
        "temperature": jnp.asarray(temperature, dtype=jnp.float64),
        "scale": jnp.asarray(1.0 / max(net.widths), dtype=jnp.float64),
    }
    return data, mode


# ----------------------------------------------------------------------------
# public: action and its gradient (mainly for tests and diagnostics)
# ----------------------------------------------------------------------------
def action(net: Network, x, y, order_parameters, *, temperature: float, U_readout: float | None = None) -> float:
    """``S`` of THEORY.md §4 (not scaled) at ``[U_1, ..., U_L]``.

    ``U_readout`` (``Ua``) defaults to its closed form given ``U_L``.
    """
    value, _, _ = _action_and_gradient(net, x, y, order_parameters, temperature, U_readout, grad=False)
    return value


def action_gradient(
    net: Network, x, y, order_parameters, *, temperature: float, U_readout: float | None = None
) -> tuple[list[np.ndarray], float]:
    """Matrix gradients ``∂S/∂U_l`` (symmetric, ``[m_l, m_l]``) and ``∂S/∂Ua``.

    With ``U_readout=None``, ``Ua`` follows its closed form (the gradient is then
    that of the reduced action and ``∂S/∂Ua`` is 0 up to rounding).
    """
    _, grads, gUa = _action_and_gradient(net, x, y, order_parameters, temperature, U_readout)
    return grads, gUa


def _action_and_gradient(net, x, y, Us, temperature, Ua, grad: bool = True):
    x, y, temperature = _check_problem(net, x, y, temperature)
    Us = _check_order_parameters("order_parameters", Us, net)
    theta = jnp.asarray(_pack(Us))
    data, mode = _problem_data(net, x, y, temperature)
    if Ua is None:
        Ua = _readout(theta, data["widths"], data["variances"], net.heads)
    else:
        Ua = _checks.positive("U_readout", Ua)
    Ua = jnp.asarray(Ua, dtype=jnp.float64)
    if not grad:
        return float(_full_value(theta, Ua, data, net.heads, mode)), None, None
    S, (g, gUa) = _full_value_grad(theta, Ua, data, net.heads, mode)
    return float(S), _matrix_gradients(np.asarray(g), net.heads), float(gUa)


# ----------------------------------------------------------------------------
# the Newton solver
# ----------------------------------------------------------------------------
@dataclass
class _NewtonResult:
    theta: np.ndarray
    value: float
    grad: np.ndarray
    hess: np.ndarray
    converged: bool
    iterations: int
    message: str


def _newton_direction(g: np.ndarray, H: np.ndarray) -> np.ndarray:
    """Newton direction ``−H⁻¹ g`` (Cholesky solve).

    If ``H`` is not positive definite, a modified Newton direction: in ``H``'s
    eigenbasis each eigenvalue ``w`` is replaced by ``max(|w|, 1e-8 max|w|)``, so
    negative-curvature directions are followed downhill instead of being
    damped away. (A Levenberg–Marquardt shift ``H + λI``, ``λ > −w_min``, was
    slower and less robust in tests: on ill-conditioned problems a shift large
    enough to be safe shrinks the step in every flat direction.)
    """
    try:
        c = scipy.linalg.cho_factor(H, lower=True, check_finite=True)
        return -scipy.linalg.cho_solve(c, g)
    except (np.linalg.LinAlgError, ValueError):
        pass
    w, V = np.linalg.eigh(H)
    m = np.maximum(np.abs(w), 1e-8 * max(np.abs(w).max(), 1e-300))
    return -V @ ((V.T @ g) / m)


COORDINATES = "log_cholesky"
"""Newton coordinates: ``"log_cholesky"`` (default; positive definiteness is built
in and barrier-like terms ``−ln det U`` become linear) or ``"vech"`` (the entries
of ``U_l`` themselves; steps that leave the PD cone are rejected by the line search)."""


def _newton(
    Us0: Sequence[np.ndarray],
    data: dict,
    heads: tuple[int, ...],
    mode: str,
    tol: float,
    max_iter: int,
    coordinates: str | None = None,
) -> _NewtonResult:
    """Damped Newton from ``Us0``; convergence is judged on the vech (matrix) gradient."""
    coordinates = coordinates or COORDINATES
    weights = _vech_weights(heads)
    if coordinates == "vech":
        to_theta = np.asarray
        x = _pack(Us0)

        def vgh(p):
            f, g, H = _value_grad_hess(jnp.asarray(p), data, heads, mode)
            g, H = np.asarray(g), np.asarray(H)
            return float(f), g, H, g, H

        def value(p):
            return float(_value(jnp.asarray(p), data, heads, mode))

    else:
        x = _chol_params(Us0)

        def to_theta(p):
            return np.asarray(_chol_to_vech_jit(jnp.asarray(p), heads))

        def vgh(p):
            f, g, H, gt, Ht = _psi_value_grad_hess(jnp.asarray(p), data, heads, mode)
            return float(f), np.asarray(g), np.asarray(H), np.asarray(gt), np.asarray(Ht)

        def value(p):
            return float(_psi_value(jnp.asarray(p), data, heads, mode))

    f, g, H, gt, Ht = vgh(x)
    if not np.isfinite(f):
        return _NewtonResult(to_theta(x), f, gt, Ht, False, 0, "action not finite at the initial point")
    it, message, stalled = 0, "maximum number of iterations reached", 0
    while True:
        gmax = np.max(np.abs(gt / weights))
        if gmax <= tol:
            return _NewtonResult(to_theta(x), f, gt, Ht, True, it, "gradient below tol")
        if it >= max_iter:
            break
        d = _newton_direction(g, H)
        gd = float(g @ d)
        if not gd < 0:  # safety: fall back to steepest descent
            d, gd = -g, -float(g @ g)
        # Slack of a few ulps of f: near the solution the predicted decrease
        # falls below the rounding of f, and the full Newton step must pass.
        slack = 64 * np.finfo(float).eps * max(abs(f), 1.0)
        t, accepted = 1.0, False
        for _ in range(60):
            f_new = value(x + t * d)
            if np.isfinite(f_new) and f_new <= f + 1e-4 * t * gd + slack:
                accepted = True
                break
            t *= 0.5
        it += 1
        if not accepted:
            message = f"line search failed (max gradient {gmax:.3g})"
            break
        x = x + t * d
        f_old = f
        f, g, H, gt, Ht = vgh(x)
        # At the rounding floor of S the action stops decreasing and the
        # gradient stops shrinking: give up after a few such steps.
        stalled = stalled + 1 if (f >= f_old - slack and np.max(np.abs(gt / weights)) >= 0.5 * gmax) else 0
        if stalled >= 5:
            message = f"stalled at the rounding level of S (max gradient {np.max(np.abs(gt / weights)):.3g})"
            break
    return _NewtonResult(to_theta(x), f, gt, Ht, False, it, message)


# ----------------------------------------------------------------------------
# the result
# ----------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Theory:
    """Order parameters at the minimum of ``S`` and what follows from them.

    Attributes:
        U: ``U_1``, ``[D, D]``, the order parameter over paths.
        order_parameters: ``[U_1, ..., U_L]``; ``U_l`` is ``[H_l...H_L, H_l...H_L]``.
        U_readout: ``Ua``.
        action: ``S / N_max`` at the solution.
        max_gradient: max over ``l`` and entries of ``|∂(S/N_max)/∂U_l|``.
        hessian_min_eigenvalue: smallest eigenvalue of the Hessian of
            ``S/N_max`` w.r.t. the vech entries of all ``U_l`` (``Ua`` eliminated).
        converged: whether ``max_gradient <= tol`` was reached.
        iterations: Newton iterations taken.
        temperature, net, x_train ``[P, T, N0]``, y_train ``[P]``.
        limit: ``"finite_width"`` (``solve_theory``) or ``"gp"`` (``gp_limit``).
        message: the solver's stopping reason.
        solve_seconds: wall time of the solve (including compilation if any).
    """

    U: np.ndarray
    order_parameters: tuple[np.ndarray, ...]
    U_readout: float
    action: float
    max_gradient: float
    hessian_min_eigenvalue: float
    converged: bool
    iterations: int
    temperature: float
    net: Network
    x_train: np.ndarray = field(repr=False)
    y_train: np.ndarray = field(repr=False)
    limit: str = "finite_width"
    message: str = ""
    solve_seconds: float = float("nan")

    @property
    def is_minimum(self) -> bool:
        """True when the Hessian at the solution is positive definite."""
        return bool(self.hessian_min_eigenvalue > 0)

    # ----- kernels and predictors ---------------------------------------------
    @cached_property
    def _xi_train(self) -> jax.Array:
        return self.net.xi(self.x_train)

    @cached_property
    def _factor(self) -> tuple[np.ndarray, np.ndarray]:
        """Lower Cholesky factor of ``G = K + temperature I`` and ``G⁻¹ Y``."""
        K = self.kernel_train
        G = K + self.temperature * np.eye(K.shape[0])
        Lg = np.linalg.cholesky(G)
        alpha = scipy.linalg.cho_solve((Lg, True), self.y_train)
        return Lg, alpha

    @cached_property
    def kernel_train(self) -> np.ndarray:
        """``K`` on the training inputs: ``[P, P]``."""
        xi = self._xi_train
        return np.asarray(kernel_from_xi(jnp.asarray(self.U), xi, xi, self.net.variances[0]))

    def kernel(self, x1, x2=None) -> np.ndarray:
        """``K(x1, x2)`` with this theory's ``U``: ``[P1, P2]`` (``x2`` defaults to ``x1``)."""
        x1 = self.net.check_inputs(x1, "x1")
        x2 = None if x2 is None else self.net.check_inputs(x2, "x2")
        return np.asarray(self.net.kernel(self.U, x1, x2))

    def predict(self, x_test) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of ``f(x*)``: ``k*ᵀ G⁻¹ Y`` and ``k** − k*ᵀ G⁻¹ k*``, each ``[P*]``."""
        xt = self.net.check_inputs(x_test, "x_test")
        xi_t = self.net.xi(xt)
        U = jnp.asarray(self.U)
        s0 = self.net.variances[0]
        kstar = np.asarray(kernel_from_xi(U, self._xi_train, xi_t, s0))  # [P, P*]
        D, N0 = xi_t.shape[1], xi_t.shape[2]
        kss = np.asarray(s0 * jnp.einsum("adi,de,aei->a", xi_t, U, xi_t) / (N0 * D))
        Lg, alpha = self._factor
        mean = kstar.T @ alpha
        v = scipy.linalg.solve_triangular(Lg, kstar, lower=True)
        return mean, kss - np.sum(v * v, axis=0)

    # ----- read-outs of the paper ---------------------------------------------
    def alignment(self) -> tuple[np.ndarray, np.ndarray]:
        """Eigenvalues of ``K`` on the training set (descending, ``[P]``) and the
        cosine similarity ``|v·Y| / |Y|`` of each unit eigenvector with ``Y`` (``[P]``;
        absolute value because an eigenvector's sign is arbitrary)."""
        w, V = np.linalg.eigh(self.kernel_train)
        order = np.argsort(w)[::-1]
        w, V = w[order], V[:, order]
        return w, np.abs(V.T @ self.y_train) / np.linalg.norm(self.y_train)

    def head_scores(self) -> list[np.ndarray]:
        """Head scores (THEORY.md §4): one array ``[H_l]`` per layer, max over all heads = 1."""
        A = np.abs(self.U)
        paths = np.asarray(self.net.paths)  # [D, L]
        raw = []
        for l, H in enumerate(self.net.heads):
            s = np.empty(H)
            for h in range(H):
                r = paths[:, l] == h
                s[h] = A[r[:, None] | r[None, :]].sum()
            raw.append(s)
        top = max(s.max() for s in raw)
        return [s / top if top > 0 else s for s in raw]

    def to_dataset(self):
        """All results as an ``xarray.Dataset`` (see module docs for names)."""
        import xarray as xr

        net = self.net
        labels = net.path_labels
        gpU = gp_order_parameters(net)[0][0]
        eig, cos = self.alignment()
        scores = self.head_scores()
        head_labels = [f"L{l + 1}H{h + 1}" for l, H in enumerate(net.heads) for h in range(H)]
        ds = xr.Dataset(
            {
                "U": (("path", "path_"), self.U),
                "gp_U": (("path", "path_"), gpU),
                "Ua": ((), self.U_readout),
                "action": ((), self.action),
                "max_gradient": ((), self.max_gradient),
                "hessian_min_eigenvalue": ((), self.hessian_min_eigenvalue),
                "converged": ((), self.converged),
                "iterations": ((), self.iterations),
                "temperature": ((), self.temperature),
                "alignment_eigenvalue": (("pc",), eig),
                "alignment_cosine": (("pc",), cos),
                "head_score": (("head",), np.concatenate(scores)),
            },
            coords={
                "path": labels,
                "path_": labels,
                "pc": np.arange(1, len(eig) + 1),
                "head": head_labels,
                "head_layer": ("head", [l + 1 for l, H in enumerate(net.heads) for _ in range(H)]),
                "head_index": ("head", [h + 1 for H in net.heads for h in range(H)]),
            },
        )
        if net.head_names is not None:
            ds = ds.assign_coords(head_name=("head", [n for layer in net.head_names for n in layer]))
        for l, U in enumerate(self.order_parameters, start=1):
            # index of U_l: (h_l, ..., h_L), h_l slowest, labels like the paths'
            lab = ["-".join(str(h + 1) for h in p) for p in itertools.product(*[range(H) for H in net.heads[l - 1 :]])]
            ds[f"U_{l}"] = ((f"index_{l}", f"index_{l}_"), U)
            ds = ds.assign_coords({f"index_{l}": lab, f"index_{l}_": lab})
        ds.attrs.update(
            widths=np.asarray(net.widths),
            variances=np.asarray(net.variances),
            heads=np.asarray(net.heads),
            readout=net.readout,
            limit=self.limit,
            message=self.message,
            n_train=int(self.x_train.shape[0]),
        )
        return ds


# ----------------------------------------------------------------------------
# public solvers
# ----------------------------------------------------------------------------
def solve_theory(
    net: Network,
    x,
    y,
    *,
    temperature: float,
    init: str | Sequence[np.ndarray] = "gp",
    tol: float = 1e-8,
    max_iter: int = 200,
) -> Theory:
    """Minimise ``S`` (THEORY.md §4) over all ``U_l``; ``Ua`` by its closed form.

    Args:
        net: the network (widths, variances and heads define ``S``).
        x: training inputs ``[P, T, N0]``; y: labels ``[P]``.
        temperature: likelihood variance (> 0).
        init: ``"gp"`` (GP values) or a list ``[U_1, ..., U_L]`` of SPD matrices.
        tol: stop when ``max |∂(S/N_max)/∂U_l| <= tol``.
        max_iter: maximum Newton iterations.

    Warns (``RuntimeWarning``) when it does not converge or stops where the
    Hessian is not positive definite (then ``Theory.is_minimum`` is False).
    """
    x, y, temperature = _check_problem(net, x, y, temperature)
    tol = _checks.positive("tol", tol)
    max_iter = _checks.positive_int("max_iter", max_iter, minimum=0)
    if isinstance(init, str):
        _checks.choice("init", init, ("gp",))
        Us0 = gp_order_parameters(net)[0]
    else:
        Us0 = _check_order_parameters("init", init, net)
    t0 = time.perf_counter()
    data, mode = _problem_data(net, x, y, temperature)
    res = _newton(Us0, data, net.heads, mode, tol, max_iter)
    seconds = time.perf_counter() - t0
    theory = _make_theory(net, x, y, temperature, res, limit="finite_width", seconds=seconds)
    if not theory.converged:
        warnings.warn(
            f"solve_theory did not converge ({res.message}; max gradient {theory.max_gradient:.3g} > tol {tol:.3g})",
            RuntimeWarning,
            stacklevel=2,
        )
    elif not theory.is_minimum:
        warnings.warn(
            "solve_theory stopped at a stationary point that is not a minimum "
            f"(Hessian min eigenvalue {theory.hessian_min_eigenvalue:.3g})",
            RuntimeWarning,
            stacklevel=2,
        )
    return theory


def gp_limit(net: Network, x, y, *, temperature: float) -> Theory:
    """The GP limit: every order parameter at its GP value (``U = net.gp_U``).

    ``action``, ``max_gradient`` and ``hessian_min_eigenvalue`` are those of the
    network's finite-width ``S / N_max`` evaluated at the GP point (they show how
    far the GP point is from the finite-width solution); ``converged`` is True.
    """
    x, y, temperature = _check_problem(net, x, y, temperature)
    t0 = time.perf_counter()
    data, mode = _problem_data(net, x, y, temperature)
    theta = _pack(gp_order_parameters(net)[0])
    f, g, H = _value_grad_hess(jnp.asarray(theta), data, net.heads, mode)
    res = _NewtonResult(theta, float(f), np.asarray(g), np.asarray(H), True, 0, "GP limit")
    return _make_theory(net, x, y, temperature, res, limit="gp", seconds=time.perf_counter() - t0)


def _make_theory(net, x, y, temperature, res: _NewtonResult, *, limit: str, seconds: float) -> Theory:
    Us = _vech_to_matrices(res.theta, net.heads)
    if limit == "gp":
        Ua = float(net.variances[-1])
    else:
        Ua = float(_readout(jnp.asarray(res.theta), jnp.asarray(net.widths, dtype=jnp.float64),
                            jnp.asarray(net.variances, dtype=jnp.float64), net.heads))
    grads = _matrix_gradients(res.grad, net.heads)
    max_grad = float(max(np.abs(G).max() for G in grads))
    hmin = float(np.linalg.eigvalsh(res.hess)[0]) if np.all(np.isfinite(res.hess)) else float("nan")
    return Theory(
        U=Us[0],
        order_parameters=tuple(Us),
        U_readout=Ua,
        action=float(res.value),
        max_gradient=max_grad,
        hessian_min_eigenvalue=hmin,
        converged=bool(res.converged),
        iterations=int(res.iterations),
        temperature=float(temperature),
        net=net,
        x_train=x,
        y_train=y,
        limit=limit,
        message=res.message,
        solve_seconds=seconds,
    )
