"""SAMPLERS: the registry, sampler name → :class:`~bayes_attn.samplers.base.Sampler`, in the order of
:data:`~bayes_attn.samplers.settings.SAMPLER_NAMES` (imports NumPyro, so it loads on first use)."""

from __future__ import annotations

from . import collapsed, full, full_token, wishart
from .base import Sampler
from .settings import SAMPLER_NAMES

SAMPLERS: dict[str, Sampler] = {m.SAMPLER.name: m.SAMPLER for m in (full, full_token, collapsed, wishart)}
if tuple(SAMPLERS) != SAMPLER_NAMES:
    raise ImportError(f"the sampler modules {tuple(SAMPLERS)} disagree with SAMPLER_NAMES {SAMPLER_NAMES}")
