"""``"laplace-is"`` and ``"laplace-mh"``: the exact posterior, guided by the finite-width expansion (docs/theory.md §9).

The exact posterior of the order parameters is a density over the Bartlett sites ``θ`` of §7 (``log c`` of the
chi-square diagonals and the normal lower entries of every factor ``A_k``), ``p(θ) ∝ exp(−S(θ))`` with the ``S`` of
§8 (:func:`bayes_attn.theory._correction.action_at`): 14 dimensions for the Fig. 2c network at any width, valid also
where a level is singular. The Laplace expansion of §8 gives its mode ``θ̂`` and the curvature ``H = S''(θ̂)``
(:func:`bayes_attn.theory._correction.find_mode`, from the leading-order solution of §4). Both samplers draw from the
defensive mixture

    q(θ) = (1 − m) N(θ; θ̂, H⁻¹) + m t_ν(θ; θ̂, H⁻¹),      m = PROPOSAL_MIX, ν = PROPOSAL_DF,

(``θ = θ̂ + L⁻ᵀ ε · s``, ``H = L Lᵀ``, ``ε ~ N(0, I)``, ``s = 1`` or ``sqrt(ν / g)`` with ``g ~ χ²(ν)``): the normal
where the expansion is right, the t's polynomial tails where the posterior's are heavier (chosen by measurement,
docs/theory.md §9), and weigh each draw by the exact ``log w = −S(θ) − log q(θ)`` (one ``S`` evaluation per draw:
one ``P × P`` Cholesky, shared with the draw of ``f``; draws batched with ``vmap``,
:data:`~bayes_attn.samplers._base.BATCH_BYTES` at a time).

Before its draws, each sampler makes a pilot of :data:`PILOT_FRACTION` as many proposals and, where their
importance-sampling ESS is low but their weighted moments can be trusted, moves the proposal's centre and scale to
the pilot's weighted mean and covariance, and repeats this once from the moved proposal (:func:`adapt`: adaptive
importance sampling, for the skewed posteriors of small widths; the pilots are not kept). Called by ``auto``, a
sampler whose pilot rules its proposal out stops there (:class:`RuledOut`).

- ``laplace-is`` (importance sampling): the log weights of all ``chains × samples`` draws (``samples``:
  ``SamplerSettings.guided_draws``) are Pareto-smoothed (PSIS, arviz-stats' ``psislw``), whose ``k̂`` must be at
  most 0.7 (:data:`bayes_attn.diagnostics.MAX_KHAT`; Vehtari et al. 2024). Each chain (an independent batch of
  ``samples`` draws) is resampled systematically (:func:`~bayes_attn.samplers._weights.systematic_resample`:
  proposal ``i`` gets ``⌊M w̄_i⌋`` or ``⌈M w̄_i⌉`` copies) to ``samples`` equally weighted draws **kept in the
  order of the proposals**, so a draw copied ``k`` times is a run of ``k`` equal draws, and ArviZ's
  autocorrelation-based variance of a mean bounds the importance-sampling and resampling error (derived in
  docs/theory.md §9): ``compare``, ``az.summary`` and the verdict read the draws like any other sampler's, with
  honest error bars. (Shuffled copies would hide the duplicates and overstate the ESS.)
- ``laplace-mh`` (independence Metropolis–Hastings): ``num_warmup + samples`` proposals per chain (``samples``:
  ``SamplerSettings.guided_draws``), accepted with probability ``min(1, w(θ') / w(θ))`` (raw weights); exact MCMC
  whose R-hat and ESS ArviZ computes as for NUTS. Each chain starts at its first proposal; the first ``num_warmup``
  iterations are dropped.

With each proposal, ``f_train`` and ``f_test`` are drawn exactly given its ``U_1`` (pathwise conditioning, as for
``wishart``: :func:`bayes_attn.samplers._base.pathwise_draw`), solved with the Cholesky factor of ``G = K(U_1) + T I``
that its ``S`` computed, so a proposal costs one ``P × P`` factorisation in all. The first kept copy of a proposal
carries that ``f`` (the weight depends on ``θ`` alone, so given ``θ`` it is an exact draw whether or not the
proposal is kept); each further copy (a resampled duplicate, a ``laplace-mh`` chain that stayed) gets a fresh exact
draw given its ``U_1`` (:func:`_kept`), so copies share ``θ`` but not ``f``.

Stored besides the observables: ``sample_stats`` ``log_weight`` (the raw log weight of the proposal each kept draw
is: for ``laplace-is`` the one it copies, for ``laplace-mh`` the chain's state), ``source`` (``laplace-is``: the
index of that proposal in its chain), ``accepted`` and ``acceptance_rate`` (``laplace-mh``: the move and its
probability ``min(1, w'/w)``); attributes ``pareto_k``, ``is_ess`` (``1 / Σ w̄²`` of the smoothed weights, all
chains) or ``acceptance``, and ``proposal``, ``mode_converged``, ``mode_seconds``.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.precision import float64
from ..kernels import cheapest_form
from ..theory._coordinates import unpack
from ..theory._correction import Mode, action_and_factor_at, action_at, find_mode, order_parameters_at
from ..theory._newton import NewtonSolver
from ..theory._objective import Problem, gp_order_parameters, make_problem, readout
from ._base import (
    Sampler,
    SamplerInputs,
    batch_size,
    conditional_outputs,
    no_conditional,
    order_parameter_observables,
    pathwise_draw,
)
from ._proposal import PROPOSAL_DF, PROPOSAL_MIX, Proposal, proposals
from ._settings import SAMPLER_DESCRIPTIONS, SamplerSettings
from ._weights import psis, systematic_resample

__all__ = ["ADAPT_BELOW", "ADAPT_ROUNDS", "Guide", "GuideOnce", "GuidedDraws", "IS_SAMPLER", "MH_SAMPLER",
           "MIN_CURVATURE", "PILOT_FRACTION", "PILOT_MIN_ESS_PER_DIMENSION", "PILOT_RULES_OUT", "PROPOSAL_BASIS_BYTES",
           "PROPOSAL_BATCH", "PilotRule", "RuledOut", "adapt", "guide", "importance", "metropolis", "observables_of",
           "plan", "proposal_form", "propose"]

MIN_CURVATURE = 1e-6
"""Smallest eigenvalue of the proposal's ``H``, relative to its largest (:func:`guide`)."""

PROPOSAL_BATCH = 1024
"""Proposals per vectorised batch (at most; fewer where :data:`~bayes_attn.samplers._base.BATCH_BYTES` says)."""

PROPOSAL_BASIS_BYTES = 2**30
"""Most memory the folded path kernel ``C`` ``[n_1, P, P]`` of the proposals' problem may take (in the sampling
dtype; :func:`proposal_form`)."""


def proposal_form(D: int, P: int, N0: int, itemsize: int) -> str:
    """The kernel basis (:data:`bayes_attn.kernels.BASIS_FORMS`) ``S`` is evaluated in for batches of proposals.

    A batch contracts the folded ``C`` ``[n_1, P, P]`` (``n_1 = D(D+1)/2``) with its draws' ``U_1`` in one
    matrix product, ``2 n_1 P²`` flops per draw, reading ``C`` once per batch; the ``"xi"`` basis costs
    ``2 D N0 P²`` per draw. So ``"C"`` where ``n_1 < D N0`` and ``C`` takes at most
    :data:`PROPOSAL_BASIS_BYTES`, else ``"xi"`` (:func:`bayes_attn.kernels.cheapest_form`; a tie goes to
    ``"xi"``). The Newton solve for the mode keeps :func:`~bayes_attn.kernels.basis_form`'s choice.
    """
    n1 = D * (D + 1) // 2
    return cheapest_form({"xi": 2.0 * D * N0 * P * P, "C": 2.0 * n1 * P * P},
                         fits={"C": n1 * P * P * itemsize <= PROPOSAL_BASIS_BYTES})


class Guide(NamedTuple):
    """The proposal of both samplers: ``θ̂`` ``[n]``, the lower Cholesky factor ``L`` of ``H`` ``[n, n]``, the
    problem ``S`` is evaluated on (in the sampling dtype, its basis of :func:`proposal_form`), and the
    :class:`~bayes_attn.theory._correction.Mode`."""

    theta: jax.Array
    chol: jax.Array
    problem: Problem
    mode: Mode


def guide(inputs: SamplerInputs) -> Guide:
    """Mode and curvature of ``S`` (float64) for the problem of ``inputs``, from the leading-order minimum of §4
    (or, where that solve fails, the prior means). Where ``H`` is not positive definite (the Newton solve
    stopped short of the mode) its eigenvalues are replaced by their absolute values, at least
    :data:`MIN_CURVATURE` times the largest: any proposal with full support is valid, and ``k̂`` or the
    acceptance rate say how good it is. Raises ``ValueError`` where ``S`` or ``H`` is not finite there."""
    net = inputs.net
    y = np.asarray(inputs.y, np.float64)
    with float64():
        problem = make_problem(net, inputs.x, y, inputs.temperature)
        Us0, Ua0 = gp_order_parameters(net)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            lead = NewtonSolver().minimise(Us0, problem)
        if lead.converged:
            Us0 = [np.asarray(U) for U in unpack(np.asarray(lead.theta), problem.heads)]
            Ua0 = float(readout(jnp.asarray(lead.theta), problem))
        mode = find_mode(net, problem, Us0, Ua0)
    H = np.asarray(mode.hessian)
    if not (np.isfinite(mode.action) and np.all(np.isfinite(H))):
        raise ValueError(f"the Laplace expansion gives no proposal: S or its Hessian is not finite at the mode "
                         f"({mode.report.message})")
    lam, vec = np.linalg.eigh(0.5 * (H + H.T))
    top = max(float(np.abs(lam).max()), 1e-300)
    H = (vec * np.maximum(np.abs(lam), MIN_CURVATURE * top)) @ vec.T
    chol = np.linalg.cholesky(0.5 * (H + H.T))
    P, D, N0 = inputs.xi.shape
    form = proposal_form(D, P, N0, jnp.dtype(inputs.dtype).itemsize)
    if form != problem.form:
        with float64():
            problem = make_problem(net, inputs.x, y, inputs.temperature, form=form)
    cast = partial(jnp.asarray, dtype=inputs.dtype)
    return Guide(cast(mode.theta), cast(chol), jax.tree.map(cast, problem), mode)


PILOT_FRACTION = 0.125
"""Size of each pilot (:func:`adapt`) relative to the draws asked for, rounded up to whole batches; the pilots'
draws are not kept."""
ADAPT_BELOW = 0.5
"""The proposal moves to the pilot's weighted moments where its importance-sampling ESS per draw is below this."""
PILOT_MIN_ESS_PER_DIMENSION = 10
"""The pilot's weighted moments are used only where its importance-sampling ESS is at least this times ``dim θ``."""
PILOT_RULES_OUT = 1.0
"""``sampler="auto"`` leaves a guided sampler before its proposals where the last pilot's ``k̂`` exceeds this
(:class:`RuledOut`): weights without a finite mean, on the proposal the draws would come from (:func:`adapt` does
not move such a proposal); at N = 10 of the image network ``k̂`` is 2.1–3.2 (docs/theory.md §9)."""
ADAPT_ROUNDS = 2
"""Most pilots :func:`adapt` runs, each from the proposal the one before moved (docs/theory.md §9: on Fig. 2c at
N = 10 the importance-sampling ESS per draw was 0.07–0.17 from the expansion, 0.16–0.27 after one move,
0.29–0.33 after two, 0.33–0.37 after four)."""


def adapt(g: Guide, count: int, key: jax.Array, inputs: SamplerInputs | None = None,
          progress: str | None = None) -> tuple[Guide, dict]:
    """The proposal of ``g`` moved to the weighted mean and covariance of a pilot of ``count`` of its draws, where
    the pilot says that the proposal is poor (importance-sampling ESS per draw below :data:`ADAPT_BELOW`) and
    that its weighted moments can be used (``k̂`` ≤ 1, weights with a finite mean, and an ESS of at least
    :data:`PILOT_MIN_ESS_PER_DIMENSION` per coordinate); then again from the moved proposal, up to
    :data:`ADAPT_ROUNDS` pilots, until a pilot finds its proposal good or its moments unusable. (The adapted
    proposal is judged by its own ``k̂``, as the expansion's is.) Adaptive importance sampling by moment matching
    (docs/theory.md §9): where the posterior is skewed (small width) its mean and covariance are not the mode and
    ``H⁻¹``, and a proposal moved towards them finds them better. The pilots' draws are not kept, so the kept
    draws are independent draws from a proposal fixed before they are made. Given ``inputs``, the pilots run the
    program of the kept proposals (which also draws ``f``: one compiled program, not two), and ``count`` is
    rounded up to whole batches of it (the padding of the last batch would be computed and dropped). Returns the
    guide and what the pilots measured (``pilot_draws``: all pilots' draws; ``pilot_pareto_k``, ``pilot_is_ess``:
    the last pilot's; ``adapted``: how many times the proposal moved, 0 to :data:`ADAPT_ROUNDS`). Given
    ``progress`` (the sampler's name), each pilot shows a progress bar over its batches."""
    size = _batch(g)
    count = -(-int(count) // size) * size
    info = {"pilot_draws": 0, "pilot_pareto_k": float("nan"), "pilot_is_ess": float("nan"), "adapted": 0,
            "pilot_seconds": 0.0}
    for r in range(ADAPT_ROUNDS):
        t0 = time.perf_counter()
        theta, log_w, *_ = propose(g, jax.random.fold_in(key, r) if r else key, count, inputs,
                                   progress=None if progress is None else f"{progress} pilot {r + 1}")
        smoothed, khat = psis(np.asarray(log_w, np.float64).reshape(1, -1))
        p = np.exp(smoothed.ravel() - smoothed.max())
        p /= p.sum()
        ess = float(1.0 / np.sum(p**2))
        seconds = time.perf_counter() - t0
        info |= {"pilot_draws": info["pilot_draws"] + count, "pilot_pareto_k": khat, "pilot_is_ess": ess,
                 "pilot_is_ess_per_draw": ess / count, "pilot_seconds": info["pilot_seconds"] + seconds,
                 "pilot_seconds_per_ess": seconds / ess if ess > 0 else math.inf}
        theta = np.asarray(theta, np.float64)
        if ess >= ADAPT_BELOW * count or not khat <= 1.0 or ess < PILOT_MIN_ESS_PER_DIMENSION * theta.shape[1]:
            break
        mean = p @ theta
        d = theta - mean
        lam, vec = np.linalg.eigh((d * p[:, None]).T @ d)
        if not lam[0] > 0:
            break
        chol = np.linalg.cholesky((vec / lam) @ vec.T)  # H = cov⁻¹ = L Lᵀ
        cast = partial(jnp.asarray, dtype=g.theta.dtype)
        g = g._replace(theta=cast(mean), chol=cast(chol))
        info["adapted"] += 1
    return g, info


class PilotRule(NamedTuple):
    """What makes a guided sampler stop after its pilots, before its proposals (``sampler="auto"``): the last
    pilot's ``k̂`` above ``max_pareto_k``, or its IS ESS per draw projecting fewer than ``min_ess`` effective draws
    from the proposals asked for (``None``: no such bound; the importance-sampling ESS bounds the ESS of the kept
    draws' order parameters from above, 0.83 of it at N = 10 of Fig. 2c, so the projection is optimistic and a
    sampler left by it would have missed the ESS the convergence rule requires)."""

    max_pareto_k: float
    min_ess: float | None = None


class RuledOut(ValueError):
    """A guided sampler left after its pilots (:class:`PilotRule`): ``pareto_k``, the last pilot's ``k̂``;
    ``pilot_draws``, the proposals the pilots drew; ``pilot``, all they measured (:func:`adapt`)."""

    def __init__(self, name: str, pilot: dict, why: str, planned: int) -> None:
        self.pareto_k, self.pilot_draws, self.pilot = float(pilot["pilot_pareto_k"]), int(pilot["pilot_draws"]), pilot
        super().__init__(f"{name}'s pilot of {self.pilot_draws} proposals had {why}, so its {planned} proposals were "
                         "not drawn")


def _pilot(name: str, g: Guide, planned: int, key: jax.Array, inputs: SamplerInputs, progress_bar: bool,
           rule_out: PilotRule | None) -> tuple[Guide, dict]:
    """:func:`adapt` with a pilot of :data:`PILOT_FRACTION` of the ``planned`` proposals; raises :class:`RuledOut`
    where the last pilot breaks ``rule_out`` (``None``: never)."""
    g, pilot = adapt(g, max(1, round(PILOT_FRACTION * planned)), key, inputs, name if progress_bar else None)
    if rule_out is None:
        return g, pilot
    khat, projected = pilot["pilot_pareto_k"], pilot["pilot_is_ess_per_draw"] * planned
    if khat > rule_out.max_pareto_k:
        finite = " (weights without a finite mean)" if rule_out.max_pareto_k >= 1 else ""
        raise RuledOut(name, pilot, f"Pareto k-hat {khat:.2f} > {rule_out.max_pareto_k:g}{finite}", planned)
    if rule_out.min_ess is not None and projected < rule_out.min_ess:
        raise RuledOut(name, pilot, f"an importance-sampling ESS of {pilot['pilot_is_ess']:.0f} that projects "
                       f"{projected:.0f} effective draws, fewer than the {rule_out.min_ess:.0f} required", planned)
    return g, pilot


class GuideOnce:
    """:func:`guide` computed at its first call and returned again at the next ones (or its ``ValueError`` raised
    again): one problem's proposal shared by the samplers that ``sampler="auto"`` tries in turn, so that the
    expansion (seconds at the image scale, docs/theory.md §9) is solved once per call. For the inputs of one problem
    only: the data, network, temperature and dtype must not change between calls."""

    def __init__(self) -> None:
        self._result: Guide | ValueError | None = None

    def __call__(self, inputs: SamplerInputs) -> Guide:
        if self._result is None:
            try:
                self._result = guide(inputs)
            except ValueError as err:
                self._result = err
        if isinstance(self._result, ValueError):
            raise self._result
        return self._result


# ----------------------------------------------------------------------------
# proposals and their exact log weights (one compiled program per batch size and shape)
# ----------------------------------------------------------------------------
def _batch(guide: Guide) -> int:
    """Proposals per vectorised batch of ``guide``'s problem (:func:`~bayes_attn.samplers._base.batch_size`)."""
    return batch_size(guide.problem.y.shape[0], jnp.dtype(guide.theta.dtype).itemsize, PROPOSAL_BATCH)


def plan(cfg: SamplerSettings, P: int) -> str:
    """What the guided sampler ``cfg.name`` (``laplace-is`` or ``laplace-mh``) will compute for ``P`` training
    examples: proposals per chain, their batches (the units of its progress bars) and the pilots (:func:`adapt`),
    e.g. ``2 chains × 200000 proposals in 391 batches of 1024, after pilots of up to 2 × 49 batches``."""
    C, W, G = cfg.num_chains, cfg.num_warmup, cfg.guided_draws
    size = batch_size(P, jnp.dtype(cfg.dtype).itemsize, PROPOSAL_BATCH)
    per_chain = G if cfg.name == "laplace-is" else W + G
    count = f"{G}" if cfg.name == "laplace-is" else f"({W} dropped + {G})"
    pilot = -(-max(1, round(PILOT_FRACTION * C * per_chain)) // size)
    batches = -(-C * per_chain // size)
    return (f"{C} chains × {count} proposals in {batches} batch{'es' * (batches > 1)} of {size}, after pilots of "
            f"up to {ADAPT_ROUNDS} × {pilot} batch{'es' * (pilot > 1)}")


@dataclasses.dataclass(frozen=True)
class _Action:
    """``S(θ; problem)`` in Bartlett sites of the factor ``shapes`` and, given path inputs ``xis``
    (``(xi_train, xi_test)`` or the first alone), an exact draw of ``f`` at them given ``U_1``, solved with the
    Cholesky factor of ``G`` that ``S`` computed (hashable: a static argument of :func:`proposals`)."""

    shapes: tuple | None
    s0sq: float = 1.0

    def __call__(self, theta: jax.Array, key: jax.Array, problem: Problem, xis: tuple = ()) -> tuple:
        if not xis:
            return action_at(theta, problem, self.shapes), ()
        S, U1, chol = action_and_factor_at(theta, problem, self.shapes)
        return S, tuple(pathwise_draw(U1, key, chol, xis, problem.y, problem.temperature, self.s0sq))


def propose(guide: Guide, key: jax.Array, count: int, inputs: SamplerInputs | None = None,
            progress: str | None = None) -> list[np.ndarray]:
    """``count`` proposals ``θ`` ``[count, n]`` and their exact log weights ``−S(θ) − log q(θ)`` ``[count]``;
    given ``inputs``, also an exact draw of ``f_train`` ``[count, P]`` (and ``f_test`` ``[count, P*]``) given
    each proposal's ``U_1``, with the factorisation ``S`` made (one ``P × P`` Cholesky per proposal).
    ``progress``: the description of a progress bar over the batches (none if ``None``)."""
    if inputs is None:
        return proposals(key, Proposal(guide.theta, guide.chol), _Action(guide.mode.shapes), (guide.problem,),
                         count=count, batch=_batch(guide), progress=progress)
    xis = (inputs.xi,) if inputs.xi_test is None else (inputs.xi, inputs.xi_test)
    cast = partial(jnp.asarray, dtype=guide.theta.dtype)
    return proposals(key, Proposal(guide.theta, guide.chol), _Action(guide.mode.shapes, float(inputs.net.variances[0])),
                     (guide.problem, tuple(map(cast, xis))), count=count, batch=_batch(guide),
                     progress=progress)


def _kept(guide: Guide, theta: np.ndarray, f: list[np.ndarray], index: np.ndarray, inputs: SamplerInputs,
          key: jax.Array) -> dict:
    """The observables of the kept draws: ``index`` ``[chains, kept]`` (nondecreasing along each chain) into each
    chain's proposals ``θ`` ``[chains · T, n]`` and their draws of ``f`` (each ``[chains · T, ...]``).

    The first copy of a proposal keeps the ``f`` drawn with it; a further copy (a run of equal ``θ``: a resampled
    duplicate, a Metropolis chain that stayed) gets a fresh exact draw of ``f`` given its ``U_1``
    (:func:`~bayes_attn.samplers._base.conditional_outputs`, ``key``), as every kept ``θ`` did before ``f`` was drawn
    with the proposals: copies share ``θ`` but not ``f``, so ``f``'s ESS does not fall with the duplicates
    where the weights are uneven (N = 10 of Fig. 2c: docs/theory.md §9), and repeats cost a factorisation each."""
    C = index.shape[0]
    theta = np.asarray(theta).reshape(C, -1, theta.shape[-1])
    out = observables_of(guide, jnp.asarray(np.take_along_axis(theta, index[..., None], axis=1), inputs.dtype))
    names = ("f_train", "f_test")[: len(f)]
    out |= {n: np.take_along_axis(np.asarray(a).reshape(C, -1, a.shape[-1]), index[..., None], axis=1)
            for n, a in zip(names, f, strict=True)}
    repeat = np.zeros(index.shape, bool)
    repeat[:, 1:] = index[:, 1:] == index[:, :-1]
    count = int(repeat.sum())
    if count:  # padded to a power of two: the number of repeats varies from call to call, the small eager
        # programs of the keys' split and the batches' gathers (one per count) do not
        U = np.asarray(out["U"])[repeat]
        U = np.concatenate([U, np.repeat(U[-1:], (1 << (count - 1).bit_length()) - count, axis=0)])
        fresh = conditional_outputs(jnp.asarray(U[None]), key, inputs)
        for n in names:
            out[n][repeat] = np.asarray(fresh[n])[0, :count]
    return out


@partial(jax.jit, static_argnames=("shapes",))
def _observables_of(theta: jax.Array, problem: Problem, *, shapes) -> dict:
    Us, Ua = jax.vmap(lambda t: order_parameters_at(t, problem, shapes))(theta.reshape(-1, theta.shape[-1]))
    obs = order_parameter_observables(Us, Ua)
    return {k: v.reshape(*theta.shape[:-1], *v.shape[1:]) for k, v in obs.items()}


def observables_of(guide: Guide, theta: jax.Array) -> dict:
    """``U``, ``U_2 .. U_L``, ``Ua`` of draws ``θ`` ``[..., n]``."""
    return _observables_of(theta, guide.problem, shapes=guide.mode.shapes)


# ----------------------------------------------------------------------------
# the two samplers
# ----------------------------------------------------------------------------
class GuidedDraws(NamedTuple):
    """What a guided sampler returns: observables ``{name: [chain, draw, ...]}``, sample statistics
    ``{name: [chain, draw]}`` and attributes for the posterior's provenance."""

    draws: dict
    stats: dict
    attrs: dict


def _guide_attrs(g: Guide) -> dict:
    return {"proposal": f"{1 - PROPOSAL_MIX:g} normal + {PROPOSAL_MIX:g} Student t (nu={PROPOSAL_DF:g}) at the mode "
                        "of S with covariance H^-1 or, where attribute adapted >= 1, at the last pilot's weighted "
                        "mean and covariance (docs/theory.md §9)",
            "mode_converged": int(g.mode.report.converged), "mode_seconds": float(g.mode.report.seconds),
            "mode_message": g.mode.report.message}


def importance(inputs: SamplerInputs, cfg: SamplerSettings, key: jax.Array,
               guide_of: Callable[[SamplerInputs], Guide] = guide, progress_bar: bool = False,
               rule_out: PilotRule | None = None) -> GuidedDraws:
    """``laplace-is``: ``num_chains × guided_draws`` proposals (``SamplerSettings.guided_draws``), PSIS, and per
    chain a systematic resample (:func:`~bayes_attn.samplers._weights.systematic_resample`) of as many draws kept in
    the proposals' order (module docstring), of which every ``thinning``-th is kept. ``guide_of`` gives the proposal
    (:func:`guide`, or a :class:`GuideOnce` shared with other samplers); ``progress_bar``: progress bars over the
    batches of the pilots and of the proposals on stderr; ``rule_out``: raise :class:`RuledOut` before the
    proposals where the last pilot breaks it (``sampler="auto"``)."""
    C, S = cfg.num_chains, cfg.guided_draws
    bar = "laplace-is" if progress_bar else None
    g, pilot = _pilot("laplace-is", guide_of(inputs), C * S, jax.random.fold_in(key, 5), inputs, progress_bar,
                      rule_out)
    k_prop, k_res = jax.random.split(key)
    theta, log_w, *f = propose(g, k_prop, C * S, inputs, progress=bar and f"{bar} proposals")
    log_w = np.asarray(log_w, np.float64).reshape(C, S)
    smoothed, khat = psis(log_w)
    w = np.exp(smoothed - smoothed.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    pooled = np.exp(smoothed - smoothed.max())
    is_ess = float(pooled.sum() ** 2 / (pooled**2).sum())
    rng = np.random.default_rng(np.asarray(jax.random.key_data(k_res)).ravel().astype(np.uint32))
    source = np.stack([systematic_resample(w[c], S, rng) for c in range(C)])
    source = source[:, cfg.thinning - 1 :: cfg.thinning]
    return GuidedDraws(_kept(g, theta, f, source, inputs, jax.random.fold_in(key, 2)),
                       {"log_weight": np.take_along_axis(log_w, source, axis=1), "source": source.astype(np.int64)},
                       _guide_attrs(g) | pilot | {"pareto_k": khat, "is_ess": is_ess})


@jax.jit
def _independence_chain(log_w: jax.Array, log_u: jax.Array) -> tuple[jax.Array, ...]:
    """Independence Metropolis–Hastings over one chain's proposals ``log_w`` ``[T]`` (uniforms ``log_u`` ``[T]``),
    started at proposal 0: the state's index, whether the move was accepted, and its probability, per iteration."""

    def step(state, t):
        i, lw = state
        prob = jnp.minimum(1.0, jnp.exp(log_w[t] - lw))
        prob = jnp.where(jnp.isfinite(log_w[t]), prob, 0.0)
        take = log_u[t] < jnp.log(prob)
        i, lw = jnp.where(take, t, i), jnp.where(take, log_w[t], lw)
        return (i, lw), (i, take, prob)

    _, out = jax.lax.scan(step, (jnp.asarray(0), log_w[0]), jnp.arange(1, log_w.shape[0]))
    return tuple(jnp.concatenate([jnp.asarray(v0)[None], v]) for v0, v in zip((0, True, 1.0), out, strict=True))


def metropolis(inputs: SamplerInputs, cfg: SamplerSettings, key: jax.Array,
               guide_of: Callable[[SamplerInputs], Guide] = guide, progress_bar: bool = False,
               rule_out: PilotRule | None = None) -> GuidedDraws:
    """``laplace-mh``: independence Metropolis–Hastings chains on the proposal (module docstring); ``guide_of``,
    ``progress_bar`` and ``rule_out`` as in :func:`importance`."""
    C, W, S, thin = cfg.num_chains, cfg.num_warmup, cfg.guided_draws, cfg.thinning
    T = W + S
    bar = "laplace-mh" if progress_bar else None
    g, pilot = _pilot("laplace-mh", guide_of(inputs), C * T, jax.random.fold_in(key, 5), inputs, progress_bar,
                      rule_out)
    k_prop, k_u = jax.random.split(key)
    theta, raw_w, *f = propose(g, k_prop, C * T, inputs, progress=bar and f"{bar} proposals")
    log_w = jnp.asarray(raw_w, jnp.float64 if inputs.dtype == jnp.float64 else inputs.dtype).reshape(C, T)
    log_u = jnp.log(jax.random.uniform(k_u, (C, T), log_w.dtype))
    index, accepted, prob = (np.asarray(a) for a in jax.vmap(_independence_chain)(log_w, log_u))
    keep = slice(W + thin - 1, None, thin)
    index, accepted, prob = index[:, keep], accepted[:, keep], prob[:, keep]
    state_w = np.take_along_axis(np.asarray(log_w, np.float64), index, axis=1)
    return GuidedDraws(_kept(g, theta, f, index, inputs, jax.random.fold_in(key, 2)),
                       {"log_weight": state_w, "accepted": accepted.astype(bool), "acceptance_rate": prob},
                       _guide_attrs(g) | pilot | {"acceptance": float(np.mean(prob))})


def _sampler(name: str, draw: Callable) -> Sampler:
    return Sampler(name=name, description=SAMPLER_DESCRIPTIONS[name], draws_weights=False, model=None, build=None,
                   observables=None, conditional=no_conditional, labels_arg=1, draw=draw)


IS_SAMPLER = _sampler("laplace-is", importance)
MH_SAMPLER = _sampler("laplace-mh", metropolis)
