"""Posterior samplers behind one interface (THEORY.md §5, §7).

Every sampler is a module with the same surface (:class:`Sampler`): a NumPyro
``model``, ``build`` (model and arguments for NUTS), ``observables`` (per-draw
invariant observables) and ``conditional`` (exact conditional draws
afterwards). Adding a sampler is one module plus one entry in :data:`SAMPLERS`.

==============  ==============================================================
``full``        all weights; ``f`` summed over paths
``full-token``  all weights; the network run over tokens (the paper's form)
``collapsed``   upper weights, ``V0`` integrated out
``wishart``     order parameters only: Bartlett factors of the Wishart chain (§7)
==============  ==============================================================
"""

from __future__ import annotations

from . import collapsed, full, full_token, wishart
from .base import Options, Sampler, SamplerInputs, conditional_outputs, prepare
from .settings import CHAIN_METHODS, DEFAULT_SAMPLER, SamplerSettings

SAMPLERS: dict[str, Sampler] = {m.SAMPLER.name: m.SAMPLER for m in (full, full_token, collapsed, wishart)}
"""The registry: sampler name → :class:`Sampler`."""


def get(name: str) -> Sampler:
    """The sampler called ``name`` (a ``ValueError`` lists the choices)."""
    if name not in SAMPLERS:
        raise ValueError(f"sampler must be one of {list(SAMPLERS)}, got {name!r}")
    return SAMPLERS[name]


__all__ = [
    "CHAIN_METHODS",
    "DEFAULT_SAMPLER",
    "SAMPLERS",
    "SamplerSettings",
    "Options", "Sampler", "SamplerInputs", "conditional_outputs", "get", "prepare"]
