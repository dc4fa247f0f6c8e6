"""Network (docs/theory.md §1–3): token-level vs path form, kernels, prior predictive."""

import itertools
import math

import jax
import numpy as np
import pytest
from conftest import check_max_abs_z, key_of, random_data, random_network, rng_of

import bayes_attn as ba


@pytest.mark.parametrize("heads", [(1,), (3,), (2, 3), (3, 1), (2, 1, 2)])
@pytest.mark.parametrize("readout", ["last", "first", "mean"])
def test_token_and_path_forward_agree(heads, readout):
    L = len(heads)
    widths = [3 + l for l in range(L)] + [5]
    variances = [0.5 + 0.3 * i for i in range(L + 2)]
    net = ba.Network(random_network(heads).attention, widths, variances, readout)
    x, _ = random_data(7)
    for seed in range(3):
        w = net.sample_prior(key_of(seed))
        token = np.asarray(net.forward(w, x, form="token"))
        path = np.asarray(net.forward(w, x, form="path"))
        assert np.max(np.abs(token - path)) < 1e-10 * max(1.0, np.max(np.abs(token)))
        assert np.std(token) > 1e-3  # not a trivial zero


def test_xi_matches_explicit_matrix_products():
    net = random_network((2, 3, 2), readout="mean")
    x, _ = random_data(3)
    om = [np.asarray(o) for o in net.attention_matrices(x)]
    xi = np.asarray(net.xi(x))
    for p, path in enumerate(net.paths):
        for mu in range(3):
            r = om[-1][mu, path[-1]]
            for l in reversed(range(net.L - 1)):
                r = om[l][mu, path[l]] @ r
            np.testing.assert_allclose(xi[mu, p], x[mu].T @ r, rtol=1e-12, atol=1e-12)
    assert net.path_labels[:3] == ["1-1-1", "1-1-2", "1-2-1"]


def test_attention_columns_are_softmax_over_keys():
    net = random_network((2, 2))
    x, _ = random_data(4)
    om = net.attention_matrices(x)
    np.testing.assert_allclose(np.asarray(om[0]).sum(axis=2), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(om[1]).sum(axis=2), 1.0, rtol=1e-12)
    W = net.attention[0][1]
    score = x[2] @ W @ x[2].T  # [s, t]
    expect = np.exp(score - score.max(0)) / np.exp(score - score.max(0)).sum(0)
    np.testing.assert_allclose(np.asarray(om[0])[2, 1], expect, rtol=1e-10)


def test_effective_weights_by_hand():
    net = ba.Network(random_network((2, 3)).attention, [3, 4, 2], 1.0)
    w = net.sample_prior(key_of(0))
    eff = np.asarray(net.effective_weights(w))
    V1, V2, a = (np.asarray(v) for v in (*w.V, w.a))
    for p, (h1, h2) in enumerate(itertools.product(range(2), range(3))):
        expect = a @ V2[h2] @ V1[h1] / math.sqrt(4 * 2)
        np.testing.assert_allclose(eff[p], expect, rtol=1e-12)


def test_kernel_is_U_weighted_path_kernel():
    net = random_network((2, 2), variances=[2.0, 1.0, 1.0, 1.0])
    x, _ = random_data(5)
    x2, _ = random_data(3, seed=5)
    C = np.asarray(net.path_kernel(x, x2))
    U = np.cov(rng_of(0).normal(size=(4, 9)))
    np.testing.assert_allclose(np.asarray(net.kernel(U, x, x2)), np.einsum("de,deab->ab", U, C), rtol=1e-12)
    xi = np.asarray(net.xi(x))
    assert C.shape == (4, 4, 5, 3)
    np.testing.assert_allclose(C[1, 2, 0, 0], 2.0 * xi[0, 1] @ np.asarray(net.xi(x2))[0, 2] / (6 * 4), rtol=1e-12)


@pytest.mark.slow
@pytest.mark.stochastic
def test_prior_predictive_covariance_is_gp_kernel(check):
    """Over prior draws, Cov f(x_mu) f(x_nu) = K with the GP U, and E f = 0, within MC error: 15 + 5 z-scores
    at ``z_bound(20)`` (false failures <= 1e-3).

    Measured over 14 seed offsets (tests/robustness.md): the nearest threshold, that of cov_max_abs_z_p, has its
    null's tail 1.0e-03 (a p-value)."""
    net = random_network((2, 2), width=40, variances=[1.5, 0.8, 1.2, 0.9], scale=0.5)
    x, _ = random_data(5, seed=3)
    M = 4000
    keys = jax.random.split(key_of(7), M)
    f = np.asarray(jax.vmap(lambda k: net.forward(net.sample_prior(k), x))(keys))  # [M, P]
    K = np.asarray(net.kernel(net.gp_U, x))
    prod = f[:, :, None] * f[:, None, :]
    emp = prod.mean(0)
    se = prod.std(0) / math.sqrt(M)
    z = (emp - K) / se
    check_max_abs_z(check, "cov_max_abs_z_p", z, 20)
    z_mean = f.mean(0) / (f.std(0) / math.sqrt(M))
    check_max_abs_z(check, "mean_max_abs_z_p", z_mean, 20)


def test_from_qk_matches_bilinear():
    rng = rng_of(0)
    q, k = rng.normal(size=(2, 3, 6)), rng.normal(size=(2, 3, 6))
    net = ba.Network.from_qk([q], [k], 4)
    np.testing.assert_allclose(net.attention[0][1], k[1].T @ q[1] / math.sqrt(3))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(attention=[np.ones((2, 3, 4))]), r"attention\[0\]"),
        (dict(attention=[np.full((1, 3, 3), np.nan)]), r"attention\[0\].*NaN"),
        (dict(widths=[4, 4, 4]), "widths"),
        (dict(widths=0), r"widths\[0\]"),
        (dict(widths=10**400), r"widths\[0\] must be an integer between 1 and 2\*\*53"),
        (dict(widths=2**53 + 1), r"widths\[0\] must be an integer between 1 and 2\*\*53"),
        (dict(widths=[4, 2**60]), r"widths\[1\]"),
        (dict(variances=-1.0), r"variances\[0\]"),
        (dict(variances=[1.0, 0.0, 1.0]), r"variances\[1\]"),
        (dict(readout="middle"), "readout"),
    ],
)
def test_bad_network_arguments(kwargs, match):
    base = dict(attention=[np.zeros((1, 3, 3))], widths=4, variances=1.0, readout="last")
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ba.Network(**base)


def test_bad_inputs():
    net = random_network((2,))
    with pytest.raises(ValueError, match=r"x must have shape \(P, T, N0=6\)"):
        net.xi(np.zeros((3, 4, 5)))
    x = np.zeros((3, 4, 6))
    x[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="x contains NaN"):
        net.xi(x)
    with pytest.raises(ValueError, match="U must have shape"):
        net.kernel(np.eye(3), np.zeros((2, 4, 6)))


def test_check_scale_bounds_the_gp_kernels_diagonal_and_refuses_beyond_float64():
    """Issue 74 row 4: ``check_scale``'s bound ``prod(variances) max |token|² / N0`` is at least the GP kernel's
    largest diagonal entry (computed independently, from ``net.kernel``), and inputs at int64's extremes are
    refused by the theory and the samplers, naming ``x`` and the temperature, before anything is computed."""
    net = ba.Network([np.random.default_rng(0).normal(size=(2, 4, 4)) for _ in range(2)], 3, [1.3, 0.7, 2.0, 0.9])
    x = np.random.default_rng(1).normal(size=(9, 5, 4)) * np.array([1.0, 3.0, 0.5, 2.0])
    diag = np.diag(np.asarray(net.kernel(net.gp_U, x)))
    bound = math.prod(net.variances) * np.max(np.sum(x**2, axis=-1)) / net.N0
    assert diag.max() <= bound * (1 + 1e-6) and diag.max() > bound / 20  # an upper bound, and not a loose one
    net.check_scale(x, bound / ba.network.MAX_PRIOR_OVER_TEMPERATURE * 1.01)  # just inside: accepted
    huge = np.full(x.shape, np.iinfo(np.int64).max)
    y = np.sign(np.arange(9) - 4.5)
    for call in (lambda: ba.solve_theory(net, huge, y, temperature=0.1),
                 lambda: ba.posterior.check_sampling(net, huge, y, temperature=0.1, sampler="collapsed")):
        with pytest.raises(ValueError, match=r"^x is too large for temperature 0.1: .* rescale the inputs"):
            call()
