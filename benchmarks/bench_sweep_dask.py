"""Wall time of one sweep in this process against a 2-worker Dask ``LocalCluster``, side by side.

The grid: the Fig. 2c network at several widths, theory and ``wishart``
sampling at each (a few chains and draws, so that per-job compilation is a
visible part of the cost, as it is in real sweeps). Three runs on the same
grid, each into a fresh folder: in-process; Dask with 2 workers; Dask with 2
workers sharing a persistent JAX compilation cache (warmed by the previous
Dask run). The sweep.nc values of all three are checked equal.

    .venv/bin/python benchmarks/bench_sweep_dask.py [--quick]

Writes ``benchmarks/results/sweep_dask.json`` (``--quick``: N = 10 and 100, 2 × (50 + 50) draws, a temporary
folder; it still starts two Dask clusters). Needs the ``dask`` extra. ~9 min.
"""

from __future__ import annotations

import argparse

from harness import REPO, Record, parse, parser
from harness import headline as make_headline


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: a tiny grid)."""
    ap = parser("sweep_dask", __doc__, "N = 10 and 100, 2 x (50 + 50) draws (two Dask clusters still start)")
    a = parse(ap, argv)
    a.widths, a.draws = ([10, 100], 50) if a.quick else ([10, 30, 100, 300, 1000, 3000], 300)
    return a


def headline(results: dict) -> dict | None:
    """In-process over Dask wall time, the workers sharing a warm compilation cache."""
    return make_headline("sweep in-process / 2 Dask workers, warm cache",
                         results["ratio_in_process_over_dask_warm_cache"], "x")


if __name__ == "__main__":
    ARGS = parse_args()  # before JAX loads: --help answers at once and writes nothing

import dataclasses  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import xarray as xr  # noqa: E402
from harness import one_blas_thread  # noqa: E402

from bayes_attn import spec as spec_module  # noqa: E402
from bayes_attn.sweep import DaskLocal, sweep  # noqa: E402


def timed_sweep(spec, out: Path, executor, widths) -> tuple[float, xr.Dataset]:
    """Wall seconds of one sweep (theory and sampling at every width) and its table."""
    t0 = time.perf_counter()
    ds = sweep(spec, out, widths=widths, sample_widths=widths, executor=executor, progress_bar=False)
    return time.perf_counter() - t0, ds


def main(a: argparse.Namespace) -> dict:
    """The three sweeps, their tables checked equal; the envelope."""
    one_blas_thread()
    base = spec_module.load_spec(REPO / "models/markov_4paths.toml")
    spec = dataclasses.replace(base, sampler=base.sampler.replace(
        num_chains=2, num_warmup=a.draws, num_samples=a.draws, chain_method="sequential"))
    record = Record(a, jobs=2 * len(a.widths), sampler=spec.sampler.to_dict())
    work = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    cache = work / "jax-cache"
    env = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    runs, load = {}, {}
    for name, executor in (("in_process", None), ("dask_2_workers", DaskLocal(2, compilation_cache=cache, env=env)),
                           ("dask_2_workers_warm_cache", DaskLocal(2, compilation_cache=cache, env=env))):
        load[name] = os.getloadavg()
        seconds, ds = timed_sweep(spec, work / name, executor, a.widths)
        runs[name] = {"seconds": seconds, "sweep": ds}
        print(f"{name}: {seconds:.1f} s (load before {load[name][0]:.1f})", flush=True)
    keep = [v for v in runs["in_process"]["sweep"].data_vars if not v.endswith("seconds")]
    for name in ("dask_2_workers", "dask_2_workers_warm_cache"):
        xr.testing.assert_identical(runs[name]["sweep"][keep].drop_attrs(),
                                    runs["in_process"]["sweep"][keep].drop_attrs())
    in_process = runs["in_process"]["sweep"]
    results = {
        "seconds": {k: v["seconds"] for k, v in runs.items()},
        "ratio_in_process_over_dask": runs["in_process"]["seconds"] / runs["dask_2_workers"]["seconds"],
        "ratio_in_process_over_dask_warm_cache":
            runs["in_process"]["seconds"] / runs["dask_2_workers_warm_cache"]["seconds"],
        "in_process_job_seconds_sum": float(in_process["theory_seconds"].sum() + in_process["sample_seconds"].sum()),
        "equal_sweep_values": True,
        "load_average_before": load,
    }
    print(json.dumps({k: results[k] for k in ("seconds", "ratio_in_process_over_dask",
                                               "ratio_in_process_over_dask_warm_cache")}, indent=1))
    record.write(results, headline=headline(results))
    return results


if __name__ == "__main__":
    main(ARGS)
