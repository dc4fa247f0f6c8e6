"""
A small width sweep and its figures
===================================

:func:`bayes_attn.sweep.sweep` runs the theory at many widths and samples the
posterior at some of them, as ``bayes-attn sweep`` does (docs/theory.md §6):
each job writes its own file, so an interrupted sweep resumes, and
``sweep.nc`` collects them with the figures. Here: the default spec (the
Fig. 2c network and task), the theory at four widths, the posterior at two,
with the ``laplace-is`` sampler.
"""

# %%
import tempfile
from dataclasses import replace
from pathlib import Path

import matplotlib.pyplot as plt
import xarray as xr

import bayes_attn as ba
from bayes_attn.sweep import sweep

spec = ba.load_spec()  # the embedded default: models/markov_4paths.toml (Fig. 2c)
spec = replace(
    spec,
    task=replace(spec.task, n_test=200),  # a smaller test set than the paper's 1000
    sampler=spec.sampler.replace(name="laplace-is", num_chains=3, num_samples=1000),
)
out = Path(tempfile.mkdtemp()) / "sweep"
ds = sweep(
    spec,
    out,
    widths=[10, 100, 1000, 10000],
    sample_widths=[100, 1000],
    progress_bar=False,
)
print(ds[["accuracy_theory", "accuracy_sampled", "accuracy_sampled_se"]])
print("verdict:", ds.attrs["verdict"])
print(sorted(p.name for p in out.iterdir()))

# %%
# The test accuracy against width: theory, GP limit and samples (the paper's Fig. 2c).
fig, ax = plt.subplots(figsize=(5, 3.5), layout="constrained")
ax.plot(ds.width, ds.accuracy_theory, "o-", label="theory (§4)")
ax.errorbar(
    ds.sample_width,
    ds.accuracy_sampled,
    yerr=ds.accuracy_sampled_se,
    fmt="s",
    capsize=3,
    label="sampled",
)
ax.axhline(
    float(ds.accuracy_gp.sel(gp_model="whole network")),
    color="grey",
    ls="--",
    label="GP limit",
)
ax.set(xscale="log", xlabel="width N", ylabel="test accuracy")
ax.set_title("Fig. 2c network, test accuracy")
ax.legend()

# %%
# ``sweep.nc`` read back: the weight of each path (the diagonal of ``U``,
# docs/theory.md §4) against width, the theory's line and the sampled points
# with their Monte-Carlo standard errors. The sweep also wrote its figures
# (``accuracy_vs_width.png``, ``finite_size.png``) beside the file.
saved = xr.open_dataset(out / "sweep.nc")
print("headline theory:", saved.attrs["correction"])
print(sorted(p.name for p in out.glob("*.png")))
fig, ax = plt.subplots(figsize=(5, 3.5), layout="constrained")
for path in saved.path.values:
    line = ax.plot(
        saved.width, saved.U_theory.sel(path=path, path_=path), "-", label=path
    )
    ax.errorbar(
        saved.sample_width,
        saved.U_sampled.sel(path=path, path_=path),
        yerr=saved.U_mcse.sel(path=path, path_=path),
        fmt="o",
        color=line[0].get_color(),
        capsize=3,
    )
ax.set(xscale="log", xlabel="width N", ylabel="U (diagonal)")
ax.set_title("Path weights: theory (lines), sampled (points)")
ax.legend(title="path", fontsize=8)
plt.show()
