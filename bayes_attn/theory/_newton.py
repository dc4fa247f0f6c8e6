"""Damped Newton minimisation of the reduced action ``S / N_max`` (docs/theory.md §4).

:class:`NewtonSolver` steps in log-Cholesky coordinates of every ``U_l``
(``U_l = L_l L_lᵀ``, log of ``L_l``'s diagonal; default) or in their vech
entries. In log-Cholesky coordinates iterates stay positive definite and
``−ln det U_l`` is linear. A backtracking Armijo line search rejects
non-finite values (a failed Cholesky gives NaN); where the Hessian is not
positive definite :func:`newton_direction` uses its absolute eigenvalues.
Convergence, the returned gradient and Hessian refer to the vech entries of
the ``U_l`` themselves, whatever the coordinates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import scipy.linalg

from .._internal import checks as _checks
from .._internal import threads
from .._internal.precision import float64
from ._coordinates import log_cholesky, pack, vech_weights
from ._objective import (
    Problem,
    log_cholesky_value,
    log_cholesky_value_grad_hess,
    value,
    value_grad_hess,
    vech_from_log_cholesky,
)

__all__ = ["COORDINATES", "NewtonResult", "NewtonRun", "NewtonSolver", "SolveReport", "damped_newton",
           "newton_direction"]

COORDINATES = ("log_cholesky", "vech")


@dataclass(frozen=True)
class SolveReport:
    """How a Newton solve ended (of §4's order parameters or of §8's mode ``θ̂``).

    Attributes:
        converged: whether its criterion reached the tolerance.
        iterations: Newton steps taken.
        message: the stopping reason.
        seconds: wall time (including compilation if any).
        measure: its criterion where it stopped: ``max_l |∂(S/N_max)/∂U_l|`` for §4, the Newton
            decrement ``sqrt(S'ᵀ H⁻¹ S')`` for §8.
    """

    converged: bool
    iterations: int
    message: str
    seconds: float
    measure: float


class NewtonResult(NamedTuple):
    """Where :meth:`NewtonSolver.minimise` stopped.

    Attributes:
        theta: vech entries of ``[U_1, ..., U_L]`` ``[n]``.
        value: ``S / N_max`` there (``Ua`` eliminated).
        grad: its gradient in the vech entries ``[n]``; hess: Hessian ``[n, n]``.
        converged: whether ``max_l |∂(S/N_max)/∂U_l| <= tol`` was reached.
        iterations: Newton steps taken.
        message: the stopping reason.
    """

    theta: np.ndarray
    value: float
    grad: np.ndarray
    hess: np.ndarray
    converged: bool
    iterations: int
    message: str


def newton_direction(g: np.ndarray, H: np.ndarray) -> np.ndarray:
    """Newton direction ``−H⁻¹ g`` (Cholesky solve); ``g`` ``[n]``, ``H`` ``[n, n]``.

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


@dataclass(frozen=True)
class NewtonSolver:
    """Damped Newton with a backtracking Armijo line search.

    Attributes:
        tol: stop when ``max_l |∂(S/N_max)/∂U_l| <= tol`` (matrix gradient).
        max_iter: maximum Newton steps.
        coordinates: ``"log_cholesky"`` (positive definiteness built in,
            ``−ln det U`` linear) or ``"vech"`` (the entries of ``U_l``; steps
            leaving the positive definite cone are rejected by the line search).
        armijo: sufficient-decrease constant ``c`` in ``f(x + t d) <= f + c t gᵀd``.
        backtrack: step shrink factor of the line search.
        max_backtracks: line-search trials before giving up.
        slack_ulps: the Armijo test allows ``slack_ulps · eps · max(|f|, 1)`` of
            rounding, so the full Newton step passes near the solution where the
            predicted decrease falls below the rounding of ``f``.
        stall_steps: stop after this many consecutive steps that neither lower
            ``f`` beyond the slack nor shrink the max gradient below
            ``stall_ratio`` times its previous value (the rounding floor of ``S``).
        stall_ratio: see ``stall_steps``.
    """

    tol: float = 1e-8
    max_iter: int = 200
    coordinates: str = "log_cholesky"
    armijo: float = 1e-4
    backtrack: float = 0.5
    max_backtracks: int = 60
    slack_ulps: float = 64.0
    stall_steps: int = 5
    stall_ratio: float = 0.5

    def __post_init__(self) -> None:
        _checks.positive("tol", self.tol)
        _checks.positive_int("max_iter", self.max_iter, minimum=0)
        _checks.choice("coordinates", self.coordinates, COORDINATES)
        for name in ("armijo", "backtrack", "stall_ratio"):
            v = _checks.positive(name, getattr(self, name))
            if v >= 1:
                raise ValueError(f"{name} must be in (0, 1), got {v!r}")
        _checks.positive_int("max_backtracks", self.max_backtracks)
        _checks.positive_int("stall_steps", self.stall_steps)
        if not float(self.slack_ulps) >= 0:
            raise ValueError(f"slack_ulps must be >= 0, got {self.slack_ulps!r}")

    def minimise(self, Us0: Sequence[np.ndarray], problem: Problem) -> NewtonResult:
        """Minimise ``S / N_max`` of ``problem`` from the SPD matrices ``Us0 = [U_1, ..., U_L]``."""
        with float64(), threads.limits():
            return self._minimise(Us0, problem)

    def _coordinates(self, Us0, problem: Problem) -> tuple[np.ndarray, Callable, Callable, Callable]:
        """Start point and three maps of a point ``p``: to the vech entries; to
        ``(f, g, H, vech g, vech H)``; to ``f``."""
        if self.coordinates == "vech":

            def vgh_vech(p):
                f, g, H = value_grad_hess(p, problem)
                g, H = np.asarray(g), np.asarray(H)
                return float(f), g, H, g, H

            return pack(Us0), np.asarray, vgh_vech, lambda p: float(value(p, problem))

        def vgh(p):
            f, g, H, gt, Ht = log_cholesky_value_grad_hess(p, problem)
            return float(f), np.asarray(g), np.asarray(H), np.asarray(gt), np.asarray(Ht)

        def to_theta(p):
            return np.asarray(vech_from_log_cholesky(p, problem))

        return log_cholesky(Us0), to_theta, vgh, lambda p: float(log_cholesky_value(p, problem))

    def _minimise(self, Us0, problem: Problem) -> NewtonResult:
        weights = vech_weights(problem.heads)
        x, to_theta, vgh, value_at = self._coordinates(Us0, problem)

        def step(p):
            f, g, H, gt, Ht = vgh(p)
            return f, g, H, (gt, Ht)

        run = damped_newton(x, step, value_at, lambda g, H, d, aux: float(np.max(np.abs(aux[0] / weights))), self,
                            measure="max gradient")
        gt, Ht = run.aux
        message = "gradient below tol" if run.converged else run.message
        return NewtonResult(to_theta(run.x), run.value, gt, Ht, run.converged, run.iterations, message)


class NewtonRun(NamedTuple):
    """Where :func:`damped_newton` stopped: the point ``x``, ``f``, ``g``, ``H`` and the extra values ``aux`` of its
    ``vgh`` there, whether the convergence measure reached ``tol``, the steps taken, the stopping reason and the
    measure's last value."""

    x: np.ndarray
    value: float
    grad: np.ndarray
    hess: np.ndarray
    aux: Any
    converged: bool
    iterations: int
    message: str
    measure: float


def damped_newton(x: np.ndarray, vgh: Callable, value: Callable, size: Callable, solver: NewtonSolver, *,
                  stalled_converged: float = 0.0, measure: str = "measure") -> NewtonRun:
    """Damped Newton with a backtracking Armijo line search: the one driver of the leading-order solve (§4,
    :class:`NewtonSolver`) and of the expansion's mode (§8, :func:`~bayes_attn.theory._correction.find_mode`).

    ``vgh(x) -> (f, g, H, aux)``; ``value(x) -> f``; ``size(g, H, d, aux)``: the convergence measure at a point
    with Newton direction ``d`` (:func:`newton_direction`), converged when at most ``solver.tol``, after at most
    ``solver.max_iter`` steps (``solver``: the line search's constants, its ``coordinates`` unused here). The
    Armijo test allows ``slack_ulps · eps · max(|f|, 1)`` of rounding; a direction that is not a descent
    direction falls back to steepest descent. Stops as stalled after ``stall_steps`` consecutive steps that
    neither lower ``f`` beyond that slack nor shrink the measure below ``stall_ratio`` times its previous value
    (the rounding floor of ``f``); a stalled run whose measure is at most ``stalled_converged`` counts as
    converged. ``measure`` names the measure in messages.
    """
    tol, max_iter, slack_ulps, armijo, backtrack = (solver.tol, solver.max_iter, solver.slack_ulps, solver.armijo,
                                                    solver.backtrack)
    stall_steps, stall_ratio = solver.stall_steps, solver.stall_ratio
    f, g, H, aux = vgh(x)
    if not np.isfinite(f):
        return NewtonRun(x, f, g, H, aux, False, 0, "action not finite at the initial point", float("nan"))
    it, stalled, previous, f_old = 0, 0, None, None
    while True:
        d = newton_direction(g, H)
        gd = float(g @ d)
        if not gd < 0:  # safety: fall back to steepest descent
            d, gd = -g, -float(g @ g)
        size_now = size(g, H, d, aux)
        if size_now <= tol:
            return NewtonRun(x, f, g, H, aux, True, it, f"{measure} below tol", size_now)
        slack = slack_ulps * np.finfo(float).eps * max(abs(f), 1.0)
        if previous is not None:
            stalled = stalled + 1 if (f >= f_old - slack and size_now >= stall_ratio * previous) else 0
            if stalled >= stall_steps:
                return NewtonRun(x, f, g, H, aux, size_now <= stalled_converged, it,
                                 f"stalled at the rounding level of S ({measure} {size_now:.3g})", size_now)
        if it >= max_iter:
            return NewtonRun(x, f, g, H, aux, False, it, "maximum number of iterations reached", size_now)
        t, accepted = 1.0, False
        for _ in range(solver.max_backtracks):
            f_new = value(x + t * d)
            if np.isfinite(f_new) and f_new <= f + armijo * t * gd + slack:
                accepted = True
                break
            t *= backtrack
        it += 1
        if not accepted:
            return NewtonRun(x, f, g, H, aux, False, it, f"line search failed ({measure} {size_now:.3g})", size_now)
        x, f_old, previous = x + t * d, f, size_now
        f, g, H, aux = vgh(x)
