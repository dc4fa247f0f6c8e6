"""The temperature a sweep over a grid reports: per width, and one pooled over widths (docs/sweeps.md).

Both are chosen by the theory's accuracy on the task's validation set (never the test set). An accuracy on ``n``
examples has the binomial standard error ``sqrt(a (1 − a) / n)``; a choice is *within noise* when the best
temperature leads the runner-up by fewer than :data:`NOISE_MARGIN` standard errors of their difference
(``sqrt(se₁² + se₂²)``, the two accuracies taken as independent), so that another validation set could have
chosen the other. The margin is stored beside each choice (``best_temperature_margin``, ``pooled_temperature_margin``:
the lead in those standard errors; ``inf`` with one eligible temperature). The pooled choice is written as a spec
the user can run (:data:`CHOSEN_SPEC`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import xarray as xr

from ..spec import Spec
from ..stats import binomial_se, choose_temperature
from ..tasks._arrays import ArraysNetwork, ArraysTask

__all__ = ["CHOSEN_SPEC", "NOISE_MARGIN", "best_temperature_view", "choice_lines", "chosen_spec", "choose_temperatures",
           "margin"]

CHOSEN_SPEC = "chosen.toml"
"""The sweep's spec at its pooled temperature, written beside ``sweep.nc`` when it swept a grid:
``bayes-attn run OUT/chosen.toml`` runs it."""

NOISE_MARGIN = 2.0
"""A lead of fewer standard errors than this (about a 95 % two-sided test) is within noise."""


def margin(acc, n: int, eligible=None) -> float:
    """The lead of the best of ``acc`` ``[n_T]`` over the runner-up, in standard errors of their difference
    (``eligible`` as in :func:`~bayes_attn.stats.choose_temperature`); ``inf`` with one candidate."""
    a = np.asarray(acc, dtype=np.float64)
    ok = np.ones(a.shape, bool) if eligible is None or not np.any(eligible) else np.asarray(eligible, bool)
    cand = np.sort(a[ok & np.isfinite(a)])[::-1]
    if cand.size < 2:
        return float("inf")
    se = float(np.hypot(*binomial_se(cand[:2], max(int(n), 1))))
    lead = float(cand[0] - cand[1])
    return float("inf") if lead > 0 and se == 0 else (lead / se if se > 0 else 0.0)


def choose_temperatures(ds: xr.Dataset, n_validation: int) -> xr.Dataset:
    """``ds`` (``accuracy_validation_theory`` and ``converged_theory`` over ``width`` × ``temperature``) with the
    choice per width (``best_temperature_theory``, ``best_temperature_margin``, ``accuracy_theory_at_best``) and
    the pooled one (``pooled_temperature``: the best mean validation accuracy over widths, converged solves only;
    ``pooled_temperature_margin``), each margin as in the module docstring."""
    val, ok = ds["accuracy_validation_theory"], ds["converged_theory"]
    temps = ds["temperature"].values
    rows = [(val.sel(width=N).values, ok.sel(width=N).values) for N in ds["width"].values]
    best = xr.DataArray(temps[[choose_temperature(a, e) for a, e in rows]], coords={"width": ds["width"]},
                        dims="width", name="temperature")
    ds = ds.assign(best_temperature_theory=best, accuracy_theory_at_best=_at(ds["accuracy_theory"], best),
                   best_temperature_margin=("width", [margin(a, n_validation, e) for a, e in rows]))
    every = ok.all("width").values
    pooled = val.mean("width").values  # each width's accuracy on the same n examples: the mean on n of them
    ds["pooled_temperature"] = float(temps[choose_temperature(pooled, every)])
    ds["pooled_temperature_margin"] = margin(pooled, n_validation * ds.sizes["width"], every)
    for name, what in (("best_temperature_margin", "best temperature's lead over the runner-up on validation"),
                       ("pooled_temperature_margin", "pooled temperature's lead (mean over widths) on validation")):
        ds[name].attrs.update(units="standard errors of the difference",
                              note=f"the {what}; below {NOISE_MARGIN:g}: the choice is within noise")
    return ds


def best_temperature_view(ds: xr.Dataset) -> xr.Dataset:
    """A one-temperature view of a temperature-grid sweep: every width at its best temperature (theory's choice),
    which it keeps as ``best_temperature_theory`` (the figures label each point with it)."""
    if "temperature" not in ds.dims:
        return ds
    best = ds["best_temperature_theory"]
    view = ds.drop_dims("temperature").assign(
        accuracy_theory=_at(ds["accuracy_theory"], best),
        U_theory=_at(ds["U_theory"], best),
        accuracy_gp=_at(ds["accuracy_gp"], float(ds["best_temperature_gp"])),
    )
    if "sample_width" in ds.dims:
        sampled = ds["sample_width"].values
        at = xr.DataArray(best.sel(width=sampled).values, coords={"sample_width": sampled}, dims="sample_width")
        for v in ("U_sampled", "U_mcse", "accuracy_sampled", "accuracy_sampled_se", "accuracy_sampled_test_se",
                  "verdict", "verdict_record"):
            if v in ds:
                view[v] = _at(ds[v], at)
    return view


def _at(da: xr.DataArray, temperature) -> xr.DataArray:
    """``da`` at ``temperature`` (one, or one per width) without the selected temperatures as a coordinate: the
    theory's choice per width and the GP limit's single choice would otherwise clash when put in one Dataset."""
    return da.sel(temperature=temperature).drop_vars("temperature")


def chosen_spec(spec: Spec, ds: xr.Dataset) -> Spec:
    """``spec`` at ``ds``'s pooled temperature, its data files (kind ``"arrays"``) named by absolute paths, so that
    it runs from the sweep's folder."""
    task, network = spec.task, spec.network
    if isinstance(task, ArraysTask) and isinstance(network, ArraysNetwork):
        task = dataclasses.replace(task, file=str(task.path.resolve()))
        network = dataclasses.replace(network, attention=str(network.path.resolve()))
    return dataclasses.replace(spec, temperature=float(ds["pooled_temperature"]), task=task, network=network)


def choice_lines(ds: xr.Dataset) -> list[str]:
    """What a temperature grid's choices were, one line each: the pooled one, and every choice within noise."""
    if "pooled_temperature" not in ds:
        return []
    m = float(ds["pooled_temperature_margin"])
    lines = [f"pooled temperature (best mean validation accuracy over widths): {float(ds['pooled_temperature']):g}, "
             f"lead {m:.1f} s.e. over the runner-up" + (" (within noise)" if m < NOISE_MARGIN else "")]
    for N, T, m in zip(ds["width"].values, ds["best_temperature_theory"].values,
                       ds["best_temperature_margin"].values, strict=True):
        if m < NOISE_MARGIN:
            lines.append(f"N={int(N)}: the best temperature {T:g} leads the runner-up by {m:.1f} s.e. on validation: "
                         "within noise")
    return lines
