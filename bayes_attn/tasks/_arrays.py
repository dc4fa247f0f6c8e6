"""Your own data and attention, read from ``.npz`` files (the spec kind ``task.kind = "arrays"``).

The data file holds ``x [P, T, N0]``, ``y [P]``, ``x_test [P_test, T, N0]``, ``y_test [P_test]`` (labels ±1, as the
accuracy compares them with the predictor's sign; ``y`` may be any real numbers) and, optionally, a validation set
``x_val``, ``y_val`` for choices such as the temperature (never made on the test set). The attention file holds,
per layer ``l = 1..L``, either ``W_l [H_l, N0, N0]`` (the bilinear matrices of :class:`bayes_attn.Network`) or
``Q_l`` and ``K_l [H_l, d, N0]`` (``W = K^T Q / sqrt(d)``, :meth:`bayes_attn.Network.from_qk`).

Every array is checked when the spec is read, before anything is computed: the keys, the number of dimensions,
the dtype (real numbers), finiteness and the sizes that must agree (``P`` of ``x`` and ``y``, ``T`` and ``N0``
across the sets, ``N0`` between the data and the attention); each error names the file and the key. Paths are
relative to the spec's folder; a file's sha256 is recorded in the spec the run writes, and a spec that gives one
refuses a file whose content differs.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .._internal import checks as _checks
from ..network import READOUTS, Network

__all__ = ["ArraysNetwork", "ArraysTask", "read_attention", "read_data", "sha256"]

DATA_KEYS = {"x": 3, "y": 1, "x_test": 3, "y_test": 1}
"""The data file's required arrays and their number of dimensions."""
VALIDATION_KEYS = {"x_val": 3, "y_val": 1}
"""The data file's optional validation set."""
LOCAL = {"spec": False}
"""Field metadata: not a spec key (set from where the spec was read; not written to ``spec.toml``)."""


def sha256(path: Path) -> str:
    """The hex sha256 of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _resolve(where: str, root: str, file: str) -> Path:
    path = Path(root) / file
    if not path.is_file():
        raise ValueError(f"{where} must be an existing .npz file (relative to the spec's folder), got {file!r} "
                         f"({str(path)!r} does not exist)")
    return path


def _stamped[T](read: Callable[[Path], T]) -> Callable[[Path], T]:
    """``read(path)`` made once per content of the file (its modification time and size): the spec, the data and
    every width's network read a file once, and a changed file is read and checked again."""
    cached = functools.lru_cache(maxsize=8)(lambda path, stamp: read(Path(path)))

    @functools.wraps(read)
    def once(path: Path) -> T:
        st = path.stat()
        return cached(str(path), (st.st_mtime_ns, st.st_size))

    return once


MAX_MEMBER_BYTES = 2**34
"""Most bytes one array of a ``.npz`` file may declare (16 GiB): a header that asks for more is refused before
anything is allocated (a zip bomb, or a shape no file of this size can hold)."""


def _npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` file at ``path``; a ``ValueError`` naming the file and the member for anything
    else in it: a member that is not a ``.npy`` array, two members of one name, a header that cannot be read or
    declares more than the member holds (or more than :data:`MAX_MEMBER_BYTES`), an object array."""
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} must be a NumPy .npz file (np.savez), but it is not one (not a zip archive)")
    try:
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
            names = [i.filename for i in infos]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ValueError(f"{path} holds {twice[0]!r} more than once (which copy to read is not defined)")
            for info in infos:
                _member_header(path, z, info)
        with np.load(path, allow_pickle=False) as f:
            return {key: _member(path, f, key) for key in f.files}
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise ValueError(f"{path} must be a NumPy .npz file (np.savez), but it cannot be read as one: {err}") from None


def _member_header(path: Path, z: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    """Refuse the member ``info`` of ``z`` unless it is a ``.npy`` array whose header reads and whose declared
    size fits the member and :data:`MAX_MEMBER_BYTES` (nothing beyond the header is read)."""
    key = info.filename.removesuffix(".npy")
    where = f"{path}: {key}"
    if not info.filename.endswith(".npy"):
        raise ValueError(f"{path}: member {info.filename!r} must be a NumPy array (.npy), as np.savez writes")
    try:
        with z.open(info) as fh:
            version = np.lib.format.read_magic(fh)
            read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read:
                raise ValueError(f"format version {version}")
            shape, _, dtype = read[version](fh)
            offset = fh.tell()
    except Exception as err:  # noqa: BLE001  a corrupt header raises whatever its parser meets
        raise ValueError(f"{where} has a .npy header that cannot be read ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else 'no detail'})") from None
    if dtype.hasobject:
        raise ValueError(f"{where} must be an array of real numbers, got an object array")
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if declared > MAX_MEMBER_BYTES:
        raise ValueError(f"{where} declares shape {shape} of {dtype} ({declared:.3g} bytes), more than the "
                         f"{MAX_MEMBER_BYTES:.3g} bytes an array may hold")
    if declared > info.file_size - offset:
        raise ValueError(f"{where} declares shape {shape} of {dtype} ({declared} bytes), but holds "
                         f"{info.file_size - offset} bytes")


def _member(path: Path, f, key: str) -> np.ndarray:
    """The array ``key`` of the open ``.npz`` ``f`` (its header checked by :func:`_member_header`)."""
    try:
        arr = f[key]
    except Exception as err:  # noqa: BLE001  a corrupt body raises whatever its reader meets
        raise ValueError(f"{path}: {key} cannot be read as a .npy array ({type(err).__name__})") from None
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"{path}: {key} must be a NumPy array (.npy), got {type(arr).__name__}")
    return arr


def _check(path: Path, key: str, arr: np.ndarray, ndim: int) -> np.ndarray:
    """``arr`` as finite float64 with ``ndim`` dimensions, or a ``ValueError`` naming the file and the key."""
    where = f"{path}: {key}"
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{where} must hold real numbers (an integer or float dtype), got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{where} must have {ndim} dimension{'s' * (ndim > 1)}, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{where} must not be empty, got shape {arr.shape}")
    out = _checks.array(where, arr)  # finite
    out.setflags(write=False)
    return out


def _unknown(path: Path, found, known) -> None:
    extra = sorted(set(found) - set(known))
    if extra:
        raise ValueError(f"{path} holds unknown arrays {extra}; expected {sorted(known)}")


@_stamped
def read_data(path: Path) -> dict[str, np.ndarray]:
    """The checked data arrays of ``path``: ``x, y, x_test, y_test`` and ``x_val, y_val`` if present."""
    raw = _npz(path)
    _unknown(path, raw, DATA_KEYS | VALIDATION_KEYS)
    wanted = dict(DATA_KEYS)
    if "x_val" in raw or "y_val" in raw:
        wanted |= VALIDATION_KEYS
    missing = [k for k in wanted if k not in raw]
    if missing:
        raise ValueError(f"{path}: {missing[0]} is missing; a data file holds {list(DATA_KEYS)} (and, for a "
                         f"validation set, {list(VALIDATION_KEYS)}), got {sorted(raw)}")
    out = {k: _check(path, k, raw[k], n) for k, n in wanted.items()}
    x = out["x"]
    for xs, ys in (("x", "y"), ("x_test", "y_test"), ("x_val", "y_val")):
        if xs not in out:
            continue
        if out[ys].shape[0] != out[xs].shape[0]:
            raise ValueError(f"{path}: {ys} must have one label per sequence of {xs} ({out[xs].shape[0]}), got "
                             f"shape {out[ys].shape}")
        if ys != "y":
            _checks.signs(f"{path}: {ys}", out[ys])
        if out[xs].shape[1:] != x.shape[1:]:
            raise ValueError(f"{path}: {xs} must have the tokens of x, shape (*, T={x.shape[1]}, N0={x.shape[2]}), "
                             f"got {out[xs].shape}")
    if x.shape[0] < 2:
        raise ValueError(f"{path}: x must hold at least 2 sequences, got shape {x.shape}")
    return out


_LAYER = re.compile(r"([WQK])_([1-9][0-9]*)")


@_stamped
def read_attention(path: Path) -> list[np.ndarray]:
    """The checked bilinear matrices ``[H_l, N0, N0]`` per layer of the attention file ``path`` (``W_l``, or
    ``Q_l`` and ``K_l``)."""
    raw = _npz(path)
    keys = {k: _LAYER.fullmatch(k) for k in raw}
    bad = sorted(k for k, m in keys.items() if m is None)
    if bad or not raw:
        raise ValueError(f"{path} must hold W_1, W_2, … ([H_l, N0, N0]) or Q_1, K_1, … ([H_l, d, N0]), got "
                         f"{sorted(raw) or 'no arrays'}")
    kinds = {m.group(1) for m in keys.values() if m is not None}
    if "W" in kinds and kinds != {"W"}:
        raise ValueError(f"{path} must hold either W_l or Q_l and K_l, not both, got {sorted(raw)}")
    L = max(int(m.group(2)) for m in keys.values() if m is not None)
    per_layer = ("W",) if kinds == {"W"} else ("Q", "K")
    if L > len(raw):  # a layer missing below L: named without listing every layer up to L
        first = next(l for l in range(1, len(raw) + 2) if any(f"{k}_{l}" not in raw for k in per_layer))
        raise ValueError(f"{path}: {next(f'{k}_{first}' for k in per_layer if f'{k}_{first}' not in raw)} is "
                         f"missing (layers 1..{L}), got {sorted(raw)}")
    names = [f"{k}_{l}" for l in range(1, L + 1) for k in per_layer]
    missing = [n for n in names if n not in raw]
    if missing:
        raise ValueError(f"{path}: {missing[0]} is missing (layers 1..{L}), got {sorted(raw)}")
    arrays = {n: _check(path, n, raw[n], 3) for n in names}
    att: list[np.ndarray] = []
    for l in range(1, L + 1):
        if kinds == {"W"}:
            w = arrays[f"W_{l}"]
            if w.shape[1] != w.shape[2]:
                raise ValueError(f"{path}: W_{l} must have shape (H_{l}, N0, N0), got {w.shape}")
        else:
            q, k = arrays[f"Q_{l}"], arrays[f"K_{l}"]
            if k.shape != q.shape:
                raise ValueError(f"{path}: K_{l} must have the shape of Q_{l} {q.shape}, got {k.shape}")
            w = np.einsum("hdi,hdj->hij", k, q) / np.sqrt(q.shape[1])
        if att and w.shape[1] != att[0].shape[1]:
            raise ValueError(f"{path}: layer {l} must have the N0 = {att[0].shape[1]} of layer 1, got {w.shape}")
        att.append(w)
    return att


def _hash_matches(where: str, path: Path, expected: str | None) -> str:
    actual = sha256(path)
    if expected is not None and expected.lower() != actual:
        raise ValueError(f"{where}: {path} has sha256 {actual}, the spec expects {expected}: the file changed since "
                         "the spec was written (remove the sha256 key to accept the new content)")
    return actual


@dataclass(frozen=True)
class ArraysTask:
    """A task from your own arrays (``[task]`` of kind ``"arrays"``).

    Attributes:
        file: the ``.npz`` data file, relative to the spec's folder.
        sha256: its expected sha256 (recorded by every run; a spec that gives it refuses other content).
        root: the folder ``file`` is relative to (not a spec key).
    """

    file: str
    sha256: str | None = None
    root: str = field(default=".", metadata=LOCAL)

    @property
    def path(self) -> Path:
        return _resolve("task.file", self.root, self.file)

    def checked(self) -> ArraysTask:
        """The task with its arrays checked and ``sha256`` set to the file's (``ValueError`` naming the file and
        the key, or a differing sha256)."""
        read_data(self.path)
        return dataclasses.replace(self, sha256=_hash_matches("task.sha256", self.path, self.sha256))

    def arrays(self) -> dict[str, np.ndarray]:
        return read_data(self.path)

    @property
    def n_train(self) -> int:
        return int(self.arrays()["x"].shape[0])

    @property
    def n_test(self) -> int:
        return int(self.arrays()["x_test"].shape[0])

    @property
    def N0(self) -> int:
        return int(self.arrays()["x"].shape[2])

    def generate(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``x, y, x_test, y_test``."""
        a = self.arrays()
        return a["x"], a["y"], a["x_test"], a["y_test"]

    def validation(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``x_val, y_val``, or ``None`` when the file holds no validation set."""
        a = self.arrays()
        return (a["x_val"], a["y_val"]) if "x_val" in a else None

    def data_bytes(self, D: int) -> int:
        """Bytes of the arrays a run holds (float64): the sets, and the theory's ``[D, P, P + P_test]`` kernels."""
        a = self.arrays()
        return sum(v.nbytes for v in a.values()) + 8 * 3 * D * self.n_train * (self.n_train + self.n_test)

    def describe(self) -> str:
        x, xt = self.arrays()["x"], self.arrays()["x_test"]
        return f"{self.file}: P={x.shape[0]}, P_test={xt.shape[0]}, T={x.shape[1]}, N0={x.shape[2]}"


@dataclass(frozen=True)
class ArraysNetwork:
    """A network whose attention you bring (``[network]`` of a spec of kind ``"arrays"``).

    Attributes:
        attention: the ``.npz`` attention file (``W_l`` or ``Q_l``, ``K_l``), relative to the spec's folder.
        width: ``N``, every layer's width and the readout's.
        variances: prior variances, one number or ``[s0², s1², ..., sL², sa²]``.
        readout: query position of the last layer, ``"last"``, ``"first"`` or ``"mean"``.
        attention_sha256: the attention file's expected sha256 (as ``task.sha256``).
        root: the folder ``attention`` is relative to (not a spec key).
    """

    attention: str
    width: int = 10
    variances: float | tuple[float, ...] = 1.0
    readout: str = "last"
    attention_sha256: str | None = None
    root: str = field(default=".", metadata=LOCAL)

    def __post_init__(self):
        _checks.width("width", self.width)
        _checks.choice("readout", self.readout, READOUTS)
        for i, v in enumerate(self.variances if isinstance(self.variances, tuple) else [self.variances]):
            _checks.positive(f"variances[{i}]" if isinstance(self.variances, tuple) else "variances", v)

    @property
    def path(self) -> Path:
        return _resolve("network.attention", self.root, self.attention)

    def checked(self) -> ArraysNetwork:
        """The network spec with its arrays checked and ``attention_sha256`` set (as :meth:`ArraysTask.checked`)."""
        self.build(self.width)
        return dataclasses.replace(
            self, attention_sha256=_hash_matches("network.attention_sha256", self.path, self.attention_sha256))

    def build(self, width: int) -> Network:
        """The :class:`bayes_attn.Network` at ``width``."""
        att = read_attention(self.path)
        variances = list(self.variances) if isinstance(self.variances, tuple) else self.variances
        try:
            return Network(att, width, variances, self.readout)
        except ValueError as err:
            raise ValueError(f"[network] {err}") from None
