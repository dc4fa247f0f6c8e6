"""The Gaussian predictive given one kernel (docs/theory.md §4 "Predictor statistics", §5).

Given the order parameter ``U`` the outputs ``f`` are jointly Gaussian with
kernel ``K(U)``; observing ``Y = f(X) + noise`` (variance ``temperature``) gives

    mean(x*) = k*ᵀ G⁻¹ Y,   variance(x*) = k** − k*ᵀ G⁻¹ k*,   G = K(X, X) + temperature I.

One helper serves the theory's predictor, ``Posterior.predict`` (per draw of
``U``) and the exact conditional draws of the samplers (pathwise conditioning:
``f* = f*' + k*ᵀ G⁻¹ (Y − f'(X) − eps)`` with ``(f', f*')`` from the prior and
``eps ~ Normal(0, temperature)``). Every solve goes through the Cholesky
factor of ``G``; all functions are pure JAX and can be ``vmap``-ed over draws.

The samplers' likelihood ``log Normal(Y | 0, G)`` (:func:`log_likelihood`)
carries its derivative in closed form, ``d log p = ½ αᵀ dG α − ½ tr(G⁻¹ dG)
− αᵀ dY`` with ``α = G⁻¹ Y``: one triangular inverse instead of the
Cholesky factorisation's own derivative (two ``P × P`` triangular solves),
faster per gradient of the ``wishart`` sampler as measured by
``benchmarks/bench_kernel_forms.py``.

Through the path inputs ``xi`` ``[P, D, N0]`` (docs/theory.md §2) the kernel is
``K(U)(x, x') = s0² / (N0 D) Σ xi_π(x) U[π, π'] xi_π'(x')``, so for any weights
``alpha`` ``[P]`` on the training inputs ``K(x*, X) alpha = Σ_π xi_π(x*) · v_π``
with ``v = s0² / (N0 D) · Σ_ν alpha_ν U xi(x_ν)`` ``[D, N0]``
(:func:`xi_weights`, :func:`at_xi`): the predictor mean without forming
``K(x*, X)``. :func:`moments_from_xi` and :func:`mean_from_xi` are the
predictive of one ``U`` from path inputs.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular

from .kernels import kernel_from_xi


def covariance(K: jax.Array, temperature: float) -> jax.Array:
    """``G = K + temperature I`` ``[P, P]``, the covariance of the labels ``Y`` given the kernel ``K`` ``[P, P]``."""
    return K + temperature * jnp.eye(K.shape[0], dtype=K.dtype)


def gram_cholesky(K: jax.Array, temperature: float) -> jax.Array:
    """Lower Cholesky factor of ``G = K + temperature I`` (``K`` ``[P, P]``): ``[P, P]``."""
    return jnp.linalg.cholesky(covariance(K, temperature))


@jax.custom_jvp
def log_likelihood(G: jax.Array, y: jax.Array) -> jax.Array:
    """``log Normal(y | 0, G)`` (scalar) for ``G`` ``[P, P]`` symmetric positive definite and ``y`` ``[P]``.

    Differentiable to any order (forward and reverse); its first derivative is
    the closed form of the module docstring. A function of the symmetric part
    of ``G`` (``jnp.linalg.cholesky`` symmetrises its input), and so is the
    derivative: ``αᵀ dG α`` and ``tr(G⁻¹ dG)`` do not change under ``dG → dGᵀ``.
    """
    return _log_likelihood(jnp.linalg.cholesky(G), y)[0]


def _log_likelihood(L: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(log Normal(y | 0, L Lᵀ), L⁻¹ y)``."""
    b = solve_triangular(L, y, lower=True)
    return -0.5 * (b @ b) - jnp.sum(jnp.log(jnp.diagonal(L))) - 0.5 * y.shape[-1] * math.log(2 * math.pi), b


@log_likelihood.defjvp
def _log_likelihood_jvp(primals, tangents):
    G, y = primals
    dG, dy = tangents
    L = jnp.linalg.cholesky(G)
    value, b = _log_likelihood(L, y)
    alpha = solve_triangular(L, b, lower=True, trans=1)  # G⁻¹ y
    L_inv = solve_triangular(L, jnp.eye(L.shape[0], dtype=L.dtype), lower=True)
    G_inv = L_inv.T @ L_inv
    return value, 0.5 * (alpha @ (dG @ alpha)) - 0.5 * jnp.sum(G_inv * dG) - alpha @ dy


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


def cross_kernels(U: jax.Array, xi_query: jax.Array, xi_train: jax.Array, s0sq: float):
    """``K(x*, X)`` ``[P*, P]`` and ``K(x*, x*)`` ``[P*]`` from path inputs ``xi_query`` ``[P*, D, N0]``
    and ``xi_train`` ``[P, D, N0]`` (``U`` ``[D, D]``, ``s0sq`` the prior variance of ``V0``)."""
    D, N0 = xi_query.shape[1], xi_query.shape[2]
    k_cross = kernel_from_xi(U, xi_query, xi_train, s0sq)
    k_diag = s0sq * jnp.einsum("adi,de,aei->a", xi_query, U, xi_query) / (N0 * D)
    return k_cross, k_diag


@jax.jit
def moments_from_xi(U: jax.Array, xi_train: jax.Array, xi_query: jax.Array, y: jax.Array, temperature: float,
                    s0sq: float):
    """:func:`moments` of the kernel ``K(U)`` given by path inputs: ``(mean, variance)``, each ``[P*]``."""
    K = kernel_from_xi(U, xi_train, xi_train, s0sq)
    return moments(K, *cross_kernels(U, xi_query, xi_train, s0sq), y, temperature)


def dual_weights(K: jax.Array, y: jax.Array, temperature: float) -> jax.Array:
    """``alpha = G⁻¹ y`` with ``G = K + temperature I`` (``K`` ``[P, P]``, ``y`` ``[P]``): ``[P]``."""
    return cho_solve((gram_cholesky(K, temperature), True), y)


def xi_weights(U: jax.Array, xi_train: jax.Array, alpha: jax.Array, s0sq: float) -> jax.Array:
    """``v = s0² / (N0 D) · Σ_ν alpha_ν U xi(x_ν)`` ``[D, N0]``, so that ``K(x, X) alpha = at_xi(xi(x), v)``."""
    D, N0 = xi_train.shape[1], xi_train.shape[2]
    return (s0sq / (N0 * D)) * jnp.einsum("b,bei,de->di", alpha, xi_train, U)


def at_xi(xi: jax.Array, v: jax.Array) -> jax.Array:
    """``Σ_π xi_π(x) · v_π`` for path inputs ``xi`` ``[P*, D, N0]`` and ``v`` ``[D, N0]``: ``[P*]``."""
    return jnp.einsum("pdi,di->p", xi, v)


@jax.jit
def mean_from_xi(U: jax.Array, xi_train: jax.Array, xi_query: jax.Array, y: jax.Array, temperature: float,
                 s0sq: float) -> jax.Array:
    """Predictor mean ``k*ᵀ G⁻¹ Y`` ``[P*]`` in the ``xi`` form (``K(x*, X)`` never formed)."""
    alpha = dual_weights(kernel_from_xi(U, xi_train, xi_train, s0sq), y, temperature)
    return at_xi(xi_query, xi_weights(U, xi_train, alpha, s0sq))


def pathwise_weights(K: jax.Array, f_prior: jax.Array, y: jax.Array, eps: jax.Array, temperature: float) -> jax.Array:
    """Weights ``alpha = G⁻¹ (Y − f'(X) − eps)`` of one exact posterior draw by pathwise conditioning.

    With ``(f', f*')`` a joint prior draw from the kernel and ``eps`` a draw of
    ``Normal(0, temperature)`` ``[P]``, ``f* = f*' + K(x*, X) alpha`` is an exact
    draw from ``f(x*) | Y`` at any inputs (the training inputs included:
    ``f(X) = f' + K alpha``). ``K`` is ``[P, P]``; returns ``[P]``.
    """
    return dual_weights(K, y - f_prior - eps, temperature)
