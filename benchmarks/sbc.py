"""Simulation-based calibration of the registered samplers, with negative controls.

A thin driver over :mod:`bayes_attn.calibration` (the method is described
there; Talts et al. 2018): for every sampler named in ``--reps``, R prior
replications on one small random network, the ranks of the true invariant
observables (upper triangles of ``U``, ``U_2``, ``Ua``, ``f`` at the test
inputs and at the first training input) among thinned NUTS draws, a
chi-square test per observable and the Bonferroni-pooled p-value.

Negative controls (``--controls``): the same sampler with the likelihood at
``T/4`` and at ``4T`` while the data come from ``T``. They must be rejected
(pooled p < 0.01); that shows the check has power at the number of
replications used. The wishart sampler (13 sampled dimensions here, one
8 × 8 Cholesky per gradient) makes 1000 replications cheap; the others get
fewer (defaults: wishart 1000 + 2 × 600 controls, collapsed 300 + 2 × 300,
full 200; 200 warm-up iterations, 31 draws thinned by 4, 8 bins).

Writes ``benchmarks/results/sbc.json`` (counts, p-values, settings, run times,
a per-sampler summary) and ``sbc.png`` (rank histograms) beside it.

Run::

    .venv/bin/python benchmarks/sbc.py            # ~10-15 min on 2 cores
    .venv/bin/python benchmarks/sbc.py --quick    # smoke test: 8-16 replications of a width-2 network, a temp folder
"""

from __future__ import annotations

import argparse
import os

from harness import Record, parse, parser
from harness import headline as make_headline

DEFAULT_REPS = {"wishart": 1000, "collapsed": 300, "full": 200}
DEFAULT_CONTROLS = {"wishart": 600, "collapsed": 300}
CONTROL_FACTORS = {"T/4": 0.25, "4T": 4.0}
ALPHA = 0.01  # a control "fails" (is rejected) when its pooled p-value is below ALPHA


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (``--quick``: 8-16 replications of a width-2 network)."""
    ap = parser("sbc", __doc__.split("\n\n")[0], "8-16 replications of a width-2 network, 30 warm-up, 7 draws")
    ap.add_argument("--reps", nargs="+", default=[f"{k}={v}" for k, v in DEFAULT_REPS.items()], metavar="SAMPLER=R",
                    help="registered samplers to check and their replications")
    ap.add_argument("--controls", nargs="*", default=[f"{k}={v}" for k, v in DEFAULT_CONTROLS.items()],
                    metavar="SAMPLER=R",
                    help="samplers that also run the negative controls at T/4 and 4T, and their replications")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--draws", type=int, default=31, help="thinned draws per replication (draws+1 divisible by --bins)")
    ap.add_argument("--thinning", type=int, default=4)
    ap.add_argument("--bins", type=int, default=8)
    ap.add_argument("--width", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    a = parse(ap, argv)
    if a.quick:
        a.reps, a.controls = ["wishart=16", "collapsed=8", "full=8"], ["wishart=16", "collapsed=8"]
        a.warmup, a.draws, a.thinning, a.bins, a.width = 30, 7, 1, 4, 2
    a.reps = dict(parse_rep(s) for s in a.reps)
    a.controls = dict(parse_rep(s) for s in a.controls)
    return a


def parse_rep(s: str) -> tuple[str, int]:
    """``"SAMPLER=R"`` as ``(sampler, R)``."""
    name, _, n = s.partition("=")
    return name, int(n)


def headline(results: dict) -> dict | None:
    """The first sampler's pooled p-value of uniform ranks."""
    name, s = next((k, v) for k, v in results["summary"].items() if "p_pooled" in v)
    return make_headline(f"{name} SBC pooled p-value (> {ALPHA} passes)", s["p_pooled"], "p")


if __name__ == "__main__":
    ARGS = parse_args(None)  # before JAX loads: --help answers at once and writes nothing

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads

import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import scipy.stats  # noqa: E402

from bayes_attn import calibration, samplers  # noqa: E402


# ----------------------------------------------------------------------------
# figure
# ----------------------------------------------------------------------------
def _is_diag(label: str) -> bool:
    i, j = label[label.index("[") + 1 : -1].split(",")
    return i == j


GROUPS = {
    "U diagonal": lambda s: s.startswith("U[") and _is_diag(s),
    "U off-diagonal": lambda s: s.startswith("U[") and not _is_diag(s),
    "U_l, Ua": lambda s: s.startswith("U_") or s == "Ua",
    "f(x_test)": lambda s: s.startswith("f_test"),
    "f(x_train[0])": lambda s: s.startswith("f_train"),
}


def plot(results: dict[str, calibration.SBCResult], reports: dict[str, dict], path: Path, bins: int) -> None:
    """Rank histograms: one row per run, one column per group of observables (counts pooled within a group)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3.6 * len(GROUPS), 2.3 * len(results)), layout="constrained")
    axes = fig.subplots(len(results), len(GROUPS), squeeze=False)
    for row, (name, res) in zip(axes, results.items(), strict=True):
        b = res.ranks * bins // (res.num_draws + 1)
        for ax, (gname, sel) in zip(row, GROUPS.items(), strict=True):
            cols = [i for i, s in enumerate(res.labels) if sel(s)]
            counts = np.bincount(b[:, cols].ravel(), minlength=bins)
            n = b.shape[0] * len(cols)
            lo, hi = scipy.stats.binom.ppf([0.005, 0.995], n, 1 / bins)
            ax.axhspan(lo, hi, color="0.85", zorder=0, label="99% band per bin, uniform ranks")
            ax.axhline(n / bins, color="k", lw=1, zorder=1)
            color = "tab:red" if name.startswith("control") else "tab:blue"
            ax.bar(np.arange(bins), counts, color=color, width=0.9, zorder=2)
            ax.set_xticks(np.arange(bins))
            ax.set_title(f"{name}: {gname} ({len(cols)})", fontsize=8)
            ax.tick_params(labelsize=7)
        row[0].set_ylabel(f"count (R={res.n_reps})\np_pooled={reports[name]['p_pooled']:.2g}", fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel(f"rank bin (rank of truth among {res.num_draws} draws)", fontsize=8)
    axes[0, 0].legend(fontsize=6, loc="lower left")
    fig.suptitle("SBC rank histograms (pooled per group for display; tests are per observable). "
                 "Red: negative controls (likelihood at the wrong temperature), which must fail.", fontsize=9)
    fig.savefig(path, dpi=110)


# ----------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------
def summarise(a: argparse.Namespace, report: dict) -> dict:
    """Per sampler: its pooled p-value and whether it passed; its controls' p-values and whether they failed."""
    summary = {}
    for name in dict.fromkeys([*a.reps, *a.controls]):
        s = {}
        if name in a.reps:
            s |= {"n_reps": a.reps[name], "p_pooled": report[name]["p_pooled"],
                  "passed": report[name]["p_pooled"] > ALPHA}
        for tag in CONTROL_FACTORS:
            c = report.get(f"control: {name} at {tag}")
            if c is not None:
                s |= {"control_n_reps": a.controls[name], f"control_{tag}_p_pooled": c["p_pooled"],
                      f"control_{tag}_rejected": c["p_pooled"] < ALPHA}
        summary[name] = s
    print(f"\nsummary (p_pooled; controls must be < {ALPHA:g}):")
    for name, s in summary.items():
        ctl = "  ".join(f"{tag}: {s[f'control_{tag}_p_pooled']:.2g}" for tag in CONTROL_FACTORS
                        if f"control_{tag}_p_pooled" in s)
        verdict = "pass" if s.get("passed") else "FAIL"
        main_ = f"R={s['n_reps']:5d}  p={s['p_pooled']:.3g}  {verdict}" if "n_reps" in s else ""
        ctl = f"   controls (R={s['control_n_reps']}): {ctl}" if ctl else ""
        print(f"  {name:12s} {main_}{ctl}")
    return summary


def main(a: argparse.Namespace) -> dict:
    """Every run and control, the summary, the figure; the envelope."""
    for name in [*a.reps, *a.controls]:
        samplers.get(name)  # a clear error for an unknown sampler
    shape = dict(N0=4, T=3, P=8, P_test=2)
    net, x, xt = calibration.random_problem((2, 2), width=a.width, seed=a.seed, **shape)
    record = Record(a, problem=dict(heads=list(net.heads), width=a.width, temperature=a.temperature, **shape),
                    alpha=ALPHA)
    runs = {}
    for name in dict.fromkeys([*a.reps, *a.controls]):
        if name in a.reps:
            runs[name] = dict(sampler=name, n_reps=a.reps[name])
        if name in a.controls:
            for tag, factor in CONTROL_FACTORS.items():
                runs[f"control: {name} at {tag}"] = dict(sampler=name, n_reps=a.controls[name],
                                                         likelihood_temperature=factor * a.temperature)
    t_start = time.perf_counter()
    ranks, report = {}, {}
    for name, kw in runs.items():
        settings = samplers.SamplerSettings(name=kw.pop("sampler"), num_warmup=a.warmup,
                                            num_samples=a.draws * a.thinning, num_chains=1, thinning=a.thinning,
                                            seed=a.seed)
        res = calibration.sbc_ranks(net, x, xt, sampler=settings, temperature=a.temperature, **kw)
        u = calibration.uniformity(res, a.bins)
        ranks[name] = res
        report[name] = {**u, "config": res.config, "seconds": res.seconds,
                        "mean_leapfrog_steps": float(res.n_steps.mean()), "divergences": int(res.divergences.sum())}
        print(f"{name:32s} p_pooled={u['p_pooled']:.3g} (worst {u['worst']}, p={u['p_min']:.3g})  "
              f"{len(res.labels)} observables, R={res.n_reps}, {res.seconds:.1f} s, "
              f"{res.n_steps.mean():.1f} steps/iter, {int(res.divergences.sum())} divergences", flush=True)
    results = {"summary": summarise(a, report), "runs": report, "seconds_total": time.perf_counter() - t_start}
    figure = Path(a.out).with_suffix(".png")
    figure.parent.mkdir(parents=True, exist_ok=True)
    plot(ranks, report, figure, a.bins)
    record.write(results, headline=headline(results), files=[figure.name])
    print(f"wrote {figure} ({results['seconds_total']:.0f} s)")
    return results


if __name__ == "__main__":
    main(ARGS)
