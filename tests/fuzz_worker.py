"""The loader side of ``tests/test_fuzz.py``: ``python fuzz_worker.py KIND FILE...`` loads each file with the
package's own loader for ``KIND`` and prints one JSON line per file, in order: ``{"ok": digest}`` (the digest of
what loaded), ``{"refused": message}`` (a one-line ``ValueError``, the package's refusal) or ``{"other": what}``
(any other exception, or a refusal of more than one line). Run in a process of its own, so that a crash or a hang
inside a library is seen by the test instead of taking it down."""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from pathlib import Path

import numpy as np


def _digest_dataset(ds) -> str:
    """Digest of an xarray Dataset's values, coordinates and attributes."""
    return hashlib.sha256(json.dumps(ds.to_dict(data="list"), sort_keys=True, default=str).encode()).hexdigest()


def _digest_arrays(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(a.dtype.str.encode() + repr(a.shape).encode() + a.tobytes())
    return h.hexdigest()


def load(kind: str, path: Path) -> str:
    """What ``path`` loads to (a digest), by the package's loader of ``kind``."""
    import bayes_attn as ba
    from bayes_attn._internal import io

    if kind == "theory":
        return _digest_dataset(ba.load_theory(path).to_dataset())
    if kind == "posterior":
        tree = ba.load_posterior(path).tree
        return "".join(_digest_dataset(node.to_dataset(inherit=False)) for node in tree.subtree)
    if kind == "comparison":
        return _digest_dataset(io.load_dataset(path))
    if kind in ("data", "attention", "spec"):  # the recorded spec, with its files' sha256, reads both arrays files
        from bayes_attn.spec import load_spec

        spec = load_spec(path)
        return hashlib.sha256(repr(spec).encode()).hexdigest() + _digest_arrays([*spec.data(), *spec.net().attention])
    if kind == "pruning":
        from bayes_attn.oneshot import load_pruning

        return hashlib.sha256(repr(load_pruning(path)).encode()).hexdigest()
    if kind == "checkpoint":
        from bayes_attn.oneshot._checkpoints import load_model

        m = load_model(path)
        return hashlib.sha256(repr((m.config, m.train_config, m.history, m.training_hash)).encode()).hexdigest() + \
            _digest_arrays([np.asarray(a) for a in (m.params.V0, *m.params.Q, *m.params.K, *m.params.V, m.params.a)])
    raise ValueError(f"unknown kind {kind!r}")


def main(kind: str, paths: list[str]) -> None:
    warnings.simplefilter("ignore")
    for p in paths:
        try:
            out = {"ok": load(kind, Path(p))}
        except ValueError as err:
            text = str(err)
            out = {"refused": text} if text and "\n" not in text else {"other": f"a refusal of many lines: {text!r}"}
        except Exception as err:  # noqa: BLE001  what the test counts as a failure
            out = {"other": f"{type(err).__name__}: {err}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
