"""Image sets for the one-shot image task (docs/theory.md §6, paper Fig. 3).

Readers for the standard Omniglot zip files (read in place, never extracted),
for the 20 Omniglot one-shot runs (``all_runs.zip``) and for scikit-learn's
8×8 digits, all returning an :class:`ImageSet` of ``size×size`` float32
images with ink = 1.0 and background = 0.0. Class splits keep the classes of
gradient-descent training, theory/sampling training and test disjoint
(:func:`split_by_group`, :data:`DEFAULT_SPLIT`, :func:`split_by_class`).
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from .._internal import checks as _checks

__all__ = ["DEFAULT_SPLIT", "ImageSet", "OMNIGLOT_FULL_FILES", "OMNIGLOT_RUNS_FILE", "OMNIGLOT_SMALL_FILES",
           "ROTATIONS", "read_digits", "read_omniglot", "read_omniglot_runs", "split_by_class", "split_by_group"]

OMNIGLOT_SMALL_FILES = ("images_background_small1.zip", "images_background_small2.zip")
"""The two "small" Omniglot background sets (Greek and Latin are in both)."""

OMNIGLOT_FULL_FILES = ("images_background.zip", "images_evaluation.zip")
"""The full Omniglot background (964 characters) and evaluation (659) sets."""

OMNIGLOT_RUNS_FILE = "all_runs.zip"
"""The 20 one-shot 20-way runs of Lake et al. (2015), on evaluation alphabets."""

DEFAULT_SPLIT: dict[str, tuple[str, ...]] = {
    "gd_train": ("Greek", "Japanese_(katakana)", "Korean", "Latin", "Sanskrit", "Tagalog"),
    "theory_train": ("Balinese",),
    "test": ("Early_Aramaic",),
}
"""Alphabet split of the 8 distinct small-set alphabets (242 characters).

``gd_train``: 196 characters (Greek 24, Japanese_(katakana) 47, Korean 40,
Latin 26, Sanskrit 42, Tagalog 17); ``theory_train``: Balinese, 24
characters; ``test``: Early_Aramaic, 22 characters. Greek and Latin share
many letter shapes, so both stay in ``gd_train`` rather than one of them
becoming a near-copy of the theory or test classes.
"""

ROTATIONS = (90, 180, 270)
"""Angles (degrees, counter-clockwise) of :meth:`ImageSet.with_rotations`."""


@dataclass(frozen=True, eq=False)
class ImageSet:
    """Labelled greyscale images, ink = 1.0, background = 0.0.

    Attributes:
        images: ``[n, size, size]`` float32 in ``[0, 1]`` (read-only).
        classes: ``[n]`` int, index into ``class_names`` (read-only).
        class_names: one name per class, e.g. ``"Greek/character01"``.
        groups: one group per class (the alphabet; ``"digits"`` for digits;
            ``"runNN"`` for the one-shot runs).
        sources: one origin per image (e.g. the file inside the zip), or empty.
        duplicates: images skipped by the reader as duplicates (0 for subsets).
    """

    images: np.ndarray
    classes: np.ndarray
    class_names: tuple[str, ...]
    groups: tuple[str, ...]
    sources: tuple[str, ...] = ()
    duplicates: int = 0

    def __post_init__(self):
        images = np.asarray(self.images)
        if images.ndim != 3 or images.shape[1] != images.shape[2] or images.shape[1] < 1:
            raise ValueError(f"images must have shape (n, size, size), got {images.shape}")
        if not np.issubdtype(images.dtype, np.number) or not np.all(np.isfinite(images)):
            raise ValueError("images must be finite numbers")
        images = np.array(images, dtype=np.float32)
        classes = np.asarray(self.classes)
        if classes.shape != (images.shape[0],) or (classes.size and not np.issubdtype(classes.dtype, np.integer)):
            raise ValueError(f"classes must be {images.shape[0]} integers (one per image), got shape {classes.shape}, "
                             f"dtype {classes.dtype}")
        classes = np.array(classes, dtype=np.int64)
        names = tuple(str(c) for c in self.class_names)
        groups = tuple(str(g) for g in self.groups)
        if len(set(names)) != len(names):
            raise ValueError("class_names must be distinct")
        if len(groups) != len(names):
            raise ValueError(f"groups must give one group per class ({len(names)}), got {len(groups)}")
        if classes.size and (classes.min() < 0 or classes.max() >= len(names)):
            raise ValueError(f"classes must lie in [0, {len(names)}), got values in [{classes.min()}, {classes.max()}]")
        sources = tuple(str(s) for s in self.sources)
        if sources and len(sources) != images.shape[0]:
            raise ValueError(f"sources must be empty or give one entry per image ({images.shape[0]}), "
                             f"got {len(sources)}")
        dup = self.duplicates
        if isinstance(dup, bool) or not isinstance(dup, (int, np.integer)) or dup < 0:
            raise ValueError(f"duplicates must be a non-negative integer, got {self.duplicates!r}")
        images.setflags(write=False)
        classes.setflags(write=False)
        for field, value in (("images", images), ("classes", classes), ("class_names", names),
                             ("groups", groups), ("sources", sources), ("duplicates", int(self.duplicates))):
            object.__setattr__(self, field, value)

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def __repr__(self) -> str:
        return (f"ImageSet({len(self)} images of {self.size}x{self.size}, {self.n_classes} classes, "
                f"{len(self.group_names)} groups, {self.duplicates} duplicates skipped)")

    @property
    def n_classes(self) -> int:
        """Number of classes."""
        return len(self.class_names)

    @property
    def size(self) -> int:
        """Image side in pixels."""
        return int(self.images.shape[1])

    @property
    def group_names(self) -> tuple[str, ...]:
        """The distinct groups, sorted."""
        return tuple(sorted(set(self.groups)))

    def class_counts(self) -> np.ndarray:
        """Images per class ``[n_classes]``."""
        return np.bincount(self.classes, minlength=self.n_classes)

    def subset(self, selection: Sequence[int] | Sequence[str] | str) -> ImageSet:
        """The images of some classes, renumbered ``0..k-1`` in the original class order.

        selection: class indices (ints) or group names (strs; a single str is
        one group). Unknown or repeated entries raise ``ValueError``.
        """
        sel = _checks.items("selection", selection, "class indices or group names")
        if all(isinstance(s, str) for s in sel):
            unknown = [s for s in sel if s not in set(self.groups)]
            if unknown:
                raise ValueError(f"selection names unknown groups {unknown}; known: {list(self.group_names)}")
            if len(set(sel)) != len(sel):
                raise ValueError(f"selection repeats a group: {sel}")
            keep = np.array([g in set(sel) for g in self.groups])
        elif all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in sel):
            idx = np.asarray(sel, dtype=np.int64)
            if idx.min() < 0 or idx.max() >= self.n_classes:
                raise ValueError(f"selection class indices must lie in [0, {self.n_classes}), got {sel}")
            if len(set(idx.tolist())) != len(idx):
                raise ValueError(f"selection repeats a class index: {sel}")
            keep = np.zeros(self.n_classes, dtype=bool)
            keep[idx] = True
        else:
            raise ValueError(f"selection must be all class indices (int) or all group names (str), got {sel!r}")
        new_id = np.cumsum(keep) - 1
        rows = np.flatnonzero(keep[self.classes])
        return ImageSet(
            images=self.images[rows],
            classes=new_id[self.classes[rows]],
            class_names=tuple(n for n, k in zip(self.class_names, keep, strict=True) if k),
            groups=tuple(g for g, k in zip(self.groups, keep, strict=True) if k),
            sources=tuple(self.sources[i] for i in rows) if self.sources else (),
        )

    def with_rotations(self, angles: Sequence[int] = ROTATIONS) -> ImageSet:
        """Add copies rotated by ``angles`` (multiples of 90°, counter-clockwise) as NEW classes.

        The standard Omniglot augmentation. Class ``c`` rotated by ``a`` is class
        ``c + k·n_classes`` (``k`` = 1, 2, … in the order of ``angles``), named
        ``"<name>@<a>"``, in the same group as ``c`` (so group splits keep a
        character and its rotations together).
        """
        angles = tuple(angles)
        if not angles or any(isinstance(a, bool) or not isinstance(a, (int, np.integer)) or a % 90 or a % 360 == 0
                             for a in angles) or len(set(a % 360 for a in angles)) != len(angles):
            raise ValueError(f"angles must be distinct multiples of 90 that are not multiples of 360, got {angles!r}")
        if any("@" in n for n in self.class_names):
            raise ValueError("with_rotations: this set already holds rotated classes (names with '@')")
        return self._with_copies({f"@{a}": np.rot90(self.images, k=(a % 360) // 90, axes=(1, 2)) for a in angles})

    def with_mirrors(self) -> ImageSet:
        """Add left-right mirror images as NEW classes (after :meth:`with_rotations`: all 8 symmetries of the square).

        Class ``c`` mirrored is class ``c + n_classes``, named ``"<name>~m"``, in
        the same group as ``c``.
        """
        if any(n.endswith("~m") for n in self.class_names):
            raise ValueError("with_mirrors: this set already holds mirrored classes (names ending in '~m')")
        return self._with_copies({"~m": self.images[:, :, ::-1]})

    def _with_copies(self, copies: Mapping[str, np.ndarray]) -> ImageSet:
        """This set followed by each transformed copy of its images as new classes: copy ``k`` (1-based, in
        order) holds class ``c`` as ``c + k·n_classes``, named and sourced with the copy's suffix, same group."""
        C, suffixes = self.n_classes, tuple(copies)
        names = self.class_names + tuple(f"{n}{x}" for x in suffixes for n in self.class_names)
        sources = (self.sources + tuple(f"{s}{x}" for x in suffixes for s in self.sources)) if self.sources else ()
        return ImageSet(np.concatenate([self.images, *copies.values()]),
                        np.concatenate([self.classes + k * C for k in range(len(copies) + 1)]),
                        names, self.groups * (len(copies) + 1), sources)


# ----- splits ----------------------------------------------------------------
def split_by_group(imageset: ImageSet, parts: Mapping[str, Sequence[str]] = DEFAULT_SPLIT) -> dict[str, ImageSet]:
    """Split by group (alphabet) into disjoint sets, ``{part: ImageSet}``.

    parts: part name → group names. Each group may be used once; groups not
    named are left out. Raises ``ValueError`` for an unknown or repeated group
    or an empty part.
    """
    if not isinstance(imageset, ImageSet):
        raise ValueError(f"imageset must be an ImageSet, got {type(imageset).__name__}")
    if not isinstance(parts, Mapping) or not parts:
        raise ValueError(f"parts must be a non-empty mapping part name -> group names, got {parts!r}")
    seen: dict[str, str] = {}
    for name, groups in parts.items():
        if isinstance(groups, str):
            raise ValueError(f"parts[{name!r}] must be a sequence of group names, got the string {groups!r}")
        if not groups:
            raise ValueError(f"parts[{name!r}] names no group")
        for g in groups:
            if g not in set(imageset.groups):
                raise ValueError(f"parts[{name!r}] names unknown group {g!r}; known: {list(imageset.group_names)}")
            if g in seen:
                raise ValueError(f"group {g!r} is used twice in parts: in {seen[g]!r} and {name!r}")
            seen[g] = name
    return {name: imageset.subset(list(groups)) for name, groups in parts.items()}


def split_by_class(imageset: ImageSet, fractions: Mapping[str, float], seed: int) -> dict[str, ImageSet]:
    """Split the classes at random into disjoint sets, ``{part: ImageSet}``.

    For sets with few groups (digits, the one-shot runs). ``fractions``: part
    name → fraction of the classes (positive, summing to 1); counts are rounded
    by largest remainder and every part gets at least one class. Split before
    :meth:`ImageSet.with_rotations`, or rotations of a class may land in
    another part.
    """
    if not isinstance(imageset, ImageSet):
        raise ValueError(f"imageset must be an ImageSet, got {type(imageset).__name__}")
    if not isinstance(fractions, Mapping) or not fractions:
        raise ValueError(f"fractions must be a non-empty mapping part name -> fraction, got {fractions!r}")
    f = np.array([_checks.positive(f"fractions[{k!r}]", v) for k, v in fractions.items()])
    if abs(f.sum() - 1.0) > 1e-6:
        raise ValueError(f"fractions must sum to 1, got {f.sum():g}")
    C = imageset.n_classes
    if C < len(f):
        raise ValueError(f"imageset has {C} classes, fewer than the {len(f)} parts in fractions")
    seed = _checks.seed("seed", seed)
    counts = np.maximum(np.floor(f * C).astype(int), 1)
    while counts.sum() > C:  # the minimum of one class each overshot
        counts[np.argmax(counts)] -= 1
    rem = f * C - counts
    for i in np.argsort(-rem, kind="stable")[: C - counts.sum()]:
        counts[i] += 1
    perm = np.random.default_rng(seed).permutation(C)
    out, start = {}, 0
    for name, k in zip(fractions, counts, strict=True):
        out[name] = imageset.subset(sorted(perm[start:start + k].tolist()))
        start += k
    return out


# ----- readers ---------------------------------------------------------------
def _to_ink(png: bytes, size: int, where: str) -> np.ndarray:
    """PNG bytes (black ink on white) → ``[size, size]`` float32 ink in [0, 1]."""
    try:
        with Image.open(io.BytesIO(png)) as im:
            grey = np.asarray(im.convert("L"), dtype=np.float32)
    except Exception as err:  # noqa: BLE001 - any decoder failure is a bad file
        reason = re.sub(r"\s*<_io\.BytesIO object at 0x[0-9a-fA-F]+>", "", str(err)) or type(err).__name__
        raise ValueError(f"cannot decode image {where}: {reason}") from err
    return _resize(1.0 - grey / 255.0, size)


def _resize(ink: np.ndarray, size: int) -> np.ndarray:
    """Box filter when shrinking (antialiased), bilinear when enlarging; clipped to [0, 1]."""
    h, w = ink.shape
    if (h, w) == (size, size):
        return ink.astype(np.float32)
    resample = Image.Resampling.BOX if size <= min(h, w) else Image.Resampling.BILINEAR
    out = np.asarray(Image.fromarray(ink.astype(np.float32), mode="F").resize((size, size), resample=resample))
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def _check_files(data_dir: str | Path, files: Sequence[str] | str) -> tuple[Path, list[Path]]:
    files = _checks.items("files", files, "zip file names")
    if not all(isinstance(f, (str, Path)) for f in files):
        raise ValueError(f"files must be a non-empty sequence of zip file names, got {files!r}")
    if len(set(map(str, files))) != len(files):
        raise ValueError(f"files repeats a file: {files}")
    folder = Path(data_dir).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"data_dir {str(folder)!r} is not a folder; expected a folder holding "
                                f"{[str(f) for f in files]}")
    paths = [folder / f for f in files]
    missing = [str(f) for f, p in zip(files, paths, strict=True) if not p.is_file()]
    if missing:
        present = sorted(p.name for p in folder.glob("*.zip"))
        raise FileNotFoundError(
            f"files {missing} not found in data_dir {str(folder)!r}; expected {[str(f) for f in files]}, "
            f"the folder holds the zip files {present}")
    return folder, paths


def _open_zip(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile as err:
        raise ValueError(f"files: {path.name!r} is not a zip file ({err})") from err


def _read(z: zipfile.ZipFile, member: str, file: str) -> bytes:
    """The bytes of ``member``; a damaged member (bad CRC, bad compressed data) is a one-line ``ValueError``."""
    try:
        return z.read(member)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError) as err:
        raise ValueError(f"files: {member!r} in {file!r} cannot be read ({type(err).__name__}: {err}): the zip "
                         "file is damaged; copy it again") from None


def _members(z: zipfile.ZipFile) -> list[str]:
    """PNG members, skipping folders, macOS metadata and hidden files."""
    out = []
    for name in z.namelist():
        parts = name.split("/")
        if name.endswith("/") or "__MACOSX" in parts or any(p.startswith(".") for p in parts):
            continue
        if name.lower().endswith(".png"):
            out.append(name)
    return out


def read_omniglot(
    data_dir: str | Path,
    files: Sequence[str] | str = OMNIGLOT_SMALL_FILES,
    size: int = 32,
) -> ImageSet:
    """Read Omniglot characters straight from zip files (nothing is extracted).

    Layout inside each zip: ``<top>/<Alphabet>/characterNN/<id>_<drawer>.png``
    (the small sets, and unchanged the full ``images_background.zip`` /
    ``images_evaluation.zip``). Images (105×105, 1 bit, black ink on white)
    become ink = 1.0, background = 0.0, box-filtered to ``size×size``,
    float32. Classes are ``"<Alphabet>/characterNN"``, sorted; groups are the
    alphabets; ``sources`` are ``"<Alphabet>/characterNN/<file>"``.
    An image whose (alphabet, character, file name) was already read from an
    earlier zip is skipped and counted in ``duplicates`` (Greek and Latin are
    in both small sets: 1000 duplicates, 242 characters, 4840 images left).
    """
    size = _checks.positive_int("size", size)
    folder, paths = _check_files(data_dir, files)
    found: dict[str, tuple[Path, str]] = {}
    duplicates = 0
    for path in paths:
        with _open_zip(path) as z:
            n_here = 0
            for name in _members(z):
                parts = name.split("/")
                if len(parts) < 3:
                    continue
                key = "/".join(parts[-3:])
                n_here += 1
                if key in found:
                    duplicates += 1
                else:
                    found[key] = (path, name)
        if n_here == 0:
            raise ValueError(f"files: {path.name!r} holds no PNG images in the layout "
                             "<top>/<Alphabet>/characterNN/<file>.png")
    keys = sorted(found)
    char_of = ["/".join(k.split("/")[:2]) for k in keys]
    names = tuple(sorted(set(char_of)))
    index = {n: i for i, n in enumerate(names)}
    images = np.empty((len(keys), size, size), dtype=np.float32)
    by_zip: dict[Path, list[int]] = {}
    for i, k in enumerate(keys):
        by_zip.setdefault(found[k][0], []).append(i)
    for path, rows in by_zip.items():
        with _open_zip(path) as z:
            for i in rows:
                member = found[keys[i]][1]
                images[i] = _to_ink(_read(z, member, path.name), size, f"{member!r} in {path.name!r}")
    return ImageSet(
        images=images,
        classes=np.array([index[c] for c in char_of], dtype=np.int64),
        class_names=names,
        groups=tuple(n.split("/")[0] for n in names),
        sources=tuple(keys),
        duplicates=duplicates,
    )


_RUN_LINE = re.compile(r"^(run\d+)/test/([^/\s]+\.png)\s+(run\d+)/training/(class\d+)\.png$")


def read_omniglot_runs(data_dir: str | Path, size: int = 32, file: str = OMNIGLOT_RUNS_FILE) -> ImageSet:
    """The 20 one-shot runs of ``all_runs.zip`` as an out-of-distribution image set.

    Layout: ``runNN/training/classKK.png`` (20 per run, one per class),
    ``runNN/test/itemKK.png`` (20 per run) and ``runNN/class_labels.txt``,
    lines ``runNN/test/itemKK.png runNN/training/classJJ.png``. Returns 400
    classes ``"runNN/classKK"`` (group ``"runNN"``) with 2 images each: the
    training drawing first, then its test drawing; ink = 1.0, ``size×size``
    float32. The characters come from Omniglot's evaluation alphabets
    (disjoint from the background sets). Characters within a run are
    distinct; whether a character recurs in another run is not recorded, so
    use ``make_episodes(..., within_group=True)`` for episodes whose two
    classes are surely different characters.
    """
    size = _checks.positive_int("size", size)
    folder, (path,) = _check_files(data_dir, (file,))
    with _open_zip(path) as z:
        members = set(_members(z))
        label_files = sorted(n for n in z.namelist() if re.fullmatch(r"run\d+/class_labels\.txt", n))
        if not label_files:
            raise ValueError(f"file {file!r} holds no runNN/class_labels.txt")
        images: list[np.ndarray] = []
        classes: list[int] = []
        names: list[str] = []
        sources: list[str] = []
        for lf in label_files:
            run = lf.split("/")[0]
            pairs: dict[str, str] = {}
            for line in _read(z, lf, file).decode(errors="replace").splitlines():
                if not line.strip():
                    continue
                m = _RUN_LINE.match(line.strip())
                if m is None or m.group(1) != run or m.group(3) != run:
                    raise ValueError(f"{lf} in {file!r}: cannot parse line {line!r}")
                cls = m.group(4)
                if cls in pairs:
                    raise ValueError(f"{lf} in {file!r}: {cls} has two test images")
                pairs[cls] = f"{run}/test/{m.group(2)}"
            for cls in sorted(pairs):
                train, test = f"{run}/training/{cls}.png", pairs[cls]
                for member in (train, test):
                    if member not in members:
                        raise ValueError(f"{lf} in {file!r} names {member}, which is not in the zip")
                    images.append(_to_ink(_read(z, member, file), size, f"{member!r} in {file!r}"))
                    classes.append(len(names))
                    sources.append(member)
                names.append(f"{run}/{cls}")
    return ImageSet(
        images=np.stack(images),
        classes=np.array(classes, dtype=np.int64),
        class_names=tuple(names),
        groups=tuple(n.split("/")[0] for n in names),
        sources=tuple(sources),
    )


def read_digits(size: int = 32) -> ImageSet:
    """scikit-learn's 8×8 digits (1797 images, shipped with the package: no download).

    Values 0..16 become ink in [0, 1] (16 = full ink), bilinearly enlarged to
    ``size×size`` float32. Classes ``"digit0"``..``"digit9"``, group ``"digits"``.
    """
    size = _checks.positive_int("size", size)
    from sklearn.datasets import load_digits

    d = load_digits()
    ink = np.asarray(d.images, dtype=np.float32) / 16.0
    images = np.stack([_resize(im, size) for im in ink])
    return ImageSet(
        images=images,
        classes=np.asarray(d.target, dtype=np.int64),
        class_names=tuple(f"digit{k}" for k in range(10)),
        groups=("digits",) * 10,
        sources=tuple(f"digits/{i}" for i in range(len(images))),
    )
