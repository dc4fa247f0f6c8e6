"""Path inputs, path kernels and the forms in which they are evaluated (docs/theory.md §2-§3).

Everything here is a function of arrays: the attention matrices ``att`` (one ``[H_l, N0, N0]`` per layer),
inputs ``x`` ``[P, T, N0]``, path inputs ``xi`` ``[P, D, N0]``, order parameters ``U`` ``[D, D]``. Nothing is
kept between calls: a caller that evaluates one data set many times keeps what it computed (e.g. the theory's
:class:`Basis`) and passes it on.

One rule chooses a form, :func:`cheapest_form`: the least cost among the forms that fit in memory. Each use
states its own costs:

- :func:`choose_kernel_form` (``"tensor"``, ``"xi"``, ``"woodbury"``): how the samplers evaluate ``K(U)``
  once per draw, by a cost model of one likelihood evaluation (:func:`kernel_form_costs`);
- :func:`basis_form` (``"C"``, ``"xi"``): what the theory's Newton solve stores for the data term and its
  derivatives (docs/theory.md §4): the folded ``C`` wherever it fits in :data:`C_MAX_ENTRIES`;
- :func:`bayes_attn.samplers._laplace.proposal_form` (``"C"``, ``"xi"``): the basis of the guided samplers'
  proposals, by the flops per draw and the bytes of ``C``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ._internal import checks as _checks
from ._internal.fingerprints import fingerprint
from ._internal.precision import float64
from ._internal.threads import limits

__all__ = [
    "omegas", "xi", "path_kernel_from_xi", "kernel_from_C", "kernel_diag_from_xi", "kernel_from_xi",
    "cheapest_form", "KERNEL_FORMS", "TENSOR_READ_COST", "kernel_form_costs", "choose_kernel_form", "path_features",
    "C_MAX_ENTRIES", "BASIS_FORMS", "basis_form", "Basis", "basis_array", "make_basis", "inputs_key",
]


# ----------------------------------------------------------------------------
# attention and path inputs (§2)
# ----------------------------------------------------------------------------
@partial(jax.jit, static_argnames="readout")
def omegas(att: tuple[jax.Array, ...], x: jax.Array, readout: str) -> list[jax.Array]:
    """Attention ``Omega[l][h]`` of every layer from the bilinear matrices ``att`` (``[H_l, N0, N0]`` each) and the
    inputs ``x`` ``[P, T, N0]``: ``[P, H_l, T, T]`` (key, query), softmax over keys; the last layer only its
    ``readout`` column, ``[P, H_L, T]``."""
    out = []
    for l, W in enumerate(att):
        if l == len(att) - 1 and readout in ("last", "first"):
            # only the readout query's column: its scores, softmax over keys (the other queries are not used)
            q = x[:, -1 if readout == "last" else 0]  # [P, N0]
            out.append(jax.nn.softmax(jnp.einsum("psi,hij,pj->phs", x, W, q), axis=2))
            continue
        score = jnp.einsum("psi,hij,ptj->phst", x, W, x)
        omega = jax.nn.softmax(score, axis=2)
        if l == len(att) - 1:
            omega = {"last": omega[..., -1], "first": omega[..., 0], "mean": omega.mean(axis=-1)}[readout]
        out.append(omega)
    return out


@partial(jax.jit, static_argnames="readout")
def xi(att: tuple[jax.Array, ...], x: jax.Array, readout: str) -> jax.Array:
    """Attentioned inputs ``xi_pi(x)`` of every path (docs/theory.md §2), ``h1`` slowest: ``[P, D, N0]``."""
    om = omegas(att, x, readout)
    r = om[-1]  # [P, H_L, T]: the right-most factor of every path
    for omega in reversed(om[:-1]):  # prepend h_l as the slowest index
        P, H, T, _ = omega.shape
        r = jnp.einsum("phst,pdt->phds", omega, r).reshape(P, H * r.shape[1], T)
    return jnp.einsum("psi,pds->pdi", x, r)


# ----------------------------------------------------------------------------
# the path kernel C and K(U) = sum U C (§3)
# ----------------------------------------------------------------------------
def path_kernel_from_xi(xi1: jax.Array, xi2: jax.Array, s0sq: float | jax.Array) -> jax.Array:
    """``C`` of §3 from path inputs ``[P, D, N0]`` and ``[P2, D, N0]``: ``[D, D, P, P2]``."""
    D, N0 = xi1.shape[1], xi1.shape[2]
    return s0sq * jnp.einsum("adi,bei->deab", xi1, xi2) / (N0 * D)


def kernel_from_C(U: jax.Array, C: jax.Array) -> jax.Array:
    """``K = sum U[pi, pi'] C[pi, pi']`` from ``U`` ``[D, D]`` and ``C`` ``[D, D, ...]``: ``[...]``."""
    return jnp.einsum("de,de...->...", U, C)


def kernel_diag_from_xi(xi: jax.Array, s0sq: float) -> jax.Array:
    """Diagonal ``C[pi, pi'](mu, mu)`` of the path kernel: ``[D, D, P]``."""
    D, N0 = xi.shape[1], xi.shape[2]
    return s0sq * jnp.einsum("pdi,pei->dep", xi, xi) / (N0 * D)


@jax.jit
def kernel_from_xi(U: jax.Array, xi1: jax.Array, xi2: jax.Array, s0sq: float) -> jax.Array:
    """``K = sum U C`` without forming ``C``: ``[P, P2]``."""
    D, N0 = xi1.shape[1], xi1.shape[2]
    return s0sq * jnp.einsum("adi,de,bei->ab", xi1, U, xi2, optimize="optimal") / (N0 * D)


# ----------------------------------------------------------------------------
# the one rule for a form
# ----------------------------------------------------------------------------
def cheapest_form(costs: Mapping[str, float], fits: Mapping[str, bool] | None = None) -> str:
    """The form of least cost in ``costs`` (``{form: cost}``; ties: the first listed) among those that fit in
    memory (``fits``: ``{form: bool}``, a form not named fits). ``ValueError`` when none fits."""
    fits = {} if fits is None else fits
    allowed = {form: c for form, c in costs.items() if fits.get(form, True)}
    if not allowed:
        raise ValueError(f"no form of {list(costs)} fits in memory")
    return min(allowed, key=allowed.__getitem__)


# ----------------------------------------------------------------------------
# forms of K(U) for the samplers, chosen by a cost model
# ----------------------------------------------------------------------------
KERNEL_FORMS = ("tensor", "xi", "woodbury")
"""Ways to evaluate ``K(U) = Σ U[π, π'] C[π, π']`` (and ``G = K + T I``) many times for one data set:

- ``"tensor"``: contract ``U`` with the stored path kernel ``C`` ``[D, D, P, P]``
  (``D² P²`` numbers read per evaluation: memory-bound, cheap for few paths);
- ``"xi"``: from the path inputs, ``K = Φ Φᵀ`` with the features
  ``Φ[μ, (k, i)] = sqrt(s0² / (N0 D)) Σ_π F[π, k] ξ_π(x_μ)_i`` for a factor
  ``U = F Fᵀ`` (``F`` ``[D, r]``), or ``ξ (U ⊗ I) ξᵀ`` for a ``U`` of larger
  rank: one matrix product of ``P² r N0`` flops, no ``[D, D, P, P]`` tensor;
- ``"woodbury"``: ``G = T I + Φ Φᵀ`` is never formed; its log-determinant and
  solves go through the ``r N0 × r N0`` capacitance ``I + Φᵀ Φ / T``
  (possible only when ``r N0 < P``).

All three are the same function of ``U`` in exact arithmetic
(``tests/test_kernels.py`` checks it in float64). :func:`choose_kernel_form`
picks the cheapest by the cost model :func:`kernel_form_costs`.
"""

TENSOR_READ_COST = 16.0
"""Cost of reading one entry of ``C`` in the ``"tensor"`` form, in flops of a matrix product (the
contraction is memory-bound). Any value from about 5 to 115 picks the faster form in every case of
``benchmarks/results/kernel_forms.json``."""


def kernel_form_costs(D: int, P: int, N0: int, rank: int | None = None) -> dict[str, float]:
    """Estimated cost (flop-equivalents) of one evaluation of the likelihood ``Normal(Y | 0, G)`` per form.

    ``rank`` is the number of columns ``r`` of the factor ``F`` of ``U`` (default ``D``);
    ``"woodbury"`` is absent when ``r N0 >= P``. Counts the kernel and the
    factorisation (Cholesky ``P³ / 3``, or the capacitance ``P m² + m³ / 3`` with ``m = r N0``).
    """
    r = D if rank is None else min(int(rank), D)
    m = r * N0
    chol = P**3 / 3
    costs = {
        "tensor": TENSOR_READ_COST * D * D * P * P + chol,
        "xi": 2.0 * P * D * m + 2.0 * P * P * m + chol,
    }
    if m < P:
        costs["woodbury"] = 2.0 * P * D * m + 2.0 * P * m * m + m**3 / 3
    return costs


def choose_kernel_form(D: int, P: int, N0: int, rank: int | None = None) -> str:
    """The cheapest of :data:`KERNEL_FORMS` for ``D`` paths, ``P`` examples, ``N0`` features and ``U`` of ``rank``."""
    return cheapest_form(kernel_form_costs(D, P, N0, rank))


def path_features(xi: jax.Array, F: jax.Array, s0sq: float) -> jax.Array:
    """``Φ`` ``[P, r N0]`` with ``Φ Φᵀ = K(F Fᵀ)``, from path inputs ``xi`` ``[P, D, N0]`` and ``F`` ``[D, r]``."""
    D, N0 = xi.shape[1], xi.shape[2]
    phi = jnp.einsum("pdi,dk->pki", xi, F) * math.sqrt(s0sq / (N0 * D))
    return phi.reshape(xi.shape[0], -1)


# ----------------------------------------------------------------------------
# the theory's kernel basis (docs/theory.md §4), chosen by its size
# ----------------------------------------------------------------------------
C_MAX_ENTRIES = 20_000_000
"""Use the ``"C"`` form (``C`` folded onto the vech entries of ``U_1``,
``[D(D+1)/2, P, P]``) when ``D² P²`` is at most this; else the ``"xi"`` form
(``[P, D, N0]``)."""

BASIS_FORMS = ("C", "xi")


BASIS_FORM_COSTS = {"C": 1.0, "xi": 2.0}
"""The Newton solve's relative costs: the folded ``C`` is computed once per data set and reused at every step,
width and temperature (a :class:`Basis`), while the ``"xi"`` form recomputes its Gram blocks ``O(D⁴ N0²)`` at
every step; so ``"C"`` wherever it fits."""


def basis_form(D: int, P: int) -> str:
    """``"C"`` when ``D² P² <= C_MAX_ENTRIES``, else ``"xi"`` (:func:`cheapest_form` of :data:`BASIS_FORM_COSTS`)."""
    return cheapest_form(BASIS_FORM_COSTS, fits={"C": D * D * P * P <= C_MAX_ENTRIES})


def inputs_key(x: np.ndarray, att: Sequence[np.ndarray], readout: str, s0sq: float) -> str:
    """What a :class:`Basis` is computed from: shapes and :func:`~bayes_attn._internal.fingerprints.fingerprint` of the
    inputs and of every attention matrix, the readout and ``s0²``."""
    arrays = (x, *att)
    return repr(([np.shape(a) for a in arrays], [fingerprint(a) for a in arrays], readout, float(s0sq)))


@dataclass(frozen=True, eq=False)
class Basis:
    """The theory's kernel basis of one data set: what ``S`` needs of the inputs, at any width or temperature.

    Attributes:
        form: ``"C"``: ``array`` is ``C`` folded onto the vech entries of ``U_1``, ``[D(D+1)/2, P, P]``;
            ``"xi"``: ``array = xi · sqrt(s0² / (N0 D))``, ``[P, D, N0]`` (float64, on the device).
        array: see ``form``.
        heads: ``(H_1, ..., H_L)`` of the network it was computed for.
        key: :func:`inputs_key` of the inputs, attention, readout and ``s0²`` it was computed from.
    """

    form: str
    array: jax.Array
    heads: tuple[int, ...]
    key: str

    def check(self, name: str, key: str, heads: Sequence[int]) -> None:
        """Raise ``ValueError`` (naming ``name``) unless computed from the values ``key`` for ``heads``."""
        if tuple(heads) != self.heads or key != self.key:
            raise ValueError(f"{name} was computed from other inputs, attention, readout or s0² than it is used "
                             "with: compute it from these (kernels.make_basis or theory.kernel_basis)")


def basis_array(att: Sequence[np.ndarray], x: np.ndarray, readout: str, s0sq: float,
                form: str | None = None) -> tuple[str, jax.Array]:
    """``(form, array)`` of :class:`Basis` for attention ``att`` on inputs ``x`` ``[P, T, N0]`` (float64, on the
    device); ``form`` defaults to :func:`basis_form`. Arguments are assumed checked
    (:meth:`bayes_attn.Network.check_inputs`)."""
    heads = tuple(int(a.shape[0]) for a in att)
    P, N0, D = x.shape[0], x.shape[2], math.prod(heads)
    form = basis_form(D, P) if form is None else _checks.choice("form", form, BASIS_FORMS)
    with float64(), limits():
        attj = tuple(jnp.asarray(a, dtype=jnp.float64) for a in att)
        xj = jnp.asarray(x, dtype=jnp.float64)
        if form == "C":
            array = folded_path_kernel(attj, xj, float(s0sq), readout=readout)
        else:
            array = scaled_xi(attj, xj, math.sqrt(s0sq / (N0 * D)), readout=readout)
        return form, jax.block_until_ready(array)


def make_basis(att: Sequence[np.ndarray], x: np.ndarray, readout: str, s0sq: float, form: str | None = None) -> Basis:
    """The :class:`Basis` of :func:`basis_array`, with the :func:`inputs_key` that later uses are checked against."""
    form, array = basis_array(att, x, readout, s0sq, form)
    return Basis(form, array, tuple(int(a.shape[0]) for a in att), inputs_key(x, att, readout, s0sq))


@partial(jax.jit, static_argnames="readout")
def folded_path_kernel(att: tuple[jax.Array, ...], x: jax.Array, s0sq: jax.Array, readout: str) -> jax.Array:
    """The ``"C"`` basis: ``C`` ``[D, D, P, P]`` folded onto the vech entries of ``U_1``, ``[n_1, P, P]``,
    symmetrised."""
    xi_ = xi(att, x, readout)
    C = path_kernel_from_xi(xi_, xi_, s0sq)  # [D, D, P, P]
    i, j = np.triu_indices(xi_.shape[1])
    basis = jnp.where((i == j)[:, None, None], C[i, j], C[i, j] + C[j, i])  # [n_1, P, P]
    return 0.5 * (basis + basis.transpose(0, 2, 1))


@partial(jax.jit, static_argnames="readout")
def scaled_xi(att: tuple[jax.Array, ...], x: jax.Array, scale: jax.Array, readout: str) -> jax.Array:
    """The ``"xi"`` basis: ``xi · sqrt(s0² / (N0 D))`` ``[P, D, N0]``."""
    return xi(att, x, readout) * scale
