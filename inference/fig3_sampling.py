"""Converged posterior sampling at the image task's scale (Fig. 3 network, 16 paths, P = 600).

``bayes-attn prune`` samples briefly (the spec's 4 chains × (150 + 250) draws, at
most 7 leapfrog steps per draw), enough to compare accuracies but not to meet the
diagnostic targets R-hat ≤ 1.01 and bulk ESS ≥ 400 on ``U``. This script samples
the frozen network of a finished run again with longer chains (and, if asked,
deeper trees), at the temperature its scan chose on validation episodes
(``pruning.json``; never the test episodes), as one experiment point each
(:func:`bayes_attn.oneshot.sample_at_widths`, which also compares the
theory with the samples as ``prune`` does), and puts the sampled test accuracy
beside the theory's at the same width and temperature.

Reads ``RUN/model.npz`` (made with the spec's training settings; never retrains)
and ``RUN/pruning.json``; writes one ``RUN/sampling/N<width>.nc`` per width
(as ``oneshot.nc``'s sampling variables, plus ``accuracy_theory``) and
``RUN/sampling/summary.md`` over every file there.

    python inference/fig3_sampling.py [--run inference/results/fig3] [--spec models/omniglot_oneshot_plain.toml]
        [--widths 100] [--warmup 300] [--samples 750] [--chains 4] [--max-tree-depth 3] [--sampler NAME]
        [--data-dir DIR]

Cost on the 2-core CPU: ~20 ms per gradient (float32), i.e. about
chains × (warmup + samples) × leapfrog steps × 20 ms.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path

import xarray as xr

from bayes_attn.diagnostics import MAX_RHAT
from bayes_attn.samplers import SAMPLER_NAMES

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"max_r_hat": MAX_RHAT, "min_ess_bulk": 400}  # the targets on U


def summary_markdown(folder: Path) -> str:
    """One row per ``N<width>.nc`` in ``folder``."""
    lines = ["# Converged sampling at the image task's scale", "",
             f"Targets on `U`: max R-hat ≤ {TARGETS['max_r_hat']}, min bulk ESS ≥ {TARGETS['min_ess_bulk']}. "
             "Test accuracy ± binomial standard error; agreement: fraction of test signs equal to the theory's.", "",
             "| N | T | chains × (warm-up + draws), max tree depth | max R-hat(U) | min bulk ESS(U) | divergences "
             "| leapfrog steps/draw | test accuracy sampled | theory | agreement | seconds | targets met |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for path in sorted(folder.glob("N*.nc"), key=lambda p: int(p.stem[1:])):
        ds = xr.load_dataset(path).isel(sample_width=0)
        a = ds.attrs
        met = float(ds["rhat_U"]) <= TARGETS["max_r_hat"] and float(ds["ess_U"]) >= TARGETS["min_ess_bulk"]
        lines.append(
            f"| {int(ds['sample_width'])} | {float(ds['temperature_sampled']):g} | {a['num_chains']} × "
            f"({a['num_warmup']} + {a['num_samples']}), {a['max_tree_depth']} | {float(ds['rhat_U']):.3f} "
            f"| {float(ds['ess_U']):.0f} | {int(ds['divergences'])} | {float(ds['mean_steps']):.1f} "
            f"| {float(ds['accuracy_sampled']):.3f} ± {float(ds['accuracy_sampled_se']):.3f} "
            f"| {float(ds['accuracy_theory']):.3f} ± {float(ds['accuracy_theory_se']):.3f} "
            f"| {float(ds['agreement']):.3f} | {float(ds['sampling_seconds']):.0f} | {'yes' if met else 'no'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, default=ROOT / "inference/results/fig3", help="a finished prune folder")
    p.add_argument("--spec", type=Path, default=ROOT / "models/omniglot_oneshot_plain.toml")
    p.add_argument("--widths", type=int, nargs="+", default=[100])
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--samples", type=int, default=750)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--max-tree-depth", type=int, default=3)
    p.add_argument("--sampler", choices=SAMPLER_NAMES, default=None,
                   help="the sampler (default: the spec's)")
    p.add_argument("--data-dir", default=None, help="folder of the Omniglot zip files (default: the spec's)")
    a = p.parse_args()
    from bayes_attn import stats  # after parsing: --help imports little
    from bayes_attn.cli import configure_logging
    from bayes_attn.oneshot import (
        datasets,
        evaluation_episodes,
        load_oneshot_spec,
        load_pruning,
        sample_at_widths,
        to_network,
        train_model,
    )
    from bayes_attn.theory import solve_theory

    configure_logging(logging.INFO)
    spec = load_oneshot_spec(a.spec)
    meta = json.loads((a.run / "model.json").read_text())
    if meta.get("training_hash") != spec.training_hash():
        raise SystemExit(f"{a.run}/model.npz was not trained with the settings of {a.spec}; run bayes-attn prune first")
    chosen = load_pruning(a.run).temperatures.finite_width
    missing = [N for N in a.widths if N not in chosen]
    if missing:
        raise SystemExit(f"--widths {missing}: no temperature chosen at these widths in {a.run}/pruning.json "
                         f"(scanned: {sorted(chosen)})")
    sampler = spec.sampler.replace(num_warmup=a.warmup, num_samples=a.samples, num_chains=a.chains,
                                   max_tree_depth=a.max_tree_depth, name=a.sampler or spec.sampler.name)
    sets = datasets(spec, a.data_dir)
    ev = evaluation_episodes(spec, sets)
    model = train_model(spec, a.run, sets=sets, evaluation=ev)
    th = spec.theory
    net, _ = to_network(model.params, model.config, width=th.score_width, variances=th.variances)
    tr, te = ev.theory_train, ev.test
    out = a.run / "sampling"
    out.mkdir(exist_ok=True)
    for N in a.widths:
        T = chosen[N]
        theory = solve_theory(net.with_width(N), tr.x, tr.y, temperature=T)
        one = dataclasses.replace(spec, sampler=sampler)
        ds = sample_at_widths(one, net, tr.x, tr.y, te.x, te.y, {N: theory}).dataset
        acc, se = stats.accuracy_se(theory.predict(te.x)[0], te.y)
        ds = ds.assign(accuracy_theory=("sample_width", [acc]), accuracy_theory_se=("sample_width", [se]))
        ds.attrs |= {"max_tree_depth": a.max_tree_depth, "dtype": sampler.dtype, "run": str(a.run.name),
                     "targets": json.dumps(TARGETS)}
        ds.to_netcdf(out / f"N{N}.nc")
        (out / "summary.md").write_text(summary_markdown(out))
    print((out / "summary.md").read_text())


if __name__ == "__main__":
    main()
