"""NumPyro models of the network's posterior (THEORY.md §1, §5).

Priors: every weight entry is ``Normal(0, s²)`` with the variances of the
network; likelihood ``y_mu ~ Normal(f(x_mu), temperature)``.

- :func:`token_model`: the network of §1 run over tokens (the paper's form).
- :func:`path_model`: the same posterior with ``f`` summed over paths (§2),
  using path inputs ``xi`` computed once.
- :func:`collapsed_model`: ``V0`` integrated out exactly; the upper weights
  ``(V[l][h], a)`` carry the marginal likelihood
  ``Y ~ Normal(0, K(U(w)) + temperature I)`` with ``U = w w^T / N1``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from .network import Weights, effective_weights, forward_from_xi, forward_token, gram_cholesky


def _upper_weights(heads: Sequence[int], widths: Sequence[int], variances: Sequence[float], dtype):
    """Sample ``V[l][h]`` (sites ``V1..VL``, ``[H_l, N_{l+1}, N_l]``) and ``a`` (``[Na]``)."""
    V = []
    for l, H in enumerate(heads):
        sd = jnp.asarray(math.sqrt(variances[l + 1]), dtype)
        V.append(numpyro.sample(f"V{l + 1}", dist.Normal(jnp.zeros((), dtype), sd).expand([H, widths[l + 1], widths[l]])))
    sa = jnp.asarray(math.sqrt(variances[-1]), dtype)
    a = numpyro.sample("a", dist.Normal(jnp.zeros((), dtype), sa).expand([widths[-1]]))
    return tuple(V), a


def _input_projection(N0: int, widths: Sequence[int], variances: Sequence[float], dtype):
    """Sample ``V0`` (``[N1, N0]``)."""
    s0 = jnp.asarray(math.sqrt(variances[0]), dtype)
    return numpyro.sample("V0", dist.Normal(jnp.zeros((), dtype), s0).expand([widths[0], N0]))


def token_model(x, omegas, y, *, heads, widths, variances, temperature):
    """§1 line by line: ``z0 = V0 x / sqrt(N0)``, attention layers, ``f = a·zL / sqrt(Na)``.

    ``x`` is ``[P, T, N0]``; ``omegas`` the fixed attention of every layer.
    """
    dtype = x.dtype
    V0 = _input_projection(x.shape[2], widths, variances, dtype)
    V, a = _upper_weights(heads, widths, variances, dtype)
    f = forward_token(omegas, x, Weights(V0, V, a), widths)
    numpyro.sample("y", dist.Normal(f, jnp.sqrt(jnp.asarray(temperature, dtype))), obs=y)


def path_model(xi, y, *, heads, widths, variances, temperature):
    """§2: ``f = sum_pi w_pi · V0 xi_pi / sqrt(N1 N0 D)`` with ``xi`` ``[P, D, N0]``."""
    dtype = xi.dtype
    V0 = _input_projection(xi.shape[2], widths, variances, dtype)
    V, a = _upper_weights(heads, widths, variances, dtype)
    f = forward_from_xi(xi, V0, effective_weights(V, a, widths))
    numpyro.sample("y", dist.Normal(f, jnp.sqrt(jnp.asarray(temperature, dtype))), obs=y)


def collapsed_model(C, y, *, heads, widths, variances, temperature):
    """§5 with ``V0`` integrated out: ``Y ~ Normal(0, sum U C + temperature I)``.

    ``C`` is the path kernel ``[D, D, P, P]`` of the training inputs.
    """
    dtype = C.dtype
    V, a = _upper_weights(heads, widths, variances, dtype)
    U = order_parameter(effective_weights(V, a, widths))
    chol = gram_cholesky(U, C, temperature)
    numpyro.sample("y", dist.MultivariateNormal(jnp.zeros(C.shape[-1], dtype), scale_tril=chol), obs=y)


def order_parameter(w: jax.Array) -> jax.Array:
    """``U[pi, pi'] = w_pi · w_pi' / N1`` from effective weights ``[D, N1]``."""
    return w @ w.T / w.shape[1]

