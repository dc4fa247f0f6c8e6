"""The paper's tasks (THEORY.md §6).

:mod:`.markov`: the hidden-Markov-chain task and its heads (paper Fig. 2).
The one-shot image task (paper Fig. 3): :mod:`.images`: Omniglot / one-shot runs / digits readers, :class:`ImageSet`
and class splits; :mod:`.episodes`: balanced 2-way 1-shot episodes and the
:class:`Tokenizer` that turns them into the tokens ``x0``.
"""

from .episodes import N_IMAGES, Episodes, Tokenizer, make_episodes
from .images import (
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

__all__ = [
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
