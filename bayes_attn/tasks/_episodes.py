"""2-way 1-shot episodes and their tokens x0 (docs/theory.md §6, paper Fig. 3).

An episode is three images: support 0, support 1 (two different classes, in
random order) and a query, a different drawing of one of the two support
classes. Target ``y = +1`` when the query has the class of support 0 (label
embedding 0), ``y = −1`` when it has the class of support 1 (label embedding
1). :class:`Tokenizer` turns the images into the tokens ``x0``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .._internal import checks as _checks
from ._images import ImageSet

__all__ = ["Episodes", "N_IMAGES", "Tokenizer", "make_episodes"]

N_IMAGES = 3
"""Images per episode: support 0, support 1, query (label embeddings 0, 1, 2)."""


@dataclass(frozen=True, eq=False)
class Episodes:
    """A batch of 2-way 1-shot episodes.

    Attributes:
        images: ``[n, 3, size, size]`` float32, ink = 1.0: support 0, support 1, query.
        classes: ``[n, 3]`` class ids (into ``class_names``) of the three images;
            ``classes[:, 0] != classes[:, 1]`` and the query's class is one of them.
        indices: ``[n, 3]`` rows of the source :class:`ImageSet`'s images.
        y: ``[n]`` float64, ``+1`` iff the query's class is support 0's, else ``−1``.
        class_names: the source set's class names.
    """

    images: np.ndarray
    classes: np.ndarray
    indices: np.ndarray
    y: np.ndarray
    class_names: tuple[str, ...]

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def support_labels(self) -> np.ndarray:
        """Alias of ``classes``: ``[n, 3]`` class ids of support 0, support 1, query."""
        return self.classes


def _shift(images: np.ndarray, shift: int, rng: np.random.Generator) -> np.ndarray:
    """Translate each image by independent integer offsets in ``[-shift, shift]`` (pad with 0 and crop)."""
    n, k, s, _ = images.shape
    off = rng.integers(-shift, shift + 1, size=(n, k, 2))
    padded = np.pad(images, ((0, 0), (0, 0), (shift, shift), (shift, shift)))
    rows = (shift - off[..., 0])[..., None] + np.arange(s)  # [n, k, s]
    cols = (shift - off[..., 1])[..., None] + np.arange(s)
    i = np.arange(n)[:, None, None, None]
    j = np.arange(k)[None, :, None, None]
    return padded[i, j, rows[..., :, None], cols[..., None, :]]


def _class_pairs(imageset: ImageSet, n: int, rng: np.random.Generator, within_group: bool):
    """``n`` pairs of distinct classes ``(a, b)``, uniform (within one group when ``within_group``): ``a`` the
    query's class, ``b`` the other."""
    C = imageset.n_classes
    if within_group:
        group_ids = {g: i for i, g in enumerate(imageset.group_names)}
        gid = np.array([group_ids[g] for g in imageset.groups])
        gsize = np.bincount(gid)[gid]  # classes in each class's group
        eligible = np.flatnonzero(gsize >= 2)
        if eligible.size == 0:
            raise ValueError("within_group=True needs a group with at least 2 classes in imageset")
        by_group = np.argsort(gid, kind="stable")  # classes sorted by group
        pos = np.empty(C, dtype=np.int64)
        pos[by_group] = np.arange(C)
        gstart = np.r_[0, np.cumsum(np.bincount(gid))[:-1]][gid]
        a = eligible[rng.integers(eligible.size, size=n)]
        b = by_group[gstart[a] + (pos[a] - gstart[a] + rng.integers(1, gsize[a])) % gsize[a]]
    else:
        a = rng.integers(C, size=n)
        b = (a + rng.integers(1, C, size=n)) % C
    return a, b


def make_episodes(
    imageset: ImageSet,
    n: int,
    *,
    seed: int,
    shift: int = 0,
    within_group: bool = False,
) -> Episodes:
    """``n`` balanced 2-way 1-shot episodes from ``imageset`` (docs/theory.md §6).

    Two distinct classes are drawn uniformly, in random order, as support 0 and
    support 1 (one drawing each). Exactly ``n/2`` episodes have ``y = +1``: the
    query is another drawing of support 0's class; the others have ``y = −1``:
    the query is another drawing of support 1's class. The query is never the
    support's drawing. ``shift > 0`` translates every image independently by up
    to ``shift`` pixels in each direction (zero padding; training augmentation).
    ``within_group``: both classes from the same group (alphabet / run).
    Deterministic given ``seed``.

    Args:
        imageset: at least 2 classes, every class with at least 2 drawings.
        n: number of episodes, even and >= 2.
        seed: seed of a ``numpy.random.Generator``.
        shift: maximal translation in pixels, ``0 <= shift < size``.
    """
    if not isinstance(imageset, ImageSet):
        raise ValueError(f"imageset must be an ImageSet, got {type(imageset).__name__}")
    n = _checks.positive_int("n", n, minimum=2)
    if n % 2:
        raise ValueError(f"n must be even (half of the episodes per target), got {n}")
    seed = _checks.seed("seed", seed)
    shift = _checks.positive_int("shift", shift, minimum=0)
    if shift >= imageset.size:
        raise ValueError(f"shift must be smaller than the image size {imageset.size}, got {shift}")
    if not isinstance(within_group, bool):
        raise ValueError(f"within_group must be a bool, got {within_group!r}")
    C = imageset.n_classes
    counts = imageset.class_counts()
    if C < 2:
        raise ValueError(f"imageset must hold at least 2 classes, got {C}")
    if counts.min() < 2:
        bad = [imageset.class_names[c] for c in np.flatnonzero(counts < 2)[:5]]
        raise ValueError(f"imageset: every class needs at least 2 drawings (support and query); too few in {bad}")
    rng = np.random.default_rng(seed)
    order = np.argsort(imageset.classes, kind="stable")
    start = np.r_[0, np.cumsum(counts)[:-1]]

    a, b = _class_pairs(imageset, n, rng, within_group)
    y = np.where(np.arange(n) < n // 2, 1.0, -1.0)
    rng.shuffle(y)
    # a = query class, b = the other class; y=+1: support 0 is a, else support 1 is a.
    d_support = rng.integers(counts[a])
    d_query = (d_support + rng.integers(1, counts[a])) % counts[a]
    d_other = rng.integers(counts[b])
    rows_a_support = order[start[a] + d_support]
    rows_query = order[start[a] + d_query]
    rows_b = order[start[b] + d_other]
    plus = y > 0
    indices = np.stack([np.where(plus, rows_a_support, rows_b), np.where(plus, rows_b, rows_a_support), rows_query],
                       axis=1)
    images = imageset.images[indices]
    if shift:
        images = _shift(images, shift, rng)
    return Episodes(
        images=np.ascontiguousarray(images, dtype=np.float32),
        classes=imageset.classes[indices],
        indices=indices,
        y=y,
        class_names=imageset.class_names,
    )


# ----- tokens ----------------------------------------------------------------
@dataclass(frozen=True)
class Tokenizer:
    """Episode images → tokens ``x0`` (docs/theory.md §6).

    Each image is cut into ``(size/patch)²`` non-overlapping ``patch×patch``
    patches, row-major, images in episode order (support 0, support 1, query):
    ``T = 3·(size/patch)²`` tokens (48 for 32/8). A patch vector has
    ``N0 = channels·patch²`` features (channel-major; ``channels=3`` repeats
    the grey channel: 192 for 8×8). Token ``t`` of image ``k`` is::

        x0[t] = LayerNorm(patch) + position_code[t] + label_embedding[k]

    LayerNorm: ``(v − mean(v)) / sqrt(var(v) + 1e-5)`` over the ``N0``
    features, no affine (a blank patch maps to 0). ``position_code``: the
    standard sinusoid, ``PE[t, 2i] = sin(t / 10000^(2i/N0))``,
    ``PE[t, 2i+1] = cos(…)``, each row rescaled to unit RMS (norm ``sqrt(N0)``,
    like a LayerNorm output). ``label_embedding``: ``[3, N0]`` frozen Gaussian,
    entries ``N(0, label_scale²)`` drawn from ``seed`` (``label_scale=1`` is
    PyTorch's ``nn.Embedding`` default, the same scale as the other two parts).
    """

    size: int = 32
    patch: int = 8
    channels: int = 1
    label_scale: float = 1.0
    seed: int = 0

    def __post_init__(self):
        _checks.positive_int("size", self.size)
        _checks.positive_int("patch", self.patch)
        if self.size % self.patch:
            raise ValueError(f"size ({self.size}) must be a multiple of patch ({self.patch})")
        _checks.positive_int("channels", self.channels)
        _checks.nonnegative("label_scale", self.label_scale)
        _checks.seed("seed", self.seed)

    @property
    def N0(self) -> int:
        """Features per token, ``channels·patch²``."""
        return self.channels * self.patch**2

    @property
    def patches_per_image(self) -> int:
        """``(size/patch)²``."""
        return (self.size // self.patch) ** 2

    @property
    def n_tokens(self) -> int:
        """Tokens per episode, ``3·(size/patch)²``."""
        return N_IMAGES * self.patches_per_image

    @cached_property
    def token_labels(self) -> np.ndarray:
        """``[T]`` label (0, 1, 2) of each token's image."""
        return np.repeat(np.arange(N_IMAGES), self.patches_per_image)

    @cached_property
    def position_code(self) -> np.ndarray:
        """``[T, N0]`` sinusoidal position code, each row of unit RMS."""
        t = np.arange(self.n_tokens, dtype=np.float64)[:, None]
        i = np.arange(self.N0)
        freq = 1.0 / 10000.0 ** ((i - i % 2) / self.N0)
        pe = np.where(i % 2 == 0, np.sin(t * freq), np.cos(t * freq))
        pe = pe / np.sqrt(np.mean(pe**2, axis=1, keepdims=True))
        pe.setflags(write=False)
        return pe

    @cached_property
    def label_embedding(self) -> np.ndarray:
        """``[3, N0]`` frozen Gaussian embeddings of labels 0, 1 (supports), 2 (query)."""
        emb = float(self.label_scale) * np.random.default_rng(self.seed).standard_normal((N_IMAGES, self.N0))
        emb.setflags(write=False)
        return emb

    def _images(self, images) -> np.ndarray:
        if isinstance(images, Episodes):
            images = images.images
        arr = _checks.array("images", images, ndim=4)
        want = (N_IMAGES, self.size, self.size)
        if arr.shape[1:] != want or arr.shape[0] < 1:
            raise ValueError(f"images must have shape (n, {', '.join(map(str, want))}), got {arr.shape}")
        return arr

    def patches(self, images) -> np.ndarray:
        """Raw patch vectors ``[n, T, N0]`` float64 (channel-major, patches row-major)."""
        x = self._images(images)
        n, p, g = x.shape[0], self.patch, self.size // self.patch
        v = x.reshape(n, N_IMAGES, g, p, g, p).transpose(0, 1, 2, 4, 3, 5).reshape(n, self.n_tokens, p * p)
        return np.tile(v, (1, 1, self.channels)) if self.channels > 1 else v

    def __call__(self, images) -> np.ndarray:
        """Tokens ``x0 [n, T, N0]`` float64 of episode images ``[n, 3, size, size]`` (or :class:`Episodes`)."""
        v = self.patches(images)
        ln = (v - v.mean(axis=2, keepdims=True)) / np.sqrt(v.var(axis=2, keepdims=True) + 1e-5)
        return ln + self.position_code + self.label_embedding[self.token_labels]
