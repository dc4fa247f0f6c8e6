"""Finite-width correction of the theory: Laplace expansion of the exact posterior (docs/theory.md §8).

The theory of §4 gives the posterior means of the order parameters to
leading order as widths grow. The exact posterior of the order parameters
``(U_1, ..., U_L, Ua)`` (§7) is a density over a few variables (14 for the
Fig. 2c network, at any width), so its next order in ``1/N`` is a
finite-dimensional Laplace expansion. Symbols of §8:

- ``θ``: coordinates of the order parameters (below);
- ``S(θ) = − log p(U(θ)) − log |∂U/∂θ|``: minus the log of the exact
  posterior density in ``θ`` (up to a constant), ``p`` the Wishart chain of
  §7 times ``Normal(Y | 0, K(U_1) + temperature I)``;
- ``θ̂ = argmin S``: the expansion point (the exact ``S``, not the action of
  §4: they differ at ``O(1/N)``); its Newton solve starts from the
  leading-order solution;
- ``H = S''(θ̂)``, ``Σ = H⁻¹``;
- ``v_j = Σ_kl S'''_jkl Σ_kl``, computed as ``v_j = ∂_j tr(Σ H(θ))`` at ``θ̂``
  with ``Σ`` held fixed (JAX reverse mode over the Hessian);
- ``g(θ)``: an observable — an entry of some ``U_l``, ``Ua``, or the
  predictor mean or variance at a test input. To next order

      E[g]   = g(θ̂) + ½ tr(g''(θ̂) Σ) − ½ g'(θ̂)ᵀ Σ v,
      Var[g] = g'(θ̂)ᵀ Σ g'(θ̂).

Coordinates (:data:`COORDINATES`):

- ``"bartlett"`` (default): the sites of the exact sampler (§7,
  :mod:`bayes_attn.samplers._wishart`, factors of :mod:`bayes_attn.theory._bartlett`): for every level
  ``k = 1, ..., L, a`` the logs ``log c_i`` of the chi-square diagonals of the Bartlett factor
  ``A_k`` and its strictly lower entries (standard normal under the prior).
  There the density is a product of log-chi-square and normal densities
  times the likelihood, regular at every width, also where ``N_l < D_l`` and
  ``U_l`` is singular (the factors are then lower-trapezoidal). Where every
  level has full rank the map to ``(U_1, ..., U_L, Ua)`` is a
  diffeomorphism, so this is the same posterior as in any other coordinates.
  The parametrisation is non-centred (the levels are independent under the
  prior), so the prior part of ``S`` is a sum of one-dimensional terms and
  the expansion is accurate: without data it gives ``E[U_L]`` and ``E[Ua]``
  exactly, and for one layer with one head ``E[U]`` too. One choice serves
  all networks; hence the default.
- ``"log_cholesky"``: ``U_l = L_l L_lᵀ`` with the log of ``L_l``'s diagonal,
  and ``log Ua``, with the density of §8 in the entries of ``U_l`` and the
  Jacobian ``|∂U/∂θ| = Π_l 2^{m_l} Π_i L_ii^{m_l − i + 2} · Ua``. Defined only
  where every ``U_l`` has full rank (``N_l ≥ D_l``); elsewhere a
  ``ValueError``. It is written independently of the sampler's pieces and
  serves as the second coordinate choice: both agree to ``O(1/N²)``. It is
  the poorer choice at small widths: the off-diagonal entries of ``L_l``
  scale with the level above (a centred parametrisation, a funnel), which
  moves the mode of ``Ua`` by about (number of off-diagonal entries)/``Na``
  — formally ``O(1/N)``, with a large constant. Without data, heads (2, 2)
  and widths (20, 30, 15), the error of the corrected ``E[U_1]`` is 0.3 %
  in Bartlett sites and 15 % in log-Cholesky coordinates.
- ``"bartlett_cbrt"``: the same sites with ``w = c^{1/3}`` for each χ² diagonal (Wilson–Hilferty: a χ² of a
  few degrees of freedom is nearer normal in ``c^{1/3}`` than in ``log c``), density ``w^{3ν/2 − 1}
  e^{−w³/2}``: a candidate where the expansion is strained (``N < D``, issue 73). It agrees with ``"bartlett"``
  to ``O(1/N²)``; measured against the exact posterior it is no better (``benchmarks/bench_regime.py``,
  ``results/regime.json``): on the image task at ``N = 10`` both corrections are further from the exact mean
  of ``U`` than the leading order, and neither mean is positive semi-definite.

Accuracy and cost: ``benchmarks/bench_correction.py`` (``results/correction*.json``; the README). The
standard deviations ``sqrt(g'ᵀ Σ g')`` are leading order: their relative error is ``O(1/N)``, larger for
diagonal entries whose Bartlett factors hold several normal entries, whose squares enter at the next order.

The predictor mean ``k*ᵀ G⁻¹ Y`` and variance ``k** − k*ᵀ G⁻¹ k*`` depend
on ``θ`` only through ``U_1``; :meth:`Theory.predict` expands them around
``U_1(θ̂)`` with the mean shift ``E[U_1] − U_1(θ̂)`` and the covariance of
``U_1`` stored in :class:`~bayes_attn.theory._result.Correction`
(the same formula, by the chain rule). The corrected predictive variance is
that of ``f(x*)``: ``E[variance] + Var[mean]`` (law of total variance, both
terms to next order).

Everything runs in float64 (:func:`bayes_attn._internal.precision.float64`); the
functions are jit-compiled once per head structure, coordinate choice,
factor shapes and training-set size (widths, variances and temperature
are traced, except that they fix which levels are singular).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular

from .._internal import checks as _checks
from .._internal.precision import float64
from ._bartlett import factor_shapes, sites_of_order_parameters
from ._coordinate_maps import MAPS
from ._coordinates import log_cholesky, sizes
from ._newton import NewtonSolver, SolveReport, damped_newton
from ._objective import Problem, data_derivatives, data_term_and_factor

__all__ = [
    "COORDINATES",
    "CORRECTIONS",
    "THEORY_NAMES",
    "check_coordinates",
    "action_at",
    "action_function",
    "derivatives",
    "exact_action",
    "expand",
    "find_mode",
    "Mode",
    "Moments",
    "moments",
    "shapes_of",
    "observables",
    "order_parameters_at",
    "start_point",
    "third_derivative_contraction",
]

CORRECTIONS = ("laplace", "none")
THEORY_NAMES = {"laplace": "corrected (Laplace, §8)", "none": "leading order (§4)"}
"""How reports name the theory of each correction."""
COORDINATES = ("bartlett", "bartlett_cbrt", "log_cholesky")


def _order_parameters(theta, problem, coordinates, shapes):
    return MAPS[coordinates][0](theta, problem, shapes)


def _action(theta, problem: Problem, coordinates: str, shapes):
    """``S(θ)`` of docs/theory.md §8 (up to a constant)."""
    return _action_and_factor(theta, problem, coordinates, shapes)[0]


def _action_and_factor(theta, problem: Problem, coordinates: str, shapes):
    """``(S(θ), U_1, L_G)``: the action, ``U_1`` and the Cholesky factor of ``G = K(U_1) + temperature I``."""
    Us, _ = _order_parameters(theta, problem, coordinates, shapes)
    d, Lg = data_term_and_factor(Us[0], problem)
    return MAPS[coordinates][1](theta, problem, shapes) + 0.5 * d, Us[0], Lg


def _observables(theta, problem, coordinates, shapes):
    """``g(θ)``: the upper-triangular entries of every ``U_l`` (row-major), then ``Ua``."""
    Us, Ua = _order_parameters(theta, problem, coordinates, shapes)
    return jnp.concatenate([U[np.triu_indices(U.shape[0])] for U in Us] + [jnp.reshape(Ua, (1,))])


# ----------------------------------------------------------------------------
# jit-compiled pieces (float64 whatever the caller's default)
#
# S(θ) = S_p(θ) + d(u(θ)): the prior part S_p (no training data) and the data
# term d(u) = ½ (ln det G + Yᵀ G⁻¹ Y), a function of u = vech U_1 only. S_p and
# u(θ) are differentiated by JAX; d by the closed forms of
# objective.data_derivatives (value, gradient, Hessian in u), its third
# derivative by JAX reverse mode over that Hessian. Chain rule, with J = ∂u/∂θ:
#   S' = S_p' + Jᵀ d',   H = S_p'' + Jᵀ d'' J + ∇²(d'·u),
#   v  = ∇_θ [tr(Σ S_p''(θ)) + tr(d'' J(θ) Σ J(θ)ᵀ) + tr(Σ ∇²(d'·u)(θ))]   (d', d'' frozen)
#        + Jᵀ (T + d'' c),   T_b = ∂_b tr(A d''(u)) (A = J Σ Jᵀ frozen),   c_a = tr(Σ ∇²u_a).
# ----------------------------------------------------------------------------
_static = partial(jax.jit, static_argnames=("coordinates", "shapes"))


def _prior(theta, problem, coordinates, shapes):
    return MAPS[coordinates][1](theta, problem, shapes)


def _u(theta, problem, coordinates, shapes):
    U1 = _order_parameters(theta, problem, coordinates, shapes)[0][0]
    return U1[np.triu_indices(U1.shape[0])]


def _data(u, problem):
    """``d(u)``, ``d'``, ``d''``: the data term, halved, in the vech entries of ``U_1``."""
    f, g, H = data_derivatives(u, problem)
    return 0.5 * f, 0.5 * g, 0.5 * H


@_static
def _value(theta, problem, coordinates, shapes):
    return _action(theta, problem, coordinates, shapes)


def _grad_hess(theta, problem, coordinates, shapes):
    """``S``, ``S'``, ``H`` and the data derivatives ``d'``, ``d''`` at ``θ``."""
    Sp = partial(_prior, problem=problem, coordinates=coordinates, shapes=shapes)
    u = partial(_u, problem=problem, coordinates=coordinates, shapes=shapes)
    fp, gp = jax.value_and_grad(Sp)(theta)
    J = jax.jacfwd(u)(theta)
    fd, gd, Hd = _data(u(theta), problem)
    H = jax.hessian(lambda t: Sp(t) + gd @ u(t))(theta) + J.T @ Hd @ J  # S_p'' + ∇²(d'·u) + Jᵀ d'' J
    return fp + fd, gp + J.T @ gd, 0.5 * (H + H.T), gd, Hd


@_static
def _value_grad_hess(theta, problem, coordinates, shapes):
    return _grad_hess(theta, problem, coordinates, shapes)


@_static
def _expansion(theta, H, gd, Hd, problem, coordinates, shapes):
    """Everything §8 needs at ``θ̂``, given ``H``, ``d'``, ``d''`` there: ``g``, the corrected means, the covariance
    of ``g``, ``v``. (``u = vech U_1`` is the head of ``g``.)"""
    Sp = partial(_prior, problem=problem, coordinates=coordinates, shapes=shapes)
    u = partial(_u, problem=problem, coordinates=coordinates, shapes=shapes)
    g = partial(_observables, problem=problem, coordinates=coordinates, shapes=shapes)
    n1 = gd.shape[0]
    Lh = jnp.linalg.cholesky(H)  # NaN when H is not positive definite
    Linv = solve_triangular(Lh, jnp.eye(theta.shape[0], dtype=theta.dtype), lower=True)
    Sigma = Linv.T @ Linv  # Σ = H⁻¹ = L⁻ᵀ L⁻¹
    R = Linv.T  # Σ = R Rᵀ, columns r_k

    def second(fn, r, t=theta):  # second directional derivative of fn along r, at t
        return jax.jvp(lambda s: jax.jvp(fn, (s,), (r,))[1], (t,), (r,))[1]

    g0, Jg = g(theta), jax.jacfwd(g)(theta)
    trace = jnp.sum(jax.vmap(lambda r: second(g, r))(R.T), axis=0)  # tr(g'' Σ)
    J, c = Jg[:n1], trace[:n1]  # ∂u/∂θ and tr(Σ ∇²u_a)

    # v (see the comment above): tr(Σ ∇²F(t)) + tr(d'' J(t) Σ J(t)ᵀ) = Σ_k [rₖᵀ F''(t) rₖ + |J(t) rₖ|²_d''],
    # F = S_p + d'·u with d', d'' frozen
    def frozen(t):
        def one(r):
            Jr = jax.jvp(u, (t,), (r,))[1]
            return second(lambda s: Sp(s) + gd @ u(s), r, t) + Jr @ Hd @ Jr
        return jnp.sum(jax.vmap(one)(R.T))

    T = jax.grad(lambda w: jnp.vdot(J @ Sigma @ J.T, _data(w, problem)[2]))(g0[:n1])
    v = jax.grad(frozen)(theta) + J.T @ (T + Hd @ c)
    mean = g0 + 0.5 * trace - 0.5 * Jg @ (Sigma @ v)
    cov = Jg @ Sigma @ Jg.T
    return g0, mean, cov, v


def _call64(fn, theta, problem, coordinates, shapes):
    with float64():
        return fn(jnp.asarray(theta, dtype=jnp.float64), problem, coordinates=coordinates, shapes=shapes)


def exact_action(theta, problem: Problem, coordinates: str = "bartlett") -> float:
    """``S(θ)`` of docs/theory.md §8 at coordinates ``θ`` (NumPy in, float out; up to a constant)."""
    return float(_call64(_value, theta, problem, coordinates, _shapes_for(problem, coordinates)))


def action_at(theta: jax.Array, problem: Problem, shapes, coordinates: str = "bartlett") -> jax.Array:
    """``S(θ)`` of docs/theory.md §8 (up to a constant) as a pure JAX function of ``θ`` and ``problem`` (both may
    be traced; ``shapes``: :attr:`Mode.shapes`, static). Computes in the dtype of ``θ`` and ``problem``."""
    return _action(theta, problem, coordinates, shapes)


def action_and_factor_at(theta: jax.Array, problem: Problem, shapes,
                         coordinates: str = "bartlett") -> tuple[jax.Array, jax.Array, jax.Array]:
    """:func:`action_at`, with ``U_1`` ``[D, D]`` at ``θ`` and the lower Cholesky factor ``[P, P]`` of
    ``G = K(U_1) + temperature I`` that its data term factorised (one factorisation for ``S`` and the exact draws
    of ``f`` given ``U_1``: docs/theory.md §9)."""
    return _action_and_factor(theta, problem, coordinates, shapes)


def order_parameters_at(theta: jax.Array, problem: Problem, shapes, coordinates: str = "bartlett"):
    """``([U_1, ..., U_L], Ua)`` at ``θ`` as a pure JAX function (see :func:`action_at`)."""
    return _order_parameters(theta, problem, coordinates, shapes)


def action_function(problem: Problem, coordinates: str = "bartlett"):
    """``S`` as a pure JAX function of ``θ`` (traceable and differentiable; call it in float64)."""
    _checks.choice("coordinates", coordinates, COORDINATES)
    return partial(_action, problem=problem, coordinates=coordinates, shapes=_shapes_for(problem, coordinates))


def derivatives(theta, problem: Problem, coordinates: str = "bartlett") -> tuple[float, np.ndarray, np.ndarray]:
    """``(S, S', H)`` at ``θ`` (NumPy float64), as the Newton solve and the expansion compute them."""
    f, g, H, *_ = _call64(_value_grad_hess, theta, problem, coordinates, _shapes_for(problem, coordinates))
    return float(f), np.asarray(g), np.asarray(H)


def third_derivative_contraction(theta, problem: Problem, coordinates: str = "bartlett") -> np.ndarray:
    """``v_j = Σ_kl S'''_jkl Σ_kl`` at ``θ`` with ``Σ = H(θ)⁻¹`` (NumPy; ``H`` must be positive definite)."""
    shapes = _shapes_for(problem, coordinates)
    _, _, H, gd, Hd = _call64(_value_grad_hess, theta, problem, coordinates, shapes)
    with float64():
        return np.asarray(_expansion(jnp.asarray(theta, jnp.float64), H, gd, Hd, problem, coordinates=coordinates,
                                     shapes=shapes)[3])


_order_parameters_jit = jax.jit(_order_parameters, static_argnums=(2, 3))


def observables(theta, problem: Problem, coordinates: str = "bartlett"):
    """``([U_1, ..., U_L], Ua)`` at coordinates ``θ`` (NumPy)."""
    shapes = _shapes_for(problem, coordinates)
    with float64():
        Us, Ua = _order_parameters_jit(jnp.asarray(theta, jnp.float64), problem, coordinates, shapes)
        return [np.asarray(U) for U in Us], float(Ua)


def _shapes_for(problem: Problem, coordinates: str):
    """Static shapes of the Bartlett factors (``None`` for log-Cholesky coordinates)."""
    return shapes_of(problem.heads, np.asarray(problem.widths), coordinates)


def shapes_of(heads, widths, coordinates: str):
    """:attr:`Mode.shapes` for a network of ``heads`` and ``widths``: static shapes of the Bartlett factors
    (``None`` for log-Cholesky coordinates)."""
    if coordinates == "log_cholesky":
        return None
    shapes = factor_shapes(heads, [int(round(float(n))) for n in widths])
    return tuple(tuple(int(a) for a in s) for s in shapes)


# ----------------------------------------------------------------------------
# the start point: the leading-order solution in the chosen coordinates
# ----------------------------------------------------------------------------
def start_point(Us: Sequence[np.ndarray], Ua: float, net, coordinates: str = "bartlett") -> np.ndarray:
    """Coordinates ``θ`` of positive definite ``[U_1, ..., U_L]`` and ``Ua`` (NumPy); Bartlett sites by
    :func:`bayes_attn.theory._bartlett.sites_of_order_parameters`."""
    _checks.choice("coordinates", coordinates, COORDINATES)
    if coordinates == "log_cholesky":
        return np.concatenate([log_cholesky(Us), [math.log(Ua)]])
    theta = np.array(sites_of_order_parameters(Us, Ua, net.heads, net.widths, net.variances), dtype=np.float64)
    if coordinates == "bartlett_cbrt":  # (log c, z) -> (c^{1/3}, z)
        nr = sum(r for _, r in shapes_of(net.heads, net.widths, coordinates))
        theta[:nr] = np.exp(theta[:nr] / 3.0)
    return theta


# ----------------------------------------------------------------------------
# Newton for θ̂ and the expansion
# ----------------------------------------------------------------------------
def check_coordinates(net, coordinates: str) -> None:
    """``ValueError`` unless ``coordinates`` is one of :data:`COORDINATES` and valid for ``net``'s widths."""
    _checks.choice("coordinates", coordinates, COORDINATES)
    if coordinates == "log_cholesky":
        for l, (D, N) in enumerate(zip(sizes(net.heads), net.widths, strict=False), start=1):  # widths end with N_a
            if N < D:
                raise ValueError(
                    f"coordinates='log_cholesky' needs full-rank order parameters, but U_{l} is singular "
                    f"(width N_{l} = {N} < D_{l} = {D}); use coordinates='bartlett'"
                )


@dataclasses.dataclass(frozen=True)
class Mode:
    """The expansion of ``S(θ)`` about its mode (docs/theory.md §8): ``θ̂ = argmin S``, ``H = S''(θ̂)`` and what
    the correction reuses; the centre and scale of the guided samplers' proposal (§9). The one expansion type:
    :class:`~bayes_attn.theory._result.Correction` holds it beside the corrected means.

    Attributes:
        coordinates: ``"bartlett"`` or ``"log_cholesky"``; shapes: the static factor shapes (``None`` for
            log-Cholesky coordinates).
        theta: ``θ̂`` ``[n]``; action: ``S(θ̂)``; gradient: ``S'(θ̂)`` ``[n]``; hessian: ``H`` ``[n, n]``.
        data_gradient, data_hessian: ``d'``, ``d''`` of the data term at ``U_1(θ̂)`` (what the expansion reuses).
        report: the Newton solve for ``θ̂`` (its ``measure``: the Newton decrement ``sqrt(S'ᵀ H⁻¹ S')``).
    """

    coordinates: str
    shapes: tuple | None
    theta: np.ndarray
    action: float
    gradient: np.ndarray
    hessian: np.ndarray
    data_gradient: np.ndarray
    data_hessian: np.ndarray
    report: SolveReport

    @property
    def dimension(self) -> int:
        """The number of coordinates ``n``."""
        return int(np.shape(self.theta)[0])

    @property
    def hessian_min_eigenvalue(self) -> float:
        """The smallest eigenvalue of ``H`` (NaN where ``H`` is not finite)."""
        H = np.asarray(self.hessian)
        return float(np.linalg.eigvalsh(H)[0]) if np.all(np.isfinite(H)) else float("nan")


def find_mode(net, problem: Problem, Us0: Sequence[np.ndarray], Ua0: float, *, coordinates: str = "bartlett",
              tol: float = 1e-9, max_iter: int = 50) -> Mode:
    """Minimise ``S(θ)`` from ``(Us0, Ua0)`` by damped Newton (docs/theory.md §8).

    Stops when the Newton decrement ``sqrt(S'ᵀ H⁻¹ S')`` (the step in units
    of the posterior spread) is at most ``tol``, or when it stalls at the
    rounding level of ``S`` (converged if then below ``1e-6``): the driver
    of the leading-order solve, :func:`~bayes_attn.theory._newton.damped_newton`.
    """
    check_coordinates(net, coordinates)
    tol = _checks.positive("tol", tol)
    max_iter = _checks.positive_int("max_iter", max_iter, minimum=0)
    t0 = time.perf_counter()
    shapes = _shapes_for(problem, coordinates)
    x = start_point(Us0, Ua0, net, coordinates)

    def vgh(p):
        f, g, H, gd, Hd = _call64(_value_grad_hess, p, problem, coordinates, shapes)
        return float(f), np.asarray(g), np.asarray(H), (gd, Hd)

    def value(p):
        return float(_call64(_value, p, problem, coordinates, shapes))

    run = damped_newton(x, vgh, value, lambda g, H, d, aux: math.sqrt(max(-float(g @ d), 0.0)),
                        NewtonSolver(tol=tol, max_iter=max_iter), stalled_converged=1e-6, measure="Newton decrement")
    gd, Hd = (np.asarray(a) for a in run.aux)
    report = SolveReport(bool(run.converged), run.iterations, run.message, time.perf_counter() - t0, run.measure)
    return Mode(coordinates, shapes, run.x, float(run.value), run.grad, run.hess, gd, Hd, report)


class Moments(NamedTuple):
    """The corrected moments of the entries ``g`` (vech of every ``U_l`` then ``Ua``) at a :class:`Mode`
    (docs/theory.md §8): ``point`` ``g(θ̂)``, ``mean`` the corrected posterior means, ``covariance``
    ``g'ᵀ Σ g'`` ``[k, k]``, ``v`` ``[n]``, and the wall ``seconds`` of the expansion."""

    point: np.ndarray
    mean: np.ndarray
    covariance: np.ndarray
    v: np.ndarray
    seconds: float


def moments(mode: Mode, problem: Problem) -> Moments:
    """The expansion at ``mode`` (:func:`find_mode`) of the problem it was found for (docs/theory.md §8)."""
    t0 = time.perf_counter()
    with float64():
        g0, mean, cov, v = (np.asarray(a) for a in _expansion(
            jnp.asarray(mode.theta, jnp.float64), mode.hessian, mode.data_gradient, mode.data_hessian, problem,
            coordinates=mode.coordinates, shapes=mode.shapes))
    return Moments(g0, mean, 0.5 * (cov + cov.T), v, time.perf_counter() - t0)


def expand(net, problem: Problem, Us0: Sequence[np.ndarray], Ua0: float, *, coordinates: str = "bartlett",
           tol: float = 1e-9, max_iter: int = 50) -> tuple[Mode, Moments]:
    """:func:`find_mode` from ``(Us0, Ua0)``, then the :func:`moments` there (docs/theory.md §8)."""
    mode = find_mode(net, problem, Us0, Ua0, coordinates=coordinates, tol=tol, max_iter=max_iter)
    return mode, moments(mode, problem)
