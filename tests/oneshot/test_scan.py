"""The theory's predictor and the temperature scan on the frozen attention (bayes_attn.oneshot._scan)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_data, random_network

from bayes_attn.oneshot._scan import path_inputs, predictor_mean, temperature_scan
from bayes_attn.oneshot._spec import OneShotSpec, TheorySpec
from bayes_attn.theory import solve_theory


@pytest.mark.slow
def test_predictor_mean_equals_theory_predict():
    net = random_network((2, 2), width=5, N0=6)
    x, y = random_data(30)
    xt, _ = random_data(9, seed=5)
    t = solve_theory(net, x, y, temperature=0.3)
    got = predictor_mean(t.U, 0.3, path_inputs(net, x), y, path_inputs(net, xt))
    np.testing.assert_allclose(got, t.predict(xt)[0], rtol=1e-8, atol=1e-10)


@pytest.mark.slow
def test_temperature_is_chosen_on_validation_never_on_test():
    net = random_network((2, 2), width=5, N0=6, scale=2.0)
    x, y = random_data(40)
    xv, yv = random_data(60, seed=7)
    xt, yt = random_data(50, seed=8)
    spec = OneShotSpec(theory=TheorySpec(widths=(3, 30), temperatures=(0.02, 0.3, 3.0), sample_widths=(),
                                         score_width=3))
    scan = temperature_scan(spec, net, (x, y), (xv, yv), (xt, yt), progress_bar=False)
    ds = scan.dataset
    for i, N in enumerate(ds["width"].values):
        acc = [np.mean(np.where(scan.theories[(int(N), float(T))].predict(xv)[0] >= 0, 1, -1) == yv)
               for T in ds["temperature"].values]
        ok = ds["converged"].values[i]
        assert float(ds["best_temperature"][i]) == ds["temperature"].values[int(np.argmax(np.where(ok, acc, -1)))]
        np.testing.assert_allclose(ds["accuracy_validation"].values[i], acc)
    flipped = temperature_scan(spec, net, (x, y), (xv, yv), (xt, -yt), progress_bar=False).dataset
    np.testing.assert_array_equal(flipped["best_temperature"], ds["best_temperature"])
    assert float(flipped["gp_best_temperature"]) == float(ds["gp_best_temperature"])
    np.testing.assert_allclose(flipped["accuracy_theory"], 1 - ds["accuracy_theory"])
