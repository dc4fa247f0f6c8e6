"""bayes_attn/diagnostics.py: ArviZ's summary in threads, and the rule that says why draws cannot be trusted."""

import numpy as np
import pytest
import xarray as xr
from conftest import rng_of

from bayes_attn import diagnostics


def test_summary_table_in_threads_is_arviz_summary():
    """:func:`~bayes_attn.diagnostics.summary_table` in 2, 3 or 7 threads (entries cut into pieces along a
    variable's first dimension: uneven pieces, a scalar variable, a variable smaller than a piece) gives ArviZ's
    own table bit for bit, rows in ArviZ's order; a worker count below 1 is refused before any work."""
    import arviz_stats as azs
    import pandas as pd

    rng = rng_of(0)
    draws = xr.Dataset({"U": (("chain", "draw", "path", "path_"), rng.normal(size=(3, 200, 3, 3))),
                        "Ua": (("chain", "draw"), rng.gamma(2.0, size=(3, 200))),
                        "f": (("chain", "draw", "example"), rng.normal(size=(3, 200, 11)).cumsum(1))},
                       coords={"path": ["1-1", "1-2", "2-1"], "path_": ["1-1", "1-2", "2-1"]})
    ref = azs.summary(draws, kind="all", round_to="none")
    for workers in (1, 2, 3, 7):
        pd.testing.assert_frame_equal(diagnostics.summary_table(draws, workers), ref)
    with pytest.raises(ValueError, match="workers"):
        diagnostics.summary_table(draws, 0)


def test_a_failed_diagnostic_never_reads_as_a_pass():
    """Each failure shows the value with the digits that make it differ from its bound ("max R-hat 1.0103 >
    1.01", not "1.01 > 1.01"; issue 53)."""
    failures = diagnostics.diagnostic_failures({"max_r_hat": 1.0103, "min_ess_bulk": 99.96, "divergences": 0,
                                       "min_bfmi": 0.29999, "pareto_k": 0.70004})
    assert failures == ["max R-hat 1.0103 > 1.01", "min bulk ESS 99.96 < 100", "min BFMI 0.29999 < 0.3",
                        "importance-sampling Pareto k-hat 0.70004 > 0.7"], failures
    assert diagnostics.diagnostic_failures({"max_r_hat": float("nan")}) == ["max R-hat nan > 1.01"]


def _bench_rhat():
    """``benchmarks/bench_rhat_null.py`` (its chains, scenarios and vectorised rank R-hat) as a module."""
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    return importlib.import_module("bench_rhat_null")


def test_rhat_bound_is_the_chi_square_null_of_split_rhat():
    """:func:`~bayes_attn.diagnostics.rhat_bound` grows with the entries and falls with the required ESS per split
    chain; its closed form at one entry of 2 chains; 1 chain (no R-hat) gives NaN; bad arguments are refused."""
    from scipy import stats

    from bayes_attn.diagnostics import required_ess, rhat_bound

    assert required_ess(2) == 400 and required_ess(4) == 800 and required_ess(64) == 12800
    bounds = [rhat_bound(k, 4, 350) for k in (1, 30, 300, 3000, 10_000)]
    assert all(a < b for a, b in zip(bounds, bounds[1:], strict=False)) and 1.01 < bounds[0] < bounds[-1] < 1.05
    # 2 chains of 350: 4 split chains of 175 draws, n_eff = 400 / 4 = 100 each; Šidák over 2 R-hats of one entry
    a = 1 - (1 - 1e-3) ** 0.5
    assert rhat_bound(1, 2, 350) == pytest.approx((174 / 175 + stats.f.isf(a, 3, 4 * 99) / 100) ** 0.5, rel=1e-12)
    assert rhat_bound(30, 4, 350, ess=4000) < rhat_bound(30, 4, 350)  # chains asked for more ESS: a tighter bar
    assert np.isnan(rhat_bound(1, 1, 350))
    with pytest.raises(ValueError, match="entries"):
        rhat_bound(0, 4, 350)


@pytest.mark.stochastic
def test_rhat_bound_false_alarms_and_power_at_the_image_scale(check):
    """At 4 chains × 350 draws (the image scale's budget; chains with the required ESS, ESS per draw 0.57) and 30
    entries a group: the vectorised rank R-hat of the benchmark equals ArviZ's; of 400 runs of chains with nothing
    wrong, the count that cross the bound is recorded as its binomial p-value at the rate 1e-3 the bound promises
    (measured below it in ``benchmarks/results/rhat_null.json``), failing below 1e-3 (4 or more of 400); of 100 runs
    with one chain 0.5 sd off in every entry, the count flagged as its p-value at a power of 0.99 (measured 1.0
    there), failing below 1e-3 (95 or fewer); two chains in another mode flagged in all 100. A fixed bound of 1.01
    would flag about 28 % of the healthy runs."""
    import arviz as az
    from scipy import stats

    from bayes_attn.diagnostics import rhat_bound

    b = _bench_rhat()
    rng = rng_of(70)
    x = b.chains(rng, 4, 351, 40, 0.5)
    ref = az.rhat(xr.Dataset({"v": (("chain", "draw", "k"), x)}))["v"].values
    np.testing.assert_allclose(b.rank_rhat(x), ref, rtol=1e-12)
    e, bound = b.ess_per_draw(4, 350), rhat_bound(30, 4, 350)
    null = [b.rank_rhat(b.chains(rng, 4, 350, 30, e)).max() > bound for _ in range(400)]
    check("null_alarms_p", stats.binom.sf(sum(null) - 1, 400, 1e-3), 1e-3, fails="below", scale="p")
    shifted = [b.rank_rhat(b.scenario(rng, 0, 30, 350, e)).max() > bound for _ in range(100)]
    check("shifted_flagged_p", stats.binom.cdf(sum(shifted), 100, 0.99), 1e-3, fails="below", scale="p")
    modes = [b.rank_rhat(b.scenario(rng, 2, 30, 350, e)).max() > bound for _ in range(100)]
    check("modes_missed", 100 - sum(modes), 0.5)
