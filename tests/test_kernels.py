"""The forms of the kernel K(U) (bayes_attn.kernels): their agreement and the choice among them."""

import jax
import numpy as np
import pytest
from conftest import random_data, random_network, rng_of

import bayes_attn as ba


@pytest.mark.parametrize("rank", [1, 2, 4])
@pytest.mark.slow
def test_kernel_forms_agree_in_float64(rank):
    """The likelihood's three forms (path-kernel tensor, ξ product, Woodbury) give the same log density and
    gradient in float64, and the tensor and ξ forms the same Gram matrix; P = 30 > rank · N0 so Woodbury applies."""
    import jax.numpy as jnp

    from bayes_attn._internal.precision import x64
    from bayes_attn.samplers._base import FeatureNormal, gram, likelihood_data, observation, prepare

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
        # the ξ form with a factor of rank ≤ D differentiates in the features (gp.log_likelihood_features)
        assert isinstance(observation(F @ F.T, F, data["xi"], "xi", net.variances[0], 0.05), FeatureNormal)
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
    """Few paths and examples: the stored tensor; 16 paths at P = 600, N0 = 64: the ξ product; rank · N0 < P:
    Woodbury."""
    from bayes_attn.kernels import choose_kernel_form, kernel_form_costs

    assert choose_kernel_form(4, 100, 231) == "tensor"  # Fig. 2c
    assert choose_kernel_form(16, 600, 64) == "xi"  # the one-shot image task
    assert choose_kernel_form(16, 600, 8, rank=4) == "woodbury"
    assert "woodbury" not in kernel_form_costs(16, 600, 64, rank=16)


def test_one_rule_chooses_every_form():
    """:func:`cheapest_form`: the least cost among the forms that fit (ties: the first listed); the samplers',
    the theory's and the proposals' choices all go through it."""
    from bayes_attn.kernels import basis_form, cheapest_form
    from bayes_attn.samplers._laplace import proposal_form

    assert cheapest_form({"a": 2.0, "b": 1.0}) == "b"
    assert cheapest_form({"a": 2.0, "b": 1.0}, fits={"b": False}) == "a"
    assert cheapest_form({"a": 1.0, "b": 1.0}) == "a" and cheapest_form({"b": 1.0, "a": 1.0}) == "b"
    with pytest.raises(ValueError, match="no form of"):
        cheapest_form({"a": 1.0}, fits={"a": False})
    assert basis_form(4, 100) == "C" and basis_form(16, 600) == "xi"  # D² P² against C_MAX_ENTRIES
    assert proposal_form(3, 10, 1, 8) == "xi"  # n_1 = 6 > D N0 = 3
    assert proposal_form(5, 10, 1, 8) == "xi"  # n_1 = 15 > D N0 = 5 ...
    assert proposal_form(5, 10, 3, 8) == "xi"  # ... n_1 = D N0 = 15: a tie goes to "xi"
    assert proposal_form(5, 10, 4, 8) == "C"
