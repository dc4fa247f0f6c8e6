"""Sampling in blocks (bayes_attn.samplers._blocks): continued NUTS chains are one long run bit for bit, a reachable
target stops within one block of being met, an unreachable one at its budget with the verdict inconclusive, and
continued guided samplers stay calibrated (SBC)."""

import json

import numpy as np
import pytest
from conftest import TINY, seed_of

import bayes_attn as ba
from bayes_attn import calibration, cli
from bayes_attn.samplers import _blocks as blocks
from bayes_attn.spec import spec_from_dict


def _problem():
    spec = spec_from_dict(TINY)
    x, y, xt, _ = spec.data()
    return spec.net(), x, y, xt


def _sample(cfg, until=None):
    net, x, y, xt = _problem()
    return ba.sample_posterior(net, x, y, temperature=0.1, x_test=xt, sampler=cfg, progress_bar=False, until=until)


BASE = ba.SamplerSettings(num_warmup=60, num_samples=40, num_chains=2, seed=seed_of(3))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["collapsed", "wishart"])
def test_two_blocks_are_one_long_run_bit_for_bit(name):
    cfg = BASE.replace(name=name)
    long = _sample(cfg.replace(num_samples=80))
    two = _sample(cfg.replace(max_samples=80, target_ess=1e9))  # an unreachable target: both blocks are drawn
    assert blocks.Stopping.from_json(two.tree.attrs["stopping"]).blocks == 2
    for group in ("posterior", "sample_stats"):
        a, b = long.tree[group], two.tree[group]
        assert set(a.data_vars) == set(b.data_vars)
        for k in a.data_vars:
            np.testing.assert_array_equal(a[k].values, b[k].values, err_msg=f"{group}.{k}")


def _sample_at(width: int, cfg):
    net, x, y, xt = _problem()
    return ba.sample_posterior(net.with_width(width), x, y, temperature=0.1, x_test=xt, sampler=cfg,
                               progress_bar=False)


@pytest.mark.slow
def test_a_reachable_target_stops_within_one_block_of_being_met():
    """``laplace-is`` at N = 30, where the expansion fits (independent draws: R-hat near 1, about 100 ESS per
    block of 2 × 100): an ESS of 300 takes a few blocks, far inside the budget of 30, at any seed."""
    cfg = BASE.replace(name="laplace-is", num_samples=100, target_ess=300.0, max_samples=3000)
    post = _sample_at(30, cfg)
    stop = blocks.Stopping.from_json(post.tree.attrs["stopping"])
    assert stop.met and not stop.unmet and stop.blocks > 1, stop  # 2 × 100 draws cannot give an ESS of 300
    s = post.summary()
    assert s.diagnostics()["min_ess_bulk"] >= 300 and s.max_rhat <= 1.01
    assert post.tree["posterior"].sizes["draw"] == stop.blocks * 100 == stop.draws
    # the same blocks, one fewer (the same keys: block b draws from fold_in(key, BLOCK_SALT + b)) had a reason
    fewer = _sample_at(30, cfg.replace(target_ess=1e9, max_samples=(stop.blocks - 1) * 100))
    d = fewer.summary().diagnostics()
    assert blocks.reasons(d, cfg) + ba.diagnostics.convergence_failures(d)
    np.testing.assert_array_equal(fewer.tree["posterior"]["U"].values,
                                  post.tree["posterior"]["U"].values[:, : (stop.blocks - 1) * 100])


def test_an_unreachable_target_stops_at_the_budget_inconclusive():
    post = _sample(BASE.replace(name="wishart", target_ess=1e9, max_samples=120))
    stop = blocks.Stopping.from_json(post.tree.attrs["stopping"])
    assert (stop.blocks, stop.draws, stop.met) == (3, 120, False)
    assert "max_samples=120" in stop.budget and any("ESS" in r for r in stop.unmet)
    assert any("budget spent" in f for f in post.summary().failures())
    assert "in blocks: 3 blocks, 120 draws per chain" in post.method()
    timed = _sample(BASE.replace(name="wishart", target_ess=1e9, max_seconds=1e-3))
    stop = blocks.Stopping.from_json(timed.tree.attrs["stopping"])
    assert (stop.blocks, stop.met) == (1, False) and "max_seconds" in stop.budget


def test_the_callers_reasons_keep_the_blocks_going():
    seen = []

    def until(post):
        seen.append(post.tree["posterior"].sizes["draw"])
        return ["not yet"] if len(seen) < 3 else []

    post = _sample(BASE.replace(name="wishart", max_samples=400), until=until)
    assert seen[:3] == [40, 80, 120] and post.tree["posterior"].sizes["draw"] == seen[-1]  # then its own reasons
    with pytest.raises(ValueError, match="target_precision .* needs a theory"):
        _sample(BASE.replace(target_precision=0.5))


@pytest.mark.slow
def test_the_comparisons_precision_is_a_target_of_run(tmp_path):
    """At N = 3 with 2 chains, the Monte-Carlo bound of the U check is about 0.15 after 400 draws per chain
    (measured): a bound at the tolerance (0.05) is out of reach of 120, so the run stops at its budget."""
    path = tmp_path / "tiny.toml"
    path.write_text(spec_from_dict(TINY).to_toml())
    out = tmp_path / "run"
    status = cli.main(["run", str(path), "--out", str(out), "--no-progress", "--target-precision", "1",
                       "--max-samples", "120"])
    stop = blocks.Stopping.from_json(ba.load_posterior(out / "posterior.nc").tree.attrs["stopping"])
    assert status == cli.EXIT_DIAGNOSTICS and (stop.draws, stop.met) == (120, False)
    assert any(r.startswith("U (relative Frobenius): Monte-Carlo bound") for r in stop.unmet), stop.unmet
    report = (out / "report.md").read_text()
    assert "in blocks: 3 blocks, 120 draws per chain" in report and "budget spent" in report


@pytest.mark.parametrize("bad, match", [({"max_rhat": 1.2}, "max_rhat must be in"),
                                        ({"target_precision": 0.0}, "target_precision"),
                                        ({"max_samples": 10}, "max_samples must be an integer >= 40"),
                                        ({"thinning": 3, "target_ess": 100.0}, "multiple of thinning")])
def test_bad_block_settings_are_refused_naming_the_field(bad, match):
    with pytest.raises(ValueError, match=match):
        BASE.replace(**bad)


def test_sample_refuses_the_comparisons_precision_before_sampling(tmp_path, capsys):
    path = tmp_path / "tiny.toml"
    path.write_text(spec_from_dict(TINY | {"sampler": TINY["sampler"] | {"target_precision": 0.5}}).to_toml())
    assert cli.main(["sample", str(path), "--out", str(tmp_path / "s")]) == cli.EXIT_USAGE
    assert "target_precision" in capsys.readouterr().err and not (tmp_path / "s").exists()
    with pytest.raises(SystemExit) as exit_:  # not an option of sample (argparse's exit)
        cli.main(["sample", str(path), "--out", str(tmp_path / "s"), "--target-precision", "0.5"])
    assert exit_.value.code == cli.EXIT_USAGE and "--target-precision" in capsys.readouterr().err


SBC_BLOCKS = {name: calibration.SBC_SAMPLER.replace(name=name, num_warmup=w, num_samples=10 * t, thinning=t,
                                                    max_samples=20 * t, seed=seed_of(0))
              for name, w, t in (("laplace-is", 0, 50), ("laplace-mh", 100, 10))}
"""Two blocks of 10 kept draws per replication, each block of fresh proposals (``laplace-is``: 500 proposals,
every 50th kept after resampling; ``laplace-mh``: 100 dropped steps, then every 10th of 100)."""


@pytest.mark.validate
@pytest.mark.slow
@pytest.mark.stochastic
@pytest.mark.parametrize("sampler", list(SBC_BLOCKS))
def test_continued_guided_samplers_are_calibrated(sampler, check):
    """Ranks of the true ``U``, ``U_2``, ``Ua``, ``f(x_test)``, ``f(x_train[0])`` among the 20 draws of two blocks
    are uniform over 100 replications (chi-square per observable in 3 bins, Bonferroni over 16): false failures
    <= 1e-3 when the continued sampler is calibrated. The problem is tests/samplers/test_laplace.py's SBC problem
    (width 6, heads (2, 2), P = 8), where the single-block samplers pass; the power of these tests against a wrong
    likelihood is shown there."""
    net, x, xt = calibration.random_problem((2, 2), width=6, N0=4, T=3, P=8, P_test=1, seed=seed_of(0))
    res = calibration.sbc_ranks(net, x, xt, sampler=SBC_BLOCKS[sampler], temperature=0.1, n_reps=100)
    assert res.ranks.shape == (100, 16) and res.num_draws == 20
    u = calibration.uniformity(res, 3)
    check("p_pooled", u["p_pooled"], 1e-3, fails="below", scale="p", detail=json.dumps(u["p_values"]))
