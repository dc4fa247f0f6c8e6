"""The one-shot image task end to end: paper Fig. 3 (docs/theory.md §6).

- :mod:`.spec`: the one-shot spec (task, model, training, theory, pruning, sampler);
- :mod:`.data`: its images and episodes;
- :mod:`.model`: the gradient-descent transformer, its ``Network`` and a pixel baseline;
- :mod:`.training`: its training;
- :mod:`.checkpoints`: its files (weights, settings, history);
- :mod:`.scan`: theory over widths × temperatures on the frozen attention, sampling;
- :mod:`.pruning`: head ablation of the trained model, Spearman, cumulative pruning;
- :mod:`.prune_result`: what the job found, as one typed value, and ``pruning.json``;
- :mod:`.results`, :mod:`.figures`: ``oneshot.nc``, ``report.md`` and the figures;
- :mod:`.pipeline`: :func:`run_oneshot`, the whole job behind ``bayes-attn prune``.
"""

from .data import EpisodeSet, Evaluation, ImageSets, datasets, evaluation_episodes, gd_episodes, theory_draws, tokenizer
from .pipeline import run_oneshot, train_model
from .prune_result import PruneResult, TrainedModel, load_pruning
from .scan import Scan, predictor_mean, sample_at_widths, temperature_scan
from .spec import OneShotSpec, load_oneshot_spec

__all__ = [
    "EpisodeSet", "Evaluation", "ImageSets", "OneShotSpec", "PruneResult", "Scan", "TrainedModel", "datasets",
    "evaluation_episodes", "gd_episodes", "load_oneshot_spec", "load_pruning", "predictor_mean", "run_oneshot",
    "sample_at_widths", "temperature_scan", "theory_draws", "tokenizer", "train_model",
]
