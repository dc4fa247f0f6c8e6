"""The corrected :class:`Theory` (docs/theory.md §8): the expansion of :mod:`.correction` put into a theory."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from .._internal import checks as _checks
from ._coordinates import sizes, unpack
from ._correction import check_coordinates, expand
from ._objective import Problem, make_problem
from ._result import Correction, Theory

__all__ = ["check_correction_fits", "laplace_correction", "corrected_theory"]


def _split(vec, heads):
    """Vech of every ``U_l`` then ``Ua`` -> ``([U_1..U_L], Ua)`` (NumPy)."""
    n = sum(m * (m + 1) // 2 for m in sizes(heads))
    return [np.asarray(U) for U in unpack(np.asarray(vec[:n]), heads)], float(vec[n])


def _covariance_tensor(cov: np.ndarray, D: int) -> np.ndarray:
    """Covariance of the vech entries of ``U_1`` -> ``Cov(U_ij, U_kl)`` ``[D, D, D, D]``."""
    idx = np.empty((D, D), dtype=np.intp)
    i, j = np.triu_indices(D)
    idx[i, j] = idx[j, i] = np.arange(len(i))
    return cov[np.ix_(idx.ravel(), idx.ravel())].reshape(D, D, D, D)


def check_correction_fits(net, P: int) -> None:
    """``ValueError`` when the expansion of ``net`` on ``P`` examples does not fit in memory: it holds second
    derivatives of ``G`` per pair of paths, ``[D(D+1)/2, P, P]`` twice in float64."""
    D = net.D
    _checks.fits_in_memory(f"correction='laplace' with {D} paths and P={P}", 8.0 * 2 * D * (D + 1) / 2 * P * P)


def laplace_correction(theory: Theory, *, coordinates: str = "bartlett", tol: float = 1e-9,
                       max_iter: int = 50) -> Theory:
    """The finite-width corrected theory (docs/theory.md §8) from a leading-order one.

    ``theory`` must come from :func:`~bayes_attn.theory.solve_theory` without
    correction (its order parameters are the start of the Newton solve for
    ``θ̂``). Returns a new :class:`Theory` with ``U``, ``order_parameters``,
    ``Ua`` the corrected posterior means and its ``correction``
    (:class:`~bayes_attn.theory._result.Correction`): the leading values,
    the posterior standard deviations and the expansion, which
    :meth:`Theory.predict` uses for the corrected predictor.

    Warns (``RuntimeWarning``, and lists them in ``correction.problems``) when the
    Newton solve for ``θ̂`` does not converge, ``H`` is not positive definite
    there, or a corrected mean of some ``U_l`` is not positive semi-definite
    (then the next-order terms are as large as the leading ones: the widths
    are too small for the expansion).
    """
    if not isinstance(theory, Theory):
        raise ValueError(f"theory must be a Theory, got {type(theory).__name__}")
    if theory.correction is not None or theory.limit != "finite_width":
        raise ValueError("theory must be a leading-order finite-width Theory (solve_theory without correction)")
    check_coordinates(theory.net, coordinates)
    check_correction_fits(theory.net, len(theory.y_train))
    problem = make_problem(theory.net, theory.x_train, theory.y_train, theory.temperature)
    return corrected_theory(theory, problem, coordinates=coordinates, tol=tol, max_iter=max_iter)


def corrected_theory(theory: Theory, problem: Problem, *, coordinates: str = "bartlett", tol: float = 1e-9,
                     max_iter: int = 50) -> Theory:
    """:func:`laplace_correction` with the :class:`Problem` of ``theory`` already built (arguments not checked)."""
    net = theory.net
    mode, res = expand(net, problem, theory.order_parameters, theory.Ua, coordinates=coordinates, tol=tol,
                       max_iter=max_iter)
    hmin = mode.hessian_min_eigenvalue
    heads = net.heads
    point_Us, point_Ua = _split(res.point, heads)
    mean_Us, mean_Ua = _split(res.mean, heads)
    sd_Us, sd_Ua = _split(np.sqrt(np.clip(np.diag(res.covariance), 0.0, None)), heads)
    problems = []
    if not mode.report.converged:
        problems.append(mode.report.message)
    if not hmin > 0:
        problems.append(f"the Hessian of S at the expansion point is not positive definite (min eigenvalue {hmin:.3g})")
    if not np.all(np.isfinite(res.mean)):
        problems.append("the corrected means are not finite")
    else:
        # a posterior mean of positive semi-definite matrices is one: a negative eigenvalue means the next-order
        # terms are as large as the leading ones (widths too small for the expansion)
        low = [float(np.linalg.eigvalsh(U)[0]) / max(np.abs(U).max(), 1e-300) for U in mean_Us] + [np.sign(mean_Ua)]
        bad = [f"U_{l}" if l <= net.L else "Ua" for l, e in enumerate(low, start=1) if e < -1e-9]
        if bad:
            problems.append(f"the corrected mean of {', '.join(bad)} is not positive semi-definite: "
                            "the widths are too small for the expansion")
    if problems:
        warnings.warn(f"the Laplace correction is unreliable: {'; '.join(problems)}", RuntimeWarning, stacklevel=3)
    n1 = net.D * (net.D + 1) // 2
    correction = Correction(
        mode=mode, point=tuple(point_Us), Ua_point=point_Ua, order_parameters_leading=theory.order_parameters,
        Ua_leading=theory.Ua, order_parameter_sds=tuple(sd_Us), Ua_sd=sd_Ua,
        U_covariance=_covariance_tensor(res.covariance[:n1, :n1], net.D),
        seconds=mode.report.seconds + res.seconds, problems=tuple(problems))
    return dataclasses.replace(theory, order_parameters=tuple(mean_Us), Ua=mean_Ua, correction=correction)
