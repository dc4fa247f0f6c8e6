"""The samplers sample the same, correct posterior.

- collapsed vs full NUTS: posterior means of ``U`` and ``f_test`` agree within
  Monte-Carlo error (``|diff| <= Z sqrt(mcse_a² + mcse_b²)``, ArviZ MCSE);
- token vs path form, and the collapsed model: potential energies agree with
  each other and with an independent NumPy/SciPy evaluation of the
  (marginal) posterior, to 1e-10;
- float32 sampling runs in float32 and agrees with float64 within MC error;
- simulation-based calibration (:mod:`bayes_attn.calibration`) of the full,
  collapsed and wishart samplers on a tiny network, and a negative control
  (a likelihood at the wrong temperature is rejected).

Every seed moves with the suite's offset (tests/conftest.py: ``seed_of``);
each stochastic test states its false-failure rate.
"""

import math
from functools import partial

import arviz_stats as azs
import jax
import numpy as np
import pytest
import scipy.stats
from conftest import (
    MIN_ESS,
    check_max_abs_z,
    key_of,
    random_data,
    random_network,
    seed_of,
    tiny_problem,
    traced_programs,
)
from numpyro.infer.util import potential_energy

import bayes_attn as ba
from bayes_attn import calibration, samplers
from bayes_attn._internal.precision import x64 as x64_context
from bayes_attn.samplers import _nuts as nuts

TEMPERATURE = 0.1
# agreement of 17 posterior means (U's upper triangle, f_test) within Z estimated standard errors: Bonferroni with
# Student-t tails at df = MIN_ESS (the MCSE is itself estimated) -> false failures <= 1e-3 per comparison of two runs
Z = (17, MIN_ESS)  # (comparisons, df) of check_max_abs_z


@pytest.fixture(scope="module")
def runs():
    """Full (path form) and collapsed NUTS on the same tiny problem, 2 chains × 500 draws."""
    net, x, y, xt = tiny_problem()
    common = dict(temperature=TEMPERATURE, x_test=xt, progress_bar=False)
    draws = ba.SamplerSettings(num_warmup=500, num_samples=500, num_chains=2)
    full = ba.sample_posterior(net, x, y, sampler=draws.replace(name="full", seed=seed_of(11), target_accept=0.9),
                               **common)
    coll = ba.sample_posterior(net, x, y, sampler=draws.replace(name="collapsed", seed=seed_of(12)), **common)
    return net, x, y, xt, full, coll


def _means_and_mcse(post) -> tuple[np.ndarray, np.ndarray]:
    """Posterior means and ArviZ MCSE of the upper triangle of ``U`` and of ``f_test``, concatenated."""
    p = post.tree["posterior"]
    mcse = azs.mcse(post.tree, var_names=["U", "f_test"])
    iu = np.triu_indices(p.sizes["path"])
    mean = np.r_[p["U"].mean(("chain", "draw")).values[iu], p["f_test"].mean(("chain", "draw")).values]
    se = np.r_[mcse["U"].values[iu], mcse["f_test"].values]
    return mean, se


def _assert_same_means(a, b, what: str, check):
    ma, sa = _means_and_mcse(a)
    mb, sb = _means_and_mcse(b)
    z = (ma - mb) / np.sqrt(sa**2 + sb**2)
    assert np.all(np.isfinite(z)), what
    check_max_abs_z(check, "max_abs_z_p", z, *Z, detail=f"{what}: z-scores {np.round(z, 2)}")


@pytest.mark.validate
@pytest.mark.slow
@pytest.mark.stochastic
def test_collapsed_and_full_agree_within_mc_error(runs, check):
    """Posterior means of ``U`` and ``f_test`` agree within ``Z`` MC standard errors (false failures <= 1e-3);
    the chains clear the preconditions R-hat < 1.05 and ESS > ``MIN_ESS`` with a margin at every offset, and
    the MC error is small against the posterior spread (the test has power).

    Measured over 14 seed offsets (tests/robustness.md): the nearest threshold, that of max_abs_z_p, has its null's
    tail 1.0e-03 (a p-value)."""
    net, x, y, xt, full, coll = runs
    for which, post in (("full", full), ("collapsed", coll)):  # the comparison means something for converged chains
        s = post.summary()
        check(f"max_rhat_{which}", s.max_rhat, 1.05, detail=s.by_variable())
        check(f"min_ess_{which}", s.min_ess, MIN_ESS, fails="below", scale="log", detail=s.by_variable())
    _assert_same_means(full, coll, "collapsed vs full", check)
    # the test has power: the MC error is small against the posterior spread of the observables
    _, se = _means_and_mcse(coll)
    sd = np.r_[coll.tree["posterior"]["U"].std(("chain", "draw")).values[np.triu_indices(net.D)],
               coll.tree["posterior"]["f_test"].std(("chain", "draw")).values]
    check("max_mcse_over_sd", np.max(se / sd), 0.1, scale="log")


# ----------------------------------------------------------------------------
# potentials: exact checks
# ----------------------------------------------------------------------------
def _potentials(net, x, y):
    """Potential energies (``-log`` joint density, as NUTS sees it) of the samplers' models, built by the registry."""
    inputs = samplers.prepare(net, x, y, None, TEMPERATURE, "float64")
    out = {}
    for name in ("full-token", "full", "collapsed"):
        model, args = samplers.get(name).build(inputs)
        # all sites are unconstrained Normals, so potential_energy is exactly initialize_model's potential_fn
        out[name] = jax.jit(partial(potential_energy, model, args, {}))
    return out


def _reference_potentials(net, x, y, W: ba.Weights) -> tuple[float, float]:
    """Independent evaluation: ``-log prior - log lik`` (full) and ``-log prior(upper) - log N(y; 0, K + T I)``."""
    sd = [math.sqrt(v) for v in net.variances]
    lp_upper = sum(scipy.stats.norm.logpdf(np.asarray(V), scale=sd[l + 1]).sum() for l, V in enumerate(W.V))
    lp_upper += scipy.stats.norm.logpdf(np.asarray(W.a), scale=sd[-1]).sum()
    lp_V0 = scipy.stats.norm.logpdf(np.asarray(W.V0), scale=sd[0]).sum()
    f = np.asarray(net.forward(W, x, form="token"))
    ll = scipy.stats.norm.logpdf(y, loc=f, scale=math.sqrt(TEMPERATURE)).sum()
    w = np.asarray(net.effective_weights(W))
    K = np.asarray(net.kernel(w @ w.T / w.shape[1], x))
    marg = scipy.stats.multivariate_normal.logpdf(y, mean=np.zeros(len(y)), cov=K + TEMPERATURE * np.eye(len(y)))
    return -(lp_V0 + lp_upper + ll), -(lp_upper + marg)


@pytest.mark.parametrize("heads", [(2, 2), (3,), (2, 1, 2)])
@pytest.mark.slow
def test_potentials_token_path_and_collapsed_are_exact(heads):
    net = random_network(heads, width=3, seed=5)
    x, y = random_data(9, seed=6)
    pes = _potentials(net, x, y)
    for seed in range(3):
        W = net.sample_prior(key_of(seed))
        if seed == 2:  # far from the prior's typical set, too
            W = jax.tree.map(lambda v: 3.0 * v, W)
        z = {"V0": W.V0, "a": W.a, **{f"V{l + 1}": V for l, V in enumerate(W.V)}}
        upper = {k: v for k, v in z.items() if k != "V0"}
        pe_tok, pe_path, pe_coll = float(pes["full-token"](z)), float(pes["full"](z)), float(pes["collapsed"](upper))
        ref_full, ref_coll = _reference_potentials(net, x, y, W)
        tol = 1e-10 * max(1.0, abs(ref_full))
        assert abs(pe_tok - pe_path) <= tol, (pe_tok, pe_path)
        assert abs(pe_path - ref_full) <= tol, (pe_path, ref_full)
        assert abs(pe_coll - ref_coll) <= 1e-10 * max(1.0, abs(ref_coll)), (pe_coll, ref_coll)
        g_tok, g_path = jax.grad(pes["full-token"])(z), jax.grad(pes["full"])(z)
        for k in z:
            np.testing.assert_allclose(g_tok[k], g_path[k], rtol=1e-9, atol=1e-10 * max(1.0, abs(ref_full)))


# ----------------------------------------------------------------------------
# float32
# ----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.stochastic
def test_float32_collapsed_sampling_matches_float64(runs, check):
    """float32 chains store float32 numbers and agree with the float64 ones within ``Z`` MC standard errors
    (false failures <= 1e-3).

    Measured over 14 seed offsets (tests/robustness.md): the nearest threshold, that of max_abs_z_p, has its null's
    tail 1.0e-03 (a p-value)."""
    net, x, y, xt, full, coll = runs
    post = ba.sample_posterior(net, x, y, temperature=TEMPERATURE, x_test=xt,
                               sampler=ba.SamplerSettings(name="collapsed", num_warmup=300, num_samples=500,
                                                          num_chains=2, seed=seed_of(13), dtype="float32"),
                               progress_bar=False)
    assert post.tree.attrs["dtype"] == "float32"
    for name in ("U", "f_test"):
        v = post.tree["posterior"][name].values
        assert np.all(np.isfinite(v))
        # sampled in float32: every stored value is exactly a float32 number
        np.testing.assert_array_equal(v.astype(np.float32).astype(np.float64), v)
    check("max_rhat_float32", post.summary().max_rhat, 1.05, detail=post.summary().by_variable())
    _assert_same_means(post, coll, "float32 vs float64 collapsed", check)


# ----------------------------------------------------------------------------
# simulation-based calibration
# ----------------------------------------------------------------------------
SBC_SETTINGS = dict(temperature=0.1, n_reps=100)
SBC_SAMPLER = calibration.SBC_SAMPLER.replace(seed=seed_of(0))  # 200 warm-up, then 19 draws kept every 5
SBC_BINS = 4  # 20 possible ranks -> 5 per bin; 25 expected counts per bin
SBC_LEVEL = 1e-3  # the Bonferroni-pooled p-value is conservative: a calibrated sampler fails with probability <= this


def _sbc_problem():
    return calibration.random_problem((2, 2), width=2, N0=4, T=3, P=8, P_test=1, seed=seed_of(0))


@pytest.mark.validate
@pytest.mark.parametrize("sampler", ["full", "collapsed", "wishart"])
@pytest.mark.slow
@pytest.mark.stochastic
def test_simulation_based_calibration(sampler, check):
    """Ranks of the true U, U_2 (upper triangles), Ua, f(x_test) and f(x_train[0]) among posterior draws are uniform.

    Per observable a chi-square test over 100 independent replications;
    Bonferroni over the 16 observables (they are dependent within a
    replication, so counts are not pooled across them). The truth comes from
    the prior of the weights for every sampler (for ``wishart`` too: the order
    parameters of prior weights have the Wishart-chain law). False failures
    <= ``SBC_LEVEL`` = 1e-3 (the pooled p-value is conservative).

    Measured over 14 seed offsets (tests/robustness.md): the nearest threshold, that of p_pooled [collapsed], has its
    null's tail 1.0e-03 (a p-value)."""
    net, x, xt = _sbc_problem()
    res = calibration.sbc_ranks(net, x, xt, sampler=SBC_SAMPLER.replace(name=sampler), **SBC_SETTINGS)
    assert res.ranks.shape == (100, 16)
    assert res.labels[:1] == ["U[1-1,1-1]"] and {"U_2[1,2]", "Ua", "f_test[0]", "f_train[0]"} <= set(res.labels)
    assert res.ranks.min() >= 0 and res.ranks.max() <= res.num_draws
    u = calibration.uniformity(res, SBC_BINS)
    check("p_pooled", u["p_pooled"], SBC_LEVEL, fails="below", scale="p", detail=u)


@pytest.mark.validate
@pytest.mark.slow
@pytest.mark.stochastic
def test_simulation_based_calibration_has_power(check):
    """Negative control: the sampler's likelihood at T/16 while the data come from T must be rejected (wishart:
    cheapest; started from the prior: from each replication's expansion the chains of the wrong posterior take
    74 leapfrog steps per draw, twice the time, and the control tests the check, not the start) at the
    calibration test's level ``SBC_LEVEL``, with 200 replications. A miss is 1 − power: at T/4 the pooled p-value
    was 3.5e-3 at offset 0 and 2.9e-6 at offset 1 (no power to spare); at T/16 with 100 replications its normal
    quantile had a mean of 7.3 and an sd of 1.4 over 10 offsets (tests/robustness.md), 3.07 sds from the level's
    3.09 (at T/64 the p-value was no smaller: the observables the temperature moves are few); the chi-square's
    noncentrality doubles with the replications, the quantile's mean grows by about sqrt(2) and its sd stays.

    Measured over 14 seed offsets (tests/robustness.md): the nearest threshold, that of p_pooled_wrong_temperature,
    has its null's tail 9.8e-10 (a p-value)."""
    net, x, xt = _sbc_problem()
    res = calibration.sbc_ranks(net, x, xt, sampler=SBC_SAMPLER.replace(name="wishart", start="prior"),
                                likelihood_temperature=SBC_SETTINGS["temperature"] / 16,
                                **(SBC_SETTINGS | {"n_reps": 200}))
    assert res.config["likelihood_temperature"] == SBC_SETTINGS["temperature"] / 16
    u = calibration.uniformity(res, SBC_BINS)
    check("p_pooled_wrong_temperature", u["p_pooled"], SBC_LEVEL, fails="above", scale="p", detail=u)


# ----------------------------------------------------------------------------
# one NUTS builder: labels, chains in one program, conditional draws compiled once
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["full", "full-token", "collapsed", "wishart"])
def test_labels_argument_is_declared_by_the_sampler(name):
    net = random_network((2, 2), width=4)
    x, y = random_data(5)
    inputs = samplers.prepare(net, x, y, None, TEMPERATURE, "float64")
    smp = samplers.get(name)
    model, args = smp.build(inputs)
    assert smp.labels(args) is inputs.y
    y2 = -inputs.y
    args2 = smp.with_labels(args, y2)
    assert len(args2) == len(args) and smp.labels(args2) is y2
    assert all(a is b for i, (a, b) in enumerate(zip(args, args2, strict=True)) if i != smp.labels_arg % len(args))


@pytest.mark.slow  # ~30 s: three compilations of NUTS
def test_sequential_chains_in_one_program_match_numpyro_loop():
    """The library's "sequential" (all chains under one lax.map) runs the same chains as NumPyro's loop:
    the same keys and algorithm, so draws agree up to rounding (different compiled programs)."""
    net = random_network((2, 2), width=6)
    x, y = random_data(12)
    smp = samplers.get("wishart")
    settings = samplers.SamplerSettings(name="wishart", num_warmup=15, num_samples=10, num_chains=2, seed=seed_of(1))
    with x64_context(True):
        inputs = samplers.prepare(net, x, y, None, TEMPERATURE, "float64")
        model, args = smp.build(inputs)
        U = {}
        for one in (True, False):
            mcmc = nuts.mcmc(smp, settings.replace(chain_method="sequential"), model, inputs, samplers.Storage(),
                             one_compile=one)
            mcmc.run(key_of(1), *args)
            U[one] = np.asarray(mcmc.get_samples(group_by_chain=True)["U"])
    assert U[True].shape == (2, 10, 4, 4)
    np.testing.assert_allclose(U[True], U[False], rtol=1e-6, atol=1e-9)


def test_conditional_draws_compile_once_per_shape(monkeypatch):
    """A second call of the exact conditional draws with the same shapes compiles nothing; another number of draws
    (10 and 40: one batch size per problem, whatever the count) at another temperature reuses the compiled batch,
    and its draws do not depend on how they are batched (whole batches of 7, the last padded, against one padded
    batch of 256)."""
    import jax.monitoring

    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda ev, d, **k: compiles.append(ev) if ev == "/jax/core/compile/backend_compile_duration" else None)
    net = random_network((2, 2), width=4)
    x, y = random_data(6)
    xt, _ = random_data(3, seed=4)
    with x64_context(True):
        inputs = samplers.prepare(net, x, y, xt, TEMPERATURE, "float64")
        U = jax.numpy.broadcast_to(jax.numpy.eye(4), (2, 5, 4, 4))
        with traced_programs() as traced:
            first = samplers.conditional_outputs(U, key_of(0), inputs)
        assert "_conditional_f" in traced, traced  # the name the checks below look for
        n = len(compiles)
        second = samplers.conditional_outputs(U, key_of(0), inputs)
        assert len(compiles) == n
    for k in ("f_train", "f_test"):
        np.testing.assert_array_equal(first[k], second[k])
    with x64_context(True):
        hotter = samplers.prepare(net, x, y, xt, 2 * TEMPERATURE, "float64")
        U = jax.numpy.broadcast_to(jax.numpy.eye(4), (2, 20, 4, 4))
        with traced_programs() as traced:
            padded = samplers.conditional_outputs(U, key_of(1), hotter)  # 40 draws: one batch of 256, 216 dropped
        assert "_conditional_f" not in traced, traced
        monkeypatch.setattr(samplers._base, "CONDITIONAL_BATCH", 7)
        whole = samplers.conditional_outputs(U, key_of(1), hotter)  # six batches of 7 (two dropped)
    for k in ("f_train", "f_test"):
        assert padded[k].shape == (2, 20, {"f_train": 6, "f_test": 3}[k])
        np.testing.assert_allclose(padded[k], whole[k], rtol=1e-12, atol=1e-12)
