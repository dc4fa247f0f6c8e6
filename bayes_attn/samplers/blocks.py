"""Sampling in blocks until the diagnostics and the targets hold, or the budget is spent.

A sampler whose :class:`~bayes_attn.samplers.SamplerSettings` has a target or a budget (``target_ess``,
``target_precision``, ``max_rhat``, ``max_samples``, ``max_seconds``: :attr:`SamplerSettings.in_blocks`) draws one
block (``num_samples`` per chain; a guided sampler ``guided_samples``), judges all draws so far, and draws another
block while a reason remains and the budget allows one more:

- NUTS continues each chain from its last state with its adapted step size and metric, so two blocks are the
  draws of one run twice as long, bit for bit (tested);
- a guided sampler draws a block of fresh proposals (another key, the same expansion), resampled on its own.

The reasons to continue: R-hat above ``max_rhat`` (default :data:`~bayes_attn.samplers.settings.MAX_RHAT`), a bulk
ESS below ``target_ess`` (and below ``MIN_ESS``, which every verdict requires), and the caller's own (the
comparison's precision: :func:`bayes_attn.experiment.evaluate`). Divergences, BFMI and a Pareto ``k̂`` are not:
more draws of the same chains do not mend them. :class:`Stopping` records what happened; a run that stops with a
reason left is inconclusive ("budget spent", :func:`bayes_attn.diagnostics.diagnostic_failures`).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np

from .settings import MAX_RHAT, SamplerSettings

log = logging.getLogger(__name__)

__all__ = ["BLOCK_SALT", "Block", "Stopping", "guided", "join", "nuts", "reasons", "run"]

BLOCK_SALT = 1 << 20
"""Block ``b > 0`` of a guided sampler draws with ``fold_in(key, BLOCK_SALT + b)`` (far from the keys it folds
in itself)."""


class Block(NamedTuple):
    """Draws ``{name: [chain, draw, ...]}``, sample statistics ``{name: [chain, draw]}`` and attributes."""

    draws: dict
    stats: dict
    attrs: dict


def nuts(mcmc, key, args: tuple, extra_fields: tuple, stats_of: Callable) -> Callable[[int], Block]:
    """Block ``b`` of NumPyro's ``mcmc`` on the model's ``args``: block 0 from ``key``, block ``b > 0`` continuing
    each chain from its last state (its key, position, step size and metric; no warm-up)."""

    def block(b: int) -> Block:
        if b:
            mcmc.post_warmup_state = mcmc.last_state
        mcmc.run(mcmc.last_state.rng_key if b else key, *args, extra_fields=extra_fields)
        return Block(mcmc.get_samples(group_by_chain=True), stats_of(mcmc.get_extra_fields(group_by_chain=True)), {})

    return block


def guided(draw: Callable, inputs, cfg: SamplerSettings, key, **options) -> Callable[[int], Block]:
    """Block ``b`` of a guided sampler's ``draw`` (:mod:`bayes_attn.samplers.laplace`): block 0 from ``key``, block
    ``b > 0`` from ``fold_in(key, BLOCK_SALT + b)`` (fresh proposals of the same expansion, pilots included)."""
    import jax  # this module is read by the diagnostics, which need no JAX

    def block(b: int) -> Block:
        g = draw(inputs, cfg, key if b == 0 else jax.random.fold_in(key, BLOCK_SALT + b), **options)
        return Block(dict(g.draws), g.stats, g.attrs)

    return block


def join(a: Block, b: Block) -> Block:
    """``a`` then ``b`` along the draws; of the attributes, the largest Pareto ``k̂``, the summed IS ESS and the
    mean acceptance are kept, the others are ``a``'s."""
    cat = lambda x, y: {k: np.concatenate([np.asarray(x[k]), np.asarray(y[k])], axis=1) for k in x}  # noqa: E731
    attrs = dict(a.attrs)
    if "pareto_k" in attrs:
        attrs["pareto_k"] = max(float(a.attrs["pareto_k"]), float(b.attrs["pareto_k"]))
    if "is_ess" in attrs:
        attrs["is_ess"] = float(a.attrs["is_ess"]) + float(b.attrs["is_ess"])
    if "acceptance" in attrs:
        attrs["acceptance"] = (float(a.attrs["acceptance"]) + float(b.attrs["acceptance"])) / 2
    return Block(cat(a.draws, b.draws), cat(a.stats, b.stats), attrs)


@dataclass(frozen=True)
class Stopping:
    """How blocks ended: ``blocks`` drawn, ``draws`` per chain (before thinning), ``seconds`` of sampling,
    ``met`` (no reason left) and the ``unmet`` reasons (with ``budget``: which budget was spent)."""

    blocks: int
    draws: int
    seconds: float
    met: bool
    unmet: tuple[str, ...] = ()
    budget: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Stopping:
        d = json.loads(text)
        return cls(**(d | {"unmet": tuple(d.get("unmet", ()))}))

    def __str__(self) -> str:
        end = "targets met" if self.met else f"budget spent ({self.budget}): " + "; ".join(self.unmet)
        plural = "s" * (self.blocks > 1)
        return f"{self.blocks} block{plural}, {self.draws} draws per chain, {self.seconds:.1f} s: {end}"


def reasons(diagnostics: dict[str, float], cfg: SamplerSettings, min_ess: float) -> list[str]:
    """The reasons in ``diagnostics`` (:meth:`bayes_attn.diagnostics.Summary.diagnostics`) to draw another block:
    R-hat above ``cfg.max_rhat``, bulk ESS below ``max(cfg.target_ess, min_ess)``."""
    out = []
    bound = MAX_RHAT if cfg.max_rhat is None else cfg.max_rhat
    rhat = diagnostics.get("max_r_hat", 1.0)
    if not rhat <= bound:
        out.append(f"max R-hat {rhat:.4g} > {bound:g}")
    want = max(min_ess, cfg.target_ess or 0.0)
    ess = diagnostics.get("min_ess_bulk", math.inf)
    if not ess >= want:
        out.append(f"min bulk ESS {ess:.4g} < {want:g}")
    return out


def run(block: Callable[[int], Block], judge: Callable[[Block], tuple[list[str], Any]], cfg: SamplerSettings,
        t0: float) -> tuple[Any, Stopping]:
    """Draw ``block(0)``, ``block(1)``, ... (joined) until ``judge`` of all draws so far gives no reason, or the
    next block would pass ``cfg.budget_samples`` draws per chain or ``cfg.max_seconds`` (counted from ``t0``, at the
    pace of the blocks so far). Returns what ``judge`` made of the last draws, and the :class:`Stopping`."""
    step = cfg.block_draws
    drawn = block(0)
    b = 1
    while True:
        unmet, judged = judge(drawn)
        seconds = time.perf_counter() - t0
        budget = ""
        if b + 1 > cfg.budget_blocks:
            budget = f"{b * step} of max_samples={cfg.budget_samples} draws per chain"
        elif cfg.max_seconds is not None and seconds * (b + 1) / b > cfg.max_seconds:
            budget = f"{seconds:.0f} s, another block would pass max_seconds={cfg.max_seconds:g}"
        if not unmet or budget:
            return judged, Stopping(b, b * step, seconds, not unmet, tuple(unmet), budget if unmet else "")
        log.info(f"block {b}: {b * step} draws per chain in {seconds:.0f} s; another block for: {'; '.join(unmet)}")
        drawn = join(drawn, block(b))
        b += 1
