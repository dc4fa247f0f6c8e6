"""The Gaussian predictive of one kernel (bayes_attn.gp): the xi form equals the path-kernel form; the
samplers' Gaussian likelihood and its closed-form derivative."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
import scipy.stats
from conftest import key_of, random_data, random_network, rng_of

from bayes_attn import gp
from bayes_attn.kernels import kernel_from_C, path_kernel_from_xi
from bayes_attn.samplers._base import FeatureNormal, GramNormal


def test_xi_form_equals_path_kernel_form_in_float64():
    net = random_network((2, 3), width=5, N0=6, variances=0.7)
    x, y = random_data(25)
    xt, _ = random_data(11, seed=4)
    xi, xi_t = net.xi(x), net.xi(xt)
    assert xi.dtype == jnp.float64
    rng = rng_of(3)
    A = rng.normal(size=(net.D, net.D))
    U = jnp.asarray(A @ A.T / net.D)
    s0, temperature = net.variances[0], 0.4
    # path-kernel form: K = sum U C with C [D, D, P, P2] formed explicitly
    C = path_kernel_from_xi(xi, xi, s0)
    Cx = path_kernel_from_xi(xi_t, xi, s0)
    Cxx = jnp.diagonal(path_kernel_from_xi(xi_t, xi_t, s0), axis1=2, axis2=3)  # [D, D, P*]
    mean_C, var_C = gp.moments(kernel_from_C(U, C), kernel_from_C(U, Cx), kernel_from_C(U, Cxx), jnp.asarray(y),
                               temperature)
    # xi forms
    mean_xi, var_xi = gp.moments_from_xi(U, xi, xi_t, jnp.asarray(y), temperature, s0)
    mean_v = gp.mean_from_xi(U, xi, xi_t, jnp.asarray(y), temperature, s0)
    for got in (mean_xi, mean_v):
        assert got.shape == (11,) and got.dtype == jnp.float64
        np.testing.assert_allclose(got, mean_C, rtol=0, atol=1e-10)
    np.testing.assert_allclose(var_xi, var_C, rtol=0, atol=1e-10)
    # K(x*, X) alpha through v equals the explicit cross kernel times alpha, at the training inputs too
    alpha = gp.dual_weights(kernel_from_C(U, C), jnp.asarray(y), temperature)
    v = gp.xi_weights(U, xi, alpha, s0)
    assert v.shape == (net.D, net.N0)
    np.testing.assert_allclose(gp.at_xi(xi_t, v), kernel_from_C(U, Cx) @ alpha, rtol=0, atol=1e-10)
    np.testing.assert_allclose(gp.at_xi(xi, v), kernel_from_C(U, C) @ alpha, rtol=0, atol=1e-10)


def _spd(P: int, seed: int) -> np.ndarray:
    rng = rng_of(seed)
    A = rng.normal(size=(P, 2 * P))
    return A @ A.T / (2 * P) + 0.05 * np.eye(P)


def _reference(G, y):
    """The same density through NumPyro's MultivariateNormal (autodiff through the Cholesky factorisation)."""
    return dist.MultivariateNormal(jnp.zeros_like(y), scale_tril=jnp.linalg.cholesky(G)).log_prob(y)


def test_log_likelihood_value_and_derivatives_match_autodiff_and_finite_differences():
    P = 7
    G, y = jnp.asarray(_spd(P, 0)), jnp.asarray(rng_of(1).normal(size=P))
    ll = jax.jit(gp.log_likelihood)
    np.testing.assert_allclose(ll(G, y), scipy.stats.multivariate_normal(np.zeros(P), G).logpdf(y), rtol=1e-13)
    # first derivatives (reverse mode): the closed form, and autodiff through the Cholesky factorisation
    grad_G, grad_y = jax.jit(jax.grad(gp.log_likelihood, argnums=(0, 1)))(G, y)
    alpha = np.linalg.solve(G, y)
    np.testing.assert_allclose(grad_G, (np.outer(alpha, alpha) - np.linalg.inv(G)) / 2, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grad_y, -alpha, rtol=1e-10)
    ref_G, ref_y = jax.jit(jax.grad(_reference, argnums=(0, 1)))(G, y)
    np.testing.assert_allclose(grad_G, ref_G, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grad_y, ref_y, rtol=1e-10)
    # a directional derivative (forward mode) against central finite differences, along a non-symmetric dG
    rng = rng_of(2)
    dG, dy = jnp.asarray(rng.normal(size=(P, P))), jnp.asarray(rng.normal(size=P))
    _, tangent = jax.jit(lambda *a: jax.jvp(gp.log_likelihood, a[:2], a[2:]))(G, y, dG, dy)
    h = 1e-5
    np.testing.assert_allclose(tangent, (ll(G + h * dG, y + h * dy) - ll(G - h * dG, y - h * dy)) / (2 * h), rtol=1e-7)
    # second derivatives (the rule is itself differentiable) against autodiff through the factorisation
    np.testing.assert_allclose(jax.jit(jax.hessian(gp.log_likelihood))(G, y), jax.jit(jax.hessian(_reference))(G, y),
                               rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(jax.jit(jax.hessian(gp.log_likelihood, argnums=1))(G, y), -np.linalg.inv(G),
                               rtol=1e-10)


@pytest.mark.parametrize("P", [7, 129, 300])
def test_cholesky_and_triangular_inverse_by_halves_equal_lapack(P):
    """Above ``CHOLESKY_LEAF`` / ``TRIANGULAR_LEAF`` rows both recurse on halves (odd splits at 129):
    the same factor and inverse as LAPACK to rounding, alone, under ``vmap`` and over a leading axis, of the
    symmetric part."""
    assert gp.TRIANGULAR_LEAF < 129 <= gp.CHOLESKY_LEAF + 1 < 300
    A = _spd(P, 5)
    skew = rng_of(6).normal(size=(P, P))
    L = jax.jit(gp.cholesky)(jnp.asarray(A + 1e-3 * (skew - skew.T)))  # a non-symmetric input: its symmetric part
    ref = np.linalg.cholesky(A)
    np.testing.assert_allclose(L, ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(jax.jit(gp.triangular_inverse)(jnp.asarray(ref)), np.linalg.inv(ref), rtol=0,
                               atol=1e-10 * np.abs(np.linalg.inv(ref)).max())
    batch = jnp.stack([jnp.asarray(A), jnp.asarray(_spd(P, 7))])
    for batched in (jax.vmap(gp.cholesky), gp.cholesky):  # vmap, and leading axes of the argument
        np.testing.assert_allclose(jax.jit(batched)(batch)[1], np.linalg.cholesky(_spd(P, 7)), rtol=0, atol=1e-12)
    np.testing.assert_allclose(jax.jit(gp.triangular_inverse)(jnp.stack([jnp.asarray(ref)] * 2))[1],
                               np.linalg.inv(ref), rtol=0, atol=1e-10 * np.abs(np.linalg.inv(ref)).max())
    # not positive definite: NaN reaches the log-determinant, as with LAPACK
    B = A.copy()
    B[-1, -1] = -1.0
    assert np.isnan(np.sum(np.log(np.diagonal(gp.cholesky(jnp.asarray(B))))))


def _reference_features(phi, temperature, y):
    return _reference(phi @ phi.T + temperature * jnp.eye(phi.shape[0], dtype=phi.dtype), y)


@pytest.mark.parametrize("P, m", [(6, 4), (140, 30)])
def test_feature_likelihood_equals_gram_likelihood_with_its_derivatives(P, m):
    """``log_likelihood_features(Φ, T, y)`` is ``log Normal(y | 0, Φ Φᵀ + T I)``: value, gradient in every
    argument (against autodiff through the Cholesky factorisation), a directional derivative against central
    finite differences and, small, the Hessian."""
    rng = rng_of(8)
    phi, y = jnp.asarray(rng.normal(size=(P, m)) / np.sqrt(m)), jnp.asarray(rng.normal(size=P))
    T = jnp.asarray(0.3)
    ll = jax.jit(gp.log_likelihood_features)
    G = phi @ phi.T + T * jnp.eye(P)
    np.testing.assert_allclose(ll(phi, T, y), scipy.stats.multivariate_normal(np.zeros(P), G).logpdf(y), rtol=1e-12)
    got = jax.jit(jax.grad(gp.log_likelihood_features, argnums=(0, 1, 2)))(phi, T, y)
    ref = jax.jit(jax.grad(_reference_features, argnums=(0, 1, 2)))(phi, T, y)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-11)
    dphi, dT, dy = jnp.asarray(rng.normal(size=(P, m))), jnp.asarray(0.7), jnp.asarray(rng.normal(size=P))
    _, tangent = jax.jit(lambda *a: jax.jvp(gp.log_likelihood_features, a[:3], a[3:]))(phi, T, y, dphi, dT, dy)
    h = 1e-5
    fd = (ll(phi + h * dphi, T + h * dT, y + h * dy) - ll(phi - h * dphi, T - h * dT, y - h * dy)) / (2 * h)
    np.testing.assert_allclose(tangent, fd, rtol=1e-6)
    if P <= 10:
        np.testing.assert_allclose(jax.jit(jax.hessian(gp.log_likelihood_features))(phi, T, y),
                                   jax.jit(jax.hessian(_reference_features))(phi, T, y), rtol=1e-9, atol=1e-11)


@pytest.mark.stochastic
@pytest.mark.parametrize("form", ["gram", "features"])
def test_gram_normal_batches_values_and_draws_with_covariance_G(form, check):
    """Normal draws with covariance ``G`` (its Gram or feature form): the empirical covariance of 40 000 draws
    within 5 standard errors of ``G`` (6 entries: false failures 3.4e-6).

    Measured over 14 seed offsets (tests/robustness.md): the nearest threshold, that of cov_max_abs_z [gram], is 5.12
    sds from the statistic's mean (normal tail 1.5e-07)."""
    P, n = 3, 40_000
    if form == "gram":
        G = jnp.asarray(_spd(P, 4))
        d, log_density = GramNormal(G), lambda v: gp.log_likelihood(G, v)
    else:
        phi, T = jnp.asarray(rng_of(4).normal(size=(P, 2))), 0.2
        G = phi @ phi.T + T * jnp.eye(P)
        d, log_density = FeatureNormal(phi, T), lambda v: gp.log_likelihood_features(phi, T, v)
    ys = d.sample(key_of(0), (n,))
    assert ys.shape == (n, P) and d.event_shape == (P,) and d.batch_shape == ()
    np.testing.assert_allclose(d.log_prob(ys[:5]), [log_density(v) for v in ys[:5]], rtol=1e-13)
    # sample covariance against G: each entry within 5 Monte-Carlo standard errors
    # (Var of y_i y_j for a zero-mean Gaussian: G_ii G_jj + G_ij²)
    cov = np.asarray(ys.T @ ys) / n
    se = np.sqrt((np.outer(np.diag(G), np.diag(G)) + np.asarray(G) ** 2) / n)
    z = (cov - np.asarray(G)) / se
    check("cov_max_abs_z", np.max(np.abs(z)), 5, detail=z)
    with pytest.raises(ValueError, match=r"G must be a square matrix \[P, P\], got shape \(3,\)"):
        GramNormal(jnp.ones(3))
    with pytest.raises(ValueError, match=r"phi must be a matrix \[P, m\], got shape \(3,\)"):
        FeatureNormal(jnp.ones(3), 0.1)
