"""
A run folder, read with ArviZ and xarray
========================================

``bayes-attn run`` writes a folder: ``report.md``, figures and netCDF files
(``theory.nc``, ``gp.nc``, ``posterior.nc``, ``comparison.nc``). Here a tiny
run (a small Markov task at width 3, a few hundred draws: sizes for
illustration, seconds to run) goes into a temporary folder, and its files are
read back: the posterior is an ArviZ ``DataTree``, so ArviZ's summaries,
diagnostics and plots apply to it as they are; the theory and the comparison
are xarray ``Dataset`` s. Diagnostics are computed on the invariant
observables ``U`` and ``Ua`` (individual weights are not identifiable,
docs/theory.md §5).
"""

# %%
import subprocess
import sys
import tempfile
from pathlib import Path

import arviz as az
import matplotlib.pyplot as plt
import xarray as xr

import bayes_attn as ba

folder = Path(tempfile.mkdtemp())
spec = folder / "tiny.toml"
spec.write_text("""\
name = "tiny"
temperature = 0.1

[task]
kind = "markov"
feature_dim = 8
seq_len = 5
n_train = 20
n_test = 40

[network]
layers = [["same_token", "random"], ["uniform", "random"]]
width = 3
beta = 2.0

[sampler]
name = "wishart"
num_chains = 4
num_warmup = 300
num_samples = 500

[compare]
widths = [3, 30]
sample_widths = [3]
""")

# %%
# The command, as in a shell (``bayes-attn run tiny.toml --out ...``); its
# exit status is 0 whether theory and sampling agree or disagree (a
# disagreement is a result) and 3 when the verdict is inconclusive. At width 3
# the theory, an expansion in 1/N (docs/theory.md §4, §8), is expected to be
# far off the exact posterior: the verdict is not the point here, the files are.
out = folder / "run"
command = ["bayes-attn", "run", str(spec), "--out", str(out), "--no-progress"]
done = subprocess.run(
    [sys.executable, "-m", "bayes_attn", *command[1:]], capture_output=True, text=True
)
print("exit status", done.returncode)
print(done.stdout.splitlines()[-2])  # the headline line of the report
print(sorted(p.name for p in out.iterdir()))

# %%
# The posterior: :func:`bayes_attn.load_posterior` checks the file and gives a
# :class:`~bayes_attn.Posterior`, whose ``tree`` is an xarray ``DataTree`` in
# ArviZ's layout (groups ``posterior``, ``sample_stats``, ...).
post = ba.load_posterior(out / "posterior.nc")
print(type(post.tree).__name__, list(post.tree.children))
print(post.tree["posterior"]["Ua"].dims)

# %%
# ArviZ on it as it is: the summary, R-hat and the bulk ESS of ``U`` and
# ``Ua`` (``U`` per pair of paths, ``Ua`` one number).
print(az.summary(post.tree, var_names=["Ua", "U"]).round(3))
print("R-hat of U:")
print(az.rhat(post.tree, var_names=["U"])["U"].values.round(3))
print("bulk ESS of Ua:", round(float(az.ess(post.tree, var_names=["Ua"])["Ua"])))

# %%
# ArviZ's trace plot of ``Ua``: the marginal density and the draws of each chain.
az.plot_trace_dist(post.tree, var_names=["Ua"])
fig = plt.gcf()
fig.suptitle("Ua: posterior density and trace, 4 chains")
fig.axes[0].set(xlabel="Ua", ylabel="density")
fig.axes[1].set(xlabel="draw")
plt.show()

# %%
# The theory and the comparison are xarray ``Dataset`` s (ArviZ's
# ``from_netcdf`` is for posteriors): the theory's ``U`` and its solver's
# record, and the comparison's checks, one row per check.
theory = xr.open_dataset(out / "theory.nc")
comparison = xr.open_dataset(out / "comparison.nc")
print(theory["U"].round(2))
print("converged:", bool(theory["converged"]), "| limit:", theory.attrs["limit"])
checks = ["check_value", "check_gap", "check_passed"]
print(comparison[checks].to_dataframe())
print("verdict:", comparison.attrs["verdict"])

# %%
# Every entry of ``U``: the posterior mean with two Monte-Carlo standard
# errors (from ``comparison.nc``) against the corrected theory (§8) and the
# leading order (§4). At N = 3 both are off (here the leading order less so).
sampled = comparison["U_sampled"].values.ravel()
mcse = comparison["U_mcse"].values.ravel()
fig, ax = plt.subplots(figsize=(5, 4.2), layout="constrained")
for name, label in [
    ("U_theory", "corrected (§8)"),
    ("alternative_U_theory", "leading order (§4)"),
]:
    ax.errorbar(
        comparison[name].values.ravel(), sampled, yerr=2 * mcse, fmt="o", label=label
    )
lims = [sampled.min() - 1, sampled.max() + 1]
ax.plot(lims, lims, "k--", lw=0.8, label="equal")
ax.set(
    xlabel="U, theory",
    ylabel="U, posterior mean ± 2 MCSE",
    title="Every entry of U, N = 3",
)
ax.legend()
plt.show()
