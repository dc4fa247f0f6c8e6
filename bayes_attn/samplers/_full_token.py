"""``"full-token"``: NUTS over every weight, the network of docs/theory.md §1 run over tokens.

The paper's form, line by line: ``z0 = V0 x / sqrt(N0)``, attention layers,
``f = a · zL / sqrt(Na)``. Same posterior as ``"full"``, much slower.
"""

from __future__ import annotations

from functools import partial

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from ..network import Weights, forward_token
from ._base import Sampler, SamplerInputs, full_observables, input_projection, no_conditional, upper_weights
from ._settings import SAMPLER_DESCRIPTIONS

__all__ = ["SAMPLER", "build", "model"]


def model(x, omegas, y, *, heads, widths, variances, temperature):
    """``x`` ``[P, T, N0]``; ``omegas`` the fixed attention of every layer (``Network.attention_matrices``)."""
    dtype = x.dtype
    V0 = input_projection(x.shape[2], widths, variances, dtype)
    V, a = upper_weights(heads, widths, variances, dtype)
    f = forward_token(omegas, x, Weights(V0, V, a), widths)
    numpyro.sample("y", dist.Normal(f, jnp.sqrt(jnp.asarray(temperature, dtype)), validate_args=False), obs=y)


def build(inputs: SamplerInputs):
    dtype = inputs.dtype
    x = jnp.asarray(inputs.x, dtype)
    omegas = tuple(o.astype(dtype) for o in inputs.net.attention_matrices(inputs.x))
    return partial(model, **inputs.consts()), (x, omegas, inputs.y)


SAMPLER = Sampler(
    name="full-token",
    description=SAMPLER_DESCRIPTIONS["full-token"],
    draws_weights=True,
    model=model,
    build=build,
    observables=full_observables,
    conditional=no_conditional,
    labels_arg=2,
)
