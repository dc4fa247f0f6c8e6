"""Theory scan and sampling on the frozen attention of the one-shot model (docs/theory.md §4, §5, §6).

:func:`temperature_scan` solves the theory at every width × temperature and
evaluates the GP limit per temperature; the temperature of each width (and,
separately, of the GP limit) is the grid value of best accuracy on
*validation* episodes, and the test accuracy is reported at that choice.
:func:`sample_at_widths` evaluates one experiment point (theory, posterior, comparison) at each sampled width
and its chosen temperature, with the scan's theory.

Predictions use :func:`predictor_mean`, the theory's predictor mean of §4
written through the path inputs ``xi`` ``[P, D, N0]`` (computed once per
episode set; :func:`bayes_attn.gp.mean_from_xi`): ``mean(x*) = k*ᵀ G⁻¹ Y =
Σ_π xi_π(x*) · v_π`` with ``v = s0² / (N0 D) · Σ_ν α_ν U xi(x_ν)``,
``α = G⁻¹ Y``, ``G = K(U) + temperature·I``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
import xarray as xr

from .. import experiment, gp, stats
from .._internal import checks as _checks
from .._internal.precision import float64
from ..diagnostics import group_diagnostics
from ..experiment import PointResult, evaluate
from ..network import Network
from ..theory import Theory, laplace_correction
from ._spec import OneShotSpec

log = logging.getLogger(__name__)

__all__ = ["Sampled", "Scan", "corrected", "path_inputs", "predictor_mean", "sample_at_widths", "temperature_scan"]


def path_inputs(net: Network, x) -> np.ndarray:
    """``xi_pi(x)`` of every path (docs/theory.md §2), float64 NumPy ``[P, D, N0]``."""
    with float64():
        return np.asarray(net.xi(net.check_inputs(x)))


def predictor_mean(U, temperature: float, xi_train, y_train, xi, *, s0sq: float = 1.0) -> np.ndarray:
    """Predictor mean ``k*ᵀ G⁻¹ Y`` (docs/theory.md §4) at path inputs ``xi`` ``[P*, D, N0]``: ``[P*]``.

    ``U`` ``[D, D]``; ``xi_train`` ``[P, D, N0]``, ``y_train`` ``[P]``;
    ``G = K(U) + temperature·I``; ``s0sq``: the prior variance of ``V0``.
    Equals ``Theory.predict(x*)[0]`` for the theory's ``U``.
    """
    xi_train = _checks.array("xi_train", xi_train, ndim=3)
    P, D, N0 = xi_train.shape
    xi = _checks.array("xi", xi, shape=(None, D, N0))
    U = _checks.array("U", U, shape=(D, D))
    y = _checks.labels("y_train", y_train, P)
    temperature = _checks.positive("temperature", temperature)
    with float64():
        return np.asarray(gp.mean_from_xi(*(jnp.asarray(a, jnp.float64) for a in (U, xi_train, xi, y)),
                                          temperature, s0sq))


class Scan(NamedTuple):
    """Result of :func:`temperature_scan`.

    dataset: ``accuracy_validation`` / ``accuracy_test`` ``[width, temperature]``,
    ``gp_accuracy_validation`` / ``gp_accuracy_test`` ``[temperature]``,
    ``U_scan`` ``[width, temperature, path, path_]``, ``converged``,
    ``iterations``, ``solve_seconds``; at the chosen temperatures
    ``best_temperature`` ``[width]``, ``accuracy_theory`` (± ``accuracy_theory_se``)
    ``[width]``, ``gp_best_temperature``, ``accuracy_gp`` (± ``accuracy_gp_se``).
    theories: the solved :class:`Theory` per ``(width, temperature)``.
    """

    dataset: xr.Dataset
    theories: dict[tuple[int, float], Theory]

    def best_temperature(self, width: int) -> float:
        """The validation-chosen temperature of ``width``."""
        return float(self.dataset["best_temperature"].sel(width=width))

    def theory(self, width: int, temperature: float | None = None) -> Theory:
        """The theory at ``width`` and ``temperature`` (default: the chosen one)."""
        temperature = self.best_temperature(width) if temperature is None else float(temperature)
        return self.theories[(int(width), temperature)]


def _checked(spec, net, **episodes) -> tuple:
    """``spec``, ``net`` and the episode sets ``x, y, x_val, y_val, x_test, y_test`` checked, in that order."""
    if not isinstance(spec, OneShotSpec):
        raise ValueError(f"spec must be a OneShotSpec, got {type(spec).__name__}")
    if not isinstance(net, Network):
        raise ValueError(f"net must be a Network, got {type(net).__name__}")
    out = []
    for part in ("", "_val", "_test"):
        x = net.check_inputs(episodes["x" + part], "x" + part)
        out += [x, _checks.signs("y" + part, episodes["y" + part], x.shape[0])]
    return tuple(out)


def temperature_scan(spec: OneShotSpec, net: Network, train: tuple, validation: tuple, test: tuple, *,
                     progress_bar: bool = True) -> Scan:
    """Theory at every ``spec.theory.widths`` × ``temperatures`` and the GP limit per temperature.

    Args:
        net: the frozen network (any width; ``with_width`` gives each ``N``).
        train: ``(x, y)``, the ``P`` training episodes ``[P, T, N0]``, ``[P]`` ±1.
        validation: ``(x, y)``, validation episodes (choose the temperature).
        test: ``(x, y)``, test episodes (reported at the chosen temperature only;
            never used for a choice).

    The grid is :func:`bayes_attn.experiment.scan`'s (per width from the highest
    temperature down, each warm-started from the previous solution). The chosen
    temperature maximises validation accuracy among converged solutions
    (ties: the lowest temperature); the GP limit chooses its own.
    """
    (x, y), (x_val, y_val), (x_test, y_test) = train, validation, test
    x, y, x_val, y_val, x_test, y_test = _checked(spec, net, x=x, y=y, x_val=x_val, y_val=y_val, x_test=x_test,
                                                  y_test=y_test)
    th = spec.theory
    widths, temps = list(th.widths), sorted(th.temperatures)
    xi, xi_val, xi_test = path_inputs(net, x), path_inputs(net, x_val), path_inputs(net, x_test)
    s0 = net.variances[0]

    def accuracies(U: np.ndarray, temp: float) -> tuple[float, float]:  # validation, test
        val, test = (stats.accuracy_se(predictor_mean(U, temp, xi, y, xi_s, s0sq=s0), y_s)[0]
                     for xi_s, y_s in ((xi_val, y_val), (xi_test, y_test)))
        return val, test

    def solved(t: Theory) -> None:
        if progress_bar:
            ok = t.converged and t.is_minimum
            log.info(f"theory N={t.net.widths[0]} T={t.temperature:g}: validation "
                     f"{accuracies(t.U, t.temperature)[0]:.3f}, {t.iterations} Newton steps, {t.solve_seconds:.1f} s"
                     f"{'' if ok else ' (NOT converged)'}")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        point = spec.point(net, (x, y), (x_test, y_test), temps[0], correction="none")
        grid = experiment.scan(point, widths, temps, on_solved=solved)
    cells = [[grid.theories[(N, temp)] for temp in temps] for N in widths]  # widths, temperatures: non-empty

    def over_cells(f: Any, dtype: type) -> np.ndarray:  # [width, temperature, ...]
        return np.array([[f(t) for t in row] for row in cells], dtype)

    converged = over_cells(lambda t: bool(t.converged and t.is_minimum), bool)
    iterations, seconds = over_cells(lambda t: t.iterations, int), over_cells(lambda t: t.solve_seconds, float)
    U_scan = over_cells(lambda t: t.U, float)
    acc_val, acc_test = np.moveaxis(over_cells(lambda t: accuracies(t.U, t.temperature), float), -1, 0)
    gp_val, gp_test = np.array([accuracies(grid.gps[temp].U, temp) for temp in temps], float).T
    nW = len(widths)
    best = np.array([stats.choose_temperature(acc_val[i], converged[i]) for i in range(nW)])
    gp_best = stats.choose_temperature(gp_val)
    n = y_test.size
    at_best = acc_test[np.arange(nW), best]
    ds = xr.Dataset(
        {
            "accuracy_validation": (("width", "temperature"), acc_val),
            "accuracy_test": (("width", "temperature"), acc_test),
            "converged": (("width", "temperature"), converged),
            "iterations": (("width", "temperature"), iterations),
            "solve_seconds": (("width", "temperature"), seconds),
            "U_scan": (("width", "temperature", "path", "path_"), U_scan),
            "gp_accuracy_validation": (("temperature",), gp_val),
            "gp_accuracy_test": (("temperature",), gp_test),
            "best_temperature": (("width",), np.asarray(temps)[best]),
            "accuracy_theory": (("width",), at_best),
            "accuracy_theory_se": (("width",), stats.binomial_se(at_best, n)),
            "accuracy_theory_validation": (("width",), acc_val[np.arange(nW), best]),
            "gp_best_temperature": ((), temps[gp_best]),
            "accuracy_gp": ((), gp_test[gp_best]),
            "accuracy_gp_se": ((), stats.binomial_se(float(gp_test[gp_best]), n)),
            "accuracy_gp_validation": ((), gp_val[gp_best]),
        },
        coords={"width": widths, "temperature": temps, "path": net.path_labels, "path_": net.path_labels},
        attrs={"n_train": int(x.shape[0]), "n_validation": int(x_val.shape[0]), "n_test": int(n),
               "temperature_choice": "argmax of validation accuracy over converged solutions (ties: lowest T)"},
    )
    return Scan(ds, grid.theories)


def corrected(theory: Theory) -> tuple[Theory | None, str]:
    """The corrected theory (docs/theory.md §8) of the leading-order ``theory``, or ``None`` and why not (the
    leading order is not a solution, or the expansion does not fit in memory); an unreliable correction is
    returned with its problems as the reason, not warned."""
    if theory.problems:
        return None, "; ".join(theory.problems)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            c = laplace_correction(theory)
    except ValueError as err:
        return None, str(err)
    return c, "; ".join(c.correction_problems)


class Sampled(NamedTuple):
    """Result of :func:`sample_at_widths`: its ``dataset``, the evaluated points and the problems of their
    corrections (why the leading order headlines there), by width."""

    dataset: xr.Dataset
    points: dict[int, PointResult]
    correction_problems: dict[int, list[str]]


def _point_at(spec: OneShotSpec, x, y, x_test, y_test, leading: Theory, progress_bar: bool) -> tuple[PointResult,
                                                                                                     list[str]]:
    """The point at ``leading``'s width and temperature, evaluated with its correction where it can be made."""
    theory, why = corrected(leading)
    problems = [] if theory is not None else [
        f"the correction was {'skipped' if leading.problems else 'not computed'}: {why}"]
    point = spec.point(leading.net, (x, y), (x_test, y_test), leading.temperature, sampler=spec.sampler,
                       progress_bar=progress_bar)
    return evaluate(point, theory=leading if theory is None else theory), problems


def sample_at_widths(spec: OneShotSpec, net: Network, x, y, x_test, y_test, theories: Mapping[int, Theory], *,
                     progress_bar: bool = True) -> Sampled:
    """Evaluate one experiment point (:func:`bayes_attn.experiment.evaluate`, ``spec.sampler``) at each width of
    ``theories``: by width, the leading-order theory at that width and its chosen temperature (the scan's, never
    solved again), corrected (docs/theory.md §8) where it can be.

    The dataset is over ``sample_width``: ``accuracy_sampled`` (± se) of the
    sign of the posterior mean of ``f_test``, ``agreement`` (fraction of test
    signs equal to the leading-order theory's at the same width and temperature),
    ``U_sampled`` (posterior mean) and ``U_theory`` (leading order) ``[sample_width, path, path_]``,
    ``rhat_U`` (largest R-hat over the entries of ``U``) with ``rhat_bound_U`` (the rule's bound of that many
    entries, chains and draws: :func:`bayes_attn.diagnostics.rhat_bound`), ``ess_U`` and ``ess_tail_U`` (smallest
    bulk and tail ESS over them) with ``ess_required`` (:func:`~bayes_attn.diagnostics.required_ess`),
    ``divergences``,
    ``mean_steps`` (NaN for the guided samplers), ``pareto_k`` (``laplace-is``, else NaN), ``sampler_used``
    (what ``auto`` kept), ``sampling_seconds``.
    """
    x = net.check_inputs(x, "x")
    x_test = net.check_inputs(x_test, "x_test")
    y_test = _checks.signs("y_test", y_test, x_test.shape[0])
    xi, xi_test = path_inputs(net, x), path_inputs(net, x_test)
    rows: list[dict[str, Any]] = []
    points: dict[int, PointResult] = {}
    problems: dict[int, list[str]] = {}
    for N, leading in theories.items():
        temperature = leading.temperature
        res, problems[int(N)] = _point_at(spec, x, y, x_test, y_test, leading, progress_bar)
        points[int(N)] = res
        f = np.asarray(res.posterior.tree["posterior"]["f_test"].mean(("chain", "draw")).values)
        theory_mean = predictor_mean(leading.U, temperature, xi, y, xi_test, s0sq=net.variances[0])
        summary = res.posterior.summary()
        u_rows = summary.table[summary.table.index.str.startswith("U[")]  # the entries of U (ArviZ, as the verdict)
        rule = group_diagnostics(u_rows, summary.chains, summary.draws)
        rows.append({
            "temperature_sampled": temperature,
            "accuracy_sampled": stats.accuracy_se(f, y_test),
            "agreement": float(np.mean(stats.sign(f) == stats.sign(theory_mean))),
            "U_sampled": res.posterior.order_parameter(1),
            "U_theory": leading.U,
            "rhat_U": float(u_rows["r_hat"].max()),
            "ess_U": float(u_rows["ess_bulk"].min()),
            "rhat_bound_U": rule["r_hat_bound[U]"],
            "ess_tail_U": rule["min_ess_tail[U]"],
            "ess_required": rule["ess_required"],
            "divergences": summary.divergences,
            "mean_steps": summary.mean_steps,
            "pareto_k": summary.pareto_k,
            "sampler_used": res.posterior.sampler,
            "sampling_seconds": res.sampling_seconds,
        })
        if progress_bar:
            log.info(f"sampled N={N} T={temperature:g}: accuracy {rows[-1]['accuracy_sampled'][0]:.3f}, "
                     f"agreement with theory {rows[-1]['agreement']:.3f}, {res.sampling_seconds:.0f} s; "
                     f"compared: {res.comparison.theories_summary()}")
    sw = [int(N) for N in theories]
    D, labels = net.D, net.path_labels
    ds = xr.Dataset(
        {
            "temperature_sampled": (("sample_width",), np.array([r["temperature_sampled"] for r in rows], float)),
            "accuracy_sampled": (("sample_width",), np.array([r["accuracy_sampled"][0] for r in rows], float)),
            "accuracy_sampled_se": (("sample_width",), np.array([r["accuracy_sampled"][1] for r in rows], float)),
            "agreement": (("sample_width",), np.array([r["agreement"] for r in rows], float)),
            "U_sampled": (("sample_width", "path", "path_"),
                          np.array([r["U_sampled"] for r in rows]).reshape(-1, D, D)),
            "U_theory": (("sample_width", "path", "path_"), np.array([r["U_theory"] for r in rows]).reshape(-1, D, D)),
            "rhat_U": (("sample_width",), np.array([r["rhat_U"] for r in rows], float)),
            "ess_U": (("sample_width",), np.array([r["ess_U"] for r in rows], float)),
            **{v: (("sample_width",), np.array([r[v] for r in rows], float))
               for v in ("rhat_bound_U", "ess_tail_U", "ess_required")},
            "divergences": (("sample_width",), np.array([r["divergences"] for r in rows], int)),
            "mean_steps": (("sample_width",), np.array([r["mean_steps"] for r in rows], float)),
            "pareto_k": (("sample_width",), np.array([r["pareto_k"] for r in rows], float)),
            "sampler_used": (("sample_width",), np.array([r["sampler_used"] for r in rows], str)),
            "sampling_seconds": (("sample_width",), np.array([r["sampling_seconds"] for r in rows], float)),
        },
        coords={"sample_width": sw, "path": labels, "path_": labels},
        attrs={"sampler": spec.sampler.name, "num_chains": spec.sampler.num_chains,
               "num_samples": spec.sampler.num_samples, "num_warmup": spec.sampler.num_warmup},
    )
    return Sampled(ds, points, problems)
