"""Paper Fig. 3 with its uncertainty: two head counts, several gradient-descent seeds.

For every variant (``2x4``: ``models/omniglot_oneshot_plain.toml``, the 2 x 4 spec as first shipped; ``2x8``:
``models/omniglot_oneshot_2x8.toml``, the same with 2 x 8 heads; ``rotations``: ``models/omniglot_oneshot.toml``,
the default spec: the 2 x 4 spec with what the validation alphabet chose, rotations as new classes and early
stopping) and every training seed, runs
``bayes_attn.oneshot.run_oneshot`` (train, theory scan on the frozen attention,
sampling, head scores, pruning, the spread of ρ over draws of the theory's
episodes × class bootstraps of the test episodes) into its own folder —
``OUT`` for 2x4 seed 0 and ``OUT/rotations`` for rotations seed 0 (the default spec's run the README quotes),
``OUT/<variant>/seed<k>`` otherwise — and pools the results into ``OUT/summary.json`` and
``OUT/summary.md``: per run the model, theory and GP test accuracy and ρ's
median and 90 % interval; per variant ρ pooled over seeds (every value of
every run's ``spearman_draws``). Runs already finished (their
``pruning.json`` made with the same training settings) are only read, so the
script can be stopped and resumed.

    python inference/fig3.py [--variants 2x4 2x8 rotations] [--seeds 0 1 2] [--out inference/results/fig3]
                             [--data-dir DIR] [--summary-only] [--rerun]

``--rerun`` runs finished runs again with the present code, their trained models reused (the model of a
folder is reused whenever its training settings match the spec's).

Cost on the shared 2-core CPU: a rotations run (the default spec) ~30 min at load ~2 (training 18 min,
sampling 9-12); a plain 2x4 run ~60 min at load 6-14 (training ~45 min of it); a 2x8 run (no sampling)
40 min at load ~1.5 (training 25 min).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the package is imported where it is used: --help imports nothing heavy
    from bayes_attn.oneshot import PruneResult

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"2x4": ROOT / "models/omniglot_oneshot_plain.toml", "2x8": ROOT / "models/omniglot_oneshot_2x8.toml",
            "rotations": ROOT / "models/omniglot_oneshot.toml"}
SEED0_FOLDERS = {"2x4": "", "rotations": "rotations"}
"""Where the seed-0 runs the README quotes live, relative to ``OUT`` (other runs: ``OUT/<variant>/seed<k>``)."""
PAPER_BASE_ACCURACY = 0.838


def run_folder(out: Path, variant: str, seed: int) -> Path:
    """``OUT`` for the 2x4 seed-0 run, ``OUT/rotations`` for the rotations seed-0 run, else
    ``OUT/<variant>/seed<seed>``."""
    if seed == 0 and variant in SEED0_FOLDERS:
        return out / SEED0_FOLDERS[variant]
    return out / variant / f"seed{seed}"


def finished(folder: Path, spec) -> PruneResult | None:
    """The run's ``pruning.json`` when it exists, is complete and its model has the spec's training settings."""
    from bayes_attn.oneshot import load_pruning

    try:
        result = load_pruning(folder / "pruning.json")
        meta = json.loads((folder / "model.json").read_text())
    except (OSError, ValueError, KeyError):  # KeyError: a file of an older version, without the spread of ρ
        return None
    return result if meta.get("training_hash") == spec.training_hash() else None


def summarise(runs: dict[str, dict[int, PruneResult]]) -> dict:
    """Per run and pooled over seeds: accuracies and the spread of ρ."""
    from bayes_attn.oneshot import PAPER_SPEARMAN_RHO

    out = {"paper": {"base_accuracy": PAPER_BASE_ACCURACY, "spearman_rho": PAPER_SPEARMAN_RHO}, "variants": {}}
    for variant, by_seed in runs.items():
        rows = {}
        for seed, r in sorted(by_seed.items()):
            s = r.spread
            rows[str(seed)] = {"base_accuracy": s.base.accuracy, "base_se": s.base.se,
                               "theory_accuracy": s.theory.accuracy, "theory_se": s.theory.se,
                               "gp_accuracy": s.gp.accuracy, "gp_se": s.gp.se, "spearman_median": s.rho.median,
                               "spearman_q05": s.rho.q05, "spearman_q95": s.rho.q95,
                               "rho_point": r.pruning.spearman.rho,
                               "scores": {name: [x.median, x.q05, x.q95] for name, x in _predictors(r).items()},
                               "comparisons": {str(N): c.summary() for N, c in sorted(r.comparisons.items())}}
        spreads = [_predictors(r) for r in by_seed.values()]
        pooled = {name: np.concatenate([p[name].draws for p in spreads])
                  for name in PREDICTORS if spreads and all(name in p for p in spreads)}
        scores = {name: [float(q) for q in np.quantile(v, [0.5, 0.05, 0.95])] for name, v in pooled.items()}
        entry = {"runs": rows, "seeds": sorted(by_seed)}
        if "leading" in pooled and pooled["leading"].size:
            med, q05, q95 = scores["leading"]
            entry |= {"pooled_spearman_median": med, "pooled_spearman_q05": q05, "pooled_spearman_q95": q95,
                      "pooled_n": int(pooled["leading"].size)}
        entry["pooled_scores"] = scores
        out["variants"][variant] = entry
    return out


PREDICTORS = ("leading", "corrected", "posterior", "ablation")
"""The predictors of the single-head drops whose ρ ``summary.md`` puts side by side."""


def _predictors(r: PruneResult) -> dict:
    """``{name: SpearmanSpread}`` of the :data:`PREDICTORS` the run has (runs written before some have fewer)."""
    o = r.spread.others
    spreads = dict(zip(PREDICTORS, (r.spread.rho, o.corrected, o.posterior, o.ablation), strict=True))
    return {name: x for name, x in spreads.items() if x is not None}


def markdown(summary: dict) -> str:
    """``summary.md``: one table row per run and per pooled variant."""
    lines = ["# Fig. 3: accuracies and the head score–drop ρ over variants and training seeds", "",
             "Test episodes: Balinese + Early_Aramaic (classes no model saw); ± class-bootstrap standard error. "
             "ρ: median [5 %, 95 %] over draws of the theory's training episodes × class bootstraps of the test "
             "episodes (pooled rows: over every seed's values too).", "",
             "| variant | seed | GD model | theory (N = 10) | GP limit | ρ point | ρ median [5 %, 95 %] |",
             "|---|---|---|---|---|---|---|"]
    for variant, v in summary["variants"].items():
        for seed, r in v["runs"].items():
            lines.append(f"| {variant} | {seed} | {r['base_accuracy']:.3f} ± {r['base_se']:.3f} "
                         f"| {r['theory_accuracy']:.3f} ± {r['theory_se']:.3f} "
                         f"| {r['gp_accuracy']:.3f} ± {r['gp_se']:.3f} | {r['rho_point']:.2f} "
                         f"| {r['spearman_median']:.2f} [{r['spearman_q05']:.2f}, {r['spearman_q95']:.2f}] |")
        if "pooled_n" in v:
            lines.append(f"| {variant} | pooled ({len(v['seeds'])}) | | | | | {v['pooled_spearman_median']:.2f} "
                         f"[{v['pooled_spearman_q05']:.2f}, {v['pooled_spearman_q95']:.2f}] |")
    p = summary["paper"]
    lines += [f"| paper (2x4) | | {p['base_accuracy']:.3f} | | | {p['spearman_rho']:.2f} | |", ""]
    lines += ["Which predicts the model's single-head drops: ρ median [5 %, 95 %] of each score with the drops, "
              "over the same draws × bootstraps (leading: the §4 theory's `U`, as above; corrected: the §8 "
              "theory's; posterior: the exact posterior's mean `U`; ablation: the theory's own drops, a head's "
              f"paths taken out of `U`); paper {p['spearman_rho']:.2f}.", "",
              "| variant | seed | leading | corrected | posterior | ablation |", "|---|---|---|---|---|---|"]
    def cells(scores: dict) -> str:
        return " | ".join(f"{scores[k][0]:.2f} [{scores[k][1]:.2f}, {scores[k][2]:.2f}]" if k in scores else ""
                          for k in PREDICTORS)

    for variant, v in summary["variants"].items():
        lines += [f"| {variant} | {seed} | {cells(r.get('scores', {}))} |" for seed, r in v["runs"].items()]
        if v.get("pooled_scores"):
            lines.append(f"| {variant} | pooled ({len(v['seeds'])}) | {cells(v['pooled_scores'])} |")
    lines += ["", "The theory against the exact posterior at each sampled width (`bayes_attn.compare`):", ""]
    lines += [f"- {variant} seed {seed}, N = {N}: {line}" for variant, v in summary["variants"].items()
              for seed, r in v["runs"].items() for N, line in r.get("comparisons", {}).items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--out", type=Path, default=ROOT / "inference/results/fig3")
    p.add_argument("--data-dir", default=None, help="folder of the Omniglot zip files (default: the spec's)")
    p.add_argument("--summary-only", action="store_true", help="only pool the runs already finished")
    p.add_argument("--rerun", action="store_true",
                   help="run the finished runs again (theory, sampling, scores, pruning), reusing their trained models")
    a = p.parse_args()
    from bayes_attn.cli import configure_logging
    from bayes_attn.oneshot import load_oneshot_spec, run_oneshot

    configure_logging(logging.INFO)  # progress of every stage on stderr
    runs: dict[str, dict[int, PruneResult]] = {}
    for variant in a.variants:
        base = load_oneshot_spec(VARIANTS[variant])
        runs[variant] = {}
        for seed in a.seeds:
            spec = dataclasses.replace(base, training=dataclasses.replace(base.training, seed=seed))
            folder = run_folder(a.out, variant, seed)
            result = None if a.rerun and not a.summary_only else finished(folder, spec)
            if result is None and not a.summary_only:
                result = run_oneshot(spec, folder, data_dir=a.data_dir)
            if result is not None:
                runs[variant][seed] = result
    summary = summarise(runs)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (a.out / "summary.md").write_text(markdown(summary))
    print(markdown(summary))


if __name__ == "__main__":
    main()
