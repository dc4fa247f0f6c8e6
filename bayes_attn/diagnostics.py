"""Convergence diagnostics of posterior draws and the rule that trusts them (docs/theory.md §5).

:class:`Summary` holds ArviZ's table of the invariant observables with the
sampler's own statistics; :func:`diagnostic_failures` says why draws cannot be
trusted (R-hat, bulk ESS, divergences, BFMI, the Pareto ``k̂`` of importance
sampling), the rule the verdicts of :mod:`bayes_attn.comparison` and ``auto``'s
choice of sampler read.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd
import xarray as xr

from ._internal import checks as _checks
from ._internal import threads
from .samplers.blocks import Stopping
from .samplers.settings import MAX_RHAT

__all__ = ["EXTRA_FIELDS", "MAX_KHAT", "MAX_RHAT", "MIN_BFMI", "MIN_ESS", "SUMMARY_WORKERS", "Summary",
           "diagnostic_failures", "sample_stats", "summary_table"]

MIN_ESS = 100.0
MIN_BFMI = 0.3
MAX_KHAT = 0.7
"""The diagnostics a verdict trusts (:func:`diagnostic_failures`): R-hat, bulk ESS of every compared entry,
BFMI, and the Pareto ``k̂`` of importance sampling (``laplace-is``)."""

EXTRA_FIELDS = ("diverging", "energy", "num_steps", "accept_prob", "adapt_state.step_size", "potential_energy")


def diagnostic_failures(diagnostics: dict[str, float]) -> list[str]:
    """Reasons the sampler's diagnostics (:meth:`Summary.diagnostics`) make a comparison inconclusive (empty when
    none); a number that is absent is not checked."""
    out = []
    if diagnostics.get("max_r_hat", 1.0) > MAX_RHAT or not np.isfinite(diagnostics.get("max_r_hat", 1.0)):
        out.append("max R-hat {} > {}".format(*_checks.versus(diagnostics["max_r_hat"], MAX_RHAT)))
    if diagnostics.get("min_ess_bulk", np.inf) < MIN_ESS or np.isnan(diagnostics.get("min_ess_bulk", np.inf)):
        out.append("min bulk ESS {} < {}".format(*_checks.versus(diagnostics["min_ess_bulk"], MIN_ESS)))
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
    GIL. 4 × 5000 draws of 221 entries (Fig. 2c): ``benchmarks/bench_summary.py``."""
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
        stopping: how a sampler in blocks stopped (:class:`~bayes_attn.samplers.blocks.Stopping`), or ``None``.
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
        return out

    def failures(self) -> list[str]:
        """:func:`diagnostic_failures` of these diagnostics (empty when the draws can be trusted)."""
        return diagnostic_failures(self.diagnostics())

    def by_variable(self) -> pd.DataFrame:
        """Worst R-hat, smallest ESS and largest MCSE per observable."""
        var = self.table.index.to_series().str.split("[", n=1).str[0]
        return self.table.groupby(var.values).agg(
            entries=("r_hat", "size"), max_r_hat=("r_hat", "max"), min_ess_bulk=("ess_bulk", "min"),
            min_ess_tail=("ess_tail", "min"), max_mcse_mean=("mcse_mean", "max"),
        )

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
