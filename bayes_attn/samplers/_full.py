"""``"full"``: NUTS over every weight, ``f`` summed over paths (docs/theory.md §2).

``f = sum_pi w_pi · V0 xi_pi / sqrt(N1 N0 D)`` with path inputs ``xi``
``[P, D, N0]`` computed once; the same posterior as ``"full-token"``.
"""

from __future__ import annotations

from functools import partial

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from ..network import effective_weights, forward_from_xi
from ._base import Sampler, SamplerInputs, full_observables, input_projection, no_conditional, upper_weights
from ._settings import SAMPLER_DESCRIPTIONS

__all__ = ["SAMPLER", "build", "model"]


def model(xi, y, *, heads, widths, variances, temperature):
    """Priors of §1; ``y ~ Normal(f, temperature)`` with ``f`` from ``xi`` ``[P, D, N0]``."""
    dtype = xi.dtype
    V0 = input_projection(xi.shape[2], widths, variances, dtype)
    V, a = upper_weights(heads, widths, variances, dtype)
    f = forward_from_xi(xi, V0, effective_weights(V, a, widths))
    numpyro.sample("y", dist.Normal(f, jnp.sqrt(jnp.asarray(temperature, dtype)), validate_args=False), obs=y)


def build(inputs: SamplerInputs):
    return partial(model, **inputs.consts()), (inputs.xi, inputs.y)


SAMPLER = Sampler(
    name="full",
    description=SAMPLER_DESCRIPTIONS["full"],
    draws_weights=True,
    model=model,
    build=build,
    observables=full_observables,
    conditional=no_conditional,
    labels_arg=1,
)
