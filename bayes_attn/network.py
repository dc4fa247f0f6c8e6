"""The network of docs/theory.md §1, its attention paths (§2) and weights; the kernels' arithmetic is in
:mod:`bayes_attn.kernels`.

Attention is fixed and computed from the bare input ``x`` at every layer, so
the network is linear in its learned weights ``V0``, ``V[l][h]`` and ``a``.

Array layout: inputs ``x`` are ``[P, T, N0]`` (examples, tokens, features).
Paths ``pi = (h1, ..., hL)`` are indexed row-major with ``h1`` slowest; there
are ``D = H_1 ... H_L`` of them. Path labels are 1-based, e.g. ``"1-2"``.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import kernels
from ._internal import checks as _checks
from .kernels import kernel_from_xi, path_kernel_from_xi

__all__ = ["MAX_PRIOR_OVER_TEMPERATURE", "Network", "READOUTS", "Weights", "effective_weights", "forward_from_xi",
           "forward_token", "head_labels", "order_parameter_labels", "order_parameters_from_partial_weights",
           "order_parameters_from_weights", "partial_effective_weights"]

READOUTS = ("last", "first", "mean")


class Weights[T](NamedTuple):
    """The learned weights of §1.

    V0: ``[N1, N0]``; V: one array per layer ``l``, ``[H_l, N_{l+1}, N_l]``
    (``N_{L+1} = Na``); a: ``[Na]``. ``T`` is ``jax.Array``, or a shape tuple (:meth:`Network.weight_shapes`).
    """

    V0: T
    V: tuple[T, ...]
    a: T


MAX_PRIOR_OVER_TEMPERATURE = 1e12
"""The largest prior variance of the output over the temperature accepted (:meth:`Network.check_scale`): beyond
it ``K + T I`` is singular to float64's precision (``T`` below the rounding of ``K``'s entries, 2.2e-16 of them)
with few digits left, and the theory would fail late ("action not finite") instead of at once."""


@dataclass(frozen=True, eq=False)
class Network:
    """Deep multi-head attention network with fixed attention (docs/theory.md §1).

    Args:
        attention: one array per layer ``l``, ``[H_l, N0, N0]``, the bilinear
            matrices ``W[l][h]`` (first index: key token, second: query token).
        widths: ``[N1, ..., NL, Na]`` or one int for all.
        variances: prior variances ``[s0², s1², ..., sL², sa²]`` or one float.
        readout: query position of the last layer, ``"last"``, ``"first"`` or ``"mean"``.
        head_names: optional names per layer and head, for labels in reports.
    """

    attention: tuple[np.ndarray, ...]
    widths: tuple[int, ...]
    variances: tuple[float, ...]
    readout: str = "last"
    head_names: tuple[tuple[str, ...], ...] | None = None

    def __init__(self, attention, widths, variances=1.0, readout: str = "last", head_names=None):
        if isinstance(attention, np.ndarray) or not isinstance(attention, Sequence) or len(attention) == 0:
            raise ValueError("attention must be a non-empty list over layers of arrays [H_l, N0, N0]")
        att: list[np.ndarray] = []
        for l, w in enumerate(attention, start=1):
            arr = _checks.array(f"attention[{l - 1}]", w, ndim=3)
            if arr.shape[1] != arr.shape[2] or (att and arr.shape[1] != att[0].shape[1]):
                raise ValueError(
                    f"attention[{l - 1}] must have shape (H_{l}, N0, N0) with the same N0 in every layer, "
                    f"got {arr.shape}"
                )
            if arr.shape[0] < 1:
                raise ValueError(f"attention[{l - 1}] must hold at least one head, got shape {arr.shape}")
            att.append(arr)
        L = len(att)
        if isinstance(widths, (int, np.integer)) and not isinstance(widths, bool):
            widths = [widths] * (L + 1)
        if not isinstance(widths, Sequence) or len(widths) != L + 1:
            raise ValueError(f"widths must be one int or a list [N1, ..., NL, Na] of length {L + 1}, got {widths!r}")
        widths = tuple(_checks.width(f"widths[{i}]", n) for i, n in enumerate(widths))
        if isinstance(variances, (int, float, np.floating, np.integer)) and not isinstance(variances, bool):
            variances = [variances] * (L + 2)
        if not isinstance(variances, Sequence) or len(variances) != L + 2:
            raise ValueError(
                f"variances must be one float or a list [s0², s1², ..., sL², sa²] of length {L + 2}, got {variances!r}"
            )
        variances = tuple(_checks.positive(f"variances[{i}]", v) for i, v in enumerate(variances))
        _checks.choice("readout", readout, READOUTS)
        if head_names is not None:
            head_names = tuple(tuple(str(n) for n in layer) for layer in head_names)
            if [len(n) for n in head_names] != [a.shape[0] for a in att]:
                raise ValueError("head_names must give one name per head of every layer")
        object.__setattr__(self, "attention", tuple(att))
        object.__setattr__(self, "widths", widths)
        object.__setattr__(self, "variances", variances)
        object.__setattr__(self, "readout", readout)
        object.__setattr__(self, "head_names", head_names)

    def stored_attrs(self) -> dict:
        """The attributes a result file stores to rebuild the network (with ``attention_l`` variables; see
        :meth:`from_stored`): ``widths``, ``variances``, ``readout`` and ``head_names`` (JSON)."""
        return {"widths": list(self.widths), "variances": list(self.variances), "readout": self.readout,
                "head_names": json.dumps(self.head_names)}

    @classmethod
    def from_stored(cls, attrs, variables) -> Network:
        """The network of a result file: ``attrs`` of :meth:`stored_attrs`, ``variables`` holding ``attention_l``
        ``[H_l, N0, N0]`` for ``l = 1..L`` (an xarray Dataset or a mapping of arrays)."""
        widths = [int(n) for n in np.atleast_1d(attrs["widths"])]
        att = [np.asarray(getattr(variables[f"attention_{l}"], "values", variables[f"attention_{l}"]))
               for l in range(1, len(widths))]
        return cls(att, widths, [float(v) for v in np.atleast_1d(attrs["variances"])], str(attrs["readout"]),
                   json.loads(attrs["head_names"]))

    @classmethod
    def from_qk(cls, queries, keys, widths, variances=1.0, readout: str = "last", head_names=None) -> Network:
        """Build from query/key weights: ``W = K^T Q / sqrt(d_qk)``.

        ``queries[l]`` and ``keys[l]`` are ``[H_l, d_qk, N0]``.
        """
        if len(queries) != len(keys):
            raise ValueError(f"queries and keys must have one entry per layer, got {len(queries)} and {len(keys)}")
        att = []
        for l, (q, k) in enumerate(zip(queries, keys, strict=True)):
            q = _checks.array(f"queries[{l}]", q, ndim=3)
            k = _checks.array(f"keys[{l}]", k, shape=q.shape)
            att.append(np.einsum("hdi,hdj->hij", k, q) / math.sqrt(q.shape[1]))
        return cls(att, widths, variances, readout, head_names)

    # ----- sizes and labels -------------------------------------------------
    @property
    def L(self) -> int:
        """Number of attention layers."""
        return len(self.attention)

    @property
    def heads(self) -> tuple[int, ...]:
        """Heads per layer ``(H_1, ..., H_L)``."""
        return tuple(a.shape[0] for a in self.attention)

    @property
    def N0(self) -> int:
        """Token feature dimension."""
        return self.attention[0].shape[1]

    @property
    def D(self) -> int:
        """Number of attention paths ``H_1 ... H_L``."""
        return math.prod(self.heads)

    @property
    def paths(self) -> list[tuple[int, ...]]:
        """Paths as 0-based head tuples, row-major with ``h1`` slowest."""
        return list(itertools.product(*[range(h) for h in self.heads]))

    @property
    def path_labels(self) -> list[str]:
        """1-based path labels such as ``"1-2"``."""
        return order_parameter_labels(self.heads, 1)

    @property
    def gp_U(self) -> np.ndarray:
        """The GP value of ``U``: ``s1² ... sL² sa² I`` (``[D, D]``)."""
        return math.prod(self.variances[1:]) * np.eye(self.D)

    def with_width(self, width: int) -> Network:
        """The same network with every width set to ``width``."""
        return Network(self.attention, width, self.variances, self.readout, self.head_names)

    def with_paths_of(self, heads: Sequence[Sequence[int]]) -> Network:
        """The sub-network keeping, per layer, the 0-based heads listed."""
        att = [a[list(h)] for a, h in zip(self.attention, heads, strict=True)]
        names = None
        if self.head_names is not None:
            names = [[n[i] for i in h] for n, h in zip(self.head_names, heads, strict=True)]
        return Network(att, self.widths, self.variances, self.readout, names)

    # ----- attention and paths ----------------------------------------------
    def check_inputs(self, x, name: str = "x") -> np.ndarray:
        """Validate a batch ``[P, T, N0]`` for this network."""
        return _checks.inputs(name, x, self.N0)

    def check_scale(self, x: np.ndarray, temperature: float, name: str = "x") -> None:
        """``ValueError`` where the prior variance of the output on checked inputs ``x`` ``[P, T, N0]`` is too
        large for ``temperature`` (:data:`MAX_PRIOR_OVER_TEMPERATURE`; e.g. inputs at int64's extremes). The GP
        kernel's diagonal (docs/theory.md §3) is at most ``prod(variances) max_token |x_token|² / N0``, since
        attention averages tokens (softmax weights sum to 1): that bound is checked, computing nothing else."""
        top = math.prod(self.variances) * float(np.max(np.einsum("ptn,ptn->pt", x, x))) / self.N0
        if top > MAX_PRIOR_OVER_TEMPERATURE * temperature:
            raise ValueError(
                f"{name} is too large for temperature {temperature:g}: the prior variance of the output "
                f"(prod(variances) max |token|² / N0 = {top:.3g}) over the temperature is {top / temperature:.3g}, "
                f"above the {MAX_PRIOR_OVER_TEMPERATURE:g} float64 can resolve (K + T I would be singular to its "
                "precision); rescale the inputs or raise the temperature")

    def attention_matrices(self, x) -> list[jax.Array]:
        """``Omega[l][h]`` for each layer: ``[P, H_l, T, T]`` (key, query), softmax over keys.

        The last layer gives only its readout column ``omega[L][h]``: ``[P, H_L, T]``.
        """
        x = jnp.asarray(self.check_inputs(x))
        return kernels.omegas(tuple(jnp.asarray(a) for a in self.attention), x, self.readout)

    def xi(self, x) -> jax.Array:
        """Attentioned inputs ``xi_pi(x)`` of every path: ``[P, D, N0]``.

        """
        x = self.check_inputs(x)
        return kernels.xi(tuple(jnp.asarray(a) for a in self.attention), jnp.asarray(x), self.readout)

    def xi_batches(self, x, batch_size: int) -> Iterator[tuple[jax.Array, int]]:
        """``xi`` of ``x`` ``[P, T, N0]`` in batches ``[B, D, N0]`` of one shape, ``B = min(batch_size, P)``,
        each with its number of real rows: the last is padded by repeating its final input, so that one
        compiled program serves every batch (a ragged last batch would compile everything downstream twice).
        ``x`` as returned by :meth:`check_inputs` (the caller names it in errors); each batch is checked again
        by :meth:`xi`."""
        B = min(batch_size, x.shape[0])
        for start in range(0, x.shape[0], B):
            chunk = x[start : start + B]
            valid = chunk.shape[0]
            if valid < B:
                chunk = np.concatenate([chunk, np.repeat(chunk[-1:], B - valid, axis=0)])
            yield self.xi(chunk), valid

    def path_kernel(self, x, x2=None) -> jax.Array:
        """``C[pi, pi'](mu, nu) = s0² xi_pi(x_mu)·xi_pi'(x2_nu) / (N0 D)``: ``[D, D, P, P2]``."""
        xi1 = self.xi(x)
        xi2 = xi1 if x2 is None else self.xi(x2)
        return path_kernel_from_xi(xi1, xi2, self.variances[0])

    def kernel(self, U, x, x2=None) -> jax.Array:
        """``K(mu, nu) = sum U[pi, pi'] C[pi, pi'](mu, nu)``: ``[P, P2]``; ``U`` is ``[D, D]``."""
        U = jnp.asarray(_checks.array("U", U, shape=(self.D, self.D)))
        xi1 = self.xi(x)
        xi2 = xi1 if x2 is None else self.xi(x2)
        return kernel_from_xi(U, xi1, xi2, self.variances[0])

    # ----- weights and forward pass -----------------------------------------
    def weight_shapes(self) -> Weights[tuple[int, ...]]:
        """Shapes of the weights, as a ``Weights`` of tuples."""
        n = (*self.widths,)
        V = tuple((h, n[l + 1], n[l]) for l, h in enumerate(self.heads))
        return Weights((n[0], self.N0), V, (n[-1],))

    def sample_prior(self, key: jax.Array) -> Weights:
        """Draw weights from the prior (iid Gaussian entries with variances ``s²``)."""
        shapes = self.weight_shapes()
        keys = jax.random.split(key, self.L + 2)
        sd = [math.sqrt(v) for v in self.variances]
        V0 = sd[0] * jax.random.normal(keys[0], shapes.V0)
        V = tuple(sd[l + 1] * jax.random.normal(keys[l + 1], s) for l, s in enumerate(shapes.V))
        a = sd[-1] * jax.random.normal(keys[-1], shapes.a)
        return Weights(V0, V, a)

    def effective_weights(self, weights: Weights) -> jax.Array:
        """``w_pi = a^T V[L][hL] ... V[1][h1] / sqrt(Na NL ... N2)``: ``[D, N1]``."""
        return effective_weights(weights.V, weights.a, self.widths)

    def forward(self, weights: Weights, x, form: str = "path") -> jax.Array:
        """Network output ``f(x)``: ``[P]``.

        ``form="token"`` runs §1 layer by layer over tokens; ``form="path"``
        sums over paths as in §2. They agree exactly in exact arithmetic.
        """
        _checks.choice("form", form, ("token", "path"))
        x = jnp.asarray(self.check_inputs(x))
        att = tuple(jnp.asarray(a) for a in self.attention)
        if form == "token":
            return forward_token(kernels.omegas(att, x, self.readout), x, weights, self.widths)
        xi = kernels.xi(att, x, self.readout)
        return forward_from_xi(xi, weights.V0, self.effective_weights(weights))


def partial_effective_weights(V: Sequence[jax.Array], a: jax.Array, widths: Sequence[int]) -> list[jax.Array]:
    """Effective weights truncated at every layer (docs/theory.md §7): ``[W_1, ..., W_L]``.

    ``W_L[h, :] = a^T V[L][h] / sqrt(Na)`` and
    ``W_l[(h_l, r), :] = W_{l+1}[r, :] V[l][h_l] / sqrt(N_{l+1})`` (``h_l`` slowest),
    so ``W_l`` is ``[H_l ... H_L, N_l]`` and ``W_1 = w`` of §2.
    """
    r = a[None, :] / math.sqrt(widths[-1])  # [paths h_{l+1}..h_L, N_{l+1}] scaled by 1/sqrt(N_{l+1})
    out: list[jax.Array] = []
    for l in reversed(range(len(V))):
        Vl = V[l]  # [H_l, N_{l+1}, N_l]
        r = jnp.einsum("dj,hji->hdi", r, Vl).reshape(Vl.shape[0] * r.shape[0], Vl.shape[2])
        out.insert(0, r)
        r = r / math.sqrt(widths[l])
    return out


def effective_weights(V: Sequence[jax.Array], a: jax.Array, widths: Sequence[int]) -> jax.Array:
    """``w_pi`` of §2 for every path (``h1`` slowest): ``[D, N1]``."""
    return partial_effective_weights(V, a, widths)[0]


def order_parameters_from_weights(V: Sequence[jax.Array], a: jax.Array, widths: Sequence[int]):
    """Empirical order parameters of one draw of the weights (docs/theory.md §3, §7).

    Returns ``([U_1, ..., U_L], Ua)`` with ``U_l = W_l W_l^T / N_l`` (``W_l`` of
    :func:`partial_effective_weights`) and ``Ua = |a|² / Na``; ``U_1 = U``.
    """
    return order_parameters_from_partial_weights(partial_effective_weights(V, a, widths), a)


def order_parameters_from_partial_weights(Ws: Sequence[jax.Array], a: jax.Array):
    """``([W_l W_l^T / N_l for every level], |a|² / Na)`` from :func:`partial_effective_weights` and ``a``."""
    return [W @ W.T / W.shape[1] for W in Ws], a @ a / a.shape[0]


def order_parameter_labels(heads: Sequence[int], level: int) -> list[str]:
    """Labels of the index of ``U_level`` (``(h_l, ..., h_L)``, 1-based, ``h_l`` slowest), e.g. ``"1-2"``."""
    return ["-".join(str(h + 1) for h in p) for p in itertools.product(*[range(H) for H in heads[level - 1 :]])]


def head_labels(heads: Sequence[int]) -> list[str]:
    """Labels of every head, layer by layer, 1-based: ``["L1H1", "L1H2", ..., "L2H1", ...]``."""
    return [f"L{l + 1}H{h + 1}" for l, H in enumerate(heads) for h in range(H)]


def forward_from_xi(xi: jax.Array, V0: jax.Array, w: jax.Array) -> jax.Array:
    """``f = sum_pi w_pi · V0 xi_pi / sqrt(N1 N0 D)`` from ``xi [P, D, N0]``, ``V0 [N1, N0]``, ``w [D, N1]``."""
    N1, N0 = V0.shape
    D = w.shape[0]
    return jnp.einsum("pdi,ni,dn->p", xi, V0, w, optimize="optimal") / math.sqrt(N1 * N0 * D)


def forward_token(omegas: Sequence[jax.Array], x: jax.Array, weights: Weights, widths: Sequence[int]) -> jax.Array:
    """§1 over tokens, given the attention ``omegas`` of :meth:`Network.attention_matrices`: ``[P]``."""
    N0 = x.shape[2]
    z = jnp.einsum("ni,pti->pnt", weights.V0, x) / math.sqrt(N0)  # [P, N1, T]
    for Vl, omega in zip(weights.V, omegas, strict=True):
        H, Nl = Vl.shape[0], Vl.shape[2]
        if omega.ndim == 4:
            z = jnp.einsum("hji,pis,phst->pjt", Vl, z, omega) / math.sqrt(H * Nl)
        else:
            z = jnp.einsum("hji,pis,phs->pj", Vl, z, omega) / math.sqrt(H * Nl)
    return z @ weights.a / math.sqrt(widths[-1])
