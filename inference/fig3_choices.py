"""Fig. 3's training choices compared on the validation alphabet only (never on test).

Every variant starts from ``models/omniglot_oneshot_plain.toml`` (the spec shipped before this choice), changes the
fields listed in :data:`VARIANTS`, and trains the gradient-descent transformer with early stopping on the validation
episodes (``training.patience``; ``training.epochs`` is then the most). Nothing here evaluates anything on the test
episodes. The patience (default 16 epochs of 100 steps) outlasts the loss plateau at the start of training (~11 epochs
at lr 2e-3, ``plateau.json``), during which the validation accuracy wanders around 0.5: a shorter one can stop there.
Per variant, into ``OUT/choices.json`` (and a table on stdout):

- the best validation accuracy with its binomial error, the epoch kept, the epochs run;
- the mean validation accuracy over the ``patience`` epochs after the best one (the best of many noisy epochs
  is biased upwards; this is not);
- wall time, seconds per optimiser step, and the CPU time over the wall time (how many cores training used);
- the load average before and after.

Variants already in ``OUT/choices.json`` with the same training settings are read, not trained again.
The default spec trains as the variant this record chooses: of the 2 x 4 variants whose best validation
accuracy is within one binomial standard error of the highest, the one with the fewest changes
(``tests/oneshot/test_oneshot.py`` holds the rule).

    python inference/fig3_choices.py [--variants shipped rotations ...] [--out inference/results/fig3]
                                     [--patience 16] [--epochs 160]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import tomllib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "models/omniglot_oneshot_plain.toml"
VARIANTS = {
    "shipped": {},
    "rotations": {"task.rotations": True},
    "rotations+shift": {"task.rotations": True, "task.shift": 2},
    "rotations+shift+wide": {"task.rotations": True, "task.shift": 2, "model.width": 256, "model.d_qk": 64},
    # from 2e-3 (which leaves the initial loss plateau) down to the authors' 3e-4 in two drops on validation plateaus
    "rotations+lr-drop": {"task.rotations": True, "training.lr_factor": 0.4, "training.lr_patience": 4,
                          "training.lr_min": 3e-4},
    # the authors' three (repeated grey) channels: N0 = 192, so position and label codes overlap the pixels less
    "rotations+3ch": {"task.rotations": True, "task.channels": 3},
    # and their mirror images: every character in the 8 symmetries of the square (1432 classes)
    "rotations+mirrors": {"task.rotations": True, "task.mirrors": True},
    # both classes of a training episode from one alphabet, as in every validation episode (Tagalog alone)
    "rotations+within-alphabet": {"task.rotations": True, "task.within_alphabet": True},
    # 2 x 8 heads: not a candidate for the default spec (the paper's Fig. 3 is 2 x 4), the 2x8 spec's question
    "rotations+2x8": {"task.rotations": True, "model.heads": [8, 8]},
}
"""Changes to the plain spec, by field (``section.name``)."""


def variant_spec(changes: dict, patience: int, epochs: int):
    """The plain spec with ``changes``, early stopping after ``patience`` epochs, at most ``epochs``."""
    from bayes_attn.oneshot import OneShotSpec, load_oneshot_spec  # here: --help imports nothing heavy

    table = tomllib.loads(load_oneshot_spec(SPEC).to_toml())
    for key, value in {**changes, "training.patience": patience, "training.epochs": epochs}.items():
        section, name = key.split(".")
        table[section][name] = value
    return OneShotSpec.from_dict(table)


def train_on_validation(spec) -> dict:
    """Train ``spec``'s model with early stopping on its validation episodes; the numbers of the module doc."""
    from bayes_attn import oneshot

    sets = oneshot.datasets(spec)
    val = oneshot.evaluation_episodes(spec, sets).validation  # its test episodes are built, never evaluated
    load0, cpu0, t0 = os.getloadavg(), os.times(), time.perf_counter()
    _, hist = oneshot.train(spec.model_config, None, None, spec.training, x_val=val.x, y_val=val.y,
                             augment=lambda epoch, rng: oneshot.gd_episodes(spec, sets, epoch)[1:])
    wall, cpu1 = time.perf_counter() - t0, os.times()
    steps = len(hist.loss) * -(-spec.task.n_gd_train // spec.training.batch)
    k, p = hist.kept_epoch, spec.training.patience
    return {
        "training_hash": spec.training_hash(),
        "best_validation": hist.val_accuracy[k], "best_validation_se": hist.val_se[k],
        "after_best_mean": float(np.mean(hist.val_accuracy[k + 1 : k + 1 + p])) if k + 1 < len(hist.loss) else None,
        "kept_epoch": k + 1, "epochs_run": len(hist.loss), "n_validation": int(len(val.y)),
        "wall_seconds": wall, "seconds_per_step": wall / steps,
        "cores_used": (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / wall,
        "load_before": load0, "load_after": os.getloadavg(), "history": hist.to_dict(),
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--out", type=Path, default=ROOT / "inference/results/fig3")
    ap.add_argument("--patience", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=160)
    args = ap.parse_args(argv)
    from bayes_attn._internal import outputs
    from bayes_attn.cli import configure_logging

    configure_logging(1)
    path = args.out / "choices.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    for name in args.variants:
        spec = variant_spec(VARIANTS[name], args.patience, args.epochs)
        if results.get(name, {}).get("training_hash") != spec.training_hash():
            results[name] = {"changes": VARIANTS[name], **train_on_validation(spec)}
            outputs.write_json(path, results)
    print("| variant | best validation ± se | mean of the next epochs | kept / run | s per step | cores |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        after = "n/a" if r["after_best_mean"] is None else f"{r['after_best_mean']:.3f}"
        print(f"| {name} | {r['best_validation']:.3f} ± {r['best_validation_se']:.3f} | {after} "
              f"| {r['kept_epoch']} / {r['epochs_run']} | {r['seconds_per_step']:.3f} | {r['cores_used']:.2f} |")
    return results


if __name__ == "__main__":
    main()
