"""``"full"``: NUTS over every weight, ``f`` summed over paths (THEORY.md §2).

``f = sum_pi w_pi · V0 xi_pi / sqrt(N1 N0 D)`` with path inputs ``xi``
``[P, D, N0]`` computed once; the same posterior as ``"full-token"``.
"""

from __future__ import annotations

from functools import partial

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from ..network import effective_weights, forward_from_xi
from .base import Options, Sampler, SamplerInputs, input_projection, no_conditional, upper, upper_weights, weight_observables


def model(xi, y, *, heads, widths, variances, temperature):
    """Priors of §1; ``y ~ Normal(f, temperature)`` with ``f`` from ``xi`` ``[P, D, N0]``."""
    dtype = xi.dtype
    V0 = input_projection(xi.shape[2], widths, variances, dtype)
    V, a = upper_weights(heads, widths, variances, dtype)
    f = forward_from_xi(xi, V0, effective_weights(V, a, widths))
    numpyro.sample("y", dist.Normal(f, jnp.sqrt(jnp.asarray(temperature, dtype))), obs=y)


def build(inputs: SamplerInputs):
    return partial(model, **inputs.consts()), (inputs.xi, inputs.y)


def observables(z: dict, inputs: SamplerInputs, options: Options) -> dict:
    """Order parameters and ``f_train``, ``f_test`` of one draw of all weights."""
    out = weight_observables(z, inputs, options)
    V, a = upper(z, inputs.net.L)
    w = effective_weights(V, a, inputs.net.widths)
    out["f_train"] = forward_from_xi(inputs.xi, z["V0"], w)
    if inputs.xi_test is not None:
        out["f_test"] = forward_from_xi(inputs.xi_test, z["V0"], w)
    return out


SAMPLER = Sampler(
    name="full",
    description="NUTS over all weights, f summed over paths from precomputed path inputs",
    draws_weights=True,
    model=model,
    build=build,
    observables=observables,
    conditional=no_conditional,
)
