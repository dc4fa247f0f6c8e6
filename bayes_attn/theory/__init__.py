"""Finite-width theory of docs/theory.md §3–4: the action, its minimiser, predictors.

Symbols (docs/theory.md):

- ``C[pi, pi'](mu, nu)``: path–path kernel ``[D, D, P, P]`` (§3);
- ``U_l``: order parameter of hidden layer ``l`` (``l = 1..L``), symmetric
  positive definite, ``[m_l, m_l]`` with ``m_l = H_l ... H_L`` (``h_l``
  slowest); ``U = U_1`` is the ``D × D`` matrix over paths;
- ``Ua``: readout order parameter (a positive scalar), eliminated through its
  closed form given ``U_L``;
- ``K(U_1) = sum U_1[pi, pi'] C[pi, pi']``: the renormalised kernel ``[P, P]``;
  ``G = K + temperature · I``;
- ``S``: the action of §4, minimised over all ``U_l``.

Modules:

- :mod:`._coordinates`: flat coordinates of ``[U_1, ..., U_L]`` — vech
  (upper-triangular entries) and log-Cholesky — and the maps between them;
- :mod:`._objective`: :class:`Problem` (data, widths, variances, kernel basis),
  ``S`` = entropy + data term, the reduced action ``S / N_max`` with ``Ua``
  eliminated and its exact gradient and Hessian (jit-compiled, float64);
  :func:`action`, :func:`action_gradient`, :func:`gp_order_parameters`;
- :mod:`._newton`: :class:`NewtonSolver`, damped Newton with Armijo
  backtracking, returning a :class:`NewtonResult`;
- :mod:`._result`: :class:`Theory` (order parameters, predictor mean and
  variance, kernel–task alignment, head scores, netCDF) and :func:`load_theory`;
- :mod:`._solve`: :func:`solve_theory` (minimum of ``S``) and :func:`gp_limit`;
- :mod:`._correction`: the exact ``S(θ)`` of the order parameters' posterior, its
  mode and its Laplace expansion (docs/theory.md §8); :mod:`._corrected`: the
  corrected theory, :func:`laplace_correction`, used by
  ``solve_theory(..., correction="laplace")``.

All JAX computations run in float64 inside :func:`bayes_attn._internal.precision.float64`,
whatever the caller's JAX default; results are NumPy float64.
"""

from ._corrected import laplace_correction
from ._newton import NewtonResult, NewtonSolver
from ._objective import Problem, action, action_gradient, gp_order_parameters, kernel_basis, make_problem
from ._result import Correction, Theory, head_scores, load_theory
from ._solve import gp_limit, solve_theory

__all__ = [
    "Correction",
    "NewtonResult",
    "NewtonSolver",
    "Problem",
    "Theory",
    "action",
    "action_gradient",
    "gp_limit",
    "gp_order_parameters",
    "head_scores",
    "laplace_correction",
    "load_theory",
    "make_problem",
    "kernel_basis",
    "solve_theory",
]
