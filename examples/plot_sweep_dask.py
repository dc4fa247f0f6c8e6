"""
A sweep on a local Dask cluster
===============================

A sweep's jobs (the theory at each width, the sampler at each sampled width)
are independent, so they can run in parallel: :func:`bayes_attn.sweep.sweep`
takes an ``executor`` (:class:`~bayes_attn.sweep.Executor`).
:class:`~bayes_attn.sweep.DaskLocal` starts a ``distributed``
``LocalCluster`` of worker processes on this machine (one BLAS thread each)
and closes it when the sweep ends; ``DaskScheduler`` uses a running
scheduler's workers and ``DaskJobqueue`` a SLURM or PBS cluster. The command
line does the same with ``bayes-attn sweep SPEC --executor dask --workers 2``.
Dask comes with the package's ``test`` extra.

The sizes are for illustration: a small Markov task, the theory at three
widths and the ``laplace-is`` sampler at one, on two worker processes (most of
the time here, under a minute on two cores, is starting the workers and
compiling).
"""

# %%
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt

from bayes_attn.spec import spec_from_dict
from bayes_attn.sweep import DaskLocal, sweep

spec = spec_from_dict(
    {
        "name": "small",
        "temperature": 0.1,
        "task": {
            "kind": "markov",
            "feature_dim": 8,
            "seq_len": 5,
            "p_stay": [0.9, 0.1],
            "noise_sum": 0.3,
            "noise_diff": 0.3,
            "noise_perp": 0.3,
            "n_train": 40,
            "n_test": 100,
        },
        "network": {
            "layers": [["same_token", "random"], ["uniform", "random"]],
            "beta": 2.0,
        },
        "sampler": {"name": "laplace-is", "num_chains": 2, "num_samples": 1000},
    }
)

# %%
# The worker processes start by importing this script again (Python's
# ``spawn``): what starts the cluster runs only in the main process, under
# ``if __name__ == "__main__"``, as in any script that starts processes.
if __name__ == "__main__":
    # Two worker processes that share compiled programs through a cache folder (as
    # ``bayes-attn sweep --executor dask`` does), so each program compiles once.
    cache = Path(tempfile.mkdtemp()) / "jax-cache"
    executor = DaskLocal(
        2,
        compilation_cache=cache,
        env={"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"},
    )
    print(executor)  # executor_from_options("dask", workers=2), plus the cache

    out = Path(tempfile.mkdtemp()) / "sweep"
    ds = sweep(
        spec,
        out,
        widths=[10, 100, 1000],
        sample_widths=[100],
        executor=executor,
        progress_bar=False,
    )
    print(ds.accuracy_theory.to_series())
    print(ds.accuracy_sampled.to_series())
    print("verdict:", ds.attrs["verdict"])
    print(sorted(p.name for p in (out / "widths").iterdir()))  # one file per job

# %%
# The result is the same ``sweep.nc`` an in-process sweep writes: here the
# weight of the first path (``U`` of path "1-1", docs/theory.md §4) against
# width, the theory's line and the sampled points with their Monte-Carlo
# standard errors.
if __name__ == "__main__":
    U = ds.U_theory.sel(path="1-1", path_="1-1")
    U_sampled = ds.U_sampled.sel(path="1-1", path_="1-1")
    U_mcse = ds.U_mcse.sel(path="1-1", path_="1-1")
    fig, ax = plt.subplots(figsize=(5, 3.5), layout="constrained")
    ax.plot(ds.width, U, "o-", label="theory")
    ax.errorbar(
        ds.sample_width, U_sampled, yerr=U_mcse, fmt="s", capsize=3, label="sampled"
    )
    ax.set(xscale="log", xlabel="width N", ylabel='U["1-1", "1-1"]')
    ax.set_title("A sweep on two Dask workers")
    ax.legend()
    plt.show()
