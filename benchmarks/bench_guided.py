"""Benchmark: the samplers guided by the finite-width expansion against NUTS, side by side (docs/theory.md §9).

Problem: the Fig. 2c network (``markov.fig2c``: 4 paths, P = 100, temperature 0.01; float64 unless a label
says float32) at N = 10, 100 and 1000, ``--n-test`` test inputs (default 100: ``f_test`` is drawn for every
kept draw). In one process, each sampler is called twice through :func:`bayes_attn.sample_posterior` (the
second call with another seed, after compilation), in this order:

- ``laplace-is``: 4 × 5000 proposals, resampled; ``laplace-is-f32``: the same in float32;
- ``laplace-mh``: 4 × (200 + 5000);
- ``auto``: 4 × 5000 (``laplace-is`` first; falls back as it says); ``auto-f32``: the same in float32;
- ``wishart``: 4 × (500 + 2000), starting at the expansion's mode with its metric (the default);
- ``wishart`` with ``start="prior"``: 4 × (500 + 2000), NumPyro's adapted diagonal metric (the sampler before);
- ``collapsed``: 2 × (300 + 300) at N = 10 and 100 (it needs minutes per call beyond).

Measured per call: wall time of ``sample_posterior`` and of the diagnostics it returns (the expansion,
proposals, draws of ``f``, ``Posterior.summary``; compilation on the first call), the smallest bulk ESS over
the entries of ``U`` (ArviZ) and over all observables, ESS/s on ``U``, the sampler's own diagnostics (``k̂``,
IS ESS, acceptance), and the posterior mean of ``U[1-1, 1-1]`` with its MCSE. Ratios printed: ESS/s of
``laplace-is`` and ``auto`` over ``wishart`` (both starts) at every width, first and second call; wall time of
``wishart`` over ``auto``; the largest |z| between each sampler's and ``wishart``'s means of ``U`` (combined
MCSE).

``--fresh`` makes each sampler's two calls in a process of its own (its first call then compiles all it uses, as
a user's does; without it a sampler's first call reuses the programs that the samplers before it compiled, the
expansion's among them); ``--compile-cache`` with it gives that process the command's persistent compilation
cache, warmed by one such process before (what the command's second run on a machine finds). ``--busy``
repeats the N = 100 ``laplace-is`` / ``wishart`` pair beside one CPU-bound process per core. ``--image`` adds
the image scale (the landed Fig. 3 model of ``inference/results/fig3``: 16 paths, P = 600, float32, its
validation-chosen temperature): ``laplace-is`` (4 × 500) at N = 100 and N = 10, and ``wishart`` from the
expansion, 2 × (100 + 200), at N = 10.

Run alone (~25 min on 2 quiet cores, ~15 more with ``--image``)::

    .venv/bin/python benchmarks/bench_guided.py [--widths 10 100 1000] [--busy] [--image] [--quick]
                                                [--samplers auto wishart ...] [--fresh [--compile-cache]]
                                                [--out FILE]

Output: a printed table and ``benchmarks/results/guided.json`` (``--quick``: every code path with 1/50 of the
draws, at least 20, a temporary folder).
"""

from __future__ import annotations

import argparse

from harness import Record, parse, parser
from harness import headline as make_headline

LABELS = ("laplace-is", "laplace-is-f32", "laplace-mh", "auto", "auto-f32", "wishart", "wishart-prior", "collapsed")
"""The labels of :func:`runs` (``--samplers`` chooses among them)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: 1/50 of the draws, at least 20)."""
    ap = parser("guided", __doc__, "every code path with 1/50 of the draws (at least 20)")
    ap.add_argument("--widths", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--n-test", type=int, default=100)
    ap.add_argument("--busy", action="store_true")
    ap.add_argument("--image", action="store_true")
    ap.add_argument("--samplers", nargs="+", choices=LABELS, help="only these of the Fig. 2c runs (default: all)")
    ap.add_argument("--fresh", action="store_true",
                    help="each sampler's two calls in a process of their own, so that no first call reuses what "
                         "another sampler compiled")
    ap.add_argument("--compile-cache", action="store_true",
                    help="with --fresh: each sampler's process finds the command's persistent compilation cache "
                         "warm (filled by one such process first)")
    return parse(ap, argv)


def headline(results: dict) -> dict | None:
    """The first guided sampler's ESS/s of ``U`` over ``wishart``'s (second calls), at N = 100 or the first width."""
    N = "100" if "100" in results["fig2c"] else next(iter(results["fig2c"]))
    ratios = results["fig2c"][N]["ratios"]
    key = next((k for k in ratios if k.endswith("/wishart ESS/s, call 2")), None)
    return make_headline(f"{key}, Fig. 2c N = {N}", ratios[key], "x") if key else None


if __name__ == "__main__":
    ARGS = parse_args()  # before JAX loads: --help answers at once and writes nothing

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from harness import busy_cores  # noqa: E402

import bayes_attn as ba  # noqa: E402
from bayes_attn import markov  # noqa: E402

F32 = ("laplace-is", "auto")  # the runs also made in float32 (labels ``<label>-f32``)


def runs(N: int, quick: bool) -> list[tuple[str, str, dict]]:
    """``(label, sampler, settings)`` of every sampler at width ``N``."""
    q = (lambda n: max(20, n // 50)) if quick else (lambda n: n)  # noqa: E731
    out = [("laplace-is", "laplace-is", dict(num_chains=4, num_samples=q(5000))),
           ("laplace-mh", "laplace-mh", dict(num_chains=4, num_warmup=q(200), num_samples=q(5000))),
           ("auto", "auto", dict(num_chains=4, num_warmup=q(500), num_samples=q(5000))),
           ("wishart", "wishart", dict(num_chains=4, num_warmup=q(500), num_samples=q(2000))),
           ("wishart-prior", "wishart", dict(num_chains=4, num_warmup=q(500), num_samples=q(2000), start="prior"))]
    for label in F32:  # the same run in float32, after its float64 one
        i = next(i for i, r in enumerate(out) if r[0] == label)
        out.insert(i + 1, (f"{label}-f32", out[i][1], out[i][2] | {"dtype": "float32"}))
    if N <= 100:
        out.append(("collapsed", "collapsed", dict(num_chains=2, num_warmup=q(300), num_samples=q(300))))
    return out


def measure(net, x, y, xt, temperature: float, sampler: str, settings: dict, seed: int) -> dict:
    """One call of ``sample_posterior`` and its diagnostics (``Posterior.summary``), timed together (float64 unless
    ``settings`` say otherwise)."""
    t0 = time.perf_counter()
    post = ba.sample_posterior(net, x, y, temperature=temperature, x_test=xt,
                               sampler=ba.SamplerSettings(name=sampler, seed=seed, **settings), progress_bar=False)
    s = post.summary()  # timed: every call reads its diagnostics (``auto`` to choose, the command to report)
    wall = time.perf_counter() - t0
    u = s.table[s.table.index.str.startswith("U[")]
    ess_u = float(u["ess_bulk"].min())
    return {"wall_seconds": wall, "min_ess_U": ess_u, "ess_per_second_U": ess_u / wall,
            "min_ess_all": float(s.table["ess_bulk"].min()), "max_rhat": s.max_rhat, "failures": s.failures(),
            "pareto_k": s.pareto_k, "is_ess": s.is_ess, "acceptance": s.acceptance_rate, "used": post.sampler,
            "auto": json.loads(post.tree.attrs.get("auto", "[]")), "U_mean": post.order_parameter().tolist(),
            "U_mcse": u["mcse_mean"].to_numpy().reshape(net.D, net.D).tolist(), "seed": seed}


def show(N, label, call, r) -> None:
    """Print one call."""
    own = (f"k {r['pareto_k']:.2f} IS-ESS {r['is_ess']:.0f}" if np.isfinite(r["pareto_k"])
           else f"acc {r['acceptance']:.2f}")
    print(f"N={N:5d} {label:14s} call {call}: {r['wall_seconds']:7.1f} s  ESS(U) {r['min_ess_U']:7.0f}  "
          f"ESS/s {r['ess_per_second_U']:7.1f}  R-hat {r['max_rhat']:.4f}  {own}  used {r['used']}  "
          f"{'; '.join(r['failures'])}", flush=True)


def max_z(a: dict, b: dict) -> float:
    """The largest |z| between two calls' means of ``U`` (combined MCSE)."""
    ma, mb = np.asarray(a["U_mean"]), np.asarray(b["U_mean"])
    sa, sb = np.asarray(a["U_mcse"]), np.asarray(b["U_mcse"])
    return float(np.max(np.abs(ma - mb) / np.sqrt(sa**2 + sb**2)))


def fig2c(widths, n_test: int, quick: bool, labels: list[str] | None = None, fresh: bool = False,
          cache: bool = False) -> dict:
    """Each sampler (``labels``: some) called twice at each width, and the ratios between them; ``fresh``: each
    sampler's two calls in a process of their own (no first call reuses programs another sampler compiled);
    ``cache``: that process with a warm persistent compilation cache (:func:`in_fresh_process`)."""
    out = {}
    for N in widths:
        task, net = markov.fig2c(width=N)
        x, y, xt, _ = task.generate()
        xt = xt[:n_test]
        res = {}
        for label, sampler, settings in runs(N, quick):
            if labels and label not in labels:
                continue
            if fresh:
                res[label] = in_fresh_process(N, n_test, quick, label, cache)
            else:
                res[label] = [measure(net, x, y, xt, 0.01, sampler, settings, seed) for seed in (0, 1)]
            for call, r in enumerate(res[label], start=1):
                show(N, label, call, r)
        ratios = {}
        for guided in [label for label in res if label.startswith(F32)]:
            for ref in ("wishart", "wishart-prior"):
                for call in (0, 1):
                    if guided in res and ref in res:
                        ratios[f"{guided}/{ref} ESS/s, call {call + 1}"] = (
                            res[guided][call]["ess_per_second_U"] / res[ref][call]["ess_per_second_U"])
        for ref in ("wishart", "wishart-prior"):
            for auto in [label for label in res if label.startswith("auto")]:
                if ref in res and auto in res:
                    ratios[f"{ref}/{auto} wall, call 2"] = res[ref][1]["wall_seconds"] / res[auto][1]["wall_seconds"]
        if "wishart" in res:
            ratios["max |z| of U vs wishart (call 2)"] = {k: max_z(v[1], res["wishart"][1]) for k, v in res.items()}
        for k, v in ratios.items():
            print(f"N={N:5d} {k}: {v if isinstance(v, dict) else round(v, 2)}", flush=True)
        out[str(N)] = {"runs": res, "ratios": ratios, "load": os.getloadavg()}
    return out


def in_fresh_process(N: int, n_test: int, quick: bool, label: str, cache: bool = False) -> list[dict]:
    """The two calls of ``label`` at width ``N`` (:func:`fig2c`), made by this script in a new process; ``cache``:
    with the command's persistent compilation cache (a folder of this label's own), filled by one such process
    first (its calls dropped), so that the calls returned find it warm, as the command's second run does."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "one.json"
        cache_env = {"BAYES_ATTN_COMPILE_CACHE": str(Path(tmp) / "cache"), "BAYES_ATTN_NO_COMPILE_CACHE": "0"}
        env = os.environ | (cache_env if cache else {})
        for _ in range(1 + cache):
            subprocess.run([sys.executable, __file__, "--widths", str(N), "--n-test", str(n_test), "--samplers",
                            label, "--out", str(out)] + ["--quick"] * quick + ["--compile-cache"] * cache,
                           check=True, stdout=subprocess.DEVNULL, env=env)
        return json.loads(out.read_text())["results"]["fig2c"][str(N)]["runs"][label]


def busy(n_test: int, quick: bool, limit: float = 1800.0) -> dict:
    """The N = 100 ``laplace-is`` / ``wishart`` pair (second calls) beside one CPU-bound process per core."""
    task, net = markov.fig2c(width=100)
    x, y, xt, _ = task.generate()
    xt = xt[:n_test]
    pair = [r for r in runs(100, quick) if r[0] in ("laplace-is", "wishart")]
    for _, sampler, settings in pair:  # compiled before the burners start
        measure(net, x, y, xt, 0.01, sampler, settings, 0)
    with busy_cores(limit) as burners:
        res = {label: measure(net, x, y, xt, 0.01, sampler, settings, 1) for label, sampler, settings in pair}
    for label, r in res.items():
        show(100, label + " (busy)", 2, r)
    ratio = res["laplace-is"]["ess_per_second_U"] / res["wishart"]["ess_per_second_U"]
    print(f"busy: laplace-is/wishart ESS/s {ratio:.2f}", flush=True)
    return {"runs": res, "ratio": ratio, "burners": burners, "load": os.getloadavg()}


def landed_fig3():
    """The landed Fig. 3 model (``inference/results/fig3``; never retrained) as a network at N = 10, the theory's
    training episodes, the test episodes and the validation-chosen temperature by width (``{10: T, ...}``)."""
    from bayes_attn.oneshot import (
        datasets,
        evaluation_episodes,
        load_oneshot_spec,
        load_pruning,
        to_network,
        train_model,
    )

    root = Path(__file__).resolve().parents[1]
    run = root / "inference/results/fig3"
    spec = load_oneshot_spec(root / "models/omniglot_oneshot_plain.toml")  # the spec of that run
    chosen = load_pruning(run).temperatures.finite_width
    sets = datasets(spec, None)
    ev = evaluation_episodes(spec, sets)
    model = train_model(spec, run, sets=sets, evaluation=ev)
    net, _ = to_network(model.params, model.config, width=10, variances=1.0)
    return net, ev.theory_train, ev.test, chosen


def image(quick: bool) -> dict:
    """The image scale on the landed Fig. 3 model (``inference/results/fig3``)."""
    net, tr, te, chosen = landed_fig3()
    xt = te.x[:200]
    n = 20 if quick else None
    out = {}
    for label, N, sampler, settings in (
            ("laplace-is", 100, "laplace-is", dict(num_chains=4, num_samples=n or 500)),
            ("laplace-is", 10, "laplace-is", dict(num_chains=4, num_samples=n or 500)),
            ("wishart", 10, "wishart", dict(num_chains=2, num_warmup=n or 100, num_samples=n or 200))):
        r = measure(net.with_width(N), tr.x, tr.y, xt, chosen[N], sampler, settings | {"dtype": "float32"}, 0)
        show(N, label + " (image)", 1, r)
        out[f"{label} N={N}"] = r
    return out


def main(a: argparse.Namespace) -> dict:
    """Fig. 2c, then ``--busy`` and ``--image`` where asked; the envelope."""
    record = Record(a)
    # a child of --fresh --compile-cache: the library turns its cache on at its first call (the folder and the
    # switch in BAYES_ATTN_COMPILE_CACHE and BAYES_ATTN_NO_COMPILE_CACHE=0, set by the parent)
    results = {"fig2c": fig2c(a.widths, a.n_test, a.quick, a.samplers, a.fresh, a.fresh and a.compile_cache)}
    if a.busy:
        results["busy"] = busy(a.n_test, a.quick)
    if a.image:
        results["image"] = image(a.quick)
    record.write(results, headline=headline(results))
    return results


if __name__ == "__main__":
    main(ARGS)
