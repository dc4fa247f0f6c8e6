"""
The samplers side by side
=========================

Every sampler draws from the same exact posterior (docs/theory.md §5, §7, §9);
what differs is the cost of an effective draw. On the Fig. 2c network at
N = 100 we run the exact Wishart chain with NUTS (``wishart``), importance
sampling from the finite-width expansion (``laplace-is``) and independence
Metropolis–Hastings with the same proposal (``laplace-mh``), and compare their
time, their effective sample size per second on ``U`` and their agreement.
The first call of each sampler includes compiling its programs; a second call
of the same shapes runs without (the benchmarks in ``benchmarks/`` time
second calls).
"""

# %%
import matplotlib.pyplot as plt
import numpy as np

import bayes_attn as ba
from bayes_attn import markov

task, net = markov.fig2c(width=100, n_test=20)
x, y, x_test, y_test = task.generate()
runs = [
    ba.SamplerSettings(name="wishart", num_chains=4, num_warmup=200, num_samples=1000),
    ba.SamplerSettings(name="laplace-is", num_chains=4, num_samples=1000),
    ba.SamplerSettings(
        name="laplace-mh", num_chains=4, num_warmup=100, num_samples=1000
    ),
]
posteriors = {
    settings.name: ba.sample_posterior(
        net, x, y, temperature=0.01, x_test=x_test, sampler=settings, progress_bar=False
    )
    for settings in runs
}

# %%
# Time, the smallest bulk ESS over the entries of ``U``, and ESS per second.
# ``laplace-is`` also reports its Pareto k̂ (trusted up to 0.7).
rows = []
for name, post in posteriors.items():
    s = post.summary()
    ess = s.table[s.table.index.str.startswith("U[")]["ess_bulk"].min()
    rows.append((name, s.seconds, ess, ess / s.seconds, s.failures()))
    print(
        f"{name:11s} {s.seconds:6.1f} s   min ESS(U) {ess:7.0f}   "
        f"{ess / s.seconds:7.1f} ESS/s   k̂ {s.pareto_k:.2f}   "
        f"failed diagnostics: {s.failures() or 'none'}"
    )

# %%
# Agreement: the posterior mean of ``U`` of each sampler against the Wishart
# chain's, in units of their combined Monte-Carlo standard error.
ref = posteriors["wishart"].summary().table
u = ref.index.str.startswith("U[")
fig, ax = plt.subplots(figsize=(5, 3.2), layout="constrained")
for name in ("laplace-is", "laplace-mh"):
    t = posteriors[name].summary().table
    z = (t["mean"][u] - ref["mean"][u]) / np.hypot(
        t["mcse_mean"][u], ref["mcse_mean"][u]
    )
    ax.plot(range(u.sum()), z, "o", label=f"{name}: max |z| {np.abs(z).max():.1f}")
ax.axhline(0, color="grey", lw=0.8)
ax.set(xlabel="entry of U", ylabel="z against wishart", title="Fig. 2c, N = 100")
ax.legend()
plt.show()
