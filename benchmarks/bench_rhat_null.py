"""Benchmark: the rule's R-hat bound against chains with nothing wrong (null) and with something wrong (power).

The verdict holds each group of ``k`` monitored entries to ``bayes_attn.diagnostics.rhat_bound(k, chains, draws)``,
the bound that chains with nothing wrong, delivering the ESS the rule requires (``required_ess``: 400 and 100
per split chain), cross in at most 1 run in 1,000. This script measures that claim and the bound's power.

The chains are stationary autoregressive Gaussian series, entries independent (the worst case for the largest
R-hat of a group), with ESS per draw ``e = min(1, required_ess / (chains · draws))``: the chains deliver exactly
the required ESS (``e = 0.57`` at 4 chains of 350 draws, the image scale's measured 0.58). R-hat is ArviZ's
rank-normalised split R-hat (the larger of bulk and folded), computed here vectorised over entries
(:func:`rank_rhat`, equal to ``arviz.rhat`` to rounding: ``tests/test_benchmarks.py``).

- **Null**, per chains × draws: a pool of entries (about ``--numbers`` draws in all); per ``k``, the share of
  entries above the bound of ``k`` (``p``), the family-wise rate of a group, ``1 − (1 − p)^k`` (entries
  independent), and its 95 % Clopper–Pearson upper limit; and the bound's calibration where it is measurable:
  the share of entries above the bound at a per-entry level of 1 % and 0.1 %, against that level.
- **Power**, at 4 chains, per ``k`` and draws, over replications: (a) one chain of four shifted by 0.5 sd in
  every entry; (b) one chain shifted by 1 sd in 1 % of the entries (at least one); (c) two chains in another mode
  (3 sd away) in every entry; (d) one chain ten times more autocorrelated (ESS per draw ``e / 10``). Each with
  its binomial standard error, and the draws at which it first reaches 0.99.

Run::

    .venv/bin/python benchmarks/bench_rhat_null.py            # ~10 min
    .venv/bin/python benchmarks/bench_rhat_null.py --quick    # seconds
"""

from __future__ import annotations

import argparse
import math

from harness import Record, parse, parser
from harness import headline as make_headline

OBSERVABLES = (1, 30, 300, 3000, 10000)
CHAINS = (2, 4, 16, 64)
DRAWS = (100, 350, 1000)
POWER_OBSERVABLES = (1, 30, 300, 3000)
SCENARIOS = ("a: one chain 0.5 sd off", "b: one chain 1 sd off in 1 % of entries", "c: two chains in another mode",
             "d: one chain 10x more autocorrelated")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: 1 and 30 entries, 2 and 4 chains, 100 draws, small pools)."""
    ap = parser("rhat_null", __doc__, "1 and 30 entries, 2 and 4 chains, 100 draws, small pools")
    ap.add_argument("--numbers", type=float, default=2e7, help="draws in all per null cell (default 2e7)")
    ap.add_argument("--reps", type=int, default=200, help="replications per power cell at most (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    a = parse(ap, argv)
    a.observables, a.chains, a.draws, a.power_observables = (
        ((1, 30), (2, 4), (100,), (1, 30)) if a.quick else (OBSERVABLES, CHAINS, DRAWS, POWER_OBSERVABLES))
    if a.quick:
        a.numbers, a.reps = 2e5, 20
    return a


if __name__ == "__main__":
    ARGS = parse_args()  # before NumPy and the package load: --help answers at once and writes nothing

import numpy as np  # noqa: E402
from scipy import special, stats  # noqa: E402
from scipy.signal import lfilter  # noqa: E402

from bayes_attn.diagnostics import FALSE_ALARM, required_ess, rhat_bound  # noqa: E402


def chains(rng: np.random.Generator, n_chains: int, draws: int, k: int, ess_per_draw: float) -> np.ndarray:
    """``[chain, draw, k]`` stationary AR(1) series of unit variance with ESS per draw ``ess_per_draw``."""
    rho = (1 - ess_per_draw) / (1 + ess_per_draw)
    e = rng.standard_normal((n_chains, draws, k)) * np.sqrt(1 - rho**2)
    e[:, 0] = rng.standard_normal((n_chains, k))  # the first draw from the stationary law
    return lfilter([1.0], [1.0, -rho], e, axis=1)


def _classic_rhat(z: np.ndarray) -> np.ndarray:
    """R-hat of ``z`` ``[k, chain, draw]`` (Gelman et al., BDA3)."""
    n = z.shape[2]
    between = n * np.var(z.mean(axis=2), axis=1, ddof=1)
    within = np.mean(np.var(z, axis=2, ddof=1), axis=1)
    return np.sqrt((between / within + n - 1) / n)


def _z_scale(x: np.ndarray) -> np.ndarray:
    """Rank normalisation of ``x`` ``[k, chain, draw]`` over each entry's draws (Vehtari et al. 2021)."""
    k, m, n = x.shape
    ranks = stats.rankdata(x.reshape(k, m * n), axis=1)
    return special.ndtri((ranks - 0.375) / (m * n + 0.25)).reshape(k, m, n)


def rank_rhat(x: np.ndarray) -> np.ndarray:
    """ArviZ's rank-normalised split R-hat of each entry of ``x`` ``[chain, draw, k]``: ``[k]``."""
    x = np.moveaxis(x, 2, 0)
    half = x.shape[2] // 2
    split = np.concatenate([x[..., :half], x[..., -half:]], axis=1)  # the middle draw dropped when odd
    folded = np.abs(split - np.median(split.reshape(split.shape[0], -1), axis=1)[:, None, None])
    return np.maximum(_classic_rhat(_z_scale(split)), _classic_rhat(_z_scale(folded)))


def ess_per_draw(n_chains: int, draws: int) -> float:
    """The ESS per draw at which ``n_chains × draws`` deliver the rule's required ESS (at most 1)."""
    return min(1.0, required_ess(n_chains) / (n_chains * draws))


def upper(alarms: int, trials: int) -> float:
    """The 95 % Clopper–Pearson upper limit of a binomial rate."""
    return 1.0 if alarms >= trials else float(stats.beta.ppf(0.975, alarms + 1, trials - alarms))


def null_cell(rng: np.random.Generator, a: argparse.Namespace, c: int, n: int) -> dict:
    """A pool of null entries at ``c`` chains of ``n`` draws: the rates of every ``k`` and the calibration."""
    e = ess_per_draw(c, n)
    pool = max(200, int(a.numbers // (c * n)))
    chunk = max(1, int(2e6 // (c * n)))
    r = np.concatenate([rank_rhat(chains(rng, c, n, min(chunk, pool - i), e)) for i in range(0, pool, chunk)])
    out = {"chains": c, "draws": n, "ess_per_draw": e, "entries": pool, "groups": []}
    for k in a.observables:
        b = rhat_bound(k, c, n)
        alarms = int(np.sum(r > b))
        p, p_up = alarms / pool, upper(alarms, pool)
        out["groups"].append({"observables": k, "bound": b, "entry_alarms": alarms, "entry_rate": p,
                              "familywise": -math.expm1(k * math.log1p(-p)) if p < 1 else 1.0,
                              "familywise_upper95": -math.expm1(k * math.log1p(-p_up)) if p_up < 1 else 1.0})
    # calibration: the bound of one entry at a per-entry level the pool can measure (1 - (1 - fa)^(1/2) ~ fa / 2
    # per R-hat, two R-hats an entry)
    out["calibration"] = [{"level": lvl, "entry_rate": float(np.mean(r > rhat_bound(1, c, n, false_alarm=lvl)))}
                          for lvl in (1e-2, 1e-3) if lvl * pool >= 20]
    print(f"null {c:3d} chains × {n:5d} draws (ESS/draw {e:.2f}, {pool} entries): "
          + ", ".join(f"k={g['observables']}: bound {g['bound']:.4f}, family-wise {g['familywise']:.2g} "
                      f"(<= {g['familywise_upper95']:.2g})" for g in out["groups"]), flush=True)
    return out


def scenario(rng: np.random.Generator, which: int, k: int, n: int, e: float) -> np.ndarray:
    """Four chains of ``n`` draws of ``k`` entries with scenario ``which`` (0-3: a-d of the module docstring)."""
    x = chains(rng, 4, n, k, e)
    if which == 0:
        x[0] += 0.5
    elif which == 1:
        x[0, :, : max(1, math.ceil(0.01 * k))] += 1.0
    elif which == 2:
        x[:2] += 3.0
    else:
        x[0] = chains(rng, 1, n, k, e / 10)[0]
    return x


def power_cell(rng: np.random.Generator, a: argparse.Namespace, which: int, k: int, n: int) -> dict:
    """The share of runs of scenario ``which`` whose largest R-hat over ``k`` entries passes the bound."""
    e = ess_per_draw(4, n)
    reps = max(20, min(a.reps, int(4e7 // (4 * n * k))))
    b = rhat_bound(k, 4, n)
    hits = sum(bool(rank_rhat(scenario(rng, which, k, n, e)).max() > b) for _ in range(reps))
    p = hits / reps
    return {"scenario": SCENARIOS[which], "observables": k, "draws": n, "bound": b, "power": p,
            "power_se": math.sqrt(max(p * (1 - p), 1.0 / reps) / reps), "reps": reps}


def main(a: argparse.Namespace) -> dict:
    """Every null cell and every power cell; the draws at which each scenario reaches 0.99."""
    rng = np.random.default_rng(a.seed)
    record = Record(a, false_alarm=FALSE_ALARM, observables=list(a.observables), chains=list(a.chains),
                    draws=list(a.draws), note="stationary AR(1) chains at the required ESS; entries independent")
    null = [null_cell(rng, a, c, n) for c in a.chains for n in a.draws]
    power = []
    for which in range(len(SCENARIOS)):
        for k in a.power_observables:
            for n in a.draws:
                power.append(power_cell(rng, a, which, k, n))
                r = power[-1]
                print(f"power {r['scenario']}, k={k}, {n} draws: {r['power']:.3f} ± {r['power_se']:.3f} "
                      f"(bound {r['bound']:.4f}, {r['reps']} runs)", flush=True)
    reach = {f"{s}, k={k}": next((r["draws"] for r in power if (r["scenario"], r["observables"]) == (s, k)
                                  and r["power"] >= 0.99), None) for s in SCENARIOS for k in a.power_observables}
    worst = max(g["familywise"] for cell in null for g in cell["groups"])
    results = {"null": null, "power": power, "draws_for_power_0.99": reach, "largest_familywise": worst}
    record.write(results, headline=make_headline("largest family-wise false-alarm rate over the null cells",
                                                 worst, "1"))
    return results


if __name__ == "__main__":
    main(ARGS)
