"""NUTS and MCMC from ``(Sampler, SamplerSettings)``: the one place they are built.

``sample_posterior``, ``calibration`` and the benchmarks all build their NUTS
kernels here, so every setting of :class:`~bayes_attn.samplers.SamplerSettings`
(``target_accept``, ``max_tree_depth``, chains, thinning, ...) reaches NumPyro
the same way, and every chain starts where the sampler's ``init_strategy`` says (a prior draw,
``init_to_sample``, unless the sampler names a cheaper start), or, for ``wishart`` with
``SamplerSettings.start = "expansion"``, at the mode of the finite-width expansion with its dense metric
(:class:`~bayes_attn.samplers._base.Start`, docs/theory.md §9).

- :func:`kernel`: the NUTS kernel of a model;
- :func:`mcmc`: ``numpyro.infer.MCMC`` over that kernel, the sampler's
  ``observables`` as per-draw post-processing;
- :func:`functional`: NumPyro's functional NUTS (``init_kernel``,
  ``sample_kernel``) for a potential, with the same settings (for ``vmap``-ed
  replications, :mod:`bayes_attn.calibration`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial

import jax
from numpyro.infer import MCMC, NUTS, init_to_value
from numpyro.infer.hmc import hmc

from ._base import Sampler, SamplerInputs, Start, Storage
from ._settings import SamplerSettings

__all__ = ["functional", "kept", "kernel", "mcmc", "one_program", "resolve_chain_method", "start_of"]


def kernel(model: Callable, settings: SamplerSettings, init_strategy: Callable, start: Start | None = None) -> NUTS:
    """NUTS on ``model`` with ``settings.target_accept`` and ``settings.max_tree_depth``, started by ``init_strategy``,
    or, given a :class:`~bayes_attn.samplers._base.Start`, at its values with its dense metric (step size adapted)."""
    if start is None:
        return NUTS(model, target_accept_prob=settings.target_accept, max_tree_depth=settings.max_tree_depth,
                    init_strategy=init_strategy)
    return NUTS(model, target_accept_prob=settings.target_accept, max_tree_depth=settings.max_tree_depth,
                init_strategy=init_to_value(values=start.values), dense_mass=[start.block],
                inverse_mass_matrix={start.block: start.inverse_mass_matrix}, adapt_mass_matrix=False)


def mcmc(sampler: Sampler, settings: SamplerSettings, model: Callable, inputs: SamplerInputs, options: Storage, *,
         progress_bar: bool = False, one_compile: bool = True, start: Start | None = None) -> MCMC:
    """``MCMC`` with the warm-up, draws, chains, thinning and chain method of ``settings`` (the chain method
    resolved, not ``"auto"``: e.g. by ``resolve_chain_method``); each kept draw goes through
    ``sampler.observables``; ``start``: see :func:`kernel`.

    ``"sequential"`` chains run as :func:`one_program` (compiled once for all chains) unless ``one_compile``
    is false (NumPyro's own loop, which compiles per chain; kept for the benchmark)."""
    chain_method = settings.chain_method
    if chain_method == "auto":
        raise ValueError("mcmc needs a resolved chain method (resolve_chain_method), got 'auto'")
    one = one_compile and chain_method == "sequential" and settings.num_chains > 1
    method: str | Callable = one_program if one else chain_method
    if settings.in_blocks and settings.num_chains > 1 and chain_method in ("parallel", "sequential"):
        method = kept(jax.pmap if chain_method == "parallel" else lambda c: jax.jit(one_program(c)))
    assert sampler.observables is not None  # a NUTS sampler's (only guided samplers have none)
    return MCMC(
        kernel(model, settings, sampler.init_strategy, start),
        num_warmup=settings.num_warmup,
        num_samples=settings.num_samples,
        num_chains=settings.num_chains,
        thinning=settings.thinning,
        chain_method=method,
        postprocess_fn=partial(_observables, sampler.observables, inputs=inputs, options=options),
        progress_bar=progress_bar and isinstance(method, str),  # NumPyro shows no bar for a callable (and warns)
    )


def one_program(chain: Callable) -> Callable:
    """NumPyro's ``"sequential"`` chain method as one program: the chains one after the other under
    ``lax.map``, so NUTS is compiled once for all chains (NumPyro's own ``"sequential"`` compiles per chain)."""
    return lambda inits: jax.lax.map(chain, inits)


def kept(transform: Callable) -> Callable:
    """A chain method for NumPyro that runs the chains as ``transform(chain)`` (``jax.pmap``, or ``one_program``
    jitted) and keeps that program on the ``MCMC`` object, one per collection range and arguments: a run
    continued in blocks (:mod:`bayes_attn.samplers._blocks`) compiles its continuation once, not once per block
    (NumPyro passes its ``_single_chain_mcmc`` with the run's arguments bound, a new function every run)."""

    def method(chain: Callable) -> Callable:
        owner, kw = chain.func.__self__, chain.keywords  # type: ignore[attr-defined]
        programs = owner.__dict__.setdefault("_bayes_attn_programs", {})
        # the arguments by identity (the kept programs hold them), the rest by value
        key = (tuple(sorted(owner._collection_params.items())), tuple(map(id, jax.tree.leaves((kw["args"],
               kw["kwargs"])))), kw["collect_fields"], kw["remove_sites"])
        if key not in programs:
            programs[key] = transform(chain)
        return programs[key]

    return method


def start_of(smp: Sampler, cfg: SamplerSettings, inputs: SamplerInputs, attrs: dict, given: dict) -> tuple:
    """The expansion's start of ``smp`` when ``cfg.start`` asks for it and the sampler has one, else ``None``;
    ``attrs`` with ``start`` (what the chains started from) added; ``given``: ``smp.start``'s keywords."""
    if cfg.start != "expansion" or smp.start is None:
        return None, attrs | {"start": "prior"}
    try:
        return smp.start(inputs, **given), attrs | {"start": "expansion"}
    except ValueError as err:
        warnings.warn(f"the chains start from the prior: {err}", RuntimeWarning, stacklevel=4)
        return None, attrs | {"start": f"prior ({err})"}


def _observables(observables: Callable, z: dict, *, inputs: SamplerInputs, options: Storage) -> dict:
    return observables(z, inputs, options)


def functional(potential_fn_gen: Callable, settings: SamplerSettings) -> tuple[Callable, Callable]:
    """``(init_kernel, sample_kernel)`` of NumPyro's functional NUTS for ``potential_fn_gen`` (a function of the
    model arguments), ``init_kernel`` with ``settings.target_accept`` and ``settings.max_tree_depth`` bound."""
    init_kernel, sample_kernel = hmc(potential_fn_gen=potential_fn_gen, algo="NUTS")
    return (partial(init_kernel, target_accept_prob=settings.target_accept, max_tree_depth=settings.max_tree_depth),
            sample_kernel)


def resolve_chain_method(chain_method: str, num_chains: int) -> str:
    """NumPyro's chain method for ``"auto"``: ``parallel`` with a device per chain, ``vectorized`` on an
    accelerator, else ``sequential`` (see :mod:`bayes_attn._internal.threads`); other values are returned as they
    are."""
    if chain_method != "auto":
        return chain_method
    if jax.local_device_count() >= num_chains:
        return "parallel"
    return "sequential" if jax.default_backend() == "cpu" else "vectorized"
