"""Runs that chain the pieces: task → network → theory | posterior → comparison → report.

- :func:`theory_run`: one width: theory and GP limit, with test accuracies.
- :func:`run`: one width: theory, GP limit, sampling, comparison, report and figures.
- :func:`alpha_sweep`: sampling against theory along P = alpha N.
- :func:`sweep`: theory over many widths and sampling at some, into one netCDF
  with a ``width`` dimension (paper Fig. 2c/2e); finished widths are kept on
  disk and not recomputed when a sweep is resumed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr

from . import _checks, _io, figures
from .compare import Comparison, accuracy, compare, power_law_slope
from .network import Network
from .posterior import Posterior, sample_posterior
from .spec import Spec
from .theory import Theory, gp_limit, solve_theory


def gp_on_paths(gp: Theory, paths: tuple[str, ...]) -> Theory:
    """The GP limit of the network restricted to ``paths`` (labels).

    Its kernel is that of a network with only those paths: the GP ``U`` on the
    kept diagonal entries, scaled by ``D / len(paths)`` to undo the ``1/D`` of ``C``.
    Only its kernel and predictor are meant to be used: the action, gradient and
    deeper order parameters it carries are those of the whole network's GP point.
    """
    labels = gp.net.path_labels
    keep = np.isin(labels, paths)
    U = np.diag(np.where(keep, np.diag(gp.U) * gp.net.D / keep.sum(), 0.0))
    return dataclasses.replace(gp, U=U, order_parameters=(U, *gp.order_parameters[1:]), limit=f"gp on {list(paths)}")


def gp_accuracies(spec: Spec, gp: Theory, x_test, y_test) -> dict[str, float]:
    """Test accuracy of the GP limit of the whole network and of each ``compare.gp_paths`` subset."""
    models = {"whole network": gp} | {k: gp_on_paths(gp, v) for k, v in spec.compare.gp_paths.items()}
    return {k: accuracy(t.predict(x_test)[0], y_test) for k, t in models.items()}


@dataclass(frozen=True, eq=False)
class TheoryResult:
    """What :func:`theory_run` computed, and where it was written."""

    theory: Theory
    gp: Theory
    accuracy: float
    gp_accuracies: dict[str, float]
    path: Path


def theory_run(spec: Spec, out: str | Path, *, width: int | None = None, temperature: float | None = None) -> TheoryResult:
    """Theory and GP limit at one width, with test accuracies; writes ``out/theory.nc``."""
    net = spec.net(width)
    T = spec.temperature if temperature is None else temperature
    x, y, xt, yt = spec.data()
    theory = solve_theory(net, x, y, temperature=T)
    gp = gp_limit(net, x, y, temperature=T)
    acc = accuracy(theory.predict(xt)[0], yt)
    ds = theory.to_dataset()
    ds["accuracy"] = acc
    path = _io.save(ds, Path(out) / "theory.nc")
    return TheoryResult(theory, gp, acc, gp_accuracies(spec, gp, xt, yt), path)


@dataclass(frozen=True, eq=False)
class RunResult:
    """Everything :func:`run` computed, and where it was written."""

    theory: Theory
    gp: Theory
    posterior: Posterior
    comparison: Comparison
    out: Path


def run(spec: Spec, out: str | Path, *, width: int | None = None, temperature: float | None = None,
        progress_bar: bool = True, **sampler) -> RunResult:
    """Theory + GP + sampling + comparison at one width, written into ``out``.

    Writes ``theory.nc``, ``gp.nc``, ``posterior.nc``, ``comparison.nc``,
    ``report.md``, ``spec.toml`` and figures ``order_parameter.png``,
    ``predictor.png``, ``alignment.png``.
    """
    out = Path(out)
    net = spec.net(width)
    T = spec.temperature if temperature is None else temperature
    settings = spec.sampler.replace(**sampler)
    x, y, xt, yt = spec.data()
    theory = solve_theory(net, x, y, temperature=T)
    gp = gp_limit(net, x, y, temperature=T)
    post = sample_posterior(net, x, y, temperature=T, x_test=xt, progress_bar=progress_bar, sampler=settings)
    comp = compare(theory, post, xt, yt, rtol=spec.compare.rtol, n_sigma=spec.compare.n_sigma, gp=gp)
    theory.save(out / "theory.nc")
    gp.save(out / "gp.nc")
    post.save(out / "posterior.nc")
    comp.save(out / "comparison.nc")
    gp_acc = gp_accuracies(spec, gp, xt, yt)
    ran = dataclasses.replace(spec, temperature=T, sampler=settings,
                              network=dataclasses.replace(spec.network, width=net.widths[0]))
    (out / "spec.toml").write_text(ran.to_toml())  # the run as it was made, overrides applied
    (out / "report.md").write_text(_report(spec, net, T, theory, post, comp, gp_acc))
    figures.order_parameter(comp, out / "order_parameter.png", spec.compare.path_names)
    figures.predictor(comp, out / "predictor.png")
    figures.alignment(theory, gp, out / "alignment.png")
    return RunResult(theory, gp, post, comp, out)


def _report(spec: Spec, net: Network, T: float, theory: Theory, post: Posterior, comp: Comparison, gp_acc) -> str:
    names = spec.compare.path_names
    paths = ", ".join(f"{p} ({names[p]})" if p in names else p for p in net.path_labels)
    scores = theory.head_scores()
    head_rows = [
        f"| {l + 1} | {h + 1} | {net.head_names[l][h] if net.head_names else ''} | {s:.3f} |"
        for l, layer in enumerate(scores) for h, s in enumerate(layer)
    ]
    return "\n".join(
        [
            f"# {spec.name}: N = {net.widths[0]}, temperature = {T}",
            "",
            f"Paths: {paths}. P = {len(theory.y_train)} training, {len(comp.y_test)} test examples.",
            "",
            f"Theory: converged = {theory.converged}, max |dS/dU| = {theory.max_gradient:.2g}, "
            f"Hessian min eigenvalue = {theory.hessian_min_eigenvalue:.3g}, Ua = {theory.Ua:.4g}, "
            f"S/N = {theory.action:.6g}.",
            "",
            f"Sampler: {post.sampler} (NUTS), {post.tree['posterior'].sizes['chain']} chains × "
            f"{post.tree['posterior'].sizes['draw']} draws, {post.tree.attrs['seconds']:.1f} s.",
            "",
            comp.report(),
            "## GP limits",
            "",
            "| GP model | test accuracy |",
            "|---|---|",
            *[f"| {k} | {v:.4f} |" for k, v in gp_acc.items()],
            "",
            "## Head scores (theory)",
            "",
            "| layer | head | name | score |",
            "|---|---|---|---|",
            *head_rows,
            "",
            "Figures: order_parameter.png, predictor.png, alignment.png.",
            "",
        ]
    )


# ----------------------------------------------------------------------------
# sweeps over width
# ----------------------------------------------------------------------------
def _settings_key(spec: Spec, T: float, sampler: dict | None = None) -> str:
    """Hash of everything a per-width result depends on (spec, temperature, sampler settings)."""
    text = json.dumps([spec.to_toml(), T, sampler and spec.sampler.replace(**sampler).to_dict()], sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _finished(path: Path, key: str) -> xr.Dataset | None:
    """A per-width result made with the same settings, or ``None`` (missing or made otherwise)."""
    if not path.exists():
        return None
    ds = _io.load_dataset(path)
    if ds.attrs.get("settings_key") != key:
        print(f"{path} was made with other settings: recomputing it")
        return None
    return ds


def _theory_at(spec: Spec, N: int, T: float, data, folder: Path) -> xr.Dataset:
    path = folder / f"theory-N{N}.nc"
    key = _settings_key(spec, T)
    if (ds := _finished(path, key)) is not None:
        return ds
    x, y, xt, yt = data
    t = solve_theory(spec.net(N), x, y, temperature=T)
    ds = t.to_dataset().assign_attrs(settings_key=key)
    ds["accuracy"] = accuracy(t.predict(xt)[0], yt)
    _io.save(ds, path)
    return ds


def _sampled_at(spec: Spec, N: int, T: float, data, folder: Path, gp: Theory, progress_bar: bool,
                sampler: dict) -> xr.Dataset:
    path = folder / f"sampled-N{N}.nc"
    key = _settings_key(spec, T, sampler)
    if (ds := _finished(path, key)) is not None:
        return ds
    x, y, xt, yt = data
    net = spec.net(N)
    theory = solve_theory(net, x, y, temperature=T)
    post = sample_posterior(net, x, y, temperature=T, x_test=xt, progress_bar=progress_bar,
                            sampler=spec.sampler.replace(**sampler))
    post.save(folder / f"posterior-N{N}.nc")
    comp = compare(theory, post, xt, yt, rtol=spec.compare.rtol, n_sigma=spec.compare.n_sigma, gp=gp)
    ds = comp.to_dataset()
    chain_means = post.tree["posterior"]["f_test"].mean("draw").values  # [chain, test]
    per_chain = [accuracy(m, yt) for m in chain_means]
    ds["accuracy_per_chain"] = ("chain", per_chain)
    ds.attrs["settings_key"] = key
    _io.save(ds, path)
    return ds


def _sampled_table(sampled: list[xr.Dataset], sample_widths: list[int]) -> xr.Dataset:
    """Per-width comparisons gathered along ``sample_width``."""
    sw = xr.DataArray(sample_widths, dims="sample_width", name="sample_width")
    keep = ["U_sampled", "U_mcse", "U_theory", "check_value", "check_mcse", "check_noise_floor", "check_gap",
            "check_passed", "accuracy"]
    s = xr.concat([d[keep] for d in sampled], dim=sw, coords="minimal", compat="override")
    out = s[["U_sampled", "U_mcse", "check_value", "check_mcse", "check_noise_floor", "check_gap", "check_passed"]]
    out["U_theory_at_sample_width"] = s["U_theory"]
    out["accuracy_sampled"] = s["accuracy"].sel(predictor="sampled", drop=True)
    out["accuracy_sampled_se"] = ("sample_width", [
        float(d["accuracy_per_chain"].std(ddof=1) / np.sqrt(d.sizes["chain"])) if d.sizes["chain"] > 1 else np.nan
        for d in sampled
    ])
    return out


def _slopes(ds: xr.Dataset) -> dict[str, float]:
    """Fitted power-law slopes of the noise-corrected gaps against 1/N (see :func:`power_law_slope`)."""
    out = {}
    inv = 1.0 / ds["sample_width"].values
    for name, key in (("U (relative Frobenius)", "U"), ("predictor mean (relative L2)", "mean")):
        c = ds.sel(check=name)
        slope, se, used = power_law_slope(inv, c["check_gap"].values, c["check_mcse"].values, c["check_noise_floor"].values)
        out |= {f"slope_{key}": slope, f"slope_{key}_se": se, f"slope_{key}_points": int(used.sum())}
    return out


def alpha_sweep(spec: Spec, out: str | Path, *, alpha: float, widths, temperature: float | None = None,
                progress_bar: bool = True, **sampler) -> xr.Dataset:
    """Theory against sampling along ``P = alpha N`` (the limit the theory is exact in, THEORY.md §4).

    At each width ``N`` the task gets ``P = round(alpha N)`` training sequences
    (the test set is unchanged); writes ``alpha_sweep.nc`` with the gaps of
    every check along ``sample_width`` and their fitted slopes. Resumable like :func:`sweep`.
    """
    out = Path(out)
    alpha = _checks.positive("alpha", alpha)
    widths = sorted({int(w) for w in widths})
    T = spec.temperature if temperature is None else temperature
    sampled, n_train = [], []
    for N in widths:
        P = max(2, int(round(alpha * N)))
        s = dataclasses.replace(spec, task=dataclasses.replace(spec.task, n_train=P))
        data = s.data()
        gp = gp_limit(s.net(N), data[0], data[1], temperature=T)
        sampled.append(_sampled_at(s, N, T, data, out / "widths", gp, progress_bar, sampler))
        n_train.append(P)
    ds = _sampled_table(sampled, widths).assign_coords(n_train=("sample_width", n_train))
    ds.attrs.update(_slopes(ds), alpha=float(alpha), temperature=T, name=spec.name, spec=spec.to_toml())
    _io.save(ds, out / "alpha_sweep.nc")
    return ds


def sweep(spec: Spec, out: str | Path, *, widths=None, sample_widths=None, temperature: float | None = None,
          progress_bar: bool = True, **sampler) -> xr.Dataset:
    """Theory at ``widths`` and sampling at ``sample_widths``; writes ``sweep.nc`` and figures.

    Per-width results go to ``out/widths/`` as they finish; a rerun loads them
    instead of recomputing (a sweep interrupted by a crash resumes).
    """
    out = Path(out)
    widths = sorted({int(w) for w in (widths or spec.compare.widths)})
    sample_widths = sorted({int(w) for w in (spec.compare.sample_widths if sample_widths is None else sample_widths)})
    for w in (*widths, *sample_widths):
        if w < 1:
            raise ValueError(f"widths must be positive integers, got {w}")
    T = spec.temperature if temperature is None else temperature
    data = spec.data()
    x, y, xt, yt = data
    gp = gp_limit(spec.net(widths[0]), x, y, temperature=T)
    folder = out / "widths"
    theories = [_theory_at(spec, N, T, data, folder) for N in widths]
    sampled = [_sampled_at(spec, N, T, data, folder, gp, progress_bar, sampler) for N in sample_widths]

    gp_acc = gp_accuracies(spec, gp, xt, yt)
    th = xr.concat([t[["U", "accuracy", "action", "max_gradient", "hessian_min_eigenvalue", "Ua"]] for t in theories],
                   dim=xr.DataArray(widths, dims="width", name="width"), coords="minimal", compat="override")
    ds = xr.Dataset(
        {
            "U_theory": th["U"],
            "accuracy_theory": th["accuracy"],
            "action": th["action"],
            "max_gradient": th["max_gradient"],
            "hessian_min_eigenvalue": th["hessian_min_eigenvalue"],
            "Ua": th["Ua"],
            "accuracy_gp": ("gp_model", list(gp_acc.values())),
        },
        coords={"gp_model": list(gp_acc)},
    )
    if sampled:
        ds = ds.merge(_sampled_table(sampled, sample_widths))
        ds.attrs.update(_slopes(ds))
    ds.attrs.update(spec=spec.to_toml(), temperature=T, path_names=json.dumps(spec.compare.path_names), name=spec.name,
                    n_train=int(len(y)))
    _io.save(ds, out / "sweep.nc")
    plot_ds = ds.assign_attrs(path_names=spec.compare.path_names)
    figures.sweep_accuracy(plot_ds, out / "accuracy_vs_width.png")
    if sampled:
        figures.finite_size(plot_ds, out / "finite_size.png")
    return ds
