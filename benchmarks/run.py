"""The sampling benchmarks' one runner: a set of ``benchmarks/cases.toml`` (problems × widths × samplers × levers),
each case one experiment point (:class:`bayes_attn.experiment.Point`, :func:`bayes_attn.experiment.evaluate`).

Per case: the theory solved once per problem and width (the problem's ``correction``), then ``calls`` evaluations in
one process (the second with the next seed, after compilation), or each case in a fresh process with the
compilation cache off (``fresh``: a cold start, as a user's first run). Measured per call: the sampling stage's
wall time (compilation included on a process's first call) and the diagnostics it returns (``Posterior.summary``),
the smallest bulk ESS over the entries of ``U`` and over every observable, ESS/s of ``U``, max R-hat, draws per
chain and the stopping record (blocks, targets met), the sampler's own diagnostics (k̂, IS ESS, acceptance), the
verdict with its reasons, the load average before and after. Printed and stored: ESS/s of ``U`` over the set's
``baseline`` label, per problem, width and call.

Sets (``--list`` shows them with their cases): ``image_n10`` (exact sampling at the image scale's N = 10, every
lever; ~5 min per run and lever on 2 cores), ``guided`` (the guided samplers against NUTS on Fig. 2c; ~25 min).

Run::

    .venv/bin/python benchmarks/run.py SET [--only LABEL ...] [--levers LEVER ...] [--quick] [--out FILE]

Output: a printed line per call and ``benchmarks/results/SET.json`` (``--quick``: the set's ``quick`` cases on a
tiny random problem, to a temporary folder, numbers meaningless).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from harness import Record, parse, parser, trained_image
from harness import headline as make_headline

ROOT = Path(__file__).resolve().parents[1]
CASES = Path(__file__).with_name("cases.toml")


def load_cases(path: Path = CASES) -> dict:
    """``cases.toml`` as a dict (``problems``, ``levers``, ``sets``), every set's names checked."""
    return check_cases(tomllib.loads(path.read_text()))


def check_cases(cases: dict) -> dict:
    """``cases``, or a ``ValueError`` naming the set and the problem or lever it names that is not there."""
    for name, s in cases["sets"].items():
        if s["problem"] not in cases["problems"]:
            raise ValueError(f"set {name}: problem {s['problem']!r} is not one of {list(cases['problems'])}")
        for lever in s["levers"] + s.get("quick", {}).get("levers", []):
            if lever not in cases["levers"]:
                raise ValueError(f"set {name}: lever {lever!r} is not one of {list(cases['levers'])}")
    return cases


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``SET`` (a set of cases.toml) and its options; the result file is named after the set."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("set", nargs="?")
    name = pre.parse_known_args(argv)[0].set or "run"
    ap = parser(name, __doc__, "the set's quick cases on a tiny random problem")
    sets = list(load_cases()["sets"])
    ap.add_argument("set", choices=sets, help="the set of benchmarks/cases.toml to run")
    ap.add_argument("--only", nargs="+", metavar="LABEL", help="only these samplers' labels")
    ap.add_argument("--levers", nargs="+", metavar="LEVER", help="only these levers")
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # one case (JSON) in this process
    return parse(ap, argv)


def cases_of(cases: dict, set_name: str, quick: bool, only=None, levers=None) -> list[dict]:
    """The set's cases: ``{set, problem, place (run or width), label, sampler, lever, settings}``, in order."""
    s = cases["sets"][set_name]
    q = s.get("quick", {}) if quick else {}
    problem = "tiny" if quick else s["problem"]
    places = ["tiny"] if quick and "runs" in s else q.get("widths", s.get("runs", s.get("widths")))
    chosen = [r for r in s["samplers"] if (r[0] in q["samplers"] if "samplers" in q else True)]
    out = []
    for place in places:
        for label, sampler, own in chosen:
            if only and label not in only or place not in s.get("only_widths", {}).get(label, [place]):
                continue
            for lever in q.get("levers", s["levers"]):
                if levers and lever not in levers:
                    continue
                settings = {**s.get("settings", {}), **own, **cases["levers"][lever]}
                out.append({"set": set_name, "problem": problem, "place": place, "label": label,
                            "sampler": sampler, "lever": lever, "settings": settings})
    return out


def data(case: dict, problems: dict):
    """``(net, x, y, x_test, y_test, temperature)`` of a case's problem at its place."""
    p = problems[case["problem"]]
    if p["task"] == "tiny":
        import numpy as np

        from bayes_attn import calibration

        net, x, xt = calibration.random_problem((2, 2), width=3, N0=4, T=3, P=20, P_test=4, seed=0)
        y = np.sign(np.random.default_rng(1).normal(size=20))
        return net, x, y, xt, np.array([1.0, -1.0, 1.0, -1.0]), p["temperature"]
    if p["task"] == "fig2c":
        from bayes_attn import markov

        task, net = markov.fig2c(int(case["place"]), n_test=p["n_test"])
        x, y, xt, yt = task.generate()
        return net, x, y, xt, yt, p["temperature"]
    from bayes_attn.oneshot import load_pruning

    folder = ROOT / "inference/results/fig3" / case["place"]
    T = float(load_pruning(folder).temperatures.finite_width[10])
    _, ev, net = trained_image(folder)
    return net, ev.theory_train.x, ev.theory_train.y, ev.test.x, ev.test.y, T


def call(point, theory, seed: int) -> dict:
    """One evaluation of ``point`` (with ``theory``) at sampler seed ``seed``: the measurements of the module doc."""
    import dataclasses

    from bayes_attn import experiment
    from bayes_attn.samplers import Stopping

    point = dataclasses.replace(point, sampler=point.sampler.replace(seed=seed))
    load = os.getloadavg()[0]
    result = experiment.evaluate(point, theory=theory)
    t0 = time.perf_counter()
    post = result.posterior
    s = post.summary()
    seconds = result.sampling_seconds + time.perf_counter() - t0  # the diagnostics every caller reads, timed too
    cfg = point.sampler
    stop = s.stopping or Stopping(1, cfg.num_samples, result.sampling_seconds, not s.failures())
    u = s.table[s.table.index.str.startswith("U[")]
    ess_u = float(u["ess_bulk"].min())
    return {"seed": seed, "seconds": seconds, "sampling_seconds": result.sampling_seconds, "min_ess_bulk_U": ess_u,
            "ess_per_second_U": ess_u / seconds, "min_ess_bulk": float(s.table["ess_bulk"].min()),
            "max_rhat": s.max_rhat, "draws_per_chain": stop.draws, "blocks": stop.blocks, "targets_met": stop.met,
            "unmet": list(stop.unmet), "rewarmed": list(stop.rewarmed), "mean_steps": s.mean_steps,
            "pareto_k": s.pareto_k, "is_ess": s.is_ess, "acceptance": s.acceptance_rate, "used": post.sampler,
            "verdict": result.outcome.value, "reasons": list(result.outcome.reasons),
            "load_before": load, "load_after": os.getloadavg()[0]}


def worker(case: dict, calls: int, problems: dict) -> dict:
    """A case in this process: its theory solved once, then ``calls`` evaluations (seeds ``seed``, ``seed + 1``)."""
    import bayes_attn as ba
    from bayes_attn import experiment
    from bayes_attn.theory import solve_theory

    net, x, y, xt, yt, T = data(case, problems)
    correction = problems[case["problem"]]["correction"]
    cfg = ba.SamplerSettings(name=case["sampler"]).replace(**case["settings"])
    point = experiment.Point(net, x, y, xt, yt, T, correction=correction, sampler=cfg)
    theory = solve_theory(net, x, y, temperature=T, correction=correction)
    return case | {"chains": cfg.num_chains, "calls": [call(point, theory, cfg.seed + k) for k in range(calls)],
                   "sampler_settings": cfg.to_dict()}


def fresh(case: dict, quick: bool) -> dict:
    """:func:`worker` in a new process with the compilation cache off (a cold start); a parallel chain method gets a
    CPU device per chain, as the command sets them."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), BAYES_ATTN_NO_COMPILE_CACHE="1", JAX_ENABLE_COMPILATION_CACHE="false")
    if case["settings"].get("chain_method") == "parallel":
        chains = case["settings"].get("num_chains", 4)
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={chains}".strip()
    args = [sys.executable, __file__, case["set"], "--worker", json.dumps(case)] + (["--quick"] if quick else [])
    t0 = time.perf_counter()
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{case['label']} {case['place']} {case['lever']}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]) | {"process_seconds": time.perf_counter() - t0}


def show(r: dict) -> None:
    for k, c in enumerate(r["calls"], start=1):
        own = f"k {c['pareto_k']:.2f}" if c["pareto_k"] == c["pareto_k"] else f"acc {c['acceptance']:.2f}"
        print(f"{r['place']!s:16s} {r['label']:14s} {r['lever']:17s} call {k}: {c['seconds']:7.1f} s  "
              f"{c['draws_per_chain']:5d} draws/chain  ESS(U) {c['min_ess_bulk_U']:7.0f}  "
              f"ESS/s {c['ess_per_second_U']:7.2f}  R-hat {c['max_rhat']:.4f}  {own}  {c['verdict']}  "
              f"load {c['load_before']:.1f}", flush=True)


def ratios(results: list[dict], baseline: str | None) -> dict:
    """ESS/s of ``U`` of every label over ``baseline``'s, per place, lever and call: ``{"place lever": {...}}``."""
    out: dict = {}
    for r in results:
        base = next((b for b in results if b["label"] == baseline and b["place"] == r["place"]
                     and b["lever"] == r["lever"]), None)
        if base is None or r is base:
            continue
        for k, (c, b) in enumerate(zip(r["calls"], base["calls"], strict=False), start=1):
            key = f"{r['label']}/{baseline} ESS/s, call {k}"
            out.setdefault(f"{r['place']} {r['lever']}", {})[key] = c["ess_per_second_U"] / b["ess_per_second_U"]
    return out


def headline(results: list[dict], s: dict) -> dict | None:
    """The set's headline: its ``headline`` label's ESS/s over the ``baseline``'s on the last call at the first place;
    without a baseline, the slowest sampling of its ``headline`` lever."""
    if not s.get("baseline"):
        times = [c["seconds"] for r in results if r["lever"] == s["headline"] for c in r["calls"]]
        return make_headline(f"slowest sampling, lever {s['headline']}", max(times), "s") if times else None
    rows = ratios(results, s.get("baseline"))
    for place, row in rows.items():
        key = next((k for k in reversed(list(row)) if k.startswith(f"{s['headline']}/")), None)
        if key:
            return make_headline(f"{key}, {place}", row[key], "x")
    return None


def main(a: argparse.Namespace) -> list[dict]:
    cases = load_cases()
    s = cases["sets"][a.set]
    todo = cases_of(cases, a.set, a.quick, a.only, a.levers)
    record = Record(a, set=s, cases=todo)
    results: list[dict] = []
    for case in todo:
        r = fresh(case, a.quick) if s.get("fresh") else in_process(case, s, cases["problems"])
        show(r)
        results.append(r)
        record.write({"cases": results, "ratios": ratios(results, s.get("baseline"))},
                     headline=headline(results, s))  # after each case: a long run keeps its parts
    return results


def in_process(case: dict, s: dict, problems: dict) -> dict:
    """:func:`worker` here (the set's ``x64`` the process's JAX default)."""
    import jax

    jax.config.update("jax_enable_x64", bool(s.get("x64", False)))
    return worker(case, int(s.get("calls", 1)), problems)


if __name__ == "__main__":
    ARGS = parse_args()  # before JAX loads: --help answers at once and writes nothing
    if ARGS.worker:
        CASES_NOW = load_cases()
        print(json.dumps(in_process(json.loads(ARGS.worker), CASES_NOW["sets"][ARGS.set], CASES_NOW["problems"])))
    else:
        main(ARGS)
