"""Benchmark: one optimiser step of the one-shot transformer on this machine's CPU, the shipped CPU spec's model
(``models/omniglot_oneshot.toml``: 1 channel, width 128, d_qk 32) beside the paper-size model
(``models/omniglot_paper.toml``: 3 channels, width 512, d_qk 128), to check ``inference/fig3_gpu.sh``'s time
estimate against a measured step.

Each model trains on random episodes of its shapes (48 tokens, batch 128) through
:func:`bayes_attn.oneshot.train`, once for ``--short`` steps and once for ``--long`` steps, alternated
``--rounds`` times; the step time is the difference of the wall times over the difference of the steps
(compilation and set-up cancel; one untimed call first). Also written: the CPU time over the wall time (cores
used) and the load.

    .venv/bin/python benchmarks/bench_paper_step.py [--short 2] [--long 12] [--rounds 2] [--quick]

Output: ``benchmarks/results/paper_step.json`` (``--quick``: 1 and 2 steps, one round, a temporary folder).
"""

from __future__ import annotations

import argparse

from harness import REPO, Record, parse, parser
from harness import headline as make_headline

SPECS = {"cpu": REPO / "models/omniglot_oneshot.toml", "paper": REPO / "models/omniglot_paper.toml"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: 1 and 2 steps, one round)."""
    ap = parser("paper_step", __doc__, "1 and 2 steps, one round")
    ap.add_argument("--short", type=int, default=2)
    ap.add_argument("--long", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    a = parse(ap, argv)
    if a.quick:
        a.short, a.long, a.rounds = 1, 2, 1
    return a


def headline(results: dict) -> dict | None:
    """One optimiser step of the paper-size model on this CPU."""
    return make_headline("paper-size model, one optimiser step (CPU)", results["models"]["paper"]["seconds_per_step"],
                         "s")


if __name__ == "__main__":
    ARGS = parse_args()  # before JAX loads: --help answers at once and writes nothing

import dataclasses  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from bayes_attn.oneshot import (  # noqa: E402
    load_oneshot_spec,
    train,
)


def timed(spec, steps: int, rng: np.random.Generator) -> tuple[float, float]:
    """Wall seconds and cores used for ``steps`` optimiser steps of ``spec``'s model on random episodes."""
    cfg, batch = spec.model_config, spec.training.batch
    tokens = 3 * (spec.task.size // spec.task.patch) ** 2  # support, support, query images (48 at 32 / 8)
    x = rng.standard_normal((steps * batch, tokens, cfg.N0)).astype(np.float32)
    y = rng.choice([-1.0, 1.0], steps * batch).astype(np.float32)
    tc = dataclasses.replace(spec.training, epochs=1, patience=None)
    cpu0, t0 = os.times(), time.perf_counter()
    train(cfg, x, y, tc, progress_bar=False)
    wall, cpu1 = time.perf_counter() - t0, os.times()
    return wall, (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / wall


def main(a: argparse.Namespace) -> dict:
    """Each model's step time from the difference of a short and a long training; the envelope."""
    record = Record(a)
    rng = np.random.default_rng(0)
    results = {"models": {}}
    for label, path in SPECS.items():
        spec = load_oneshot_spec(path)
        timed(spec, a.short, rng)  # untimed: the first training in the process pays one-time costs
        rows = []
        for _ in range(a.rounds):
            (w_short, _), (w_long, cores) = timed(spec, a.short, rng), timed(spec, a.long, rng)
            rows.append({"short_seconds": w_short, "long_seconds": w_long, "cores_used_long": cores,
                         "seconds_per_step": (w_long - w_short) / (a.long - a.short)})
        per_step = float(np.median([r["seconds_per_step"] for r in rows]))
        print(f"{label:6s} ({spec.model.width} wide, d_qk {spec.model.d_qk}, {spec.task.channels} channel(s)): "
              f"{per_step:.3f} s per step, cores used {rows[-1]['cores_used_long']:.2f}, load {os.getloadavg()[0]:.2f}",
              flush=True)
        results["models"][label] = {"spec": path.name, "rounds": rows, "seconds_per_step": per_step,
                                    "load": os.getloadavg()}
    cpu, paper = (results["models"][k]["seconds_per_step"] for k in ("cpu", "paper"))
    results["ratio_paper_over_cpu"] = paper / cpu
    print(f"paper / cpu step time: {paper / cpu:.1f}", flush=True)
    record.write(results, headline=headline(results))
    return results


if __name__ == "__main__":
    main(ARGS)
