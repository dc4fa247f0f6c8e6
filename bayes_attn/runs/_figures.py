"""Figures of the paper's kind, drawn with matplotlib (no display needed).

Figures are built from ``matplotlib.figure.Figure`` directly, so drawing
them neither imports ``pyplot`` nor changes the caller's backend.

Every function takes results (``Comparison``, ``Theory`` or a sweep
``xarray.Dataset``) and a path, writes a PNG and returns the path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import json

import numpy as np
import xarray as xr
from matplotlib import ticker
from matplotlib.figure import Figure

from .. import verdict
from ..comparison import THEORY_NAMES, Comparison
from ..stats import power_law_slope
from ..theory import Theory

__all__ = ["FINITE_SIZE_CHECKS", "INCONCLUSIVE", "THEORY_COLORS", "alignment", "finite_size", "heatmap",
           "inconclusive_points", "order_parameter", "order_parameter_sd", "plain_log_ticks", "predictor",
           "sweep_accuracy"]


def _subplots(*grid: int, figsize: tuple[float, float], layout: Literal["constrained", "tight"] | None = None):
    fig = Figure(figsize=figsize, layout=layout)
    return fig, fig.subplots(*grid)


def plain_log_ticks(ax, *axes: str) -> None:
    """Log-scale tick labels as plain numbers (``10``, ``300``, ``0.001``), not ``6×10⁰``; no minor labels."""
    for name in axes:
        axis = getattr(ax, f"{name}axis")
        axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(ticker.NullFormatter())


INCONCLUSIVE = dict(marker="o", s=200, facecolors="none", edgecolors="red", linewidths=1.5, zorder=5)
"""How sampled points with an inconclusive verdict (sampler diagnostics failed) are ringed."""


def inconclusive_points(ds: xr.Dataset) -> np.ndarray:
    """Boolean ``[sample_width]``: the sampled point's verdict is ``"inconclusive"``."""
    if "verdict" not in ds or "sample_width" not in ds["verdict"].dims:
        return np.zeros(ds.sizes.get("sample_width", 0), dtype=bool)
    v = ds["verdict"]
    other = [d for d in v.dims if d != "sample_width"]
    bad = v.copy(data=verdict.inconclusive_values(v.values))
    return np.asarray(bad.any(other).values if other else bad.values, dtype=bool)


def _save(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


def heatmap(ax, M, labels, title, vmax, cmap="RdBu_r", ylabel=True):
    im = ax.imshow(M, cmap=cmap, vmin=-vmax, vmax=vmax)
    ax.set_xticks(range(len(labels)), labels, rotation=45 if len(labels) > 6 else 0)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("path π'")
    if ylabel:
        ax.set_ylabel("path π")
    ax.set_title(title)
    if not ylabel:
        ax.tick_params(labelleft=False)
    if len(labels) <= 8:
        for i in range(M.shape[0]):
            for j in range(M.shape[1]):
                dark = abs(M[i, j]) > 0.55 * vmax  # the colour maps are dark at both ends
                ax.text(j, i, f"{M[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if dark else "black")
    return im


def order_parameter(c: Comparison, path, path_names: dict[str, str] | None = None) -> Path:
    """Heatmaps of ``U``: theory | sampled | difference (with path labels)."""
    labels = [f"{p}\n{path_names[p]}" if path_names and p in path_names else p for p in c.path_labels]
    vmax = float(np.max(np.abs([c.U_theory, c.U_sampled])))
    diff = c.U_sampled - c.U_theory
    fig, axes = _subplots(1, 3, figsize=(15, 4.8), layout="constrained")
    im = heatmap(axes[0], c.U_theory, labels, "theory U", vmax)
    heatmap(axes[1], c.U_sampled, labels, "sampled U (posterior mean)", vmax, ylabel=False)
    fig.colorbar(im, ax=axes[:2], shrink=0.8, label="U[π, π']")
    dmax = float(np.max(np.abs(diff))) or 1.0
    im2 = heatmap(axes[2], diff, labels, "sampled − theory", dmax, cmap="PuOr_r", ylabel=False)
    fig.colorbar(im2, ax=axes[2], shrink=0.8, label="difference")
    fig.suptitle(f"Order parameter, N = {c.width}")
    return _save(fig, path)


def predictor(c: Comparison, path) -> Path:
    """Sampled vs theory predictor mean on the test set, with ±2 MCSE error bars."""
    fig, axes = _subplots(1, 2, figsize=(10, 4.4))
    lo, hi = float(np.min(c.mean_theory)), float(np.max(c.mean_theory))
    for label, sign, color in ((+1, 1.0, "tab:blue"), (-1, -1.0, "tab:red")):
        sel = c.y_test == sign
        axes[0].errorbar(c.mean_theory[sel], c.mean_sampled[sel], yerr=2 * c.mean_mcse[sel], fmt="o", ms=3,
                         alpha=0.6, color=color, label=f"test label {label:+d}")
    axes[0].plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
    axes[0].set_xlabel("theory predictor mean")
    axes[0].set_ylabel("sampled predictor mean (±2 MCSE)")
    axes[0].set_title(f"Predictor mean, N = {c.width}")
    axes[0].legend()
    axes[1].errorbar(c.var_theory, c.var_sampled, yerr=2 * c.var_mcse, fmt="o", ms=3, alpha=0.6)
    vlo, vhi = float(np.min(c.var_theory)), float(np.max(c.var_theory))
    axes[1].plot([vlo, vhi], [vlo, vhi], "k--", lw=1, label="y = x")
    axes[1].set_xlabel("theory predictor variance")
    axes[1].set_ylabel("sampled predictor variance (±2 MCSE)")
    axes[1].set_title("Predictor variance")
    axes[1].legend()
    return _save(fig, path)


def alignment(theory: Theory, gp: Theory, path, n_pcs: int = 20) -> Path:
    """Kernel–task alignment (paper Fig. 2d): ``|cos(eigenvector, Y)|`` per PC, finite width vs GP."""
    fig, axes = _subplots(1, 2, figsize=(10, 4))
    for t, name, color in ((theory, f"finite width (N = {theory.net.widths[0]})", "tab:orange"),
                           (gp, "GP limit", "tab:gray")):
        ev, cos = t.alignment()
        k = min(n_pcs, len(ev))
        axes[0].plot(np.arange(1, k + 1), np.abs(cos[:k]), "o-", color=color, label=name)
        axes[1].semilogy(np.arange(1, k + 1), ev[:k], "o-", color=color, label=name)
    axes[0].set_xlabel("principal component of K (by eigenvalue)")
    axes[0].set_ylabel("|cosine similarity with Y|")
    axes[0].set_title("Kernel–task alignment")
    axes[0].legend()
    axes[1].set_xlabel("principal component of K")
    axes[1].set_ylabel("eigenvalue of K")
    axes[1].set_title("Kernel spectrum")
    axes[1].legend()
    return _save(fig, path)


def _runs_of_equal(values: np.ndarray) -> list[slice]:
    """The index ranges over which ``values`` stays the same (a line is drawn within each, never across)."""
    cuts = [0, *(i for i in range(1, len(values)) if values[i] != values[i - 1]), len(values)]
    return [slice(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=False)]


def _theory_lines(ax, w: np.ndarray, values: np.ndarray, temps: np.ndarray | None, **style) -> list:
    """The theory against width: one line, or (a temperature grid's view, each width at its own best
    temperature ``temps``) one line per run of widths at the same temperature, in one colour."""
    if temps is None:
        return ax.plot(w, values, **style)
    lines: list = []
    for part in _runs_of_equal(temps):
        lines += ax.plot(w[part], values[part], **(style | ({"label": None, "color": lines[0].get_color()}
                                                            if lines else {})))
    return lines


def _temperature_labels(ax, w: np.ndarray, temps: np.ndarray | None) -> None:
    """``T=…`` above each width, at the top of the panel: the temperature its theory points are at."""
    for x, t in zip(w, [] if temps is None else temps, strict=False):
        ax.text(x, 1.01, f"T={t:g}", transform=ax.get_xaxis_transform(), ha="center", va="bottom", fontsize=6,
                rotation=90 if len(w) > 6 else 0)


def sweep_accuracy(ds: xr.Dataset, path) -> Path:
    """Paper Fig. 2c: test accuracy vs N (theory line, sampled points, GP lines) and U entries vs N.

    A temperature grid's view (:func:`~bayes_attn.sweep.best_temperature_view`: every width at its own best
    validation temperature) labels each theory point with its temperature and draws no line between widths at
    different temperatures, so that a change of temperature is not read as a change with width."""
    fig, axes = _subplots(1, 2, figsize=(12, 4.6))
    w = ds["width"].values
    temps = ds["best_temperature_theory"].values if "best_temperature_theory" in ds else None
    at_best = "" if temps is None else ", each width at its best validation T"
    ax = axes[0]
    _theory_lines(ax, w, ds["accuracy_theory"].values, temps, marker="o", color="tab:orange",
                  label="theory (finite width)" + at_best)
    if "sample_width" in ds.dims and ds.sizes["sample_width"]:
        se = ds["accuracy_sampled_se"].values
        sampler = json.loads(ds.attrs.get("sampler_settings", "{}")).get("name", "exact posterior")
        test_se = ("" if "accuracy_sampled_test_se" not in ds else
                   f"; test-set error ±{float(np.nanmax(ds['accuracy_sampled_test_se'].values)):.3f} (not shown)")
        ax.errorbar(ds["sample_width"], ds["accuracy_sampled"], yerr=se, fmt="s", ms=7, color="black", capsize=3,
                    label=f"sampled ({sampler}), ±1 s.e. over chains" + (" (none: < 3 chains)" if np.isnan(se).any()
                                                                          else "") + test_se)
        bad = inconclusive_points(ds)
        if bad.any():
            ax.scatter(ds["sample_width"].values[bad], ds["accuracy_sampled"].values[bad], **INCONCLUSIVE,
                       label="inconclusive: sampler diagnostics failed")
    styles = ["-", "--", ":", "-."]
    for i, name in enumerate(ds["gp_model"].values):
        ax.axhline(float(ds["accuracy_gp"].sel(gp_model=name)), ls=styles[i % 4], color="tab:gray",
                   label=f"GP limit: {name}")
    ax.set_xscale("log")
    plain_log_ticks(ax, "x")
    ax.set_xlabel("width N")
    ax.set_ylabel("test accuracy")
    ax.set_title("Test accuracy vs width", pad=None if temps is None else 30)
    _temperature_labels(ax, w, temps)
    ax.legend(fontsize=8)
    ax = axes[1]
    labels = list(ds["path"].values)
    names = ds.attrs.get("path_names", {})
    for i, p in enumerate(labels):
        for j in range(i, len(labels)):
            q = labels[j]
            suffix = f" ({names[p]})" if i == j and p in names else ""
            line = _theory_lines(ax, w, ds["U_theory"].sel(path=p, path_=q).values, temps, ls="-",
                                 label=f"U[{p}, {q}]{suffix}")
            if "sample_width" in ds.dims and ds.sizes["sample_width"]:
                ax.errorbar(ds["sample_width"], ds["U_sampled"].sel(path=p, path_=q),
                            yerr=2 * ds["U_mcse"].sel(path=p, path_=q), fmt="o", color=line[0].get_color(), ms=4)
                bad = inconclusive_points(ds)
                if bad.any():
                    ax.scatter(ds["sample_width"].values[bad], ds["U_sampled"].sel(path=p, path_=q).values[bad],
                               **INCONCLUSIVE | {"s": 80})
    ax.set_xscale("log")
    plain_log_ticks(ax, "x")
    ax.set_xlabel("width N")
    ax.set_ylabel("U entry (lines: theory; points: sampled ±2 MCSE)")
    ax.set_title("Order parameter vs width" + ("" if temps is None else " (each width at its best validation T)"),
                 pad=None if temps is None else 30)
    _temperature_labels(ax, w, temps)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


THEORY_COLORS = {"none": "tab:red", "laplace": "tab:blue"}
FINITE_SIZE_CHECKS = (("U (relative Frobenius)", "tab:blue"), ("predictor mean (relative L2)", "tab:green"))


def _gap_curve(ax, inv, ds: xr.Dataset, name: str, color: str, marker: str, tag: str, prefix: str = "") -> None:
    """One noise-corrected gap curve with MCSE error bars and its fitted slope in the legend.

    ``prefix``: ``""`` for the headline theory's checks, ``"alternative_"`` for the other theory's.
    """
    gap = ds[f"{prefix}check_gap"].sel(check=name).values
    se = ds[f"{prefix}check_mcse"].sel(check=name).values
    floor = ds[f"{prefix}check_noise_floor"].sel(check=name).values
    slope, slope_se, used = power_law_slope(inv, gap, se, floor)
    fit = "" if np.isnan(slope) else f", slope {slope:.2f} ± {slope_se:.2f}"
    ax.errorbar(inv, gap, yerr=se, fmt=marker + "-", color=color, capsize=3, label=f"{tag}{name}{fit}")
    bad = inconclusive_points(ds)
    if bad.any():
        ax.scatter(inv[bad], gap[bad], **INCONCLUSIVE | {"s": 120},
                   label=f"{tag}{name}: inconclusive (diagnostics failed)")
    ax.plot(inv, floor, "x:", color=color, alpha=0.5, label=f"{tag}{name}: MC noise floor")
    if not np.isnan(slope):
        x = inv[used]
        ref = np.exp(np.mean(np.log(gap[used]) - slope * np.log(x)))
        ax.plot(x, ref * x**slope, "-", color=color, alpha=0.3, lw=4)


def finite_size(ds: xr.Dataset, path, alpha_sweeps: dict[str, xr.Dataset] | None = None) -> Path:
    """Sampled-vs-theory relative error against 1/N (log–log), with MCSE error bars and fitted slopes.

    ``ds`` is a fixed-P sweep (``sample_width`` dimension); ``alpha_sweeps``
    optionally adds sweeps along ``P = alpha N`` (the theory's limit), drawn dashed.
    """
    panels = 1 if not alpha_sweeps else 2
    fig, axes = _subplots(1, panels, figsize=(6.5 * panels, 4.6))
    axes = np.atleast_1d(axes)
    P = ds.attrs.get("n_train", "")
    inv = 1.0 / ds["sample_width"].values
    theories = [("", ds.attrs.get("correction", "none"))]
    if "alternative_check_gap" in ds:
        theories.append(("alternative_", ds.attrs.get("alternative_correction", "none")))
    for prefix, corr in theories:
        both = len(theories) > 1
        for name, color in FINITE_SIZE_CHECKS:
            if both and name != "U (relative Frobenius)":
                continue  # with two theories: U only, one colour per theory
            tag = (f"P = {P}: " if P else "") + (f"{THEORY_NAMES[corr]}: " if both else "")
            _gap_curve(axes[0], inv, ds, name, THEORY_COLORS[corr] if both else color, "o" if corr == "none" else "s",
                       tag, prefix)
    axes[0].set_title("Fixed P: gap between sampling and theory")
    for k, (label, a) in enumerate((alpha_sweeps or {}).items()):
        inv_a = 1.0 / a["sample_width"].values
        for name, color in FINITE_SIZE_CHECKS:
            _gap_curve(axes[1], inv_a, a, name, color, "sd^v"[k % 4], f"{label}: ")
    if alpha_sweeps:
        axes[1].set_title("P = α N: the theory's limit")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        plain_log_ticks(ax, "x", "y")
        ax.set_xlabel("1 / N")
        ax.set_ylabel("relative error, sampled vs theory (noise-corrected)")
        ax.legend(fontsize=6)
    return _save(fig, path)


def order_parameter_sd(ds: xr.Dataset, path) -> Path:
    """Predicted posterior sd of every ``U`` entry (docs/theory.md §8) against the sampled sd, one colour per width.

    ``ds``: a sweep with ``U_sd_theory`` and ``U_sd_sampled`` (``[sample_width, path, path_]``); log–log, with the
    diagonal.
    """
    fig, ax = _subplots(1, 1, figsize=(5.2, 4.6))
    D = ds.sizes["path"]
    iu = np.triu_indices(D)
    lo, hi = np.inf, 0.0
    for k, N in enumerate(ds["sample_width"].values):
        pred = ds["U_sd_theory"].sel(sample_width=N).values[iu]
        samp = ds["U_sd_sampled"].sel(sample_width=N).values[iu]
        ok = (pred > 0) & (samp > 0)
        ax.scatter(pred[ok], samp[ok], s=18, color=f"C{k % 10}", label=f"N = {N}")
        if ok.any():
            lo, hi = min(lo, pred[ok].min(), samp[ok].min()), max(hi, pred[ok].max(), samp[ok].max())
    if hi > 0:
        ax.plot([lo, hi], [lo, hi], "k:", lw=1, label="predicted = sampled")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted posterior sd of U entries (Laplace, §8)")
    ax.set_ylabel("sampled posterior sd")
    ax.set_title("Posterior spread of the order parameter")
    ax.legend(fontsize=7)
    return _save(fig, path)
