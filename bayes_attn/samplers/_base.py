"""What every sampler shares: its inputs, its surface, and the pieces of §5.

A sampler module (``full``, ``full_token``, ``collapsed``, ``wishart``) exposes
the same small surface, collected in a :class:`Sampler`:

- ``model``: the NumPyro model (a plain function of arrays);
- ``build(inputs) -> (model, args)``: the model with its constants bound and
  its positional arguments, ready for ``NUTS``;
- ``observables(z, inputs, options) -> dict``: the per-draw invariant
  observables (run inside the sampler, so raw weights need not be kept);
- ``conditional(draws, key, inputs, options) -> dict``: exact draws taken
  afterwards from Gaussian conditionals (``f`` or ``V0`` given the rest);
- ``labels_arg``: the position of the labels ``y`` among ``args`` (read and
  replaced with :meth:`Sampler.labels`, :meth:`Sampler.with_labels`);
- ``init_strategy``: NumPyro's start of every chain (a prior draw,
  ``init_to_sample``, unless the sampler names a cheaper one);
- ``start``: ``wishart`` only: the mode of the finite-width expansion and
  its dense inverse mass matrix ``H⁻¹`` (:class:`Start`), used when
  ``SamplerSettings.start`` is ``"expansion"`` (the default);
- ``draw``: set by the samplers that do not run NUTS (``laplace-is``,
  ``laplace-mh``, :mod:`bayes_attn.samplers._laplace`): their own draw loop,
  which returns the observables; ``model``, ``build`` and ``observables`` are
  then ``None``.

NUTS and MCMC are built from these in :mod:`bayes_attn.samplers._nuts`.
The models build their distributions with ``validate_args=False``: NumPyro's
checks of their parameters ran eagerly when a chain started, compiling one
small program per check (22 of the 37 programs of a ``sample_posterior`` call).

Stored observables (docs/theory.md §3, §5, §7): ``U`` (= ``U_1``, ``[D, D]``),
``U_2 .. U_L`` (``U_l`` over ``(h_l, ..., h_L)``), ``Ua`` (scalar),
``f_train`` ``[P]`` and ``f_test`` ``[P_test]``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.infer import init_to_sample

from .. import gp
from ..kernels import (
    KERNEL_FORMS,
    choose_kernel_form,
    kernel_from_C,
    kernel_from_xi,
    path_features,
    path_kernel_from_xi,
)
from ..network import Network, forward_from_xi, order_parameters_from_partial_weights, partial_effective_weights

__all__ = ["BATCH_BYTES", "CONDITIONAL_BATCH", "FeatureNormal",
           "check_weights", "draw_keys", "GramNormal", "Sampler", "SamplerInputs", "Start",
           "Storage", "batch_size", "conditional_outputs", "full_observables", "gram", "input_projection",
           "likelihood_data", "likelihood_form", "map_batches", "no_conditional", "observation",
           "order_parameter_observables", "pathwise_draw", "prepare", "upper", "upper_weights", "weight_observables"]


class SamplerInputs(NamedTuple):
    """A sampling problem, with arrays in the sampling dtype.

    net: the network; x: training inputs ``[P, T, N0]`` (float64 numpy);
    xi: path inputs ``[P, D, N0]``; y: labels ``[P]``; xi_test: ``[P_test, D, N0]``
    or ``None``; temperature: likelihood variance.
    """

    net: Network
    x: np.ndarray
    xi: jax.Array
    y: jax.Array
    xi_test: jax.Array | None
    temperature: float

    @property
    def dtype(self):
        return self.xi.dtype

    def consts(self) -> dict:
        """Keyword constants every model takes."""
        n = self.net
        return dict(heads=n.heads, widths=n.widths, variances=n.variances, temperature=self.temperature)


class Storage(NamedTuple):
    """What to store besides the invariant observables."""

    keep_weights: bool = False
    keep_effective_weights: bool = False


def check_weights(smp: Sampler, options: Storage) -> None:
    """Refuse stored weights of a sampler that draws none."""
    if (options.keep_weights or options.keep_effective_weights) and not smp.draws_weights:
        raise ValueError(
            f"keep_weights and keep_effective_weights need a sampler that draws weights; "
            f"{smp.name!r} samples the order parameters only"
        )


class Start(NamedTuple):
    """Where NUTS starts and the metric it uses, from the finite-width expansion (docs/theory.md §9).

    values: the sites' start ``{site: array}`` (unconstrained: the sites are on the real line);
    inverse_mass_matrix: the dense inverse mass matrix over the sites of :attr:`block`, in that order;
    block: the site names of the one dense block. NUTS then adapts the step size only.
    """

    values: dict
    inverse_mass_matrix: jax.Array
    block: tuple[str, ...]


class Sampler(NamedTuple):
    """One sampler's surface (see the module docstring)."""

    name: str
    description: str
    draws_weights: bool
    model: Callable | None
    build: Callable[[SamplerInputs], tuple[Callable, tuple]] | None
    observables: Callable[[dict, SamplerInputs, Storage], dict] | None
    conditional: Callable[..., dict]  # (draws, key, inputs, options, start=0): draws numbered from start
    labels_arg: int
    """Position of the labels ``y`` ``[P]`` among the positional arguments that ``build`` returns."""
    init_strategy: Callable = init_to_sample
    """Where every chain starts (a NumPyro init strategy)."""
    start: Callable[..., Start] | None = None
    """The expansion's start and dense metric (``SamplerSettings.start = "expansion"``): ``start(inputs[, guide_of])``;
    ``None`` where the sampler's sites are not the expansion's coordinates. Raises ``ValueError`` where the
    expansion gives none."""
    draw: Callable | None = None
    """A sampler with its own draw loop instead of NUTS (``laplace-is``, ``laplace-mh``):
    ``draw(inputs, settings, key[, guide_of], progress_bar=False, rule_out=None) -> GuidedDraws``
    (``progress_bar``: bars over its batches on stderr; ``rule_out``: the
    :class:`~bayes_attn.samplers._laplace.PilotRule` that stops it before its proposals,
    :class:`~bayes_attn.samplers._laplace.RuledOut`); then ``model``, ``build`` and ``observables`` are
    ``None``. ``guide_of(inputs)`` gives the expansion's proposal (default
    :func:`bayes_attn.samplers._laplace.guide`; ``auto`` shares one
    :class:`~bayes_attn.samplers._laplace.GuideOnce`)."""

    def labels(self, args: tuple) -> jax.Array:
        """The labels among a model's positional arguments ``args`` (as ``build`` returns them)."""
        return args[self.labels_arg]

    def with_labels(self, args: tuple, y: jax.Array) -> tuple:
        """``args`` with the labels replaced by ``y`` (e.g. per replication, :mod:`bayes_attn.calibration`)."""
        i = self.labels_arg % len(args)
        return (*args[:i], y, *args[i + 1 :])


def prepare(net: Network, x: np.ndarray, y: np.ndarray | jax.Array, x_test: np.ndarray | None, temperature: float,
            dtype: str) -> SamplerInputs:
    """Path inputs and labels in ``dtype`` (call inside the matching precision context)."""
    jdt = jnp.dtype(dtype)
    xi = net.xi(x).astype(jdt)
    xi_test = None if x_test is None else net.xi(x_test).astype(jdt)
    return SamplerInputs(net, x, xi, jnp.asarray(y, jdt), xi_test, float(temperature))


# ----------------------------------------------------------------------------
# the likelihood Y ~ Normal(0, K(U) + temperature I) in the form chosen by shape
# ----------------------------------------------------------------------------
def likelihood_form(inputs: SamplerInputs, rank: int) -> str:
    """The kernel form (:data:`bayes_attn.kernels.KERNEL_FORMS`) for ``U`` of ``rank`` on these inputs."""
    P, D, N0 = inputs.xi.shape
    return choose_kernel_form(D, P, N0, rank)


def likelihood_data(inputs: SamplerInputs, form: str) -> jax.Array:
    """What the likelihood reads: ``C`` ``[D, D, P, P]`` for ``"tensor"``, else the path inputs ``[P, D, N0]``."""
    if form not in KERNEL_FORMS:
        raise ValueError(f"form must be one of {KERNEL_FORMS}, got {form!r}")
    if form == "tensor":
        return path_kernel_from_xi(inputs.xi, inputs.xi, inputs.net.variances[0])
    return inputs.xi


def _features(F: jax.Array | None, data: jax.Array, form: str, s0sq: float) -> jax.Array | None:
    """``Φ`` ``[P, r N0]`` with ``K = Φ Φᵀ`` where the ξ-form kernel has a factor ``F`` ``[D, r]`` of rank
    ``r ≤ D`` (the product is then the cheaper one), else ``None``."""
    if form == "tensor" or F is None or F.shape[1] > F.shape[0]:
        return None
    return path_features(data, F, s0sq)


def gram(U: jax.Array, F: jax.Array | None, data: jax.Array, form: str, s0sq: float) -> jax.Array:
    """``K(U)`` ``[P, P]`` from ``U`` ``[D, D]`` (or its factor ``F`` ``[D, r]``, ``U = F Fᵀ``) in ``form``.

    ``"woodbury"`` never forms ``K``; asked for it, this returns ``K`` by the ``"xi"`` form.
    """
    if form == "tensor":
        return kernel_from_C(U, data)
    phi = _features(F, data, form, s0sq)
    if phi is not None:
        return phi @ phi.T
    return kernel_from_xi(U, data, data, s0sq)


def observation(U: jax.Array, F: jax.Array | None, data: jax.Array, form: str, s0sq: float,
                temperature: float) -> dist.Distribution:
    """``Normal(0, K(U) + temperature I)`` over ``[P]``, evaluated in ``form`` (see :func:`gram`); with features
    ``Φ`` (a factor of rank ≤ D) as :class:`FeatureNormal`, whose gradient is cheaper than the Gram matrix's."""
    if form == "woodbury":
        if F is None:
            raise ValueError("the 'woodbury' form needs a factor F of U")
        P = data.shape[0]
        diag = jnp.full(P, temperature, U.dtype)
        return dist.LowRankMultivariateNormal(jnp.zeros(P, U.dtype), path_features(data, F, s0sq), diag,
                                              validate_args=False)
    phi = _features(F, data, form, s0sq)
    if phi is not None:
        return FeatureNormal(phi, temperature)
    return GramNormal(gp.covariance(gram(U, F, data, form, s0sq), temperature))


class GramNormal(dist.Distribution):
    """``Normal(0, G)`` over ``[P]`` from its covariance ``G`` ``[P, P]`` (symmetric positive definite).

    The log density is :func:`bayes_attn.gp.log_likelihood`, whose derivative is
    in closed form (NUTS's gradient costs one triangular inverse instead of
    differentiating the Cholesky factorisation). Draws: ``L ε`` with ``G = L Lᵀ``.
    """

    arg_constraints: dict[str, Any] = {}
    support = constraints.real_vector
    reparametrized_params: list[str] = []
    pytree_data_fields = ("G",)

    def __init__(self, G: jax.Array):
        if G.ndim != 2 or G.shape[0] != G.shape[1]:
            raise ValueError(f"G must be a square matrix [P, P], got shape {G.shape}")
        self.G = G
        super().__init__(batch_shape=(), event_shape=G.shape[-1:], validate_args=False)

    def sample(self, key, sample_shape=()):
        eps = jax.random.normal(key, (*sample_shape, *self.event_shape), self.G.dtype)
        return eps @ jnp.linalg.cholesky(self.G).T

    def log_prob(self, value):
        return jnp.vectorize(gp.log_likelihood, signature="(p,p),(p)->()")(self.G, value)


class FeatureNormal(dist.Distribution):
    """``Normal(0, Φ Φᵀ + temperature I)`` over ``[P]`` from features ``Φ`` ``[P, m]``.

    The log density is :func:`bayes_attn.gp.log_likelihood_features`, whose
    gradient in ``Φ`` costs one ``P × P × m`` product fewer than
    :class:`GramNormal` of ``Φ Φᵀ + temperature I``. Draws: ``L ε``.
    """

    arg_constraints: dict[str, Any] = {}
    support = constraints.real_vector
    reparametrized_params: list[str] = []
    pytree_data_fields = ("phi", "temperature")

    def __init__(self, phi: jax.Array, temperature):
        if phi.ndim != 2:
            raise ValueError(f"phi must be a matrix [P, m], got shape {phi.shape}")
        self.phi, self.temperature = phi, jnp.asarray(temperature, phi.dtype)
        super().__init__(batch_shape=(), event_shape=phi.shape[:1], validate_args=False)

    def sample(self, key, sample_shape=()):
        eps = jax.random.normal(key, (*sample_shape, *self.event_shape), self.phi.dtype)
        return eps @ gp.gram_cholesky(self.phi @ self.phi.T, self.temperature).T

    def log_prob(self, value):
        return jnp.vectorize(gp.log_likelihood_features, signature="(p,m),(),(p)->()")(self.phi, self.temperature,
                                                                                        value)


# ----------------------------------------------------------------------------
# priors of §1
# ----------------------------------------------------------------------------
def upper_weights(heads, widths, variances, dtype):
    """Sample ``V[l][h]`` (sites ``V1..VL``, ``[H_l, N_{l+1}, N_l]``) and ``a`` (``[Na]``)."""
    V = []
    for l, H in enumerate(heads):
        sd = jnp.asarray(math.sqrt(variances[l + 1]), dtype)
        prior = dist.Normal(jnp.zeros((), dtype), sd, validate_args=False).expand([H, widths[l + 1], widths[l]])
        V.append(numpyro.sample(f"V{l + 1}", prior))
    sa = jnp.asarray(math.sqrt(variances[-1]), dtype)
    a = numpyro.sample("a", dist.Normal(jnp.zeros((), dtype), sa, validate_args=False).expand([widths[-1]]))
    return tuple(V), a


def input_projection(N0: int, widths, variances, dtype):
    """Sample ``V0`` (``[N1, N0]``)."""
    s0 = jnp.asarray(math.sqrt(variances[0]), dtype)
    return numpyro.sample("V0", dist.Normal(jnp.zeros((), dtype), s0, validate_args=False).expand([widths[0], N0]))


def upper(z: dict, L: int) -> tuple[tuple[jax.Array, ...], jax.Array]:
    """``(V, a)`` from a draw's sites."""
    return tuple(z[f"V{l + 1}"] for l in range(L)), z["a"]


def order_parameter_observables(Us, Ua) -> dict:
    """``{"U": U_1, "U_2": ..., "U_L": ..., "Ua": Ua}``."""
    return {"U": Us[0], **{f"U_{l}": U for l, U in enumerate(Us[1:], start=2)}, "Ua": Ua}


def weight_observables(z: dict, inputs: SamplerInputs, options: Storage) -> dict:
    """Order parameters from a draw of the upper weights (plus ``w`` and raw weights if asked)."""
    return _with_effective_weights(z, inputs, options)[0]


def _with_effective_weights(z: dict, inputs: SamplerInputs, options: Storage) -> tuple[dict, jax.Array]:
    """:func:`weight_observables` and the effective weights ``w`` ``[D, N1]``, each computed once."""
    net = inputs.net
    V, a = upper(z, net.L)
    Ws = partial_effective_weights(V, a, net.widths)
    out = order_parameter_observables(*order_parameters_from_partial_weights(Ws, a))
    if options.keep_effective_weights:
        out["w"] = Ws[0]
    if options.keep_weights:
        out |= z
    return out, Ws[0]


def full_observables(z: dict, inputs: SamplerInputs, options: Storage) -> dict:
    """Order parameters and ``f_train``, ``f_test`` of one draw of all weights (``V0`` included)."""
    out, w = _with_effective_weights(z, inputs, options)
    out["f_train"] = forward_from_xi(inputs.xi, z["V0"], w)
    if inputs.xi_test is not None:
        out["f_test"] = forward_from_xi(inputs.xi_test, z["V0"], w)
    return out


def no_conditional(draws: dict, key: jax.Array, inputs: SamplerInputs, options: Storage, start: int = 0) -> dict:
    """For samplers that draw every weight: nothing to add."""
    return {}


# ----------------------------------------------------------------------------
# exact conditional draws given U (§5)
# ----------------------------------------------------------------------------
def _psd_sqrt(U: jax.Array) -> jax.Array:
    """``R`` with ``R R^T = U`` for a positive semi-definite ``U``."""
    lam, vec = jnp.linalg.eigh(U)
    return vec * jnp.sqrt(jnp.clip(lam, 0.0))


def draw_keys(key: jax.Array, shape: tuple[int, ...], start: int = 0) -> jax.Array:
    """One key per draw ``[chain · draw]``: draw ``d`` of chain ``c`` gets ``fold_in(fold_in(key, c), start + d)``,
    whatever the number of draws, so that the conditional draws of a run sampled in blocks (each block from its
    ``start``) are those of one long run (:mod:`bayes_attn.samplers._blocks`)."""
    chains, draws = shape
    per_chain = jax.vmap(lambda c: jax.vmap(lambda d: jax.random.fold_in(jax.random.fold_in(key, c), d))(
        jnp.arange(start, start + draws)))(jnp.arange(chains))
    return per_chain.reshape(chains * draws)


def conditional_outputs(U_draws: jax.Array, key: jax.Array, inputs: SamplerInputs, start: int = 0) -> dict:
    """``f_train`` (and ``f_test``) drawn exactly from ``f | U, Y`` for every draw of ``U``.

    ``U_draws`` is ``[chain, draw, D, D]``, its draws numbered from ``start`` (their keys: :func:`draw_keys`).
    The prior draw uses
    ``f'(x) = s0 / sqrt(N0 D) sum_{pi,k} R[pi, k] Z[k] · xi_pi(x)`` (``U = R R^T``,
    ``Z`` ``[D, N0]`` standard normal), whose covariance is ``K(U)``; then
    :func:`bayes_attn.gp.pathwise_weights` conditions it on ``Y``. The draws go through one compiled
    program in vectorised batches of one size per problem (:func:`map_batches`, :func:`batch_size`), compiled once
    per shape: other numbers of draws and other temperatures reuse it.
    """
    D = inputs.xi.shape[1]
    form = "xi" if likelihood_form(inputs, D) == "woodbury" else likelihood_form(inputs, D)
    shape = U_draws.shape[:2]
    keys = draw_keys(key, shape, start)
    flat = U_draws.reshape(-1, *U_draws.shape[2:])
    data, temperature = likelihood_data(inputs, form), jnp.asarray(inputs.temperature, flat.dtype)
    given = (data, inputs.xi, inputs.y, inputs.xi_test, temperature)
    outs = map_batches(lambda u, k: _conditional_f(u, k, given, form=form, s0sq=float(inputs.net.variances[0])),
                       (flat, keys), batch_size(inputs.y.shape[0], flat.dtype.itemsize, CONDITIONAL_BATCH))
    names = ["f_train", "f_test"][: len(outs)]
    return {n: o.reshape(*shape, -1) for n, o in zip(names, outs, strict=True)}


CONDITIONAL_BATCH = 256
"""Draws per vectorised batch of :func:`conditional_outputs` (at most; fewer where :data:`BATCH_BYTES` says)."""

BATCH_BYTES = 256 * 2**20
"""Memory a vectorised batch of draws (:func:`batch_size`) may use at a time."""


def map_batches(fn: Callable, xs: tuple, size: int, progress: str | None = None) -> list[Any]:
    """``fn`` over the leading axis of the arrays ``xs`` (each ``[count, ...]``; JAX, NumPy or JAX keys), in
    batches of ``size`` (the last one padded with copies of the last item, whose results are dropped): ``fn`` takes
    one batch of each array and returns a sequence of arrays ``[size, ...]``; returns them ``[count, ...]`` as
    NumPy arrays. One batch size per caller and problem, whatever the count: a jitted ``fn`` is compiled once and
    serves every count (``lax.map`` would compile one program per count), at the price of at most ``size − 1``
    padded items per call. The batches are cut and the results joined in NumPy: as JAX operations, outside a
    compiled program, each new count would compile its own slices and joins. (Inside a traced function, e.g. under
    ``vmap``, they are JAX operations of that program, and the results JAX arrays.) Given ``progress`` (a
    description), a progress bar over the batches goes to stderr (tqdm, as NumPyro's for NUTS)."""
    count = xs[0].shape[0]
    size = max(int(size), 1)
    padded = count + (-count % size)
    index = np.minimum(np.arange(padded), count - 1)
    if any(isinstance(x, jax.core.Tracer) for x in xs):
        xs = tuple(x[index] for x in xs)
        parts = [fn(*(x[i : i + size] for x in xs)) for i in range(0, padded, size)]
        return [jnp.concatenate(p)[:count] for p in zip(*parts, strict=True)]
    keys = [jnp.issubdtype(x.dtype, jax.dtypes.prng_key) for x in xs]
    host = [np.asarray(jax.random.key_data(x) if k else x)[index] for x, k in zip(xs, keys, strict=True)]
    impls = [jax.random.key_impl(x) if k else None for x, k in zip(xs, keys, strict=True)]

    def batch(i: int) -> list:
        return [h[i : i + size] if impl is None else jax.random.wrap_key_data(h[i : i + size], impl=impl)
                for h, impl in zip(host, impls, strict=True)]

    starts = range(0, padded, size)
    if progress is None:
        parts = [fn(*batch(i)) for i in starts]
    else:  # each batch waited for, so that the bar counts finished batches (not dispatched ones)
        from tqdm.auto import tqdm

        bar = tqdm(starts, desc=progress, unit="batch", file=sys.stderr, mininterval=0.5)
        parts = [jax.block_until_ready(fn(*batch(i))) for i in bar]
    return [np.concatenate([np.asarray(a) for a in p])[:count] for p in zip(*parts, strict=True)]


def batch_size(P: int, itemsize: int, most: int, memory: int = BATCH_BYTES) -> int:
    """Draws per vectorised batch of a computation that holds about four ``P × P`` arrays per draw (a kernel, its
    Cholesky factor, the solves): ``memory`` bytes over them, at least 1, at most ``most``."""
    return int(min(most, max(1, memory // (4 * itemsize * (P * P + 64)))))


@partial(jax.jit, static_argnames=("form", "s0sq"))
def _conditional_f(U: jax.Array, keys: jax.Array, given: tuple, *, form: str, s0sq: float) -> list[jax.Array]:
    """:func:`conditional_outputs` on one batch of draws ``[B, D, D]`` with one key each, ``given`` ``(data, xi, y,
    xi_test or None, temperature)``: ``[f_train [B, P], (f_test [B, P_test])]``."""
    data, xi, y, xi_test, temperature = given
    xis = (xi,) if xi_test is None else (xi, xi_test)

    def one(U, k):
        chol = gp.gram_cholesky(gram(U, _psd_sqrt(U), data, form, s0sq), temperature)
        return pathwise_draw(U, k, chol, xis, y, temperature, s0sq)

    return jax.vmap(one)(U, keys)


def pathwise_draw(U: jax.Array, key: jax.Array, chol: jax.Array, xis: tuple, y: jax.Array, temperature: jax.Array,
                  s0sq: float) -> list[jax.Array]:
    """One exact draw of ``f | U, Y`` at the path inputs ``xis`` (``(xi_train [P, D, N0], xi_test [P*, D, N0])``,
    or the first alone): ``[f_train [P], (f_test [P*])]``, by pathwise conditioning (:func:`conditional_outputs`)
    with ``chol``, the lower Cholesky factor of ``G = K(U) + temperature I`` ``[P, P]``."""
    xi = xis[0]
    D, N0 = xi.shape[1], xi.shape[2]
    k1, k2 = jax.random.split(key)
    RZ = _psd_sqrt(U) @ jax.random.normal(k1, (D, N0), U.dtype) * math.sqrt(s0sq / (N0 * D))
    priors = [jnp.einsum("pdi,di->p", xq, RZ) for xq in xis]
    eps = jnp.sqrt(temperature) * jax.random.normal(k2, y.shape, U.dtype)
    alpha = jax.scipy.linalg.cho_solve((chol, True), y - priors[0] - eps)  # gp.pathwise_weights, factor given
    v = gp.xi_weights(U, xi, alpha, s0sq)  # K(x, X) alpha = xi(x) · v
    return [f + gp.at_xi(xq, v) for f, xq in zip(priors, xis, strict=True)]
