"""The stages of ``benchmarks/gpu.py``, run inside its worker processes (one per platform, JAX's platform set before
this module loads): each ``stage_<kind>(**params)`` returns a JSON-ready dict.

Every stage works on the image task's scale: the landed Fig. 3 model (``inference/results/fig3``, the spec
``models/omniglot_oneshot_plain.toml`` it was trained with; never retrained: a model whose training settings differ
is refused), its theory training episodes (P = 600, 48 tokens of N0 = 64), 16 attention paths, the test episodes as
``x_test`` and the temperature its scan chose on validation at each width. ``p_train`` and ``n_test`` take the first
episodes only (``--quick``). A result's ``compare`` names the numbers ``gpu.py`` puts side by side across platforms:
``{name: [value, "lower" | "higher"]}`` (which is better).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import statistics
import time

import jax
import numpy as np
from harness import REPO, CompileTimer, one_blas_thread_here, x64

LANDED = REPO / "inference/results/fig3"
LANDED_SPEC = REPO / "models/omniglot_oneshot_plain.toml"
PAPER_SPEC = REPO / "models/omniglot_paper.toml"


REPORT = None
"""Set by ``gpu.py``'s worker: a function sending a stage's partial result (kept where the stage is stopped)."""


def partial(**fields) -> None:
    """Send what a stage has measured so far (nothing outside a worker)."""
    if REPORT is not None:
        REPORT(fields)


@functools.cache
def timer() -> CompileTimer:
    """The process's one listener for JAX's compile events."""
    return CompileTimer()


def timed(fn):
    """``(fn(), wall seconds, seconds JAX spent tracing, lowering and compiling inside it)``."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    t1 = time.perf_counter()
    return out, t1 - t0, timer().seconds_in(t0, t1)


@functools.cache
def image_problem(p_train: int | None, n_test: int):
    """``(net at width 10, x, y, x_test, {width: temperature})`` of the landed Fig. 3 model; seconds to build."""
    from bayes_attn.oneshot import (
        datasets,
        evaluation_episodes,
        load_oneshot_spec,
        load_pruning,
        to_network,
        train_model,
    )

    spec = load_oneshot_spec(LANDED_SPEC)
    meta = json.loads((LANDED / "model.json").read_text())
    if meta.get("training_hash") != spec.training_hash():  # train_model would train afresh: minutes
        raise ValueError(f"{LANDED}/model.npz was not trained with {LANDED_SPEC.name}'s settings")
    chosen = load_pruning(LANDED).temperatures.finite_width
    sets = datasets(spec, None)
    ev = evaluation_episodes(spec, sets)
    model = train_model(spec, LANDED, sets=sets, evaluation=ev)
    net, _ = to_network(model.params, model.config, width=10, variances=1.0)
    tr = ev.theory_train
    return net, tr.x[:p_train], tr.y[:p_train], ev.test.x[:n_test], chosen


FIG2C_TEMPERATURE = 0.01
"""The paper's temperature of Fig. 2c."""


@functools.cache
def fig2c_problem(p_train: int | None, n_test: int):
    """``(net at width 10, x, y, x_test, {width: temperature})`` of the Fig. 2c Markov network (``p_train``
    training sequences, 100 where ``None``), at the paper's temperature at every width: the exact samplers at
    large width, where their cost should not grow with ``N`` (``wishart``) or does (``collapsed``)."""
    import collections

    from bayes_attn import markov

    task, net = markov.fig2c(width=10, n_train=p_train or 100, n_test=n_test)
    x, y, xt, _ = task.generate()
    return net, x, y, xt, collections.defaultdict(lambda: FIG2C_TEMPERATURE)


PROBLEMS = {"image": image_problem, "fig2c": fig2c_problem}
"""The stages' problems by name: the image scale of Fig. 3 (the default) and the Fig. 2c network."""


def shapes(p_train: int | None, n_test: int, N: int, problem: str = "image") -> dict:
    """The problem's shapes at width ``N`` (and its temperature)."""
    net, x, _, xt, chosen = PROBLEMS[problem](p_train, n_test)
    return {"problem": problem, "N": N, "P": int(x.shape[0]), "tokens": int(x.shape[1]), "N0": int(x.shape[2]),
            "paths": int(net.D), "n_test": int(xt.shape[0]), "temperature": float(chosen[N])}


def problem_seconds(p_train: int | None, n_test: int, problem: str = "image") -> float:
    """Seconds to build the problem in this process (0 when it was built already)."""
    build = PROBLEMS[problem]
    if build.cache_info().currsize:
        return 0.0
    t0 = time.perf_counter()
    build(p_train, n_test)
    return time.perf_counter() - t0


# ----------------------------------------------------------------------------
# one leapfrog step: the wishart potential's gradient
# ----------------------------------------------------------------------------
def stage_gradient(widths: list[int], dtypes: list[str], calls: int, p_train: int | None, n_test: int) -> dict:
    """Seconds per jitted ``value_and_grad`` of the ``wishart`` potential (one leapfrog step of one chain), built by
    the registry's sampler as ``sample_posterior`` builds it, at each width and dtype: first call (compilation) and
    the median of ``calls`` calls."""
    from numpyro.infer.util import initialize_model

    from bayes_attn import samplers

    setup = problem_seconds(p_train, n_test)
    net, x, y, _, chosen = image_problem(p_train, n_test)
    out: dict = {"problem_seconds": setup, "cases": {}, "compare": {}}
    smp = samplers.get("wishart")
    for N in widths:
        for dtype in dtypes:
            with x64(dtype == "float64"), one_blas_thread_here():
                inputs = samplers.prepare(net.with_width(N), x, y, None, chosen[N], dtype)
                model, args = smp.build(inputs)
                info = initialize_model(jax.random.key(0), model, model_args=args)
                f = jax.jit(jax.value_and_grad(info.potential_fn))
                z = info.param_info.z
                _, first, _ = timed(lambda: f(z))  # noqa: B023
                times = [timed(lambda: f(z))[1] for _ in range(calls)]  # noqa: B023
            key = f"N={N} {dtype}"
            out["cases"][key] = {"first_call_seconds": first, "seconds_per_gradient": statistics.median(times),
                                 "min_seconds": min(times), "calls": calls, **shapes(p_train, n_test, N)}
            out["compare"][f"gradient {key}"] = [statistics.median(times), "lower"]
            partial(**out)
    return out


# ----------------------------------------------------------------------------
# sampling as the package samples
# ----------------------------------------------------------------------------
def stage_nuts(N: int, dtype: str, chains: int, warmup: int, samples: int, max_tree_depth: int,
               p_train: int | None, n_test: int, sampler: str = "wishart", seed: int = 0,
               chain_method: str = "auto", problem: str = "image") -> dict:
    """NUTS as :func:`bayes_attn.sample_posterior` runs it (``prepare``, ``build``, the expansion's start and metric,
    ``samplers.mcmc`` with the chain
    method ``chain_method`` resolves to, the exact conditional draws of ``f``), its phases
    timed apart with their compile seconds, the leapfrog steps of warm-up and sampling counted: useful gradients
    per second over all chains (the rate to compare across platforms, whatever the draws), bulk ESS and R-hat of
    ``U``; ``problem``: a name of :data:`PROBLEMS`."""
    from bayes_attn import samplers
    from bayes_attn.posterior import resolve_chain_method
    from bayes_attn.samplers import SamplerSettings, mcmc

    setup = problem_seconds(p_train, n_test, problem)
    net, x, y, xt, chosen = PROBLEMS[problem](p_train, n_test)
    smp, store = samplers.get(sampler), samplers.Storage()
    method = resolve_chain_method(chain_method, chains)
    cfg = SamplerSettings(name=sampler, num_warmup=warmup, num_samples=samples, num_chains=chains, seed=seed,
                          dtype=dtype, max_tree_depth=max_tree_depth, chain_method=method)
    fields = ("num_steps", "diverging", "accept_prob")
    t: dict = {}
    with x64(dtype == "float64"), one_blas_thread_here():
        inputs = samplers.prepare(net.with_width(N), x, y, xt, chosen[N], dtype)
        (model, args), *t["build"] = timed(lambda: smp.build(inputs))
        try:
            if smp.start is None:  # as sample_posterior: a sampler without the expansion's start starts at the prior
                raise ValueError(f"{sampler} has no expansion start")
            start, *t["start"] = timed(lambda: smp.start(inputs))
            started = "expansion"
        except ValueError as err:  # as sample_posterior: the prior's start
            start, t["start"], started = None, (0.0, 0.0), f"prior ({err})"
        mcmc = mcmc(smp, cfg, model, inputs, store, start=start)
        k_mcmc, k_cond = jax.random.split(jax.random.key(seed))
        _, *t["warmup"] = timed(lambda: mcmc.warmup(k_mcmc, *args, extra_fields=fields, collect_warmup=True)
                                or mcmc.post_warmup_state)
        warm_steps = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_steps"])
        partial(chain_method=method, start=started, seconds=t, gradients_warmup=int(warm_steps.sum()))
        draws, *t["sampling"] = timed(lambda: mcmc.run(mcmc.post_warmup_state.rng_key, *args, extra_fields=fields)
                                      or mcmc.get_samples(group_by_chain=True))
        extra = mcmc.get_extra_fields(group_by_chain=True)
        _, *t["conditional"] = timed(lambda: smp.conditional(draws, k_cond, inputs, store))
    steps = np.asarray(extra["num_steps"])
    executed = {"vectorized": steps.max(axis=0).sum(), "parallel": steps.sum(axis=1).max()}.get(method, steps.sum())
    run = t["sampling"][0] - t["sampling"][1]
    total = sum(w for w, _ in t.values())
    compiled = sum(c for _, c in t.values())
    d = u_diagnostics(np.asarray(draws["U"], np.float64))
    out = {**shapes(p_train, n_test, N, problem), "sampler": sampler, "dtype": dtype, "chains": chains,
           "warmup": warmup, "draws_per_chain": samples, "max_tree_depth": max_tree_depth, "chain_method": method,
           "start": started,
           "problem_seconds": setup, **{f"seconds_{k}": w for k, (w, _) in t.items()},
           **{f"compile_seconds_{k}": c for k, (_, c) in t.items()}, "wall_seconds": total,
           "compile_seconds": compiled, "run_seconds": total - compiled,
           "gradients_warmup": int(warm_steps.sum()), "gradients_sampling": int(steps.sum()),
           "gradients_total": int(warm_steps.sum() + steps.sum()), "gradients_per_s": float(steps.sum()) / run,
           "seconds_per_step": run / max(int(executed), 1), "mean_steps": float(steps.mean()),
           "max_steps": int(steps.max()), "divergences": int(np.asarray(extra["diverging"]).sum()),
           "acceptance": float(np.asarray(extra["accept_prob"]).mean()), **d,
           "ess_per_s_total": d["min_ess_bulk_U"] / total, "ess_per_s_run": d["min_ess_bulk_U"] / (total - compiled)}
    out["compare"] = {"gradients_per_s": [out["gradients_per_s"], "higher"],
                      "seconds_per_step": [out["seconds_per_step"], "lower"], "compile_seconds": [compiled, "lower"]}
    return out


def u_diagnostics(U: np.ndarray) -> dict:
    """Smallest bulk ESS and largest R-hat over the upper triangle of ``U`` ``[chain, draw, D, D]``: ArviZ's
    (rank-normalised, :func:`bayes_attn.diagnostics.summary_table`), or NumPyro's where ArviZ does not load."""
    iu = np.triu_indices(U.shape[-1])
    v = U[..., iu[0], iu[1]]
    try:
        import xarray as xr

        from bayes_attn.diagnostics import summary_table

        table = summary_table(xr.Dataset({"U": (("chain", "draw", "entry"), v)}))
        ess, rhat, how = table["ess_bulk"].min(), table["r_hat"].max(), "arviz"
    except ImportError as err:
        from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

        ess, rhat = np.min(effective_sample_size(v)), np.max(split_gelman_rubin(v))
        how = f"numpyro (no ArviZ: {err})"
    return {"min_ess_bulk_U": float(ess), "max_rhat_U": float(rhat), "diagnostics": how}


def stage_sample(sampler: str, N: int, dtype: str, chains: int, samples: int, p_train: int | None, n_test: int,
                 seed: int = 0) -> dict:
    """One call of :func:`bayes_attn.sample_posterior` with a guided sampler (``laplace-is``: ``samples``
    proposals per chain), timed, with its compile seconds, ArviZ's bulk ESS and R-hat of ``U``, ``k̂``."""
    import bayes_attn as ba

    setup = problem_seconds(p_train, n_test)
    net, x, y, xt, chosen = image_problem(p_train, n_test)
    settings = ba.SamplerSettings(name=sampler, num_chains=chains, num_samples=samples, dtype=dtype, seed=seed)
    post, wall, comp = timed(lambda: ba.sample_posterior(net.with_width(N), x, y, temperature=chosen[N], x_test=xt,
                                                          sampler=settings, progress_bar=False))
    t0 = time.perf_counter()
    s = post.summary()
    summary_s = time.perf_counter() - t0
    u = s.table[s.table.index.str.startswith("U[")]
    run = max(wall - comp, 1e-9)
    ess = float(u["ess_bulk"].min())
    out = {**shapes(p_train, n_test, N), "sampler": sampler, "dtype": dtype, "chains": chains,
           "draws_per_chain": samples, "chain_method": json.loads(post.tree.attrs["settings"]).get("chain_method"),
           "problem_seconds": setup, "wall_seconds": wall, "compile_seconds": comp, "run_seconds": run,
           "sampler_seconds": s.seconds, "summary_seconds": summary_s, "seconds_per_draw": run / (chains * samples),
           "min_ess_bulk_U": ess, "max_rhat_U": float(u["r_hat"].max()), "max_rhat_all": s.max_rhat,
           "min_ess_all": s.min_ess, "ess_per_s_total": ess / wall, "ess_per_s_run": ess / run,
           "pareto_k": s.pareto_k, "is_ess": s.is_ess, "failures": s.failures()}
    out["compare"] = {"seconds_per_draw": [out["seconds_per_draw"], "lower"], "compile_seconds": [comp, "lower"]}
    return out


# ----------------------------------------------------------------------------
# the theory
# ----------------------------------------------------------------------------
def stage_theory(widths: list[int], correction: bool, p_train: int | None, n_test: int) -> dict:
    """:func:`bayes_attn.solve_theory` (float64) at the first width twice (``first``: the first call in this worker,
    compilation included unless the samplers' expansion compiled its programs before; ``again``), then at the other
    widths; with ``correction``, also ``correction="laplace"`` (§8) at the first width twice."""
    from bayes_attn.theory import solve_theory

    setup = problem_seconds(p_train, n_test)
    net, x, y, _, chosen = image_problem(p_train, n_test)
    calls = [("none", widths[0], "first"), ("none", widths[0], "again"), *[("none", N, "again") for N in widths[1:]]]
    if correction:
        calls += [("laplace", widths[0], "first"), ("laplace", widths[0], "again")]
    out: dict = {"problem_seconds": setup, **shapes(p_train, n_test, widths[0]), "calls": [], "compare": {}}
    for corr, N, kind in calls:
        th, wall, comp = timed(lambda: solve_theory(net.with_width(N), x, y, temperature=chosen[N],  # noqa: B023
                                                    correction=corr))  # noqa: B023
        out["calls"].append({"N": N, "correction": corr, "kind": kind, "wall_seconds": wall, "compile_seconds": comp,
                             "converged": bool(th.report.converged), "iterations": int(th.report.iterations),
                             "action": float(th.action)})
        if N == widths[0]:
            out["compare"][f"solve N={N} correction={corr}, {kind}"] = [wall, "lower"]
        partial(**out)
    return out


# ----------------------------------------------------------------------------
# the training step of the paper-size model
# ----------------------------------------------------------------------------
def stage_train(short: int, long: int, tiny: bool = False) -> dict:
    """One optimiser step of the paper-size model (``models/omniglot_paper.toml``; ``tiny``: width 16, d_qk 8,
    batch 16) from the difference of a ``short`` and a ``long`` training on random episodes
    (``benchmarks/bench_paper_step.py``'s measurement; one untimed short training first)."""
    from bench_paper_step import timed as train_seconds

    from bayes_attn.oneshot import load_oneshot_spec

    spec = load_oneshot_spec(PAPER_SPEC)
    if tiny:
        spec = dataclasses.replace(spec, model=dataclasses.replace(spec.model, width=16, d_qk=8),
                                   training=dataclasses.replace(spec.training, batch=16))
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    train_seconds(spec, short, rng)
    first = time.perf_counter() - t0
    (w_short, _), (w_long, cores) = train_seconds(spec, short, rng), train_seconds(spec, long, rng)
    per_step = (w_long - w_short) / (long - short)
    cfg = spec.model_config
    return {"model": {"N0": cfg.N0, "width": cfg.width, "d_qk": cfg.d_qk, "heads": list(cfg.heads),
                      "batch": spec.training.batch}, "first_training_seconds": first, "short_steps": short,
            "long_steps": long, "short_seconds": w_short, "long_seconds": w_long, "cores_used_long": cores,
            "seconds_per_step": per_step, "compare": {"seconds_per_step": [per_step, "lower"]}}


def device_info() -> dict:
    """JAX's backend and devices in this process, and the versions of what runs on them."""
    from importlib import metadata

    timer()  # listening from now on
    versions = {}
    for name in ("jax", "jaxlib", "numpyro", "numpy", "jax-cuda13-plugin", "jax-cuda13-pjrt", "jax-cuda12-plugin",
                 "jax-cuda12-pjrt", "arviz-stats", "netCDF4", "xarray"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    devices = jax.devices()
    return {"backend": jax.default_backend(), "devices": [str(d) for d in devices],
            "device_kind": devices[0].device_kind, "device_count": len(devices),
            "x64_default": bool(jax.config.jax_enable_x64), "versions": versions}


STAGES = {"gradient": stage_gradient, "nuts": stage_nuts, "sample": stage_sample, "theory": stage_theory,
          "train": stage_train}
