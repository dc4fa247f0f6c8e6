"""Argument checks shared by the public functions.

Every check raises ``ValueError`` naming the argument and what was expected,
so that bad input fails before anything is compiled or sampled.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

NOT_REAL_KINDS = "cUSMm"
"""NumPy dtype kinds refused as arrays of real numbers: complex (its imaginary part would be dropped), strings
(they would be parsed) and times; bool, int, float, bfloat16 (kind ``V``) and numbers in objects convert."""


MAX_ABS = 1e100
"""Largest absolute value an array of real numbers may hold (:func:`array`): squares stay below 1e200 and sums of
them over any realistic size below float64's 1.8e308."""


def array(name: str, value, *, ndim: int | None = None, shape: Sequence[int | None] | None = None) -> np.ndarray:
    """Return ``value`` as a finite float64 array of values at most :data:`MAX_ABS` in size, checking rank and
    shape.

    ``shape`` entries that are ``None`` are free.
    """
    try:
        raw = np.asarray(value)
        if raw.dtype.kind in NOT_REAL_KINDS:  # complex would lose its imaginary part, strings would be parsed
            raise TypeError(f"dtype {raw.dtype}")
        arr = raw.astype(np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a real numeric array, got {type(value).__name__} ({err})") from err
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {arr.shape}")
    if shape is not None:
        want = tuple("*" if s is None else s for s in shape)
        if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape, strict=True)):
            raise ValueError(f"{name} must have shape {want}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    if arr.size and (top := float(np.max(np.abs(arr)))) > MAX_ABS:
        raise ValueError(f"{name} must hold values of at most {MAX_ABS:g} in absolute value (their squares and "
                         f"kernels must stay finite in float64), got {top:.3g}")
    return arr


def real(value) -> bool:
    """Whether ``value`` is a real number: a Python or NumPy int or float, or a 0-d real array (not a bool, a
    string or a complex number)."""
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (int, float, np.integer, np.floating)):
        return True
    return getattr(value, "shape", None) == () and np.asarray(value).dtype.kind in "iuf"


def positive(name: str, value) -> float:
    """Return ``value`` as a float, requiring a real number (not a string, a bool or a complex), finite and > 0."""
    if not real(value):
        raise ValueError(f"{name} must be a positive number, got {value!r} ({type(value).__name__})")
    v = float(value)
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return v


def nonnegative(name: str, value) -> float:
    """Return ``value`` as a float, requiring a finite real number ``>= 0`` (not a bool)."""
    if not real(value) or not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def positive_int(name: str, value, *, minimum: int = 1) -> int:
    """Return ``value`` as an int ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def items(name: str, value, what: str) -> list:
    """``value`` as a non-empty list (a single string is one item); ``what`` names the expected items."""
    if isinstance(value, str):
        value = (value,)
    try:
        out = list(value)
    except TypeError as err:
        raise ValueError(f"{name} must be a sequence of {what}, got {value!r}") from err
    if not out:
        raise ValueError(f"{name} must name at least one of {what}, got {value!r}")
    return out


def choice(name: str, value, options: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``options``."""
    if value not in options:
        raise ValueError(f"{name} must be one of {list(options)}, got {value!r}")
    return value


def inputs(name: str, x, n0: int) -> np.ndarray:
    """Check a batch of sequences ``[P, T, N0]``."""
    arr = array(name, x, ndim=3)
    if arr.shape[2] != n0:
        raise ValueError(f"{name} must have shape (P, T, N0={n0}), got {arr.shape}")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name} must hold at least one sequence of at least one token, got {arr.shape}")
    return arr


def labels(name: str, y, p: int) -> np.ndarray:
    """Check a label vector ``[P]`` matching ``p`` inputs."""
    return array(name, y, shape=(p,))


def signs(name: str, y, p: int | None = None) -> np.ndarray:
    """Check classification labels: every entry +1 or −1 (accuracy compares them with ``sign(mean)``)."""
    arr = array(name, y, ndim=1) if p is None else labels(name, y, p)
    bad = ~np.isin(arr, (-1.0, 1.0))
    if bad.any():
        raise ValueError(
            f"{name} must be classification labels +1/-1 (accuracy compares them with the sign of the predictor), "
            f"got values {np.unique(arr[bad])[:5].tolist()}; map 0/1 labels with y = 2*y - 1"
        )
    return arr


MAX_WIDTH = 2**53
"""Largest width: every integer up to it is exact in float64, the theory's precision."""

MAX_SEED = 2**32 - 1
"""Largest seed: NumPy and JAX take seeds in ``[0, 2**32)`` on every platform."""


def width(name: str, value) -> int:
    """Return ``value`` as a width ``N``: an integer in ``[1, 2**53]``."""
    n = positive_int(name, value)
    if n > MAX_WIDTH:
        shown = f"{n:.3g}" if n < 1e300 else f"about 10**{len(str(n)) - 1}"  # a float overflows past ~1.8e308
        raise ValueError(f"{name} must be an integer between 1 and 2**53 = {MAX_WIDTH} (exact in float64), "
                         f"got {shown}")
    return n


def seed(name: str, value) -> int:
    """Return ``value`` as a seed: an integer in ``[0, 2**32)``."""
    s = positive_int(name, value, minimum=0)
    if s > MAX_SEED:
        raise ValueError(f"{name} must be an integer between 0 and 2**32 - 1 = {MAX_SEED}, got {s}")
    return s


def available_memory() -> int | None:
    """Bytes of memory available to this process (Linux ``MemAvailable``), or ``None`` where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def fits_in_memory(what: str, need: float, available: int | None = None, headroom: float = 0.8) -> None:
    """Raise ``ValueError`` when ``need`` bytes exceed ``headroom`` of the available memory."""
    available = available_memory() if available is None else available
    if available is not None and need > headroom * available:
        raise ValueError(f"{what} needs about {need / 2**30:.3g} GiB of memory but {available / 2**30:.3g} GiB are "
                         "available: make it smaller")


def data_folder(name: str, folder, files: Sequence[str]) -> None:
    """Check that ``folder`` is an existing folder holding every file of ``files``; a one-line ``ValueError``
    otherwise."""
    import os

    path = os.fspath(folder)
    if not os.path.exists(path):
        raise ValueError(f"{name}: the folder {path!r} does not exist; give the folder of the data files "
                         f"({', '.join(files)})")
    if not os.path.isdir(path):
        raise ValueError(f"{name}: {path!r} is a file, not a folder; give the folder that holds {', '.join(files)}")
    missing = [f for f in files if not os.path.isfile(os.path.join(path, f))]
    if missing:
        raise ValueError(f"{name}: {path!r} lacks {', '.join(missing)}; give the folder that holds "
                         f"{', '.join(files)}")


def versus(value: float, bound: float, digits: int = 3) -> tuple[str, str]:
    """``value`` and ``bound`` formatted with at least ``digits`` significant digits and as many more as make
    them differ (``1.0103`` against ``1.01``: ``"1.0103"``, ``"1.01"``), both with the same number, so that a failed
    check never reads as a pass; NaN and infinities as ``nan``, ``inf``."""
    for d in range(digits, 18):
        v, b = f"{value:.{d}g}", f"{bound:.{d}g}"
        if v != b or value == bound:
            break
    return v, b


def one_line(err: BaseException, most: int = 300) -> str:
    """``err`` as one line for a message: its first line (at most ``most`` characters), after its type unless a
    ``ValueError`` (whose text names the argument)."""
    text = (str(err).strip().splitlines() or [""])[0]
    text = text if len(text) <= most else text[: most - 3] + "..."
    return text if isinstance(err, ValueError) else f"{type(err).__name__}: {text}"
