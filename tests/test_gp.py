"""The Gaussian predictive of one kernel (bayes_attn.gp): the xi form equals the path-kernel form."""

import jax.numpy as jnp
import numpy as np
from conftest import random_data, random_network

from bayes_attn import gp
from bayes_attn.network import kernel_from_C, path_kernel_from_xi


def test_xi_form_equals_path_kernel_form_in_float64():
    net = random_network((2, 3), width=5, N0=6, variances=0.7)
    x, y = random_data(25)
    xt, _ = random_data(11, seed=4)
    xi, xi_t = net.xi(x), net.xi(xt)
    assert xi.dtype == jnp.float64
    rng = np.random.default_rng(3)
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
