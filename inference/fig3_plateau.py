"""Does the loss plateau at chance of the Fig. 3 training come from the query/key initialisation?

Short runs of the CPU model of ``models/omniglot_oneshot_plain.toml`` (Adam with L2
5e-5, batch 128, no augmentation, fresh episodes of the training classes every
100 steps) at a given query/key scale and learning rate; prints the mean
training loss and the validation accuracy (Tagalog, 1000 episodes) every 100
steps as one JSON line. The measured runs are in
``inference/results/fig3/plateau.json``.

    python inference/fig3_plateau.py QK_SCALE [EPOCHS_OF_100_STEPS] [LR]
"""

import argparse
import dataclasses
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("qk_scale", type=float, help="scale of the query/key initialisation")
    p.add_argument("epochs", type=int, nargs="?", default=6, help="epochs of 100 steps (default 6)")
    p.add_argument("lr", type=float, nargs="?", default=3e-4, help="Adam's learning rate (default 3e-4)")
    a = p.parse_args()
    qk, epochs, lr = a.qk_scale, a.epochs, a.lr
    from bayes_attn import oneshot as pl  # after parsing: --help imports nothing heavy
    from bayes_attn.oneshot import load_oneshot_spec, train

    base = load_oneshot_spec(ROOT / "models/omniglot_oneshot_plain.toml")
    spec = dataclasses.replace(
        base,
        task=dataclasses.replace(base.task, n_gd_train=128 * 100),
        model=dataclasses.replace(base.model, qk_scale=qk),
        training=dataclasses.replace(base.training, lr=lr, epochs=epochs),
    )
    sets = pl.datasets(spec)
    val = pl.evaluation_episodes(spec, sets).validation
    t0 = time.time()
    _, hist = train(spec.model_config, None, None, spec.training, x_val=val.x, y_val=val.y,
                    augment=lambda e, rng: pl.gd_episodes(spec, sets, e)[1:])
    print(json.dumps({"qk_scale": qk, "lr": lr, "batch": spec.training.batch, "steps_per_epoch": 100,
                      "loss": hist.loss, "val_accuracy": hist.val_accuracy, "seconds": time.time() - t0}))


if __name__ == "__main__":
    main()
