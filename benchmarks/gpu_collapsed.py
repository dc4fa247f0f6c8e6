"""GPU benchmark: collapsed NUTS on the Fig. 2c network at large width.

One call samples the collapsed posterior (``V0`` integrated out) of the
Fig. 2c Markov network for every width in ``--widths`` (default 100, 300,
1000): P = 100 training sequences, ``--n-test`` test sequences, temperature
0.01, 4 chains, float32, ``chain_method="vectorized"`` (one device; use
``parallel`` when there is one device per chain). Per width it records the
warm-up and sampling wall times (compilation reported separately, from
``jax.monitoring``), the exact conditional draws of ``f``, the minimum ESS
and maximum split R-hat over the invariant observables (upper triangle of
``U`` and ``f`` at every test input, ``f`` drawn exactly given ``U`` as
``sample_posterior`` does), and ESS/s. Results go to
``$OUT/gpu_collapsed.json`` (``OUT`` defaults to ``./gpu_out``), rewritten
after every width so that a run cut short keeps what it finished.

It needs no ArviZ: the script drives ``numpyro.infer.MCMC`` itself with
:func:`bayes_attn.models.collapsed_model` and the functions of
:mod:`bayes_attn.network`, and computes diagnostics with
``numpyro.diagnostics`` (``effective_sample_size``, ``split_gelman_rubin``:
Stan's ESS/R-hat on the raw draws, not ArviZ's rank-normalised bulk ESS).
The exact conditional draws of ``f`` are
``bayes_attn.posterior._conditional_outputs`` (``posterior`` imports ArviZ
lazily). The modules are loaded without the package ``__init__``, which
would switch on float64 (see :func:`_load_bayes_attn`).

Run::

    python benchmarks/gpu_collapsed.py                  # GPU: N in {100, 300, 1000}
    python benchmarks/gpu_collapsed.py --quick          # CPU smoke test, tiny sizes
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Collapsed NUTS on the Fig. 2c network at large width (GPU).")
    ap.add_argument("--quick", action="store_true", help="tiny sizes for a CPU smoke test")
    ap.add_argument("--widths", type=int, nargs="+", default=[100, 300, 1000])
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
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_out")))
    a = ap.parse_args(argv)
    if a.quick:
        a.widths, a.chains, a.warmup, a.draws, a.n_train, a.n_test = [4, 8], 2, 30, 30, 12, 6
    return a


def _load_bayes_attn():
    """Import ``network``, ``models``, ``markov`` and ``posterior`` of ``bayes_attn`` without the package ``__init__``.

    ``bayes_attn/__init__.py`` switches JAX to float64 and imports every
    module (theory, comparison); neither is wanted here. A bare package
    module pointing at the source folder lets the submodules' relative
    imports work. ``posterior`` imports ArviZ only inside the functions that
    build or summarise trees, none of which is used here.
    """
    if "bayes_attn" not in sys.modules:
        pkg = types.ModuleType("bayes_attn")
        pkg.__path__ = [str(ROOT / "bayes_attn")]
        sys.modules["bayes_attn"] = pkg
    network = importlib.import_module("bayes_attn.network")
    models = importlib.import_module("bayes_attn.models")
    markov = importlib.import_module("bayes_attn.markov")
    posterior = importlib.import_module("bayes_attn.posterior")
    return network, models, markov, posterior


class CompileTimer:
    """Union of the JAX trace/lower/compile intervals reported through ``jax.monitoring``."""

    def __init__(self):
        import jax.monitoring

        self.intervals: list[tuple[float, float]] = []
        try:
            jax.monitoring.register_event_duration_secs_listener(self._listen)
        except AttributeError:  # very old JAX: compile time not separated
            pass

    def _listen(self, event: str, duration: float, **kwargs) -> None:
        if event in COMPILE_EVENTS:
            end = time.perf_counter()
            self.intervals.append((end - duration, end))

    def seconds_in(self, t0: float, t1: float) -> float:
        iv = sorted((max(a, t0), min(b, t1)) for a, b in self.intervals if b > t0 and a < t1)
        total, cur = 0.0, None
        for a, b in iv:
            if cur is None or a > cur[1]:
                total += 0.0 if cur is None else cur[1] - cur[0]
                cur = [a, b]
            else:
                cur[1] = max(cur[1], b)
        return total + (0.0 if cur is None else cur[1] - cur[0])


def diagnostics(U, f_test) -> dict:
    """Min ESS and max split R-hat (``numpyro.diagnostics``) over the upper triangle of ``U`` and ``f_test``."""
    import numpy as np
    from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

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


def run_width(N: int, a, mods, timer: CompileTimer) -> dict:
    """Collapsed NUTS at width ``N``: timings, ESS/s, R-hat, sampler statistics."""
    from functools import partial

    import jax
    import jax.numpy as jnp
    import numpy as np
    from numpyro.infer import MCMC, NUTS, init_to_sample

    network, models, markov, posterior = mods
    task, net = markov.fig2c(N, n_train=a.n_train, n_test=a.n_test, seed=a.seed)
    x, y, xt, _ = task.generate()
    dt = jnp.dtype(a.dtype)
    t_setup = time.perf_counter()
    xi, xi_t = net.xi(x).astype(dt), net.xi(xt).astype(dt)
    C = network.path_kernel_from_xi(xi, xi, net.variances[0])
    yj = jnp.asarray(y, dt)
    model = partial(models.collapsed_model, heads=net.heads, widths=net.widths, variances=net.variances,
                    temperature=a.temperature)

    def collect(z):  # as sample_posterior: store U per draw, never the weights
        V = tuple(z[f"V{l + 1}"] for l in range(net.L))
        return {"U": models.order_parameter(network.effective_weights(V, z["a"], net.widths))}

    jax.block_until_ready(C)
    t_setup = time.perf_counter() - t_setup
    kernel = NUTS(model, target_accept_prob=a.target_accept, max_tree_depth=10, init_strategy=init_to_sample)
    mcmc = MCMC(kernel, num_warmup=a.warmup, num_samples=a.draws, num_chains=a.chains, chain_method=a.chain_method,
                postprocess_fn=collect, progress_bar=False)
    fields = ("diverging", "num_steps", "adapt_state.step_size")
    t0 = time.perf_counter()
    mcmc.warmup(jax.random.key(a.seed), C, yj, extra_fields=fields)
    jax.block_until_ready(mcmc.post_warmup_state)
    t1 = time.perf_counter()
    mcmc.run(mcmc.post_warmup_state.rng_key, C, yj, extra_fields=fields)
    U = jax.block_until_ready(mcmc.get_samples(group_by_chain=True)["U"])
    t2 = time.perf_counter()
    f = jax.block_until_ready(
        posterior._conditional_outputs(U, jax.random.key(a.seed + 1), xi, yj, xi_t, net.variances[0], a.temperature))
    t3 = time.perf_counter()
    extra = mcmc.get_extra_fields(group_by_chain=True)
    steps = np.asarray(extra["num_steps"])
    d = diagnostics(U, f["f_test"])
    comp_w, comp_s, comp_f = timer.seconds_in(t0, t1), timer.seconds_in(t1, t2), timer.seconds_in(t2, t3)
    sample_s = (t2 - t1) - comp_s
    post_s = (t3 - t2) - comp_f
    steps_exec = int(steps.max(axis=0).sum()) if a.chain_method == "vectorized" else (
        int(steps.sum(axis=1).max()) if a.chain_method == "parallel" else int(steps.sum()))
    n_params = sum(h * net.widths[l + 1] * net.widths[l] for l, h in enumerate(net.heads)) + net.widths[-1]
    return {
        "N": N, "upper_weights": n_params, "chains": a.chains, "warmup": a.warmup, "draws_per_chain": a.draws,
        "seconds_setup": t_setup, "seconds_warmup": t1 - t0, "seconds_warmup_compile": comp_w,
        "seconds_sampling": t2 - t1, "seconds_sampling_compile": comp_s,
        "seconds_conditional_f": t3 - t2, "seconds_conditional_f_compile": comp_f,
        "seconds_total": t3 - t0,
        **d,
        "ess_per_s_total": d["min_ess"] / (t3 - t0),
        "ess_per_s_post_warmup": d["min_ess"] / (sample_s + post_s),
        "mean_leapfrog_steps_per_draw": float(steps.mean()),
        "tree_depth_hits": int((steps >= 1023).sum()),
        "divergences": int(np.asarray(extra["diverging"]).sum()),
        "step_size_mean": float(np.asarray(extra["adapt_state.step_size"]).mean()),
        "seconds_per_step": sample_s / max(steps_exec, 1),
        "U_mean": np.asarray(U, np.float64).mean(axis=(0, 1)).tolist(),
        "finite": bool(np.all(np.isfinite(np.asarray(U))) and np.all(np.isfinite(np.asarray(f["f_test"])))),
    }


def main(argv: list[str] | None = None) -> dict:
    a = parse_args(argv)
    import jax

    if a.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    mods = _load_bayes_attn()
    import numpyro

    timer = CompileTimer()
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "gpu_collapsed.json"
    out = {
        "problem": dict(network="markov.fig2c", P=a.n_train, P_test=a.n_test, temperature=a.temperature, dtype=a.dtype,
                        chains=a.chains, chain_method=a.chain_method, warmup=a.warmup, draws_per_chain=a.draws,
                        seed=a.seed, target_accept=a.target_accept),
        "quick": a.quick,
        "environment": dict(platform=platform.platform(), python=sys.version.split()[0], jax=jax.__version__,
                            numpyro=numpyro.__version__, devices=[str(d) for d in jax.devices()],
                            backend=jax.default_backend()),
        "widths": [],
    }
    print(f"backend {jax.default_backend()}, devices {jax.devices()}", flush=True)
    print(f"{'N':>6s} {'total s':>9s} {'warm s':>8s} {'sample s':>9s} {'comp s':>7s} {'cond-f s':>8s} {'min ESS':>8s}"
          f" {'ESS/s tot':>9s} {'ESS/s post':>10s} {'R-hat':>6s} {'steps':>6s} {'div':>4s}", flush=True)
    for N in a.widths:
        r = run_width(N, a, mods, timer)
        out["widths"].append(r)
        path.write_text(json.dumps(out, indent=2))  # keep partial results
        print(f"{N:6d} {r['seconds_total']:9.1f} {r['seconds_warmup']:8.1f} {r['seconds_sampling']:9.1f}"
              f" {r['seconds_warmup_compile'] + r['seconds_sampling_compile']:7.1f} {r['seconds_conditional_f']:8.2f}"
              f" {r['min_ess']:8.0f} {r['ess_per_s_total']:9.3g} {r['ess_per_s_post_warmup']:10.3g} {r['max_rhat']:6.3f}"
              f" {r['mean_leapfrog_steps_per_draw']:6.0f} {r['divergences']:4d}", flush=True)
    print(f"wrote {path}")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
