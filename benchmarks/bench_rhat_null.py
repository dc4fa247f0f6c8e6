"""Benchmark: the largest R-hat of perfectly converged chains, over many observables (issue 63, item 2).

The verdict asks R-hat <= 1.01 of every observable (``bayes_attn.diagnostics``): at the image scale's N = 10
that is about 2,900 entries (``U``, ``U_2``, ``Ua``, 600 of ``f_train``, 2,000 of ``f_test``), and the sampler's
stopping rule (``bayes_attn.samplers.blocks``) draws until the largest of them is below the bound. This script
measures what that largest R-hat is when nothing is wrong: chains drawn from the target itself, stationary from
the first draw, as autoregressive Gaussian series with ESS per draw ``e`` (``ρ = (1 − e) / (1 + e)``; ``e = 1``:
independent draws; ``e = 0.58``: the image scale's measured minimum bulk ESS, 811 of 4 × 350 draws, seed 0 in
``results/image_n10.json``), observables independent of each other (the worst case: the model's observables
share ``U``, so its largest R-hat is that of fewer independent ones). R-hat is ArviZ's rank-normalised split
R-hat (``az.rhat``), as the verdict computes it.

Per number of observables ``k``, ESS per draw and draws per chain, over ``--reps`` replications (``k > 300``:
``--reps · 300 / k``, at least 8 (or ``--reps`` if fewer), since ArviZ's R-hat of 2,900 observables takes seconds):
the median and the 5 % and 95 % quantiles of the largest R-hat, and the share of replications above 1.01 (with its
binomial standard error). The smallest draws per chain at which that share is at most 5 % is ``draws_for_1.01``.

Run::

    .venv/bin/python benchmarks/bench_rhat_null.py            # ~15 min (2,900 observables: most of it)
    .venv/bin/python benchmarks/bench_rhat_null.py --quick    # seconds
"""

from __future__ import annotations

import argparse

from harness import Record, parse, parser
from harness import headline as make_headline

BOUND = 1.01
OBSERVABLES = (1, 30, 300, 2900)
ESS_PER_DRAW = (1.0, 0.58)
DRAWS = (350, 500, 700, 1000, 1400)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: up to 30 observables, 50 and 100 draws, 4 replications)."""
    ap = parser("rhat_null", __doc__, "up to 30 observables, 50 and 100 draws, 4 replications")
    ap.add_argument("--reps", type=int, default=40, help="replications per case (default 40)")
    ap.add_argument("--chains", type=int, default=4, help="chains (default 4, as the image scale's runs)")
    a = parse(ap, argv)
    a.observables, a.draws = ((1, 30), (50, 100)) if a.quick else (OBSERVABLES, DRAWS)
    if a.quick:
        a.reps = 4
    return a


if __name__ == "__main__":
    ARGS = parse_args()  # before ArviZ loads: --help answers at once and writes nothing

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402
from scipy.signal import lfilter  # noqa: E402


def chains(rng: np.random.Generator, n_chains: int, draws: int, k: int, ess_per_draw: float) -> np.ndarray:
    """``[chain, draw, k]`` stationary AR(1) series of unit variance with ESS per draw ``ess_per_draw``."""
    rho = (1 - ess_per_draw) / (1 + ess_per_draw)
    e = rng.standard_normal((n_chains, draws, k)) * np.sqrt(1 - rho**2)
    e[:, 0] = rng.standard_normal((n_chains, k))  # the first draw from the stationary law
    return lfilter([1.0], [1.0, -rho], e, axis=1)


def largest_rhat(x: np.ndarray) -> float:
    """The largest of ArviZ's rank-normalised split R-hat over the observables of ``x`` ``[chain, draw, k]``."""
    return float(az.rhat(xr.Dataset({"v": (("chain", "draw", "k"), x)}))["v"].max())


def case(rng: np.random.Generator, a: argparse.Namespace, k: int, ess: float, draws: int) -> dict:
    """The largest R-hat over ``--reps`` replications of one case: its quantiles and the share above the bound."""
    reps = max(min(8, a.reps), round(a.reps * min(1.0, 300 / k)))
    top = np.array([largest_rhat(chains(rng, a.chains, draws, k, ess)) for _ in range(reps)])
    share = float(np.mean(top > BOUND))
    out = dict(observables=k, ess_per_draw=ess, draws=draws, median=float(np.median(top)),
               q05=float(np.quantile(top, 0.05)), q95=float(np.quantile(top, 0.95)), share_above=share,
               share_above_se=float(np.sqrt(share * (1 - share) / reps)), reps=reps)
    print(f"{k:5d} observables  ESS/draw {ess:4.2f}  {draws:5d} draws: largest R-hat median {out['median']:.4f} "
          f"(5-95 % {out['q05']:.4f}-{out['q95']:.4f}), above {BOUND}: {share:.2f} of {reps}", flush=True)
    return out


def main(a: argparse.Namespace) -> dict:
    """Every case; the draws each needs for the bound; the envelope."""
    rng = np.random.default_rng(0)
    record = Record(a, bound=BOUND, ess_per_draw=list(ESS_PER_DRAW),
                    note="stationary AR(1) chains drawn from the target: R-hat of no error")
    runs = [case(rng, a, k, ess, n) for k in a.observables for ess in ESS_PER_DRAW for n in a.draws]
    needed = {f"{k} observables, ESS/draw {ess}": next(
        (r["draws"] for r in runs if (r["observables"], r["ess_per_draw"]) == (k, ess) and r["share_above"] <= 0.05),
        None) for k in a.observables for ess in ESS_PER_DRAW}
    results = {"runs": runs, "draws_for_1.01": needed}
    head = next((r for r in runs if (r["observables"], r["ess_per_draw"], r["draws"]) == (2900, 0.58, 350)), runs[-1])
    record.write(results, headline=make_headline(
        f"share of converged runs with largest R-hat > {BOUND} ({head['observables']} observables, "
        f"ESS/draw {head['ess_per_draw']}, {head['draws']} draws)", head["share_above"], "1"))
    return results


if __name__ == "__main__":
    main(ARGS)
