"""One verdict: what every job concludes, decided here and nowhere else.

A :class:`Verdict` is a value of :data:`VALUES` with its reasons. The comparison of a theory with samples at one
point (:func:`of_comparison`) agrees, disagrees or is inconclusive (a failed sampler diagnostic, or a theory that
is not a solution); a sampler's diagnostics alone (:func:`of_sampling`) pass or make it inconclusive; a theory
alone (:func:`of_theory`) is a solution or inconclusive. :func:`combine` makes the headline of several: the worst
decides, ``agree`` only where every point was compared and agreed. The command's exit status and its warning are
read from the verdict (:attr:`Verdict.exit_status`, :meth:`Verdict.warning`), reports and files store its value.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = ["AGREE", "DIAGNOSTICS_PASSED", "DISAGREE", "EXIT_INCONCLUSIVE", "INCONCLUSIVE", "NOT_COMPARED",
           "NOT_SAMPLED", "N_SIGMA_RANGE", "RTOL_RANGE", "THEORY_ONLY", "VALUES", "Verdict", "check_tolerances",
           "combine", "inconclusive_values", "of_comparison", "of_sampling", "of_theory", "stored"]

AGREE, DISAGREE, INCONCLUSIVE = "agree", "disagree", "inconclusive"
NOT_COMPARED = "not compared"
"""Samples that passed their diagnostics and were compared with no theory: never ``agree``."""
NOT_SAMPLED, THEORY_ONLY = "not sampled", "theory only"
"""A job that sampled nothing (``prune`` without sample widths; a sweep of theory only, every theory a solution)."""
DIAGNOSTICS_PASSED = "diagnostics passed"
"""The sampler's half alone: every diagnostic passed (nothing compared yet)."""
VALUES = (AGREE, DISAGREE, INCONCLUSIVE, NOT_COMPARED, NOT_SAMPLED, THEORY_ONLY, DIAGNOSTICS_PASSED)
COMPARISONS = (AGREE, DISAGREE, INCONCLUSIVE)
"""The values of one comparison of a theory with samples."""

EXIT_INCONCLUSIVE = 3
"""The exit status of a command whose verdict is inconclusive (its results are written); every other value is 0."""

SAMPLE_LONGER = ("sample longer (--warmup, --samples, --chains; or to a target: --target-ess, --max-samples, "
                 "--max-seconds) where the sampler's diagnostics failed")
CHECK_SCALES = "check the spec's scales (labels, variances, temperature) where the theory is not a solution"


RTOL_RANGE = (0.0, 1.0)
"""A comparison's relative tolerance ``rtol`` lies strictly inside this range: at 1 or more a relative error as
large as the theory's own value (a theory of zero) would agree."""
N_SIGMA_RANGE = (1.0, 10.0)
"""Monte-Carlo standard errors beyond the noise floor that make a difference significant (``n_sigma``), within
this range, ends included: below 1 a check fails on noise alone more than one time in six; above 10 a gap that the
draws resolve at 10 standard errors would still agree (3, the default, fails a noise-only check about once in
700)."""


def check_tolerances(rtol, n_sigma, prefix: str = "") -> tuple[float, float]:
    """``rtol`` and ``n_sigma`` as floats, refused (one-line ``ValueError`` naming ``prefix`` + the argument, e.g.
    ``compare.rtol``) outside :data:`RTOL_RANGE` and :data:`N_SIGMA_RANGE`: no tolerance may turn a disagreement
    the draws resolve into ``agree``."""
    from ._internal import checks as _checks

    r, n = _checks.positive(f"{prefix}rtol", rtol), _checks.positive(f"{prefix}n_sigma", n_sigma)
    if not RTOL_RANGE[0] < r < RTOL_RANGE[1]:
        raise ValueError(f"{prefix}rtol must be a relative tolerance strictly between {RTOL_RANGE[0]:g} and "
                         f"{RTOL_RANGE[1]:g}, got {rtol!r}")
    if not N_SIGMA_RANGE[0] <= n <= N_SIGMA_RANGE[1]:
        raise ValueError(f"{prefix}n_sigma must be between {N_SIGMA_RANGE[0]:g} and {N_SIGMA_RANGE[1]:g} Monte-Carlo "
                         f"standard errors, got {n_sigma!r}")
    return r, n


@dataclass(frozen=True)
class Verdict:
    """A value of :data:`VALUES` and why (the reasons of ``inconclusive``: failed diagnostics, unsolved theories).

    sampler_failed, theory_failed: whether some reason is a failed sampler diagnostic, or a theory that is not a
    solution (what the warning advises)."""

    value: str
    reasons: tuple[str, ...] = ()
    sampler_failed: bool = False
    theory_failed: bool = False

    def __post_init__(self) -> None:
        if self.value not in VALUES:
            raise ValueError(f"a verdict is one of {list(VALUES)}, got {self.value!r}")

    def to_json(self) -> str:
        """The one serialised form every result file stores (:meth:`from_json` reads it back): value, reasons and
        which side failed."""
        return json.dumps({"value": self.value, "reasons": list(self.reasons),
                           "sampler_failed": self.sampler_failed, "theory_failed": self.theory_failed})

    @classmethod
    def from_json(cls, text: str) -> Verdict:
        """The verdict :meth:`to_json` wrote (``ValueError`` for anything else). A bare value of :data:`VALUES`,
        what files held before, reads as that value without reasons, an inconclusive one with both sides failed
        (which failed was not stored)."""
        if text in VALUES:
            return stored(text)
        try:
            d = json.loads(text)
            return cls(str(d["value"]), tuple(str(r) for r in d["reasons"]), bool(d["sampler_failed"]),
                       bool(d["theory_failed"]))
        except (TypeError, KeyError, json.JSONDecodeError) as err:
            raise ValueError(f"not a stored verdict: {text!r} ({err})") from None

    def at(self, point: str) -> Verdict:
        """This verdict of one point of several, each reason labelled ``"<point>: <reason>"`` (the point alone
        where an inconclusive verdict has no reason), so that a headline over points says where."""
        if self.value != INCONCLUSIVE:
            return self
        return Verdict(self.value, tuple(f"{point}: {r}" for r in self.reasons) or (point,), self.sampler_failed,
                       self.theory_failed)

    @property
    def is_inconclusive(self) -> bool:
        """Whether the sampler's diagnostics failed or a theory is not a solution, so nothing can be told."""
        return self.value == INCONCLUSIVE

    @property
    def disagrees(self) -> bool:
        """Whether a comparison found theory and samples apart (a result, not a failure)."""
        return self.value == DISAGREE

    @property
    def uncompared(self) -> bool:
        """Whether samples passed their diagnostics but no theory was compared with them (``not compared``)."""
        return self.value == NOT_COMPARED

    @property
    def sampled(self) -> bool:
        """Whether there were samples to judge (every value but ``not sampled``)."""
        return self.value != NOT_SAMPLED

    def text(self, theory: str = "") -> str:
        """The report's verdict line: ``INCONCLUSIVE (sampler diagnostics failed)``, or ``<theory> theory and
        sampling agree`` / ``… DISAGREE`` (``theory``: its name where two theories were compared)."""
        if self.is_inconclusive:
            why = [w for w, bad in (("sampler diagnostics failed", self.sampler_failed),
                                    ("the theory is not a solution", self.theory_failed)) if bad]
            return f"INCONCLUSIVE ({'; '.join(why)})"
        name = theory + " " if theory else ""
        return f"{name}theory and sampling {self.value if self.value == AGREE else self.value.upper()}"

    @property
    def exit_status(self) -> int:
        """:data:`EXIT_INCONCLUSIVE` when inconclusive, else 0 (``disagree`` is a result, not a failure)."""
        return EXIT_INCONCLUSIVE if self.value == INCONCLUSIVE else 0

    def warning(self, where: str = "") -> str | None:
        """The one-line warning of an inconclusive verdict (``None`` otherwise): its reasons and the advice that
        fits them; ``where`` names the points (``"at some sampled width"``)."""
        if self.value != INCONCLUSIVE:
            return None
        advice = [a for a, needed in ((SAMPLE_LONGER, self.sampler_failed), (CHECK_SCALES, self.theory_failed))
                  if needed]
        head = "inconclusive" + (f" {where}" if where else "")
        if self.sampler_failed and not self.theory_failed and not where:  # one point, its sampler alone
            head = "the sampler's diagnostics failed"
        return f"{head}: {'; '.join(self.reasons)}. Do not trust these numbers: {'; '.join(advice)}."


def inconclusive_values(values) -> np.ndarray:
    """Boolean, the shape of ``values`` (an array of stored verdict values, e.g. ``sweep.nc``'s ``verdict``):
    which are ``inconclusive``."""
    import numpy as np

    return np.asarray(values) == INCONCLUSIVE


def stored(value: str, reasons: Iterable[str] = (), sampler_failed: bool | None = None,
           theory_failed: bool | None = None) -> Verdict:
    """A verdict read back from a file that stores its parts apart (``pruning.json``): the sides that failed as
    stored, or, where a file written before them has none (``None``), both where it is inconclusive."""
    unknown = value == INCONCLUSIVE
    return Verdict(value, tuple(reasons), unknown if sampler_failed is None else bool(sampler_failed),
                   unknown if theory_failed is None else bool(theory_failed))


def of_sampling(diagnostics: Mapping[str, Mapping[str, float]]) -> Verdict:
    """The sampler's half over sampled points: ``inconclusive`` where some point's diagnostics fail
    (:func:`~bayes_attn.diagnostics.diagnostic_failures`; reasons ``"<point>: <failures>"``, or the failures
    alone for one unnamed point ``""``), else ``diagnostics passed``."""
    from .diagnostics import diagnostic_failures  # (pandas, xarray): not for a command that only reads a verdict

    reasons = tuple(f"{point}: {'; '.join(f)}" if point else "; ".join(f)
                    for point, d in diagnostics.items() if (f := diagnostic_failures(dict(d))))
    return Verdict(INCONCLUSIVE, reasons, sampler_failed=True) if reasons else Verdict(DIAGNOSTICS_PASSED)


def of_theory(problems: Iterable[str]) -> Verdict:
    """A theory alone: ``inconclusive`` when it is not a solution (``problems``: not converged, not a minimum),
    else ``theory only``."""
    problems = tuple(problems)
    return Verdict(INCONCLUSIVE, problems, theory_failed=True) if problems else Verdict(THEORY_ONLY)


def of_comparison(passed: bool, sampler_failures: Iterable[str], theory_problems: Iterable[str]) -> Verdict:
    """One comparison of a theory with samples: ``inconclusive`` when a sampler diagnostic failed or the theory is
    not a solution, else ``agree`` when every check ``passed``, else ``disagree``."""
    failures, problems = tuple(sampler_failures), tuple(theory_problems)
    if failures or problems:
        return Verdict(INCONCLUSIVE, failures + problems, sampler_failed=bool(failures), theory_failed=bool(problems))
    return Verdict(AGREE if passed else DISAGREE)


def combine(verdicts: Iterable[Verdict], *, sampled: bool = True) -> Verdict:
    """The headline of several verdicts (a job's points, or its sampling and its comparisons): ``inconclusive``
    where one is (every reason kept, once), else ``disagree`` where one disagrees, else ``agree`` where every one
    of them is a comparison that agreed; ``not compared`` where samples passed but nothing was compared, and
    without samples (``sampled=False``) ``theory only`` or ``not sampled`` as the parts say."""
    verdicts = list(verdicts)
    values = {v.value for v in verdicts}
    if INCONCLUSIVE in values:
        bad = [v for v in verdicts if v.value == INCONCLUSIVE]
        return Verdict(INCONCLUSIVE, tuple(dict.fromkeys(r for v in bad for r in v.reasons)),
                       any(v.sampler_failed for v in bad), any(v.theory_failed for v in bad))
    if DISAGREE in values:
        return Verdict(DISAGREE)
    if not sampled:
        return Verdict(NOT_SAMPLED if NOT_SAMPLED in values else THEORY_ONLY)
    return Verdict(AGREE) if AGREE in values and values <= {AGREE, DIAGNOSTICS_PASSED, THEORY_ONLY} else \
        Verdict(NOT_COMPARED)
