"""Benchmark: ``auto``'s ``laplace-is`` attempt deciding from its pilot (``laplace.PILOT_RULES_OUT``) against
drawing all its proposals first (what it did before), side by side (issue 52, docs/theory.md §9).

Problem: the landed Fig. 3 model (``inference/results/fig3``: 16 paths, P = 600, float32, the validation-chosen
temperature) at N = 10, where the expansion's proposal fails (``k̂`` 2.3–2.8) and ``auto`` goes on to ``wishart``,
and at N = 100, where it passes and the pilot must change nothing. Settings of the default spec: 4 chains ×
2500 guided draws (pilots of 1/8 of them). The expansion is solved once per width before the timings
(``laplace.GuideOnce``), so what is timed is the attempt itself: the pilots, then either the 10 000 proposals,
PSIS and the resampling (before) or, where the pilot's ``k̂`` exceeds 1, nothing more (now).

In one process, after one untimed call that compiles, the two variants alternate for ``--rounds`` rounds at
N = 10 and one at N = 100 (the order swapped every round). ``--busy`` repeats them at N = 10 beside one
CPU-bound process per core for ``--busy-rounds`` rounds (default 1: there, on 2 cores, the pilot alone took
66 s instead of 9). Printed
and written: wall time of each call, its ``k̂`` (the pilot's where it stopped), whether it stopped, the ratio of
mean wall times (before / now), the load average; at N = 100 the two variants' log weights are checked equal.

Run alone (~15 min on 2 quiet cores, ~30 more with ``--busy``)::

    .venv/bin/python benchmarks/bench_auto_pilot.py [--rounds 2] [--busy] [--busy-rounds 1] [--quick]

Output: ``benchmarks/results/auto_pilot.json`` (``--quick``: a tiny problem, one round, a temporary folder).
"""

from __future__ import annotations

import argparse

from harness import Record, parse, parser
from harness import headline as make_headline


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: a tiny problem, one round)."""
    ap = parser("auto_pilot", __doc__, "a tiny random problem, 200 guided draws, one round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--busy", action="store_true", help="also measure beside one CPU-bound process per core")
    ap.add_argument("--busy-rounds", type=int, default=1, help="rounds beside the busy cores (default 1: the "
                    "attempt drawing every proposal takes ~25 min there)")
    return parse(ap, argv)


def headline(results: dict) -> dict | None:
    """Mean wall time of the attempt drawing every proposal over the one deciding from its pilot (quiet)."""
    label = next(k for k in results if not k.endswith(" busy"))
    return make_headline(f"auto's laplace-is attempt, all proposals / pilot rule, {label}", results[label]["ratio"],
                         "x")


if __name__ == "__main__":
    ARGS = parse_args()  # before JAX loads: --help answers at once and writes nothing

import contextlib  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from harness import alternated, busy_cores  # noqa: E402

from bayes_attn.samplers import SamplerSettings, laplace, prepare  # noqa: E402

VARIANTS = {"old": None, "new": laplace.PilotRule(laplace.PILOT_RULES_OUT)}
"""``rule_out`` of each variant: ``old`` draws every proposal (before), ``new`` stops after a ruling pilot."""


def attempt(inputs, cfg: SamplerSettings, guide_of, rule_out: laplace.PilotRule | None, seed: int) -> dict:
    """One ``laplace-is`` attempt as ``auto`` makes it: wall time, ``k̂``, whether the pilot stopped it."""
    t0 = time.perf_counter()
    try:
        out = laplace.importance(inputs, cfg, jax.random.key(seed), guide_of=guide_of, rule_out=rule_out)
        jax.block_until_ready(out.draws)
        khat, stopped, log_w = float(out.attrs["pareto_k"]), False, np.asarray(out.stats["log_weight"])
    except laplace.RuledOut as err:
        khat, stopped, log_w = err.pareto_k, True, None
    return {"wall_seconds": time.perf_counter() - t0, "pareto_k": khat, "stopped": stopped, "log_w": log_w}


def problems(quick: bool) -> dict:
    """``{label: (net, x, y, temperature, dtype)}``."""
    if quick:
        from bayes_attn import calibration

        net, x, _ = calibration.random_problem((2, 2), width=3, N0=4, T=3, P=20, P_test=2, seed=0)
        return {"tiny": (net, x, np.random.default_rng(1).normal(size=20), 0.1, "float32")}
    from bench_guided import landed_fig3

    net, tr, _, chosen = landed_fig3()
    return {f"fig3 N={N}": (net.with_width(N), tr.x, tr.y, float(chosen[N]), "float32") for N in (10, 100)}


def measure(label: str, problem, cfg: SamplerSettings, rounds: int, busy: bool) -> dict:
    """The two variants alternated for ``rounds`` rounds on one problem (the expansion solved once before)."""
    net, x, y, T, dtype = problem
    inputs = prepare(net, x, y, None, T, dtype)
    guide_of = laplace.GuideOnce()
    t0 = time.perf_counter()
    jax.block_until_ready(guide_of(inputs).chol)
    solve = time.perf_counter() - t0
    attempt(inputs, cfg, guide_of, None, seed=99)  # compiles the pilots', proposals' and resampling's programs
    calls = []
    with busy_cores() if busy else contextlib.nullcontext():
        for r, variant in alternated(rounds, VARIANTS):
            c = attempt(inputs, cfg, guide_of, VARIANTS[variant], seed=r) | {"variant": variant, "round": r,
                                                                             "load": os.getloadavg()[0]}
            print(f"{label}{' busy' if busy else ''}: {variant} {c['wall_seconds']:7.1f} s  k-hat {c['pareto_k']:.2f}"
                  f"{'  (pilot: stopped)' if c['stopped'] else ''}  load {c['load']:.1f}", flush=True)
            calls.append(c)
    same = [np.array_equal(a["log_w"], b["log_w"]) for a in calls for b in calls
            if a["round"] == b["round"] and (a["variant"], b["variant"]) == ("old", "new") and a["log_w"] is not None
            and b["log_w"] is not None]
    mean = {v: float(np.mean([c["wall_seconds"] for c in calls if c["variant"] == v])) for v in VARIANTS}
    ratio = mean["old"] / mean["new"]
    print(f"{label}{' busy' if busy else ''}: before / now {ratio:.2f} ({mean['old']:.1f} / {mean['new']:.1f} s); "
          f"expansion solve {solve:.1f} s; draws equal where not stopped: {same}", flush=True)
    return {"calls": [{k: v for k, v in c.items() if k != "log_w"} for c in calls], "mean_wall": mean,
            "ratio": ratio, "solve_seconds": solve, "equal_log_weights": same, "busy": busy}


def main(a: argparse.Namespace) -> dict:
    """Each problem quiet (and busy with ``--busy``); the envelope rewritten after each measurement."""
    cfg = SamplerSettings(num_chains=4, guided_samples=200 if a.quick else 2500, dtype="float32")
    record = Record(a, chains=cfg.num_chains, guided_draws=cfg.guided_draws, pilot_fraction=laplace.PILOT_FRACTION,
                    rules_out=laplace.PILOT_RULES_OUT)
    results = {}
    for label, problem in problems(a.quick).items():
        stops = "N=100" not in label  # at N = 100 nothing is saved: one round checks that nothing changes
        for busy in (False, True) if a.busy and stops else (False,):
            rounds = 1 if a.quick or not stops else a.busy_rounds if busy else a.rounds
            results[label + (" busy" if busy else "")] = measure(label, problem, cfg, rounds, busy)
            record.write(results, headline=headline(results))  # after each measurement: a long run keeps its parts
    return results


if __name__ == "__main__":
    main(ARGS)
