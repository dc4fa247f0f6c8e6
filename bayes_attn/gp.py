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
faster per gradient of the ``wishart`` sampler (measured: ``benchmarks/results/kernel_forms.json``).

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

__all__ = ["CHOLESKY_LEAF", "TRIANGULAR_LEAF", "at_xi", "cholesky", "covariance", "cross_kernels", "dual_weights",
           "gram_cholesky", "log_likelihood", "log_likelihood_features", "mean_from_xi", "moments", "moments_from_xi",
           "pathwise_weights", "triangular_inverse", "xi_weights"]


def covariance(K: jax.Array, temperature: float | jax.Array) -> jax.Array:
    """``G = K + temperature I`` ``[P, P]``, the covariance of the labels ``Y`` given the kernel ``K`` ``[P, P]``."""
    return K + temperature * jnp.eye(K.shape[0], dtype=K.dtype)


CHOLESKY_LEAF = 128
"""Largest matrix :func:`cholesky` factorises by LAPACK; larger ones are halved."""


def cholesky(A: jax.Array) -> jax.Array:
    """Lower Cholesky factor ``L`` ``[..., P, P]`` of symmetric positive definite ``A`` ``[..., P, P]`` (NaN if not).

    Up to :data:`CHOLESKY_LEAF` rows, ``jnp.linalg.cholesky`` (LAPACK). Larger,
    by halves: ``L₁₁ = chol(A₁₁)``, ``L₂₁ = A₂₁ L₁₁⁻ᵀ`` (:func:`triangular_inverse`),
    ``L₂₂ = chol(A₂₂ − L₂₁ L₂₁ᵀ)``, so the work is matrix products, which the CPU
    runs faster than LAPACK's factorisation at large ``P``, and much faster in
    batches, where LAPACK factorises one matrix at a time
    (``benchmarks/results/kernel_forms.json``). A function of the symmetric part of ``A``, as ``jnp.linalg.cholesky``.
    """
    if A.shape[-1] <= CHOLESKY_LEAF:
        return jnp.linalg.cholesky(A)
    return _cholesky_by_halves(0.5 * (A + _T(A)))


def _T(A: jax.Array) -> jax.Array:
    return jnp.swapaxes(A, -1, -2)


def _lower_blocks(top_left: jax.Array, bottom_left: jax.Array, bottom_right: jax.Array) -> jax.Array:
    """``[[top_left, 0], [bottom_left, bottom_right]]`` over the last two axes."""
    zeros = jnp.zeros((*top_left.shape[:-1], bottom_right.shape[-1]), top_left.dtype)
    return jnp.concatenate([jnp.concatenate([top_left, zeros], -1), jnp.concatenate([bottom_left, bottom_right], -1)],
                           -2)


def _cholesky_by_halves(A: jax.Array) -> jax.Array:
    n = A.shape[-1]
    if n <= CHOLESKY_LEAF:
        return jnp.linalg.cholesky(A)
    k = n // 2
    L11 = _cholesky_by_halves(A[..., :k, :k])
    L21 = A[..., k:, :k] @ _T(triangular_inverse(L11))
    return _lower_blocks(L11, L21, _cholesky_by_halves(A[..., k:, k:] - L21 @ _T(L21)))


def gram_cholesky(K: jax.Array, temperature: float | jax.Array) -> jax.Array:
    """Lower Cholesky factor of ``G = K + temperature I`` (``K`` ``[P, P]``): ``[P, P]``."""
    return cholesky(covariance(K, temperature))


@jax.custom_jvp
def log_likelihood(G: jax.Array, y: jax.Array) -> jax.Array:
    """``log Normal(y | 0, G)`` (scalar) for ``G`` ``[P, P]`` symmetric positive definite and ``y`` ``[P]``.

    Differentiable to any order (forward and reverse); its first derivative is
    the closed form of the module docstring. A function of the symmetric part
    of ``G`` (:func:`cholesky` symmetrises its input), and so is the
    derivative: ``αᵀ dG α`` and ``tr(G⁻¹ dG)`` do not change under ``dG → dGᵀ``.
    """
    return _log_likelihood(cholesky(G), y)[0]


def _log_likelihood(L: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(log Normal(y | 0, L Lᵀ), L⁻¹ y)``."""
    b = solve_triangular(L, y, lower=True)
    return -0.5 * (b @ b) - jnp.sum(jnp.log(jnp.diagonal(L))) - 0.5 * y.shape[-1] * math.log(2 * math.pi), b


TRIANGULAR_LEAF = 64
"""Largest block :func:`triangular_inverse` inverts by a triangular solve; larger ones are halved."""


def triangular_inverse(L: jax.Array) -> jax.Array:
    """``L⁻¹`` ``[..., P, P]`` of lower-triangular ``L`` ``[..., P, P]``, by halves.

    ``[[A, 0], [C, D]]⁻¹ = [[A⁻¹, 0], [−D⁻¹ C A⁻¹, D⁻¹]]``, recursively down to
    blocks of :data:`TRIANGULAR_LEAF`: two matrix products per level instead of
    one ``P × P`` triangular solve against the identity, which the CPU runs
    slower (``benchmarks/results/kernel_forms.json``).
    """
    n = L.shape[-1]
    if n <= TRIANGULAR_LEAF:
        return solve_triangular(L, jnp.broadcast_to(jnp.eye(n, dtype=L.dtype), L.shape), lower=True)
    k = n // 2
    A_inv, D_inv = triangular_inverse(L[..., :k, :k]), triangular_inverse(L[..., k:, k:])
    return _lower_blocks(A_inv, -(D_inv @ (L[..., k:, :k] @ A_inv)), D_inv)


def _value_alpha_inverse(L: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(log Normal(y | 0, G), α = G⁻¹ y, G⁻¹)`` from the Cholesky factor ``L`` of ``G``."""
    value, b = _log_likelihood(L, y)
    alpha = solve_triangular(L, b, lower=True, trans=1)
    L_inv = triangular_inverse(L)
    return value, alpha, L_inv.T @ L_inv


@log_likelihood.defjvp
def _log_likelihood_jvp(primals, tangents):
    G, y = primals
    dG, dy = tangents
    value, alpha, G_inv = _value_alpha_inverse(cholesky(G), y)
    return value, 0.5 * (alpha @ (dG @ alpha)) - 0.5 * jnp.sum(G_inv * dG) - alpha @ dy


@jax.custom_jvp
def log_likelihood_features(phi: jax.Array, temperature: jax.Array, y: jax.Array) -> jax.Array:
    """:func:`log_likelihood` of ``G = Φ Φᵀ + temperature I`` from features ``phi`` ``[P, m]`` (scalar).

    Its derivative is in closed form in ``Φ``: ``d log p = (α (Φᵀα)ᵀ − G⁻¹ Φ) · dΦ
    + ½ (αᵀα − tr G⁻¹) dT − αᵀ dy``. Through :func:`log_likelihood` the
    gradient in ``Φ`` would cost two ``P × P × m`` products (``dG = dΦ Φᵀ + Φ dΦᵀ``,
    whose symmetry autodiff cannot see); here it costs one. Differentiable to any order.
    """
    return _log_likelihood(gram_cholesky(phi @ phi.T, temperature), y)[0]


@log_likelihood_features.defjvp
def _log_likelihood_features_jvp(primals, tangents):
    phi, temperature, y = primals
    dphi, dT, dy = tangents
    value, alpha, G_inv = _value_alpha_inverse(gram_cholesky(phi @ phi.T, temperature), y)
    grad_phi = jnp.outer(alpha, alpha @ phi) - G_inv @ phi
    grad_T = 0.5 * (alpha @ alpha - jnp.trace(G_inv))
    return value, jnp.sum(grad_phi * dphi) + grad_T * dT - alpha @ dy


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
