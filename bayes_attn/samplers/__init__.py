"""Posterior samplers behind one interface (docs/theory.md §5, §7).

Every sampler is a module with the same surface (:class:`Sampler`): a NumPyro
``model``, ``build`` (model and arguments for NUTS), ``observables`` (per-draw
invariant observables) and ``conditional`` (exact conditional draws
afterwards). Adding a sampler is one module plus one entry in :data:`SAMPLERS`.

==============  ==============================================================
``full``        all weights; ``f`` summed over paths
``full-token``  all weights; the network run over tokens (the paper's form)
``collapsed``   upper weights, ``V0`` integrated out
``wishart``     order parameters only: Bartlett factors of the Wishart chain (§7),
                started at the expansion's mode with its metric (§9)
``laplace-is``  importance sampling from the finite-width expansion, resampled (§9)
``laplace-mh``  independence Metropolis–Hastings with the same proposal (§9)
==============  ==============================================================

``"auto"`` (a settings value, handled by :func:`bayes_attn.sample_posterior`)
tries ``laplace-is``, ``laplace-mh`` and ``wishart`` in turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

from ._settings import CHAIN_METHODS, DEFAULT_SAMPLER, SAMPLER_DESCRIPTIONS, SAMPLER_NAMES, SamplerSettings

if TYPE_CHECKING:
    from ._base import Sampler, SamplerInputs, Storage, conditional_outputs, prepare  # noqa: F401
    from ._blocks import Stopping  # noqa: F401
    from ._nuts import mcmc  # noqa: F401

# Imported on first use (the samplers import NumPyro; settings and the command's options do not need them).
__getattr__, _lazy_dir, _ = lazy_loader.attach(
    __name__,
    submod_attrs={"_base": ["Storage", "Sampler", "SamplerInputs", "conditional_outputs", "prepare"],
                  "_blocks": ["Stopping"], "_nuts": ["mcmc"], "_registry": ["SAMPLERS"]},
)


def __dir__() -> list[str]:
    """The module's names and those imported on first use (so that ``dir`` and autodoc see both)."""
    return sorted(set(globals()) | set(_lazy_dir()))


def get(name: str):
    """The :class:`Sampler` called ``name`` (a ``ValueError`` lists the choices)."""
    from ._registry import SAMPLERS as samplers

    if name not in samplers:
        raise ValueError(f"sampler must be one of {list(samplers)}, got {name!r}")
    return samplers[name]


__all__ = [
    "CHAIN_METHODS",
    "DEFAULT_SAMPLER",
    "SAMPLER_DESCRIPTIONS",
    "SAMPLER_NAMES",
    "SAMPLERS",
    "SamplerSettings",
    "Storage", "Sampler", "SamplerInputs", "Stopping", "conditional_outputs", "get", "mcmc", "prepare"]
