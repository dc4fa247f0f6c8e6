"""Theory against sampling (docs/theory.md §5), with Monte-Carlo error bars.

Compared quantities:

- the order parameter ``U``: theory ``U_1`` against the posterior mean of
  ``w_pi · w_pi' / N1``, entry by entry with ArviZ MCSE, and the relative
  Frobenius distance ``||U_s − U_t||_F / ||U_t||_F`` with its MC error; the same
  distance for every deeper level ``U_2 .. U_L`` and for ``Ua`` (docs/theory.md §4, §7);
- predictor statistics on a test set: theory mean/variance against the mean
  and variance of the ``f_test`` draws (MCSE from ArviZ);
- test accuracy of ``sign(mean)``: theory, sampled, GP limit.

A difference counts as a disagreement only when it is larger than the
relative tolerance *and* more than ``n_sigma`` Monte-Carlo standard errors.
The verdict has three values: ``"agree"``, ``"disagree"``, and
``"inconclusive"`` when the sampler's own diagnostics fail (:func:`bayes_attn.diagnostics.diagnostic_failures`:
per group of entries, the observables' and the checks' own per-draw statistics, R-hat above
:func:`~bayes_attn.diagnostics.rhat_bound` or ESS below :func:`~bayes_attn.diagnostics.required_ess`; any
divergence, BFMI below :data:`~bayes_attn.diagnostics.MIN_BFMI`, an importance-sampling Pareto ``k̂`` above
:data:`~bayes_attn.diagnostics.MAX_KHAT`):
Monte-Carlo error bars of unconverged chains mean nothing, so neither "agree"
nor "disagree" is said.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np
import xarray as xr

from . import verdict
from ._internal import checks as _checks
from ._internal import io as _io
from ._internal.fingerprints import data_fingerprint, fingerprint
from .diagnostics import CHECKS_GROUP, convergence_failures, diagnostic_failures, group_diagnostics
from .posterior import Posterior
from .stats import accuracy
from .theory import Theory, gp_limit
from .theory._correction import CORRECTIONS, THEORY_NAMES  # the theories a comparison can headline (§8, §4)

__all__ = ["Check", "Comparison", "TEMPERATURE_RTOL", "checks_unconverged", "compare", "headline_of", "precision_unmet",
           "theories_line"]


def headline_of(wanted: str, theory: Theory) -> str:
    """The headline ``wanted`` (``"laplace"`` or ``"none"``), or ``"none"`` when ``theory`` carries no
    correction (``solve_theory`` skips it where the leading order is not a solution)."""
    return _checks.choice("headline", wanted, CORRECTIONS) if theory.correction is not None else "none"


TEMPERATURE_RTOL = 1e-6
"""Theory and posterior are at one temperature when they differ by at most this fraction, whatever its scale (no
absolute tolerance: 1e-9 and 5e-9 differ); float32 rounding of a temperature stays well inside it."""


@dataclass(frozen=True)
class Check:
    """One compared scalar, a relative error ``value = ||s − t|| / ||t||``.

    ``mcse``: Monte-Carlo standard error of ``value`` when the gap dominates
    (ArviZ MCSE of the per-draw projection on the gap's direction, so it
    accounts for correlations between entries and between draws);
    ``noise_floor``: ``sqrt(sum of squared MCSEs) / ||t||``, the value expected
    from MC error alone; ``noise_sd``: the spread of that pure-noise value
    (``sqrt(2 tr Σ²) / (2 ||t|| noise_floor)`` with ``Σ`` the MC error
    covariance of the posterior means, built from the draws' correlations).
    """

    name: str
    value: float
    mcse: float
    noise_floor: float
    noise_sd: float
    tolerance: float
    n_sigma: float

    @property
    def mc_bound(self) -> float:
        """What Monte-Carlo error alone could make of the value: ``noise_floor + n_sigma max(mcse, noise_sd)``."""
        return self.noise_floor + self.n_sigma * max(self.mcse, self.noise_sd)

    @property
    def passed(self) -> bool:
        """Within tolerance, or not distinguishable from MC noise (at most :attr:`mc_bound`)."""
        return bool(self.value <= self.tolerance or self.value <= self.mc_bound)

    @property
    def gap(self) -> float:
        """Estimate of the relative error without MC noise: ``sqrt(value² − floor²)``."""
        return math.sqrt(max(self.value**2 - self.noise_floor**2, 0.0))


def _relative_distance(draws: np.ndarray, theory: np.ndarray, mcse: np.ndarray,
                       statistics: dict | None = None, name: str = "") -> tuple[float, float, float, float]:
    """Relative distance of the posterior mean of ``draws`` (``[chain, draw, k]``) from ``theory`` (``[k]``).

    Returns ``(value, mcse, noise_floor, noise_sd)`` as defined in :class:`Check`;
    ``mcse`` (``[k]``) are the ArviZ MCSEs of the means. The per-draw statistic the check decides with (the draws'
    projection on the gap's direction, ``[chain, draw]``) goes into ``statistics[name]`` when given.
    """
    import arviz_stats as azs

    norm_t = float(np.linalg.norm(theory))
    diff = draws.mean(axis=(0, 1)) - theory
    dist = float(np.linalg.norm(diff))
    direction = diff / max(dist, 1e-300)
    q = xr.Dataset({"q": (("chain", "draw"), (draws - theory) @ direction)})
    se = float(azs.mcse(q)["q"])
    if statistics is not None:
        statistics[name] = q["q"].values
    flat = draws.reshape(-1, draws.shape[-1])
    sd = flat.std(axis=0)
    corr = np.corrcoef(flat[:, sd > 0].T) if np.count_nonzero(sd > 0) > 1 else np.ones((1, 1))
    m = mcse[sd > 0]
    sigma = np.atleast_2d(corr) * np.outer(m, m)
    floor = float(np.sqrt(np.sum(mcse**2)))
    noise_sd = float(np.sqrt(2 * np.sum(sigma**2)) / (2 * max(floor, 1e-300)))
    return dist / norm_t, se / norm_t, floor / norm_t, noise_sd / norm_t


def _deeper_order_parameter_checks(theory: Theory, tree, rtol: float, n_sigma: float,
                                   statistics: dict) -> list[Check]:
    """Relative distances of ``U_2 .. U_L`` (Frobenius) and ``Ua`` from the theory, where the draws hold them."""
    import arviz_stats as azs

    post = tree["posterior"]
    targets = {f"U_{l}": theory.order_parameters[l - 1] for l in range(2, theory.net.L + 1)}
    targets["Ua"] = np.asarray(theory.Ua)
    checks = []
    for name, target in targets.items():
        if name not in post:
            continue
        draws = post[name].values
        draws = draws.reshape(*draws.shape[:2], -1)
        se = np.atleast_1d(np.asarray(azs.mcse(tree, var_names=[name])[name].values)).ravel()
        label = f"{name} (relative Frobenius)" if name != "Ua" else "Ua (relative)"
        checks.append(Check(label, *_relative_distance(draws, target.ravel(), se, statistics, label), rtol, n_sigma))
    return checks


def theories_line(theories: Iterable[tuple[str, str, Check]]) -> str:
    """The headline line of a comparison: per theory (its correction, its verdict, its ``U`` check)
    ``corrected (Laplace, §8): AGREE (U gap 0.24 % ± 0.3 %)``, joined by ``;``."""
    return "; ".join(f"{THEORY_NAMES[corr]}: {verdict.upper()} (U gap {100 * u.gap:.2g} % ± {100 * u.mcse:.1g} %)"
                     for corr, verdict, u in theories)


@dataclass(frozen=True, eq=False)
class Comparison:
    """Result of :func:`compare`. Arrays are numpy; paths follow ``net.path_labels``."""

    path_labels: list[str]
    width: int
    U_theory: np.ndarray
    U_sampled: np.ndarray
    U_mcse: np.ndarray
    mean_theory: np.ndarray
    mean_sampled: np.ndarray
    mean_mcse: np.ndarray
    var_theory: np.ndarray
    var_sampled: np.ndarray
    var_mcse: np.ndarray
    y_test: np.ndarray
    accuracy: dict[str, float]
    sampler: str = ""
    checks: list[Check] = field(default_factory=list)
    diagnostics: dict[str, float] = field(default_factory=dict)
    provenance: dict[str, str | float] = field(default_factory=dict)
    correction: str = "none"
    alternative: Comparison | None = None
    U_sd_theory: np.ndarray | None = None
    U_sd_sampled: np.ndarray | None = None
    theory_problems: list[str] = field(default_factory=list)
    theory_warnings: list[str] = field(default_factory=list)

    @property
    def theories(self) -> dict[str, Comparison]:
        """This comparison and its :attr:`alternative` by correction (``"laplace"``, ``"none"``), headline first."""
        alternative = {} if self.alternative is None else {self.alternative.correction: self.alternative}
        return {self.correction: self} | alternative

    @property
    def U_zscores(self) -> np.ndarray:
        """``(U_s − U_t) / MCSE`` per entry."""
        return (self.U_sampled - self.U_theory) / self.U_mcse

    @property
    def agree(self) -> bool:
        """Every check passed (regardless of the sampler's diagnostics; see :attr:`verdict`)."""
        return all(c.passed for c in self.checks)

    @property
    def sampler_failures(self) -> list[str]:
        """Failed sampler diagnostics (see :func:`diagnostic_failures`)."""
        return diagnostic_failures(self.diagnostics)

    @property
    def inconclusive_reasons(self) -> list[str]:
        """:attr:`outcome`'s reasons: :attr:`sampler_failures` and a theory that is not a solution
        (:attr:`theory_problems`: not converged, or not a minimum)."""
        return list(self.outcome.reasons)

    @property
    def outcome(self) -> verdict.Verdict:
        """The verdict with its reasons (:func:`bayes_attn.verdict.of_comparison`): inconclusive when a sampler
        diagnostic failed or the theory is not a solution, else agree or disagree. :attr:`theory_warnings` (an
        unreliable correction) stand beside it."""
        return verdict.of_comparison(self.agree, self.sampler_failures, self.theory_problems)

    @property
    def verdict(self) -> str:
        """:attr:`outcome`'s value: ``"agree"``, ``"disagree"`` or ``"inconclusive"``."""
        return self.outcome.value

    @property
    def mean_correlation(self) -> float:
        return float(np.corrcoef(self.mean_theory, self.mean_sampled)[0, 1])

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def theories_summary(self) -> str:
        """One line per theory: ``leading order: DISAGREE (U gap 9 % ± 0.1 %); corrected: AGREE (...)``."""
        return theories_line((corr, c.verdict, c.checks[0]) for corr, c in self.theories.items())

    def save(self, path) -> Path:
        """Write :meth:`to_dataset` to netCDF atomically."""
        return _io.save(self.to_dataset(), path)

    def to_dataset(self) -> xr.Dataset:
        """All compared quantities with named dimensions."""
        pp = ("path", "path_")
        ds = xr.Dataset(
            {
                "U_theory": (pp, self.U_theory),
                "U_sampled": (pp, self.U_sampled),
                "U_mcse": (pp, self.U_mcse),
                "mean_theory": ("test_example", self.mean_theory),
                "mean_sampled": ("test_example", self.mean_sampled),
                "mean_mcse": ("test_example", self.mean_mcse),
                "var_theory": ("test_example", self.var_theory),
                "var_sampled": ("test_example", self.var_sampled),
                "var_mcse": ("test_example", self.var_mcse),
                "y_test": ("test_example", self.y_test),
                "accuracy": ("predictor", list(self.accuracy.values())),
                "check_value": ("check", [c.value for c in self.checks]),
                "check_mcse": ("check", [c.mcse for c in self.checks]),
                "check_noise_floor": ("check", [c.noise_floor for c in self.checks]),
                "check_noise_sd": ("check", [c.noise_sd for c in self.checks]),
                "check_gap": ("check", [c.gap for c in self.checks]),
                "check_tolerance": ("check", [c.tolerance for c in self.checks]),
                "check_n_sigma": ("check", [c.n_sigma for c in self.checks]),
                "check_passed": ("check", [c.passed for c in self.checks]),
            },
            coords={
                "path": self.path_labels,
                "path_": self.path_labels,
                "predictor": list(self.accuracy),
                "check": [c.name for c in self.checks],
            },
            attrs={"width": self.width, "verdict": self.verdict, "verdict_record": self.outcome.to_json(),
                   "correction": self.correction,
                   "agree": int(self.agree), "sampler": self.sampler,
                   "inconclusive_reasons": "; ".join(self.inconclusive_reasons),
                   "theory_warnings": "; ".join(self.theory_warnings), **self.diagnostics,
                   **self.provenance},
        )
        if self.U_sd_theory is not None:
            ds["U_sd_theory"] = (pp, self.U_sd_theory)
        if self.U_sd_sampled is not None:
            ds["U_sd_sampled"] = (pp, self.U_sd_sampled)
        alt = self.alternative
        if alt is not None and [c.name for c in alt.checks] == [c.name for c in self.checks]:
            ds.attrs["alternative_correction"] = alt.correction
            ds.attrs["alternative_verdict"] = alt.verdict
            ds.attrs["alternative_verdict_record"] = alt.outcome.to_json()
            ds["alternative_U_theory"] = (pp, alt.U_theory)
            for key in ("value", "mcse", "noise_floor", "gap", "passed"):
                ds[f"alternative_check_{key}"] = ("check", [getattr(c, key) for c in alt.checks])
        return ds


def checks_unconverged(comparison: Comparison) -> list[str]:
    """The rule's R-hat and ESS reasons on the per-draw statistics of the checks of ``comparison`` and of its
    alternative theory (:data:`~bayes_attn.diagnostics.CHECKS_GROUP`), each once: what a sampler in blocks draws
    on for, beside its observables' own (:func:`bayes_attn.experiment.evaluate`)."""
    comps = [comparison] + ([comparison.alternative] if comparison.alternative is not None else [])
    return list(dict.fromkeys(r for c in comps for r in convergence_failures(c.diagnostics, [CHECKS_GROUP])))


def precision_unmet(comparison: Comparison, fraction: float) -> list[str]:
    """The checks of ``comparison`` (and of its alternative theory) whose Monte-Carlo bound exceeds ``fraction``
    of their tolerance: where MC error alone could still pass a gap that large, so "agree" would be easier than
    the tolerance says (``SamplerSettings.target_precision``, :mod:`bayes_attn.samplers._blocks`)."""
    comps = [comparison] + ([comparison.alternative] if comparison.alternative is not None else [])
    worst: dict[str, Check] = {}
    for c in (c for comp in comps for c in comp.checks):  # each check once, at its larger bound of the theories
        if c.name not in worst or c.mc_bound > worst[c.name].mc_bound:
            worst[c.name] = c
    return [f"{c.name}: Monte-Carlo bound {c.mc_bound:.3g} > {fraction:g} × tolerance {c.tolerance:g}"
            for c in worst.values() if not c.mc_bound <= fraction * c.tolerance]


def compare(
    theory: Theory,
    posterior: Posterior,
    x_test,
    y_test,
    *,
    rtol: float = 0.05,
    n_sigma: float = 3.0,
    gp: Theory | None = None,
    headline: str | None = None,
) -> Comparison:
    """Compare a theory with posterior draws of the same network and data.

    A theory solved with ``correction="laplace"`` is compared twice: as
    corrected (docs/theory.md §8) and at leading order (§4, :meth:`~bayes_attn.theory.Theory.leading_order`);
    the result is the ``headline`` one, the other in its ``alternative``.

    Args:
        theory: from :func:`bayes_attn.solve_theory`.
        posterior: from :func:`bayes_attn.sample_posterior`, sampled with ``x_test``.
        x_test: ``[P_test, T, N0]``, the inputs of ``f_test``; y_test: labels ``[P_test]``,
            ±1 (the comparison reports classification accuracies).
        rtol: relative tolerance of each check (5% by default), in (0, 1) (:data:`~bayes_attn.verdict.RTOL_RANGE`).
        n_sigma: MC standard errors beyond the noise floor that make a difference significant, in [1, 10]
            (:data:`~bayes_attn.verdict.N_SIGMA_RANGE`).
        gp: the GP limit of the same problem (:func:`~bayes_attn.gp_limit`; computed if not given; refused if
            of another network, training set or temperature).
        headline: ``"laplace"`` or ``"none"``, the theory whose verdict is the
            result's (default: ``theory.correction_name``); ``"laplace"`` needs a corrected theory.
    """
    for name, value, cls, source in (("theory", theory, Theory, "solve_theory"),
                                     ("posterior", posterior, Posterior, "sample_posterior")):
        if not isinstance(value, cls):
            raise ValueError(f"{name} must be a {cls.__name__} (from {source}), got {type(value).__name__}: the "
                             "arguments are compare(theory, posterior, x_test, y_test)")
    net = theory.net
    x_test = net.check_inputs(x_test, "x_test")
    y_test = _checks.signs("y_test", y_test, x_test.shape[0])
    rtol, n_sigma = verdict.check_tolerances(rtol, n_sigma)
    headline = _checks.choice("headline", theory.correction_name if headline is None else headline, CORRECTIONS)
    if headline == "laplace" and theory.correction is None:
        raise ValueError('headline="laplace" needs a theory solved with correction="laplace"')
    _same_problem(theory, "posterior", posterior)
    if gp is not None:
        if not isinstance(gp, Theory) or gp.limit != "gp":
            raise ValueError(f"gp must be the GP limit of the same problem (from gp_limit), got "
                             f"{type(gp).__name__}" + (f" of limit {gp.limit!r}" if isinstance(gp, Theory) else ""))
        _same_problem(theory, "gp", gp)
    if "f_test" not in posterior.tree["posterior"]:
        raise ValueError("posterior has no f_test: sample it with x_test")
    tree = posterior.tree
    if tree["posterior"].sizes["test_example"] != x_test.shape[0]:
        raise ValueError(
            f"x_test must be the {tree['posterior'].sizes['test_example']} inputs the posterior was sampled with, "
            f"got {x_test.shape[0]}"
        )
    stored = tree.attrs.get("x_test_fingerprint")
    if stored is not None and stored != fingerprint(x_test):
        raise ValueError("x_test differs from the test inputs the posterior was sampled with")
    stored = tree.attrs.get("test_fingerprint")
    if stored is not None and stored != data_fingerprint(x_test, y_test):
        raise ValueError("y_test differs from the test labels the posterior was sampled with")

    gp = gp or gp_limit(net, theory.x_train, theory.y_train, temperature=theory.temperature)
    if theory.correction is None:
        return _compare_one(theory, posterior, x_test, y_test, rtol, n_sigma, gp)
    both = {"laplace": _compare_one(theory, posterior, x_test, y_test, rtol, n_sigma, gp),
            "none": _compare_one(theory.leading_order(), posterior, x_test, y_test, rtol, n_sigma, gp)}
    sd = both["laplace"].U_sd_theory
    main, alt = both[headline], both["none" if headline == "laplace" else "laplace"]
    return dataclasses.replace(main, alternative=alt, U_sd_theory=sd)


def _same_problem(theory: Theory, name: str, other: Posterior | Theory) -> None:
    """Refuse ``other`` (the ``posterior``, or the ``gp`` limit) of another network, training set or temperature
    than ``theory``'s (one-line ``ValueError``)."""
    net, o = theory.net, other.net
    same_net = (net.widths, net.variances, net.readout, net.heads) == (o.widths, o.variances, o.readout, o.heads)
    if not same_net or not all(np.array_equal(a, b) for a, b in zip(net.attention, o.attention, strict=True)):
        raise ValueError(f"theory and {name} must be of the same network (widths, variances, readout, attention)")
    if not (np.array_equal(theory.x_train, other.x_train) and np.array_equal(theory.y_train, other.y_train)):
        raise ValueError(f"theory and {name} must be of the same training data")
    if not np.isclose(theory.temperature, other.temperature, rtol=TEMPERATURE_RTOL, atol=0.0):
        raise ValueError(f"temperature differs: theory {theory.temperature}, {name} {other.temperature} "
                         f"(relative tolerance {TEMPERATURE_RTOL:g}, at any scale)")


def _compare_one(theory: Theory, posterior: Posterior, x_test: np.ndarray, y_test: np.ndarray, rtol: float,
                 n_sigma: float, gp: Theory) -> Comparison:
    """:func:`compare` for one theory, inputs already checked."""
    import arviz_stats as azs

    net = theory.net
    tree = posterior.tree
    m_t, v_t = theory.predict(x_test)
    m_gp, _ = gp.predict(x_test)

    f = cast(xr.DataArray, tree["posterior"]["f_test"])  # xarray types a group's item as DataArray | DataTree
    mcse_mean = azs.mcse(tree, var_names=["f_test", "U"])
    mcse_sd = azs.mcse(tree, var_names=["f_test"], method="sd")
    m_s = f.mean(("chain", "draw")).values
    sd_s = f.std(("chain", "draw")).values
    U_s = posterior.order_parameter()
    U_se = np.asarray(mcse_mean["U"].values)
    m_se = np.asarray(mcse_mean["f_test"].values)
    v_se = 2 * sd_s * np.asarray(mcse_sd["f_test"].values)

    D = net.D
    U_draws = cast(xr.DataArray, tree["posterior"]["U"]).values.reshape(*f.shape[:2], D * D)
    f_draws = f.values
    n = f_draws.shape[0] * f_draws.shape[1]
    var_draws = (f_draws - m_s) ** 2 * (n / (n - 1))  # its mean is the unbiased sample variance
    stat: dict[str, np.ndarray] = {}
    names = ("U (relative Frobenius)", "predictor mean (relative L2)", "predictor variance (relative L2)")
    checks = [
        Check(names[0], *_relative_distance(U_draws, theory.U.ravel(), U_se.ravel(), stat, names[0]), rtol, n_sigma),
        *_deeper_order_parameter_checks(theory, tree, rtol, n_sigma, stat),
        Check(names[1], *_relative_distance(f_draws, m_t, m_se, stat, names[1]), rtol, n_sigma),
        Check(names[2], *_relative_distance(var_draws, v_t, v_se, stat, names[2]), rtol, n_sigma),
    ]
    summary = posterior.summary()
    statistics = azs.summary(xr.Dataset({"q": (("chain", "draw", "check"), np.stack(list(stat.values()), -1))},
                                        coords={"check": list(stat)}), kind="diagnostics", round_to="none")
    accuracies = {"theory": accuracy(m_t, y_test), "sampled": accuracy(m_s, y_test), "gp": accuracy(m_gp, y_test)}
    return Comparison(
        path_labels=net.path_labels,
        width=int(net.widths[0]),
        U_theory=theory.U,
        U_sampled=U_s,
        U_mcse=U_se,
        mean_theory=m_t,
        mean_sampled=m_s,
        mean_mcse=m_se,
        var_theory=v_t,
        var_sampled=var_draws.mean(axis=(0, 1)),
        var_mcse=v_se,
        y_test=y_test,
        accuracy=accuracies,
        sampler=str(tree.attrs.get("sampler", "")),
        checks=checks,
        diagnostics=summary.diagnostics() | {"draws": float(posterior.num_draws)}
        | (group_diagnostics(statistics, summary.chains, summary.draws, CHECKS_GROUP) if summary.chains else {}),
        provenance={"sampler_settings": str(tree.attrs.get("settings", "{}")), "method": posterior.method(),
                    "temperature": theory.temperature,
                    "x_test_fingerprint": fingerprint(x_test),
                    "test_fingerprint": data_fingerprint(x_test, y_test),
                    "train_fingerprint": data_fingerprint(theory.x_train, theory.y_train)},
        correction=theory.correction_name,
        U_sd_theory=None if theory.correction is None else np.asarray(theory.correction.U_sd),
        U_sd_sampled=np.asarray(tree["posterior"]["U"].std(("chain", "draw")).values),
        theory_problems=theory.problems,
        theory_warnings=theory.correction_problems,
    )
