"""Sampler settings: the one home of their defaults and checks.

``sample_posterior``, the spec's ``[sampler]`` table and the ``bayes-attn``
command all read :class:`SamplerSettings`; the command derives its choices
from :data:`CHAIN_METHODS`, :data:`bayes_attn._internal.precision.DTYPES` and the
sampler registry.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from .._internal import checks as _checks
from .._internal.precision import DTYPES

__all__ = ["AUTO", "AUTO_ORDER", "BLOCK_KEYS", "CHAIN_METHODS", "DEFAULT_BLOCKS", "DEFAULT_SAMPLER", "GUIDED",
           "LOOSEST_MAX_RHAT", "MAX_RHAT", "RENAMED", "SAMPLER_DESCRIPTIONS", "SAMPLER_NAMES", "STARTS",
           "SamplerSettings", "check_keys"]

CHAIN_METHODS = ("auto", "parallel", "vectorized", "sequential")
STARTS = ("expansion", "prior")
AUTO = "auto"
"""The sampler name that tries the others in :data:`AUTO_ORDER` (:func:`bayes_attn.sample_posterior`)."""
AUTO_ORDER = ("laplace-is", "laplace-mh", "wishart")
DEFAULT_SAMPLER = "wishart"
SAMPLER_DESCRIPTIONS = {
    "full": "NUTS over all weights, f summed over paths from precomputed path inputs",
    "full-token": "NUTS over all weights, the network run over tokens as in the paper (slow)",
    "collapsed": "NUTS over the upper weights with V0 integrated out; f (or V0) drawn exactly afterwards",
    "wishart": "NUTS over the order parameters only (Bartlett factors of the Wishart chain); f drawn exactly "
               "afterwards",
    "laplace-is": "importance sampling of the order parameters from the Laplace expansion (Student-t proposal, "
                  "PSIS), resampled; f drawn exactly afterwards",
    "laplace-mh": "independence Metropolis-Hastings on the order parameters with the Laplace expansion's proposal; "
                  "f drawn exactly afterwards",
    AUTO: "the cheapest sampler whose diagnostics pass: laplace-is, else laplace-mh, else wishart",
}
"""The samplers of :data:`bayes_attn.samplers.SAMPLERS` by name, in its order, with their descriptions (here, so
that settings and the command's options need not import the samplers and NumPyro)."""
SAMPLER_NAMES = tuple(SAMPLER_DESCRIPTIONS)
GUIDED = ("laplace-is", "laplace-mh")
"""The samplers that draw ``guided_samples`` per chain (docs/theory.md §9)."""
MAX_RHAT = 1.01
"""The fixed R-hat bound of the rule before groups (:func:`bayes_attn.diagnostics.convergence_failures` holds
diagnostics stored without groups to it); the rule itself bounds each group by
:func:`bayes_attn.diagnostics.rhat_bound`."""
LOOSEST_MAX_RHAT = 1.1
"""The loosest ``max_rhat`` a user may ask for (a target beside the rule's own bound, never instead of it)."""
BLOCK_KEYS = ("target_ess", "target_precision", "max_rhat", "max_samples", "max_seconds")
"""The settings that make a sampler run in blocks (:attr:`SamplerSettings.in_blocks`)."""
DEFAULT_BLOCKS = 16
"""Blocks a sampler with a target but neither ``max_samples`` nor ``max_seconds`` may run at most (the stopping
message names this cap); with ``max_seconds`` alone, the seconds are the budget."""
RENAMED = {
    "method": "name",
    "form": "name",
}
"""Keys of older specs and calls, replaced by one sampler ``name``."""


@dataclass(frozen=True)
class SamplerSettings:
    """How to sample (NUTS via NumPyro).

    Attributes:
        name: the sampler (see :data:`bayes_attn.samplers.SAMPLERS`).
        num_warmup, num_samples: warm-up and kept draws per chain.
        num_chains: independent chains.
        seed: random seed (NUTS and the conditional draws).
        dtype: ``"float64"`` or ``"float32"`` (float32 suits GPUs).
        chain_method: NumPyro's ``"parallel"``, ``"vectorized"``, ``"sequential"``,
            or ``"auto"`` (parallel when there is a device per chain, else vectorized on an
            accelerator and sequential on a CPU; see :mod:`bayes_attn._internal.threads`).
        thinning: keep every ``thinning``-th draw.
        target_accept: NUTS target acceptance probability, in (0, 1).
        max_tree_depth: NUTS maximum tree depth (at most ``2**depth - 1`` leapfrog steps).
        start: ``"expansion"``: ``wishart`` chains start at the mode of the finite-width expansion with
            its dense metric ``H⁻¹`` (warm-up adapts the step size only; docs/theory.md §9), falling back to
            ``"prior"`` with a warning where the expansion gives none; ``"prior"``: the sampler's own start and
            NumPyro's adapted diagonal metric. The other NUTS samplers always start as ``"prior"``.
        guided_samples: draws per chain of ``laplace-is`` and ``laplace-mh`` (also when ``auto`` tries them),
            default ``num_samples``: one of their draws costs one evaluation of the likelihood, one of NUTS a
            trajectory of several gradients, so ``auto`` can give them more draws for the same time.
        target_ess: sample in blocks (:class:`bayes_attn.samplers.Stopping`) until every entry of the invariant
            observables has a bulk ESS of at least this (beside the ESS the convergence rule asks,
            :func:`bayes_attn.diagnostics.required_ess`).
        target_precision: sample in blocks until the comparison can decide: every check's Monte-Carlo bound
            (its noise floor plus ``n_sigma`` MC errors, what "agree" could hide) is at most this fraction of the
            check's tolerance, in (0, 1]; needs a theory (``run``, ``sweep``, ``prune``,
            :func:`bayes_attn.experiment.evaluate`).
        max_rhat: an R-hat every entry is sampled until, in (1, 1.1], beside the rule's own bound per group
            (:func:`bayes_attn.diagnostics.rhat_bound`, which every verdict requires).
        max_samples: the budget in kept draws per chain, every block included (default with a target and no
            ``max_seconds``: :data:`DEFAULT_BLOCKS` blocks of ``num_samples``; guided samplers: of
            ``guided_samples``).
        max_seconds: the budget in seconds of sampling (a warm-up run again counted); a block is not started
            past it. Given alone, it is the whole budget: no cap in draws.

    Any of the last five samples in blocks: each block continues the chains (NUTS from its last state, step size
    and metric; a guided sampler with fresh proposals) until the diagnostics and targets hold or the budget is
    spent; without them the sampler runs one block, as always.
    """

    name: str = DEFAULT_SAMPLER
    num_warmup: int = 500
    num_samples: int = 1000
    num_chains: int = 4
    seed: int = 0
    dtype: str = "float64"
    chain_method: str = "auto"
    thinning: int = 1
    target_accept: float = 0.8
    max_tree_depth: int = 10
    start: str = "expansion"
    guided_samples: int | None = None
    target_ess: float | None = None
    target_precision: float | None = None
    max_rhat: float | None = None
    max_samples: int | None = None
    max_seconds: float | None = None

    def __post_init__(self):
        _checks.choice("sampler", self.name, SAMPLER_NAMES)
        _checks.positive_int("num_warmup", self.num_warmup, minimum=0)
        _checks.positive_int("num_samples", self.num_samples)
        _checks.positive_int("num_chains", self.num_chains)
        _checks.positive_int("thinning", self.thinning)
        if self.thinning > self.num_samples:
            raise ValueError(f"thinning must be at most num_samples={self.num_samples}, got {self.thinning}")
        _checks.positive_int("max_tree_depth", self.max_tree_depth)
        t = self.target_accept
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 < t < 1.0:
            raise ValueError(f"target_accept must be a number in (0, 1), got {t!r}")
        _checks.seed("seed", self.seed)
        _checks.choice("dtype", self.dtype, DTYPES)
        _checks.choice("chain_method", self.chain_method, CHAIN_METHODS)
        _checks.choice("start", self.start, STARTS)
        if self.guided_samples is not None:
            _checks.positive_int("guided_samples", self.guided_samples)
            if self.thinning > self.guided_samples:
                raise ValueError(f"thinning must be at most guided_samples={self.guided_samples}, got {self.thinning}")
        self._check_blocks()

    def _check_blocks(self) -> None:
        for name in ("target_ess", "max_seconds"):
            if getattr(self, name) is not None:
                _checks.positive(name, getattr(self, name))
        p = self.target_precision
        if p is not None and not 0.0 < _checks.positive("target_precision", p) <= 1.0:
            raise ValueError(f"target_precision must be a fraction of the tolerance in (0, 1], got {p!r}")
        r = self.max_rhat
        if r is not None and not 1.0 < _checks.positive("max_rhat", r) <= LOOSEST_MAX_RHAT:
            raise ValueError(f"max_rhat must be in (1, {LOOSEST_MAX_RHAT}] (a target beside the rule's own bound "
                             f"per group, bayes_attn.diagnostics.rhat_bound), got {r!r}")
        if self.max_samples is not None:
            _checks.positive_int("max_samples", self.max_samples, minimum=self.block_draws)
        if self.in_blocks and self.block_draws % self.thinning:
            raise ValueError(f"draws per block ({self.block_draws}) must be a multiple of thinning={self.thinning} "
                             "to sample in blocks (each block keeps every thinning-th draw)")

    @property
    def guided_draws(self) -> int:
        """Draws per chain of the guided samplers: ``guided_samples``, else ``num_samples``."""
        return self.num_samples if self.guided_samples is None else self.guided_samples

    @property
    def in_blocks(self) -> bool:
        """Whether the sampler runs in blocks until a target or the budget (any of ``target_ess``,
        ``target_precision``, ``max_rhat``, ``max_samples``, ``max_seconds`` given)."""
        return any(getattr(self, k) is not None for k in BLOCK_KEYS)

    @property
    def block_draws(self) -> int:
        """Draws per chain of one block: ``guided_draws`` for the guided samplers, else ``num_samples``."""
        return self.guided_draws if self.name in GUIDED else self.num_samples

    @property
    def budget_samples(self) -> int:
        """The budget in kept draws per chain: ``max_samples``, else :data:`DEFAULT_BLOCKS` blocks."""
        return self.max_samples if self.max_samples is not None else DEFAULT_BLOCKS * self.block_draws

    @property
    def budget_blocks(self) -> int:
        """Blocks the budget in draws holds (1 when not in blocks; :data:`DEFAULT_BLOCKS` when only
        ``max_seconds`` bounds the run, for what must plan a number: memory, calibration)."""
        return self.budget_samples // self.block_draws if self.in_blocks else 1

    @property
    def block_cap(self) -> int | None:
        """Blocks a run in blocks may draw at most: ``None`` when ``max_seconds`` alone is the budget, else
        :attr:`budget_blocks`."""
        return None if self.max_seconds is not None and self.max_samples is None else self.budget_blocks

    @property
    def draws_cap(self) -> str:
        """The cap in draws in words, for a stopping message."""
        if self.max_samples is not None:
            return f"max_samples={self.max_samples} draws per chain"
        return (f"the default cap of {DEFAULT_BLOCKS} blocks of {self.block_draws} draws, given neither max_samples "
                "nor max_seconds")

    def most_stored(self) -> SamplerSettings:
        """These settings with as many NUTS draws as the budget may store (for memory checks)."""
        stores_more = self.in_blocks and self.name not in GUIDED
        return dataclasses.replace(self, num_samples=self.budget_samples) if stores_more else self

    @property
    def max_leapfrog_steps(self) -> int:
        """Leapfrog steps of a tree of maximal depth."""
        return 2**self.max_tree_depth - 1

    def replace(self, **overrides) -> SamplerSettings:
        """A copy with ``overrides`` applied (``None`` values ignored; unknown keys are an error)."""
        overrides = {k: v for k, v in overrides.items() if v is not None}
        check_keys(overrides, "sampler settings")
        return dataclasses.replace(self, **overrides)

    @classmethod
    def from_dict(cls, values: dict, where: str = "sampler settings") -> SamplerSettings:
        """Build from a mapping of field names (e.g. a spec's ``[sampler]`` table)."""
        check_keys(values, where)
        return cls(**values)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """The settings as a JSON object (how a posterior's ``settings`` attribute stores them)."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str | dict, where: str = "stored sampler settings") -> SamplerSettings:
        """Inverse of :meth:`to_json` (a mapping is accepted as it is: netCDF reading may have decoded it)."""
        return cls.from_dict(json.loads(text) if isinstance(text, (str, bytes)) else dict(text), where)


def check_keys(values: dict, where: str) -> None:
    """Raise ``ValueError`` for keys that are not settings, pointing renamed ones to their new name."""
    known = {f.name for f in dataclasses.fields(SamplerSettings)}
    for key in values:
        if key in RENAMED:
            raise ValueError(
                f"{where}: {key!r} was replaced by one sampler name: use name = 'full', 'full-token', "
                "'collapsed' or 'wishart' (method='full' with form='path' is 'full', with form='token' 'full-token')"
            )
        if key not in known:
            raise ValueError(f"{where}: unknown key {key!r}; expected some of {sorted(known)}")
