"""bayes_attn/diagnostics.py: ArviZ's summary in threads, and the rule that says why draws cannot be trusted."""

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
