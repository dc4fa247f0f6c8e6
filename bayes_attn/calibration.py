"""Simulation-based calibration (SBC) of the posterior samplers (Talts et al. 2018).

The method. If ``theta ~ prior`` and ``y ~ likelihood(· | theta)``, then
``theta`` is a draw from the posterior given ``y``; so among ``S`` independent
posterior draws ``theta_1..S`` the rank ``#{s : g(theta_s) < g(theta)}`` of
any scalar observable ``g`` is uniform on ``{0, ..., S}``. A sampler that
targets the wrong posterior (a bug in a model, a wrong likelihood, draws
that are not from the stationary law) gives non-uniform ranks: U-shaped when
the posterior is too narrow, ∩-shaped when too wide, skewed when biased.

Here, for each of ``R`` replications ``r`` (:func:`simulate`):

1. weights ``theta_r`` from the prior of docs/theory.md §1 (:meth:`Network.sample_prior`),
   for every sampler, including ``"wishart"`` whose sites are Bartlett factors:
   the order parameters of prior weights have exactly the Wishart-chain law
   of §7, so the truth is the same for all samplers;
2. labels ``y_r = f(x; theta_r) + sqrt(temperature) eps`` (the likelihood at ``temperature``);
3. one NUTS chain on the posterior given ``y_r``, built by the sampler of the
   registry (:func:`bayes_attn.samplers.get`: ``build``, ``observables``,
   ``conditional``, exactly as :func:`bayes_attn.sample_posterior` uses them),
   ``num_warmup`` adaptation iterations, then ``num_samples // thinning`` draws kept every
   ``thinning`` iterations (thinning makes them closer to independent; the sampler's
   :class:`~bayes_attn.samplers.SamplerSettings`);
4. the rank of every true invariant observable among the draws: the upper
   triangle of ``U`` (= ``U_1``), of ``U_2 .. U_L`` and ``Ua`` (the deeper
   order parameters of §7; every registered sampler stores them), ``f`` at
   every test input and ``f`` at the first ``n_train_obs`` training inputs
   (the observable most sensitive to the likelihood, e.g. a wrong temperature).

:func:`uniformity` then bins the ranks and runs a chi-square test per
observable over the ``R`` independent replications. Ranks of different
observables of one replication are dependent, so counts are not summed across
observables; the verdict is the Bonferroni-pooled ``p = min(1, Q · min_q p_q)``
over the ``Q`` observables.

Negative controls (the check has power): ``likelihood_temperature`` lets the
sampler use a likelihood at a temperature other than the one the data were
simulated at; at ``temperature/4`` the posterior is too narrow, at ``4·temperature`` too wide, and
with enough replications the pooled p-value must be small.

The replications run as one compiled program: a ``jax.vmap`` of NumPyro's
functional NUTS (:func:`bayes_attn.samplers._nuts.functional`) over batches of replications,
with the labels as a batched model argument (at the position the sampler
declares, ``Sampler.labels_arg``), one chain per replication
started as ``sample_posterior`` starts (the sampler's ``init_strategy``), the same NUTS kernel,
adaptation and settings as ``sample_posterior``. Under ``vmap`` every NUTS
iteration waits for the longest trajectory in its batch, hence moderate
batches (``batch_size``).

Example::

    net, x, x_test = calibration.random_problem((2, 2), width=3)
    res = calibration.sbc_ranks(net, x, x_test, sampler="wishart", temperature=0.1, n_reps=500)
    calibration.uniformity(res, bins=4)["p_pooled"]
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.handlers
import scipy.stats
from numpyro.distributions import biject_to
from numpyro.infer.util import initialize_model

from ._internal import checks as _checks
from ._internal.precision import x64
from .network import Network, forward_from_xi, order_parameter_labels, order_parameters_from_weights
from .samplers import SamplerSettings, Storage, get, prepare
from .samplers import _blocks as blocks
from .samplers import _nuts as nuts
from .samplers._settings import GUIDED

__all__ = ["SBCResult", "batched_nuts", "random_problem", "sbc_ranks", "simulate", "true_and_drawn", "uniformity"]


# ----------------------------------------------------------------------------
# problems and simulation
# ----------------------------------------------------------------------------
def random_problem(
    heads: tuple[int, ...] = (2, 2), *, width: int = 2, N0: int = 4, T: int = 3, P: int = 8, P_test: int = 1,
    seed: int = 0, variances=1.0,
) -> tuple[Network, np.ndarray, np.ndarray]:
    """A small network with random bilinear attention, inputs ``x`` ``[P, T, N0]`` and ``x_test``
    ``[P_test, T, N0]``."""
    rng = np.random.default_rng(seed)
    net = Network([rng.normal(size=(h, N0, N0)) for h in heads], width, variances)
    return net, rng.normal(size=(P, T, N0)), rng.normal(size=(P_test, T, N0))


def simulate(net: Network, x, x_test, *, temperature: float, n_reps: int, key: jax.Array) -> dict:
    """Weights from the prior and labels from the likelihood at ``temperature``, ``n_reps`` times.

    Returns ``y`` ``[R, P]`` and the true observables: ``U`` ``[R, D, D]``,
    ``U_2 .. U_L`` ``[R, D_l, D_l]``, ``Ua`` ``[R]``, ``f_train`` ``[R, P]``
    (noise-free) and ``f_test`` ``[R, P_test]``. Runs in the current precision.
    """
    xi, xi_t = net.xi(x), net.xi(x_test)
    kw, ke = jax.random.split(key)

    def one(k_w, k_e):
        W = net.sample_prior(k_w)
        Us, Ua = order_parameters_from_weights(W.V, W.a, net.widths)
        w = net.effective_weights(W)
        f = forward_from_xi(xi, W.V0, w)
        y = f + math.sqrt(temperature) * jax.random.normal(k_e, f.shape, f.dtype)
        return {"y": y, "U": Us[0], **{f"U_{l}": U for l, U in enumerate(Us[1:], start=2)}, "Ua": Ua,
                "f_train": f, "f_test": forward_from_xi(xi_t, W.V0, w)}

    return jax.jit(jax.vmap(one))(jax.random.split(kw, n_reps), jax.random.split(ke, n_reps))  # one program


# ----------------------------------------------------------------------------
# batched NUTS on a registered sampler
# ----------------------------------------------------------------------------
def batched_nuts(cfg: SamplerSettings, net: Network, x, x_test, y: jax.Array, *, temperature: float, key: jax.Array,
                 batch_size: int = 20) -> tuple[dict, dict]:
    """One NUTS chain per row of ``y`` ``[R, P]`` on the registered sampler ``cfg.name``, replications ``vmap``-ed:
    ``cfg.num_warmup`` warm-up iterations, then ``cfg.num_samples`` kept every ``cfg.thinning`` (its
    ``num_chains`` unused: one chain per replication).

    The model is ``samplers.get(sampler).build`` with the labels replaced per
    replication; every draw goes through the sampler's ``observables`` and,
    afterwards, its ``conditional`` (``f`` drawn exactly given the rest), as
    in :func:`bayes_attn.sample_posterior`. Must run in the precision of ``cfg.dtype``.
    The replications run in ``vmap``-ed batches of ``batch_size``, one batch
    after the other (``lax.map``): under ``vmap`` every NUTS iteration waits for
    the longest trajectory in the batch, so small batches waste fewer steps,
    while large ones amortise the per-step overhead (``benchmarks/sbc.py`` runs it).

    ``cfg.start="expansion"`` starts each replication's chain as :func:`bayes_attn.sample_posterior` does for a
    sampler with an expansion start (``wishart``): at the mode of its own expansion with the dense metric
    ``H⁻¹`` fixed (step size adapted); a replication whose expansion gives none starts from the sampler's
    ``init_strategy`` with a fixed identity metric (counted in ``prior_starts``). Samplers without an
    expansion start, and ``start="prior"``, adapt a diagonal metric from the ``init_strategy`` start.

    Returns the observables ``{name: [R, S, ...]}`` (``S = num_samples // thinning``) and per-replication
    statistics ``n_steps`` (mean leapfrog steps per iteration after warm-up),
    ``divergences`` (after warm-up) and ``prior_starts`` (replications started from the prior).
    """
    smp = get(cfg.name)
    y = jnp.asarray(y, jnp.dtype(cfg.dtype))
    inputs = prepare(net, x, y[0], x_test, temperature, cfg.dtype)
    model, args = smp.build(inputs)
    info = _model_info(model, args)
    kernels = nuts.functional(info.potential_fn, cfg)
    sites = sorted(info.param_info.z)
    options = Storage()
    guided = cfg.start == "expansion" and smp.start is not None
    starts, prior_starts = _expansion_starts(smp, inputs, y, sites) if guided else (None, np.zeros(y.shape[0], bool))

    run = _chain(smp, (model, args, info), inputs, sites, kernels, cfg, options)
    k_run, k_cond = jax.random.split(key)
    R = y.shape[0]
    batched = jax.jit(lambda ks, ys, st: jax.lax.map(lambda t: run(*t), (ks, ys, st), batch_size=min(batch_size, R)))
    obs, n, d = batched(jax.random.split(k_run, R), y, starts)

    def cond(o, k, yr):  # per replication: draws as [chain = 1, draw, ...]
        extra = smp.conditional(jax.tree.map(lambda v: v[None], o), k, inputs._replace(y=yr), options)
        return jax.tree.map(lambda v: v[0], extra)

    obs |= jax.jit(jax.vmap(cond))(obs, jax.random.split(k_cond, R), y)
    return obs, {"n_steps": n, "divergences": d, "prior_starts": prior_starts}


def _chain(smp, built: tuple, inputs, sites: list[str], kernels, cfg: SamplerSettings, options):
    """``run(key, y_r, start)`` of :func:`batched_nuts`: one replication's NUTS chain (warm-up and draws in one
    scan) and its observables ``[S, ...]``, mean leapfrog steps and divergences after warm-up; ``built``: the
    model, its arguments and :func:`_model_info`."""
    init_kernel, sample_kernel = kernels
    model, args, info = built
    num_warmup, thinning = cfg.num_warmup, cfg.thinning
    num_draws = cfg.num_samples // thinning

    def prior_init(k, yr):
        """The sites' start, unconstrained: the sampler's ``init_strategy`` (a prior draw unless it says otherwise)."""
        seeded = numpyro.handlers.seed(model, k)
        tr = numpyro.handlers.trace(numpyro.handlers.substitute(seeded, substitute_fn=smp.init_strategy)).get_trace(
            *smp.with_labels(args, yr))
        return {s: biject_to(tr[s]["fn"].support).inv(tr[s]["value"]) for s in sites}

    def run(k, yr, st):
        k_init, k_nuts = jax.random.split(k)
        a = smp.with_labels(args, yr)
        init = prior_init(k_init, yr)
        if st is None:
            state = init_kernel(init, num_warmup, model_args=a, rng_key=k_nuts)
        else:  # the expansion's start where it has one (flag), with its metric fixed
            flag, values, imm = st
            init = jax.tree.map(lambda v, p: jnp.where(flag, v, p), values, init)
            state = init_kernel(init, num_warmup, inverse_mass_matrix=imm, adapt_mass_matrix=False, dense_mass=True,
                                model_args=a, rng_key=k_nuts)

        def step(s, _):
            s = sample_kernel(s, model_args=a)
            return s, (s.z, s.num_steps, s.diverging)

        # one scan over warm-up and sampling: NUTS is compiled once
        _, (z, n, d) = jax.lax.scan(step, state, None, length=num_warmup + num_draws * thinning)
        keep = slice(num_warmup + thinning - 1, None, thinning)
        z = jax.tree.map(lambda v: v[keep], z)
        constrain = info.postprocess_fn(*a)
        obs = jax.vmap(lambda zz: smp.observables(constrain(zz), inputs._replace(y=yr), options))(z)
        return obs, n[num_warmup:].mean(), d[num_warmup:].sum()

    return run


def _expansion_starts(smp, inputs, y: jax.Array, sites: list[str]) -> tuple[tuple, np.ndarray]:
    """Per replication (row of ``y``) the sampler's expansion start: ``(flag [R], values {site: [R, ...]},
    inverse mass matrices [R, n, n])`` over the sites in ``sites`` order (NumPyro ravels a dict of sites in
    sorted order), and which replications had none (``flag`` false: identity metric, the prior start)."""
    found = []
    for yr in y:
        try:
            found.append(smp.start(inputs._replace(y=yr)))
        except ValueError:
            found.append(None)
    ok = next((s for s in found if s is not None), None)
    if ok is None:
        raise ValueError("no replication's expansion gives a start: use start='prior'")
    if tuple(ok.block) != tuple(sites):
        raise ValueError(f"the expansion's block {ok.block} is not the sites {sites} in NumPyro's order")
    n = ok.inverse_mass_matrix.shape[0]
    eye = jnp.eye(n, dtype=ok.inverse_mass_matrix.dtype)
    flag = jnp.asarray([s is not None for s in found])
    values = {k: jnp.stack([(s or ok).values[k] for s in found]) for k in sites}
    imm = jnp.stack([eye if s is None else s.inverse_mass_matrix for s in found])
    return (flag, values, imm), ~np.asarray(flag)


def guided_draws(cfg: SamplerSettings, net: Network, x, x_test, y: jax.Array, *, temperature: float,
                 key: jax.Array) -> tuple[dict, dict]:
    """:func:`batched_nuts` for the samplers with their own draw loop (``laplace-is``, ``laplace-mh``): per row of
    ``y``, one chain of ``cfg.num_samples`` draws (after ``cfg.num_warmup``) kept every ``cfg.thinning``, as
    ``sample_posterior`` makes them, then ``f`` drawn exactly given ``U``; settings in blocks
    (:attr:`~bayes_attn.samplers.SamplerSettings.in_blocks`): ``max_samples // num_samples`` blocks, each continued
    as :mod:`bayes_attn.samplers._blocks` continues them, whatever their diagnostics. Returns the observables
    ``{name: [R, S, ...]}`` and per-replication ``pareto_k`` (``laplace-is``) and ``prior_starts`` (none)."""
    smp = get(cfg.name)
    y = jnp.asarray(y, jnp.dtype(cfg.dtype))
    inputs = prepare(net, x, y[0], x_test, temperature, cfg.dtype)
    n_blocks = cfg.budget_blocks
    cfg = SamplerSettings(name=cfg.name, num_warmup=cfg.num_warmup, num_samples=cfg.num_samples, num_chains=1,
                          thinning=cfg.thinning, dtype=cfg.dtype)
    R = y.shape[0]
    keys = jax.random.split(key, (R, 2))
    obs, khat = [], []
    for r in range(R):
        ir = inputs._replace(y=y[r])
        block = blocks.guided(smp.draw, ir, cfg, keys[r, 0])
        out = block(0)
        for b in range(1, n_blocks):
            out = blocks.join(out, block(b))
        draws = dict(out.draws)
        draws |= smp.conditional(draws, keys[r, 1], ir, Storage())
        obs.append(jax.tree.map(lambda v: np.asarray(v[0]), draws))
        khat.append(out.attrs.get("pareto_k", np.nan))
    stacked = {k: np.stack([o[k] for o in obs]) for k in obs[0]}
    return stacked, {"pareto_k": np.asarray(khat), "prior_starts": np.zeros(R, bool)}


def _model_info(model, args: tuple):
    """NumPyro's ``initialize_model`` (``dynamic_args=True``: the potential and postprocessing take the model's
    arguments) for its functions and site names, run under ``jax.eval_shape``: traced once, not executed
    operation by operation (which would compile a small program per operation)."""
    found = []

    def init(key):
        found.append(initialize_model(key, model, model_args=args, dynamic_args=True))
        return found[-1].param_info.z

    jax.eval_shape(init, jax.random.key(0))
    return found[-1]


# ----------------------------------------------------------------------------
# ranks and uniformity
# ----------------------------------------------------------------------------
@dataclass
class SBCResult:
    """Ranks of the true observables among ``num_draws`` posterior draws.

    Attributes:
        ranks: ``[R, Q]`` ints in ``{0, ..., num_draws}``, one column per observable.
        labels: names of the ``Q`` observables (``"U[1-1,1-2]"``, ``"U_2[1,2]"``,
            ``"Ua"``, ``"f_test[0]"``, ``"f_train[0]"``).
        num_draws: ``S``, draws per replication.
        n_steps: mean leapfrog steps per NUTS iteration after warm-up, per replication ``[R]``.
        divergences: divergent transitions after warm-up, per replication ``[R]``.
        seconds: wall time of sampling and observables (compilation included).
        config: the settings of the run.
    """

    ranks: np.ndarray
    labels: list[str]
    num_draws: int
    n_steps: np.ndarray
    divergences: np.ndarray
    seconds: float
    config: dict = field(default_factory=dict)

    @property
    def n_reps(self) -> int:
        return int(self.ranks.shape[0])


def true_and_drawn(net: Network, truth: dict, draws: dict,
                   n_train_obs: int = 1) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Scalar observables compared by SBC: truth ``[R, Q]``, draws ``[R, S, Q]`` and labels ``[Q]``.

    The upper triangle of ``U`` and of every ``U_l`` the sampler stores, ``Ua``
    if stored, every ``f_test`` entry and the first ``n_train_obs`` of ``f_train``.
    """
    true, drawn, labels = [], [], []
    for l in range(1, net.L + 1):
        name = "U" if l == 1 else f"U_{l}"
        if name not in draws:
            continue
        lab = order_parameter_labels(net.heads, l)
        iu = np.triu_indices(len(lab))
        true.append(np.asarray(truth[name])[:, iu[0], iu[1]])
        drawn.append(np.asarray(draws[name])[:, :, iu[0], iu[1]])
        labels += [f"{name}[{lab[i]},{lab[j]}]" for i, j in zip(*iu, strict=True)]
    if "Ua" in draws:
        true.append(np.asarray(truth["Ua"])[:, None])
        drawn.append(np.asarray(draws["Ua"])[:, :, None])
        labels.append("Ua")
    if "f_test" in draws:
        true.append(np.asarray(truth["f_test"]))
        drawn.append(np.asarray(draws["f_test"]))
        labels += [f"f_test[{q}]" for q in range(true[-1].shape[1])]
    k = n_train_obs
    if k:
        true.append(np.asarray(truth["f_train"])[:, :k])
        drawn.append(np.asarray(draws["f_train"])[:, :, :k])
        labels += [f"f_train[{q}]" for q in range(k)]
    return np.concatenate(true, axis=1), np.concatenate(drawn, axis=2), labels


SBC_SAMPLER = SamplerSettings(num_warmup=200, num_samples=95, num_chains=1, thinning=5)
"""The settings :func:`sbc_ranks` gives a sampler named alone: 200 warm-up iterations, then 19 draws kept every 5
(20 possible ranks)."""


def sbc_ranks(net: Network, x, x_test, *, sampler: str | SamplerSettings, temperature: float, n_reps: int = 100,
              likelihood_temperature: float | None = None, n_train_obs: int = 1, batch_size: int = 20) -> SBCResult:
    """SBC of one registered sampler: ``n_reps`` prior replications and the ranks of the truth.

    Args:
        net: the network; x: training inputs ``[P, T, N0]``; x_test: ``[P_test, T, N0]``.
        sampler: a name of :data:`bayes_attn.samplers.SAMPLERS` (with :data:`SBC_SAMPLER`'s settings) or
            the :class:`~bayes_attn.samplers.SamplerSettings` of every replication's chain: ``num_warmup``
            warm-up iterations, then ``num_samples`` iterations kept every ``thinning`` (``S = num_samples //
            thinning`` draws per replication); ``seed`` seeds the simulation, the chains and the conditional
            draws; ``target_accept``, ``max_tree_depth`` (NUTS), ``dtype`` (the run enters the matching JAX
            precision itself), ``start`` (``"expansion"``, as :func:`bayes_attn.sample_posterior` by default, or
            ``"prior"``: where the chains of a sampler with an expansion start, ``wishart``, begin); one chain
            per replication whatever ``num_chains``.
        temperature: the temperature the labels are simulated at.
        n_reps: replications ``R``.
        likelihood_temperature: the temperature of the likelihood the sampler
            uses (default ``temperature``); another value is a negative control.
        n_train_obs: ``f`` at this many training inputs enters the ranks.
        batch_size: replications per ``vmap``-ed batch (:func:`batched_nuts`).

    The samplers with their own draw loop (``laplace-is``, ``laplace-mh``) run through
    :func:`guided_draws`, one replication after the other; for ``laplace-is`` ``thinning`` spreads the
    kept draws over ``num_samples`` proposals.

    Returns:
        An :class:`SBCResult` (feed it to :func:`uniformity`).
    """
    if isinstance(sampler, str):
        cfg = SBC_SAMPLER.replace(name=sampler)  # a clear error for an unknown name
    elif isinstance(sampler, SamplerSettings):
        cfg = sampler
    else:
        raise ValueError(f"sampler must be a sampler name or a SamplerSettings, got {type(sampler).__name__}")
    x, x_test = net.check_inputs(x), net.check_inputs(x_test, "x_test")
    temperature = _checks.positive("temperature", temperature)
    Tl = (temperature if likelihood_temperature is None
          else _checks.positive("likelihood_temperature", likelihood_temperature))
    n_reps, n_train_obs, batch_size = (
        _checks.positive_int(name, v, minimum=minimum) for name, v, minimum in (
            ("n_reps", n_reps, 1), ("n_train_obs", n_train_obs, 0), ("batch_size", batch_size, 1)))
    if n_train_obs > x.shape[0]:
        raise ValueError(f"n_train_obs must be at most P = {x.shape[0]}, got {n_train_obs}")
    if cfg.in_blocks and cfg.name not in GUIDED:
        raise ValueError(f"sampler settings in blocks are calibrated for the guided samplers; {cfg.name!r} in blocks "
                         "is one longer run, bit for bit (give num_samples)")
    num_draws = cfg.budget_blocks * cfg.num_samples // cfg.thinning
    k_sim, k_run = jax.random.split(jax.random.key(cfg.seed))
    with x64(cfg.dtype == "float64"):
        truth = simulate(net, x, x_test, temperature=temperature, n_reps=n_reps, key=k_sim)
        t0 = time.perf_counter()
        draws, stats = _replication_draws(cfg, (net, x, x_test), truth["y"], Tl, k_run, batch_size)
        draws = jax.block_until_ready(draws)
        seconds = time.perf_counter() - t0
    true, drawn, labels = true_and_drawn(net, truth, draws, n_train_obs)
    ranks = (drawn < true[:, None, :]).sum(axis=1)
    config = dict(sampler=cfg.name, temperature=temperature, likelihood_temperature=Tl, n_reps=n_reps,
                  num_warmup=cfg.num_warmup, num_draws=num_draws, thinning=cfg.thinning, seed=cfg.seed,
                  heads=list(net.heads), widths=list(net.widths), variances=list(net.variances), N0=net.N0,
                  P=int(x.shape[0]), P_test=int(x_test.shape[0]), n_train_obs=n_train_obs,
                  target_accept=cfg.target_accept, max_tree_depth=cfg.max_tree_depth, dtype=cfg.dtype,
                  batch_size=batch_size, start=cfg.start, prior_starts=int(np.sum(stats["prior_starts"])))
    return SBCResult(ranks, labels, num_draws, np.asarray(stats["n_steps"]), np.asarray(stats["divergences"]),
                     seconds, config)


def _replication_draws(cfg: SamplerSettings, problem: tuple, y, temperature: float, key,
                       batch_size: int) -> tuple[dict, dict]:
    """The draws of every replication (row of ``y``) of ``problem`` ``(net, x, x_test)`` and their statistics:
    :func:`guided_draws` for a sampler with its own draw loop (no leapfrog steps, no divergences), else
    :func:`batched_nuts`."""
    net, x, x_test = problem
    if get(cfg.name).draw is not None:
        draws, stats = guided_draws(cfg, net, x, x_test, y, temperature=temperature, key=key)
        R = y.shape[0]
        return draws, stats | {"n_steps": np.full(R, np.nan), "divergences": np.zeros(R, int)}
    return batched_nuts(cfg, net, x, x_test, y, temperature=temperature, key=key, batch_size=batch_size)


def uniformity(result: SBCResult, bins: int = 4) -> dict:
    """Chi-square test of uniform ranks per observable, and the Bonferroni-pooled verdict.

    Each observable gets its own test on its ``R`` independent ranks (ranks of
    different observables within a replication are dependent, so their counts
    are not summed); ``p_pooled = min(1, Q · min p)``. ``num_draws + 1`` must be
    divisible by ``bins`` so that the bins are equally likely.

    Returns ``bins``, ``counts`` ``[Q][bins]``, ``p_values`` (per label),
    ``p_min``, ``p_pooled`` and ``worst`` (the label of the smallest p-value).
    """
    bins = _checks.positive_int("bins", bins, minimum=2)
    S1 = result.num_draws + 1
    if S1 % bins:
        raise ValueError(f"num_draws + 1 = {S1} must be divisible by bins = {bins}")
    b = result.ranks * bins // S1
    counts = np.stack([np.bincount(b[:, q], minlength=bins) for q in range(b.shape[1])])  # [Q, bins]
    p = np.array([scipy.stats.chisquare(c).pvalue for c in counts])
    return {
        "bins": bins,
        "counts": counts.tolist(),
        "p_values": dict(zip(result.labels, p.tolist(), strict=True)),
        "p_min": float(p.min()),
        "p_pooled": float(min(1.0, len(p) * p.min())),
        "worst": result.labels[int(p.argmin())],
    }
