"""GPU benchmark: the collapsed and wishart samplers on the Fig. 2c network at large width.

For every sampler and width of ``--runs`` (default: ``collapsed`` at
N = 100, 300, 1000 and ``wishart`` at N = 100, 1000, 10000) the script samples
the posterior of the Fig. 2c Markov network (P = 100 training sequences,
``--n-test`` test sequences, temperature 0.01, 4 chains, float32,
``chain_method="vectorized"``: one device; use ``parallel`` when there is one
device per chain). Each sampler comes from the registry by name
(:func:`bayes_attn.samplers.get`) and runs exactly as in
:func:`bayes_attn.sample_posterior`: ``samplers.prepare``, ``Sampler.build``,
``Sampler.observables`` per draw and ``Sampler.conditional`` afterwards
(``f_train``, ``f_test`` drawn exactly given ``U``). The script drives
``numpyro.infer.MCMC`` itself only to time warm-up and sampling separately
(compilation reported separately, from ``jax.monitoring``).

Per run: set-up, warm-up, sampling and conditional-draw wall times, minimum
ESS and maximum split R-hat over the upper triangle of ``U`` and ``f`` at
every test input, ESS/s with and without warm-up, leapfrog steps per draw,
divergences, seconds per step, the posterior mean of ``U``. Diagnostics come
from ``numpyro.diagnostics`` (Stan's ESS and split R-hat on the raw draws,
not ArviZ's rank-normalised ones), so the script runs without ArviZ (the GPU
machine has JAX, NumPyro and xarray only; importing ``bayes_attn`` does not
import ArviZ, nor change JAX's precision).

Results go to ``--out`` (default ``$OUT/gpu_samplers.json`` where ``OUT`` is set, else
``benchmarks/results/gpu_samplers.json``), rewritten after every run so that a run cut short keeps what it
finished.

Run::

    OUT=/path/to/out python benchmarks/gpu_samplers.py       # GPU
    .venv/bin/python benchmarks/gpu_samplers.py --quick      # CPU smoke test: N = 4, 8 (and wishart at 100)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from harness import Record, parser, resolve_out
from harness import headline as make_headline

DEFAULT_RUNS = ("collapsed=100,300,1000", "wishart=100,1000,10000")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (``--quick``: N = 4, 8 (and ``wishart`` at 100), 2 chains × (30 + 30))."""
    ap = parser("gpu_samplers", __doc__, "N = 4, 8 (and wishart at 100), 2 chains x (30 + 30) draws")
    ap.add_argument("--runs", nargs="+", default=list(DEFAULT_RUNS), metavar="SAMPLER=N,N,...",
                    help="registered samplers and their widths")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--chain-method", default="vectorized", choices=["vectorized", "parallel", "sequential"],
                    help="parallel needs one device per chain")
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--draws", type=int, default=500, help="draws per chain")
    ap.add_argument("--n-train", type=int, default=100)
    ap.add_argument("--n-test", type=int, default=100)
    ap.add_argument("--temperature", type=float, default=0.01)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--target-accept", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.quick:
        a.runs, a.chains, a.warmup, a.draws = ["collapsed=4,8", "wishart=4,8,100"], 2, 30, 30
        a.n_train, a.n_test = 12, 6
    if a.out is None and os.environ.get("OUT") and not a.quick:
        a.out = Path(os.environ["OUT"]) / "gpu_samplers.json"
    a.runs = [parse_run(s) for s in a.runs]
    return resolve_out(a)


def headline(results: dict) -> dict | None:
    """``wishart``'s ESS/s (total) at the largest width run."""
    runs = [r for r in results["runs"] if r["sampler"] == "wishart"]
    r = max(runs, key=lambda r: r["N"]) if runs else None
    return r and make_headline(f"wishart ESS/s on the device, Fig. 2c N = {r['N']}", r["ess_per_s_total"], "1/s")


def parse_run(s: str) -> tuple[str, list[int]]:
    """``"SAMPLER=N,N,..."`` as ``(sampler, [N, ...])``."""
    name, _, widths = s.partition("=")
    return name, [int(n) for n in widths.split(",") if n]


if __name__ == "__main__":
    ARGS = parse_args(None)  # before JAX loads: --help answers at once and writes nothing

import math  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
from harness import CompileTimer, timed_nuts, x64  # noqa: E402
from numpyro.diagnostics import effective_sample_size, split_gelman_rubin  # noqa: E402

from bayes_attn import markov, samplers  # noqa: E402


def diagnostics(U, f_test) -> dict:
    """Min ESS and max split R-hat (``numpyro.diagnostics``) over the upper triangle of ``U`` and ``f_test``."""
    U, f_test = np.asarray(U, np.float64), np.asarray(f_test, np.float64)
    iu = np.triu_indices(U.shape[-1])
    out = {}
    for name, v in (("U", U[..., iu[0], iu[1]]), ("f_test", f_test)):
        ess = np.asarray(effective_sample_size(v))
        rhat = np.asarray(split_gelman_rubin(v)) if v.shape[0] > 1 else np.full(v.shape[2:], np.nan)
        out[name] = {"min_ess": float(ess.min()), "max_rhat": float(np.nanmax(rhat)) if v.shape[0] > 1 else math.nan}
    out["min_ess"] = min(out["U"]["min_ess"], out["f_test"]["min_ess"])
    out["max_rhat"] = max(out["U"]["max_rhat"], out["f_test"]["max_rhat"])
    return out


def run(name: str, N: int, a, timer: CompileTimer) -> dict:
    """One sampler at width ``N``: timings, ESS/s, R-hat, sampler statistics."""
    smp = samplers.get(name)
    options = samplers.Storage()
    task, net = markov.fig2c(width=N, n_train=a.n_train, n_test=a.n_test, seed=a.seed)
    x, y, xt, _ = task.generate()
    with x64(a.dtype == "float64"):
        t_setup = time.perf_counter()
        inputs = samplers.prepare(net, x, y, xt, a.temperature, a.dtype)
        model, args = smp.build(inputs)
        jax.block_until_ready(args)
        t_setup = time.perf_counter() - t_setup
        mcmc, draws, extra, (t0, t1, t2, t3) = timed_nuts(
            smp, inputs, model, args, options, num_warmup=a.warmup, num_samples=a.draws, num_chains=a.chains,
            chain_method=a.chain_method, target_accept=a.target_accept, seed=a.seed,
            extra_fields=("diverging", "num_steps", "adapt_state.step_size"))
        n_params = int(sum(np.size(v) for v in jax.tree.leaves(mcmc.post_warmup_state.z)) // a.chains)
    U = np.asarray(draws["U"], np.float64)
    steps = np.asarray(extra["num_steps"])
    d = diagnostics(U, draws["f_test"])
    comp_w, comp_s, comp_f = timer.seconds_in(t0, t1), timer.seconds_in(t1, t2), timer.seconds_in(t2, t3)
    sample_s = (t2 - t1) - comp_s
    post_s = (t3 - t2) - comp_f
    steps_exec = int(steps.max(axis=0).sum()) if a.chain_method == "vectorized" else (
        int(steps.sum(axis=1).max()) if a.chain_method == "parallel" else int(steps.sum()))
    total = t_setup + (t3 - t0)
    return {
        "sampler": name, "N": N, "sampled_dimension": n_params, "chains": a.chains, "warmup": a.warmup,
        "draws_per_chain": a.draws, "dtype": str(jnp.dtype(a.dtype)),
        "seconds_setup": t_setup, "seconds_warmup": t1 - t0, "seconds_warmup_compile": comp_w,
        "seconds_sampling": t2 - t1, "seconds_sampling_compile": comp_s,
        "seconds_conditional_f": t3 - t2, "seconds_conditional_f_compile": comp_f,
        "seconds_total": total,
        **d,
        "ess_per_s_total": d["min_ess"] / total,
        "ess_per_s_post_warmup": d["min_ess"] / max(sample_s + post_s, 1e-9),
        "mean_leapfrog_steps_per_draw": float(steps.mean()),
        "tree_depth_hits": int((steps >= 1023).sum()),
        "divergences": int(np.asarray(extra["diverging"]).sum()),
        "step_size_mean": float(np.asarray(extra["adapt_state.step_size"]).mean()),
        "seconds_per_step": sample_s / max(steps_exec, 1),
        "U_mean": U.mean(axis=(0, 1)).tolist(),
        "finite": bool(np.all(np.isfinite(U)) and np.all(np.isfinite(np.asarray(draws["f_test"])))),
    }


def main(a: argparse.Namespace) -> dict:
    """Every run, the envelope rewritten after each."""
    for name, _ in a.runs:
        samplers.get(name)  # a clear error for an unknown sampler
    if a.chain_method == "parallel":
        numpyro.set_host_device_count(a.chains)
    record = Record(a, network="markov.fig2c", runs={n: w for n, w in a.runs})
    device = {"devices": [str(d) for d in jax.devices()], "backend": jax.default_backend()}
    timer = CompileTimer()
    results = {"runs": []}
    print(f"backend {jax.default_backend()}, devices {jax.devices()}", flush=True)
    print(f"{'sampler':>10s} {'N':>6s} {'dim':>8s} {'total s':>8s} {'warm s':>7s} {'sample s':>8s} {'comp s':>7s}"
          f" {'cond-f s':>8s} {'min ESS':>8s} {'ESS/s tot':>9s} {'ESS/s post':>10s} {'R-hat':>6s} {'steps':>6s}"
          f" {'div':>4s}", flush=True)
    for name, widths in a.runs:
        for N in widths:
            r = run(name, N, a, timer)
            results["runs"].append(r)
            record.write(results, headline=headline(results), hardware=device)  # keep partial results
            print(f"{name:>10s} {N:6d} {r['sampled_dimension']:8d} {r['seconds_total']:8.1f} {r['seconds_warmup']:7.1f}"
                  f" {r['seconds_sampling']:8.1f} {r['seconds_warmup_compile'] + r['seconds_sampling_compile']:7.1f}"
                  f" {r['seconds_conditional_f']:8.2f} {r['min_ess']:8.0f} {r['ess_per_s_total']:9.3g}"
                  f" {r['ess_per_s_post_warmup']:10.3g} {r['max_rhat']:6.3f} {r['mean_leapfrog_steps_per_draw']:6.0f}"
                  f" {r['divergences']:4d}", flush=True)
    return results


if __name__ == "__main__":
    main(ARGS)
