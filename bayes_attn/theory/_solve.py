"""Public solvers: the finite-width minimum of ``S`` and the GP limit (docs/theory.md §4)."""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence

import numpy as np

from .._internal import checks as _checks
from .._internal.compile_cache import for_library
from .._internal.precision import float64
from ..kernels import Basis
from ..network import Network
from ._coordinates import matrix_gradients, pack, unpack
from ._corrected import check_correction_fits, corrected_theory
from ._correction import CORRECTIONS
from ._newton import NewtonResult, NewtonSolver, SolveReport
from ._objective import (
    Problem,
    check_order_parameters,
    check_problem,
    gp_order_parameters,
    make_problem,
    readout,
    value_grad_hess,
)
from ._result import Theory

__all__ = ["solve_theory", "gp_limit"]


def solve_theory(
    net: Network,
    x,
    y,
    *,
    temperature: float,
    init: str | Sequence[np.ndarray] = "gp",
    solver: NewtonSolver | None = None,
    correction: str | None = None,
    basis: Basis | None = None,
) -> Theory:
    """Minimise ``S`` (docs/theory.md §4) over all ``U_l``; ``Ua`` by its closed form.

    With ``correction="laplace"`` the result is then corrected to next order
    in ``1/N`` (docs/theory.md §8, :func:`~bayes_attn.theory._corrected.laplace_correction`):
    corrected posterior means of every order parameter and of the predictor,
    the leading-order values beside them, and posterior standard deviations.

    Args:
        net: the network (widths, variances and heads define ``S``).
        x: training inputs ``[P, T, N0]``; y: labels ``[P]``.
        temperature: likelihood variance (> 0).
        init: ``"gp"`` (GP values) or a list ``[U_1, ..., U_L]`` of SPD matrices.
        solver: the :class:`NewtonSolver` (default ``NewtonSolver()``: stop when
            ``max |∂(S/N_max)/∂U_l| <= 1e-8``, at most 200 Newton steps); e.g.
            ``NewtonSolver(tol=1e-10, max_iter=500)``.
        correction: ``None`` or ``"none"`` (default: the theory of §4, unchanged)
            or ``"laplace"`` (§8; skipped, with a warning, when the leading order did not
            converge to a minimum: then ``Theory.correction`` is ``None``).
        basis: the :func:`~bayes_attn.theory.kernel_basis` of ``net`` on ``x``, when it was computed
            before (e.g. for another width); checked against ``x`` and the network.

    Warns (``RuntimeWarning``) when it does not converge or stops where the
    Hessian is not positive definite (then ``Theory.is_minimum`` is False),
    and, with ``correction="laplace"``, when the correction is unreliable
    (see :func:`~bayes_attn.theory._corrected.laplace_correction`).
    """
    x, y, temperature = check_problem(net, x, y, temperature)
    correction = _checks.choice("correction", "none" if correction is None else correction, CORRECTIONS)
    if correction == "laplace":
        check_correction_fits(net, len(y))
    if solver is not None and not isinstance(solver, NewtonSolver):
        raise ValueError(f"solver must be a NewtonSolver, got {type(solver).__name__}")
    solver = solver or NewtonSolver()
    if isinstance(init, str):
        _checks.choice("init", init, ("gp",))
        Us0 = gp_order_parameters(net)[0]
    else:
        Us0 = check_order_parameters("init", init, net)
    for_library()  # the command's persistent compilation cache, unless the caller configured JAX's
    t0 = time.perf_counter()
    problem = make_problem(net, x, y, temperature, basis=basis)
    res = _minimise(solver, Us0, problem, net, y, temperature)
    seconds = time.perf_counter() - t0
    theory = _make_theory(net, x, y, temperature, problem, res, limit="finite_width", seconds=seconds)
    _warn_if_not_a_minimum(theory, res, solver.tol)
    if correction == "laplace" and theory.problems:  # no expansion about a point that is not a minimum
        warnings.warn("the Laplace correction is skipped (the result is the leading order): "
                      + "; ".join(theory.problems), RuntimeWarning, stacklevel=2)
    elif correction == "laplace":
        corrected = corrected_theory(theory, problem)
        c = corrected.correction
        if c is not None and np.all(np.isfinite(c.U_covariance)) and np.all(np.isfinite(corrected.U)):
            return corrected
        warnings.warn("the Laplace correction is skipped (the result is the leading order): its covariance of U "
                      f"is not finite at temperature {temperature:g} (the curvature of S is singular to float64 "
                      "precision; a larger temperature, or the leading order)", RuntimeWarning, stacklevel=2)
    return theory


def _minimise(solver: NewtonSolver, Us0, problem: Problem, net: Network, y, temperature: float) -> NewtonResult:
    """``solver.minimise``; a breakdown (``LinAlgError``) is a ``ValueError`` that names the scales causing it."""
    try:
        return solver.minimise(Us0, problem)
    except np.linalg.LinAlgError as err:  # a breakdown, not a bug: name the scales that cause it
        scale = float(np.abs(y).max())
        hint = (f"the labels y have max |y| = {scale:.3g}, far from unit scale: rescale them (the theory expects "
                "labels of order one, e.g. ±1)") if not 0.1 <= scale <= 10 else (
                f"check the scales of the variances {list(net.variances)} and the temperature {temperature:g}")
        raise ValueError(f"solve_theory: the Newton solve broke down ({err}); {hint}") from None


def _warn_if_not_a_minimum(theory: Theory, res: NewtonResult, tol: float) -> None:
    """A ``RuntimeWarning`` (at the caller of :func:`solve_theory`) when the solve did not converge, or stopped
    where the Hessian is not positive definite."""
    if not theory.converged:
        warnings.warn(
            f"solve_theory did not converge ({res.message}" + ("" if "gradient" in res.message else
                                                             f"; max gradient {theory.max_gradient:.3g}")
            + f" > tol {tol:.3g})",
            RuntimeWarning,
            stacklevel=3,
        )
    elif not theory.is_minimum:
        warnings.warn(
            "solve_theory stopped at a stationary point that is not a minimum "
            f"(Hessian min eigenvalue {theory.hessian_min_eigenvalue:.3g})",
            RuntimeWarning,
            stacklevel=3,
        )


def gp_limit(net: Network, x, y, *, temperature: float, basis: Basis | None = None) -> Theory:
    """The GP limit: every order parameter at its GP value (``U = net.gp_U``).

    ``action``, ``max_gradient`` and ``hessian_min_eigenvalue`` are those of the
    network's finite-width ``S / N_max`` evaluated at the GP point (they show how
    far the GP point is from the finite-width solution); ``converged`` is True. ``basis`` as in
    :func:`solve_theory`.
    """
    x, y, temperature = check_problem(net, x, y, temperature)
    for_library()
    t0 = time.perf_counter()
    problem = make_problem(net, x, y, temperature, basis=basis)
    theta = pack(gp_order_parameters(net)[0])
    with float64():
        f, g, H = value_grad_hess(theta, problem)
        res = NewtonResult(theta, float(f), np.asarray(g), np.asarray(H), True, 0, "GP limit")
    return _make_theory(net, x, y, temperature, problem, res, limit="gp", seconds=time.perf_counter() - t0)


def _make_theory(
    net: Network, x, y, temperature: float, problem: Problem, res: NewtonResult, *, limit: str, seconds: float
) -> Theory:
    Us = unpack(np.asarray(res.theta, dtype=np.float64), net.heads)
    if limit == "gp":
        Ua = float(net.variances[-1])
    else:
        with float64():
            Ua = float(readout(res.theta, problem))
    grads = matrix_gradients(res.grad, net.heads)
    max_grad = float(max(np.abs(G).max() for G in grads))
    hmin = float(np.linalg.eigvalsh(res.hess)[0]) if np.all(np.isfinite(res.hess)) else float("nan")
    return Theory(
        order_parameters=tuple(Us),
        Ua=Ua,
        action=float(res.value),
        hessian_min_eigenvalue=hmin,
        temperature=float(temperature),
        net=net,
        x_train=x,
        y_train=y,
        limit=limit,
        report=SolveReport(bool(res.converged), int(res.iterations), res.message, seconds, max_grad),
    )
