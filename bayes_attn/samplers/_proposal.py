"""The proposal of the guided samplers (docs/theory.md §9): a defensive mixture of a normal and a Student t about
the expansion's mode, its draws and their exact log weights, in batches compiled once per problem.

    q(θ) = (1 − m) N(θ; θ̂, H⁻¹) + m t_ν(θ; θ̂, H⁻¹),      m = PROPOSAL_MIX, ν = PROPOSAL_DF

(``θ = θ̂ + L⁻ᵀ ε · s``, ``H = L Lᵀ``, ``ε ~ N(0, I)``, ``s = 1`` or ``sqrt(ν / g)`` with ``g ~ χ²(ν)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular

from ._base import map_batches

__all__ = ["PROPOSAL_DF", "PROPOSAL_MIX", "Proposal", "proposals"]

PROPOSAL_DF = 4.0
"""Degrees of freedom ``ν`` of the proposal's Student t (chosen by measurement: docs/theory.md §9)."""
PROPOSAL_MIX = 0.5
"""Weight of the Student t in a defensive mixture with the normal of the same scale (1: the t alone)."""

def _log_q(r2: jax.Array, n: int, df: float, mix: float) -> jax.Array:
    """``log q`` at squared Mahalanobis radius ``r2`` (up to ``log det L``): the mixture ``(1 − mix) N + mix t_df``
    of a normal and a Student t with the same scale (``mix = 1``: the t alone; ``mix = 0``: the normal)."""
    log_t = (math.lgamma(0.5 * (df + n)) - math.lgamma(0.5 * df) - 0.5 * n * math.log(df * math.pi)
             - 0.5 * (df + n) * jnp.log1p(r2 / df))
    log_n = -0.5 * n * math.log(2 * math.pi) - 0.5 * r2
    if mix >= 1.0 or mix <= 0.0:
        return log_t if mix >= 1.0 else log_n
    return jnp.logaddexp(math.log1p(-mix) + log_n, math.log(mix) + log_t)


class Proposal(NamedTuple):
    """The proposal of :func:`proposals`: centred at ``theta_hat`` ``θ̂`` ``[n]`` with scale ``H⁻¹`` (``H = L Lᵀ``,
    ``chol = L`` ``[n, n]``), a Student-t of ``df`` degrees of freedom with probability ``mix``, else normal."""

    theta_hat: jax.Array
    chol: jax.Array
    df: float = PROPOSAL_DF
    mix: float = PROPOSAL_MIX


def proposals(key: jax.Array, proposal: Proposal, action: Callable, args, *, count: int, batch: int,
              progress: str | None = None) -> list[np.ndarray]:
    """``count`` draws ``θ`` ``[count, n]`` from ``proposal``, their log weights ``−S − log q(θ)`` ``[count]`` (``-inf``
    where not finite; up to one constant) and what ``action`` draws with them, each ``[count, ...]``, in batches of
    ``batch`` (``vmap``): ``[θ, log_w, *outputs]``. ``action(θ, key, *args)`` returns ``(S, outputs)`` (a tuple of
    arrays, maybe empty; ``key``: its own per draw); it is static (compiled once per function). For the posterior,
    ``S`` of docs/theory.md §8 and the exact draws of ``f`` given ``U_1``
    (:func:`~bayes_attn.samplers._laplace.propose`).

    Draw ``i`` comes from the ``i``-th of ``jax.random.split(key, count)``. The batches have one size per
    problem (:func:`~bayes_attn.samplers._base.map_batches`; the last one padded and cut), so that other counts
    reuse the compiled batch instead of compiling one program per count. ``progress``: the description of a
    progress bar over the batches (none if ``None``)."""
    theta_hat, chol, df, mix = proposal
    return map_batches(lambda k: _proposal_batch(k, theta_hat, chol, action, args, df=df, mix=mix),
                       (jax.random.split(key, count),), batch, progress)


@partial(jax.jit, static_argnames=("action", "df", "mix"))
def _proposal_batch(keys: jax.Array, theta_hat: jax.Array, chol: jax.Array, action: Callable, args, *, df: float,
                    mix: float) -> list[jax.Array]:
    """:func:`proposals` for one batch of keys ``[b]`` (one compiled program per batch size, shapes and action)."""
    n = theta_hat.shape[0]
    dtype = theta_hat.dtype

    def one(k):
        k1, k2, k3 = jax.random.split(k, 3)
        eps = jax.random.normal(k1, (n,), dtype)
        s = jnp.sqrt(df / jax.random.chisquare(k2, df, dtype=dtype))
        s = jnp.where(jax.random.uniform(k3, dtype=dtype) < mix, s, 1.0)
        theta = theta_hat + s * solve_triangular(chol.T, eps, lower=False)  # θ̂ + L⁻ᵀ ε s: covariance scale H⁻¹
        S, outputs = action(theta, jax.random.fold_in(k, 3), *args)
        log_w = -S - _log_q(s * s * (eps @ eps), n, df, mix)
        return theta, jnp.where(jnp.isfinite(log_w), log_w, -jnp.inf), *outputs

    return jax.vmap(one)(keys)
