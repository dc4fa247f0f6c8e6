"""Simulation-based calibration (SBC) of the posterior samplers.

For each replication ``r``: weights ``theta_r`` from the prior
(:meth:`Network.sample_prior`), labels ``y_r = f(x; theta_r) + sqrt(T) eps``
(the likelihood at temperature ``T``), one NUTS chain on the posterior given
``y_r``, ``S`` thinned draws after warm-up, and the *rank* of the true
invariant observables among the draws: every upper-triangle entry of ``U``,
``f`` at the test inputs and ``f`` at the first training input(s) (the
observable most sensitive to the likelihood, e.g. to a wrong temperature). If the sampler targets the right posterior
and its draws are close to independent, every rank is uniform on
``{0, ..., S}`` (Talts et al. 2018). Ranks are binned and tested with a
chi-square test per observable; the per-sampler verdict is the Bonferroni
minimum over observables.

The replications run as one ``jax.vmap`` of NumPyro's functional NUTS
(:func:`numpyro.infer.hmc.hmc`) on the package's models
(:mod:`bayes_attn.models`) with the data as a batched model argument; the
observables come from the same post-processing as
:func:`bayes_attn.sample_posterior` (``_observables`` for the full sampler,
the exact conditional draws ``_conditional_outputs`` for the collapsed one).
Only the outer driver differs from ``sample_posterior`` (no ``MCMC`` object,
one chain per replication, identical NUTS kernel, adaptation and
``init_to_sample``-style initialisation from the prior).

Run the full version (writes ``benchmarks/results/sbc.json`` and ``sbc.png``)::

    .venv/bin/python benchmarks/sbc.py            # ~ a few minutes on 2 cores
    .venv/bin/python benchmarks/sbc.py --quick    # smoke test, seconds
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats
from numpyro.infer.hmc import hmc
from numpyro.infer.util import initialize_model

import bayes_attn as ba  # noqa: F401  (enables float64)
from bayes_attn import _checks
from bayes_attn import posterior as bp
from bayes_attn.models import collapsed_model, path_model, token_model
from bayes_attn.network import Network, forward_from_xi, path_kernel_from_xi

RESULTS = Path(__file__).resolve().parent / "results"
SAMPLERS = {  # name -> (method, form)
    "full-token": ("full", "token"),
    "full-path": ("full", "path"),
    "collapsed": ("collapsed", "path"),
}


# ----------------------------------------------------------------------------
# problems
# ----------------------------------------------------------------------------
def random_problem(
    heads: tuple[int, ...] = (2, 2), *, width: int = 2, N0: int = 4, T: int = 3, P: int = 8, P_test: int = 1, seed: int = 0
) -> tuple[Network, np.ndarray, np.ndarray]:
    """A small network with random bilinear attention, inputs ``x`` ``[P, T, N0]`` and ``x_test`` ``[P_test, T, N0]``."""
    rng = np.random.default_rng(seed)
    net = Network([rng.normal(size=(h, N0, N0)) for h in heads], width)
    return net, rng.normal(size=(P, T, N0)), rng.normal(size=(P_test, T, N0))


# ----------------------------------------------------------------------------
# simulation and batched NUTS
# ----------------------------------------------------------------------------
def simulate(net: Network, x, x_test, *, temperature: float, n_reps: int, key: jax.Array) -> dict:
    """Prior draws of the weights and labels from the likelihood.

    Returns ``y`` ``[R, P]`` and the true observables ``U`` ``[R, D, D]``,
    ``f_train`` ``[R, P]`` (noise-free), ``f_test`` ``[R, P_test]``.
    """
    xi, xi_t = net.xi(x), net.xi(x_test)
    kw, ke = jax.random.split(key)

    def one(k_w, k_e):
        W = net.sample_prior(k_w)
        w = net.effective_weights(W)
        f = forward_from_xi(xi, W.V0, w)
        y = f + math.sqrt(temperature) * jax.random.normal(k_e, f.shape, f.dtype)
        return {"y": y, "U": w @ w.T / w.shape[1], "f_train": f, "f_test": forward_from_xi(xi_t, W.V0, w)}

    return jax.vmap(one)(jax.random.split(kw, n_reps), jax.random.split(ke, n_reps))


def _model_and_args(net: Network, x, method: str, form: str, temperature: float):
    """The NumPyro model of ``sample_posterior`` and its data arguments, ``y`` last."""
    consts = dict(heads=net.heads, widths=net.widths, variances=net.variances, temperature=temperature)
    xi = net.xi(x)
    if method == "collapsed":
        return partial(collapsed_model, **consts), (path_kernel_from_xi(xi, xi, net.variances[0]),)
    if form == "path":
        return partial(path_model, **consts), (xi,)
    return partial(token_model, **consts), (jnp.asarray(x), tuple(net.attention_matrices(x)))


def run_nuts(
    net: Network,
    x,
    y: jax.Array,
    *,
    method: str,
    form: str,
    temperature: float,
    num_warmup: int,
    num_draws: int,
    thinning: int,
    key: jax.Array,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
) -> tuple[dict, dict]:
    """One NUTS chain per row of ``y`` ``[R, P]``, all replications in one ``vmap``.

    Returns the draws ``{site: [R, S, ...]}`` (``S = num_draws``, kept every
    ``thinning`` iterations after ``num_warmup``) and per-replication stats
    ``n_steps`` (mean leapfrog steps per iteration) and ``divergences``.
    """
    model, consts = _model_and_args(net, x, method, form, temperature)
    info = initialize_model(jax.random.key(0), model, model_args=(*consts, y[0]), dynamic_args=True)
    init_kernel, sample_kernel = hmc(potential_fn_gen=info.potential_fn, algo="NUTS")
    sites = sorted(info.param_info.z)

    def run(k, z0, yr):
        args = (*consts, yr)
        state = init_kernel(z0, num_warmup, target_accept_prob=target_accept, max_tree_depth=max_tree_depth,
                            model_args=args, rng_key=k)

        def step(s, _):
            s = sample_kernel(s, model_args=args)
            return s, (s.z, s.num_steps, s.diverging)

        # one scan over warm-up and sampling: NUTS is compiled once
        _, (z, n, d) = jax.lax.scan(step, state, None, length=num_warmup + num_draws * thinning)
        keep = slice(num_warmup + thinning - 1, None, thinning)
        return jax.tree.map(lambda v: v[keep], z), n[num_warmup:].mean(), d[num_warmup:].sum()

    k_init, k_run = jax.random.split(key)
    R = y.shape[0]
    prior = jax.vmap(net.sample_prior)(jax.random.split(k_init, R))  # init_to_sample: start from the prior
    z0 = {"a": prior.a, **{f"V{l + 1}": V for l, V in enumerate(prior.V)}}
    if method == "full":
        z0["V0"] = prior.V0
    z0 = {s: z0[s] for s in sites}
    z, n, d = jax.jit(jax.vmap(run))(jax.random.split(k_run, R), z0, y)
    return z, {"n_steps": n, "divergences": d}


def observables(net: Network, x, x_test, y, z: dict, *, method: str, temperature: float, key: jax.Array) -> dict:
    """``U`` ``[R, S, D, D]``, ``f_train`` ``[R, S, P]``, ``f_test`` ``[R, S, P_test]`` from draws ``z``, as ``sample_posterior`` makes them."""
    xi, xi_t = net.xi(x), net.xi(x_test)
    collect = partial(bp._observables, xi=xi, xi_test=xi_t, widths=net.widths, full=method == "full",
                      keep_weights=False, keep_effective_weights=False)
    obs = jax.vmap(jax.vmap(collect))(z)
    if method == "collapsed":
        R = y.shape[0]

        def cond(U, k, yr):
            out = bp._conditional_outputs(U[None], k, xi, yr, xi_t, net.variances[0], temperature)
            return out["f_train"][0], out["f_test"][0]

        obs["f_train"], obs["f_test"] = jax.vmap(cond)(obs["U"], jax.random.split(key, R), y)
    return {"U": obs["U"], "f_train": obs["f_train"], "f_test": obs["f_test"]}


# ----------------------------------------------------------------------------
# ranks and uniformity
# ----------------------------------------------------------------------------
@dataclass
class SBCResult:
    """Ranks of the true observables among ``num_draws`` posterior draws.

    Attributes:
        ranks: ``[R, Q]`` ints in ``{0, ..., num_draws}``, one column per observable.
        labels: names of the ``Q`` observables (``"U[1-1,1-2]"``, ``"f_test[0]"``, ``"f_train[0]"``).
        num_draws: ``S``, draws per replication.
        n_steps: mean leapfrog steps per NUTS iteration, per replication ``[R]``.
        divergences: divergent transitions after warm-up, per replication ``[R]``.
        seconds: wall time of sampling (compile included).
        config: the settings of the run.
    """

    ranks: np.ndarray
    labels: list[str]
    num_draws: int
    n_steps: np.ndarray
    divergences: np.ndarray
    seconds: float
    config: dict = field(default_factory=dict)


def sbc_ranks(
    net: Network,
    x,
    x_test,
    *,
    temperature: float,
    method: str = "collapsed",
    form: str = "path",
    n_reps: int = 50,
    num_warmup: int = 200,
    num_draws: int = 19,
    thinning: int = 5,
    seed: int = 0,
    n_train_obs: int = 1,
    sampler_temperature: float | None = None,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
) -> SBCResult:
    """Run SBC for one sampler: ``n_reps`` prior replications, ranks of ``U`` (upper triangle),
    ``f`` at every test input and at the first ``n_train_obs`` training inputs.

    ``x`` ``[P, T, N0]``, ``x_test`` ``[P_test, T, N0]``. ``sampler_temperature``
    (default ``temperature``) lets a deliberately wrong likelihood be sampled,
    as a negative control that the test has power.
    """
    _checks.choice("method", method, bp.METHODS)
    _checks.choice("form", form, bp.FORMS)
    x, x_test = net.check_inputs(x), net.check_inputs(x_test, "x_test")
    k_sim, k_run, k_obs = jax.random.split(jax.random.key(seed), 3)
    truth = simulate(net, x, x_test, temperature=temperature, n_reps=n_reps, key=k_sim)
    Ts = temperature if sampler_temperature is None else sampler_temperature
    t0 = time.perf_counter()
    z, stats = run_nuts(net, x, truth["y"], method=method, form=form, temperature=Ts, num_warmup=num_warmup,
                        num_draws=num_draws, thinning=thinning, key=k_run, target_accept=target_accept,
                        max_tree_depth=max_tree_depth)
    obs = jax.block_until_ready(observables(net, x, x_test, truth["y"], z, method=method, temperature=Ts, key=k_obs))
    seconds = time.perf_counter() - t0
    iu = np.triu_indices(net.D)
    lab = net.path_labels
    k = n_train_obs
    draws = np.concatenate([np.asarray(obs["U"])[:, :, iu[0], iu[1]], np.asarray(obs["f_test"]),
                            np.asarray(obs["f_train"])[:, :, :k]], axis=2)  # [R, S, Q]
    true = np.concatenate([np.asarray(truth["U"])[:, iu[0], iu[1]], np.asarray(truth["f_test"]),
                           np.asarray(truth["f_train"])[:, :k]], axis=1)  # [R, Q]
    ranks = (draws < true[:, None, :]).sum(axis=1)
    labels = ([f"U[{lab[i]},{lab[j]}]" for i, j in zip(*iu)] + [f"f_test[{q}]" for q in range(x_test.shape[0])]
              + [f"f_train[{q}]" for q in range(k)])
    config = dict(method=method, form=form, temperature=temperature, sampler_temperature=Ts, n_reps=n_reps,
                  num_warmup=num_warmup, num_draws=num_draws, thinning=thinning, seed=seed, heads=list(net.heads),
                  widths=list(net.widths), N0=net.N0, P=int(x.shape[0]), n_train_obs=k, target_accept=target_accept)
    return SBCResult(ranks, labels, num_draws, np.asarray(stats["n_steps"]), np.asarray(stats["divergences"]), seconds, config)


def uniformity(result: SBCResult, bins: int = 4) -> dict:
    """Chi-square test of uniform ranks per observable, and the Bonferroni-pooled verdict.

    Ranks of different observables within a replication are dependent, so
    counts are not summed across observables; instead each observable gets
    its own test on ``R`` independent ranks and ``p_pooled = min(1, Q · min p)``.
    ``num_draws + 1`` must be divisible by ``bins`` so that bins are equally likely.
    """
    S1 = result.num_draws + 1
    if S1 % bins:
        raise ValueError(f"num_draws + 1 = {S1} must be divisible by bins = {bins}")
    b = result.ranks * bins // S1
    counts = np.stack([np.bincount(b[:, q], minlength=bins) for q in range(b.shape[1])])  # [Q, bins]
    p = np.array([scipy.stats.chisquare(c).pvalue for c in counts])
    return {
        "bins": bins,
        "counts": counts.tolist(),
        "p_values": dict(zip(result.labels, p.tolist())),
        "p_min": float(p.min()),
        "p_pooled": float(min(1.0, len(p) * p.min())),
    }


# ----------------------------------------------------------------------------
# script
# ----------------------------------------------------------------------------
def plot(results: dict[str, SBCResult], path: Path, bins: int) -> None:
    """Rank histograms: one row per sampler, columns ``U`` diagonal, ``U`` off-diagonal, ``f_test`` (pooled counts)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = {
        "U diagonal": lambda s: s.startswith("U[") and s[2:-1].split(",")[0] == s[2:-1].split(",")[1],
        "U off-diagonal": lambda s: s.startswith("U[") and s[2:-1].split(",")[0] != s[2:-1].split(",")[1],
        "f(x_test)": lambda s: s.startswith("f_test"),
        "f(x_train)": lambda s: s.startswith("f_train"),
    }
    fig, axes = plt.subplots(len(results), len(groups), figsize=(4 * len(groups), 2.6 * len(results)), squeeze=False)
    for row, (name, res) in zip(axes, results.items()):
        b = res.ranks * bins // (res.num_draws + 1)
        for ax, (gname, sel) in zip(row, groups.items()):
            cols = [i for i, s in enumerate(res.labels) if sel(s)]
            counts = np.bincount(b[:, cols].ravel(), minlength=bins)
            n = b.shape[0] * len(cols)
            lo, hi = scipy.stats.binom.ppf([0.005, 0.995], n, 1 / bins)
            ax.axhspan(lo, hi, color="0.85", zorder=0, label="99% per-bin band, uniform ranks\n(independent observables)")
            ax.axhline(n / bins, color="k", lw=1, zorder=1)
            ax.bar(np.arange(bins), counts, color="tab:blue", width=0.9, zorder=2)
            ax.set_title(f"{name}: {gname} ({len(cols)} obs.)", fontsize=9)
            ax.set_xlabel(f"rank bin (rank of truth among {res.num_draws} draws)")
            ax.set_ylabel("count")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("SBC rank histograms (pooled per group for display; tests are per observable)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny run (smoke test of every code path)")
    ap.add_argument("--reps", type=int, default=200, help="replications per sampler")
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--draws", type=int, default=39, help="thinned draws per replication (draws+1 divisible by --bins)")
    ap.add_argument("--thinning", type=int, default=5)
    ap.add_argument("--bins", type=int, default=8)
    ap.add_argument("--width", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="output folder (default benchmarks/results; --quick: a temp folder)")
    a = ap.parse_args(argv)
    if a.quick:
        a.reps, a.warmup, a.draws, a.thinning, a.bins, a.width = 8, 30, 7, 1, 4, 2
    if a.out is None:
        a.out = Path(tempfile.mkdtemp(prefix="sbc_")) if a.quick else RESULTS
    net, x, xt = random_problem((2, 2), width=a.width, N0=4, T=3, P=8, P_test=2, seed=a.seed)
    runs = {name: dict(method=m, form=f) for name, (m, f) in SAMPLERS.items()}
    # negative controls (the test has power): the collapsed sampler with a wrong likelihood temperature
    runs["control: collapsed at 4T"] = dict(method="collapsed", form="path", sampler_temperature=4 * a.temperature)
    runs["control: collapsed at T/4"] = dict(method="collapsed", form="path", sampler_temperature=a.temperature / 4)
    results, report = {}, {}
    for name, kw in runs.items():
        res = sbc_ranks(net, x, xt, temperature=a.temperature, n_reps=a.reps, num_warmup=a.warmup, num_draws=a.draws,
                        thinning=a.thinning, seed=a.seed, **kw)
        u = uniformity(res, a.bins)
        results[name] = res
        report[name] = {**u, "config": res.config, "seconds": res.seconds, "mean_leapfrog_steps": float(res.n_steps.mean()),
                        "divergences": int(res.divergences.sum())}
        print(f"{name:30s} p_pooled={u['p_pooled']:.3g}  p_min={u['p_min']:.3g}  ({len(res.labels)} observables, "
              f"{a.reps} reps, {res.seconds:.1f} s, {res.n_steps.mean():.1f} steps/iter, {int(res.divergences.sum())} divergences)")
    out = {"problem": dict(heads=list(net.heads), width=a.width, N0=net.N0, T=3, P=8, P_test=2, temperature=a.temperature),
           "quick": a.quick, "samplers": report, "platform": platform.platform(), "jax": jax.__version__}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "sbc.json").write_text(json.dumps(out, indent=2))
    plot(results, a.out / "sbc.png", a.bins)
    print(f"wrote {a.out / 'sbc.json'} and {a.out / 'sbc.png'}")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
