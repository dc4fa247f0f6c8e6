"""Paper Fig. 3 end to end: one-shot Omniglot, trained transformer, theory, head scores, pruning.

Trains the gradient-descent model of ``models/omniglot_oneshot.toml`` (or reuses
``OUT/model.npz`` when made with the same settings), scans the theory on the
frozen attention over widths × temperatures (temperature chosen on validation
episodes of a fourth alphabet), samples at N = 10 and 100, reads head scores
off the theory's U at N = 10, T = 0.5, prunes heads of the trained model, and
writes pruning.json, oneshot.nc, report.md and the figures into OUT.

    python inference/fig3.py [--spec models/omniglot_oneshot.toml] [--out inference/results/fig3]
                             [--data-dir ../shared/data/omniglot] [--retrain]
"""

import argparse
import json

from bayes_attn.oneshot.pipeline import load_oneshot_spec, prune


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default="models/omniglot_oneshot.toml")
    p.add_argument("--out", default="inference/results/fig3")
    p.add_argument("--data-dir", default=None, help="folder of the Omniglot zip files (default: the spec's)")
    p.add_argument("--retrain", action="store_true", help="train even if OUT/model.npz has the same settings")
    a = p.parse_args()
    report = prune(load_oneshot_spec(a.spec), a.out, data_dir=a.data_dir, retrain=a.retrain)
    print(json.dumps({k: report[k] for k in ("base_accuracy", "head_scores", "accuracy_drops", "spearman")}, indent=1))


if __name__ == "__main__":
    main()
