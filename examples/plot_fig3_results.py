"""
Fig. 3 from the shipped results: head scores against accuracy drops
===================================================================

``bayes-attn prune`` trains a two-layer transformer on one-shot Omniglot
episodes, scores its heads with the theory (docs/theory.md "Head scores") and
ablates each head to measure its accuracy drop. The results of the default
spec are shipped in ``inference/results/fig3/rotations``: ``pruning.json``
(the scores, the drops and their Spearman ρ; read as a typed value by
``bayes_attn.oneshot.load_pruning``) and ``oneshot.nc`` (the theory's and the
samples' accuracies by width). Here we read both and redraw the paper's
score-against-drop plot.
"""

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from bayes_attn.oneshot import PAPER_SPEARMAN_RHO, load_pruning

here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
results = here.parent / "inference" / "results" / "fig3" / "rotations"
result = load_pruning(
    results
)  # a typed PruneResult: the pruning, its spread, the model's accuracies

scores = np.asarray(
    result.pruning.head_scores
)  # [layer, head]: the theory's score of each head
drops = np.asarray(
    result.pruning.drops, dtype=float
)  # [layer, head]: test accuracy lost when the head is removed
drop_se = np.asarray(result.pruning.drop_se, dtype=float)
rho = result.pruning.spearman.rho
base, spread = result.spread.base, result.spread.rho
print(f"base accuracy {base.accuracy:.3f} ± {base.se:.3f} (class bootstrap)")
print(
    f"Spearman rho(score, drop) = {rho:.2f} (paper: {PAPER_SPEARMAN_RHO}), "
    f"median over draws {spread.median:.2f} [{spread.q05:.2f}, {spread.q95:.2f}]"
)

# %%
# The score of each head against the accuracy lost without it, one colour per layer.
fig, ax = plt.subplots(figsize=(4.5, 3.5), layout="constrained")
for layer, marker in zip(
    range(scores.shape[0]), "os", strict=False
):  # the paper's two layers
    ax.errorbar(
        scores[layer],
        drops[layer],
        yerr=drop_se[layer],
        fmt=marker,
        capsize=2,
        label=f"layer {layer + 1}",
    )
    for head, (s, d) in enumerate(zip(scores[layer], drops[layer], strict=True)):
        ax.annotate(
            f"{layer + 1}.{head + 1}",
            (s, d),
            textcoords="offset points",
            xytext=(4, 3),
            fontsize=8,
        )
ax.set(
    xlabel="head score (theory)",
    ylabel="accuracy drop",
    title=f"Spearman ρ = {rho:.2f}",
)
ax.legend()

# %%
# ``oneshot.nc`` holds the accuracies by width: the theory's, the GP limit's
# and the sampled network's.
ds = xr.open_dataset(results / "oneshot.nc")
print(ds)
plt.show()
