"""Sampling in blocks until the diagnostics and the targets hold, or the budget is spent.

A sampler whose :class:`~bayes_attn.samplers.SamplerSettings` has a target or a budget (``target_ess``,
``target_precision``, ``max_rhat``, ``max_samples``, ``max_seconds``: :attr:`SamplerSettings.in_blocks`) draws one
block (``num_samples`` per chain; a guided sampler ``guided_samples``), judges all draws so far, and draws another
block while a reason remains and the budget allows one more:

- NUTS continues each chain from its last state with its adapted step size and metric, so two blocks are the
  draws of one run twice as long, bit for bit (tested);
- a guided sampler draws a block of fresh proposals (another key, the same expansion), resampled on its own.

The reasons to continue: the rule's R-hat and ESS (:func:`bayes_attn.diagnostics.convergence_failures`), R-hat
above a user's ``max_rhat``, a bulk ESS below ``target_ess``, and the caller's own (the comparison's precision:
:func:`bayes_attn.experiment.evaluate`). Divergences, BFMI and a Pareto ``k̂`` are not: more draws of the same
chains do not mend them. A failed warm-up is mended instead: where the first block of NUTS has a divergence, an
acceptance more than :data:`ACCEPT_TOLERANCE` below ``target_accept`` (or near 1) or an R-hat above
:data:`~bayes_attn.diagnostics.GROSS_RHAT`, its draws are dropped and the warm-up runs again, twice as long, from
the best chain's last state (at most :data:`REWARMS` times; the budget counts every draw and second of it).
:class:`Stopping` records what happened; a run that stops with a reason left is inconclusive ("budget spent",
:func:`bayes_attn.diagnostics.diagnostic_failures`).
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

from ._settings import SamplerSettings

log = logging.getLogger(__name__)

__all__ = ["ACCEPT_TOLERANCE", "BLOCK_SALT", "Block", "MAX_ACCEPT", "REWARMS", "REWARM_SALT", "Stopping", "best_chain",
           "guided", "join", "nuts", "nuts_rewarm", "reasons", "run", "warmup_failures"]

BLOCK_SALT = 1 << 20
"""Block ``b > 0`` of a guided sampler draws with ``fold_in(key, BLOCK_SALT + b)`` (far from the keys it folds
in itself)."""
REWARM_SALT = 1 << 21
"""The warm-up run again for the ``r``-th time draws with ``fold_in(key, REWARM_SALT + r)``."""
REWARMS = 3
"""Times a failed warm-up is run again (twice as long each time) before the run goes on as it is."""
ACCEPT_TOLERANCE = 0.15
"""A first block whose mean acceptance is more than this below ``target_accept`` failed its warm-up (a step size
too large for the posterior); one above :data:`MAX_ACCEPT` too (a step size collapsed to nothing)."""
MAX_ACCEPT = 0.995


class Block(NamedTuple):
    """Draws ``{name: [chain, draw, ...]}``, sample statistics ``{name: [chain, draw]}`` and attributes."""

    draws: dict
    stats: dict
    attrs: dict


def nuts(mcmc, key, args: tuple, extra_fields: tuple, stats_of: Callable,
         init_params: dict | None = None) -> Callable[[int], Block]:
    """Block ``b`` of NumPyro's ``mcmc`` on the model's ``args``: block 0 from ``key`` (warm-up first, from
    ``init_params`` when given: unconstrained values ``[chain, ...]``), block ``b > 0`` continuing each chain from
    its last state (its key, position, step size and metric; no warm-up). ``block.last_positions()``: the chains'
    last unconstrained positions."""

    def block(b: int) -> Block:
        if b:
            mcmc.post_warmup_state = mcmc.last_state
            mcmc.run(mcmc.last_state.rng_key, *args, extra_fields=extra_fields)
        else:
            mcmc.run(key, *args, extra_fields=extra_fields, init_params=init_params)
        return Block(mcmc.get_samples(group_by_chain=True), stats_of(mcmc.get_extra_fields(group_by_chain=True)), {})

    block.last_positions = lambda: mcmc.last_state.z  # type: ignore[attr-defined]
    return block


def warmup_failures(stats: dict, target_accept: float, max_rhat: float, gross: float) -> list[str]:
    """Why the first block of NUTS (``stats``: :func:`bayes_attn.diagnostics.sample_stats`, ``[chain, draw]``)
    failed its warm-up: divergences, a mean acceptance more than :data:`ACCEPT_TOLERANCE` below ``target_accept``
    or above :data:`MAX_ACCEPT`, or ``max_rhat`` (its largest R-hat) above ``gross`` (the larger of
    :data:`~bayes_attn.diagnostics.GROSS_RHAT` and the rule's bound at the block's size: short blocks of healthy
    chains may pass 1.1)."""
    from .._internal.checks import versus

    out = []
    divergent = int(np.sum(stats["diverging"]))
    if divergent:
        out.append(f"{divergent} divergent transitions")
    accept = float(np.mean(stats["acceptance_rate"]))
    if accept < target_accept - ACCEPT_TOLERANCE or accept > MAX_ACCEPT:
        out.append(f"acceptance {accept:.2f} against target_accept={target_accept:g}")
    if not max_rhat <= gross:
        out.append("max R-hat {} > {}".format(*versus(max_rhat, gross)))
    return out


def nuts_rewarm(mcmc_of: Callable[[int], Any], first: Callable[[int], Block], program: tuple, cfg: SamplerSettings,
                judged: dict, restart: Callable[[], Any], gross_rhat: float) -> Rewarm:
    """:func:`run`'s ``rewarm`` for NUTS: a new warm-up of ``mcmc_of(warm_up_draws)`` (NumPyro's ``MCMC``), each
    chain from the best chain's last position (:func:`best_chain`) of the blocks so far (``first``'s, then the
    last warm-up's), ``max(num_warmup, block draws) · 2^(r+1)`` warm-up draws, key ``fold_in(key, REWARM_SALT + r)``;
    ``judged``: the diagnostics of the first block (its R-hat and bounds); ``gross_rhat``: the R-hat above which
    a warm-up failed (:data:`bayes_attn.diagnostics.GROSS_RHAT`, or the rule's bound where higher); ``program``:
    ``(key, args, extra_fields, stats_of)`` of :func:`nuts`; ``restart()`` is called before the new blocks start
    (what was kept of the dropped draws is dropped)."""
    current = [first]

    def rewarm(drawn: Block, r: int):
        bounds = [v for k, v in judged.items() if k.startswith("r_hat_bound[")]
        gross = float(f"{max([gross_rhat, *bounds]):.4g}")
        why = warmup_failures(drawn.stats, cfg.target_accept, judged["max_r_hat"], gross)
        if not why:
            return None
        chain = best_chain(drawn.stats, cfg.target_accept)
        import jax  # this module is read by the diagnostics, which need no JAX

        init = jax.tree.map(lambda v: np.repeat(np.asarray(v)[chain:chain + 1], cfg.num_chains, axis=0),
                            current[0].last_positions())  # type: ignore[attr-defined]
        warm = max(cfg.num_warmup, cfg.block_draws) * 2 ** (r + 1)
        key, args, extra_fields, stats_of = program
        current[0] = nuts(mcmc_of(warm), jax.random.fold_in(key, REWARM_SALT + r), args, extra_fields, stats_of,
                          init_params=init)
        restart()
        return current[0], f"{warm} warm-up draws from chain {chain} after: {'; '.join(why)}"

    return rewarm


def best_chain(stats: dict, target_accept: float) -> int:
    """The chain to run the warm-up again from: the fewest divergences, then the mean acceptance nearest
    ``target_accept``."""
    divergent = np.sum(np.asarray(stats["diverging"]), axis=1)
    off = np.abs(np.mean(np.asarray(stats["acceptance_rate"]), axis=1) - target_accept)
    return int(np.lexsort((off, divergent))[0])


def guided(draw: Callable, inputs, cfg: SamplerSettings, key, **options) -> Callable[[int], Block]:
    """Block ``b`` of a guided sampler's ``draw`` (:mod:`bayes_attn.samplers._laplace`): block 0 from ``key``, block
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
    rewarmed: tuple[str, ...] = ()
    """Each warm-up run again: its length, the chain it started from and why the one before failed."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Stopping:
        d = json.loads(text)
        return cls(**(d | {"unmet": tuple(d.get("unmet", ())), "rewarmed": tuple(d.get("rewarmed", ()))}))

    def __str__(self) -> str:
        end = "targets met" if self.met else f"budget spent ({self.budget}): " + "; ".join(self.unmet)
        plural = "s" * (self.blocks > 1)
        again = "".join(f"; warm-up again ({r})" for r in self.rewarmed)
        return f"{self.blocks} block{plural}, {self.draws} draws per chain, {self.seconds:.1f} s{again}: {end}"


def reasons(diagnostics: dict[str, float], cfg: SamplerSettings) -> list[str]:
    """The user's own targets in ``diagnostics`` (:meth:`bayes_attn.diagnostics.Summary.diagnostics`) to draw
    another block, beside the rule's: R-hat above ``cfg.max_rhat``, bulk ESS below ``cfg.target_ess``."""
    out = []
    rhat = diagnostics.get("max_r_hat", 1.0)
    if cfg.max_rhat is not None and not rhat <= cfg.max_rhat:
        out.append(f"max R-hat {rhat:.4g} > max_rhat={cfg.max_rhat:g}")
    ess = diagnostics.get("min_ess_bulk", math.inf)
    if cfg.target_ess is not None and not ess >= cfg.target_ess:
        out.append(f"min bulk ESS {ess:.4g} < target_ess={cfg.target_ess:g}")
    return out


Rewarm = Callable[[Block, int], "tuple[Callable[[int], Block], str] | None"]
"""``rewarm(first, r)``: given the first block and the count of warm-ups run again so far, the blocks of a new
warm-up and what it is (``"80 warm-up draws from chain 2 after: 3 divergent transitions"``), or ``None`` when
the first block's warm-up did not fail."""


def run(block: Callable[[int], Block], judge: Callable[[Block], tuple[list[str], Any]], cfg: SamplerSettings,
        t0: float, rewarm: Rewarm | None = None) -> tuple[Any, Stopping]:
    """Draw ``block(0)``, ``block(1)``, ... (joined) until ``judge`` of all draws so far gives no reason, or the
    budget is spent: the next block would pass ``cfg.block_cap`` blocks (every block drawn counts, a dropped one
    too) or ``cfg.max_seconds`` (counted from ``t0``, the next block as long as the last one with its judging).
    ``rewarm``: after a first block whose warm-up failed, its draws are dropped and the blocks start again from
    the new warm-up (at most :data:`REWARMS` times, while the budget allows). Returns what ``judge`` made of the
    last draws, and the :class:`Stopping`."""
    step, cap = cfg.block_draws, cfg.block_cap
    rewarmed: list[str] = []
    drawn = block(0)
    spent, b = 1, 1  # blocks drawn in all, and of the draws kept
    before = 0.0  # seconds when the last block started
    while True:
        unmet, judged = judge(drawn)
        seconds = time.perf_counter() - t0
        budget = ""
        if cap is not None and spent + 1 > cap:
            budget = f"{spent * step} of {cfg.draws_cap}" + (f", {(spent - b) * step} of them in warm-ups that "
                                                            "failed" if spent > b else "")
        elif cfg.max_seconds is not None and seconds + seconds - before > cfg.max_seconds:  # at the last block's pace
            budget = f"{seconds:.0f} s, another block would pass max_seconds={cfg.max_seconds:g}"
        again = rewarm(drawn, len(rewarmed)) if rewarm is not None and b == 1 and len(rewarmed) < REWARMS \
            and not budget else None
        if again is not None:
            block, why = again
            rewarmed.append(why)
            log.info(f"warm-up again: {why}")
            before = time.perf_counter() - t0
            drawn = block(0)
            spent += 1
            continue
        if not unmet or budget:
            return judged, Stopping(b, b * step, seconds, not unmet, tuple(unmet), budget if unmet else "",
                                    tuple(rewarmed))
        log.info(f"block {b}: {b * step} draws per chain in {seconds:.0f} s; another block for: {'; '.join(unmet)}")
        before = time.perf_counter() - t0
        drawn = join(drawn, block(b))
        b += 1
        spent += 1
