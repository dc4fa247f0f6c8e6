"""The hidden-Markov-chain classification task and its heads (docs/theory.md §6).

Tokens are ``[N0f features | T+1 one-hot positions]`` with a zero-feature
beginning-of-sequence (BOS) token at position 0, so ``N0 = N0f + T + 1``.
A head's bilinear matrix ``W`` (key index first, query second) has a feature
block ``[N0f, N0f]``, a position block ``[T+1, T+1]`` and two off-diagonal
feature–position blocks; every head is multiplied by ``beta``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._internal import checks as _checks
from ..network import Network

__all__ = ["FIG2C_LAYERS", "FIG2E_LAYERS", "HEADS", "MarkovTask", "fig2c", "fig2e"]

HEADS = ("same_token", "different_token", "uniform", "random")


@dataclass(frozen=True)
class MarkovTask:
    """Parameters of the task; defaults are the paper's (Fig. 2).

    Attributes:
        feature_dim: ``N0f``, even; the state vectors fill its two halves.
        seq_len: ``T``, states per sequence (the BOS token comes on top).
        p_stay: stay probabilities of class +1 and class −1.
        noise_sum, noise_diff, noise_perp: noise strengths along ``v+ + v−``,
            along ``v+ − v−`` and in the ``N0f − 2`` remaining directions.
        n_train, n_test: sequences in each set, half per class.
        seed: random seed of the data.
    """

    feature_dim: int = 200
    seq_len: int = 30
    p_stay: tuple[float, float] = (0.7, 0.3)
    noise_sum: float = 1.0
    noise_diff: float = 1.0
    noise_perp: float = 1.0
    n_train: int = 100
    n_test: int = 1000
    seed: int = 0

    def __post_init__(self):
        _checks.positive_int("feature_dim", self.feature_dim, minimum=2)
        if self.feature_dim % 2:
            raise ValueError(f"feature_dim must be even, got {self.feature_dim}")
        _checks.positive_int("seq_len", self.seq_len)
        if len(self.p_stay) != 2 or not all(0.0 <= float(p) <= 1.0 for p in self.p_stay):
            raise ValueError(f"p_stay must be two probabilities in [0, 1], got {self.p_stay!r}")
        object.__setattr__(self, "p_stay", tuple(float(p) for p in self.p_stay))
        for name in ("noise_sum", "noise_diff", "noise_perp"):
            _checks.nonnegative(name, getattr(self, name))
        _checks.positive_int("n_train", self.n_train, minimum=2)
        _checks.positive_int("n_test", self.n_test, minimum=2)

    @property
    def N0(self) -> int:
        """Token dimension: features plus one-hot positions."""
        return self.feature_dim + self.seq_len + 1

    @property
    def states(self) -> tuple[np.ndarray, np.ndarray]:
        """State vectors ``v+ = sqrt(2)[1..1, 0..0]`` and ``v− = sqrt(2)[0..0, 1..1]``."""
        half = self.feature_dim // 2
        vp = np.sqrt(2.0) * np.r_[np.ones(half), np.zeros(half)]
        return vp, vp[::-1].copy()

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` sequences ``[n, T+1, N0]`` and labels ``[n]`` (±1, half each, shuffled)."""
        y = np.where(np.arange(n) < n - n // 2, 1.0, -1.0)
        rng.shuffle(y)
        T, F = self.seq_len, self.feature_dim
        p = np.where(y > 0, self.p_stay[0], self.p_stay[1])
        s = np.empty((n, T), dtype=bool)  # True: state +
        s[:, 0] = rng.random(n) < 0.5
        for t in range(1, T):
            stay = rng.random(n) < p
            s[:, t] = np.where(stay, s[:, t - 1], ~s[:, t - 1])
        vp, vm = self.states
        feats = np.where(s[..., None], vp, vm)
        g = rng.standard_normal((n, T, F))
        e_sum = (vp + vm) / np.linalg.norm(vp + vm)
        e_diff = (vp - vm) / np.linalg.norm(vp - vm)
        c_sum, c_diff = g @ e_sum, g @ e_diff
        perp = g - c_sum[..., None] * e_sum - c_diff[..., None] * e_diff
        feats = feats + self.noise_sum * c_sum[..., None] * e_sum + self.noise_diff * c_diff[..., None] * e_diff
        feats = feats + self.noise_perp * perp
        x = np.zeros((n, T + 1, self.N0))
        x[:, 1:, :F] = feats
        x[:, :, F:] = np.eye(T + 1)
        return x, y

    def generate(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Training and test sets ``x_train, y_train, x_test, y_test`` from ``seed``."""
        rng = np.random.default_rng(self.seed)
        x, y = self.sample(self.n_train, rng)
        xt, yt = self.sample(self.n_test, rng)
        return x, y, xt, yt

    def validation(self) -> tuple[np.ndarray, np.ndarray]:
        """A validation set of ``n_test`` sequences, drawn after the training and test sets from ``seed``
        (so it leaves them unchanged): for choices such as the temperature, never made on the test set."""
        rng = np.random.default_rng(self.seed)
        self.sample(self.n_train, rng)
        self.sample(self.n_test, rng)
        return self.sample(self.n_test, rng)

    # ----- heads -------------------------------------------------------------
    def _blocks(self, feature: np.ndarray, position: np.ndarray, off: tuple[np.ndarray, np.ndarray] | None = None):
        F = self.feature_dim
        W = np.zeros((self.N0, self.N0))
        W[:F, :F] = feature
        W[F:, F:] = position
        if off is not None:
            W[:F, F:], W[F:, :F] = off
        return W

    def _previous_token_positions(self, bos: float) -> np.ndarray:
        n = self.seq_len + 1
        pos = np.zeros((n, n))
        pos[np.arange(n - 1), np.arange(1, n)] = 1.0  # key = query − 1
        pos[0, :] += bos
        return pos

    def head(self, kind: str, *, beta: float = 10.0, strength: float = 1.0, seed: int = 0,
             bos: float = 1.5) -> np.ndarray:
        """Bilinear matrix ``[N0, N0]`` of one head, times ``beta``.

        kind:
            ``"same_token"``: feature block ``q q^T``, ``q = (v+ − v−)/N0f``
            (same state +1, different −1), previous-token position block with
            strength 1 and BOS key with strength ``bos``; copies the previous
            token when it is in the same state, else attends the BOS token.
            ``"different_token"``: the same with ``−q q^T``.
            ``"uniform"``: position block of ones: uniform attention.
            ``"random"``: feature block ``A/N0f``, position block ``B``,
            off-diagonal blocks ``C/sqrt(N0f)``, entries standard normal times
            ``strength`` (drawn from ``seed``); ``strength=0`` is uniform.
        """
        _checks.choice("kind", kind, HEADS)
        F, n = self.feature_dim, self.seq_len + 1
        vp, vm = self.states
        q = (vp - vm) / F
        if kind in ("same_token", "different_token"):
            sign = 1.0 if kind == "same_token" else -1.0
            W = self._blocks(sign * np.outer(q, q), self._previous_token_positions(bos))
        elif kind == "uniform":
            W = self._blocks(np.zeros((F, F)), np.ones((n, n)))
        else:
            r = np.random.default_rng(seed)
            A, B = r.standard_normal((F, F)), r.standard_normal((n, n))
            C1, C2 = r.standard_normal((F, n)), r.standard_normal((n, F))
            W = strength * self._blocks(A / F, B, (C1 / math.sqrt(F), C2 / math.sqrt(F)))
        return beta * W

    def network(
        self,
        layers: Sequence[Sequence[str]],
        *,
        width: int | Sequence[int] = 10,
        variances: float | Sequence[float] = 1.0,
        beta: float = 10.0,
        random_strength: float = 1.0,
        random_seed: int = 1,
        readout: str = "last",
    ) -> Network:
        """A network whose layer ``l`` has the heads named in ``layers[l]``.

        Each random head gets its own seed (``random_seed`` + its position).
        """
        if not layers or any(not layer for layer in layers):
            raise ValueError(f"layers must list at least one head per layer, got {layers!r}")
        att, k = [], 0
        for layer in layers:
            heads = []
            for kind in layer:
                heads.append(self.head(kind, beta=beta, strength=random_strength, seed=random_seed + k))
                k += 1
            att.append(np.stack(heads))
        return Network(att, width, variances, readout, head_names=layers)


FIG2C_LAYERS = (("same_token", "random"), ("uniform", "random"))
"""Fig. 2c: four paths; ``"1-1"`` (same-token→uniform) is the good path,
``"2-1"`` (random→uniform) the denoising path."""

FIG2E_LAYERS = (("same_token", "random"), ("uniform",))
"""Fig. 2e: two paths, with the random head at strength 0 and ``noise_perp = 5``."""


def fig2c(width: int = 10, **task) -> tuple[MarkovTask, Network]:
    """Task and network of paper Fig. 2c (temperature 0.01 in the paper)."""
    t = MarkovTask(**task)
    return t, t.network(FIG2C_LAYERS, width=width, random_strength=1.0)


def fig2e(width: int = 10, **task) -> tuple[MarkovTask, Network]:
    """Task and network of paper Fig. 2e: two paths, perpendicular noise 5."""
    task.setdefault("noise_perp", 5.0)
    t = MarkovTask(**task)
    return t, t.network(FIG2E_LAYERS, width=width, random_strength=0.0)
