"""Checkpoints of the gradient-descent transformer: one ``.npz`` file with its weights, settings and history.

:func:`save_model` writes what :mod:`bayes_attn.oneshot._model` and
:mod:`bayes_attn.oneshot._training` define; :func:`load_model` reads it back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from .._internal import io as _io
from ._model import ModelConfig, Params, check_params
from ._training import History, TrainConfig

__all__ = ["FORMAT", "FORMAT_VERSION", "SavedModel", "changed", "load_model", "mismatches", "save_model"]

FORMAT = "bayes_attn.training.gd_model"
"""The ``format`` of a saved model file (the name it has had since the first files; kept so they load)."""
FORMAT_VERSION = 1


class SavedModel(NamedTuple):
    """What :func:`load_model` returns."""

    params: Params
    config: ModelConfig
    train_config: TrainConfig | None
    history: History | None
    training_hash: str | None = None
    """The hash of every setting the model depends on, as its run recorded it (``None`` in older files)."""


def save_model(path, params: Params, config: ModelConfig, train_config: TrainConfig | None = None,
               history: History | None = None, training_hash: str | None = None) -> Path:
    """Write weights and settings to one ``.npz`` file (atomically: temporary file, then rename).

    Arrays ``V0``, ``Q{l}``, ``K{l}``, ``V{l}`` (1-based layers), ``a`` and a JSON
    string ``meta`` with the configs, the history and ``training_hash`` (the
    hash of every setting the model depends on, e.g. a spec's ``training_hash()``).
    """
    if not isinstance(config, ModelConfig):
        raise ValueError(f"config must be a ModelConfig, got {type(config).__name__}")
    check_params(params, config)
    if train_config is not None and not isinstance(train_config, TrainConfig):
        raise ValueError(f"train_config must be a TrainConfig or None, got {type(train_config).__name__}")
    if history is not None and not isinstance(history, History):
        raise ValueError(f"history must be a History or None, got {type(history).__name__}")
    if training_hash is not None and not isinstance(training_hash, str):
        raise ValueError(f"training_hash must be a string or None, got {type(training_hash).__name__}")
    meta = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "model_config": config.to_dict(),
        "train_config": None if train_config is None else train_config.to_dict(),
        "history": None if history is None else history.to_dict(),
        "dtype": str(params.V0.dtype),
    } | ({} if training_hash is None else {"training_hash": training_hash})
    arrays: dict[str, Any] = {"V0": np.asarray(params.V0), "a": np.asarray(params.a),
                              "meta": np.array(json.dumps(meta))}
    for l in range(config.L):
        arrays[f"Q{l + 1}"] = np.asarray(params.Q[l])
        arrays[f"K{l + 1}"] = np.asarray(params.K[l])
        arrays[f"V{l + 1}"] = np.asarray(params.V[l])
    path = Path(path)
    with _io.atomic(path, ".npz.tmp") as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
    return path


def load_model(path) -> SavedModel:
    """Read a file written by :func:`save_model`; ``ValueError`` if it is missing or not such a file."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must be an existing model file written by save_model, got {str(path)!r}")
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("format") != FORMAT:
                raise ValueError(f"format is {meta.get('format')!r}, not {FORMAT!r}")
            if meta.get("version") != FORMAT_VERSION:
                raise ValueError(f"format version {meta.get('version')!r} is not {FORMAT_VERSION}")
            config = ModelConfig(**{**meta["model_config"], "heads": tuple(meta["model_config"]["heads"])})
            L = config.L
            params = Params(
                jnp.asarray(z["V0"]),
                tuple(jnp.asarray(z[f"Q{l + 1}"]) for l in range(L)),
                tuple(jnp.asarray(z[f"K{l + 1}"]) for l in range(L)),
                tuple(jnp.asarray(z[f"V{l + 1}"]) for l in range(L)),
                jnp.asarray(z["a"]),
            )
        check_params(params, config)
        tc = None if meta.get("train_config") is None else TrainConfig(**meta["train_config"])
        hist = None if meta.get("history") is None else History.from_dict(meta["history"])
        key = meta.get("training_hash")
        if key is not None and not isinstance(key, str):
            raise ValueError(f"training_hash is {key!r}, not a string")
    except Exception as err:  # zip, JSON, key and shape errors alike
        raise ValueError(f"{str(path)!r} is not a readable gradient-descent model file: {err}") from err
    return SavedModel(params, config, tc, hist, key)


def changed(old, new, key: str = "") -> list[str]:
    """The dotted keys whose values differ between the JSON-like ``old`` and ``new``."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [] if old == new else [key or "settings"]
    return [c for k in sorted({*old, *new}) for c in changed(old.get(k), new.get(k), f"{key}.{k}" if key else k)]


def mismatches(saved: SavedModel, config: ModelConfig, train_config: TrainConfig, training_hash: str) -> list[str]:
    """The settings stored in ``saved`` that differ from ``config``, ``train_config`` and ``training_hash``
    (dotted names; empty when they match). A file without a stored hash (older files) is checked on its configs."""
    stored = {"model": saved.config.to_dict(), "training": saved.train_config and saved.train_config.to_dict()}
    diff = changed(stored, {"model": config.to_dict(), "training": train_config.to_dict()})
    return diff + (["training_hash"] if saved.training_hash not in (None, training_hash) else [])
