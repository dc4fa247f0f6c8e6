"""Network (docs/theory.md §1–3): token-level vs path form, kernels, prior predictive."""

import itertools
import math

import jax
import numpy as np
import pytest
from conftest import key_of, random_data, random_network, rng_of, z_bound

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
def test_prior_predictive_covariance_is_gp_kernel():
    """Over prior draws, Cov f(x_mu) f(x_nu) = K with the GP U, and E f = 0, within MC error: 15 + 5 z-scores
    at ``z_bound(20)`` (false failures <= 1e-3)."""
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
    Z = z_bound(20)
    assert np.max(np.abs(z)) < Z, z
    assert np.all(np.abs(f.mean(0)) < Z * f.std(0) / math.sqrt(M))


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


@pytest.mark.parametrize("rank", [1, 2, 4])
@pytest.mark.slow
def test_kernel_forms_agree_in_float64(rank):
    """The likelihood's three forms (path-kernel tensor, ξ product, Woodbury) give the same log density and
    gradient in float64, and the tensor and ξ forms the same Gram matrix; P = 30 > rank · N0 so Woodbury applies."""
    import jax.numpy as jnp

    from bayes_attn.precision import x64
    from bayes_attn.samplers.base import gram, likelihood_data, observation, prepare

    net = ba.Network(random_network((2, 2), N0=5).attention, 3, [0.7, 1.1, 0.9, 1.3])
    x, y = random_data(30, N0=5)
    rng = rng_of(rank)
    F0 = rng.normal(size=(net.D, rank))
    with x64(True):
        inputs = prepare(net, x, y, None, 0.05, "float64")
        data = {f: likelihood_data(inputs, f) for f in ("tensor", "xi", "woodbury")}
        assert data["tensor"].shape == (4, 4, 30, 30) and data["xi"].shape == (30, 4, 5)

        def logp(F, form):
            return observation(F @ F.T, F, data[form], form, net.variances[0], 0.05).log_prob(inputs.y)

        F = jnp.asarray(F0)
        K = {f: np.asarray(gram(F @ F.T, F, data[f], f, net.variances[0])) for f in ("tensor", "xi")}
        K_u = np.asarray(gram(F @ F.T, None, data["xi"], "xi", net.variances[0]))  # ξ (U ⊗ I) ξᵀ
        np.testing.assert_allclose(K["xi"], K["tensor"], rtol=1e-12, atol=1e-13 * np.abs(K["tensor"]).max())
        np.testing.assert_allclose(K_u, K["tensor"], rtol=1e-12, atol=1e-13 * np.abs(K["tensor"]).max())
        values = {f: jax.value_and_grad(logp)(F, f) for f in ("tensor", "xi", "woodbury")}
        v0, g0 = values["tensor"]
        for f in ("xi", "woodbury"):
            v, g = values[f]
            assert abs(float(v) - float(v0)) <= 1e-10 * abs(float(v0)), (f, float(v), float(v0))
            np.testing.assert_allclose(np.asarray(g), np.asarray(g0), rtol=1e-8, atol=1e-10 * np.abs(g0).max())


def test_kernel_form_choice_by_shape():
    """Few paths and examples: the stored tensor; 16 paths at P = 600, N0 = 64: the ξ product; rank · N0 < P: Woodbury."""
    from bayes_attn.network import choose_kernel_form, kernel_form_costs

    assert choose_kernel_form(4, 100, 231) == "tensor"  # Fig. 2c
    assert choose_kernel_form(16, 600, 64) == "xi"  # the one-shot image task
    assert choose_kernel_form(16, 600, 8, rank=4) == "woodbury"
    assert "woodbury" not in kernel_form_costs(16, 600, 64, rank=16)


def test_memoized_xi_reuses_equal_inputs_only():
    from bayes_attn.network import memoized_xi

    net = random_network((2, 2))
    x, _ = random_data(5)
    plain = np.asarray(net.xi(x))
    with memoized_xi():
        a = net.xi(x)
        assert net.xi(x.copy()) is a and net.with_width(9).xi(x) is a  # equal inputs, any width
        np.testing.assert_array_equal(np.asarray(a), plain)
        x[0, 0, 0] += 1.0  # changed in place: computed again
        b = net.xi(x)
        assert b is not a
        np.testing.assert_array_equal(np.asarray(b), np.asarray(ba.Network(net.attention, 4).xi(x)))
        other = ba.Network([2.0 * w for w in net.attention], 4)
        assert other.xi(x) is not b
    assert net.xi(x) is not b  # nothing kept after the context
