"""What ``bayes-attn prune`` found, as one typed value, and its one serialiser ``pruning.json``.

The stages of :func:`bayes_attn.oneshot._pipeline.run_oneshot` each return a
frozen value and the next takes it: training → :class:`ModelMetrics` (inside
``TrainedModel``), theory scan → :class:`~bayes_attn.oneshot._scan.Scan`,
sampling → :class:`SamplingVerdict` and a :class:`WidthComparison` of theory and
samples per sampled width, scores and pruning →
:class:`~bayes_attn.oneshot._pruning.PruningResult`, uncertainty →
:class:`Spread`; :class:`PruneResult` holds them all. :func:`to_json` is the
only place that names the keys of ``pruning.json`` and :func:`from_json` (and
:func:`load_pruning`) the only place that reads them.

Accuracies are fractions of test episodes; ``se`` their standard error (the
field or its type says binomial or class bootstrap).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from .._internal import checks as _checks
from .._internal import io as _io
from ..comparison import Check, Comparison, theories_line
from ..verdict import Verdict, combine, stored
from ._model import ModelConfig, Params
from ._pruning import Cumulative, PruningResult, RandomPruning, Spearman, SpearmanSpread, TheoryAblation
from ._training import History

__all__ = ["Accuracy", "ModelMetrics", "OodAccuracy", "PAPER_SPEARMAN_RHO", "PruneResult", "SamplingVerdict",
           "ScoreSpreads", "Spread", "Temperatures", "TheoryVerdict", "TrainedModel", "WidthComparison", "from_json",
           "load_pruning", "to_json", "width_comparison", "write"]

PAPER_SPEARMAN_RHO = 0.86
"""The paper's head score vs single-head drop Spearman ρ (its Fig. 3, 2 × 4 heads)."""


@dataclass(frozen=True)
class TrainedModel:
    """The trained model (weights, architecture, training history) and what was measured on it."""

    params: Params
    config: ModelConfig
    history: History | None
    metrics: ModelMetrics


@dataclass(frozen=True)
class Accuracy:
    """An accuracy and its standard error."""

    accuracy: float
    se: float


@dataclass(frozen=True)
class OodAccuracy:
    """The model's accuracy on an out-of-distribution set, and the pixel nearest neighbour's (binomial se)."""

    accuracy: float
    se: float
    nn_accuracy: float
    nn_se: float


@dataclass(frozen=True)
class ModelMetrics:
    """What was measured on the gradient-descent model (binomial standard errors).

    nn_baseline: the pixel nearest neighbour on the same test episodes; ood: per
    OOD set; train_seconds: wall time of its training (read back when
    ``reused``); kept_epoch: the early-stopping epoch kept (0-based), or ``None``.
    """

    test: Accuracy
    validation: Accuracy
    nn_baseline: Accuracy
    ood: dict[str, OodAccuracy]
    train_seconds: float
    reused: bool
    epochs_run: int | None  # None: read from a pruning.json written before it was
    kept_epoch: int | None


@dataclass(frozen=True)
class SamplingVerdict:
    """``"diagnostics passed"``, ``"inconclusive"`` (with its reasons) or ``"not sampled"``."""

    verdict: str
    reasons: list[str]


@dataclass(frozen=True)
class TheoryVerdict:
    """One theory against the exact posterior at one width: its three-valued verdict (``agree``, ``disagree``,
    ``inconclusive``, with the reasons of the last), its checks (:class:`~bayes_attn.comparison.Check`: ``U``,
    the deeper order parameters, the predictor's mean and variance on the test episodes) and the test accuracy
    of the sign of its predictor mean."""

    verdict: str
    reasons: list[str]
    checks: list[Check]
    accuracy: float
    sampler_failed: bool | None = None  # None: a file written before these were stored
    theory_failed: bool | None = None

    @property
    def outcome(self) -> Verdict:
        """The typed verdict (:func:`bayes_attn.verdict.stored`)."""
        return stored(self.verdict, self.reasons, self.sampler_failed, self.theory_failed)


@dataclass(frozen=True)
class WidthComparison:
    """The theory against the exact posterior at one sampled width, as ``bayes-attn run`` compares them
    (:func:`bayes_attn.comparison.compare`).

    theories: by correction (``"laplace"``, ``"none"``), the headline first: the corrected theory (§8) where it
    exists, the leading order (§4) beside it; correction_problems: why the correction is missing or unreliable;
    sampled_accuracy: test accuracy of the sign of the posterior mean of ``f``.
    """

    width: int
    temperature: float
    theories: dict[str, TheoryVerdict]
    sampled_accuracy: float
    correction_problems: list[str]

    @property
    def headline(self) -> str:
        """The headline theory: ``"laplace"`` where the correction exists, else ``"none"``."""
        return next(iter(self.theories))

    @property
    def verdict(self) -> str:
        """The headline theory's verdict."""
        return self.theories[self.headline].verdict

    def summary(self) -> str:
        """One line per theory, headline first: ``corrected (Laplace, §8): AGREE (U gap 0.2 % ± 0.3 %); …``."""
        return theories_line((name, t.verdict, t.checks[0]) for name, t in self.theories.items())


def width_comparison(comp: Comparison, temperature: float, problems: list[str]) -> WidthComparison:
    """The typed value of a :class:`~bayes_attn.comparison.Comparison` at its width (``problems``: of the
    correction, besides the comparison's own warnings)."""
    theories = {name: TheoryVerdict(c.verdict, list(c.inconclusive_reasons), list(c.checks),
                                    float(c.accuracy["theory"]), c.outcome.sampler_failed, c.outcome.theory_failed)
                for name, c in comp.theories.items()}
    return WidthComparison(int(comp.width), float(temperature), theories, float(comp.accuracy["sampled"]),
                           [*problems, *comp.theory_warnings])


@dataclass(frozen=True)
class Temperatures:
    """The temperatures chosen on validation episodes: the rule, per scanned width, and for the GP limit."""

    choice: str
    finite_width: dict[int, float]
    gp: float


@dataclass(frozen=True)
class ScoreSpreads:
    """ρ with the model's single-head drops of the other predictors of pruning, over the same draws × bootstraps
    as the leading-order score's (``None`` where it could not be computed).

    corrected: the head scores of the corrected theory's ``U`` (§8), one per draw of the ``P`` episodes;
    posterior: of the exact posterior's mean ``U`` at the score width (one draw: its spread is the bootstraps'),
    sampled at ``posterior_temperature``; ablation: the theory-side ablation's drops (a head's paths out of the
    leading-order ``U``), one per draw; correction_problems: per draw, why a correction is missing or unreliable.
    """

    corrected: SpearmanSpread | None
    posterior: SpearmanSpread | None
    ablation: SpearmanSpread | None
    posterior_temperature: float | None
    correction_problems: list[str]


@dataclass(frozen=True)
class Spread:
    """The uncertainty stage: class-bootstrap errors, the theory's own accuracy and ablation, and the spread of ρ.

    base, theory, gp: test accuracy ± class-bootstrap se of the model, the
    theory at ``(theory_width, theory_temperature)`` and the GP limit at
    ``gp_temperature``; ablation: the theory-side head removal with its ρ
    against the score and against the model's drops; rho: ρ(score, drop) over
    draws of the theory's episodes × class bootstraps; score_draws: the head
    scores of each draw ``[n_draws, n_heads]``; others: the same spread for
    the corrected theory's and the exact posterior's scores and for the ablation.
    """

    base: Accuracy
    se_method: str
    theory: Accuracy
    theory_temperature: float
    theory_width: int
    gp: Accuracy
    gp_temperature: float
    ablation: TheoryAblation
    ablation_rho_score: Spearman
    ablation_rho_drops: Spearman
    rho: SpearmanSpread
    score_draws: list[list[float]]
    others: ScoreSpreads


@dataclass(frozen=True)
class PruneResult:
    """Everything ``bayes-attn prune`` found (``pruning.json``): the stages' values and the scores' settings.

    trained_head_scores, trained_spearman: the scores read off the trained
    weights' own ``U`` and their ρ with the drops; theory_classes: the image
    set the theory's training episodes come from; deviations: departures from
    the authors' recipe; comparisons: the theory against the exact posterior at each sampled width.
    """

    model: ModelMetrics
    pruning: PruningResult
    spread: Spread
    score_width: int
    score_temperature: float
    trained_head_scores: list[list[float]]
    trained_spearman: Spearman
    temperatures: Temperatures
    theory_classes: str
    deviations: list[str]
    sampling: SamplingVerdict
    comparisons: dict[int, WidthComparison]

    @property
    def verdict(self) -> str:
        """The headline over sampled widths: ``not sampled`` without samples; ``inconclusive`` where the sampling
        or some width's headline comparison is; else ``not compared`` where samples passed their diagnostics
        but no comparison was made (a file written before ``prune`` compared); else ``disagree`` where some
        width disagrees; ``agree`` only where every width was compared and agrees."""
        return self.outcome.value

    @property
    def outcome(self) -> Verdict:
        """:attr:`verdict` with its reasons (:func:`bayes_attn.verdict.combine` of the sampling's and each width's
        headline comparison's), each reason labelled with its width and its check: the sampler's on ``U``
        (``N=10 (sampler, on U): …``) and the comparison's on every observable and the theory
        (``N=10 (comparison, on every observable): …``)."""
        sampling = stored(self.sampling.verdict, self.sampling.reasons, sampler_failed=True, theory_failed=False)
        compared = [c.theories[c.headline].outcome.at(f"N={N} (comparison, on every observable)")
                    for N, c in self.comparisons.items()]
        return combine([sampling, *compared], sampled=sampling.sampled)

    @property
    def inconclusive_reasons(self) -> list[str]:
        """Why the headline is inconclusive (:attr:`outcome`'s reasons), no reason twice."""
        return list(self.outcome.reasons)


def to_json(r: PruneResult) -> dict:
    """The ``pruning.json`` dict of ``r`` (keys in the file's order)."""
    p, s, m = r.pruning, r.spread, r.model
    return {
        "base_accuracy": s.base.accuracy, "base_se": s.base.se, "base_binomial_se": p.base_binomial_se,
        "head_scores": p.head_scores, "accuracy_drops": p.drops, "drop_se": p.drop_se,
        "spearman": asdict(p.spearman),
        "cumulative": {"ascending": asdict(p.ascending), "descending": asdict(p.descending),
                       "random": asdict(p.random)},
        "se_method": s.se_method, "theory_accuracy": s.theory.accuracy, "theory_se": s.theory.se,
        "theory_temperature": s.theory_temperature, "theory_width": s.theory_width,
        "gp_accuracy": s.gp.accuracy, "gp_se": s.gp.se, "gp_temperature": s.gp_temperature,
        "theory_ablation": {**asdict(s.ablation), "spearman_score": asdict(s.ablation_rho_score),
                            "spearman_gd_drops": asdict(s.ablation_rho_drops)},
        "spearman_draws": s.rho.draws, "spearman_median": s.rho.median, "spearman_q05": s.rho.q05,
        "spearman_q95": s.rho.q95, "n_draws": s.rho.n_draws, "n_resamples": s.rho.n_resamples,
        "n_constant": s.rho.n_constant, "spearman_score_draws": s.score_draws, "paper_spearman_rho": PAPER_SPEARMAN_RHO,
        "nn_baseline": asdict(m.nn_baseline), "ood": {k: asdict(v) for k, v in m.ood.items()},
        "model": {"test": asdict(m.test), "validation": asdict(m.validation), "train_seconds": m.train_seconds,
                  "reused": m.reused, "epochs_run": m.epochs_run, "kept_epoch": m.kept_epoch},
        "score_width": r.score_width, "score_temperature": r.score_temperature,
        "trained_head_scores": r.trained_head_scores, "trained_spearman": asdict(r.trained_spearman),
        "temperatures": {"choice": r.temperatures.choice,
                         "finite_width": {str(N): t for N, t in r.temperatures.finite_width.items()},
                         "gp": r.temperatures.gp},
        "theory_classes": r.theory_classes, "deviations": r.deviations,
        "verdict": r.sampling.verdict, "inconclusive_reasons": r.sampling.reasons,
        "score_spreads": _score_spreads_json(s.others),
        "headline_verdict": r.verdict,
        "comparisons": {str(N): _comparison_json(c) for N, c in r.comparisons.items()},
    }


def _score_spreads_json(o: ScoreSpreads) -> dict:
    return {**{k: None if v is None else asdict(v) for k, v in
               (("corrected", o.corrected), ("posterior", o.posterior), ("ablation", o.ablation))},
            "posterior_temperature": o.posterior_temperature, "correction_problems": o.correction_problems}


def _score_spreads(d: dict | None) -> ScoreSpreads:
    if d is None:
        return ScoreSpreads(None, None, None, None, [])
    of = lambda k: None if d[k] is None else _flat(SpearmanSpread, d[k])  # noqa: E731
    return ScoreSpreads(of("corrected"), of("posterior"), of("ablation"), d["posterior_temperature"],
                        d["correction_problems"])


def _comparison_json(c: WidthComparison) -> dict:
    return {"width": c.width, "temperature": c.temperature, "headline": c.headline, "verdict": c.verdict,
            "summary": c.summary(), "sampled_accuracy": c.sampled_accuracy,
            "correction_problems": c.correction_problems,
            "theories": {name: {"verdict": t.verdict, "reasons": t.reasons, "accuracy": t.accuracy,
                                "checks": [{**asdict(k), "gap": k.gap, "passed": k.passed} for k in t.checks],
                                **{k: getattr(t, k) for k in ("sampler_failed", "theory_failed")
                                   if getattr(t, k) is not None}}
                         for name, t in c.theories.items()}}


def _comparison(d: dict) -> WidthComparison:
    theories = {name: TheoryVerdict(t["verdict"], t["reasons"], [_flat(Check, k) for k in t["checks"]], t["accuracy"],
                                    t.get("sampler_failed"), t.get("theory_failed"))
                for name, t in d["theories"].items()}
    return WidthComparison(d["width"], d["temperature"], theories, d["sampled_accuracy"], d["correction_problems"])


def _flat(cls, d: dict):
    return cls(**{f.name: d[f.name] for f in fields(cls)})


def _cumulative(d: dict) -> Cumulative:
    return _flat(Cumulative, d)


def from_json(d: dict) -> PruneResult:
    """The :class:`PruneResult` of a ``pruning.json`` dict.

    ``base_binomial_se``, ``model.epochs_run`` and ``model.kept_epoch`` are
    ``None``, and ``score_spreads`` and ``comparisons`` empty, in files written before they were; any
    other key missing is a ``KeyError`` naming it.
    """
    acc = lambda a, se: Accuracy(d[a], d[se])  # noqa: E731
    cum, ab, mo, te = d["cumulative"], d["theory_ablation"], d["model"], d["temperatures"]
    rnd = cum["random"]
    pruning = PruningResult(d["head_scores"], d["base_accuracy"], d.get("base_binomial_se"), d["accuracy_drops"],
                            d["drop_se"], _flat(Spearman, d["spearman"]), _cumulative(cum["ascending"]),
                            _cumulative(cum["descending"]),
                            RandomPruning(**{**rnd, "curves": [_cumulative(c) for c in rnd["curves"]]}))
    rho = SpearmanSpread(d["spearman_draws"], d["spearman_median"], d["spearman_q05"], d["spearman_q95"],
                         d["n_draws"], d["n_resamples"], d["n_constant"])
    spread = Spread(acc("base_accuracy", "base_se"), d["se_method"], acc("theory_accuracy", "theory_se"),
                    d["theory_temperature"], d["theory_width"], acc("gp_accuracy", "gp_se"), d["gp_temperature"],
                    _flat(TheoryAblation, ab), _flat(Spearman, ab["spearman_score"]),
                    _flat(Spearman, ab["spearman_gd_drops"]), rho, d["spearman_score_draws"],
                    _score_spreads(d.get("score_spreads")))
    model = ModelMetrics(_flat(Accuracy, mo["test"]), _flat(Accuracy, mo["validation"]),
                         _flat(Accuracy, d["nn_baseline"]), {k: _flat(OodAccuracy, v) for k, v in d["ood"].items()},
                         mo["train_seconds"], mo["reused"], mo.get("epochs_run"), mo.get("kept_epoch"))
    temperatures = Temperatures(te["choice"], {int(N): t for N, t in te["finite_width"].items()}, te["gp"])
    return PruneResult(model, pruning, spread, d["score_width"], d["score_temperature"], d["trained_head_scores"],
                       _flat(Spearman, d["trained_spearman"]), temperatures, d["theory_classes"], d["deviations"],
                       SamplingVerdict(d["verdict"], d["inconclusive_reasons"]),
                       {int(N): _comparison(c) for N, c in d.get("comparisons", {}).items()})


SHA256_KEY = "sha256"
"""The last key of ``pruning.json``: :func:`content_sha256` of the rest, checked at every load (files written before
it have none and load unchecked)."""


def content_sha256(d: dict) -> str:
    """SHA-256 of the ``pruning.json`` dict ``d`` without :data:`SHA256_KEY` (its keys sorted, compact JSON)."""
    rest = {k: v for k, v in d.items() if k != SHA256_KEY}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write(r: PruneResult, path: str | os.PathLike) -> Path:
    """Write ``pruning.json`` (indented JSON, atomically), with its :data:`SHA256_KEY`."""
    d = to_json(r)
    return _io.write_json(path, d | {SHA256_KEY: content_sha256(d)})


def load_pruning(path: str | os.PathLike) -> PruneResult:
    """Read a ``pruning.json`` file, or the one in the folder ``path``; a file that is not one, or whose content
    does not match its :data:`SHA256_KEY`, is a one-line :class:`~bayes_attn._internal.io.CorruptFileError`."""
    path = Path(path)
    path = path / "pruning.json" if path.is_dir() else path
    try:
        d = json.loads(path.read_text())
        if not isinstance(d, dict):
            raise TypeError(f"a JSON {type(d).__name__}, not an object")
        if SHA256_KEY in d and d[SHA256_KEY] != content_sha256(d):
            raise ValueError("its content does not match its sha256")
        return from_json(d)
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as err:
        raise _io.CorruptFileError(f"{str(path)!r} cannot be read as a pruning.json: {_checks.one_line(err)}; the "
                                   "file is corrupted or was changed by something other than bayes_attn") from None
