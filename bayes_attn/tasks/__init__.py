"""The paper's tasks (docs/theory.md §6).

:mod:`.markov`: the hidden-Markov-chain task and its heads (paper Fig. 2).
Your own data and attention from ``.npz`` files: the spec kind ``"arrays"``.
The one-shot image task (paper Fig. 3): Omniglot / one-shot runs / digits readers, :class:`ImageSet`
and class splits; balanced 2-way 1-shot episodes and the
:class:`Tokenizer` that turns them into the tokens ``x0``.
"""

from typing import TYPE_CHECKING

import lazy_loader

from ._episodes import N_IMAGES, Episodes, Tokenizer, make_episodes
from ._images import (
    DEFAULT_SPLIT,
    OMNIGLOT_FULL_FILES,
    OMNIGLOT_RUNS_FILE,
    OMNIGLOT_SMALL_FILES,
    ROTATIONS,
    ImageSet,
    read_digits,
    read_omniglot,
    read_omniglot_runs,
    split_by_class,
    split_by_group,
)

__getattr__, _, _ = lazy_loader.attach(__name__, submodules=["markov"])  # imports JAX: on first use
if TYPE_CHECKING:
    from . import markov  # noqa: F401

__all__ = [
    "markov",
    "DEFAULT_SPLIT",
    "N_IMAGES",
    "OMNIGLOT_FULL_FILES",
    "OMNIGLOT_RUNS_FILE",
    "OMNIGLOT_SMALL_FILES",
    "ROTATIONS",
    "Episodes",
    "ImageSet",
    "Tokenizer",
    "make_episodes",
    "read_digits",
    "read_omniglot",
    "read_omniglot_runs",
    "split_by_class",
    "split_by_group",
]
