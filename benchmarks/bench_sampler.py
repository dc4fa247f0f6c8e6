"""Benchmark: token-level, path-form and collapsed NUTS on the Fig. 2c network.

Problem: Fig. 2c Markov network (D = 4 paths, N0 = 231), width N = 10,
P = 100 training sequences, temperature 0.01, ``--n-test`` test sequences
(default 100), the same data and seeds for every sampler.

Samplers (all NumPyro NUTS, target acceptance 0.8, max tree depth 10,
``init_to_sample``, float64 by default):

- ``token``: ``method="full", form="token"`` — all weights, §1 run over tokens
  (the paper's sampler, the baseline);
- ``path``: ``method="full", form="path"`` — all weights, ``f`` from path inputs;
- ``collapsed``: ``method="collapsed"`` — ``V0`` integrated out, then ``f``
  drawn exactly from its conditional per draw.

Measured per sampler:

1. **ESS/s** on the invariant observables: the minimum bulk ESS over all
   entries of ``U`` and all test predictions ``f_test`` (ArviZ, from
   ``Posterior.summary().table``), divided by

   - *total* time: warm-up + sampling + (collapsed) the exact conditional
     draws of ``f``, compilation included (what ``sample_posterior`` costs);
   - *post-warm-up* time: the sampling phase alone plus (collapsed) the
     conditional draws, compilation excluded from both.

   How: the script drives ``numpyro.infer.MCMC`` itself with exactly the
   model, data, kernel settings and per-draw post-processing that
   ``sample_posterior`` uses, calling ``mcmc.warmup(...)`` and then
   ``mcmc.run(...)`` from the post-warm-up state, each timed (wall clock,
   ``block_until_ready``). JAX reports the duration of every trace and
   compile through ``jax.monitoring``; the union of those intervals that fall
   inside the sampling phase is subtracted from it. The draws are turned
   into the same ArviZ tree (``posterior._to_datatree``) and summarised by
   ``Posterior.summary()``.
2. **Sampler overhead**: seconds per leapfrog step inside NUTS (post-warm-up
   sampling time, compile excluded, over the leapfrog steps executed) divided
   by seconds per isolated jitted ``value_and_grad`` of the same potential
   (``numpyro.infer.util.initialize_model`` → ``potential_fn``; NUTS needs the
   value and the gradient at every step, and reverse mode computes the value
   anyway). The isolated time is measured two ways: per Python call with
   ``block_until_ready`` (``grad_call``, includes dispatch) and per iteration
   of a jitted ``fori_loop`` of dependent evaluations (``grad_loop``, pure
   compute). The per-step time includes the per-draw post-processing
   (``U``, and for the full sampler ``f_train``/``f_test``) amortised over
   the steps of a draw. Steps executed: with ``--chain-method sequential``
   (default) the sum over chains; ``parallel``: the largest per-chain sum;
   ``vectorized``: per draw the largest over chains.
3. **Storage per draw** at N = 10, 100, 1000 (P = 100, 1000 test inputs):
   the stored posterior (``U`` ``[D, D]`` + ``f_train`` ``[P]`` + ``f_test``
   ``[P_test]``, float64) against the raw weights
   ``N1·N0 + Σ_l H_l N_{l+1} N_l + Na`` floats; the formulas are checked
   against the ``nbytes`` of a real tree sampled at N = 100 (collapsed,
   ``keep_weights=True``, a few draws).

Results: a printed table with ratios, and ``benchmarks/results/sampler.json``.

Run (full, ~10-15 min on 2 quiet cores; run it alone)::

    .venv/bin/python benchmarks/bench_sampler.py

Smoke test of every code path (tiny draws; output to a temporary folder)::

    .venv/bin/python benchmarks/bench_sampler.py --quick
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SAMPLERS = {"token": ("full", "token"), "path": ("full", "path"), "collapsed": ("collapsed", "path")}
FIELDS = ("diverging", "energy", "num_steps", "accept_prob", "adapt_state.step_size", "potential_energy")
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Token-level vs path-form vs collapsed NUTS: ESS/s, overhead, storage.")
    ap.add_argument("--quick", action="store_true", help="tiny draws, every code path (smoke test); writes to a temp folder")
    ap.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    ap.add_argument("--warmup", type=int, default=500, help="warm-up iterations (path, collapsed)")
    ap.add_argument("--draws", type=int, default=1000, help="draws per chain (path, collapsed)")
    ap.add_argument("--token-warmup", type=int, default=100, help="warm-up iterations of the token-level baseline")
    ap.add_argument("--token-draws", type=int, default=150, help="draws per chain of the token-level baseline")
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--chain-method", default="sequential", choices=["sequential", "parallel", "vectorized"])
    ap.add_argument("--width", type=int, default=10)
    ap.add_argument("--n-train", type=int, default=100)
    ap.add_argument("--n-test", type=int, default=100, help="test inputs whose f enters the ESS")
    ap.add_argument("--temperature", type=float, default=0.01)
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grad-calls", type=int, default=2000, help="isolated gradient evaluations to time")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default benchmarks/results; --quick: a temp folder)")
    a = ap.parse_args(argv)
    if a.quick:
        a.warmup, a.draws, a.token_warmup, a.token_draws, a.grad_calls = 20, 20, 5, 5, 50
    if a.out is None:
        a.out = Path(tempfile.mkdtemp(prefix="bench_sampler_")) if a.quick else RESULTS
    return a


# ----------------------------------------------------------------------------
# timing helpers
# ----------------------------------------------------------------------------
class CompileTimer:
    """Collects JAX trace/lower/compile intervals (wall clock) via ``jax.monitoring``.

    Nested events (a jit traced inside another) overlap; :meth:`seconds_in`
    returns the length of the union of the intervals inside ``[t0, t1]``.
    """

    def __init__(self):
        import jax.monitoring

        self.intervals: list[tuple[float, float]] = []
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event: str, duration: float, **kwargs) -> None:
        if event in COMPILE_EVENTS:
            end = time.perf_counter()
            self.intervals.append((end - duration, end))

    def seconds_in(self, t0: float, t1: float) -> float:
        iv = sorted((max(a, t0), min(b, t1)) for a, b in self.intervals if b > t0 and a < t1)
        total, cur = 0.0, None
        for a, b in iv:
            if cur is None or a > cur[1]:
                if cur is not None:
                    total += cur[1] - cur[0]
                cur = [a, b]
            else:
                cur[1] = max(cur[1], b)
        return total + (0.0 if cur is None else cur[1] - cur[0])


def executed_steps(n_steps, chain_method: str) -> int:
    """Leapfrog steps that set the wall time, from ``n_steps`` ``[chain, draw]``."""
    import numpy as np

    n = np.asarray(n_steps, dtype=np.int64)
    if chain_method == "sequential":
        return int(n.sum())
    if chain_method == "parallel":
        return int(n.sum(axis=1).max())
    return int(n.max(axis=0).sum())  # vectorized: every iteration waits for the longest trajectory


# ----------------------------------------------------------------------------
# the samplers, as sample_posterior builds them
# ----------------------------------------------------------------------------
def build(net, x, y, x_test, *, method: str, form: str, temperature: float, dtype: str):
    """Model, model arguments and per-draw post-processing, exactly as in ``sample_posterior``.

    Must run inside ``jax.enable_x64(dtype == "float64")``.
    """
    from functools import partial

    import jax.numpy as jnp

    from bayes_attn import posterior as bp
    from bayes_attn.models import collapsed_model, path_model, token_model
    from bayes_attn.network import path_kernel_from_xi

    jdt = jnp.dtype(dtype)
    xi = net.xi(x).astype(jdt)
    xi_test = net.xi(x_test).astype(jdt)
    yj = jnp.asarray(y, jdt)
    consts = dict(heads=net.heads, widths=net.widths, variances=net.variances, temperature=temperature)
    if method == "collapsed":
        model, args = partial(collapsed_model, **consts), (path_kernel_from_xi(xi, xi, net.variances[0]), yj)
    elif form == "path":
        model, args = partial(path_model, **consts), (xi, yj)
    else:
        model = partial(token_model, **consts)
        args = (jnp.asarray(x, jdt), tuple(o.astype(jdt) for o in net.attention_matrices(x)), yj)
    collect = partial(bp._observables, xi=xi, xi_test=xi_test, widths=net.widths, full=method == "full",
                      keep_weights=False, keep_effective_weights=False)
    return model, args, collect, xi, xi_test, yj


def run_sampler(net, x, y, x_test, *, name: str, num_warmup: int, num_samples: int, a, timer: CompileTimer) -> dict:
    """Warm-up and sampling phases timed separately; ESS, steps and gradient timings."""
    import jax
    import numpy as np
    from numpyro.infer import MCMC, NUTS, init_to_sample

    from bayes_attn import posterior as bp

    method, form = SAMPLERS[name]
    with jax.enable_x64(a.dtype == "float64"):
        model, args, collect, xi, xi_test, yj = build(net, x, y, x_test, method=method, form=form,
                                                     temperature=a.temperature, dtype=a.dtype)
        kernel = NUTS(model, target_accept_prob=0.8, max_tree_depth=10, init_strategy=init_to_sample)
        mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=a.chains,
                    chain_method=a.chain_method, postprocess_fn=collect, progress_bar=False)
        t0 = time.perf_counter()
        mcmc.warmup(jax.random.key(a.seed), *args, extra_fields=FIELDS)
        jax.block_until_ready(mcmc.post_warmup_state)
        t1 = time.perf_counter()
        mcmc.run(mcmc.post_warmup_state.rng_key, *args, extra_fields=FIELDS)
        draws = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
        t2 = time.perf_counter()
        if method == "collapsed":  # as sample_posterior: exact draws of f | U, Y
            draws |= jax.block_until_ready(
                bp._conditional_outputs(draws["U"], jax.random.key(a.seed + 1), xi, yj, xi_test, net.variances[0], a.temperature))
        t3 = time.perf_counter()
        extra = mcmc.get_extra_fields(group_by_chain=True)
        grad = gradient_time(model, args, a.grad_calls)
    compile_sample, compile_post = timer.seconds_in(t1, t2), timer.seconds_in(t2, t3)
    tree = bp._to_datatree(net, draws, extra, x, y, a.temperature, method=method, form=form, dtype=a.dtype,
                           seconds=t3 - t0, num_warmup=num_warmup, seed=a.seed)
    s = bp.Posterior(tree, net).summary()
    rows = s.table[s.table.index.str.startswith(("U[", "f_test["))]
    ess = float(rows["ess_bulk"].min())
    steps = executed_steps(extra["num_steps"], a.chain_method)
    sample_s = (t2 - t1) - compile_sample
    post_s = (t3 - t2) - compile_post
    per_step = sample_s / steps
    return {
        "method": method, "form": form, "warmup": num_warmup, "draws_per_chain": num_samples, "chains": a.chains,
        "seconds_total": t3 - t0, "seconds_warmup": t1 - t0, "seconds_sampling": t2 - t1,
        "seconds_sampling_compile": compile_sample, "seconds_conditional_f": t3 - t2,
        "seconds_conditional_f_compile": compile_post,
        "min_ess_bulk": ess, "min_ess_bulk_U": float(rows[rows.index.str.startswith("U[")]["ess_bulk"].min()),
        "min_ess_bulk_f_test": float(rows[rows.index.str.startswith("f_test[")]["ess_bulk"].min()),
        "ess_per_s_total": ess / (t3 - t0), "ess_per_s_post_warmup": ess / (sample_s + post_s),
        "max_rhat": float(rows["r_hat"].max()), "divergences": s.divergences,
        "mean_leapfrog_steps_per_draw": s.mean_steps, "max_tree_depth_hits": int((np.asarray(extra["num_steps"]) >= 1023).sum()),
        "executed_steps": steps, "seconds_per_step": per_step,
        **grad,
        "overhead_vs_grad_call": per_step / grad["seconds_per_grad_call"],
        "overhead_vs_grad_loop": per_step / grad["seconds_per_grad_loop"],
    }


def gradient_time(model, args, n_calls: int) -> dict:
    """Seconds per jitted ``value_and_grad`` of the potential: per Python call, and inside a ``fori_loop``."""
    import jax
    from numpyro.infer.util import initialize_model

    info = initialize_model(jax.random.key(1), model, model_args=args)
    z = info.param_info.z
    vg = jax.jit(jax.value_and_grad(info.potential_fn))
    jax.block_until_ready(vg(z))  # compile
    best_call = math.inf
    for _ in range(3):  # best of 3 blocks: robust to a busy machine
        t = time.perf_counter()
        for _ in range(n_calls):
            out = jax.block_until_ready(vg(z))
        best_call = min(best_call, (time.perf_counter() - t) / n_calls)

    @jax.jit
    def loop(z0):
        def body(i, c):
            zz, acc = c
            v, g = jax.value_and_grad(info.potential_fn)(zz)
            return jax.tree.map(lambda p, q: p - 1e-30 * q, zz, g), acc + v  # dependent chain of evaluations

        return jax.lax.fori_loop(0, n_calls, body, (z0, 0.0 * out[0]))

    jax.block_until_ready(loop(z))  # compile
    best_loop = math.inf
    for _ in range(3):
        t = time.perf_counter()
        jax.block_until_ready(loop(z))
        best_loop = min(best_loop, (time.perf_counter() - t) / n_calls)
    return {"seconds_per_grad_call": best_call, "seconds_per_grad_loop": best_loop, "grad_calls_timed": n_calls}


# ----------------------------------------------------------------------------
# storage
# ----------------------------------------------------------------------------
def storage_formulas(heads, N: int, N0: int, P: int, P_test: int, itemsize: int = 8) -> dict:
    """Bytes per draw: stored observables (``U``, ``f_train``, ``f_test``) and raw weights, all widths ``N``."""
    D = math.prod(heads)
    obs = D * D + P + P_test
    raw = N * N0 + sum(h * N * N for h in heads) + N
    return {"N": N, "stored_floats": obs, "stored_bytes": obs * itemsize, "raw_weight_floats": raw,
            "raw_weight_bytes": raw * itemsize, "effective_weight_floats": D * N,
            "raw_over_stored": raw / obs}


def storage(a) -> dict:
    """Formulas at N = 10, 100, 1000 and a check against a real tree at N = 100."""
    import numpy as np

    import bayes_attn as ba
    from bayes_attn import markov

    P, P_test = 100, 1000
    task, net = markov.fig2c(100, n_train=P, n_test=P_test, seed=a.seed)
    x, y, xt, _ = task.generate()
    rows = [storage_formulas(net.heads, N, net.N0, P, P_test) for N in (10, 100, 1000)]
    draws = 3 if a.quick else 10
    post = ba.sample_posterior(net, x, y, temperature=a.temperature, x_test=xt, num_warmup=draws, num_samples=draws,
                               num_chains=1, seed=a.seed, method="collapsed", keep_weights=True, progress_bar=False)
    p = post.tree["posterior"]
    n = p.sizes["chain"] * p.sizes["draw"]
    measured_obs = sum(p[v].nbytes for v in ("U", "f_train", "f_test")) / n
    measured_raw = sum(p[v].nbytes for v in ("V0", *[f"V{l + 1}" for l in range(net.L)], "a")) / n
    f100 = rows[1]
    check = {"N": 100, "draws": n, "stored_bytes_measured": measured_obs, "stored_bytes_formula": f100["stored_bytes"],
             "raw_weight_bytes_measured": measured_raw, "raw_weight_bytes_formula": f100["raw_weight_bytes"],
             "agree": bool(np.isclose(measured_obs, f100["stored_bytes"]) and np.isclose(measured_raw, f100["raw_weight_bytes"]))}
    if not check["agree"]:
        raise AssertionError(f"storage formula disagrees with the tree: {check}")
    return {"P": P, "P_test": P_test, "per_width": rows, "check": check}


# ----------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict:
    a = parse_args(argv)
    if a.chain_method == "parallel":
        import numpyro

        numpyro.set_host_device_count(a.chains)
    import jax

    import bayes_attn  # noqa: F401  (float64 mode)
    from bayes_attn import markov

    timer = CompileTimer()
    load_before = os.getloadavg()
    task, net = markov.fig2c(a.width, n_train=a.n_train, n_test=a.n_test, seed=a.seed)
    x, y, xt, _ = task.generate()
    results = {}
    for name in a.samplers:
        W, S = (a.token_warmup, a.token_draws) if name == "token" else (a.warmup, a.draws)
        print(f"[{name}] warm-up {W}, draws {S} x {a.chains} chains ...", flush=True)
        r = run_sampler(net, x, y, xt, name=name, num_warmup=W, num_samples=S, a=a, timer=timer)
        results[name] = r
        print(f"[{name}] {r['seconds_total']:.1f} s, min ESS {r['min_ess_bulk']:.0f}, "
              f"{r['mean_leapfrog_steps_per_draw']:.0f} steps/draw, R-hat {r['max_rhat']:.3f}", flush=True)
    store = storage(a)
    ratios = {}
    for num, den in (("collapsed", "token"), ("collapsed", "path"), ("path", "token")):
        if num in results and den in results:
            for k in ("ess_per_s_total", "ess_per_s_post_warmup"):
                ratios[f"{k}:{num}/{den}"] = results[num][k] / results[den][k]
    out = {
        "problem": dict(network="markov.fig2c", width=a.width, P=a.n_train, P_test=a.n_test, temperature=a.temperature,
                        dtype=a.dtype, seed=a.seed, chains=a.chains, chain_method=a.chain_method),
        "quick": a.quick, "samplers": results, "ratios": ratios, "storage": store,
        "goals": {
            "collapsed_vs_token_ess_per_s_total_ge_50": ratios.get("ess_per_s_total:collapsed/token", math.nan) >= 50,
            "overhead_vs_grad_call_le_1.5": {k: r["overhead_vs_grad_call"] <= 1.5 for k, r in results.items()},
        },
        "environment": dict(platform=platform.platform(), python=sys.version.split()[0], jax=jax.__version__,
                            cpus=os.cpu_count(), load_avg_before=load_before, load_avg_after=os.getloadavg()),
    }
    print_report(out)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "sampler.json"
    path.write_text(json.dumps(out, indent=2))
    print(f"\nwrote {path}")
    return out


def print_report(out: dict) -> None:
    res = out["samplers"]
    cols = [
        ("warm-up", "warmup", "{:d}"), ("draws", "draws_per_chain", "{:d}"), ("total s", "seconds_total", "{:.1f}"),
        ("warm-up s", "seconds_warmup", "{:.1f}"), ("sample s", "seconds_sampling", "{:.1f}"),
        ("compile s", "seconds_sampling_compile", "{:.1f}"), ("cond-f s", "seconds_conditional_f", "{:.2f}"),
        ("min ESS", "min_ess_bulk", "{:.0f}"), ("ESS/s tot", "ess_per_s_total", "{:.3g}"),
        ("ESS/s post", "ess_per_s_post_warmup", "{:.3g}"), ("R-hat", "max_rhat", "{:.3f}"),
        ("div", "divergences", "{:d}"), ("steps/draw", "mean_leapfrog_steps_per_draw", "{:.0f}"),
        ("us/step", "seconds_per_step", "{:.1f}"), ("us/grad call", "seconds_per_grad_call", "{:.1f}"),
        ("us/grad loop", "seconds_per_grad_loop", "{:.1f}"), ("step/call", "overhead_vs_grad_call", "{:.2f}"),
        ("step/loop", "overhead_vs_grad_loop", "{:.2f}"),
    ]
    print(f"\n{'':12s}" + "".join(f"{name:>13s}" for name in res))
    for label, key, fmt in cols:
        scale = 1e6 if key.startswith("seconds_per") else 1
        print(f"{label:12s}" + "".join(f"{fmt.format(r[key] * scale if scale != 1 else r[key]):>13s}" for r in res.values()))
    print("\nratios:")
    for k, v in out["ratios"].items():
        print(f"  {k:45s} {v:10.3g}")
    print("\nstorage per draw (float64), P = 100, 1000 test inputs:")
    for r in out["storage"]["per_width"]:
        print(f"  N = {r['N']:5d}: stored U+f_train+f_test {r['stored_bytes']:>10,d} B   raw weights "
              f"{r['raw_weight_bytes']:>12,d} B   raw/stored {r['raw_over_stored']:8.1f}")
    c = out["storage"]["check"]
    print(f"  check at N = 100 against a sampled tree: stored {c['stored_bytes_measured']:.0f} B, raw {c['raw_weight_bytes_measured']:.0f} B"
          f" -> {'agree' if c['agree'] else 'DISAGREE'}")
    print(f"\ngoals: {out['goals']}")
    print(f"load average before/after: {out['environment']['load_avg_before']} / {out['environment']['load_avg_after']}")


if __name__ == "__main__":
    main(sys.argv[1:])
