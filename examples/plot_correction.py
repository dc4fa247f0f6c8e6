"""
The finite-width correction: leading order, corrected, exact
============================================================

The theory's leading order (docs/theory.md §4) is the minimum of an action;
at finite width N the posterior of the order parameters has a spread of order
1/√N around it, and its mean moves by order 1/N. The finite-width (Laplace)
correction (§8) expands the exact action around its mode and predicts that
shift. Here, on the Fig. 2c network, we compare both with the exact posterior
mean of ``U`` at N = 30, 100 and 300, sampled with ``auto`` (importance
sampling from the same expansion where its Pareto k̂ passes, else exact MCMC;
at N = 10, where it does not, ``auto`` ends with the Wishart chain: see the
quick start).
"""

# %%
import matplotlib.pyplot as plt
import numpy as np

import bayes_attn as ba
from bayes_attn import markov

widths = [30, 100, 300]
rows = []
for N in widths:
    task, net = markov.fig2c(width=N, n_test=20)
    x, y, x_test, y_test = task.generate()
    theory = ba.solve_theory(net, x, y, temperature=0.01, correction="laplace")
    post = ba.sample_posterior(
        net,
        x,
        y,
        temperature=0.01,
        x_test=x_test,
        sampler=ba.SamplerSettings(name="auto", num_chains=4, num_samples=1000),
        progress_bar=False,
    )
    comparison = ba.compare(
        theory, post, x_test, y_test
    )  # headline: corrected; alternative: leading order
    print(f"N = {N:4d} ({post.summary().sampler}): {comparison.theories_summary()}")
    rows.append(
        [
            comparison.theories[c].check("U (relative Frobenius)")
            for c in ("none", "laplace")
        ]
    )

# %%
# The relative gap ``|U_sampled − U_theory| / |U_theory|`` of each theory,
# with the Monte-Carlo floor: the leading order's gap falls like 1/N, the
# corrected theory's sits at the floor.
fig, ax = plt.subplots(figsize=(5, 3.5), layout="constrained")
for k, (label, colour) in enumerate(
    [("leading order (§4)", "C0"), ("corrected (§8)", "C1")]
):
    gaps = np.array([r[k].value for r in rows])
    ses = np.array([r[k].mcse for r in rows])
    ax.errorbar(widths, gaps, yerr=ses, fmt="o-", color=colour, capsize=3, label=label)
floor = np.array([r[1].noise_floor for r in rows])
ax.plot(widths, floor, "k:", label="Monte-Carlo floor")
ax.set(
    xscale="log",
    yscale="log",
    xlabel="width N",
    ylabel="relative gap of U",
    xticks=widths,
    xticklabels=[str(n) for n in widths],
)
ax.legend()
plt.show()
