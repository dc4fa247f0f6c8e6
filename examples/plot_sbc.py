"""
Simulation-based calibration of a sampler
=========================================

Is a sampler drawing from the right posterior? Simulation-based calibration
(Talts et al. 2018; :mod:`bayes_attn.calibration`) draws weights from the
prior (docs/theory.md §1), labels from the likelihood at the temperature
``T``, then posterior draws given those labels; the rank of the true value of
each invariant observable (the entries of ``U``, ``U_2``, ``Ua``, ``f`` at a
test and a training input) among the draws is then uniform. A sampler whose
likelihood is wrong, here one at ``T / 16`` (a posterior far too narrow),
piles the ranks at the ends or to one side.

The sizes are for illustration (a tiny random network, 60 replications of 19
draws each, under a minute on two cores); the test suite and
``benchmarks/sbc.py`` run 100 to 1000 replications.
"""

# %%
import matplotlib.pyplot as plt
import numpy as np

from bayes_attn import calibration

# two layers of 2 heads, width 2, 8 training inputs of 3 tokens of 4 features
net, x, x_test = calibration.random_problem(
    (2, 2), width=2, N0=4, T=3, P=8, P_test=1, seed=0
)
# one wishart chain per replication: 200 warm-up steps, 19 draws kept every 5
settings = calibration.SBC_SAMPLER.replace(name="wishart", start="prior")
T = 0.1
results = {
    "likelihood at T (right)": calibration.sbc_ranks(
        net, x, x_test, sampler=settings, temperature=T, n_reps=60
    ),
    "likelihood at T / 16 (wrong)": calibration.sbc_ranks(
        net, x, x_test, sampler=settings, temperature=T, n_reps=60,
        likelihood_temperature=T / 16,
    ),
}  # fmt: skip

# %%
# The chi-square test of uniform ranks per observable, and the pooled p-value
# over all of them (Bonferroni): large for the right likelihood, small for the
# wrong one.
for name, res in results.items():
    u = calibration.uniformity(res, bins=4)
    print(f"{name}: {res.n_reps} replications × {res.num_draws} draws")
    print(f"  observables: {', '.join(res.labels)}")
    print(f"  pooled p = {u['p_pooled']:.2g} (smallest for {u['worst']})")

# %%
# Rank histograms of four observables (four bins of five ranks each). A
# calibrated sampler's counts scatter around the expected count; the band is
# where 99 % of the counts of one bin fall when the ranks are uniform.
shown = ["U[1-1,1-1]", "Ua", "f_test[0]", "f_train[0]"]
bins = 4
fig, axes = plt.subplots(2, 4, figsize=(10, 4.6), layout="constrained", sharey=True)
for row, (name, res) in zip(axes, results.items(), strict=True):
    edges = np.linspace(0, res.num_draws + 1, bins + 1)
    expected = res.n_reps / bins
    spread = 2.576 * np.sqrt(res.n_reps * (1 / bins) * (1 - 1 / bins))
    for ax, label in zip(row, shown, strict=True):
        ranks = res.ranks[:, res.labels.index(label)]
        ax.hist(ranks, bins=edges, color="C0" if "right" in name else "C3")
        ax.axhspan(expected - spread, expected + spread, color="grey", alpha=0.25)
        ax.axhline(expected, color="k", lw=0.8)
        ax.set(title=f"{label}", xlabel=f"rank among {res.num_draws} draws")
    row[0].set_ylabel(f"{name}\nreplications")
fig.suptitle("SBC rank histograms, wishart sampler")
plt.show()
