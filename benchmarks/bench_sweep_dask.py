"""Wall time of one sweep in this process against a 2-worker Dask ``LocalCluster``, side by side.

The grid: the Fig. 2c network at several widths, theory and ``wishart``
sampling at each (a few chains and draws, so that per-job compilation is a
visible part of the cost, as it is in real sweeps). Three runs on the same
grid, each into a fresh folder: in-process; Dask with 2 workers; Dask with 2
workers sharing a persistent JAX compilation cache (warmed by the previous
Dask run). The sweep.nc values of all three are checked equal.

    .venv/bin/python benchmarks/bench_sweep_dask.py [--quick]

Writes ``benchmarks/results/sweep_dask.json`` (``--quick``: a temporary folder).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import xarray as xr

from bayes_attn import spec as spec_module
from bayes_attn import sweeps
from bayes_attn.sweep.executors import DaskLocal
from bayes_attn.threads import one_blas_thread


def timed_sweep(spec, out: Path, executor, widths) -> tuple[float, xr.Dataset]:
    t0 = time.perf_counter()
    ds = sweeps.sweep(spec, out, widths=widths, sample_widths=widths, executor=executor, progress_bar=False)
    return time.perf_counter() - t0, ds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny grid, output to a temporary folder")
    a = p.parse_args()
    one_blas_thread()
    base = spec_module.load_spec("models/markov_4paths.toml")
    widths = [10, 100] if a.quick else [10, 30, 100, 300, 1000, 3000]
    draws = 50 if a.quick else 300
    spec = dataclasses.replace(base, sampler=base.sampler.replace(
        num_chains=2, num_warmup=draws, num_samples=draws, chain_method="sequential"))
    work = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    cache = work / "jax-cache"
    env = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    runs = {}
    load = {}
    for name, executor in (("in_process", None), ("dask_2_workers", DaskLocal(2, compilation_cache=cache, env=env)),
                           ("dask_2_workers_warm_cache", DaskLocal(2, compilation_cache=cache, env=env))):
        load[name] = os.getloadavg()
        seconds, ds = timed_sweep(spec, work / name, executor, widths)
        runs[name] = {"seconds": seconds, "sweep": ds}
        print(f"{name}: {seconds:.1f} s (load before {load[name][0]:.1f})", flush=True)
    keep = [v for v in runs["in_process"]["sweep"].data_vars if not v.endswith("seconds")]
    for name in ("dask_2_workers", "dask_2_workers_warm_cache"):
        xr.testing.assert_identical(runs[name]["sweep"][keep].drop_attrs(), runs["in_process"]["sweep"][keep].drop_attrs())
    job_seconds = float(runs["in_process"]["sweep"]["theory_seconds"].sum() + runs["in_process"]["sweep"]["sample_seconds"].sum())
    result = {
        "grid": {"widths": widths, "jobs": 2 * len(widths), "sampler": spec.sampler.to_dict()},
        "seconds": {k: v["seconds"] for k, v in runs.items()},
        "ratio_in_process_over_dask": runs["in_process"]["seconds"] / runs["dask_2_workers"]["seconds"],
        "ratio_in_process_over_dask_warm_cache": runs["in_process"]["seconds"] / runs["dask_2_workers_warm_cache"]["seconds"],
        "in_process_job_seconds_sum": job_seconds,
        "equal_sweep_values": True,
        "load_average_before": load,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    print(json.dumps({k: result[k] for k in ("seconds", "ratio_in_process_over_dask",
                                              "ratio_in_process_over_dask_warm_cache")}, indent=1))
    out = Path(tempfile.mkdtemp()) if a.quick else Path("benchmarks/results")
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep_dask.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'sweep_dask.json'}")


if __name__ == "__main__":
    main()
