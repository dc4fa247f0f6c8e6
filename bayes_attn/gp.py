"""The Gaussian predictive given one kernel (THEORY.md §4 "Predictor statistics", §5).

Given the order parameter ``U`` the outputs ``f`` are jointly Gaussian with
kernel ``K(U)``; observing ``Y = f(X) + noise`` (variance ``temperature``) gives

    mean(x*) = k*ᵀ G⁻¹ Y,   variance(x*) = k** − k*ᵀ G⁻¹ k*,   G = K(X, X) + temperature I.

One helper serves the theory's predictor, ``Posterior.predict`` (per draw of
``U``) and the exact conditional draws of the samplers (pathwise conditioning:
``f* = f*' + k*ᵀ G⁻¹ (Y − f'(X) − eps)`` with ``(f', f*')`` from the prior and
``eps ~ Normal(0, temperature)``). Every solve goes through the Cholesky
factor of ``G``; all functions are pure JAX and can be ``vmap``-ed over draws.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular


def gram_cholesky(K: jax.Array, temperature: float) -> jax.Array:
    """Lower Cholesky factor of ``G = K + temperature I`` (``K`` ``[P, P]``): ``[P, P]``."""
    return jnp.linalg.cholesky(K + temperature * jnp.eye(K.shape[0], dtype=K.dtype))


@jax.jit
def moments(K: jax.Array, K_cross: jax.Array, k_diag: jax.Array, y: jax.Array, temperature: float):
    """Predictive mean and variance at query inputs.

    Args:
        K: training kernel ``[P, P]``; K_cross: ``K(x*, X)`` ``[P*, P]``;
        k_diag: ``K(x*, x*)`` ``[P*]``; y: labels ``[P]``; temperature: > 0.

    Returns:
        ``(mean, variance)``, each ``[P*]``.
    """
    chol = gram_cholesky(K, temperature)
    v = solve_triangular(chol, K_cross.T, lower=True)  # [P, P*]
    z = solve_triangular(chol, y, lower=True)
    return v.T @ z, k_diag - jnp.sum(v * v, axis=0)


def pathwise_weights(K: jax.Array, f_prior: jax.Array, y: jax.Array, eps: jax.Array, temperature: float) -> jax.Array:
    """Weights ``alpha = G⁻¹ (Y − f'(X) − eps)`` of one exact posterior draw by pathwise conditioning.

    With ``(f', f*')`` a joint prior draw from the kernel and ``eps`` a draw of
    ``Normal(0, temperature)`` ``[P]``, ``f* = f*' + K(x*, X) alpha`` is an exact
    draw from ``f(x*) | Y`` at any inputs (the training inputs included:
    ``f(X) = f' + K alpha``). ``K`` is ``[P, P]``; returns ``[P]``.
    """
    chol = gram_cholesky(K, temperature)
    return cho_solve((chol, True), y - f_prior - eps)
