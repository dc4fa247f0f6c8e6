"""
Your own network and data
=========================

The package takes any fixed attention and any data as plain arrays: a
:class:`~bayes_attn.Network` is its attention matrices (one ``[H_l, N0, N0]``
array per layer), its widths and its prior variances (docs/theory.md §1); the
data are inputs ``x`` ``[P, T, N0]`` and labels ``y`` ``[P]`` (±1 for
classification, any real targets for regression). Here: three layers with 2,
3 and 1 heads, random bilinear attention, and a toy task whose label is the
sign of the first feature averaged over the sequence's tokens, plus a little
noise.
"""

# %%
import matplotlib.pyplot as plt
import numpy as np

import bayes_attn as ba

rng = np.random.default_rng(0)
N0, T, P, P_test = 8, 6, 60, 200
heads = (2, 3, 1)  # heads per layer: 2 × 3 × 1 = 6 attention paths
attention = [rng.normal(scale=0.5, size=(h, N0, N0)) for h in heads]
net = ba.Network(attention, widths=20, variances=1.0)
print(
    net.path_labels
)  # "1-2-1": head 1 of layer 1, head 2 of layer 2, head 1 of layer 3


def make_data(n: int) -> tuple[np.ndarray, np.ndarray]:
    x = rng.normal(size=(n, T, N0))
    y = np.sign(x[:, :, 0].mean(axis=1) + 0.1 * rng.normal(size=n))
    return x, y


x, y = make_data(P)
x_test, y_test = make_data(P_test)

# %%
# The theory: the order parameters of every level (``U`` over paths, ``U_2``,
# ``U_3`` over the heads below, ``Ua``), the predictor and the head scores.
theory = ba.solve_theory(net, x, y, temperature=0.1)
print(f"converged: {theory.converged} after {theory.iterations} Newton steps")
print(f"action {theory.action:.3f}")
mean, var = theory.predict(x_test)
print(f"test accuracy of sign(mean): {np.mean(np.sign(mean) == y_test):.3f}")
gp = ba.gp_limit(
    net, x, y, temperature=0.1
)  # infinite width: the kernel with U = prior
print(f"GP limit: {np.mean(np.sign(gp.predict(x_test)[0]) == y_test):.3f}")

# %%
# The order parameter ``U``: which paths the posterior weights up, and how they
# combine, against the GP limit's.
fig, axes = plt.subplots(1, 2, figsize=(8, 3.5), layout="constrained")
for ax, (title, U) in zip(
    axes, [("finite width N = 20", theory.U), ("GP limit", gp.U)], strict=True
):
    im = ax.imshow(
        U, cmap="RdBu_r", vmin=-np.abs(theory.U).max(), vmax=np.abs(theory.U).max()
    )
    ax.set(
        title=title,
        xticks=range(len(net.path_labels)),
        yticks=range(len(net.path_labels)),
    )
    ax.set_xticklabels(net.path_labels, rotation=90)
    ax.set_yticklabels(net.path_labels)
fig.colorbar(im, ax=axes, label="U")
plt.show()
