"""One experiment point (bayes_attn.experiment): the point is the unit every job evaluates, and evaluating it is the
five steps it replaces (theory, GP limit, posterior, comparison, verdict)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from conftest import forbid_calls, random_data, random_network, seed_of

import bayes_attn as ba
from bayes_attn import experiment
from bayes_attn.experiment import Point
from bayes_attn.samplers import SamplerSettings

ROOT = Path(__file__).resolve().parents[1]
SCIENCE = ("solve_theory", "gp_limit", "sample_posterior", "compare")
JOBS = ("runs/_pipeline.py", "sweep/_table.py", "oneshot/_pipeline.py", "cli.py")
"""The job modules: each reaches the science through :mod:`bayes_attn.experiment` alone."""


def _point(**changes) -> Point:
    net = random_network((2, 2), width=4)  # the shapes of conftest's ``tiny``: their programs are compiled once
    x, y = random_data(20)
    xt, yt = random_data(7, seed=2)
    settings = SamplerSettings(name="wishart", num_chains=2, num_warmup=30, num_samples=30, seed=seed_of(3))
    return Point(**({"net": net, "x": x, "y": np.sign(y), "x_test": xt, "y_test": np.sign(yt), "temperature": 0.5,
                     "sampler": settings} | changes))


def _called(path: Path) -> set[str]:
    """The names called in the module at ``path`` (``f(...)`` and ``m.f(...)``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            out.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return out


@pytest.mark.parametrize("module", JOBS)
def test_no_job_wires_the_science_itself(module):
    """``run``, a sweep job and ``prune`` evaluate points; none calls the theory, the sampler or the comparison
    itself (where three copies of that sequence once decided three verdicts)."""
    assert not _called(ROOT / "bayes_attn" / module) & set(SCIENCE), module


def test_run_sweep_and_prune_evaluate_the_same_point():
    for module in ("runs/_pipeline.py", "sweep/_table.py", "oneshot/_scan.py"):
        assert "evaluate" in _called(ROOT / "bayes_attn" / module), module
    # prune's scan is experiment.scan's grid; its points take that theory and sample and compare through the point
    assert not _called(ROOT / "bayes_attn/oneshot/_scan.py") & set(SCIENCE)
    for module in ("sweep/_table.py", "oneshot/_scan.py"):  # one scan: sweep's theory jobs and GP limits, prune's grid
        assert "scan" in _called(ROOT / "bayes_attn" / module), module


@pytest.mark.slow
def test_scan_is_each_cell_solved_alone_and_the_gp_limit_per_temperature():
    """Warm starts change where the minimisation starts, not the minimum it finds (to the solver's tolerance)."""
    point = _point(correction="none", sampler=None)
    widths, temps = [3, 30], [0.05, 0.5, 2.0]
    solved = []
    grid = experiment.scan(point, widths, temps, on_solved=solved.append)
    assert set(grid.theories) == {(N, T) for N in widths for T in temps} and set(grid.gps) == set(temps)
    assert [(t.net.widths[0], t.temperature) for t in solved] == [(N, T) for N in widths for T in sorted(temps)[::-1]]
    for (N, T), t in grid.theories.items():
        alone = ba.solve_theory(point.net.with_width(N), point.x, point.y, temperature=T)
        assert t.converged and t.is_minimum and t.correction is None
        np.testing.assert_allclose(t.U, alone.U, rtol=1e-6, atol=1e-9)  # gradient tol 1e-10: ~1e-10 / min eig of H
    for T, gp in grid.gps.items():
        np.testing.assert_array_equal(gp.U, experiment.gp_of(_point(temperature=T)).U)
    empty = experiment.scan(point, [], temps, gp=False)  # nothing asked, nothing solved
    assert empty.theories == {} and empty.gps == {}


@pytest.mark.slow
def test_sweep_and_prune_solve_their_theory_through_the_one_scan(monkeypatch, tmp_path):
    from conftest import THEORY_ONLY

    from bayes_attn.oneshot._scan import temperature_scan
    from bayes_attn.oneshot._spec import OneShotSpec, TheorySpec
    from bayes_attn.spec import spec_from_dict
    from bayes_attn.sweep import sweep

    calls, scan = [], experiment.scan
    monkeypatch.setattr(experiment, "scan", lambda p, w, t, **kw: calls.append((list(w), list(t))) or scan(p, w, t,
                                                                                                              **kw))
    sweep(spec_from_dict(THEORY_ONLY), tmp_path / "sw", temperatures=[0.1, 1.0], progress_bar=False)
    jobs = [(w, t) for w, t in calls if w]
    assert sorted(jobs) == sorted(([N], [T]) for N in (3, 30) for T in (0.1, 1.0))  # each theory job one cell
    assert [t for w, t in calls if not w] == [[0.1, 1.0]]  # and the GP limits at every temperature
    calls.clear()
    net = random_network((2, 2), width=4)
    (x, y), (xv, yv), (xt, yt) = random_data(20), random_data(9, seed=7), random_data(7, seed=2)
    spec = OneShotSpec(theory=TheorySpec(widths=(3, 30), temperatures=(0.1, 1.0), sample_widths=(), score_width=3))
    temperature_scan(spec, net, (x, np.sign(y)), (xv, np.sign(yv)), (xt, np.sign(yt)), progress_bar=False)
    assert calls == [([3, 30], [0.1, 1.0])]


@pytest.mark.slow
@pytest.mark.parametrize("correction", ["none", "laplace"])
def test_evaluate_is_the_five_steps_it_replaces(correction):
    point = _point(correction=correction, headline=correction)
    res = experiment.evaluate(point)
    theory = ba.solve_theory(point.net, point.x, point.y, temperature=0.5, correction=correction)
    np.testing.assert_allclose(res.theory.U, theory.U, rtol=1e-12)
    np.testing.assert_allclose(res.gp.U, ba.gp_limit(point.net, point.x, point.y, temperature=0.5).U, rtol=1e-12)
    post = ba.sample_posterior(point.net, point.x, point.y, temperature=0.5, x_test=point.x_test,
                               sampler=point.sampler, progress_bar=False)
    np.testing.assert_array_equal(res.posterior.tree["posterior"]["U"].values, post.tree["posterior"]["U"].values)
    comp = ba.compare(theory, post, point.x_test, point.y_test, rtol=point.rtol, n_sigma=point.n_sigma)
    assert res.outcome == comp.outcome and res.comparison.correction == correction
    assert res.sampling_seconds > 0 and res.point is point


def test_evaluate_uses_a_given_theory_as_it_is(monkeypatch):
    point = _point()
    leading = ba.solve_theory(point.net, point.x, point.y, temperature=0.5)
    forbid_calls(monkeypatch, (experiment, "solve_theory"))
    res = experiment.evaluate(point, theory=leading)
    assert res.theory is leading and res.comparison.correction == "none"  # no correction to headline
    for other in (ba.solve_theory(point.net, point.x, point.y, temperature=0.25),
                  ba.solve_theory(point.net.with_width(8), point.x, point.y, temperature=0.5)):
        with pytest.raises(ValueError, match="the point's are"):
            experiment.evaluate(point, theory=other)


@pytest.mark.parametrize("changes, match", [
    ({"net": "net"}, "net must be a Network"),
    ({"correction": "exact"}, "correction"),
    ({"headline": "gp"}, "headline"),
    ({"rtol": 0.0}, "rtol"),
    ({"rtol": 10.0}, "rtol must be a relative tolerance strictly between"),
    ({"n_sigma": 1e6}, "n_sigma must be between 1 and 10"),
    ({"sampler": "wishart"}, "sampler must be a SamplerSettings"),
])
def test_a_point_refuses_bad_settings_naming_them(changes, match):
    with pytest.raises(ValueError, match=match):
        _point(**changes)


def test_check_refuses_before_computing_and_a_theory_only_point_is_not_sampled(monkeypatch):
    forbid_calls(monkeypatch, (experiment, "solve_theory"), (ba.posterior, "sample_posterior"))
    with pytest.raises(ValueError, match="temperature"):
        experiment.check(_point(temperature=-1.0))
    assert experiment.check(_point()).name == "wishart"
    theory_only = _point(sampler=None)
    assert experiment.check(theory_only) is None
    with pytest.raises(ValueError, match="theory-only point"):
        experiment.evaluate(theory_only)
    with pytest.raises(ValueError, match="theory-only point"):
        experiment.sample(theory_only)
