"""Benchmark: the registered samplers side by side on the Fig. 2c network, and their cost vs width.

Problem: Fig. 2c Markov network (D = 4 paths, N0 = 231; ``markov.fig2c``),
P = 100 training sequences, ``--n-test`` test sequences (default 100),
temperature 0.01, float64, the same data and seeds for every sampler.

Samplers (from the registry :data:`bayes_attn.samplers.SAMPLERS`, by name;
all NumPyro NUTS, target acceptance 0.8, max tree depth 10, started from a prior draw, ``wishart`` from
``init_to_uniform``: the samplers' own starts):

- ``full-token``: all weights, the network run over tokens (the paper's sampler; N = 10 only);
- ``full``: all weights, ``f`` from path inputs;
- ``collapsed``: upper weights, ``V0`` integrated out, ``f`` drawn exactly afterwards;
- ``wishart``: the order parameters only, via Bartlett factors (docs/theory.md §7), 14 dimensions at any width.

Widths: N = 10 (all four), 100 and 1000 (all but ``full-token``), and 10000
(``wishart`` only: its wall time should not depend on N). A run at N > 10 is
skipped when its estimated time exceeds ``--budget`` seconds (default 600):
the estimate scales the sampler's total time at the previous width by the
ratio of the isolated gradient times at the two widths (so it assumes the
same leapfrog steps per draw, usually an underestimate); the JSON and the
printout say which runs were skipped and why.

Measured per run:

1. **ESS/s** on the invariant observables: the minimum bulk ESS (ArviZ,
   ``Posterior.summary()``) over all entries of ``U`` and all test
   predictions ``f_test``, divided by

   - *total* time: set-up (path inputs, kernels) + warm-up + sampling + the
     exact conditional draws of ``f`` (collapsed, wishart), compilation
     included (what ``sample_posterior`` costs);
   - *post-warm-up* time: sampling + conditional draws, compilation excluded.

   How: the script builds each sampler through the interface
   (``samplers.prepare``, ``Sampler.build``, ``Sampler.observables`` as the
   per-draw post-processing, ``Sampler.conditional`` afterwards, exactly as
   ``sample_posterior``), drives ``numpyro.infer.MCMC`` with
   ``mcmc.warmup(...)`` then ``mcmc.run(...)`` from the post-warm-up state,
   each timed with ``block_until_ready``. JAX reports every
   trace/lowering/compile through ``jax.monitoring``; the union of those
   intervals inside a phase is its compile time. The draws become a
   ``Posterior`` (``Posterior.from_draws``) and are summarised by ArviZ.
2. **Sampler overhead**: seconds per leapfrog step inside NUTS (post-warm-up,
   compile excluded, over the leapfrog steps executed) divided by seconds per
   isolated jitted ``value_and_grad`` of the same potential
   (``numpyro.infer.util.initialize_model``), timed per Python call
   (``grad_call``, includes dispatch) and inside a jitted ``fori_loop``
   (``grad_loop``, pure compute).
3. **Storage per draw** at N = 10, 100, 1000 (P = 100, 1000 test inputs):
   the stored observables (``U``, ``U_2``, ``Ua``, ``f_train``, ``f_test``)
   against the raw weights, checked against a real tree sampled at N = 100
   (collapsed, ``keep_weights=True``).

Results: a printed table, the ratios wishart/collapsed (N = 100) and
wishart/full-token (N = 10) of ESS/s, the wishart wall time vs N, and
``benchmarks/results/sampler.json``.

Run (full: ~25 min on 2 quiet cores; run it alone)::

    .venv/bin/python benchmarks/bench_sampler.py

Smoke test of every code path (tiny draws, widths 4 and 8; a temporary folder unless ``--out``)::

    .venv/bin/python benchmarks/bench_sampler.py --quick
"""

from __future__ import annotations

import argparse
import os

from harness import Record, parse, parser
from harness import headline as make_headline

ORDER = ("full-token", "full", "collapsed", "wishart")
PLAN = {10: ORDER, 100: ("full", "collapsed", "wishart"), 1000: ("full", "collapsed", "wishart"), 10000: ("wishart",)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (``--quick``: widths 4 and 8, 20 + 20 draws, every code path)."""
    ap = parser("sampler", __doc__, "widths 4 and 8, 20 + 20 draws (full-token 5 + 5), P = 20, every code path")
    ap.add_argument("--samplers", nargs="+", default=list(ORDER), help="registered samplers (default: %(default)s)")
    ap.add_argument("--widths", type=int, nargs="+", default=list(PLAN),
                    help="widths to run (each runs the samplers of PLAN)")
    ap.add_argument("--warmup", type=int, default=500, help="warm-up iterations (all but full-token)")
    ap.add_argument("--draws", type=int, default=1000, help="draws per chain (all but full-token)")
    ap.add_argument("--token-warmup", type=int, default=100,
                    help="warm-up iterations of full-token (slow: max tree depth)")
    ap.add_argument("--token-draws", type=int, default=150, help="draws per chain of full-token")
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--chain-method", default="sequential", choices=["sequential", "parallel", "vectorized"])
    ap.add_argument("--n-train", type=int, default=100)
    ap.add_argument("--n-test", type=int, default=100, help="test inputs whose f enters the ESS")
    ap.add_argument("--temperature", type=float, default=0.01)
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=600.0, help="skip a run whose estimated time exceeds this (s)")
    ap.add_argument("--grad-calls", type=int, default=2000, help="most isolated gradient evaluations per timing block")
    a = parse(ap, argv)
    if a.quick:
        a.warmup, a.draws, a.token_warmup, a.token_draws, a.grad_calls = 20, 20, 5, 5, 50
        a.widths = [4, 8]
        a.n_train, a.n_test = 20, 10
    return a


def headline(results: dict) -> dict | None:
    """``wishart``'s ESS/s (total, compilation included) at N = 100 (or the second width run)."""
    widths = sorted(int(N) for N in results["runs"].get("wishart", {}))
    if not widths:
        return None
    N = 100 if 100 in widths else widths[min(1, len(widths) - 1)]
    return make_headline(f"wishart ESS/s, Fig. 2c N = {N}", results["runs"]["wishart"][str(N)]["ess_per_s_total"],
                         "1/s")


if __name__ == "__main__":
    ARGS = parse_args(None)  # before JAX loads: --help answers at once and writes nothing

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # before NumPy loads: timings on one BLAS thread

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # this script's own process: float64 sampling

import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from harness import CompileTimer, timed_nuts  # noqa: E402
from numpyro.infer.util import initialize_model  # noqa: E402

import bayes_attn as ba  # noqa: E402
from bayes_attn import markov, samplers  # noqa: E402
from bayes_attn.diagnostics import EXTRA_FIELDS, sample_stats  # noqa: E402
from bayes_attn.posterior import Posterior  # noqa: E402


def plan(a) -> dict[int, tuple[str, ...]]:
    """Samplers per width (quick mode: the plan of 10, 100, 10000 on the given tiny widths)."""
    keys = list(PLAN) if not a.quick else [10, 100, 10000]
    # quick: the i-th tiny width runs the i-th plan; widths beyond the three plans run every sampler but full-token
    table = PLAN if not a.quick else dict(zip(a.widths, (PLAN[k] for k in keys), strict=False))
    return {N: tuple(s for s in table.get(N, ORDER[1:]) if s in a.samplers) for N in a.widths}


# ----------------------------------------------------------------------------
# timing helpers
# ----------------------------------------------------------------------------
def executed_steps(n_steps, chain_method: str) -> int:
    """Leapfrog steps that set the wall time, from ``n_steps`` ``[chain, draw]``."""
    n = np.asarray(n_steps, dtype=np.int64)
    if chain_method == "sequential":
        return int(n.sum())
    if chain_method == "parallel":
        return int(n.sum(axis=1).max())
    return int(n.max(axis=0).sum())  # vectorized: every iteration waits for the longest trajectory


def gradient_time(model, args, max_calls: int, budget_s: float = 1.0) -> dict:
    """Seconds per jitted ``value_and_grad`` of the potential: per Python call, and inside a ``fori_loop``.

    Best of 3 blocks of ``n`` evaluations, ``n`` chosen so that a block lasts
    about ``budget_s`` (at most ``max_calls``, at least 5).
    """
    info = initialize_model(jax.random.key(1), model, model_args=args)
    z = info.param_info.z
    vg = jax.jit(jax.value_and_grad(info.potential_fn))
    out = jax.block_until_ready(vg(z))  # compile
    t = time.perf_counter()
    for _ in range(3):
        jax.block_until_ready(vg(z))
    n = int(min(max_calls, max(5, budget_s / ((time.perf_counter() - t) / 3))))
    best_call = math.inf
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n):
            jax.block_until_ready(vg(z))
        best_call = min(best_call, (time.perf_counter() - t) / n)

    @jax.jit
    def loop(z0):
        def body(i, c):
            zz, acc = c
            v, g = jax.value_and_grad(info.potential_fn)(zz)
            return jax.tree.map(lambda p, q: p - 1e-30 * q, zz, g), acc + v  # dependent chain of evaluations

        return jax.lax.fori_loop(0, n, body, (z0, 0.0 * out[0]))

    jax.block_until_ready(loop(z))  # compile
    best_loop = math.inf
    for _ in range(3):
        t = time.perf_counter()
        jax.block_until_ready(loop(z))
        best_loop = min(best_loop, (time.perf_counter() - t) / n)
    return {"seconds_per_grad_call": best_call, "seconds_per_grad_loop": best_loop, "grad_calls_timed": n,
            "sampled_dimension": int(sum(np.size(v) for v in jax.tree.leaves(z)))}


# ----------------------------------------------------------------------------
# one run
# ----------------------------------------------------------------------------
def problem(N: int, a):
    task, net = markov.fig2c(width=N, n_train=a.n_train, n_test=a.n_test, seed=a.seed)
    x, y, xt, _ = task.generate()
    return net, x, y, xt


def build(name: str, net, x, y, xt, a):
    """Inputs, model and arguments through the interface (``prepare`` + ``build``)."""
    inputs = samplers.prepare(net, x, y, xt, a.temperature, a.dtype)
    model, args = samplers.get(name).build(inputs)
    return inputs, model, jax.block_until_ready(args)


def run_sampler(name: str, N: int, a, timer: CompileTimer) -> dict:
    """Set-up, warm-up, sampling and conditional draws timed separately; ESS, steps and gradient timings."""
    smp = samplers.get(name)
    options = samplers.Storage()
    W, S = (a.token_warmup, a.token_draws) if name == "full-token" else (a.warmup, a.draws)
    net, x, y, xt = problem(N, a)
    t_set = time.perf_counter()
    inputs, model, args = build(name, net, x, y, xt, a)
    mcmc, draws, extra, (t0, t1, t2, t3) = timed_nuts(
        smp, inputs, model, args, options, num_warmup=W, num_samples=S, num_chains=a.chains,
        chain_method=a.chain_method, target_accept=0.8, seed=a.seed, extra_fields=EXTRA_FIELDS)
    grad = gradient_time(model, args, a.grad_calls)
    compile_sample, compile_post = timer.seconds_in(t1, t2), timer.seconds_in(t2, t3)
    post = Posterior.from_draws(net, draws, sample_stats(extra), x, y, a.temperature, sampler=name, seconds=t3 - t_set)
    s = post.summary()
    rows = s.table[s.table.index.str.startswith(("U[", "f_test["))]
    ess = float(rows["ess_bulk"].min())
    steps = executed_steps(extra["num_steps"], a.chain_method)
    total = t3 - t_set
    sample_s = (t2 - t1) - compile_sample
    post_s = (t3 - t2) - compile_post
    per_step = sample_s / max(steps, 1)
    return {
        "sampler": name, "N": N, "warmup": W, "draws_per_chain": S, "chains": a.chains,
        "seconds_total": total, "seconds_setup": t0 - t_set, "seconds_warmup": t1 - t0, "seconds_sampling": t2 - t1,
        "seconds_warmup_compile": timer.seconds_in(t0, t1),
        "seconds_sampling_compile": compile_sample, "seconds_conditional_f": t3 - t2,
        "seconds_conditional_f_compile": compile_post,
        "min_ess_bulk": ess, "min_ess_bulk_U": float(rows[rows.index.str.startswith("U[")]["ess_bulk"].min()),
        "min_ess_bulk_f_test": float(rows[rows.index.str.startswith("f_test[")]["ess_bulk"].min()),
        "ess_per_s_total": ess / total, "ess_per_s_post_warmup": ess / (sample_s + post_s),
        "max_rhat": float(rows["r_hat"].max()), "divergences": s.divergences,
        "mean_leapfrog_steps_per_draw": s.mean_steps,
        "max_tree_depth_hits": int((np.asarray(extra["num_steps"]) >= 1023).sum()),
        "executed_steps": steps, "seconds_per_step": per_step,
        "U_mean": post.order_parameter().tolist(),
        **grad,
        "overhead_vs_grad_call": per_step / grad["seconds_per_grad_call"],
        "overhead_vs_grad_loop": per_step / grad["seconds_per_grad_loop"],
    }


def estimate_seconds(name: str, N: int, previous: dict, a) -> tuple[float, dict]:
    """Estimated total time at width ``N`` from a run at a smaller width (gradient-time ratio)."""
    net, x, y, xt = problem(N, a)
    _, model, args = build(name, net, x, y, xt, a)
    g = gradient_time(model, args, max_calls=20, budget_s=0.3)
    est = previous["seconds_total"] * g["seconds_per_grad_loop"] / previous["seconds_per_grad_loop"]
    return est, g


# ----------------------------------------------------------------------------
# storage
# ----------------------------------------------------------------------------
def storage_formulas(heads, N: int, N0: int, P: int, P_test: int, itemsize: int = 8) -> dict:
    """Bytes per draw: stored observables (``U``, ``U_2..U_L``, ``Ua``, ``f_train``, ``f_test``) and raw weights,
    widths ``N``."""
    D_l = [math.prod(heads[l:]) for l in range(len(heads))]
    obs = sum(d * d for d in D_l) + 1 + P + P_test
    raw = N * N0 + sum(h * N * N for h in heads) + N
    return {"N": N, "stored_floats": obs, "stored_bytes": obs * itemsize, "raw_weight_floats": raw,
            "raw_weight_bytes": raw * itemsize, "effective_weight_floats": D_l[0] * N, "raw_over_stored": raw / obs}


def storage(a) -> dict:
    """Formulas at N = 10, 100, 1000 and a check against a real tree at N = 100."""
    P, P_test = (100, 1000) if not a.quick else (20, 50)
    N = 100 if not a.quick else 8
    task, net = markov.fig2c(width=N, n_train=P, n_test=P_test, seed=a.seed)
    x, y, xt, _ = task.generate()
    rows = [storage_formulas(net.heads, n, net.N0, P, P_test) for n in sorted({10, 100, 1000, N})]
    draws = 3 if a.quick else 10
    post = ba.sample_posterior(net, x, y, temperature=a.temperature, x_test=xt,
                               sampler=ba.SamplerSettings(name="collapsed", num_warmup=draws, num_samples=draws,
                                                          num_chains=1, seed=a.seed),
                               keep_weights=True, progress_bar=False)
    p = post.tree["posterior"]
    n = p.sizes["chain"] * p.sizes["draw"]
    measured_obs = sum(p[v].nbytes for v in post.observables) / n
    measured_raw = sum(p[v].nbytes for v in ("V0", *[f"V{l + 1}" for l in range(net.L)], "a")) / n
    fN = next(r for r in rows if r["N"] == N)
    check = {"N": N, "draws": n, "observables": post.observables, "stored_bytes_measured": measured_obs,
             "stored_bytes_formula": fN["stored_bytes"], "raw_weight_bytes_measured": measured_raw,
             "raw_weight_bytes_formula": fN["raw_weight_bytes"],
             "agree": bool(np.isclose(measured_obs, fN["stored_bytes"])
                           and np.isclose(measured_raw, fN["raw_weight_bytes"]))}
    if not check["agree"]:
        raise AssertionError(f"storage formula disagrees with the tree: {check}")
    return {"P": P, "P_test": P_test, "per_width": rows, "check": check}


# ----------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------
def ratio(runs: dict, num: tuple[str, int], den: tuple[str, int]) -> dict | None:
    r_num, r_den = runs.get(num[0], {}).get(num[1]), runs.get(den[0], {}).get(den[1])
    if r_num is None or r_den is None:
        return None
    return {k: r_num[k] / r_den[k] for k in ("ess_per_s_total", "ess_per_s_post_warmup")}


def measure(a: argparse.Namespace, timer: CompileTimer) -> tuple[dict, list[dict]]:
    """Every planned run (``{sampler: {N: row}}``), skipping those estimated over ``--budget``; and the skipped."""
    runs: dict[str, dict[int, dict]] = {}
    skipped = []
    for N, names in plan(a).items():
        for name in names:
            done = runs.get(name, {})
            if done:
                prev = done[max(done)]
                est, g = estimate_seconds(name, N, prev, a)
                if est > a.budget:
                    why = (f"estimated {est:.0f} s > budget {a.budget:.0f} s (total {prev['seconds_total']:.0f} s at "
                           f"N = {prev['N']} x gradient time ratio "
                           f"{g['seconds_per_grad_loop'] / prev['seconds_per_grad_loop']:.1f})")
                    skipped.append({"sampler": name, "N": N, "estimated_seconds": est, "reason": why,
                                    "seconds_per_grad_loop": g["seconds_per_grad_loop"]})
                    print(f"[{name} N={N}] skipped: {why}", flush=True)
                    continue
            print(f"[{name} N={N}] ...", flush=True)
            r = run_sampler(name, N, a, timer)
            runs.setdefault(name, {})[N] = r
            print(f"[{name} N={N}] {r['seconds_total']:.1f} s, min ESS {r['min_ess_bulk']:.0f}, "
                  f"ESS/s {r['ess_per_s_total']:.3g} (post-warm-up {r['ess_per_s_post_warmup']:.3g}), "
                  f"{r['mean_leapfrog_steps_per_draw']:.0f} steps/draw, R-hat {r['max_rhat']:.3f}", flush=True)
    return runs, skipped


def main(a: argparse.Namespace) -> dict:
    """Run the plan and the storage check, print the report, write the envelope."""
    for name in a.samplers:
        samplers.get(name)  # a clear error for an unknown sampler
    if a.chain_method == "parallel":
        import numpyro

        numpyro.set_host_device_count(a.chains)
    record = Record(a, network="markov.fig2c")
    timer = CompileTimer()
    t_start = time.perf_counter()
    runs, skipped = measure(a, timer)
    store = storage(a)
    Ns = list(plan(a))
    small, mid = Ns[0], Ns[min(1, len(Ns) - 1)]
    ratios = {
        f"wishart/collapsed at N={mid}": ratio(runs, ("wishart", mid), ("collapsed", mid)),
        f"wishart/full-token at N={small}": ratio(runs, ("wishart", small), ("full-token", small)),
        f"collapsed/full-token at N={small}": ratio(runs, ("collapsed", small), ("full-token", small)),
        f"wishart/full at N={mid}": ratio(runs, ("wishart", mid), ("full", mid)),
    }
    keys = ("seconds_total", "seconds_warmup", "seconds_sampling", "min_ess_bulk", "ess_per_s_total",
            "mean_leapfrog_steps_per_draw", "seconds_per_grad_loop")
    results = {
        "runs": {name: {str(N): r for N, r in by_N.items()} for name, by_N in runs.items()},
        "skipped": skipped, "ratios": ratios,
        "wishart_time_vs_N": {str(N): {k: r[k] for k in keys} for N, r in runs.get("wishart", {}).items()},
        "storage": store, "seconds_total": time.perf_counter() - t_start,
    }
    print_report(results)
    print(f"\nload average before/after: {record.load_before} / {os.getloadavg()}; "
          f"total {results['seconds_total']:.0f} s")
    record.write(results, headline=headline(results))
    return results


def print_report(out: dict) -> None:
    cols = [
        ("warm-up", "warmup", "{:d}"), ("draws", "draws_per_chain", "{:d}"), ("dim", "sampled_dimension", "{:d}"),
        ("total s", "seconds_total", "{:.1f}"), ("warm-up s", "seconds_warmup", "{:.1f}"),
        ("sample s", "seconds_sampling", "{:.1f}"), ("compile s", "seconds_sampling_compile", "{:.1f}"),
        ("cond-f s", "seconds_conditional_f", "{:.2f}"), ("min ESS", "min_ess_bulk", "{:.0f}"),
        ("ESS/s tot", "ess_per_s_total", "{:.3g}"), ("ESS/s post", "ess_per_s_post_warmup", "{:.3g}"),
        ("R-hat", "max_rhat", "{:.3f}"), ("div", "divergences", "{:d}"),
        ("steps/draw", "mean_leapfrog_steps_per_draw", "{:.0f}"), ("us/step", "seconds_per_step", "{:.1f}"),
        ("us/grad call", "seconds_per_grad_call", "{:.1f}"), ("us/grad loop", "seconds_per_grad_loop", "{:.1f}"),
        ("step/call", "overhead_vs_grad_call", "{:.2f}"), ("step/loop", "overhead_vs_grad_loop", "{:.2f}"),
    ]
    flat = [(f"{name}@{N}", r) for name, by_N in out["runs"].items() for N, r in by_N.items()]
    for start in range(0, len(flat), 6):
        chunk = flat[start : start + 6]
        print(f"\n{'':12s}" + "".join(f"{k:>15s}" for k, _ in chunk))
        for label, key, fmt in cols:
            scale = 1e6 if key.startswith("seconds_per") else 1
            print(f"{label:12s}" + "".join(f"{fmt.format(r[key] * scale if scale != 1 else r[key]):>15s}"
                                           for _, r in chunk))
    for s in out["skipped"]:
        print(f"skipped {s['sampler']} at N = {s['N']}: {s['reason']}")
    print("\nESS/s ratios (total; post-warm-up):")
    for k, v in out["ratios"].items():
        print(f"  {k:32s} " + ("not run" if v is None
                               else f"{v['ess_per_s_total']:10.3g} {v['ess_per_s_post_warmup']:10.3g}"))
    print("\nwishart wall time vs N:")
    for N, r in out["wishart_time_vs_N"].items():
        print(f"  N = {N:>6s}: total {r['seconds_total']:7.1f} s (warm-up {r['seconds_warmup']:6.1f}, sampling "
              f"{r['seconds_sampling']:6.1f}), {r['mean_leapfrog_steps_per_draw']:5.1f} steps/draw, "
              f"min ESS {r['min_ess_bulk']:6.0f}, {r['seconds_per_grad_loop'] * 1e6:8.1f} us/grad")
    st = out["storage"]
    print(f"\nstorage per draw (float64), P = {st['P']}, {st['P_test']} test inputs:")
    for r in st["per_width"]:
        print(f"  N = {r['N']:5d}: stored observables {r['stored_bytes']:>10,d} B   raw weights "
              f"{r['raw_weight_bytes']:>12,d} B   raw/stored {r['raw_over_stored']:8.1f}")
    c = st["check"]
    print(f"  check at N = {c['N']} against a sampled tree: stored {c['stored_bytes_measured']:.0f} B, raw "
          f"{c['raw_weight_bytes_measured']:.0f} B -> {'agree' if c['agree'] else 'DISAGREE'}")


if __name__ == "__main__":
    main(ARGS)
