"""Damped Newton minimisation of the reduced action (bayes_attn.theory._newton)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import CONFIGS, random_problem, rng_of

from bayes_attn import theory as th
from bayes_attn.theory._coordinates import unpack
from bayes_attn.theory._newton import newton_direction


def test_newton_solver_checks_its_parameters():
    for bad, name in [
        (dict(coordinates="cartesian"), "coordinates"),
        (dict(tol=0.0), "tol"),
        (dict(max_iter=-1), "max_iter"),
        (dict(armijo=1.0), "armijo"),
        (dict(backtrack=0.0), "backtrack"),
        (dict(max_backtracks=0), "max_backtracks"),
        (dict(stall_steps=0), "stall_steps"),
        (dict(slack_ulps=-1.0), "slack_ulps"),
    ]:
        with pytest.raises(ValueError, match=name):
            th.NewtonSolver(**bad)


def test_newton_direction_descends_on_indefinite_hessian():
    rng = rng_of(0)
    Q = np.linalg.qr(rng.normal(size=(5, 5)))[0]
    H = Q @ np.diag([-2.0, -1e-3, 0.5, 3.0, 10.0]) @ Q.T
    for _ in range(5):
        g = rng.normal(size=5)
        d = newton_direction(g, H)
        assert g @ d < 0
    g = rng.normal(size=5)
    Hpd = Q @ np.diag([0.1, 1, 2, 3, 4]) @ Q.T
    np.testing.assert_allclose(newton_direction(g, Hpd), -np.linalg.solve(Hpd, g))


@pytest.mark.slow
def test_vech_coordinates_reach_same_solution():
    heads, widths, variances = CONFIGS[1]
    net, x, y = random_problem(heads, widths, variances)
    a = th.solve_theory(net, x, y, temperature=0.1)
    solver = th.NewtonSolver(tol=1e-9, max_iter=100, coordinates="vech")
    res = solver.minimise(th.gp_order_parameters(net)[0], th.make_problem(net, x, y, 0.1))
    assert isinstance(res, th.NewtonResult) and res.converged
    np.testing.assert_allclose(unpack(res.theta, net.heads)[0], a.U, rtol=1e-6, atol=1e-9)
    assert res.value == pytest.approx(a.action, rel=1e-12)
    b = th.solve_theory(net, x, y, temperature=0.1, solver=solver)
    assert b.converged and b.iterations == res.iterations
    np.testing.assert_array_equal(b.U, unpack(res.theta, net.heads)[0])
