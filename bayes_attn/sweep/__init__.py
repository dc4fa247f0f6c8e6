"""Sweeps over width and temperature (paper Fig. 2c/2e): job records, one table, executors.

- :mod:`._table`: :func:`sweep` and :func:`alpha_sweep`: the jobs, their
  per-job files and the assembled ``sweep.nc`` with its figures;
- :mod:`._jobs`: jobs, outcomes, :func:`run_jobs` and the in-process runner;
- :mod:`._dask_executors`: the Dask executors (a local cluster, a running
  scheduler, a dask-jobqueue batch cluster), each with its own ``run``;
- :mod:`._executors`: their public names in one place, and the choice of an
  executor from command-line options.
"""

from ._executors import (
    JOBQUEUE_CLASSES,
    DaskJobqueue,
    DaskLocal,
    DaskScheduler,
    Executor,
    InProcess,
    Job,
    Outcome,
    executor_from_options,
    job_seed,
    run_jobs,
)
from ._table import alpha_sweep, best_temperature_view, sweep, sweep_jobs

__all__ = [
    "JOBQUEUE_CLASSES", "DaskJobqueue", "DaskLocal", "DaskScheduler", "Executor", "InProcess", "Job", "Outcome",
    "alpha_sweep", "best_temperature_view", "executor_from_options", "job_seed", "run_jobs", "sweep", "sweep_jobs",
]
