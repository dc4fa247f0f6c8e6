"""``"collapsed"``: NUTS over the upper weights with ``V0`` integrated out (docs/theory.md §5).

Marginal likelihood ``Y ~ Normal(0, K(U(w)) + temperature I)`` with
``U = w w^T / N1``; afterwards ``f`` (or, with ``keep_weights``, ``V0`` itself)
is drawn exactly from its Gaussian conditional for every draw.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpyro

from .. import gp
from ..kernels import kernel_from_C, path_kernel_from_xi
from ..network import effective_weights, forward_from_xi
from ._base import (
    Sampler,
    SamplerInputs,
    Storage,
    conditional_outputs,
    draw_keys,
    full_observables,
    likelihood_data,
    likelihood_form,
    map_batches,
    observation,
    upper,
    upper_weights,
    weight_observables,
)
from ._settings import SAMPLER_DESCRIPTIONS

__all__ = ["SAMPLER", "build", "conditional", "conditional_V0", "model"]


def model(data, y, *, heads, widths, variances, temperature, form="tensor"):
    """``Y ~ Normal(0, K(U) + temperature I)`` with ``U = w wᵀ / N1``; ``data`` as the likelihood's ``form`` reads it
    (:func:`~bayes_attn.samplers._base.likelihood_data`: ``C`` ``[D, D, P, P]`` or the path inputs ``[P, D, N0]``)."""
    V, a = upper_weights(heads, widths, variances, data.dtype)
    F = effective_weights(V, a, widths) / math.sqrt(widths[0])  # U = F Fᵀ, F [D, N1]
    numpyro.sample("y", observation(F @ F.T, F, data, form, variances[0], temperature), obs=y)


def build(inputs: SamplerInputs):
    """The model with the likelihood's form chosen by shape (rank of ``U``: ``min(N1, D)``) and its data."""
    form = likelihood_form(inputs, inputs.net.widths[0])
    if form == "woodbury" and inputs.net.widths[0] > inputs.net.D:  # the factor F has N1 > D columns
        form = "xi"
    return partial(model, form=form, **inputs.consts()), (likelihood_data(inputs, form), inputs.y)


def conditional_V0(draws: dict, key: jax.Array, inputs: SamplerInputs, start: int = 0) -> jax.Array:
    """Raw ``V0`` draws ``[chain, draw, N1, N0]`` from ``V0 | upper weights, Y`` (pathwise).

    ``V0 = V0' + s0² sum_mu alpha_mu df(x_mu)/dV0`` with ``V0'`` from the prior,
    ``alpha`` from :func:`bayes_attn.gp.pathwise_weights` and
    ``df(x_mu)/dV0 = sum_pi w_pi ⊗ xi_pi(x_mu) / sqrt(N1 N0 D)``.
    """
    net = inputs.net
    shape = draws["a"].shape[:2]
    flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in draws.items()}
    V, a = upper(flat, net.L)
    keys = draw_keys(key, shape, start)
    C = path_kernel_from_xi(inputs.xi, inputs.xi, net.variances[0])
    temperature = jnp.asarray(inputs.temperature, inputs.xi.dtype)
    L, widths = net.L, tuple(int(n) for n in net.widths)
    (out,) = map_batches(lambda *b: _V0_batch(b[:L], b[L], b[L + 1], (inputs.xi, C, inputs.y, temperature),
                                              s0sq=float(net.variances[0]), widths=widths),
                         (*V, a, keys), 64)
    return out.reshape(*shape, *out.shape[1:])


@partial(jax.jit, static_argnames=("s0sq", "widths"))
def _V0_batch(V: tuple[jax.Array, ...], a: jax.Array, keys: jax.Array, data: tuple, *, s0sq: float,
              widths: tuple[int, ...]) -> list[jax.Array]:
    """:func:`conditional_V0` for one batch of ``B`` draws (``V``, ``a``, a key each) given ``data`` ``(xi, C, y,
    temperature)``: ``[V0 [B, N1, N0]]``."""
    xi, C, y, temperature = data
    N1, N0, D = widths[0], xi.shape[2], xi.shape[1]

    def one(V, a, k):
        w = effective_weights(V, a, widths)
        k1, k2 = jax.random.split(k)
        V0p = math.sqrt(s0sq) * jax.random.normal(k1, (N1, N0), xi.dtype)
        eps = jnp.sqrt(temperature) * jax.random.normal(k2, y.shape, xi.dtype)
        alpha = gp.pathwise_weights(kernel_from_C(w @ w.T / N1, C), forward_from_xi(xi, V0p, w), y, eps, temperature)
        return V0p + s0sq * jnp.einsum("b,dn,bdi->ni", alpha, w, xi) / math.sqrt(N1 * N0 * D)

    return [jax.vmap(one)(V, a, keys)]


def conditional(draws: dict, key: jax.Array, inputs: SamplerInputs, options: Storage, start: int = 0) -> dict:
    """``f_train``, ``f_test`` given ``U``; with ``keep_weights``, ``V0`` given the upper weights and ``f`` from it
    (draws numbered from ``start``)."""
    if not options.keep_weights:
        return conditional_outputs(draws["U"], key, inputs, start)
    V0 = conditional_V0(draws, key, inputs, start)
    with_V0 = jax.vmap(jax.vmap(lambda z: full_observables(z, inputs, Storage())))(draws | {"V0": V0})
    return {"V0": V0, "f_train": with_V0["f_train"], **({"f_test": with_V0["f_test"]} if "f_test" in with_V0 else {})}


SAMPLER = Sampler(
    name="collapsed",
    description=SAMPLER_DESCRIPTIONS["collapsed"],
    draws_weights=True,
    model=model,
    build=build,
    observables=weight_observables,
    conditional=conditional,
    labels_arg=1,
)
