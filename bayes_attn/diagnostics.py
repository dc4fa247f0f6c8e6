"""Convergence diagnostics of posterior draws and the rule that trusts them (docs/theory.md §5, docs/samplers.md).

:class:`Summary` holds ArviZ's table of the invariant observables with the sampler's own statistics;
:func:`diagnostic_failures` says why draws cannot be trusted, the rule the verdicts of :mod:`bayes_attn.comparison`,
the blocks of :mod:`bayes_attn.samplers._blocks` and ``auto``'s choice of sampler read. The rule, per group of
monitored entries (the entries of ``U``, of each ``U_l``, ``Ua``, ``f_train``, ``f_test``, and the per-draw
statistics of the comparison's checks):

- every entry has bulk ESS (and, on all but ``f_train``, ``f_test``, tail ESS) at least :func:`required_ess`
  (400, and 100 per split chain: Vehtari et al. 2021);
- the group's largest rank-normalised split R-hat (ArviZ) is at most :func:`rhat_bound` of the group's size, the
  chains and the draws: the bound that chains with nothing wrong, delivering the required ESS, cross in at most
  :data:`FALSE_ALARM` of runs (the F law of split R-hat under the null, Šidák-corrected over the entries);
- no divergence, BFMI at least :data:`MIN_BFMI`, a Pareto ``k̂`` at most :data:`MAX_KHAT`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd
import xarray as xr

from ._internal import checks as _checks
from ._internal import threads
from .samplers._blocks import Stopping
from .samplers._settings import MAX_RHAT

__all__ = ["CHECKS_GROUP", "ESS_PER_SPLIT_CHAIN", "EXTRA_FIELDS", "FALSE_ALARM", "GROSS_RHAT", "GROUP_COLUMNS",
           "MAX_KHAT", "MAX_RHAT", "MIN_BFMI", "MIN_ESS", "MIN_TOTAL_ESS", "SUMMARY_WORKERS", "Summary",
           "convergence_failures", "diagnostic_failures", "group_diagnostics", "group_rows", "required_ess",
           "rhat_bound", "sample_stats", "summary_table"]

MIN_ESS = 100.0
"""The smallest ESS at which an entry's MCSE is read as an error bar (the tests' degrees of freedom); the rule
itself asks for :func:`required_ess`."""
MIN_TOTAL_ESS = 400.0
ESS_PER_SPLIT_CHAIN = 100.0
""":func:`required_ess`: at least 400 in all (Vehtari et al. 2021) and 100 per split chain, so that R-hat, which
compares chains, sees each chain's mean to within a tenth of a posterior sd (what makes one chain 0.5 sd off
detectable: ``benchmarks/results/rhat_null.json``)."""
FALSE_ALARM = 1e-3
"""The share of runs of chains with nothing wrong that :func:`rhat_bound` may flag, per group."""
GROSS_RHAT = 1.1
"""An R-hat above this after the first block means a failed warm-up, not too few draws (``blocks``)."""
MIN_BFMI = 0.3
MAX_KHAT = 0.7
"""The diagnostics a verdict trusts besides R-hat and ESS (:func:`diagnostic_failures`): BFMI, and the Pareto
``k̂`` of importance sampling (``laplace-is``)."""
CHECKS_GROUP = "checks"
"""The group of the comparison's per-draw check statistics (:mod:`bayes_attn.comparison`)."""
PREDICTOR_GROUPS = ("f_train", "f_test")
"""Groups held to bulk ESS only (their tail ESS decides nothing the comparison reports)."""

EXTRA_FIELDS = ("diverging", "energy", "num_steps", "accept_prob", "adapt_state.step_size", "potential_energy")


def required_ess(chains: int) -> float:
    """The bulk and tail ESS the rule asks of every entry: ``max(400, 100 × 2 chains)``."""
    return max(MIN_TOTAL_ESS, ESS_PER_SPLIT_CHAIN * 2 * int(chains))


def rhat_bound(entries: int, chains: int, draws: int, ess: float | None = None,
               false_alarm: float = FALSE_ALARM) -> float:
    """The largest rank-normalised split R-hat (ArviZ's, the larger of bulk and folded) that ``entries``
    independent entries of ``chains`` chains of ``draws`` draws each, with nothing wrong and an ESS of ``ess``
    (default :func:`required_ess`), exceed together in at most ``false_alarm`` of runs.

    Under the null, with ``M = 2 chains`` split chains of ``n = draws // 2`` draws and ``n_eff = min(ess / M, n)``
    effective draws each, ``R̂² ≈ (n − 1)/n + F / n_eff`` with ``F ~ F(M − 1, M (n_eff − 1))`` (the between-chain
    variance of the means over the within-chain variance, each a χ² of its degrees of freedom; as ``n_eff``
    grows, ``χ²_{M−1} / (M − 1)``); the bound is that at the quantile ``1 − a`` of ``F``, with
    ``a = 1 − (1 − false_alarm)^(1 / (2 entries))`` (Šidák over the bulk and folded R-hat of every entry).
    It depends on the run's shape alone, never on its own ESS: a stuck chain cannot loosen its bar."""
    from scipy import stats

    k, c, d = (_checks.positive_int(name, v) for name, v in (("entries", entries), ("chains", chains),
                                                             ("draws", draws)))
    if c < 2 or d < 4:
        return math.nan  # R-hat compares split chains: none below 2 chains of 4 draws
    m, n = 2 * c, d // 2
    n_eff = min((required_ess(c) if ess is None else _checks.positive("ess", ess)) / m, n)
    a = -math.expm1(math.log1p(-false_alarm) / (2 * k))
    q = float(stats.f.isf(a, m - 1, m * max(n_eff - 1.0, 1.0)))
    return math.sqrt((n - 1) / n + q / n_eff)


def group_of(entry: str) -> str:
    """The group of an ArviZ summary row (``"U[1-1, 1-2]"``: ``"U"``)."""
    return entry.split("[", 1)[0]


def group_diagnostics(table: pd.DataFrame, chains: int, draws: int, group: str | None = None) -> dict[str, float]:
    """Per group of ``table``'s rows (ArviZ summary: ``r_hat``, ``ess_bulk``, ``ess_tail``; all rows one group
    named ``group`` when given): ``entries[g]``, ``max_r_hat[g]``, ``r_hat_bound[g]`` (:func:`rhat_bound`),
    ``min_ess_bulk[g]``, ``min_ess_tail[g]``; and ``ess_required``, ``chains``, ``draws_per_chain``."""
    groups = pd.Series(group if group else table.index.map(group_of), index=table.index)
    out: dict[str, float] = {"ess_required": required_ess(chains), "chains": float(chains),
                             "draws_per_chain": float(draws)}
    for g, rows in table.groupby(groups.values, sort=False):
        out |= {f"entries[{g}]": float(len(rows)), f"max_r_hat[{g}]": float(rows["r_hat"].max(skipna=False)),
                f"r_hat_bound[{g}]": rhat_bound(len(rows), chains, draws),
                f"min_ess_bulk[{g}]": float(rows["ess_bulk"].min(skipna=False)),
                f"min_ess_tail[{g}]": float(rows["ess_tail"].min(skipna=False))}
    return out


def _groups(diagnostics: dict[str, float]) -> list[str]:
    return [k[len("r_hat_bound["):-1] for k in diagnostics if k.startswith("r_hat_bound[")]


def group_rows(diagnostics: dict[str, float]) -> tuple[list[tuple[str, ...]], dict[str, float]]:
    """The rule's table of ``diagnostics`` (:func:`group_diagnostics`'s keys): one row a group (group, entries,
    max R-hat, its bound, min bulk ESS, min tail ESS, the ESS required, ``pass`` or ``FAIL``), and the other
    numbers of ``diagnostics``."""
    rows: list[tuple[str, ...]] = []
    for g in _groups(diagnostics):
        fails = convergence_failures(diagnostics, [g])
        rows.append((g, f"{int(diagnostics[f'entries[{g}]'])}", f"{diagnostics[f'max_r_hat[{g}]']:.4f}",
                     f"{diagnostics[f'r_hat_bound[{g}]']:.4f}", f"{diagnostics[f'min_ess_bulk[{g}]']:.0f}",
                     f"{diagnostics[f'min_ess_tail[{g}]']:.0f}", f"{diagnostics['ess_required']:.0f}",
                     "FAIL" if fails else "pass"))
    rest = {k: v for k, v in diagnostics.items() if "[" not in k and k != "ess_required"}
    return rows, rest


GROUP_COLUMNS = ("group", "entries", "max R-hat", "R-hat bound", "min bulk ESS", "min tail ESS", "ESS required",
                 "result")
"""The columns of :func:`group_rows`."""


def convergence_failures(diagnostics: dict[str, float], groups: Iterable[str] | None = None) -> list[str]:
    """The R-hat and ESS reasons of the rule (module docstring) in ``diagnostics`` (:meth:`Summary.diagnostics`,
    or a comparison's), each naming its group and its bound; ``groups``: only these. Diagnostics without groups
    (written before the rule) are held to the fixed bounds they were written under (R-hat
    :data:`MAX_RHAT`, bulk ESS :data:`MIN_ESS`)."""
    names = _groups(diagnostics)
    if not names:
        out = []
        if not diagnostics.get("max_r_hat", 1.0) <= MAX_RHAT:
            out.append("max R-hat {} > {}".format(*_checks.versus(diagnostics["max_r_hat"], MAX_RHAT)))
        if not diagnostics.get("min_ess_bulk", np.inf) >= MIN_ESS:
            out.append("min bulk ESS {} < {}".format(*_checks.versus(diagnostics["min_ess_bulk"], MIN_ESS)))
        return out
    out = []
    want = diagnostics.get("ess_required", MIN_TOTAL_ESS)
    shape = (f", {int(diagnostics['chains'])} chains × {int(diagnostics['draws_per_chain'])} draws"
             if "chains" in diagnostics and "draws_per_chain" in diagnostics else "")
    wanted = None if groups is None else set(groups)
    for g in names if wanted is None else [g for g in names if g in wanted]:
        rhat, bound = diagnostics[f"max_r_hat[{g}]"], diagnostics[f"r_hat_bound[{g}]"]
        if not rhat <= bound:
            k = int(diagnostics[f"entries[{g}]"])
            out.append("max R-hat of {} {} > {} (the bound of {} entr{}{})".format(
                g, *_checks.versus(rhat, bound, 4), k, "y" if k == 1 else "ies", shape))
        kinds = ("bulk",) if g in PREDICTOR_GROUPS else ("bulk", "tail")
        for kind in kinds:
            ess = diagnostics[f"min_ess_{kind}[{g}]"]
            if not ess >= want:
                out.append("min {} ESS of {} {} < {}".format(kind, g, *_checks.versus(ess, want)))
    return out


def diagnostic_failures(diagnostics: dict[str, float]) -> list[str]:
    """Reasons the sampler's diagnostics (:meth:`Summary.diagnostics`) make a comparison inconclusive (empty when
    none): :func:`convergence_failures`, divergences, BFMI, unmet targets, ``k̂``; a number that is absent is not
    checked."""
    out = convergence_failures(diagnostics)
    if diagnostics.get("divergences", 0) > 0:
        out.append(f"{int(diagnostics['divergences'])} divergent transitions")
    if diagnostics.get("min_bfmi", np.inf) < MIN_BFMI:
        out.append("min BFMI {} < {}".format(*_checks.versus(diagnostics["min_bfmi"], MIN_BFMI)))
    if diagnostics.get("targets_met", 1.0) < 1.0:
        out.append("budget spent before the sampler's targets were met (precision, ESS or R-hat; see its stopping)")
    if not diagnostics.get("pareto_k", -np.inf) <= MAX_KHAT and "pareto_k" in diagnostics:
        out.append("importance-sampling Pareto k-hat {} > {}".format(*_checks.versus(diagnostics["pareto_k"],
                                                                                     MAX_KHAT)))
    return out


def sample_stats(extra: dict) -> dict[str, np.ndarray]:
    """ArviZ ``sample_stats`` from NumPyro's extra fields (``[chain, draw]`` each)."""
    steps = np.asarray(extra["num_steps"])
    return {
        "diverging": np.asarray(extra["diverging"], dtype=bool),
        "energy": np.asarray(extra["energy"], dtype=np.float64),
        "lp": -np.asarray(extra["potential_energy"], dtype=np.float64),
        "n_steps": steps.astype(np.int64),
        "tree_depth": np.ceil(np.log2(steps + 1)).astype(np.int64),
        "acceptance_rate": np.asarray(extra["accept_prob"], dtype=np.float64),
        "step_size": np.asarray(extra["adapt_state.step_size"], dtype=np.float64),
    }


SUMMARY_WORKERS = 4
"""Most threads :func:`summary_table` runs ArviZ in (one per core of this process, up to this many)."""


def summary_table(draws: xr.Dataset, workers: int | None = None) -> pd.DataFrame:
    """``arviz_stats.summary(draws, kind="all", round_to="none")``, the same table, computed in ``workers`` threads
    (default: one per core this process may use, at most :data:`SUMMARY_WORKERS`).

    ``draws``: variables ``[chain, draw, ...]``. Each row of the table depends on its own entry's draws alone, so
    the entries are cut into pieces (about two per worker, along each variable's first dimension after ``draw``)
    and ArviZ summarises the pieces side by side: its rank normalisations (NumPy's sorts) and FFTs release the
    GIL. 4 × 5000 draws of 221 entries (Fig. 2c): ``benchmarks/results/summary.json``."""
    import arviz_stats as azs

    def run(piece: xr.Dataset) -> pd.DataFrame:
        return azs.summary(piece, kind="all", round_to="none")

    workers = min(threads.cores(), SUMMARY_WORKERS) if workers is None else _checks.positive_int("workers", workers)
    if workers == 1:
        return run(draws)
    # a dimension without coordinates is labelled by position: give it its positions before cutting it
    draws = draws.assign_coords({d: np.arange(n) for d, n in draws.sizes.items() if d not in draws.coords})
    sizes = {v: int(np.prod([n for d, n in draws[v].sizes.items() if d not in ("chain", "draw")]))
             for v in draws.data_vars}
    per_piece = max(1, -(-sum(sizes.values()) // (2 * workers)))
    pieces = []
    for v, size in sizes.items():
        dims = [d for d in draws[v].dims if d not in ("chain", "draw")]
        if not dims:
            pieces.append(draws[[v]])
            continue
        n = draws.sizes[dims[0]]
        rows = max(1, per_piece * n // size)
        pieces += [draws[[v]].isel({dims[0]: slice(i, i + rows)}) for i in range(0, n, rows)]
    with ThreadPoolExecutor(min(workers, len(pieces))) as pool:
        return pd.concat(list(pool.map(run, pieces)))


@dataclass(frozen=True)
class Summary:
    """Convergence diagnostics on the invariant observables.

    Attributes:
        table: ArviZ summary (mean, sd, MCSE, bulk/tail ESS, R-hat) per entry of
            the invariant observables (``U``, ``U_l``, ``Ua``, ``f_train``, ``f_test``).
        divergences: number of divergent transitions after warm-up (0 for the guided samplers).
        bfmi: Bayesian fraction of missing information per chain (empty for the guided samplers).
        acceptance_rate: mean acceptance probability (NUTS, ``laplace-mh``; NaN for ``laplace-is``).
        mean_steps: mean leapfrog steps per draw (NaN for the guided samplers).
        seconds: sampling wall time (warm-up included).
        pareto_k: the Pareto ``k̂`` of ``laplace-is``'s importance weights (NaN for the others).
        is_ess: ``laplace-is``'s importance-sampling ESS ``1 / Σ w̄²`` before resampling (NaN for the others).
        sampler: the sampler that made the draws.
        stopping: how a sampler in blocks stopped (:class:`~bayes_attn.samplers._blocks.Stopping`), or ``None``.
        chains, draws: the chains and the kept draws per chain the table was computed from (what
            :func:`rhat_bound` and :func:`required_ess` depend on; 0: unknown, the fixed bounds of
            :func:`convergence_failures` apply).
    """

    table: pd.DataFrame
    divergences: int
    bfmi: np.ndarray
    acceptance_rate: float
    mean_steps: float
    seconds: float
    pareto_k: float = float("nan")
    is_ess: float = float("nan")
    sampler: str = ""
    stopping: Stopping | None = None
    chains: int = 0
    draws: int = 0

    @property
    def max_rhat(self) -> float:
        """Largest R-hat over all invariant observables."""
        return float(self.table["r_hat"].max())

    @property
    def min_ess(self) -> float:
        """Smallest bulk or tail ESS over all invariant observables."""
        return float(self.table[["ess_bulk", "ess_tail"]].min().min())

    def diagnostics(self) -> dict[str, float]:
        """The numbers a verdict depends on: worst R-hat, smallest ESS (bulk and tail; bulk), smallest BFMI,
        divergences, and for ``laplace-is`` the Pareto ``k̂`` (:func:`diagnostic_failures`)."""
        out = {
            "max_r_hat": self.max_rhat,
            "min_ess": self.min_ess,
            "min_ess_bulk": float(self.table["ess_bulk"].min()),
            "divergences": float(self.divergences),
        }
        if len(self.bfmi):
            out["min_bfmi"] = float(np.min(self.bfmi))
        if np.isfinite(self.pareto_k):
            out["pareto_k"] = self.pareto_k
        if self.stopping is not None:
            out["targets_met"] = float(self.stopping.met)
        if self.chains:
            out |= group_diagnostics(self.table, self.chains, self.draws)
        return out

    def failures(self) -> list[str]:
        """:func:`diagnostic_failures` of these diagnostics (empty when the draws can be trusted)."""
        return diagnostic_failures(self.diagnostics())

    def by_variable(self) -> pd.DataFrame:
        """Worst R-hat with the bound its group is held to (:func:`rhat_bound`; NaN without the run's shape),
        smallest ESS with the ESS the rule requires, and largest MCSE per observable."""
        var = self.table.index.map(group_of)
        out = self.table.groupby(var.values, sort=False).agg(
            entries=("r_hat", "size"), max_r_hat=("r_hat", "max"), min_ess_bulk=("ess_bulk", "min"),
            min_ess_tail=("ess_tail", "min"), max_mcse_mean=("mcse_mean", "max"),
        )
        known = self.chains >= 2 and self.draws >= 4
        out.insert(2, "r_hat_bound", [rhat_bound(int(k), self.chains, self.draws) if known else math.nan
                                      for k in out["entries"]])
        out.insert(5, "ess_required", required_ess(self.chains) if known else math.nan)
        return out

    def __str__(self) -> str:
        u = self.table[self.table.index.str.startswith("U[")]
        own = (f"importance sampling: Pareto k-hat {self.pareto_k:.3g} (trusted up to {MAX_KHAT}), "
               f"IS ESS {self.is_ess:.0f}" if np.isfinite(self.pareto_k) else
               f"divergences: {self.divergences}   BFMI per chain: {np.array2string(self.bfmi, precision=2)}   "
               f"acceptance: {self.acceptance_rate:.3f}   leapfrog steps/draw: {self.mean_steps:.1f}"
               if len(self.bfmi) else f"acceptance: {self.acceptance_rate:.3f}")
        return "\n".join(
            [
                "Order parameter U = U_1 (per-draw values):",
                u.to_string(),
                "",
                "Worst diagnostics per observable:",
                self.by_variable().to_string(),
                "",
                f"sampler: {self.sampler}   {own}   sampling time: {self.seconds:.1f} s",
                *([f"sampled in blocks: {self.stopping}"] if self.stopping is not None else []),
            ]
        )
