"""Result files of the one-shot job (paper Fig. 3): ``oneshot.nc``, ``report.md`` and the figures.

Pure functions of results already computed by :mod:`bayes_attn.oneshot.pipeline`;
:func:`draw_figures` redraws every figure from the files alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from .. import _io
from ..network import head_labels
from . import figures

FIGURES = {
    "accuracy_vs_width.png": "(a) test accuracy vs N: theory, GP, sampled; GD model and pixel baseline",
    "score_vs_drop.png": "(b) head score vs accuracy drop, Spearman ρ and p",
    "cumulative_pruning.png": "(c) accuracy vs heads removed: ascending, descending, random",
    "order_parameters.png": "(d) U: theory | sampled | trained weights",
    "path_kernels.png": "(e) path kernels C[π,π] and GP vs renormalised kernel",
}


BINOMIAL_NOTE = ("Below, ± is the binomial standard error (episodes counted as independent), smaller than the "
                 "class bootstrap of the summary, which lets episodes that share a class move together.")

def results_dataset(scan: xr.Dataset, sampled: xr.Dataset, report: Mapping, U: Mapping[str, np.ndarray],
                    heads: Sequence[int], attrs: Mapping) -> xr.Dataset:
    """One dataset of everything numeric: the scan, the sampling, ``U`` theory/sampled/trained, head scores, drops.

    ``U``: ``{"theory": …, "sampled": …, "trained": …, "score": …}`` ``[D, D]`` each
    (``sampled`` may be absent); ``attrs``: scalars for the figures and the
    record (``gd_accuracy``, ``gd_width``, ``nn_accuracy``, …).
    """
    head = head_labels(heads)

    def flat(per_layer):
        return np.array([np.nan if v is None else float(v) for layer in per_layer for v in layer])

    cum = report["cumulative"]
    ds = xr.merge([scan, sampled], compat="override", join="outer")
    ds = ds.assign({f"U_{name}": (("path", "path_"), np.asarray(m)) for name, m in U.items()})
    ds = ds.assign(
        head_score=(("head",), flat(report["head_scores"])),
        head_score_trained=(("head",), flat(report["trained_head_scores"])),
        accuracy_drop=(("head",), flat(report["accuracy_drops"])),
        accuracy_drop_se=(("head",), flat(report["drop_se"])),
        pruned_ascending=(("step",), np.asarray(cum["ascending"]["accuracy"])),
        pruned_descending=(("step",), np.asarray(cum["descending"]["accuracy"])),
        pruned_random_mean=(("step",), np.asarray(cum["random"]["accuracy_mean"])),
        pruned_random_std=(("step",), np.asarray(cum["random"]["accuracy_std"])),
    )
    ds = ds.assign_coords(head=head, head_layer=("head", [l + 1 for l, H in enumerate(heads) for _ in range(H)]),
                          step=np.arange(len(cum["ascending"]["accuracy"])))
    ds.attrs.update({**scan.attrs, **sampled.attrs, **{k: v for k, v in attrs.items() if v is not None},
                     "base_accuracy": float(report["base_accuracy"]), "base_se": float(report["base_se"]),
                     "spearman_rho": np.nan if report["spearman"]["rho"] is None else float(report["spearman"]["rho"]),
                     "spearman_p": np.nan if report["spearman"]["p_value"] is None else float(report["spearman"]["p_value"])})
    for k in ("theory_accuracy", "theory_se", "gp_accuracy", "gp_se", "spearman_median", "spearman_q05", "spearman_q95"):
        if k in report:
            ds.attrs[k] = float(report[k])
    if "spearman_draws" in report:
        ds = ds.assign(spearman_draws=(("rho_draw",), np.asarray(report["spearman_draws"], dtype=np.float64)))
    return ds


def save_dataset(ds: xr.Dataset, path: str | os.PathLike) -> Path:
    """Write ``ds`` to netCDF atomically (:func:`bayes_attn._io.save`)."""
    return _io.save(ds, path)


def draw_figures(out: str | os.PathLike) -> list[Path]:
    """Figures (a)–(d) from ``out/oneshot.nc`` and ``out/pruning.json`` (no recomputation)."""
    out = Path(out)
    return figures_of(_io.load_dataset(out / "oneshot.nc"), json.loads((out / "pruning.json").read_text()), out)


def figures_of(ds: xr.Dataset, report: Mapping, out: str | os.PathLike) -> list[Path]:
    """Figures (a)–(d) of the results ``ds`` (:func:`results_dataset`) and ``report`` into the folder ``out``."""
    out = Path(out)
    paths = [
        figures.accuracy_vs_width(ds, out / "accuracy_vs_width.png"),
        figures.score_vs_drop(report, out / "score_vs_drop.png"),
        figures.cumulative_pruning(report, out / "cumulative_pruning.png"),
    ]
    mats = {}
    if "sample_width" in ds.dims and ds.sizes["sample_width"]:
        N = int(ds["sample_width"][0])
        temp = float(ds["temperature_sampled"][0])
        mats[f"theory U, N = {N}, T = {temp:g}"] = ds["U_theory"].isel(sample_width=0).values
        mats[f"sampled U (posterior mean), N = {N}, T = {temp:g}"] = ds["U_sampled"].isel(sample_width=0).values
    else:
        mats[f"theory U, N = {ds.attrs['score_width']}, T = {ds.attrs['score_temperature']:g}"] = ds["U_score"].values
    mats[f"trained weights U (GD model, width {int(ds.attrs['gd_width'])})"] = ds["U_trained"].values
    paths.append(figures.order_parameters(mats, list(ds["path"].values), out / "order_parameters.png",
                                                  "Order parameter U over attention paths (each panel its own scale)"))
    return paths


def _pm(d: Mapping | None, key: str = "accuracy", se: str = "se") -> str:
    return "n/a" if not d else f"{d[key]:.3f} ± {d[se]:.3f}"


def report_markdown(name: str, report: Mapping, ds: xr.Dataset, seconds: Mapping[str, float]) -> str:
    """``report.md``: the numbers of Fig. 3 in tables."""
    lines = [f"# One-shot image classification (paper Fig. 3): `{name}`", ""]
    if "verdict" in report:
        reasons = report.get("inconclusive_reasons") or []
        lines += [f"Verdict of the sampling: **{report['verdict']}**" + (": " + "; ".join(reasons) if reasons else "")
                  + ".", ""]
    m = report["model"]
    if "theory_accuracy" in report:
        lines += [
            "## Summary (test episodes; ± class-bootstrap standard error)", "",
            "| quantity | here | paper |", "|---|---|---|",
            f"| gradient-descent model | {report['base_accuracy']:.3f} ± {report['base_se']:.3f} | 0.838 |",
            f"| theory, N = {report['theory_width']}, T = {report['theory_temperature']:g} (validation-chosen) "
            f"| {report['theory_accuracy']:.3f} ± {report['theory_se']:.3f} | |",
            f"| GP limit, T = {report['gp_temperature']:g} (validation-chosen) | {report['gp_accuracy']:.3f} ± {report['gp_se']:.3f} | |",
            f"| Spearman ρ, head score vs single-head drop: median [5 %, 95 %] of {len(report['spearman_draws'])} values "
            f"({report['n_draws']} draws of the theory's episodes × {report['n_resamples']} bootstraps of the test episodes) "
            f"| {report['spearman_median']:.2f} [{report['spearman_q05']:.2f}, {report['spearman_q95']:.2f}] "
            f"| {report['paper_spearman_rho']:.2f} |",
            "", f"Theory's training episodes: classes of `{report['theory_classes']}`. Standard errors: "
            f"{report['se_method']}.", "",
        ]
    kept = m.get("kept_epoch")
    lines += [
        "## Gradient-descent model", "", BINOMIAL_NOTE
        + (f" Early stopping on validation: {m['epochs_run']} epochs run, the weights of epoch {kept + 1} kept."
           if kept is not None else ""), "",
        "| set | model | pixel nearest neighbour |", "|---|---|---|",
        f"| test ({int(ds.attrs['n_test'])} episodes) | {_pm(m['test'])} | {_pm(report['nn_baseline'])} |",
        f"| validation | {_pm(m['validation'])} | |",
    ]
    for k, v in report["ood"].items():
        lines.append(f"| OOD {k} | {_pm(v)} | {v['nn_accuracy']:.3f} ± {v['nn_se']:.3f} |")
    lines += ["", "## Theory and sampling on the frozen attention", "",
              f"Temperature chosen per width on validation episodes ({ds.attrs['temperature_choice']}); "
              "test accuracy at that temperature. " + BINOMIAL_NOTE, "",
              "| N | chosen T | validation | test (theory) | sampled | agreement with theory |", "|---|---|---|---|---|---|"]
    sw = list(ds["sample_width"].values) if "sample_width" in ds.dims else []
    for i, N in enumerate(ds["width"].values):
        s, a = "", ""
        if N in sw:
            j = sw.index(N)
            s = f"{float(ds['accuracy_sampled'][j]):.3f} ± {float(ds['accuracy_sampled_se'][j]):.3f}"
            a = f"{float(ds['agreement'][j]):.3f}"
        lines.append(f"| {N} | {float(ds['best_temperature'][i]):g} | {float(ds['accuracy_theory_validation'][i]):.3f} "
                     f"| {float(ds['accuracy_theory'][i]):.3f} ± {float(ds['accuracy_theory_se'][i]):.3f} | {s} | {a} |")
    lines.append(f"| GP | {float(ds['gp_best_temperature']):g} | {float(ds['accuracy_gp_validation']):.3f} "
                 f"| {float(ds['accuracy_gp']):.3f} ± {float(ds['accuracy_gp_se']):.3f} | | |")
    if sw:
        lines += ["", "Sampling diagnostics: " + ", ".join(
            f"N = {N}: " + (f"`{ds['sampler_used'].values[j]}`, " if "sampler_used" in ds else "")
            + f"max R-hat(U) {float(ds['rhat_U'][j]):.3f}, "
            + (f"min bulk ESS(U) {float(ds['ess_U'][j]):.0f}, " if "ess_U" in ds else "")
            + (f"Pareto k-hat {float(ds['pareto_k'][j]):.2f}, "
               if "pareto_k" in ds and np.isfinite(float(ds['pareto_k'][j])) else "")
            + f"{int(ds['divergences'][j])} divergences, "
            + (f"{float(ds['mean_steps'][j]):.0f} leapfrog steps/draw, " if np.isfinite(float(ds['mean_steps'][j]))
               else "")
            + f"{float(ds['sampling_seconds'][j]):.0f} s"
            for j, N in enumerate(sw))]
    lines += ["", f"Theory solves not converged: {int((~ds['converged'].values.astype(bool)).sum())} of "
              f"{ds['converged'].size}.", "",
              "## Head scores and pruning (test episodes, no retraining)", "",
              f"Head scores from the theory's U at N = {report['score_width']}, T = {report['score_temperature']}.", "",
              "| head | score (theory U) | score (trained U) | drop ± se (GD model) | drop (theory, paths out of U) |",
              "|---|---|---|---|---|"]
    ab = report.get("theory_ablation")
    labels = iter(head_labels([len(layer) for layer in report["head_scores"]]))
    for l, layer in enumerate(report["head_scores"]):
        for h, s in enumerate(layer):
            d, se = report["accuracy_drops"][l][h], report["drop_se"][l][h]
            ds_ = "n/a" if d is None else f"{d:+.3f} ± {se:.3f}"
            td = "" if not ab or ab["drops"][l][h] is None else f"{ab['drops'][l][h]:+.3f}"
            lines.append(f"| {next(labels)} | {s:.3f} | {report['trained_head_scores'][l][h]:.3f} | {ds_} | {td} |")
    sp, tsp = report["spearman"], report["trained_spearman"]
    fmt = lambda r: "n/a" if r["rho"] is None else f"ρ = {r['rho']:.3f}, p = {r['p_value']:.3g} ({r['alternative']}, {r['method']})"
    cum = report["cumulative"]
    lines += ["", f"Spearman (theory score vs drop): {fmt(sp)}.", f"Spearman (trained-weights score vs drop): {fmt(tsp)}."]
    if "spearman_draws" in report:
        lines += [f"Spread of ρ (theory score vs drop) over {report['n_draws']} draws of the theory's training episodes × "
                  f"{report['n_resamples']} class bootstraps of the test episodes: median {report['spearman_median']:.3f}, "
                  f"90 % interval [{report['spearman_q05']:.3f}, {report['spearman_q95']:.3f}] "
                  f"({len(report['spearman_draws'])} values); the paper's ρ ≈ {report['paper_spearman_rho']}."]
    if ab:
        lines += [f"Theory-side ablation (head's paths removed from U, survivors rescaled as in the model; theory "
                  f"accuracy {ab['accuracy']:.3f}): Spearman vs score {fmt(ab['spearman_score'])}; "
                  f"vs the model's drops {fmt(ab['spearman_gd_drops'])}."]
    lines += [
              "", "Cumulative pruning, accuracy after k heads removed:", "",
              "| k | ascending | descending | random mean ± sd |", "|---|---|---|---|"]
    r = cum["random"]
    for k, (a, d) in enumerate(zip(cum["ascending"]["accuracy"], cum["descending"]["accuracy"])):
        lines.append(f"| {k} | {a:.3f} | {d:.3f} | {r['accuracy_mean'][k]:.3f} ± {r['accuracy_std'][k]:.3f} |")
    if report.get("deviations"):
        lines += ["", "## Departures from the authors' recipe", "", *[f"- {d}" for d in report["deviations"]]]
    lines += ["", "## Wall time", "", *[f"- {k}: {v:.0f} s" for k, v in seconds.items()], "",
              "## Figures", "", *[f"- `{f}`: {d}" for f, d in FIGURES.items()], ""]
    return "\n".join(lines)
