"""The one-shot image task end to end: paper Fig. 3 (docs/theory.md §6).

- :class:`OneShotSpec` (:func:`load_oneshot_spec`): the one-shot spec (task, model, training, theory, pruning,
  sampler);
- :func:`datasets`, :func:`evaluation_episodes`, :func:`gd_episodes`: its images and episodes;
- :class:`ModelConfig`, :func:`to_network`: the gradient-descent transformer and its ``Network``; :func:`train`
  (:class:`TrainConfig`) its training, :func:`train_model` the job's training stage;
- :func:`temperature_scan`, :func:`sample_at_widths`: theory over widths × temperatures on the frozen attention,
  sampling;
- :class:`PruneResult` (:func:`load_pruning`): what the job found, as one typed value, and ``pruning.json``;
  :func:`path_kernels` one of its figures;
- :func:`run_oneshot`: the whole job behind ``bayes-attn prune``.

The implementation lives in the private modules ``bayes_attn.oneshot._*``.
"""

from ._data import (
    EpisodeSet,
    Evaluation,
    ImageSets,
    datasets,
    evaluation_episodes,
    gd_episodes,
    theory_draws,
    tokenizer,
)
from ._figures import path_kernels
from ._model import ModelConfig, to_network
from ._pipeline import run_oneshot, train_model
from ._prune_result import PAPER_SPEARMAN_RHO, PruneResult, TrainedModel, load_pruning
from ._scan import Scan, predictor_mean, sample_at_widths, temperature_scan
from ._spec import OneShotSpec, load_oneshot_spec
from ._training import TrainConfig, train

__all__ = [
    "PAPER_SPEARMAN_RHO", "EpisodeSet", "Evaluation", "ImageSets", "ModelConfig", "OneShotSpec", "PruneResult",
    "Scan", "TrainConfig", "TrainedModel", "datasets", "evaluation_episodes", "gd_episodes", "load_oneshot_spec",
    "load_pruning", "path_kernels", "predictor_mean", "run_oneshot", "sample_at_widths", "temperature_scan",
    "theory_draws", "tokenizer", "to_network", "train", "train_model",
]
