"""One experiment point: a frozen config, one function that evaluates it, a frozen result with its verdict.

A :class:`Point` is a network at one width, its data, a temperature and the settings of each step: the theory
(docs/theory.md §4, corrected to next order in ``1/N`` by §8 unless ``correction="none"``), the sampler (§5, §7,
§9) and the comparison. Every job is made of points:

- ``run`` evaluates one point and writes its files; ``theory`` solves one (:func:`solve`);
- a sweep job evaluates one point per ``(width, temperature)``;
- ``prune`` evaluates one point per sampled width, with the theory its validation scan solved (never solved again).

:func:`check` refuses before anything is computed what :func:`evaluate` would refuse; :func:`solve` is the theory
half (theory and GP limit); :func:`scan` the theory half over widths × temperatures (each sweep theory job is one
cell of it, prune's validation scan the whole grid); :func:`evaluate` the whole point. The verdict is the comparison's
(:attr:`PointResult.outcome`, :mod:`bayes_attn.verdict`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ._internal import checks as _checks
from .kernels import Basis
from .network import Network
from .samplers import SamplerSettings
from .theory import Theory, gp_limit, kernel_basis, solve_theory
from .theory._corrected import check_correction_fits
from .theory._correction import CORRECTIONS
from .verdict import check_tolerances

if TYPE_CHECKING:  # imported where used: a theory-only point needs neither sampling nor the comparison
    from .comparison import Comparison
    from .posterior import Posterior
    from .verdict import Verdict

__all__ = ["Point", "PointResult", "Scanned", "Solved", "check", "evaluate", "gp_of", "sample", "scan", "solve"]


@dataclass(frozen=True, eq=False)
class Point:
    """One experiment point.

    net: the network at the point's width; x ``[P, T, N0]``, y ``[P]``: the training data; x_test
    ``[P_test, T, N0]``, y_test ``[P_test]`` (±1): the test data the predictor is compared and scored on;
    temperature: the likelihood variance (> 0); correction: ``"laplace"`` (§8, the leading order beside it)
    or ``"none"``; sampler: the sampler's settings (``None``: a theory-only point, which :func:`evaluate`
    refuses); rtol, n_sigma: the comparison's tolerances (:func:`bayes_attn.compare`); headline: the theory
    (``"laplace"`` or ``"none"``) whose verdict is the point's; progress_bar: the sampler's.
    """

    net: Network
    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    temperature: float
    correction: str = "laplace"
    sampler: SamplerSettings | None = None
    rtol: float = 0.05
    n_sigma: float = 3.0
    headline: str = "laplace"
    progress_bar: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.net, Network):
            raise ValueError(f"net must be a Network, got {type(self.net).__name__}")
        _checks.choice("correction", self.correction, CORRECTIONS)
        _checks.choice("headline", self.headline, CORRECTIONS)
        check_tolerances(self.rtol, self.n_sigma)
        if self.sampler is not None and not isinstance(self.sampler, SamplerSettings):
            raise ValueError(f"sampler must be a SamplerSettings or None, got {type(self.sampler).__name__}")


@dataclass(frozen=True, eq=False)
class Solved:
    """The theory half of a point: ``theory`` (corrected where ``correction="laplace"`` and the leading order is a
    solution) and its GP limit ``gp`` (``None`` where not asked for)."""

    theory: Theory
    gp: Theory | None


@dataclass(frozen=True, eq=False)
class PointResult:
    """A point evaluated: its theory and GP limit, the posterior, the comparison, the sampler's wall time (s)."""

    point: Point
    theory: Theory
    gp: Theory
    posterior: Posterior
    comparison: Comparison
    sampling_seconds: float

    @property
    def outcome(self) -> Verdict:
        """The point's verdict (the comparison's, :mod:`bayes_attn.verdict`)."""
        return self.comparison.outcome


def check(point: Point, *, memory_check: bool = True) -> SamplerSettings | None:
    """Refuse (one-line ``ValueError``) what :func:`evaluate` would refuse, computing nothing: inputs too large
    for the temperature (:meth:`~bayes_attn.Network.check_scale`), the sampler's arguments
    (:func:`bayes_attn.posterior.check_sampling`) and, unless ``memory_check`` is false (the point runs on another
    machine), a sampler or a correction too big for this machine's memory. Returns the sampler's settings."""
    point.net.check_scale(point.net.check_inputs(point.x), point.temperature)  # inputs too large for the temperature
    if point.correction == "laplace" and memory_check:
        check_correction_fits(point.net, len(point.y))
    if point.sampler is None:
        return None
    from .posterior import check_sampling

    return check_sampling(point.net, point.x, point.y, temperature=point.temperature, x_test=point.x_test,
                          sampler=point.sampler, memory_check=memory_check)


def solve(point: Point, *, gp: bool = True, basis: Basis | None = None,
          init: str | Sequence[np.ndarray] = "gp") -> Solved:
    """The theory of ``point`` (docs/theory.md §4, with §8 where ``point.correction="laplace"``) and, unless
    ``gp`` is false, its GP limit; ``basis``: the point's :func:`~bayes_attn.theory.kernel_basis`, when computed
    before (computed here otherwise); ``init``: where the minimisation starts (:func:`~bayes_attn.solve_theory`)."""
    basis = kernel_basis(point.net, point.x) if basis is None else basis
    theory = solve_theory(point.net, point.x, point.y, temperature=point.temperature, correction=point.correction,
                          basis=basis, init=init)
    limit = gp_of(point, basis=basis) if gp else None
    return Solved(theory, limit)


@dataclass(frozen=True, eq=False)
class Scanned:
    """Result of :func:`scan`: ``theories[(width, temperature)]`` and the GP limit ``gps[temperature]``
    (empty where not asked for)."""

    theories: dict[tuple[int, float], Theory]
    gps: dict[float, Theory]


def scan(point: Point, widths: Sequence[int], temperatures: Sequence[float], *, gp: bool = True,
         on_solved: Callable[[Theory], None] | None = None) -> Scanned:
    """The theory half of ``point`` at every width × temperature, and (unless ``gp`` is false) its GP limit at each
    temperature (which no width changes: docs/theory.md §4).

    ``point`` gives the network (at any width), the data and the correction; its own width and temperature are
    not used. Per width the temperatures are solved from the highest down, each started from the previous
    solution where that converged to a minimum (else from the GP values); one kernel basis serves every cell.
    ``on_solved``: called with each theory as it is solved (progress).
    """
    temps = sorted((float(t) for t in temperatures), reverse=True)
    basis = kernel_basis(point.net, point.x) if widths or gp else None
    theories: dict[tuple[int, float], Theory] = {}
    for N in widths:
        init: str | list[np.ndarray] = "gp"
        for temp in temps:
            cell = dataclasses.replace(point, net=point.net.with_width(N), temperature=temp)
            t = solve(cell, gp=False, basis=basis, init=init).theory
            leading = t.leading_order()  # where the correction starts from: the minimum of S
            init = list(leading.order_parameters) if leading.converged and leading.is_minimum else init
            theories[(int(N), temp)] = t
            if on_solved is not None:
                on_solved(t)
    gps = {temp: gp_of(dataclasses.replace(point, temperature=temp), basis=basis) for temp in temps} if gp else {}
    return Scanned(theories, gps)


def evaluate(point: Point, *, theory: Theory | None = None) -> PointResult:
    """Theory, GP limit, posterior and comparison at ``point``.

    ``theory``: the point's theory when it was solved before (``prune``'s scan), used as it is; else
    :func:`solve`. Raises ``ValueError`` for a theory-only point (``sampler=None``) or a ``theory`` of
    another width or temperature.
    """
    if point.sampler is None:
        raise ValueError("evaluate needs a point with sampler settings (sampler=None is a theory-only point: solve)")
    if theory is None:
        solved = solve(point)
        theory, limit = solved.theory, solved.gp
    else:
        _check_theory(point, theory)
        limit = gp_of(point)
    assert limit is not None
    from .comparison import checks_unconverged, compare, headline_of, precision_unmet

    def comparison(post: Posterior) -> Comparison:
        return compare(theory, post, point.x_test, point.y_test, rtol=point.rtol, n_sigma=point.n_sigma, gp=limit,
                       headline=headline_of(point.headline, theory))

    fraction = point.sampler.target_precision
    t0 = time.perf_counter()
    def unmet(post: Posterior) -> list[str]:  # the checks' own statistics converged, and the precision asked for
        c = comparison(post)
        return checks_unconverged(c) + ([] if fraction is None else precision_unmet(c, fraction))

    post = sample(point, until=unmet if point.sampler.in_blocks else None)
    seconds = time.perf_counter() - t0
    return PointResult(point, theory, limit, post, comparison(post), seconds)


def gp_of(point: Point, *, basis: Basis | None = None) -> Theory:
    """The GP limit of ``point`` (docs/theory.md §4: every order parameter at its GP value)."""
    return gp_limit(point.net, point.x, point.y, temperature=point.temperature, basis=basis)


def sample(point: Point, until: Callable[[Posterior], list[str]] | None = None) -> Posterior:
    """The posterior at ``point`` (:func:`bayes_attn.sample_posterior` with the point's sampler settings; ``until``:
    its further reasons to draw another block, e.g. the comparison's precision in :func:`evaluate`)."""
    if point.sampler is None:
        raise ValueError("sampling needs a point with sampler settings (sampler=None is a theory-only point)")
    from .posterior import sample_posterior

    return sample_posterior(point.net, point.x, point.y, temperature=point.temperature, x_test=point.x_test,
                            y_test=None if point.x_test is None else point.y_test, progress_bar=point.progress_bar,
                            sampler=point.sampler, until=until)


def _check_theory(point: Point, theory: Theory) -> None:
    """A theory given to :func:`evaluate` is of the point's network width, temperature and training set size."""
    if not isinstance(theory, Theory):
        raise ValueError(f"theory must be a Theory (from solve_theory), got {type(theory).__name__}")
    same = (tuple(theory.net.widths) == tuple(point.net.widths) and theory.temperature == point.temperature
            and len(theory.y_train) == len(point.y))
    if not same:
        raise ValueError(f"theory is of widths {list(theory.net.widths)}, temperature {theory.temperature:g} and "
                         f"P = {len(theory.y_train)}; the point's are {list(point.net.widths)}, "
                         f"{point.temperature:g} and {len(point.y)}")
