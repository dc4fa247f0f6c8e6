"""A memory estimate before sampling, so that a run too big for the machine fails at once.

The estimate counts, per chain, ``WORKING_COPIES`` copies of the latent vector
(NUTS keeps position, momentum, gradient and the tree's end points; warm-up
keeps the mass-matrix statistics), the stored draws, and the data. Shapes come
from tracing the model abstractly (``jax.eval_shape``): nothing is allocated.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import jax
import numpy as np
from numpyro import handlers

from ._base import Sampler, SamplerInputs, Storage
from ._laplace import proposal_form
from ._settings import SamplerSettings

__all__ = ["HEADROOM", "TooBigError", "WORKING_COPIES", "abstract_build", "available_bytes", "check_fits",
           "check_guided_draws", "check_memory", "estimate_bytes", "guided_bytes", "latent_sizes"]

WORKING_COPIES = 30
"""Latent-sized arrays per chain held while sampling (a generous bound; NumPyro's NUTS keeps about 10)."""

log = logging.getLogger(__name__)

HEADROOM = 0.8
"""Fraction of the available memory a run may plan to use."""


def latent_sizes(model: Callable, args: tuple, observables: Callable, inputs: SamplerInputs,
                 options: Storage) -> tuple[int, int]:
    """``(latent, stored)``: numbers of sampled entries and of stored observables per draw (no allocation);
    ``args``: arrays, or their shapes (:func:`abstract_build`)."""

    def shapes(key, args):
        tr = handlers.trace(handlers.seed(model, key)).get_trace(*args)
        z = {k: s["value"] for k, s in tr.items() if s["type"] == "sample" and not s["is_observed"]}
        return z, observables(z, inputs, options)

    z, obs = jax.eval_shape(shapes, jax.random.key(0), args)
    count = lambda tree: sum(math.prod(a.shape) for a in jax.tree.leaves(tree))  # noqa: E731
    return count(z), count(obs)


def abstract_build(smp: Sampler, inputs: SamplerInputs) -> tuple[Callable, tuple]:
    """``smp.build(inputs)`` with the arguments' shapes in place of the arrays: nothing is computed (a kernel
    tensor ``C`` ``[D, D, P, P]`` is not built just to be measured)."""
    built = {}

    def args_of(xi, y):
        built["model"], args = smp.build(inputs._replace(xi=xi, y=y))
        return args

    args = jax.eval_shape(args_of, inputs.xi, inputs.y)
    return built["model"], args


def estimate_bytes(latent: int, stored: int, inputs: SamplerInputs, cfg: SamplerSettings, options: Storage) -> int:
    """Bytes a run needs: working copies and kept draws per chain, plus the data."""
    item = np.dtype(cfg.dtype).itemsize
    P = inputs.y.shape[0]
    P_test = 0 if inputs.xi_test is None else inputs.xi_test.shape[0]
    N1, N0 = inputs.net.widths[0], inputs.net.N0
    per_draw = stored + P + P_test + (N1 * N0 if options.keep_weights else 0)
    kept = cfg.num_samples // cfg.thinning
    data = inputs.xi.size + (0 if inputs.xi_test is None else inputs.xi_test.size)
    return item * (cfg.num_chains * (WORKING_COPIES * latent + kept * per_draw) + data)


def available_bytes() -> int | None:
    """Memory free for this process: the accelerator's limit on GPU/TPU, else Linux ``MemAvailable``."""
    device = jax.devices()[0]
    if device.platform != "cpu":
        stats = device.memory_stats() or {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class TooBigError(ValueError):
    """A run too big for the memory: bad input, refused before it is computed."""


def check_memory(need: int, available: int | None, what: str) -> None:
    """Raise :class:`TooBigError` (a ``ValueError``) when ``need`` bytes exceed :data:`HEADROOM` of ``available``;
    else log the estimate."""
    log.info(f"{what}: about {need / 2**30:.3g} GiB" + ("" if available is None else
                                                       f" of {available / 2**30:.3g} GiB available"))
    if available is not None and need > HEADROOM * available:
        raise TooBigError(
            f"{what} needs about {need / 2**30:.3g} GiB but {available / 2**30:.3g} GiB are available: "
            "use a smaller width, fewer chains or draws, thinning, float32, or the 'wishart' sampler "
            "(its cost does not grow with width)"
        )


def check_fits(smp: Sampler, inputs: SamplerInputs, cfg: SamplerSettings, options: Storage,
               built: tuple[Callable, tuple] | None = None) -> None:
    """Refuse (:class:`TooBigError`) sampling ``inputs`` with ``smp`` and ``cfg`` when it needs more than
    :data:`HEADROOM` of the available memory: :func:`guided_bytes` for a guided sampler, :func:`estimate_bytes`
    for NUTS. ``built``: ``smp.build(inputs)`` where the caller has it, else its shapes (:func:`abstract_build`)."""
    if smp.draw is not None:
        check_memory(guided_bytes(inputs, cfg), available_bytes(),
                     f"sampling with {cfg.name!r} ({cfg.num_chains} chains × {cfg.guided_draws} draws)")
        return
    model, args = abstract_build(smp, inputs) if built is None else built
    assert smp.observables is not None  # a NUTS sampler's (only guided samplers have none)
    latent, stored = latent_sizes(model, args, smp.observables, inputs, options)
    check_memory(estimate_bytes(latent, stored, inputs, cfg, options), available_bytes(),
                 f"sampling with {cfg.name!r} ({latent} latent dimensions, {cfg.num_chains} chains)")


def guided_bytes(inputs: SamplerInputs, cfg: SamplerSettings) -> int:
    """Bytes a guided sampler (``laplace-is``, ``laplace-mh``) needs: per proposal its coordinates (at most
    ``D² + D`` for every level, a generous bound), its weight and the stored observables (``U`` and the levels
    above, ``f_train``, ``f_test``), twice (proposals and kept draws), plus the data and the proposals' kernel
    basis (:func:`~bayes_attn.samplers._laplace.proposal_form`)."""
    item = np.dtype(cfg.dtype).itemsize
    P, D = inputs.y.shape[0], inputs.xi.shape[1]
    P_test = 0 if inputs.xi_test is None else inputs.xi_test.shape[0]
    per_draw = 2 * (D * D + D) * inputs.net.L + 1 + P + P_test
    draws = cfg.num_chains * (cfg.num_warmup + cfg.guided_draws)
    data = inputs.xi.size + (0 if inputs.xi_test is None else inputs.xi_test.size)
    proposal_basis = 0
    if proposal_form(D, P, inputs.xi.shape[2], item) == "C":  # the folded C, and C [D, D, P, P] in float64 once
        proposal_basis = D * (D + 1) // 2 * P * P * item + D * D * P * P * 8
    return item * (2 * draws * per_draw + data) + proposal_basis


def check_guided_draws(cfg: SamplerSettings, what: str = "sampling") -> None:
    """Refuse (:class:`TooBigError`) an explicit ``guided_samples`` whose draws cannot fit whatever the problem:
    a lower bound of :func:`guided_bytes` (one coordinate and one weight per proposal), checked before anything
    is computed, where the problem's sizes are not known yet (``prune`` before training)."""
    if cfg.guided_samples is None or cfg.name not in ("laplace-is", "laplace-mh", "auto"):
        return
    need = np.dtype(cfg.dtype).itemsize * 2 * cfg.num_chains * (cfg.num_warmup + cfg.guided_draws)
    available = available_bytes()
    if available is not None and need > HEADROOM * available:
        raise TooBigError(f"{what}: guided_samples={cfg.guided_samples} cannot be honoured: its draws alone need "
                          f"over {need / 2**30:.3g} GiB but {available / 2**30:.3g} GiB are available; use fewer "
                          "guided_samples or chains")
