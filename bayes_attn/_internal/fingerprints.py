"""Short hashes of arrays, stored with results to check later which data they belong to."""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["fingerprint", "data_fingerprint"]


def fingerprint(x: np.ndarray) -> str:
    """Short hash of an input array, to check later which inputs draws belong to."""
    return hashlib.sha1(np.ascontiguousarray(x, dtype=np.float64).tobytes()).hexdigest()[:16]


def data_fingerprint(x: np.ndarray, y: np.ndarray) -> str:
    """Short hash of a data set: inputs ``[P, ...]`` and labels ``[P]`` together."""
    return fingerprint(np.c_[np.reshape(x, (len(y), -1)), y])
