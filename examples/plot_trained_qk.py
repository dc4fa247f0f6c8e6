"""
A network from query and key weights
====================================

Attention written as queries and keys: :meth:`bayes_attn.Network.from_qk` takes
``queries[l]`` and ``keys[l]``, each ``[H_l, d_qk, N0]``, and builds the
bilinear attention ``W = Kᵀ Q / sqrt(d_qk)`` of every head (docs/theory.md
§1). Nothing here is trained: the query and key weights are either

- the heads of the Markov task's Fig. 2c network (docs/theory.md §6), each
  factorised into queries and keys of dimension ``d_qk`` (exact at full rank,
  a low-rank approximation below it), or
- random, standard normal weights (labelled "random Q/K").

On the same small data set the theory (docs/theory.md §4) then says which
attention paths each network's posterior uses: the order parameter ``U`` and
the head scores.
"""

# %%
import matplotlib.pyplot as plt
import numpy as np

import bayes_attn as ba
from bayes_attn.tasks.markov import FIG2C_LAYERS, MarkovTask

# A small, easier version of the task than the paper's: short sequences, states
# that stay or switch with probability 0.9, less noise.
task = MarkovTask(
    feature_dim=8,
    seq_len=5,
    n_train=40,
    n_test=100,
    p_stay=(0.9, 0.1),
    noise_sum=0.3,
    noise_diff=0.3,
    noise_perp=0.3,
)
x, y, x_test, y_test = task.generate()  # x: [P, T, N0] = [40, 6, 14]
exact = task.network(FIG2C_LAYERS, width=10)  # the bilinear heads themselves
print("inputs", x.shape, "heads per layer", exact.heads, "paths", exact.path_labels)


def factorise(W: np.ndarray, d_qk: int) -> tuple[np.ndarray, np.ndarray]:
    """Queries and keys ``[H, d_qk, N0]`` with ``Kᵀ Q / sqrt(d_qk)`` the best
    rank-``d_qk`` approximation of each head ``W`` ``[H, N0, N0]`` (its SVD)."""
    u, s, vt = np.linalg.svd(W)  # W[h] = u[h] diag(s[h]) vt[h]
    scale = np.sqrt(s[:, :d_qk]) * d_qk**0.25  # [H, d_qk]
    keys = scale[:, :, None] * np.swapaxes(u[:, :, :d_qk], 1, 2)
    queries = scale[:, :, None] * vt[:, :d_qk, :]
    return queries, keys


# %%
# Three networks of the same shape: the heads factorised at full rank
# (``d_qk = N0``: the same attention), at rank 2, and random queries and keys.
N0 = x.shape[-1]
rng = np.random.default_rng(0)
networks = {}
for name, d_qk in [(f"Fig. 2c heads, d_qk = {N0}", N0), ("Fig. 2c heads, d_qk = 2", 2)]:
    qk = [factorise(W, d_qk) for W in exact.attention]
    networks[name] = ba.Network.from_qk(
        [q for q, _ in qk], [k for _, k in qk], widths=10, variances=1.0
    )
d_qk = 4
random_q = [rng.normal(size=(h, d_qk, N0)) for h in exact.heads]
random_k = [rng.normal(size=(h, d_qk, N0)) for h in exact.heads]
networks["random Q/K, d_qk = 4"] = ba.Network.from_qk(
    random_q, random_k, widths=10, variances=1.0
)
full = networks[f"Fig. 2c heads, d_qk = {N0}"]
pairs = zip(full.attention, exact.attention, strict=True)
gap = max(np.abs(a - b).max() for a, b in pairs)
print(f"full-rank factorisation reproduces the heads to {gap:.1e}")

# %%
# The theory of each network at temperature 0.1: converged, test accuracy,
# and the head scores (a low score marks a head the posterior does not use).
theories = {}
for name, net in networks.items():
    th = ba.solve_theory(net, x, y, temperature=0.1)
    mean, _ = th.predict(x_test)
    accuracy = np.mean(np.sign(mean) == y_test)
    scores = [s.round(2).tolist() for s in th.head_scores()]
    print(f"{name}: converged {th.converged}, accuracy {accuracy:.2f}, scores {scores}")
    theories[name] = th

# %%
# The order parameter ``U`` over the four paths (``"1-2"``: head 1 of layer
# 1, head 2 of layer 2) for each network.
labels = exact.path_labels
fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), layout="constrained")
for ax, (name, th) in zip(axes, theories.items(), strict=True):
    top = np.abs(th.U).max()  # each panel on its own scale
    im = ax.imshow(th.U, cmap="RdBu_r", vmin=-top, vmax=top)
    ax.set(title=name, xlabel="path", ylabel="path")
    ax.set(xticks=range(len(labels)), yticks=range(len(labels)))
    ax.set_xticklabels(labels)
    ax.set_yticklabels(labels)
    fig.colorbar(im, ax=ax, label="U (theory, §4)", shrink=0.8)
plt.show()

# %%
# The head scores, layer by layer (the largest over all heads is 1). Here the
# full-rank factorisation, the Fig. 2c heads themselves, leans on the
# same-token head of layer 1 and the uniform head of layer 2, as in the
# paper; at rank 2 the same-token head loses what made it useful (its score
# falls), and random queries and keys spread the weight over all heads.
names = [f"L{l + 1}:{h}" for l, layer in enumerate(FIG2C_LAYERS) for h in layer]
fig, ax = plt.subplots(figsize=(8, 3.2), layout="constrained")
width = 0.8 / len(theories)
for i, (name, th) in enumerate(theories.items()):
    scores = np.concatenate(th.head_scores())
    ax.bar(np.arange(len(names)) + i * width, scores, width, label=name)
ax.set_xticks(np.arange(len(names)) + width * (len(theories) - 1) / 2, names)
ax.set(xlabel="head (layer: its kind in Fig. 2c)", ylabel="head score")
ax.set_title("Head scores (theory, §4)")
ax.legend(fontsize="small")
plt.show()
