"""Benchmark: the exact sampler's fixed costs (compilation), NumPyro's per-chain loop against one program.

Problem: Fig. 2c Markov network at N = 100 (``markov.fig2c``), P = 100
training and 100 test sequences, temperature 0.01, float64, ``wishart``,
4 chains × (``--warmup`` + ``--draws``), chain method ``"sequential"`` (the
CPU default), the same data and seed for every run.

Two ways of running the chains, side by side in one process, each called
twice with the same shapes (the second call is what a repeated call costs):

- ``numpyro``: NumPyro's own ``"sequential"`` loop, which compiles NUTS once
  per chain and again on every call;
- ``one-program``: :func:`bayes_attn.samplers.nuts.one_program` (the
  library's ``"sequential"``): the chains under one ``lax.map``, NUTS
  compiled once per call for all chains.

Per run: wall time of warm-up + sampling, the JAX compile time inside it
(``jax.monitoring``, :class:`timing.CompileTimer`), the exact conditional
draws of ``f`` (compiled once per shape: the second call reuses the program),
the smallest bulk ESS over ``U`` and ``f_test`` (ArviZ) and ESS/s over the total.
With ``--collapsed`` also ``collapsed`` (one program, same settings) after the
``wishart`` runs, and the ratio of ESS/s (issue goal: ≥ 30×). For scale, the
same NUTS settings on an exactly Gaussian target of the ``wishart`` sampler's
dimension (14: independent standard normals): leapfrog steps per draw and
bulk ESS per draw of the coordinates and of their squares (``U`` is
quadratic in the sampled factors). The load average is recorded before and
after. Results:
``benchmarks/results/fixed_costs.json``.

Run (about 3 min on 2 quiet cores; ``--collapsed`` adds about 5)::

    .venv/bin/python benchmarks/bench_fixed_costs.py --collapsed

``--quick``: N = 10, 2 chains × (20 + 20) draws (seconds; numbers meaningless).
"""

from __future__ import annotations

import argparse

from harness import Record, parse, parser
from harness import headline as make_headline


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: N = 10, 2 chains × (20 + 20))."""
    p = parser("fixed_costs", __doc__, "N = 10, 2 chains x (20 + 20) draws")
    p.add_argument("--width", type=int, default=100)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--draws", type=int, default=500)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--temperature", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--collapsed", action="store_true",
                   help="also run 'collapsed' (one-program) with the same settings, for the ESS/s ratio (minutes)")
    a = parse(p, argv)
    if a.quick:
        a.width, a.warmup, a.draws, a.chains = 10, 20, 20, 2
    return a


def headline(results: dict) -> dict | None:
    """``wishart``'s second call: NumPyro's per-chain loop over the chains in one program (wall time)."""
    second = {r["mode"]: r["seconds_total"] for r in results["runs"]
              if r.get("sampler", "wishart") == "wishart" and r.get("call") == 2}
    return make_headline("wishart second call, per-chain loop / one program", second["numpyro"] / second["one-program"],
                         "x")


if __name__ == "__main__":
    ARGS = parse_args()  # before JAX loads: --help answers at once and writes nothing

import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

from harness import CompileTimer, one_blas_thread_here  # noqa: E402

from bayes_attn import samplers  # noqa: E402
from bayes_attn.diagnostics import EXTRA_FIELDS, sample_stats  # noqa: E402
from bayes_attn.posterior import Posterior  # noqa: E402
from bayes_attn.samplers import nuts  # noqa: E402
from bayes_attn.tasks import markov  # noqa: E402
from bayes_attn.theory.bartlett import num_parameters  # noqa: E402


def run_once(mode: str, net, x, y, xt, a, timer: CompileTimer, sampler: str = "wishart") -> dict:
    """One run of ``sampler`` in ``mode`` (``"numpyro"`` or ``"one-program"``), phases timed apart."""
    smp = samplers.get(sampler)
    settings = samplers.SamplerSettings(name=sampler, num_warmup=a.warmup, num_samples=a.draws, num_chains=a.chains,
                                        seed=a.seed, chain_method="sequential")
    t0 = time.perf_counter()
    inputs = samplers.prepare(net, x, y, xt, a.temperature, "float64")
    model, args = smp.build(inputs)
    mcmc = nuts.mcmc(smp, settings.replace(chain_method="sequential"), model, inputs, samplers.Storage(),
                     one_compile=(mode == "one-program"))
    k_mcmc, k_cond = jax.random.split(jax.random.key(a.seed))
    t1 = time.perf_counter()
    mcmc.run(k_mcmc, *args, extra_fields=EXTRA_FIELDS)
    draws = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    t2 = time.perf_counter()
    draws |= jax.block_until_ready(smp.conditional(draws, k_cond, inputs, samplers.Storage()))
    t3 = time.perf_counter()
    post = Posterior.from_draws(net, draws, sample_stats(mcmc.get_extra_fields(group_by_chain=True)), x, y,
                                a.temperature)
    table = post.summary().table
    ess = float(table.loc[table.index.str.startswith(("U[", "f_test[")), "ess_bulk"].min())
    total = t3 - t0
    return {
        "sampler": sampler,
        "mode": mode,
        "seconds_total": total,
        "seconds_setup": t1 - t0,
        "seconds_nuts": t2 - t1,
        "seconds_nuts_compile": timer.seconds_in(t1, t2),
        "seconds_conditional_f": t3 - t2,
        "seconds_conditional_f_compile": timer.seconds_in(t2, t3),
        "min_ess_bulk_U_f_test": ess,
        "ess_per_s_total": ess / total,
        "ess_per_s_without_compile": ess / (total - timer.seconds_in(t0, t3)),
        "mean_leapfrog_steps_per_draw": float(post.tree["sample_stats"]["n_steps"].mean()),
    }


def gaussian_reference(dim: int, a) -> dict:
    """NUTS with the samplers' settings on ``dim`` independent standard normals: steps and ESS per draw."""
    import arviz_stats as azs
    from numpyro.infer import MCMC, NUTS

    settings = samplers.SamplerSettings(name="wishart")  # target_accept and max_tree_depth as the samplers'
    kern = NUTS(potential_fn=lambda z: 0.5 * jnp.sum(z["x"] ** 2), target_accept_prob=settings.target_accept,
                max_tree_depth=settings.max_tree_depth)
    mcmc = MCMC(kern, num_warmup=a.warmup, num_samples=a.draws, num_chains=a.chains, chain_method="sequential",
                progress_bar=False)
    k_init, k_run = jax.random.split(jax.random.key(a.seed))
    init = {"x": jax.random.uniform(k_init, (a.chains, dim), minval=-2.0, maxval=2.0)}  # as init_to_uniform
    mcmc.run(k_run, init_params=init, extra_fields=("num_steps",))
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"])  # [chains, draws, dim]
    n = a.chains * a.draws
    return {"dim": dim, "mean_leapfrog_steps_per_draw": float(np.mean(mcmc.get_extra_fields()["num_steps"])),
            "min_ess_bulk_per_draw_x": float(np.min(azs.ess(x, method="bulk"))) / n,
            "min_ess_bulk_per_draw_x_squared": float(np.min(azs.ess(x**2, method="bulk"))) / n}


def main(a: argparse.Namespace) -> dict:
    """Both modes twice, ``collapsed`` with ``--collapsed``, the Gaussian reference; the envelope."""
    record = Record(a, network="markov.fig2c", P=100, P_test=100, dtype="float64", sampler="wishart",
                    chain_method="sequential")
    task, net = markov.fig2c(width=a.width, n_train=100, n_test=100, seed=a.seed)
    x, y, xt, _ = task.generate()
    timer = CompileTimer()
    runs = []
    with one_blas_thread_here():
        for mode in ("numpyro", "one-program", "numpyro", "one-program"):
            r = run_once(mode, net, x, y, xt, a, timer)
            r["call"] = 1 + sum(q["mode"] == mode for q in runs)
            runs.append(r)
            print(f"{mode:12s} call {r['call']}: total {r['seconds_total']:6.1f} s  NUTS {r['seconds_nuts']:6.1f} s "
                  f"(compile {r['seconds_nuts_compile']:5.1f})  f {r['seconds_conditional_f']:4.1f} s "
                  f"(compile {r['seconds_conditional_f_compile']:4.1f})  ESS {r['min_ess_bulk_U_f_test']:6.0f}  "
                  f"ESS/s {r['ess_per_s_total']:6.1f}", flush=True)
    ratio = None
    if a.collapsed:
        with one_blas_thread_here():
            c = run_once("one-program", net, x, y, xt, a, timer, sampler="collapsed")
        c["call"] = 1
        runs.append(c)
        w = next(r for r in runs if r["sampler"] == "wishart" and r["mode"] == "one-program" and r["call"] == 1)
        ratio = {"ess_per_s_total": w["ess_per_s_total"] / c["ess_per_s_total"],
                 "ess_per_s_without_compile": w["ess_per_s_without_compile"] / c["ess_per_s_without_compile"]}
        print(f"collapsed: total {c['seconds_total']:.1f} s, ESS {c['min_ess_bulk_U_f_test']:.0f}, "
              f"ESS/s {c['ess_per_s_total']:.2f}; wishart/collapsed ESS/s (first calls): {ratio}", flush=True)
    ref = gaussian_reference(num_parameters(net.heads, net.widths), a)
    print(f"Gaussian target of dimension {ref['dim']}: {ref['mean_leapfrog_steps_per_draw']:.2f} steps per draw, "
          f"min bulk ESS per draw {ref['min_ess_bulk_per_draw_x']:.2f} (coordinates), "
          f"{ref['min_ess_bulk_per_draw_x_squared']:.2f} (squares)", flush=True)
    results = {"runs": runs, "wishart/collapsed (one-program, first call each)": ratio, "gaussian_reference": ref}
    record.write(results, headline=headline(results))
    return results


if __name__ == "__main__":
    main(ARGS)
