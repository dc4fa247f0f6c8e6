"""The gradient-descent transformer of the one-shot image task (docs/theory.md §6, paper Fig. 3).

The model has the architecture of §1 with *learned* query/key maps, trained
end to end by gradient descent (optax). Attention of every layer is computed
from the bare input ``x0``; there is no residual, MLP or normalisation:

    z        = V0 x0                                     (per token, [d])
    Omega_h  = softmax_s( (Q_h x_t)·(K_h x_s) / sqrt(d_qk) )   (s key, t query)
    z       <- sum_h V_h z Omega_h / sqrt(H)             (every layer)
    f(x0)    = a · mean_t z_t

Training is :mod:`bayes_attn.oneshot._training`. After training,
:func:`to_network` gives the same function as a
:class:`~bayes_attn.network.Network` (frozen ``W = K^T Q / sqrt(d_qk)``) with
rescaled :class:`~bayes_attn.network.Weights`, so that the theory, the samplers
and :func:`trained_order_parameters` (the empirical ``U`` of §3) apply to it.

Array layout: inputs ``x`` are ``[P, T, N0]``, labels ``y`` are ``[P]`` in ±1.
Layers and heads are 0-based in code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import stats
from .._internal import checks as _checks
from ..network import Network, Weights, order_parameters_from_weights

__all__ = ["ModelConfig", "Params", "TrainedOrderParameters", "accuracy", "attention", "check_params", "config_of",
           "correct", "forward", "init_params", "nearest_neighbour_accuracy", "predict", "to_network",
           "trained_order_parameters"]


# ----- configuration ----------------------------------------------------------
@dataclass(frozen=True)
class ModelConfig:
    """Architecture of the gradient-descent model (defaults: the paper's, docs/theory.md §6).

    Args:
        N0: token feature dimension (192 in the paper).
        width: value width ``d`` (512).
        d_qk: query/key dimension (128).
        heads: heads per layer ``(H_1, ..., H_L)`` ((4, 4)).
        qk_scale: factor on the usual query/key initialisation (0.1). With the
            usual initialisation the attention starts so sharp that the loss
            never leaves chance; 0 starts from uniform attention.
    """

    N0: int
    width: int = 512
    d_qk: int = 128
    heads: tuple[int, ...] = (4, 4)
    qk_scale: float = 0.1

    def __post_init__(self):
        for name in ("N0", "width", "d_qk"):
            object.__setattr__(self, name, _checks.positive_int(name, getattr(self, name)))
        heads = self.heads
        if isinstance(heads, (int, np.integer)) or not isinstance(heads, Sequence) or len(heads) == 0:
            raise ValueError(f"heads must be a non-empty tuple of heads per layer, got {heads!r}")
        object.__setattr__(self, "heads", tuple(_checks.positive_int(f"heads[{i}]", h) for i, h in enumerate(heads)))
        object.__setattr__(self, "qk_scale", _checks.nonnegative("qk_scale", self.qk_scale))

    @property
    def L(self) -> int:
        """Number of attention layers."""
        return len(self.heads)

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        return {**asdict(self), "heads": list(self.heads)}


class Params(NamedTuple):
    """Weights of the gradient-descent model (a pytree).

    V0: ``[d, N0]``; Q, K: one array per layer, ``[H_l, d_qk, N0]``;
    V: one array per layer, ``[H_l, d, d]`` (output, input); a: ``[d]``.
    """

    V0: jax.Array
    Q: tuple[jax.Array, ...]
    K: tuple[jax.Array, ...]
    V: tuple[jax.Array, ...]
    a: jax.Array


# ----- the model --------------------------------------------------------------
def init_params(config: ModelConfig, key: jax.Array, dtype=None) -> Params:
    """Fan-in scaled normal initialisation (std ``1/sqrt(fan_in)``); Q and K times ``qk_scale``."""
    if not isinstance(config, ModelConfig):
        raise ValueError(f"config must be a ModelConfig, got {type(config).__name__}")
    dtype = jnp.zeros(()).dtype if dtype is None else dtype
    d, N0, dqk = config.width, config.N0, config.d_qk
    keys = jax.random.split(key, 3 * config.L + 2)

    def normal(k, shape, fan_in, scale=1.0):
        return (scale / math.sqrt(fan_in)) * jax.random.normal(k, shape, dtype)

    V0 = normal(keys[0], (d, N0), N0)
    Q = tuple(normal(keys[1 + 3 * l], (H, dqk, N0), N0, config.qk_scale) for l, H in enumerate(config.heads))
    K = tuple(normal(keys[2 + 3 * l], (H, dqk, N0), N0, config.qk_scale) for l, H in enumerate(config.heads))
    V = tuple(normal(keys[3 + 3 * l], (H, d, d), d) for l, H in enumerate(config.heads))
    a = normal(keys[-1], (d,), d)
    return Params(V0, Q, K, V, a)


def config_of(params: Params, qk_scale: float = 0.1) -> ModelConfig:
    """The :class:`ModelConfig` matching the shapes of ``params`` (``qk_scale`` is not stored in them)."""
    check_params(params)
    return ModelConfig(
        N0=int(params.V0.shape[1]),
        width=int(params.V0.shape[0]),
        d_qk=int(params.Q[0].shape[1]),
        heads=tuple(int(q.shape[0]) for q in params.Q),
        qk_scale=qk_scale,
    )


def check_params(params: Params, config: ModelConfig | None = None) -> Params:
    """Validate the shapes of ``params`` (against ``config`` when given)."""
    if not isinstance(params, Params):
        raise ValueError(f"params must be a model.Params, got {type(params).__name__}")
    if not (len(params.Q) == len(params.K) == len(params.V)) or len(params.Q) == 0:
        raise ValueError("params.Q, params.K and params.V must have one array per layer")
    d, N0 = params.V0.shape
    dqk = params.Q[0].shape[1]
    for l, (q, k, v) in enumerate(zip(params.Q, params.K, params.V, strict=True)):
        H = q.shape[0]
        if q.shape != (H, dqk, N0) or k.shape != (H, dqk, N0):
            raise ValueError(f"params.Q[{l}] and params.K[{l}] must be [H, d_qk={dqk}, N0={N0}], "
                             f"got {q.shape}, {k.shape}")
        if v.shape != (H, d, d):
            raise ValueError(f"params.V[{l}] must be [H={H}, d={d}, d={d}], got {v.shape}")
    if params.a.shape != (d,):
        raise ValueError(f"params.a must be [d={d}], got {params.a.shape}")
    if config is not None:
        want = (config.width, config.N0, config.d_qk, config.heads)
        got = (d, N0, dqk, tuple(q.shape[0] for q in params.Q))
        if want != got:
            raise ValueError(f"params do not match config: (width, N0, d_qk, heads) {got} vs {want}")
    return params


def attention(Q: jax.Array, K: jax.Array, x: jax.Array) -> jax.Array:
    """``Omega[p, h, s, t]`` (key s, query t), softmax over keys: ``[P, H, T, T]`` from ``Q, K [H, d_qk, N0]``,
    ``x [P, T, N0]``."""
    q = jnp.einsum("hkn,ptn->phtk", Q, x)
    k = jnp.einsum("hkn,psn->phsk", K, x)
    score = jnp.einsum("phtk,phsk->phst", q, k) / math.sqrt(Q.shape[1])
    return jax.nn.softmax(score, axis=2)


def forward(params: Params, x) -> jax.Array:
    """Model output ``f(x)``: ``[P]`` from ``x [P, T, N0]``."""
    x = jnp.asarray(x, dtype=params.V0.dtype)
    z = jnp.einsum("dn,ptn->ptd", params.V0, x)  # [P, T, d]
    for Q, K, V in zip(params.Q, params.K, params.V, strict=True):
        omega = attention(Q, K, x)
        mixed = jnp.einsum("psi,phst->phti", z, omega)  # tokens mixed per head
        z = jnp.einsum("hji,phti->ptj", V, mixed) / math.sqrt(V.shape[0])
    return z.mean(axis=1) @ params.a


_forward_jit = jax.jit(forward)


def predict(params: Params, x, chunk: int = 512) -> np.ndarray:
    """``forward`` in jitted chunks of ``chunk`` examples (the last one padded): ``[P]`` NumPy."""
    check_params(params)
    x = _checks.inputs("x", x, int(params.V0.shape[1]))
    chunk = _checks.positive_int("chunk", chunk)
    P = x.shape[0]
    n = min(chunk, P)
    out = []
    for start in range(0, P, n):
        xb = x[start : start + n]
        m = xb.shape[0]
        if m < n:
            xb = np.concatenate([xb, np.zeros((n - m, *xb.shape[1:]), xb.dtype)])
        out.append(np.asarray(_forward_jit(params, jnp.asarray(xb, params.V0.dtype)))[:m])
    return np.concatenate(out).astype(np.float64)


def accuracy(params: Params, x, y) -> tuple[float, float]:
    """``(accuracy, se)`` of the model's sign on ``x [P, T, N0]`` with labels ``y [P]`` ±1;
    ``se = sqrt(acc(1-acc)/P)``."""
    x = _checks.inputs("x", x, int(params.V0.shape[1]))
    y = _check_pm1("y", y, x.shape[0])
    return stats.accuracy_se(predict(params, x), y)


def correct(params: Params, x, y) -> np.ndarray:
    """Per-example correctness (bool ``[P]``) of the model's sign."""
    x = _checks.inputs("x", x, int(params.V0.shape[1]))
    y = _check_pm1("y", y, x.shape[0])
    return stats.correct(predict(params, x), y)


def _check_pm1(name: str, y, P: int) -> np.ndarray:
    y = _checks.labels(name, y, P)
    if not np.all(np.abs(y) == 1):
        raise ValueError(f"{name} must hold labels +1 or -1")
    return y


# ----- the same network in bayes_attn.network terms ---------------------------
def to_network(params: Params, config: ModelConfig, *, width: int | None = None,
               variances=1.0) -> tuple[Network, Weights | None]:
    """The model as a :class:`Network` (readout ``"mean"``, ``W = K^T Q / sqrt(d_qk)``) and its :class:`Weights`.

    ``Network.forward(weights, x)`` (either form) equals :func:`forward`. The
    network divides by ``sqrt(N0)`` at ``V0``, ``sqrt(H_l N_l)`` at layer ``l``
    and ``sqrt(Na)`` at the readout, this model by ``sqrt(H_l)`` only, and the
    mean over query tokens of the (linear) last layer is its ``"mean"``
    readout. So the weights are ``V0·sqrt(N0)``, ``V[l]·sqrt(d)``, ``a·sqrt(d)``.

    ``width``: the widths of the returned network (for theory or sampling at
    another ``N`` on the frozen attention); when it differs from
    ``config.width`` no weights fit it and the second item is ``None``.
    ``variances``: the network's prior variances (they do not enter the forward pass).
    """
    check_params(params, config)
    d = config.width
    width = d if width is None else _checks.positive_int("width", width)
    net = Network.from_qk(
        [np.asarray(q, dtype=np.float64) for q in params.Q],
        [np.asarray(k, dtype=np.float64) for k in params.K],
        width,
        variances,
        readout="mean",
    )
    if width != d:
        return net, None
    weights = Weights(
        params.V0 * math.sqrt(config.N0),
        tuple(V * math.sqrt(d) for V in params.V),
        params.a * math.sqrt(d),
    )
    return net, weights


class TrainedOrderParameters(NamedTuple):
    """Empirical order parameters of trained weights (docs/theory.md §3, §4).

    U: ``U_1 = U``, ``[D, D]``; Us: ``[U_1, ..., U_L]`` (``U_l`` of size
    ``H_l ... H_L``); Ua: ``|a|² / Na``. All in the normalisation of
    :func:`to_network`'s weights.
    """

    U: np.ndarray
    Us: list[np.ndarray]
    Ua: float


def trained_order_parameters(params: Params, config: ModelConfig) -> TrainedOrderParameters:
    """``U[pi, pi'] = w_pi·w_pi' / N1`` with ``w_pi = a·V_L[h_L]···V_1[h_1] / sqrt(Na N_L···N_2)`` of the rescaled
    weights."""
    net, weights = to_network(params, config)
    assert weights is not None  # the model's own width: its weights fit
    Us, Ua = order_parameters_from_weights(weights.V, weights.a, net.widths)
    Us = [np.asarray(u, dtype=np.float64) for u in Us]
    return TrainedOrderParameters(Us[0], Us, float(Ua))


# ----- pixel baseline ---------------------------------------------------------
def nearest_neighbour_accuracy(images, y, *, positive_support: int = 0) -> tuple[float, float]:
    """Nearest-neighbour (Euclidean, on the pixels as given) accuracy of 2-way 1-shot episodes.

    Args:
        images: ``[n, 3, ...]``: per episode support 0, support 1, query (any
            trailing image shape, e.g. preprocessed ``[32, 32]``).
        y: ``[n]`` ±1 targets; ``+1`` iff the query's class is that of support
            ``positive_support`` (0 or 1).

    The query is assigned the class of the nearer support (a tie goes to
    support 0). Returns ``(accuracy, se)``.
    """
    im = _checks.array("images", images)
    if im.ndim < 2 or im.shape[1] != 3 or im.shape[0] < 1:
        raise ValueError(f"images must have shape (n, 3, ...) (support 0, support 1, query), got {im.shape}")
    if positive_support not in (0, 1):
        raise ValueError(f"positive_support must be 0 or 1, got {positive_support!r}")
    y = _check_pm1("y", y, im.shape[0])
    flat = im.reshape(im.shape[0], 3, -1)
    d0 = np.sum((flat[:, 2] - flat[:, 0]) ** 2, axis=1)
    d1 = np.sum((flat[:, 2] - flat[:, 1]) ** 2, axis=1)
    nearest = np.where(d0 <= d1, 0, 1)
    pred = np.where(nearest == positive_support, 1.0, -1.0)
    return stats.proportion(pred == y)
