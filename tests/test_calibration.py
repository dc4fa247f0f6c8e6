"""Simulation-based calibration: simulation, compared observables, uniformity test (bayes_attn.calibration)."""

import math

import numpy as np
import pytest
from conftest import forbid_calls, key_of, rng_of, seed_of

from bayes_attn import calibration
from bayes_attn.calibration import SBCResult


def _result(ranks, num_draws, labels=None) -> SBCResult:
    """An :class:`SBCResult` holding ``ranks`` ``[R, Q]`` among ``num_draws`` draws."""
    ranks = np.asarray(ranks)
    R, Q = ranks.shape
    return SBCResult(ranks, labels or [f"q{q}" for q in range(Q)], num_draws, np.zeros(R), np.zeros(R, int), 0.0)


def test_uniformity_by_hand_with_two_bins():
    """Ranks 0-1 of 3 draws fall into the first of two bins, 2-3 into the second. Counts ``(7, 1)`` against 4 and
    4: chi-square 4.5 on one degree of freedom, whose tail is ``erfc(sqrt(4.5 / 2))``; pooled over the two
    observables (Bonferroni): twice the smaller p-value."""
    ranks = np.array([[0, 1, 2, 3, 0, 1, 2, 3], [0, 0, 0, 0, 0, 0, 1, 3]]).T  # [R = 8, Q = 2]
    u = calibration.uniformity(_result(ranks, 3, ["flat", "piled"]), bins=2)
    assert u["bins"] == 2 and u["counts"] == [[4, 4], [7, 1]]
    p = math.erfc(math.sqrt(4.5 / 2))
    assert u["p_values"]["flat"] == pytest.approx(1.0)
    assert u["p_values"]["piled"] == pytest.approx(p, rel=1e-12)
    assert u["p_min"] == pytest.approx(p, rel=1e-12) and u["worst"] == "piled"
    assert u["p_pooled"] == pytest.approx(2 * p, rel=1e-12)


def test_uniformity_by_hand_with_three_bins_and_the_pooled_p_value_at_most_one():
    """Ranks of 5 draws in three bins of two ranks each; counts ``(0, 0, 6)`` against 2 each: chi-square 12 on two
    degrees of freedom, whose tail is ``exp(−12 / 2)``."""
    ranks = np.array([[0, 1, 2, 3, 4, 5], [5, 5, 5, 5, 5, 4], [1, 0, 3, 2, 5, 4]]).T
    u = calibration.uniformity(_result(ranks, 5), bins=3)
    assert u["counts"] == [[2, 2, 2], [0, 0, 6], [2, 2, 2]]
    assert u["p_values"]["q1"] == pytest.approx(math.exp(-6.0), rel=1e-12)
    assert u["p_pooled"] == pytest.approx(3 * math.exp(-6.0), rel=1e-12) and u["worst"] == "q1"
    assert calibration.uniformity(_result(ranks[:, [0, 2]], 5), bins=3)["p_pooled"] == 1.0  # min(1, 2 · 1)


def test_uniformity_needs_equally_likely_bins():
    with pytest.raises(ValueError, match=r"num_draws \+ 1 = 5 must be divisible by bins = 2"):
        calibration.uniformity(_result(np.zeros((4, 1), int), 4), bins=2)
    with pytest.raises(ValueError, match="bins must be an integer >= 2"):
        calibration.uniformity(_result(np.zeros((4, 1), int), 3), bins=1)


def test_compared_observables_are_upper_triangles_then_Ua_f_test_and_f_train():
    """Columns in order: the upper triangle of ``U`` (row by row), of ``U_2``, ``Ua``, every ``f_test`` and the first
    ``n_train_obs`` of ``f_train``, each labelled with its paths; what the draws do not hold is left out."""
    net, _, _ = calibration.random_problem((2, 2), width=3)
    R, S = 2, 3
    rng = rng_of(0)
    truth = {"U": rng.normal(size=(R, 4, 4)), "U_2": rng.normal(size=(R, 2, 2)), "Ua": rng.normal(size=R),
             "f_test": rng.normal(size=(R, 2)), "f_train": rng.normal(size=(R, 5))}
    draws = {k: rng.normal(size=(R, S, *v.shape[1:])) for k, v in truth.items()}
    true, drawn, labels = calibration.true_and_drawn(net, truth, draws, n_train_obs=2)
    paths = ["1-1", "1-2", "2-1", "2-2"]
    entries = ([("U", i, j) for i in range(4) for j in range(i, 4)]
               + [("U_2", i, j) for i in range(2) for j in range(i, 2)])
    assert labels == ([f"U[{paths[i]},{paths[j]}]" for _, i, j in entries[:10]] + ["U_2[1,1]", "U_2[1,2]", "U_2[2,2]"]
                      + ["Ua", "f_test[0]", "f_test[1]", "f_train[0]", "f_train[1]"])
    assert true.shape == (R, 18) and drawn.shape == (R, S, 18)
    for q, (name, i, j) in enumerate(entries):
        np.testing.assert_array_equal(true[:, q], truth[name][:, i, j])
        np.testing.assert_array_equal(drawn[:, :, q], draws[name][:, :, i, j])
    np.testing.assert_array_equal(true[:, 13:],
                                  np.column_stack([truth["Ua"], truth["f_test"], truth["f_train"][:, :2]]))
    np.testing.assert_array_equal(drawn[:, :, 13], draws["Ua"])
    np.testing.assert_array_equal(drawn[:, :, 14:16], draws["f_test"])
    np.testing.assert_array_equal(drawn[:, :, 16:], draws["f_train"][:, :, :2])
    stored = {k: v for k, v in draws.items() if k not in ("U_2", "Ua")}
    _, _, fewer = calibration.true_and_drawn(net, truth, stored, n_train_obs=0)
    assert fewer == labels[:10] + ["f_test[0]", "f_test[1]"]


def test_simulated_labels_are_the_predictor_plus_noise_scaled_by_the_root_of_the_temperature():
    """``y = f(x) + sqrt(T) ε``: one key at two temperatures draws the same weights (the same order parameters
    and predictor) and the same ``ε``; at test inputs equal to the training inputs ``f_test`` is ``f_train``."""
    net, x, _ = calibration.random_problem((4,), width=3, P=6, seed=seed_of(0))  # one layer: one quick program
    a = calibration.simulate(net, x, x, temperature=0.1, n_reps=5, key=key_of(1))
    b = calibration.simulate(net, x, x, temperature=0.4, n_reps=5, key=key_of(1))
    shapes = {"y": (5, 6), "U": (5, 4, 4), "Ua": (5,), "f_train": (5, 6), "f_test": (5, 6)}
    assert {k: v.shape for k, v in a.items()} == shapes
    for k in ("U", "Ua", "f_train", "f_test"):
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]))
    np.testing.assert_allclose(a["f_test"], a["f_train"], rtol=1e-12, atol=1e-12)
    eps = (np.asarray(a["y"]) - a["f_train"]) / math.sqrt(0.1)
    np.testing.assert_allclose((np.asarray(b["y"]) - b["f_train"]) / math.sqrt(0.4), eps, rtol=1e-10, atol=1e-12)
    assert np.all(eps != 0)
    U = np.asarray(a["U"])  # w wᵀ / N of 3 columns: positive semi-definite of rank 3
    np.testing.assert_array_equal(U, np.swapaxes(U, 1, 2))
    assert np.linalg.eigvalsh(U).min() > -1e-12 * np.abs(U).max() and np.all(np.asarray(a["Ua"]) > 0)


@pytest.mark.parametrize("change, match", [
    ({"sampler": "gibbs"}, "sampler must be one of"),
    ({"n_train_obs": 5}, "n_train_obs must be at most P = 4, got 5"),
    ({"n_reps": 0}, "n_reps must be an integer >= 1"),
    ({"temperature": -1.0}, "temperature must be a positive number"),
    ({"sampler": 3}, "sampler must be a sampler name or a SamplerSettings, got int"),
])
def test_sbc_ranks_checks_its_arguments_before_simulating(monkeypatch, change, match):
    net, x, xt = calibration.random_problem((2, 2), P=4)
    forbid_calls(monkeypatch, (calibration, "simulate"))
    with pytest.raises(ValueError, match=match):
        calibration.sbc_ranks(net, x, xt, **({"sampler": "wishart", "temperature": 0.1} | change))
