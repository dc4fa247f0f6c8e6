"""
Reading saved results with xarray and ArviZ
===========================================

Every result is a netCDF file with named dimensions: a posterior
(``Posterior.save``) is an ArviZ ``DataTree`` with the groups ``posterior``,
``sample_stats``, ``observed_data`` and ``constant_data``; a theory, a
comparison and a sweep are xarray ``Dataset`` s. Nothing needs this package
to be read back; :func:`bayes_attn.load_posterior` and
:func:`bayes_attn.load_theory` also check the file's checksums and versions.
"""

# %%
import tempfile
from pathlib import Path

import arviz as az
import matplotlib.pyplot as plt
import xarray as xr

import bayes_attn as ba
from bayes_attn import markov

task, net = markov.fig2c(width=100, n_test=20)
x, y, x_test, y_test = task.generate()
post = ba.sample_posterior(
    net,
    x,
    y,
    temperature=0.01,
    x_test=x_test,
    sampler=ba.SamplerSettings(name="laplace-is", num_chains=4, num_samples=1000),
    progress_bar=False,
)
folder = Path(tempfile.mkdtemp())
post.save(folder / "posterior.nc")

# %%
# Read back as a plain DataTree (xarray) and summarised by ArviZ.
tree = xr.open_datatree(folder / "posterior.nc")
print(tree)
print(az.summary(tree, var_names=["Ua", "U_2"]))

# %%
# The posterior of two entries of ``U``: the good path "1-1" and the
# denoising path "2-1" of Fig. 2c, and their correlation.
az.plot_pair(tree, var_names=["U"], coords={"path": ["1-1", "2-1"], "path_": ["1-1"]})

# %%
# The same file through the package: checksums verified, the summary as the
# commands print it.
post = ba.load_posterior(folder / "posterior.nc")
print(post.summary().by_variable())

# %%
# A shipped result: the Fig. 2c sweep of ``inference/fig2c.py`` (widths 10 to
# 10⁴), as a Dataset.
here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
sweep = xr.open_dataset(here.parent / "inference" / "results" / "fig2c" / "sweep.nc")
print(sweep.accuracy_theory.to_series())  # dimension width
print(sweep.accuracy_sampled.to_series())  # dimension sample_width
fig, ax = plt.subplots(figsize=(5, 3.2), layout="constrained")
for path in ("1-1", "2-1"):
    sweep.U_theory.sel(path=path, path_=path).plot(
        ax=ax, marker="o", label=f"U[{path}, {path}], theory"
    )
ax.set(xscale="log", title="Fig. 2c: the order parameter against width")
ax.legend()
plt.show()
