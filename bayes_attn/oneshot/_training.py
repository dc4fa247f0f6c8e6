"""Training of the gradient-descent transformer of the one-shot image task (docs/theory.md §6, paper Fig. 3).

:func:`train` fits a :class:`~bayes_attn.oneshot._model.Params` (the model, its
files and its conversion to a :class:`~bayes_attn.network.Network` are
:mod:`bayes_attn.oneshot._model`) by Adam on the MSE to ±1 labels;
:class:`TrainConfig` holds the settings and :class:`History` the per-epoch record.

Array layout: inputs ``x`` are ``[P, T, N0]``, labels ``y`` are ``[P]`` in ±1.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._internal import checks as _checks
from ._model import ModelConfig, Params, _check_pm1, accuracy, check_params, forward, init_params

__all__ = ["History", "LEARNING_SIGMAS", "OPTIMIZERS", "TrainConfig", "train"]

log = logging.getLogger(__name__)

OPTIMIZERS = ("adam", "adamw")


# ----- configuration ----------------------------------------------------------
LEARNING_SIGMAS = 3.0
"""Early stopping starts counting once a validation accuracy exceeds ``0.5 + LEARNING_SIGMAS · se``."""


@dataclass(frozen=True)
class TrainConfig:
    """Training settings (defaults: the paper's, docs/theory.md §6).

    Args:
        lr: learning rate (3e-4).
        weight_decay: weight decay (5e-5): an L2 penalty added to the gradient
            before Adam for ``optimizer = "adam"`` (PyTorch's ``Adam(weight_decay=…)``,
            the authors' choice), decoupled for ``"adamw"``.
        batch: mini-batch size (128).
        epochs: passes over the training set (10).
        seed: seed of the initialisation and of the mini-batch permutations.
        optimizer: ``"adam"`` (default) or ``"adamw"``.
        patience: ``None`` (default): train every epoch and keep the last weights. An integer ``k >= 1``:
            early stopping on the validation set, which :func:`train` then needs: stop after ``k`` epochs
            without a higher validation accuracy (``epochs`` is then the most) and keep the weights of the
            epoch with the highest one (the earliest on ties). Epochs are counted only once some epoch's
            validation accuracy was :data:`LEARNING_SIGMAS` binomial errors above chance (0.5): the loss
            plateau at the start of training, at chance for 10-20 epochs, does not stop it.
        lr_factor, lr_patience, lr_min: ``None`` (default): a constant learning rate. Else the learning rate is
            multiplied by ``lr_factor`` (in (0, 1)) after every ``lr_patience`` epochs without a higher
            validation accuracy (counted as ``patience`` is, which they need), never below ``lr_min``
            (default 0): Keras' ``ReduceLROnPlateau`` beside its ``EarlyStopping``. The weights are not reset.
    """

    lr: float = 3e-4
    weight_decay: float = 5e-5
    batch: int = 128
    epochs: int = 10
    seed: int = 0
    optimizer: str = "adam"
    patience: int | None = None
    lr_factor: float | None = None
    lr_patience: int | None = None
    lr_min: float | None = None

    OPTIONAL = ("patience", "lr_factor", "lr_patience", "lr_min")
    """Fields left out of :meth:`to_dict` when ``None``, so that settings without them keep their hash."""

    def __post_init__(self):
        object.__setattr__(self, "lr", _checks.positive("lr", self.lr))
        object.__setattr__(self, "weight_decay", _checks.nonnegative("weight_decay", self.weight_decay))
        object.__setattr__(self, "batch", _checks.positive_int("batch", self.batch))
        object.__setattr__(self, "epochs", _checks.positive_int("epochs", self.epochs, minimum=0))
        object.__setattr__(self, "seed", _checks.seed("seed", self.seed))
        _checks.choice("optimizer", self.optimizer, OPTIMIZERS)
        if self.patience is not None:
            object.__setattr__(self, "patience", _checks.positive_int("patience", self.patience))
        if (self.lr_factor is None) != (self.lr_patience is None):
            raise ValueError(f"lr_factor and lr_patience go together: give both or neither, got "
                             f"lr_factor={self.lr_factor!r}, lr_patience={self.lr_patience!r}")
        if self.lr_factor is not None:
            factor = _checks.positive("lr_factor", self.lr_factor)
            if factor >= 1:
                raise ValueError(f"lr_factor must be in (0, 1), got {factor}")
            object.__setattr__(self, "lr_factor", factor)
            object.__setattr__(self, "lr_patience", _checks.positive_int("lr_patience", self.lr_patience))
            if self.patience is None:
                raise ValueError("lr_factor (learning-rate drops on a validation plateau) needs patience "
                                 "(early stopping on the validation set) to be set")
        if self.lr_min is not None:
            if self.lr_factor is None:
                raise ValueError(f"lr_min applies to learning-rate drops: give lr_factor and lr_patience, "
                                 f"or leave lr_min unset (got {self.lr_min!r})")
            object.__setattr__(self, "lr_min", _checks.nonnegative("lr_min", self.lr_min))
            if self.lr_min > self.lr:
                raise ValueError(f"lr_min ({self.lr_min}) must not exceed lr ({self.lr})")

    def to_dict(self) -> dict:
        """JSON-ready dict (the :data:`OPTIONAL` fields only when set, so that settings without them keep their
        hash)."""
        return {k: v for k, v in asdict(self).items() if not (k in self.OPTIONAL and v is None)}

    def optax(self) -> optax.GradientTransformation:
        """The optimiser: Adam on the gradient plus ``weight_decay·θ`` (``"adam"``), or AdamW."""
        if self.optimizer == "adamw":
            return optax.adamw(self.lr, weight_decay=self.weight_decay)
        return optax.chain(optax.add_decayed_weights(self.weight_decay), optax.adam(self.lr))


@dataclass
class History:
    """Per-epoch record of :func:`train`.

    loss: mean training MSE over the epoch's mini-batches (weighted by batch
    size, measured while training); val_accuracy / val_se: accuracy on the
    validation set after the epoch (empty without one); seconds: wall time; lr: the epoch's learning rate
    (empty in records written before it was kept).
    kept_epoch: with early stopping (``TrainConfig.patience``), the 0-based epoch whose weights were kept;
    else ``None`` (the last).
    """

    loss: list[float] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)
    val_se: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    kept_epoch: int | None = None

    SERIES = ("loss", "val_accuracy", "val_se", "seconds", "lr")

    def to_dict(self) -> dict:
        """JSON-ready dict (``kept_epoch`` only when set)."""
        d = {k: [float(v) for v in getattr(self, k)] for k in self.SERIES}
        return d if self.kept_epoch is None else d | {"kept_epoch": int(self.kept_epoch)}

    @classmethod
    def from_dict(cls, d: dict) -> History:
        kept = d.get("kept_epoch")
        return cls(**{k: [float(v) for v in d.get(k, [])] for k in cls.SERIES},
                   kept_epoch=None if kept is None else int(kept))


# ----- training ---------------------------------------------------------------
def train(
    params_or_config: Params | ModelConfig,
    x,
    y,
    train_config: TrainConfig,
    *,
    x_val=None,
    y_val=None,
    progress_bar: bool = True,
    augment: Callable[[int, np.random.Generator], tuple] | None = None,
) -> tuple[Params, History]:
    """Train by Adam (``train_config.optimizer``) on the MSE to ±1 labels; returns ``(params, history)``.

    Args:
        params_or_config: starting :class:`Params`, or a :class:`ModelConfig`
            (then initialised by :func:`init_params` with ``train_config.seed``).
        x, y: training set ``[P, T, N0]`` and ``[P]`` (±1). May be ``None``
            when ``augment`` supplies every epoch's set.
        train_config: :class:`TrainConfig`.
        x_val, y_val: optional validation set; its accuracy is recorded after every epoch.
        progress_bar: print one line per epoch (loss, validation accuracy) to stderr.
        augment: optional ``augment(epoch, rng) -> (x, y)`` giving a fresh training
            set for an epoch (0-based ``epoch``; ``rng`` a NumPy Generator seeded by
            ``(seed, epoch)``), e.g. fresh episodes with shifted patches. It is
            called for every epoch except epoch 0 when ``x, y`` are given (epoch 0
            then trains on ``x, y``). Sets may differ in size from epoch to epoch.

    Mini-batches follow a permutation seeded by ``(seed, epoch)``; the last,
    partial batch is padded and masked, so every step has the same shape.
    """
    params, x, y, x_val, y_val = _checked(params_or_config, x, y, train_config, x_val, y_val, augment)
    N0, dtype = int(params.V0.shape[1]), params.V0.dtype
    opt = train_config.optax()
    opt_state = opt.init(params)
    step = _step(opt)
    history = History()
    E = train_config.epochs
    stop = _EarlyStopping(train_config, progress_bar) if train_config.patience is not None else None
    lr = train_config.lr
    for epoch in range(E):
        t0 = time.perf_counter()
        rng = np.random.default_rng([train_config.seed, epoch])
        if augment is not None and (epoch > 0 or x is None):
            xe, ye = _augmented(augment, epoch, rng, N0)
        else:
            xe, ye = x, y
        history.lr.append(lr)
        params, opt_state, loss = _epoch(step, params, opt_state, (xe, ye), rng, train_config.batch, dtype,
                                         jnp.asarray(lr / train_config.lr, dtype))
        history.loss.append(loss)
        line = f"epoch {epoch + 1}/{E}  loss {history.loss[-1]:.4f}"
        if x_val is not None:
            acc, se = accuracy(params, x_val, y_val)
            history.val_accuracy.append(acc)
            history.val_se.append(se)
            line += f"  val_acc {acc:.3f} ± {se:.3f}"
        history.seconds.append(time.perf_counter() - t0)
        if progress_bar:
            log.info(line + f"  ({history.seconds[-1]:.1f} s)")
        if stop is not None:
            next_lr = stop.update(epoch, history.val_accuracy[-1], history.val_se[-1], params, lr)
            if next_lr is None:
                break
            lr = next_lr
    if stop is not None and stop.best is not None:
        params, history.kept_epoch = stop.best[2], stop.best[1]
    return params, history


def _checked(params_or_config, x, y, train_config, x_val, y_val, augment):
    """:func:`train`'s arguments checked: ``(params, x, y, x_val, y_val)`` (``x, y`` ``None`` when ``augment``
    supplies them)."""
    if not isinstance(train_config, TrainConfig):
        raise ValueError(f"train_config must be a TrainConfig, got {type(train_config).__name__}")
    if augment is not None and not callable(augment):
        raise ValueError("augment must be a callable (epoch, rng) -> (x, y) or None")
    if isinstance(params_or_config, ModelConfig):
        params = init_params(params_or_config, jax.random.PRNGKey(train_config.seed))
    elif isinstance(params_or_config, Params):
        params = check_params(params_or_config)
    else:
        raise ValueError(f"params_or_config must be Params or ModelConfig, got {type(params_or_config).__name__}")
    N0 = int(params.V0.shape[1])
    if x is None or y is None:
        if augment is None:
            raise ValueError("x and y are required unless augment supplies the training sets")
        x = y = None
    else:
        x = _checks.inputs("x", x, N0)
        y = _check_pm1("y", y, x.shape[0])
    if (x_val is None) != (y_val is None):
        raise ValueError("give both x_val and y_val or neither")
    if x_val is not None:
        x_val = _checks.inputs("x_val", x_val, N0)
        y_val = _check_pm1("y_val", y_val, x_val.shape[0])
    elif train_config.patience is not None:
        raise ValueError("train_config.patience (early stopping) needs a validation set: give x_val and y_val")
    return params, x, y, x_val, y_val


def _step(opt):
    """One jitted optimiser step on a masked mini-batch: ``step(params, opt_state, xb, yb, mb, lr_scale)``."""

    @jax.jit
    def step(params, opt_state, xb, yb, mb, lr_scale):
        def loss_fn(p):
            f = forward(p, xb)
            return jnp.sum(mb * (f - yb) ** 2) / jnp.sum(mb)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        # Adam's (and AdamW's) whole update is proportional to the learning rate: scaling it scales the rate
        # (exactly the unscaled update at lr_scale = 1)
        updates = jax.tree.map(lambda u: u * lr_scale, updates)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def _epoch(step, params, opt_state, episodes: tuple, rng, B: int, dtype, scale):
    """One pass over ``episodes`` ``(xe, ye)`` in mini-batches of ``B`` (permutation from ``rng``; the last batch
    padded and masked); returns ``(params, opt_state, mean loss)``."""
    xe, ye = episodes
    P = xe.shape[0]
    perm = rng.permutation(P)
    pad = (-P) % B
    idx = np.concatenate([perm, np.zeros(pad, dtype=perm.dtype)])
    mask = np.concatenate([np.ones(P), np.zeros(pad)])
    xd, yd = jnp.asarray(xe, dtype), jnp.asarray(ye, dtype)
    total = 0.0
    for start in range(0, P + pad, B):
        ib = idx[start : start + B]
        mb = mask[start : start + B]
        params, opt_state, loss = step(params, opt_state, xd[ib], yd[ib], jnp.asarray(mb, dtype), scale)
        total += float(loss) * float(mb.sum())
    return params, opt_state, total / P


class _EarlyStopping:
    """Early stopping on validation accuracy, and the learning-rate drops of ``lr_factor``.

    Counts only once the model learns (a validation accuracy ``LEARNING_SIGMAS``
    errors above chance); ``best``: ``(accuracy, epoch, params)`` of the best epoch so far.
    """

    def __init__(self, config: TrainConfig, progress_bar: bool):
        self.config, self.progress_bar = config, progress_bar
        self.best: tuple[float, int, Params] | None = None
        self.learning = False
        self.since_drop = 0  # epochs (counted once learning) since the best epoch or the last learning-rate drop

    def update(self, epoch: int, acc: float, se: float, params, lr: float) -> float | None:
        """The learning rate of the next epoch after ``epoch``'s validation ``acc ± se``; ``None``: stop."""
        c, patience = self.config, self.config.patience
        assert patience is not None  # made for a config with patience (train)
        self.learning = self.learning or acc - 0.5 > LEARNING_SIGMAS * se
        if self.best is None or acc > self.best[0]:
            self.best, self.since_drop = (acc, epoch, params), 0
        elif self.learning and epoch - self.best[1] >= patience:
            if self.progress_bar:
                log.info(f"early stop after epoch {epoch + 1}: no better validation accuracy for {patience} "
                         f"epochs; keeping epoch {self.best[1] + 1} ({self.best[0]:.3f})")
            return None
        elif self.learning and c.lr_factor is not None and c.lr_patience is not None:  # (given together)
            self.since_drop += 1
            if self.since_drop >= c.lr_patience:
                lr, before, self.since_drop = max(lr * c.lr_factor, c.lr_min or 0.0), lr, 0
                if self.progress_bar and lr != before:
                    log.info(f"learning rate {lr:.3g} from epoch {epoch + 2}: no better validation accuracy "
                             f"for {c.lr_patience} epochs")
        return lr


def _augmented(augment, epoch: int, rng, N0: int):
    out = augment(epoch, rng)
    if not isinstance(out, tuple) or len(out) != 2:
        raise ValueError(f"augment must return a tuple (x, y), got {type(out).__name__}")
    xe = _checks.inputs(f"augment(epoch={epoch}) x", out[0], N0)
    return xe, _check_pm1(f"augment(epoch={epoch}) y", out[1], xe.shape[0])
