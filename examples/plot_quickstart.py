"""
Quick start: theory against the exact posterior at N = 10
==========================================================

The Fig. 2c network (four attention paths, the hidden-Markov-chain task) at
width N = 10 as one experiment point: solve the theory (the leading order,
docs/theory.md §4, and its finite-width correction, §8), sample the exact
posterior of the order parameters with NUTS (the ``wishart`` sampler, §7), and
compare the two with Monte-Carlo error bars. ArviZ reads the posterior as it
is.
"""

# %%
import arviz as az
import matplotlib.pyplot as plt

import bayes_attn as ba
from bayes_attn import markov

task, net = markov.fig2c(width=10, n_test=100)  # the task (§6) and the network (§1)
x, y, x_test, y_test = task.generate()  # x: [P, T, N0] = [100, 31, 20]

# %%
# One experiment point: the network at its width, the data, the temperature,
# the theory's correction and the sampler (four chains of the exact Wishart
# chain, §7: any width costs the same). ``evaluate`` solves the theory, samples
# the posterior and compares the two (each part is also a function of its own:
# ``ba.solve_theory``, ``ba.sample_posterior``, ``ba.compare``).
point = ba.Point(
    net,
    x,
    y,
    x_test,
    y_test,
    temperature=0.01,
    correction="laplace",
    sampler=ba.SamplerSettings(
        name="wishart", num_chains=4, num_warmup=300, num_samples=1000
    ),
)
result = ba.evaluate(point)
theory, post = result.theory, result.posterior
print(net.path_labels)
print(theory.U.round(3))  # the order parameter U [path, path_], corrected (§8)
print(theory.correction.U_leading.round(3))  # its leading order (§4)
print(post.summary())  # R-hat, ESS and MCSE of U, U_l, Ua, f_train, f_test

# %%
# The comparison: the corrected theory is the headline, the leading order beside it.
print(result.outcome.value)
print(result.comparison.theories_summary())

# %%
# ArviZ works on the posterior's ``DataTree`` directly (here the R-hat of every
# entry of ``U``), and the draws are xarray: the trace of ``U``'s first
# diagonal entry, chain by chain, against the two theories.
print(az.rhat(post.tree, var_names=["U"])["U"].values.round(3))
draws = post.tree["posterior"]["U"].sel(path="1-1", path_="1-1")
fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
for chain in draws.chain.values:
    ax.plot(draws.draw, draws.sel(chain=chain), lw=0.5, label=f"chain {chain}")
ax.axhline(theory.U[0, 0], color="k", label="theory, corrected (§8)")
ax.axhline(
    theory.correction.U_leading[0, 0], color="k", ls="--", label="leading order (§4)"
)
ax.set(xlabel="draw", ylabel="U[1-1, 1-1]")
ax.set_title("Trace of the good path's weight, N = 10")
ax.legend(fontsize=7, ncols=3, loc="upper right")
plt.show()
