"""Importance weights of the guided samplers (docs/theory.md §9): Pareto smoothing and systematic resampling."""

from __future__ import annotations

import numpy as np

__all__ = ["psis", "systematic_resample"]


def psis(log_w: np.ndarray) -> tuple[np.ndarray, float]:
    """Pareto-smoothed log weights (arviz-stats' ``psislw``) of ``log_w`` ``[chain, draw]``, pooled over all
    draws, and ``k̂``."""
    import arviz_stats  # noqa: F401  (registers the ``azstats`` accessor)
    import xarray as xr

    log_w = np.asarray(log_w, np.float64)
    finite = np.isfinite(log_w)
    floor = log_w[finite].min() - 1000.0 if finite.any() else 0.0  # weight exp(-1000) relative: none
    # psislw smooths the weights exp(-a) of its argument a (a log-likelihood in PSIS-LOO): a = -log w
    da = xr.DataArray(-np.where(finite, log_w, floor), dims=("chain", "draw"))
    smoothed, khat = da.azstats.psislw(dim=["chain", "draw"])
    return np.asarray(smoothed.transpose("chain", "draw").values), float(khat)


def systematic_resample(w: np.ndarray, M: int, rng: np.random.Generator) -> np.ndarray:
    """``M`` indices drawn by systematic resampling from normalised weights ``w`` ``[n]``, sorted (copies of one
    proposal adjacent, in the proposals' order): the cumulative weights cut at ``(j + u) / M``, ``j = 0 .. M − 1``,
    with one ``u ~ Uniform(0, 1)``, so proposal ``i`` gets ``⌊M w_i⌋`` or ``⌈M w_i⌉`` copies, ``M w_i`` on average
    (unbiased; Kitagawa 1996). Its resampling variance is far below a multinomial draw's where the weights are
    nearly equal (docs/theory.md §9)."""
    cum = np.cumsum(np.asarray(w, np.float64))
    cum /= cum[-1]
    return np.minimum(np.searchsorted(cum, (np.arange(M) + rng.uniform()) / M, side="right"), len(cum) - 1)
