"""SAMPLERS: the registry, sampler name → :class:`~bayes_attn.samplers._base.Sampler`, in the order of
:data:`~bayes_attn.samplers._settings.SAMPLER_NAMES` (all but ``"auto"``, which chooses among them;
imports NumPyro, so it loads on first use)."""

from __future__ import annotations

from . import _collapsed as collapsed
from . import _full as full
from . import _full_token as full_token
from . import _laplace as laplace
from . import _wishart as wishart
from ._base import Sampler
from ._settings import AUTO, SAMPLER_NAMES

__all__ = ["SAMPLERS"]

SAMPLERS: dict[str, Sampler] = {s.name: s for s in (full.SAMPLER, full_token.SAMPLER, collapsed.SAMPLER,
                                                    wishart.SAMPLER, laplace.IS_SAMPLER, laplace.MH_SAMPLER)}
"""Sampler name → :class:`~bayes_attn.samplers._base.Sampler`: ``full``, ``full-token``, ``collapsed``, ``wishart``,
``laplace-is``, ``laplace-mh`` (docs/samplers.md says which to use)."""
if (*SAMPLERS, AUTO) != SAMPLER_NAMES:
    raise ImportError(f"the sampler modules {tuple(SAMPLERS)} disagree with SAMPLER_NAMES {SAMPLER_NAMES}")
