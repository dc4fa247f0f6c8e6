"""``"wishart"``: NUTS over the order parameters themselves, via Bartlett factors (docs/theory.md §7).

Once ``V0`` is integrated out (§5) the likelihood depends on the weights only
through ``U_1``, and the prior of the order parameters ``(Ua, U_L, ..., U_1)``
is a chain of Wishart laws, exactly, at any width:

    Na Ua = |a|²,                 Ua ~ sa² χ²(Na) / Na,
    N_l U_l | U_{l+1}  ~  Wishart_{D_l}(N_l, s_l² (I_{H_l} ⊗ U_{l+1})),   U_{L+1} := Ua,

with ``D_l = H_l ··· H_L`` and the index of ``U_l`` ordered ``(h_l, ..., h_L)``,
``h_l`` slowest (§4). The posterior is

    p ∝ Π_l Wishart(U_l | U_{l+1}) · χ²(Ua) · Normal(Y | 0, K(U_1) + temperature I),
    K(U_1) = Σ_{π,π'} U_1[π, π'] C[π, π'].

Non-centred (Bartlett) parametrisation, valid for every width (also
``N_l < D_l``, where ``U_l`` is singular): carry a factor ``F_k`` with
``U_k = F_k F_kᵀ``,

    F_{L+2} = [1]                                   (1 × 1)
    for k = a, L, L−1, ..., 1  (width n_k = Na, N_L, ..., N_1; variance s_k²; H_a = 1):
        m_k = H_k · cols(F_{k+1}),   r_k = min(m_k, n_k)
        A_k  lower-trapezoidal m_k × r_k:
             A_ii = sqrt(c_i),  c_i ~ χ²(n_k − i + 1)   (i = 1..r_k, 1-based)
             A_ij ~ Normal(0, 1)                        (i > j)
        F_k = s_k / sqrt(n_k) · (I_{H_k} ⊗ F_{k+1}) · A_k          (D_k × r_k)
    U_k = F_k F_kᵀ,   Ua = F_a F_aᵀ (1 × 1),   U = U_1.

(Bartlett: ``Z Zᵀ`` for an ``m × n`` standard normal ``Z`` has the law of
``A Aᵀ``; given ``F_{k+1}`` the ``n_k`` columns of ``(I ⊗ F_{k+1}) Z`` are iid
``Normal(0, I ⊗ U_{k+1})``.) ``rank U_k = r_k``.

Two sites (NumPyro samples them as they are, on the real line, in the dtype
of the inputs), each the concatenation over the levels in the order of
``widths`` (``1, ..., L, a``):

- ``t`` ``[Σ_k r_k]``: the diagonals, as *standardised log chi-squares*
  ``t_i = (log c_i − E log c_i) / sd(log c_i)`` with
  ``E log χ²(ν) = log 2 + ψ(ν/2)``, ``Var log χ²(ν) = ψ'(ν/2)``
  (:class:`StandardLogChi2`). Under the prior every ``t_i`` has mean 0 and
  variance 1 at any width, so the unconstrained space is well scaled from the
  start of warm-up (even for ``init_to_uniform``), whereas a plain ``Chi2``
  site lives at ``log c ≈ log N ± sqrt(2/N)``, i.e. ``9.2 ± 0.014`` at
  ``N = 10⁴``. The density is evaluated in a form free of ``O(N)``
  cancellations, so float32 is fine at large width. As every site is
  standardised, chains start from NumPyro's ``init_to_uniform`` (each site
  uniform on (−2, 2)), which needs no gamma sampler in the compiled program
  (``init_to_sample`` would).
- ``z`` ``[Σ_k m_k r_k − r_k (r_k + 1) / 2]``: the strictly lower entries of
  every ``A_k``, column by column, standard normal (absent when there are
  none, e.g. one layer with one head).

The sampled dimension is ``Σ_k (entries of A_k)``, independent of the widths
once they exceed the path counts: 14 for the Fig. 2c network (heads (2, 2):
``A_a`` 1 + ``A_2`` 3 + ``A_1`` 10). Each gradient costs one ``P × P``
Cholesky, or with ``r_1 N0 < P`` one ``r_1 N0 × r_1 N0`` (Woodbury). The
likelihood's kernel form is chosen by shape
(:func:`bayes_attn.kernels.choose_kernel_form`, rank ``r_1``): the stored
path kernel ``C`` for few paths (Fig. 2c), the features ``Φ = ξ F_1`` with
``K = Φ Φᵀ`` for many (16 paths at ``P = 600``: no ``[D, D, P, P]`` tensor),
Woodbury when ``r_1 N0 < P``. Per draw the stored observables are ``U`` (= ``U_1``, ``[D, D]``),
``U_2 .. U_L`` and ``Ua`` (scalar); afterwards ``f_train``, ``f_test`` are
drawn exactly from their Gaussian conditional given ``U_1`` (§5). Raw weights
are not drawn (``draws_weights=False``).

Measured on Fig. 2c (temperature 0.01, 2 chains × (500 + 500)): 14, 7 and 7
leapfrog steps per draw at N = 10, 100 and 10⁴, no divergences; the
posterior mean of ``U`` is 0.104, 0.014 and 0.0005 (relative Frobenius) from
the theory's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import scipy.special
from jax.scipy.linalg import solve_triangular
from numpyro.distributions import constraints
from numpyro.infer import init_to_uniform

from ..theory._bartlett import (
    assemble,
    chi2_dofs,
    factor_chain,
    factor_shapes,
    order_parameters_from_factors,
)
from ._base import (
    Sampler,
    SamplerInputs,
    Start,
    Storage,
    conditional_outputs,
    likelihood_data,
    likelihood_form,
    observation,
    order_parameter_observables,
)
from ._laplace import Guide, guide
from ._settings import SAMPLER_DESCRIPTIONS

__all__ = ["SAMPLER", "StandardLogChi2", "build", "conditional", "diagonal_distribution", "factor_sites",
           "factors_from_diagonals", "factors_from_draw", "factors_from_sites", "model", "observables", "prior_draw",
           "site_sizes", "start"]


class StandardLogChi2(dist.Distribution):
    """``t = (log c − log 2 − ψ(ν/2)) / sqrt(ψ'(ν/2))`` for ``c ~ χ²(ν)``: mean 0, variance 1, on the real line.

    ``log p(t) = log χ²_ν(c) + log c + log σ`` with ``log c = μ + σ t``,
    written as ``−(ν/2)(expm1(s) − s) + const`` with ``s = log(c/ν)`` so that
    no ``O(ν)`` terms cancel (``const`` is computed in float64 NumPy).
    ``df`` is a 1-d array of degrees of freedom (fixed constants, not traced;
    kept as a tuple).
    """

    arg_constraints: dict[str, Any] = {}
    support = constraints.real
    reparametrized_params: list[str] = []
    pytree_data_fields = ("_half", "_sigma", "_mu_s", "_mu", "_const")
    pytree_aux_fields = ("df", "_dtype")

    def __init__(self, df, dtype=jnp.float64, *, validate_args=None):
        df = np.atleast_1d(np.asarray(df, dtype=np.float64))
        if df.ndim != 1 or np.any(df <= 0):
            raise ValueError(f"df must be a 1-d array of positive numbers, got {df!r}")
        half = df / 2
        sigma = np.sqrt(scipy.special.polygamma(1, half))
        mu_s = scipy.special.digamma(half) - np.log(half)  # E log(c / ν)
        const = half * np.log(half) - half - scipy.special.gammaln(half) + np.log(sigma)
        self.df = tuple(df.tolist())
        self._half = jnp.asarray(half, dtype)
        self._sigma = jnp.asarray(sigma, dtype)
        self._mu_s = jnp.asarray(mu_s, dtype)
        self._mu = jnp.asarray(np.log(df) + mu_s, dtype)  # E log c
        self._const = jnp.asarray(const, dtype)
        self._dtype = jnp.dtype(dtype)
        super().__init__(batch_shape=df.shape, validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        shape = sample_shape + self.batch_shape
        logc = math.log(2.0) + jax.random.loggamma(key, self._half, shape, dtype=self._dtype)
        return (logc - self._mu) / self._sigma

    def log_prob(self, value):
        s = self._mu_s + self._sigma * value
        return self._const - self._half * (jnp.expm1(s) - s)

    def chi2(self, value):
        """``c`` from ``t``."""
        return jnp.exp(self._mu + self._sigma * value)

    def from_log_chi2(self, log_c):
        """``t`` from ``log c`` (the inverse of :meth:`chi2`'s map, in logs)."""
        return (log_c - self._mu) / self._sigma

    @property
    def log_chi2_sd(self) -> jax.Array:
        """``sd(log c) = sqrt(ψ'(ν/2))`` per entry: ``∂t / ∂ log c = 1 / sd``."""
        return self._sigma

    @property
    def mean(self):
        return jnp.zeros(self.batch_shape, self._dtype)

    @property
    def variance(self):
        return jnp.ones(self.batch_shape, self._dtype)


# ----------------------------------------------------------------------------
# the model
# ----------------------------------------------------------------------------
def site_sizes(heads: Sequence[int], widths: Sequence[int]) -> tuple[int, int]:
    """Lengths of the sites ``t`` (``Σ_k r_k``) and ``z`` (``Σ_k m_k r_k − r_k (r_k + 1) / 2``)."""
    shapes = factor_shapes(heads, widths)
    return sum(r for _, r in shapes), sum(r * m - r * (r + 1) // 2 for m, r in shapes)


def diagonal_distribution(heads: Sequence[int], widths: Sequence[int], dtype) -> StandardLogChi2:
    """The prior of the site ``t``: the diagonals of ``A_1, ..., A_L, A_a``, concatenated."""
    dofs = [chi2_dofs(m, r, n) for (m, r), n in zip(factor_shapes(heads, widths), widths, strict=True)]
    return StandardLogChi2(np.concatenate(dofs), dtype)


def factors_from_diagonals(c_sqrt: jax.Array, z: jax.Array | None, heads: Sequence[int],
                           widths: Sequence[int]) -> list[jax.Array]:
    """``[A_1, ..., A_L, A_a]`` from all diagonals ``sqrt(c)`` ``[Σ r_k]`` and lower entries ``z`` (concatenated)."""
    A_list, i, j = [], 0, 0
    for m, r in factor_shapes(heads, widths):
        n_low = r * m - r * (r + 1) // 2
        A_list.append(assemble(c_sqrt[i : i + r], None if z is None else z[j : j + n_low], m))
        i, j = i + r, j + n_low
    return A_list


def factors_from_sites(t: jax.Array, z: jax.Array | None, heads: Sequence[int],
                       widths: Sequence[int]) -> list[jax.Array]:
    """``[A_1, ..., A_L, A_a]`` from the sites ``t`` and ``z`` (module docstring)."""
    c = diagonal_distribution(heads, widths, t.dtype).chi2(t)
    return factors_from_diagonals(jnp.sqrt(c), z, heads, widths)


def factor_sites(heads: Sequence[int], widths: Sequence[int], dtype) -> list[jax.Array]:
    """Sample the sites ``t``, ``z`` (module docstring) and return ``[A_1, ..., A_L, A_a]``."""
    t = numpyro.sample("t", diagonal_distribution(heads, widths, dtype))
    n_low = site_sizes(heads, widths)[1]
    z = None
    if n_low:
        normal = dist.Normal(jnp.zeros((), dtype), jnp.ones((), dtype), validate_args=False)
        z = numpyro.sample("z", normal.expand([n_low]))
    return factors_from_sites(t, z, heads, widths)


def factors_from_draw(z: dict, heads: Sequence[int], widths: Sequence[int]) -> list[jax.Array]:
    """``[A_1, ..., A_L, A_a]`` from one draw's sites (``{"t": ..., "z": ...}``)."""
    return factors_from_sites(z["t"], z.get("z"), heads, widths)


def model(data, y, *, heads, widths, variances, temperature, form="tensor"):
    """Wishart-chain prior via Bartlett factors; ``Y ~ Normal(0, K(U_1) + temperature I)``.

    ``data`` is what the likelihood's ``form`` reads (:func:`~bayes_attn.samplers._base.likelihood_data`):
    the path kernel ``C`` ``[D, D, P, P]`` (``"tensor"``) or the path inputs ``[P, D, N0]``
    (``"xi"``, ``"woodbury"``, which use the factor ``F_1`` of ``U_1``). ``y=None`` samples
    ``y`` from the prior predictive.
    """
    A_list = factor_sites(heads, widths, data.dtype)
    F1 = factor_chain(A_list, heads, widths, variances)[0]
    obs = observation(F1 @ F1.T, F1, data, form, variances[0], temperature)
    numpyro.sample("y", obs, obs=y)


def build(inputs: SamplerInputs):
    """The model with the likelihood's form chosen by shape (rank of ``U_1``: ``r_1``) and its data."""
    net = inputs.net
    form = likelihood_form(inputs, factor_shapes(net.heads, net.widths)[0][1])
    return partial(model, form=form, **inputs.consts()), (likelihood_data(inputs, form), inputs.y)


def observables(z: dict, inputs: SamplerInputs, options: Storage) -> dict:
    """``U`` (= ``U_1``), ``U_2 .. U_L``, ``Ua`` of one draw of the factors (raw weights do not exist here)."""
    net = inputs.net
    Us, Ua = order_parameters_from_factors(factors_from_draw(z, net.heads, net.widths), net.heads, net.widths,
                                           net.variances)
    return order_parameter_observables(Us, Ua)


def conditional(draws: dict, key: jax.Array, inputs: SamplerInputs, options: Storage, start: int = 0) -> dict:
    """``f_train``, ``f_test`` drawn exactly given ``U`` (draws numbered from ``start``)."""
    return conditional_outputs(draws["U"], key, inputs, start)


def prior_draw(key: jax.Array, heads: Sequence[int], widths: Sequence[int], variances: Sequence[float] | None = None,
               dtype=jnp.float64) -> list[jax.Array]:
    """One exact prior draw of ``[A_1, ..., A_L, A_a]``: ``c_i`` by ``jax.random.chisquare``, ``A_ij`` normal.

    ``variances`` is accepted for symmetry with :func:`order_parameters_from_factors`
    (the factors do not depend on it). Feed the result to
    :func:`order_parameters_from_factors`; ``vmap`` over keys for many draws.
    Independent of :class:`StandardLogChi2` (which the model uses).
    """
    dtype = jnp.dtype(dtype)
    dofs = np.concatenate([chi2_dofs(m, r, n) for (m, r), n in zip(factor_shapes(heads, widths), widths, strict=True)])
    n_low = site_sizes(heads, widths)[1]
    k1, k2 = jax.random.split(key)
    c = jax.random.chisquare(k1, jnp.asarray(dofs, dtype), dofs.shape, dtype=dtype)
    z = jax.random.normal(k2, (n_low,), dtype) if n_low else None
    return factors_from_diagonals(jnp.sqrt(c), z, heads, widths)


def start(inputs: SamplerInputs, guide_of: Callable[[SamplerInputs], Guide] = guide) -> Start:
    """The chains' start at the mode ``θ̂`` of the finite-width expansion, and the dense inverse mass matrix
    ``H⁻¹`` over the sites ``(t, z)`` (docs/theory.md §9). The expansion's coordinates are the same Bartlett
    sites with ``log c`` in place of ``t``: ``t = (log c − E log c) / sd(log c)``, so
    ``H⁻¹`` is rescaled by ``1 / sd`` on the diagonal sites. Raises ``ValueError`` where the Newton solve for
    the mode did not converge or ``S`` is not finite there (then the chains start as ``"prior"``). ``guide_of``
    gives the expansion (:func:`~bayes_attn.samplers._laplace.guide`, or a shared
    :class:`~bayes_attn.samplers._laplace.GuideOnce`)."""
    net = inputs.net
    g = guide_of(inputs)
    if not g.mode.report.converged:  # a fixed metric from a point that is not the mode could be poor: adapt instead
        raise ValueError(f"the expansion's mode was not found ({g.mode.report.message})")
    diag = diagonal_distribution(net.heads, net.widths, inputs.dtype)
    r = diag.batch_shape[0]
    theta = g.theta
    values = {"t": diag.from_log_chi2(theta[:r])}
    if theta.shape[0] > r:
        values["z"] = theta[r:]
    L_inv = solve_triangular(g.chol, jnp.eye(theta.shape[0], dtype=theta.dtype), lower=True)
    scale = jnp.concatenate([1.0 / diag.log_chi2_sd, jnp.ones(theta.shape[0] - r, theta.dtype)])
    inverse_mass = scale[:, None] * (L_inv.T @ L_inv) * scale[None, :]  # H⁻¹ = L⁻ᵀ L⁻¹, in (t, z)
    return Start(values, 0.5 * (inverse_mass + inverse_mass.T), tuple(values))


SAMPLER = Sampler(
    name="wishart",
    description=SAMPLER_DESCRIPTIONS["wishart"],
    draws_weights=False,
    model=model,
    build=build,
    observables=observables,
    conditional=conditional,
    labels_arg=1,
    init_strategy=init_to_uniform,
    start=start,
)
