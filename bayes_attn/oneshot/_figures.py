"""Figures of the one-shot image task (paper Fig. 3) and path kernels, drawn with matplotlib.

Figures are built from ``matplotlib.figure.Figure`` directly (never
``pyplot``). Every function takes results — the ``oneshot.nc`` dataset, the
``pruning.json`` dict, or :class:`~bayes_attn.theory.Theory` objects — and a
path, writes a PNG and returns the path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import xarray as xr
from matplotlib.figure import Figure

from .._internal.precision import float64
from ..kernels import kernel_from_xi
from ..network import head_labels
from ..theory import Theory
from ._prune_result import PruneResult

__all__ = ["accuracy_vs_width", "cumulative_pruning", "not_sampled", "order_parameters", "path_kernels",
           "score_vs_drop"]


def _subplots(*grid: int, figsize: tuple[float, float]):
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(*grid, squeeze=False)


def _save(fig: Figure, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


def _head_labels(scores: Sequence[Sequence[float]]) -> list[str]:
    return head_labels([len(layer) for layer in scores])


# ----- (a) accuracy vs width ---------------------------------------------------------
def accuracy_vs_width(ds: xr.Dataset, path) -> Path:
    """Test accuracy vs ``N`` at the validation-chosen temperature: theory, GP limit, sampled,
    with the gradient-descent model and the pixel nearest-neighbour baseline as lines."""
    fig, axes = _subplots(1, 2, figsize=(12, 4.6))
    ax = axes[0, 0]
    w = ds["width"].values
    ax.errorbar(w, ds["accuracy_theory"], yerr=ds["accuracy_theory_se"], fmt="o-", color="tab:orange", capsize=3,
                label="theory, finite width")
    gp, gp_se = float(ds["accuracy_gp"]), float(ds["accuracy_gp_se"])
    ax.axhspan(gp - gp_se, gp + gp_se, color="tab:gray", alpha=0.2)
    ax.axhline(gp, color="tab:gray", label=f"GP limit (T = {float(ds['gp_best_temperature']):g})")
    if "sample_width" in ds.dims and ds.sizes["sample_width"]:
        ax.errorbar(ds["sample_width"], ds["accuracy_sampled"], yerr=ds["accuracy_sampled_se"], fmt="s", ms=7,
                    color="black", capsize=3, label=f"sampled ({ds.attrs.get('sampler', '')})")
    ax.axhline(float(ds.attrs["gd_accuracy"]), color="tab:blue", ls="--",
               label=f"gradient descent, width {int(ds.attrs['gd_width'])}")
    ax.axhline(float(ds.attrs["nn_accuracy"]), color="tab:green", ls=":", label="pixel nearest neighbour")
    ax.axhline(0.5, color="k", lw=0.5)
    ax.set_xscale("log")
    ax.set_xlabel("width N")
    ax.set_ylabel(f"test accuracy ({int(ds.attrs['n_test'])} episodes, ±1 s.e.)")
    ax.set_title("One-shot test accuracy vs width (T chosen on validation)")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    for i, N in enumerate(w):
        ax.plot(ds["temperature"], ds["accuracy_validation"].isel(width=i), "o-", ms=3, label=f"N = {N}")
    ax.plot(ds["temperature"], ds["gp_accuracy_validation"], "k--", label="GP limit")
    ax.set_xscale("log")
    ax.set_xlabel("temperature T")
    ax.set_ylabel("validation accuracy")
    ax.set_title("Temperature scan (validation episodes)")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


# ----- (b) head score vs drop ----------------------------------------------------------
def score_vs_drop(result: PruneResult, path) -> Path:
    """Head score (theory ``U``) against the accuracy drop when the head alone is removed (±1 paired s.e.)."""
    p = result.pruning
    scores = [float(s) for layer in p.head_scores for s in layer]
    drops = [np.nan if d is None else float(d) for layer in p.drops for d in layer]
    ses = [0.0 if s is None else float(s) for layer in p.drop_se for s in layer]
    labels = _head_labels(p.head_scores)
    layer = [l for l, lay in enumerate(p.head_scores) for _ in lay]
    fig, axes = _subplots(1, 1, figsize=(6, 4.6))
    ax = axes[0, 0]
    colors = ["tab:blue", "tab:red", "tab:green", "tab:purple"]
    for l in sorted(set(layer)):
        idx = [i for i, v in enumerate(layer) if v == l]
        ax.errorbar([scores[i] for i in idx], [drops[i] for i in idx], yerr=[ses[i] for i in idx], fmt="o",
                    color=colors[l % 4], capsize=3, label=f"layer {l + 1}")
    for s, d, lab in zip(scores, drops, labels, strict=True):
        ax.annotate(lab, (s, d), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.axhline(0, color="k", lw=0.5)
    sp = p.spearman
    rho = "n/a" if sp.rho is None else f"{sp.rho:.2f}"
    pv = "n/a" if sp.p_value is None else f"{sp.p_value:.3g}"
    ax.set_title(f"Head score vs accuracy drop: Spearman ρ = {rho}, p = {pv} ({sp.alternative})", fontsize=9)
    ax.set_xlabel(f"head score (theory U, N = {result.score_width}, T = {result.score_temperature})")
    ax.set_ylabel("accuracy drop when removed alone (±1 s.e.)")
    ax.legend(fontsize=8)
    return _save(fig, path)


# ----- (c) cumulative pruning ------------------------------------------------------------
def cumulative_pruning(result: PruneResult, path) -> Path:
    """Accuracy vs heads removed, in ascending / descending score order and random orders (mean, min–max)."""
    p = result.pruning
    fig, axes = _subplots(1, 1, figsize=(6, 4.6))
    ax = axes[0, 0]
    for key, curve, color in (("ascending", p.ascending, "tab:green"), ("descending", p.descending, "tab:red")):
        acc, se = np.asarray(curve.accuracy), np.asarray(curve.se)
        k = np.arange(len(acc))
        ax.errorbar(k, acc, yerr=se, fmt="o-", color=color, capsize=3, label=f"{key} head score")
    r = p.random
    mean = np.asarray(r.accuracy_mean)
    k = np.arange(len(mean))
    ax.plot(k, mean, "s--", color="tab:gray", label=f"random order (mean of {len(r.curves)})")
    ax.fill_between(k, r.accuracy_min, r.accuracy_max, color="tab:gray", alpha=0.2, label="random: min–max")
    ax.axhline(float(result.model.nn_baseline.accuracy), color="tab:green", ls=":", lw=1,
               label="pixel nearest neighbour")
    ax.axhline(0.5, color="k", lw=0.5)
    ax.set_xlabel("heads removed (no retraining)")
    ax.set_ylabel("test accuracy")
    ax.set_title("Cumulative pruning of the gradient-descent model")
    ax.legend(fontsize=7)
    return _save(fig, path)


def not_sampled(path) -> Path:
    """A figure that says the posterior was not sampled (``theory.sample_widths`` empty): no gap to draw."""
    fig, axes = _subplots(1, 1, figsize=(6.5, 4.6))
    ax = axes[0, 0]
    ax.text(0.5, 0.5, "not sampled (theory.sample_widths is empty):\nno gap between samples and theory",
            ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return _save(fig, path)


# ----- (d) U heatmaps --------------------------------------------------------------------
def order_parameters(matrices: Mapping[str, np.ndarray], labels: Sequence[str], path, title: str = "") -> Path:
    """Heatmaps of ``U`` ``[D, D]`` side by side (e.g. theory | sampled | trained weights), each with its own scale."""
    n = len(matrices)
    fig, axes = _subplots(1, n, figsize=(5.2 * n, 4.6))
    big = len(labels) > 8
    for ax, (name, U) in zip(axes[0], matrices.items(), strict=True):
        U = np.asarray(U, dtype=np.float64)
        vmax = float(np.max(np.abs(U))) or 1.0
        im = ax.imshow(U, cmap="RdBu_r", vmin=-vmax, vmax=vmax)
        ax.set_xticks(range(len(labels)), labels, rotation=90 if big else 0, fontsize=6 if big else 8)
        ax.set_yticks(range(len(labels)), labels, fontsize=6 if big else 8)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("path π'")
        fig.colorbar(im, ax=ax, shrink=0.75)
    axes[0, 0].set_ylabel("path π")
    if title:
        fig.suptitle(title)
    return _save(fig, path)


# ----- (e) path kernels --------------------------------------------------------------------
def _centred(K: np.ndarray) -> np.ndarray:
    """``H K H`` with ``H = I − 11ᵀ/P``: the kernel without its constant offset."""
    return K - K.mean(axis=0, keepdims=True) - K.mean(axis=1, keepdims=True) + K.mean()


def _alignment(K: np.ndarray, y: np.ndarray) -> float:
    """Centred kernel–target alignment ``Yᵀ Kc Y / (|Y|² ‖Kc‖_F)`` (``Kc = H K H``)."""
    Kc = _centred(K)
    return float(y @ Kc @ y / (y @ y * np.linalg.norm(Kc)))


def path_kernels(theory: Theory, gp: Theory, paths: Sequence[str | int], path, *,
                 names: Mapping[str, str] | None = None, max_examples: int = 300) -> Path:
    """Path kernels ``C[π, π]`` of ``paths`` and the GP kernel vs the renormalised ``K(U)`` (docs/theory.md §3).

    On the training examples of ``theory`` (the first ``max_examples``),
    sorted by label (+1 first). ``paths``: path labels (``"1-2"``, see
    ``net.path_labels``) or 0-based indices; ``names``: optional label →
    name (e.g. ``{"1-1": "good"}``). Titles give the kernel–target alignment
    ``YᵀKY / (|Y|² ‖K‖_F)``.
    """
    net = theory.net
    labels = net.path_labels
    idx = []
    for p in paths:
        if isinstance(p, str):
            if p not in labels:
                raise ValueError(f"paths: unknown path {p!r}; known: {labels}")
            idx.append(labels.index(p))
        elif isinstance(p, (int, np.integer)) and not isinstance(p, bool) and 0 <= p < net.D:
            idx.append(int(p))
        else:
            raise ValueError(f"paths must hold path labels or indices in [0, {net.D}), got {p!r}")
    x, y = theory.x_train, theory.y_train
    keep = np.arange(min(len(y), int(max_examples)))
    order = keep[np.argsort(-y[keep], kind="stable")]
    x, y = x[order], y[order]
    with float64():
        xi = net.xi(x)  # [P, D, N0]

        def K_of(U):  # K(U) on the examples (C[π, π] is K of the unit matrix at (π, π)), float64 NumPy [P, P]
            return np.asarray(kernel_from_xi(jnp.asarray(U, jnp.float64), xi, xi, net.variances[0]))

        panels = [(f"C[{labels[i]}, {labels[i]}]" + (f" ({names[labels[i]]})" if names and labels[i] in names else ""),
                   K_of(np.diag(np.eye(net.D)[i]))) for i in idx]
        for name, t in (("GP kernel K(U_GP)", gp), (f"renormalised K(U), N = {theory.net.widths[0]}", theory)):
            panels.append((name, K_of(t.U)))
    fig, axes = _subplots(1, len(panels), figsize=(3.6 * len(panels), 3.6))
    n_plus = int(np.sum(y > 0))
    for ax, (name, K) in zip(axes[0], panels, strict=True):
        Kc = _centred(K)
        lim = float(np.percentile(np.abs(Kc), 99)) or 1.0
        ax.imshow(Kc, cmap="RdBu_r", vmin=-lim, vmax=lim)
        ax.axhline(n_plus - 0.5, color="k", lw=0.8)
        ax.axvline(n_plus - 0.5, color="k", lw=0.8)
        ax.set_title(f"{name}\nalignment {_alignment(K, y):.3f}", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0, 0].set_ylabel(f"training examples sorted by label (+1 first, {n_plus} of {len(y)})", fontsize=7)
    fig.suptitle("Centred path kernels and kernels on the training examples", fontsize=10)
    return _save(fig, path)
