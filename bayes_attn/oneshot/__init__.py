"""The one-shot image task end to end: paper Fig. 3 (docs/theory.md §6).

- :mod:`.spec`: the one-shot spec (task, model, training, theory, pruning, sampler);
- :mod:`.model`: the gradient-descent transformer, its ``Network`` and a pixel baseline;
- :mod:`.training`: its training;
- :mod:`.checkpoints`: its files (weights, settings, history);
- :mod:`.scan`: theory over widths × temperatures on the frozen attention, sampling;
- :mod:`.pruning`: head ablation of the trained model, Spearman, cumulative pruning;
- :mod:`.results`, :mod:`.figures`: ``oneshot.nc``, ``report.md`` and the figures;
- :mod:`.pipeline`: :func:`run_oneshot`, the whole job behind ``bayes-attn prune``.
"""

from .pipeline import (
    EpisodeSet,
    ImageSets,
    OneShotSpec,
    Scan,
    TrainedModel,
    datasets,
    evaluation_episodes,
    gd_episodes,
    load_oneshot_spec,
    predictor_mean,
    run_oneshot,
    sample_at_widths,
    temperature_scan,
    theory_draws,
    tokenizer,
    train_model,
)

__all__ = [
    "EpisodeSet", "ImageSets", "OneShotSpec", "Scan", "TrainedModel", "datasets", "evaluation_episodes",
    "gd_episodes", "load_oneshot_spec", "predictor_mean", "run_oneshot", "sample_at_widths", "temperature_scan",
    "theory_draws", "tokenizer", "train_model",
]
