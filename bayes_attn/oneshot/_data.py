"""The one-shot task's images and episodes: steps 1 and 2 of ``bayes-attn prune`` (docs/theory.md §6).

1. :func:`datasets`: read the images and split the classes into three
   disjoint sets — ``gd_train`` (with rotations and mirror images as new
   classes when asked), ``validation``, ``test`` — plus the OOD sets. The
   theory's training episodes come from the ``gd_train`` classes, unrotated
   and unshifted (as the authors replay their training split), unless the
   split names its own ``theory_train`` classes.
2. :func:`evaluation_episodes`: the fixed episodes and their tokens ``x0``
   ``[n, T, N0]`` (``P`` theory-training episodes, validation, test, OOD);
   :func:`theory_draws`: further draws of the ``P`` episodes;
   :func:`gd_episodes`: fresh training episodes of one epoch.

Every episode set draws from its own seed (:data:`SEED_TAGS`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .._internal import checks as _checks
from ..tasks import (
    Episodes,
    ImageSet,
    Tokenizer,
    make_episodes,
    read_digits,
    read_omniglot,
    read_omniglot_runs,
    split_by_group,
)
from ._spec import OneShotSpec

__all__ = ["EpisodeSet", "Evaluation", "ImageSets", "check_data", "check_spec", "datasets", "episode_seed",
           "evaluation_episodes", "gd_episodes", "theory_draws", "tokenizer"]

FULL_ZIPS = ("images_background.zip", "images_evaluation.zip")
"""Omniglot's full archives, which a spec reads when ``task.files`` names them (the default: the small ones)."""

SEED_TAGS = {"theory_train": 1, "validation": 2, "test": 3, "ood/all_runs": 4, "ood/digits": 5, "gd_train": 6}
"""Every episode set draws from its own seed ``SeedSequence([task.seed, tag])``."""

def check_spec(spec) -> OneShotSpec:
    """``spec`` when it is a :class:`OneShotSpec`, else a one-line ``ValueError``."""
    if not isinstance(spec, OneShotSpec):
        raise ValueError(f"spec must be a OneShotSpec (see load_oneshot_spec), got {type(spec).__name__}")
    return spec


def episode_seed(spec: OneShotSpec, tag: str, *extra: int) -> int:
    """The seed of the episode set ``tag`` (a key of :data:`SEED_TAGS`), with ``extra`` entropy (e.g. an epoch)."""
    return int(np.random.SeedSequence([spec.task.seed, SEED_TAGS[tag], *extra]).generate_state(1)[0])


# ----- 1. images ---------------------------------------------------------------
class ImageSets(NamedTuple):
    """The image sets: ``gd_train`` (with rotations and mirrors when asked), ``theory_train`` (the
    unrotated ``gd_train`` classes, or the split's own ``theory_train``),
    ``validation``, ``test`` (class-disjoint from the others) and the OOD sets by name."""

    gd_train: ImageSet
    theory_train: ImageSet
    validation: ImageSet
    test: ImageSet
    ood: dict[str, ImageSet]


def datasets(spec: OneShotSpec, data_dir: str | os.PathLike | None = None) -> ImageSets:
    """Read, split and augment the images of ``spec.task``.

    ``data_dir`` (default :meth:`OneShotSpec.data_path`: ``task.data_dir``
    relative to the spec file) holds the zip files; ``kind = "digits"`` needs
    it only for the ``all_runs`` OOD set. Omniglot is split by alphabet,
    digits by class name.
    """
    task = check_spec(spec).task
    folder = spec.data_path(data_dir)
    if task.kind == "omniglot":
        parts = split_by_group(read_omniglot(folder, task.files, task.size), task.split)
    else:
        digits = read_digits(task.size)
        index = {n: i for i, n in enumerate(digits.class_names)}
        bad = [n for names in task.split.values() for n in names if n not in index]
        if bad:
            raise ValueError(f"task.split names unknown digit classes {bad}; known: {list(index)}")
        parts = {p: digits.subset([index[n] for n in names]) for p, names in task.split.items()}
    gd = parts["gd_train"].with_rotations() if task.rotations else parts["gd_train"]
    gd = gd.with_mirrors() if task.mirrors else gd
    ood = {}
    for name in task.ood:
        ood[name] = (read_omniglot_runs(folder, task.size, task.runs_file) if name == "all_runs"
                     else read_digits(task.size))
    return ImageSets(gd, parts[task.theory_part], parts["validation"], parts["test"], ood)


# ----- 2. episodes and tokens --------------------------------------------------
class EpisodeSet(NamedTuple):
    """Episodes with their tokens: ``x`` ``[n, T, N0]`` float64 and targets ``y`` ``[n]`` ±1."""

    episodes: Episodes
    x: np.ndarray
    y: np.ndarray


def tokenizer(spec: OneShotSpec) -> Tokenizer:
    """The frozen :class:`Tokenizer` of ``spec.task`` (its label embeddings are seeded by ``task.seed``)."""
    t = check_spec(spec).task
    return Tokenizer(size=t.size, patch=t.patch, channels=t.channels, label_scale=t.label_scale, seed=t.seed)


def _episode_set(spec: OneShotSpec, images: ImageSet, n: int, tag: str, *extra: int, shift: int = 0,
                 within_group: bool = False) -> EpisodeSet:
    try:
        ep = make_episodes(images, n, seed=episode_seed(spec, tag, *extra), shift=shift, within_group=within_group)
    except ValueError as err:  # name the split and its alphabets (task.split), not only the image set
        groups = sorted(set(images.groups))
        raise ValueError(f"the {tag!r} episodes (alphabets {groups[:5]}{' …' if len(groups) > 5 else ''}; "
                         f"see task.split): {err}") from None
    return EpisodeSet(ep, tokenizer(spec)(ep), ep.y)


class Evaluation(NamedTuple):
    """The fixed episode sets: ``theory_train`` (the theory's ``P`` episodes), ``validation``, ``test`` and the
    OOD sets by name."""

    theory_train: EpisodeSet
    validation: EpisodeSet
    test: EpisodeSet
    ood: dict[str, EpisodeSet]


def evaluation_episodes(spec: OneShotSpec, sets: ImageSets) -> Evaluation:
    """The fixed episode sets of ``spec`` from the image ``sets``.

    OOD ``all_runs`` episodes take both classes from one run (``within_group=True``:
    classes of different runs may be the same character).
    """
    t = check_spec(spec).task
    ood = {name: _episode_set(spec, images, t.n_ood, f"ood/{name}", within_group=name == "all_runs")
           for name, images in sets.ood.items()}
    return Evaluation(_episode_set(spec, sets.theory_train, t.n_theory_train, "theory_train"),
                      _episode_set(spec, sets.validation, t.n_validation, "validation"),
                      _episode_set(spec, sets.test, t.n_test, "test"), ood)


def theory_draws(spec: OneShotSpec, sets: ImageSets, first: EpisodeSet | None = None) -> list[EpisodeSet]:
    """``task.n_theory_draws`` draws of the ``P`` theory-training episodes; draw 0 is ``evaluation_episodes``'
    (``first``)."""
    t = check_spec(spec).task
    first = _episode_set(spec, sets.theory_train, t.n_theory_train, "theory_train") if first is None else first
    return [first] + [_episode_set(spec, sets.theory_train, t.n_theory_train, "theory_train", k)
                      for k in range(1, t.n_theory_draws)]


def gd_episodes(spec: OneShotSpec, sets: ImageSets, epoch: int) -> EpisodeSet:
    """``task.n_gd_train`` fresh gradient-descent episodes of ``epoch`` (images shifted by up to ``task.shift``;
    both classes from one alphabet with ``task.within_alphabet``)."""
    epoch = _checks.positive_int("epoch", epoch, minimum=0)
    t = check_spec(spec).task
    return _episode_set(spec, sets.gd_train, t.n_gd_train, "gd_train", epoch, shift=t.shift,
                        within_group=t.within_alphabet)


def check_data(spec: OneShotSpec, data_dir: str | os.PathLike | None = None) -> None:
    """One-line ``ValueError`` when the data folder is missing, a file, or lacks a zip the task reads."""
    t = spec.task
    files = (list(t.files) if t.kind == "omniglot" else []) + ([t.runs_file] if "all_runs" in t.ood else [])
    if not files:
        return
    folder = spec.data_path(data_dir)
    try:
        _checks.data_folder("data_dir", folder, files)
    except ValueError as err:
        full = [f for f in FULL_ZIPS if (Path(folder) / f).is_file() and f not in files]
        if not full:
            raise
        raise ValueError(f"{err}; the folder holds {', '.join(full)}: to read it instead, set task.files = "
                         f"{full!r} in the spec") from None

