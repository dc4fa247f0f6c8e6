"""The action ``S`` of docs/theory.md §4 and its derivatives.

    S = Na (Ua / sa² − ln Ua)
      + NL (tr U_L / (sL² Ua) − ln det U_L + H_L ln Ua)
      + Σ_{l<L} N_l (tr(U_{l+1}⁻¹ tr_l U_l) / s_l² − ln det U_l + H_l ln det U_{l+1})
      + ln det G + Yᵀ G⁻¹ Y,          G = K(U_1) + temperature · I_P.

The first three lines are the *entropy* (width terms), the last the *data
term*. The solver minimises the *reduced action* ``S / N_max`` (``N_max`` the
largest width) with ``Ua`` at its closed form given ``U_L``, as a function of
the vech entries ``theta`` of all ``U_l`` (or of their log-Cholesky
coordinates ``psi``; see :mod:`.coordinates`). The entropy is differentiated
by ``jax``; the data term's gradient and Hessian are in closed form.

Everything JAX runs in float64 (:func:`bayes_attn._internal.precision.float64`),
whatever the caller's default. The jitted functions compile once per head
structure, kernel form and training-set size: widths, variances and
temperature are traced. No inverse is formed: every solve and log-determinant
goes through a Cholesky factor.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .. import gp
from .._internal import checks as _checks
from .._internal import threads
from .._internal.compile_cache import exported_jit
from .._internal.precision import float64
from ..kernels import Basis, basis_array, inputs_key, make_basis
from ..network import Network
from ._coordinates import log_cholesky_to_vech, matrix_gradients, pack, sizes, symmetric, unpack

__all__ = [
    "Problem",
    "make_problem",
    "kernel_basis",
    "gp_order_parameters",
    "readout_closed_form",
    "kernel",
    "entropy",
    "data_term",
    "full_action",
    "reduced_action",
    "data_derivatives",
    "value",
    "value_grad_hess",
    "log_cholesky_value",
    "log_cholesky_value_grad_hess",
    "readout",
    "action",
    "action_gradient",
]

# ----------------------------------------------------------------------------
# the problem: everything S needs besides the order parameters
# ----------------------------------------------------------------------------
@partial(
    jax.tree_util.register_dataclass,
    data_fields=["basis", "y", "temperature", "widths", "variances", "scale"],
    meta_fields=["heads", "form"],
)
@dataclass(frozen=True)
class Problem:
    """Training data, network constants and kernel basis of ``S`` (a JAX pytree).

    ``heads`` and ``form`` are static (compilation keys); the arrays are traced
    (float64).

    Attributes:
        heads: ``(H_1, ..., H_L)``.
        form: ``"C"``: ``basis`` is ``C`` folded onto the vech entries of ``U_1``,
            ``[n_1, P, P]`` (``C[i,j] + C[j,i]`` off the diagonal, ``C[i,i]`` on
            it, ``n_1 = D(D+1)/2``); ``"xi"``: ``basis = xi · sqrt(s0² / (N0 D))``,
            ``[P, D, N0]``.
        basis: see ``form``.
        y: labels ``Y`` ``[P]``.
        temperature: ``[]``.
        widths: ``[N1, ..., NL, Na]``; variances: ``[s0², s1², ..., sL², sa²]``.
        scale: ``1 / N_max`` ``[]``.
    """

    heads: tuple[int, ...]
    form: str
    basis: jax.Array
    y: jax.Array
    temperature: jax.Array
    widths: jax.Array
    variances: jax.Array
    scale: jax.Array


def make_problem(net: Network, x: np.ndarray, y: np.ndarray, temperature: float, *, form: str | None = None,
                 basis: Basis | None = None) -> Problem:
    """The :class:`Problem` of ``net`` on training inputs ``x`` ``[P, T, N0]`` and labels ``y`` ``[P]``.

    ``basis``: the :func:`kernel_basis` of ``net`` on ``x``, computed before (it does not depend on the widths
    or the temperature, so a caller solving one data set at many widths computes it once); checked against
    ``x``, the attention, the readout and ``s0²`` (``ValueError`` if computed from others). ``form`` (when no
    ``basis`` is given) defaults to :func:`bayes_attn.kernels.basis_form`. Arguments are assumed checked
    (see :func:`check_problem`).
    """
    x = net.check_inputs(x)
    if basis is None:  # for this problem only: no key (the inputs are hashed only to check a basis passed on)
        form, array = basis_array(net.attention, x, net.readout, float(net.variances[0]), form)
    else:
        if not isinstance(basis, Basis):
            raise ValueError(f"basis must be a bayes_attn.kernels.Basis, got {type(basis).__name__}")
        basis.check("basis", inputs_key(x, net.attention, net.readout, float(net.variances[0])), net.heads)
        if form is not None and form != basis.form:
            raise ValueError(f"form={form!r} but the basis given is of form {basis.form!r}")
        form, array = basis.form, basis.array
    with float64():
        f64 = partial(jnp.asarray, dtype=jnp.float64)
        return Problem(
            heads=tuple(net.heads),
            form=form,
            basis=array,
            y=f64(y),
            temperature=f64(temperature),
            widths=f64(net.widths),
            variances=f64(net.variances),
            scale=f64(1.0 / max(net.widths)),
        )


def kernel_basis(net: Network, x, *, form: str | None = None) -> Basis:
    """The kernel basis of ``net`` on inputs ``x`` ``[P, T, N0]`` (:class:`bayes_attn.kernels.Basis`), for
    :func:`make_problem`, ``solve_theory(..., basis=)`` and ``gp_limit(..., basis=)`` at any width."""
    if not isinstance(net, Network):
        raise ValueError(f"net must be a bayes_attn.Network, got {type(net).__name__}")
    x = net.check_inputs(x)
    return make_basis(net.attention, x, net.readout, float(net.variances[0]), form)


def check_problem(net, x, y, temperature) -> tuple[np.ndarray, np.ndarray, float]:
    """Validated ``(x, y, temperature)``; raises ``ValueError`` naming the bad argument."""
    if not isinstance(net, Network):
        raise ValueError(f"net must be a bayes_attn.Network, got {type(net).__name__}")
    x = net.check_inputs(x, "x")
    y = _checks.labels("y", y, x.shape[0])
    temperature = _checks.positive("temperature", temperature)
    net.check_scale(x, temperature)
    return x, y, temperature


def check_order_parameters(name: str, Us, net: Network) -> list[np.ndarray]:
    """Validated ``[U_1, ..., U_L]``: symmetric positive definite, ``[m_l, m_l]``, symmetrised."""
    if isinstance(Us, np.ndarray) or not isinstance(Us, Sequence) or len(Us) != net.L:
        raise ValueError(f"{name} must be a list of {net.L} matrices [U_1, ..., U_L]")
    out = []
    for l, (U, m) in enumerate(zip(Us, sizes(net.heads), strict=True)):
        U = _checks.array(f"{name}[{l}]", U, shape=(m, m))
        if not np.allclose(U, U.T, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(U).max())):
            raise ValueError(f"{name}[{l}] must be symmetric")
        try:
            np.linalg.cholesky(U)
        except np.linalg.LinAlgError:
            raise ValueError(f"{name}[{l}] must be positive definite") from None
        out.append((U + U.T) / 2)
    return out


def gp_order_parameters(net: Network) -> tuple[list[np.ndarray], float]:
    """GP values: ``U_L = sL² sa² I``, ``U_l = s_l² I ⊗ U_{l+1}``, ``Ua = sa²``."""
    s2 = net.variances
    Ua = float(s2[-1])
    Us: list[np.ndarray] = [s2[net.L] * Ua * np.eye(net.heads[-1])]
    for l in reversed(range(net.L - 1)):  # 0-based layer index l (layer l+1)
        Us.insert(0, s2[l + 1] * np.kron(np.eye(net.heads[l]), Us[0]))
    return Us, Ua


# ----------------------------------------------------------------------------
# the action (pure JAX, traceable)
# ----------------------------------------------------------------------------
def _chol_logdet(A: jax.Array) -> tuple[jax.Array, jax.Array]:
    Lc = gp.cholesky(A)  # NaN when A is not positive definite
    return Lc, 2.0 * jnp.sum(jnp.log(jnp.diagonal(Lc)))


def readout_closed_form(UL: jax.Array, heads: Sequence[int], widths: jax.Array, variances: jax.Array) -> jax.Array:
    """``Ua`` minimising ``S`` given ``U_L`` ``[H_L, H_L]``: the positive root of ``Ua² + b Ua − g = 0``."""
    L = len(heads)
    Na, NL, sa2, sL2 = widths[L], widths[L - 1], variances[L + 1], variances[L]
    b = sa2 * (heads[-1] * NL / Na - 1.0)
    g = jnp.trace(UL) * NL * sa2 / (Na * sL2)
    r = jnp.sqrt(b * b + 4.0 * g)
    # Both forms equal the root; pick the one without cancellation.
    return jnp.where(b >= 0, 2.0 * g / (b + r), (r - b) / 2.0)


def kernel(U1: jax.Array, problem: Problem) -> jax.Array:
    """``K = sum U_1 C`` on the training set, ``[P, P]``, from ``U_1`` ``[D, D]``."""
    if problem.form == "C":
        iu = np.triu_indices(U1.shape[0])
        return jnp.einsum("k,kpq->pq", U1[iu], problem.basis)
    basis = problem.basis
    return jnp.einsum("adi,de,bei->ab", basis, U1, basis, optimize="optimal")


def entropy(Us: Sequence[jax.Array], Ua: jax.Array, problem: Problem) -> jax.Array:
    """The width terms of ``S`` (all but ``ln det G + Yᵀ G⁻¹ Y``), unscaled."""
    heads = problem.heads
    L = len(heads)
    N, s2 = problem.widths, problem.variances
    chols, logdets = zip(*[_chol_logdet(U) for U in Us], strict=True)
    Na, sa2, NL, sL2 = N[L], s2[L + 1], N[L - 1], s2[L]
    S = Na * (Ua / sa2 - jnp.log(Ua))
    S = S + NL * (jnp.trace(Us[-1]) / (sL2 * Ua) - logdets[-1] + heads[-1] * jnp.log(Ua))
    for l in range(L - 1):  # 0-based: layer l+1, width N[l], variance s2[l+1]
        H, M = heads[l], Us[l + 1].shape[0]
        trl = jnp.einsum("iaib->ab", Us[l].reshape(H, M, H, M))  # tr_l(U_l)
        X = jax.scipy.linalg.cho_solve((chols[l + 1], True), trl)
        S = S + N[l] * (jnp.trace(X) / s2[l + 1] - logdets[l] + H * logdets[l + 1])
    return S


def data_term(U1: jax.Array, problem: Problem) -> jax.Array:
    """``ln det G + Yᵀ G⁻¹ Y`` with ``G = K(U_1) + temperature I``."""
    return data_term_and_factor(U1, problem)[0]


def data_term_and_factor(U1: jax.Array, problem: Problem) -> tuple[jax.Array, jax.Array]:
    """:func:`data_term` and the lower Cholesky factor of ``G`` ``[P, P]`` it was computed with (for callers that
    also solve with ``G``: the guided samplers' draws of ``f``, docs/theory.md §9)."""
    K = kernel(U1, problem)
    Gm = K + problem.temperature * jnp.eye(K.shape[0], dtype=K.dtype)
    Lg, logdet_G = _chol_logdet(Gm)
    z = jax.scipy.linalg.solve_triangular(Lg, problem.y, lower=True)
    return logdet_G + z @ z, Lg


def full_action(Us: Sequence[jax.Array], Ua: jax.Array, problem: Problem) -> jax.Array:
    """``S`` of docs/theory.md §4 (unscaled) at ``[U_1, ..., U_L]`` and ``Ua``."""
    return entropy(Us, Ua, problem) + data_term(Us[0], problem)


def _readout_of(Us: Sequence[jax.Array], problem: Problem) -> jax.Array:
    return readout_closed_form(Us[-1], problem.heads, problem.widths, problem.variances)


def reduced_action(theta: jax.Array, problem: Problem) -> jax.Array:
    """``S / N_max`` with ``Ua`` at its closed form, as a function of the vech entries ``[n]``."""
    Us = unpack(theta, problem.heads)
    return full_action(Us, _readout_of(Us, problem), problem) * problem.scale


def _reduced_entropy(theta: jax.Array, problem: Problem) -> jax.Array:
    Us = unpack(theta, problem.heads)
    return entropy(Us, _readout_of(Us, problem), problem) * problem.scale


def data_derivatives(theta1: jax.Array, problem: Problem) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Value, gradient ``[n_1]`` and Hessian ``[n_1, n_1]`` of the data term in the vech entries ``theta1`` of ``U_1``.

    With ``C_k = ∂K/∂θ_k``, ``G = Lg Lgᵀ``, ``Ĉ_k = Lg⁻¹ C_k Lg⁻ᵀ`` (two
    triangular solves) and ``z = Lg⁻¹ Y``:
    ``∂_k = tr Ĉ_k − zᵀ Ĉ_k z`` and ``∂_k ∂_l = −tr(Ĉ_k Ĉ_l) + 2 (Ĉ_k z)·(Ĉ_l z)``.
    The ``"xi"`` form never forms ``Ĉ`` ``[n_1, P, P]``: see :func:`_xi_traces`.
    """
    D = sizes(problem.heads)[0]
    U1 = symmetric(theta1, D)
    basis = problem.basis
    K = kernel(U1, problem)
    P = K.shape[0]
    Lg, logdet_G = _chol_logdet(K + problem.temperature * jnp.eye(P, dtype=K.dtype))
    z = jax.scipy.linalg.solve_triangular(Lg, problem.y, lower=True)
    value = logdet_G + z @ z
    if problem.form == "C":
        n = basis.shape[0]
        Lb = jnp.broadcast_to(Lg, (n, P, P))
        Ak = jax.lax.linalg.triangular_solve(Lb, basis, left_side=True, lower=True)  # Lg⁻¹ C_k
        Ch = jax.lax.linalg.triangular_solve(Lb, Ak, left_side=False, lower=True, transpose_a=True)  # · Lg⁻ᵀ
        Cz = jnp.einsum("kpq,q->kp", Ch, z)  # Ĉ_k z
        trace, trace2 = jnp.einsum("kpp->k", Ch), jnp.einsum("kpq,lpq->kl", Ch, Ch)
    else:
        N0 = basis.shape[2]
        Z = jax.scipy.linalg.solve_triangular(Lg, basis.reshape(P, D * N0), lower=True).reshape(P, D, N0)  # Lg⁻¹ ξ
        Cz, trace, trace2 = _xi_traces(Z, z)
    grad = trace - Cz @ z
    hess = -trace2 + 2.0 * Cz @ Cz.T
    return value, grad, hess


def _xi_traces(Z: jax.Array, z: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``Ĉ_k z`` ``[n_1, P]``, ``tr Ĉ_k`` ``[n_1]`` and ``tr(Ĉ_k Ĉ_l)`` ``[n_1, n_1]`` from ``Z = Lg⁻¹ ξ``
    ``[P, D, N0]``.

    For ``k = (i, j)``, ``Ĉ_k = s_k (Z_i Z_jᵀ + Z_j Z_iᵀ)`` with ``s_k = 1/2`` on
    the diagonal (``i = j``), else 1. With the blocks ``M_ab = Z_aᵀ Z_b``
    ``[N0, N0]`` and their Gram matrix ``F[(a, b), (c, d)] = <M_ab, M_cd>``:
    ``tr Ĉ_k = 2 s_k tr M_ij`` and
    ``tr(Ĉ_k Ĉ_l) = 2 s_k s_l (F[(n, i), (m, j)] + F[(m, i), (n, j)])`` for
    ``l = (m, n)``. Memory ``O(D⁴ + D² N0²)`` instead of ``O(D² P²)``.
    """
    P, D, N0 = Z.shape
    i, j = np.triu_indices(D)
    s = jnp.asarray(np.where(i == j, 0.5, 1.0), Z.dtype)
    M = jnp.einsum("pai,pbj->abij", Z, Z)  # [D, D, N0, N0]
    F = (M.reshape(D * D, N0 * N0) @ M.reshape(D * D, N0 * N0).T).reshape(D, D, D, D)
    m, n = i[None, :], j[None, :]
    ik, jk = i[:, None], j[:, None]
    trace2 = 2.0 * s[:, None] * s[None, :] * (F[n, ik, m, jk] + F[m, ik, n, jk])
    trace = 2.0 * s * jnp.einsum("abii->ab", M)[i, j]
    V = jnp.einsum("pai,bi->abp", Z, jnp.einsum("pbi,p->bi", Z, z))  # V[a, b] = Z_a (Z_bᵀ z)
    Cz = s[:, None] * (V[i, j] + V[j, i])
    return Cz, trace, trace2


@jax.jit  # traced once for both entry points below that use it (vech and log-Cholesky coordinates)
def _vgh(theta: jax.Array, problem: Problem) -> tuple[jax.Array, jax.Array, jax.Array]:
    fe, ge = jax.value_and_grad(_reduced_entropy)(theta, problem)
    He = jax.hessian(_reduced_entropy)(theta, problem)
    D = sizes(problem.heads)[0]
    n1 = D * (D + 1) // 2
    fd, gd, Hd = data_derivatives(theta[:n1], problem)
    s = problem.scale
    return fe + s * fd, ge.at[:n1].add(s * gd), He.at[:n1, :n1].add(s * Hd)


# ----------------------------------------------------------------------------
# jit-compiled entry points (float64 whatever the caller's JAX default)
# ----------------------------------------------------------------------------
def _jit_float64(fn: Callable) -> Callable:
    """``jax.jit(fn)``, called under float64 and :func:`bayes_attn._internal.threads.limits` with ``numpy``
    arguments read as float64 (it waits for the result, so that the thread limit covers the work); its traced
    program is kept with the command's compilation cache (:func:`bayes_attn._internal.compile_cache.exported_jit`)."""
    jitted = exported_jit(fn)

    @functools.wraps(fn)
    def call(*args):
        with float64(), threads.limits():
            return jax.block_until_ready(
                jitted(*(jnp.asarray(a, dtype=jnp.float64) if isinstance(a, (np.ndarray, float)) else a for a in args)))

    return call


@_jit_float64
def value(theta: jax.Array, problem: Problem) -> jax.Array:
    """Reduced action ``S / N_max`` at the vech entries ``theta`` ``[n]`` (``Ua`` eliminated)."""
    return reduced_action(theta, problem)


@_jit_float64
def value_grad_hess(theta: jax.Array, problem: Problem) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Reduced action ``S / N_max``, its gradient ``[n]`` and Hessian ``[n, n]`` in the vech entries."""
    return _vgh(theta, problem)


@_jit_float64
def log_cholesky_value(psi: jax.Array, problem: Problem) -> jax.Array:
    """Reduced action at log-Cholesky coordinates ``psi`` ``[n]``."""
    return reduced_action(log_cholesky_to_vech(psi, problem.heads), problem)


@_jit_float64
def log_cholesky_value_grad_hess(psi: jax.Array, problem: Problem):
    """In log-Cholesky coordinates ``psi`` ``[n]``: value, gradient ``[n]``, Hessian ``[n, n]``
    (chain rule), plus the vech gradient and Hessian at the same point."""
    heads = problem.heads
    theta = log_cholesky_to_vech(psi, heads)
    f, g, H = _vgh(theta, problem)
    J = jax.jacfwd(log_cholesky_to_vech)(psi, heads)
    curv = jax.hessian(lambda q: jax.lax.stop_gradient(g) @ log_cholesky_to_vech(q, heads))(psi)
    return f, J.T @ g, J.T @ H @ J + curv, g, H


@_jit_float64
def vech_from_log_cholesky(psi: jax.Array, problem: Problem) -> jax.Array:
    """Vech entries ``[n]`` at log-Cholesky coordinates ``psi`` ``[n]``."""
    return log_cholesky_to_vech(psi, problem.heads)


@_jit_float64
def readout(theta: jax.Array, problem: Problem) -> jax.Array:
    """``Ua`` at its closed form given the ``U_L`` in the vech entries ``theta`` ``[n]``."""
    return _readout_of(unpack(theta, problem.heads), problem)


@_jit_float64
def _full_value(theta, Ua, problem):
    return full_action(unpack(theta, problem.heads), Ua, problem)


@_jit_float64
def _full_value_grad(theta, Ua, problem):
    f = lambda t, a: full_action(unpack(t, problem.heads), a, problem)  # noqa: E731
    return jax.value_and_grad(f, argnums=(0, 1))(theta, Ua)


# ----------------------------------------------------------------------------
# public: S and its gradient at given order parameters (tests, diagnostics)
# ----------------------------------------------------------------------------
def action(net: Network, x, y, order_parameters, *, temperature: float, Ua: float | None = None) -> float:
    """``S`` of docs/theory.md §4 (not scaled) at ``[U_1, ..., U_L]``.

    ``Ua`` defaults to its closed form given ``U_L``.
    """
    return _action_and_gradient(net, x, y, order_parameters, temperature, Ua, grad=False)[0]


def action_gradient(
    net: Network, x, y, order_parameters, *, temperature: float, Ua: float | None = None
) -> tuple[list[np.ndarray], float]:
    """Matrix gradients ``∂S/∂U_l`` (symmetric, ``[m_l, m_l]``) and ``∂S/∂Ua``.

    With ``Ua=None``, ``Ua`` follows its closed form (the gradient is then
    that of the reduced action and ``∂S/∂Ua`` is 0 up to rounding).
    """
    _, grads, gUa = _action_and_gradient(net, x, y, order_parameters, temperature, Ua)
    return grads, gUa


def _action_and_gradient(net, x, y, Us, temperature, Ua, grad: bool = True):
    x, y, temperature = check_problem(net, x, y, temperature)
    Us = check_order_parameters("order_parameters", Us, net)
    if Ua is not None:
        Ua = _checks.positive("Ua", Ua)
    theta = pack(Us)
    problem = make_problem(net, x, y, temperature)
    with float64():
        Ua = readout(theta, problem) if Ua is None else jnp.asarray(Ua, dtype=jnp.float64)
        if not grad:
            return float(_full_value(theta, Ua, problem)), None, None
        S, (g, gUa) = _full_value_grad(theta, Ua, problem)
        return float(S), matrix_gradients(np.asarray(g), net.heads), float(gUa)
