"""Timing shared by the sampler benchmarks (``bench_sampler.py``, ``gpu_samplers.py``).

:class:`CompileTimer` separates JAX compilation from run time;
:func:`timed_nuts` runs NUTS for a registered sampler with warm-up, sampling
and the exact conditional draws timed apart. Needs no ArviZ (GPU machines).
"""

from __future__ import annotations

import time

import jax
from bayes_attn.samplers import SamplerSettings, nuts

COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


class CompileTimer:
    """Collects JAX trace/lower/compile intervals (wall clock) via ``jax.monitoring``.

    Nested events overlap; :meth:`seconds_in` returns the length of the union
    of the intervals inside ``[t0, t1]``.
    """

    def __init__(self):
        import jax.monitoring

        self.intervals: list[tuple[float, float]] = []
        try:
            jax.monitoring.register_event_duration_secs_listener(self._listen)
        except AttributeError:  # very old JAX: compile time not separated
            pass

    def _listen(self, event: str, duration: float, **kwargs) -> None:
        if event in COMPILE_EVENTS:
            end = time.perf_counter()
            self.intervals.append((end - duration, end))

    def seconds_in(self, t0: float, t1: float) -> float:
        iv = sorted((max(a, t0), min(b, t1)) for a, b in self.intervals if b > t0 and a < t1)
        total, cur = 0.0, None
        for a, b in iv:
            if cur is None or a > cur[1]:
                if cur is not None:
                    total += cur[1] - cur[0]
                cur = [a, b]
            else:
                cur[1] = max(cur[1], b)
        return total + (0.0 if cur is None else cur[1] - cur[0])


def timed_nuts(smp, inputs, model, args, options, *, num_warmup: int, num_samples: int, num_chains: int,
               chain_method: str, target_accept: float, seed: int, extra_fields: tuple[str, ...],
               max_tree_depth: int = 10):
    """NUTS as ``sample_posterior`` runs it (built by :mod:`bayes_attn.samplers.nuts`), with the phases timed apart.

    Returns ``(mcmc, draws, extra, (t0, t1, t2, t3))``: ``draws`` include the
    sampler's conditional draws; warm-up is ``[t0, t1]``, sampling ``[t1, t2]``,
    the conditional draws ``[t2, t3]`` (``time.perf_counter`` seconds).
    """
    settings = SamplerSettings(name=smp.name, num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                               seed=seed, dtype=str(inputs.dtype), target_accept=target_accept,
                               max_tree_depth=max_tree_depth)
    mcmc = nuts.mcmc(smp, settings, model, inputs, options, chain_method=chain_method)
    k_mcmc, k_cond = jax.random.split(jax.random.key(seed))
    t0 = time.perf_counter()
    mcmc.warmup(k_mcmc, *args, extra_fields=extra_fields)
    jax.block_until_ready(mcmc.post_warmup_state)
    t1 = time.perf_counter()
    mcmc.run(mcmc.post_warmup_state.rng_key, *args, extra_fields=extra_fields)
    draws = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    t2 = time.perf_counter()
    draws |= jax.block_until_ready(smp.conditional(draws, k_cond, inputs, options))
    t3 = time.perf_counter()
    return mcmc, draws, mcmc.get_extra_fields(group_by_chain=True), (t0, t1, t2, t3)
