"""One version of each statistical rule the jobs share: accuracy ± standard error, power-law slopes.

Pure NumPy; every job (run, sweep, one-shot) calls these and nothing else for the same number.

- Classification: ``sign(f)`` with ``f >= 0`` read as +1 (docs/theory.md §4, "classification uses
  ``sign(mean)``"; a tie at exactly 0 counts as +1 everywhere).
- Accuracy's standard error is the binomial one, ``sqrt(acc (1 - acc) / n)``.
- A temperature is chosen by *validation* accuracy, among the converged solves (never the test set).
"""

from __future__ import annotations

import numpy as np

from ._internal import checks as _checks

__all__ = ["accuracy", "accuracy_se", "binomial_se", "choose_temperature", "correct", "power_law_slope", "proportion",
           "sign"]


def sign(f) -> np.ndarray:
    """The predicted labels of outputs ``f``: ``+1`` where ``f >= 0``, else ``-1`` (float, the shape of ``f``)."""
    return np.where(np.asarray(f) >= 0, 1.0, -1.0)


def correct(f, y) -> np.ndarray:
    """Per-example correctness ``[P]`` (bool) of ``sign(f)`` (``f >= 0`` → +1) against labels ``y`` ±1 ``[P]``."""
    y = _checks.signs("y", y)
    f = _checks.array("f", f, shape=y.shape)
    return sign(f) == y


def proportion(correct: np.ndarray) -> tuple[float, float]:
    """``(accuracy, se)`` of a boolean array of correct predictions; ``se = sqrt(acc(1-acc)/n)``."""
    correct = np.asarray(correct, dtype=bool).ravel()
    if correct.size == 0:
        raise ValueError("accuracy needs at least one example")
    acc = float(np.mean(correct))
    return acc, binomial_se(acc, correct.size)


def binomial_se(accuracy, n: int):
    """Binomial standard error ``sqrt(acc (1 - acc) / n)`` of an accuracy (float or array) over ``n`` examples."""
    acc = np.asarray(accuracy, dtype=np.float64)
    se = np.sqrt(acc * (1.0 - acc) / n)
    return float(se) if se.ndim == 0 else se


def accuracy(f, y) -> float:
    """Fraction of examples where ``sign(f)`` (``f >= 0`` → +1) equals the label ``y`` (±1, checked)."""
    return proportion(correct(f, y))[0]


def accuracy_se(f, y) -> tuple[float, float]:
    """``(accuracy, standard error)`` of ``sign(f)`` against ``y`` ±1 (see :func:`proportion`)."""
    return proportion(correct(f, y))


def power_law_slope(inv_width: np.ndarray, gap: np.ndarray, mcse: np.ndarray, noise_floor: np.ndarray,
                    n_sigma: float = 2.0) -> tuple[float, float, np.ndarray]:
    """Slope of ``log gap`` against ``log(1/N)`` by weighted least squares.

    Only gaps resolved from Monte-Carlo noise enter (``gap > noise_floor + n_sigma · mcse``);
    weights ``(gap / mcse)²`` (the s.e. of ``log gap`` is ``mcse / gap``).
    Returns ``(slope, standard error, mask of the points used)``; NaNs when fewer than two points qualify.
    """
    inv_width, gap, mcse, floor = (np.asarray(a, dtype=np.float64) for a in (inv_width, gap, mcse, noise_floor))
    use = (gap > floor + n_sigma * mcse) & (mcse > 0)
    if use.sum() < 2:
        return float("nan"), float("nan"), use
    X = np.c_[np.ones(use.sum()), np.log(inv_width[use])]
    w = (gap[use] / mcse[use]) ** 2
    A = X.T @ (w[:, None] * X)
    coef = np.linalg.solve(A, X.T @ (w * np.log(gap[use])))
    resid = np.log(gap[use]) - X @ coef
    dof = max(int(use.sum()) - 2, 1)
    scale = max(float(w @ resid**2) / dof, 1.0)  # inflate by the misfit when it exceeds the MC error
    return float(coef[1]), float(np.sqrt(scale * np.linalg.inv(A)[1, 1])), use


def choose_temperature(accuracy, eligible=None) -> int:
    """Index of the best validation ``accuracy`` ``[n_T]``; ties: the first (the lowest temperature of an ascending
    grid).

    ``eligible`` (bool ``[n_T]``, e.g. which theory solves converged): only these count, unless none is.
    """
    acc = np.asarray(accuracy, dtype=np.float64)
    if eligible is not None and np.any(eligible):
        acc = np.where(np.asarray(eligible, dtype=bool), acc, -np.inf)
    return int(np.argmax(acc))
