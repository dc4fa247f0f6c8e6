"""Where a sweep's jobs run: the public names of :mod:`bayes_attn.sweep._jobs` and
:mod:`bayes_attn.sweep._dask_executors` in one place, and the choice of an executor from options.

Executors (chosen by the caller, or by :func:`executor_from_options`):

- :class:`InProcess` — one job after another in this process (the default;
  imports nothing from Dask);
- :class:`DaskLocal` — a ``distributed.LocalCluster`` of worker processes on
  this machine;
- :class:`DaskScheduler` — the workers of an existing Dask scheduler;
- :class:`DaskJobqueue` — a dask-jobqueue cluster (SLURM, PBS, ...).

:func:`run_jobs` runs ``fn(job)`` for each :class:`Job` on one of them and
returns an :class:`Outcome` per job, in job order (retries and worker deaths:
:mod:`bayes_attn.sweep._dask_executors`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from .._internal.threads import cores
from ._dask_executors import JOBQUEUE_CLASSES, DaskJobqueue, DaskLocal, DaskScheduler
from ._jobs import InProcess, Job, Outcome, check_int, job_seed, run_jobs

DaskExecutor = DaskLocal | DaskScheduler | DaskJobqueue
Executor = InProcess | DaskExecutor


__all__ = [
    "JOBQUEUE_CLASSES",
    "DaskExecutor",
    "DaskJobqueue",
    "DaskLocal",
    "DaskScheduler",
    "Executor",
    "InProcess",
    "Job",
    "Outcome",
    "check_reachable",
    "executor_from_options",
    "job_seed",
    "run_jobs",
]


def check_reachable(executor: Executor | None) -> None:
    """Fail at once (one-line ``ValueError``) when ``executor`` cannot start: Dask not installed, no submit
    command, no scheduler."""
    if isinstance(executor, DaskExecutor):
        missing = [m for m in ("distributed", "cloudpickle") if importlib.util.find_spec(m) is None]
        if missing:
            raise ValueError(f"the Dask executor needs the dask extra (missing: {', '.join(missing)}): "
                             "pip install 'bayes_attn[dask]'")
    check = getattr(executor, "check", None)
    if check is not None:
        check()


def executor_from_options(executor: str = "local", workers: int | None = None, scheduler: str | None = None,
                          cluster: Mapping[str, Any] | None = None) -> Executor:
    """The executor for command-line style options.

    - ``executor="local"``: :class:`InProcess` (``workers``, ``scheduler`` and
      ``cluster`` must not be given);
    - ``executor="dask"`` with ``scheduler``: :class:`DaskScheduler`;
    - ``executor="dask"`` with ``cluster`` (a ``[cluster]`` table: ``class``,
      ``workers``, optional ``retries``, ``env`` and ``resources`` tables, the
      rest cluster options such as ``queue``, ``cores``, ``memory``,
      ``walltime``): :class:`DaskJobqueue`, ``workers`` overriding the table's;
    - ``executor="dask"`` alone: :class:`DaskLocal` with ``workers`` processes
      (default: the CPUs this process may use).
    """
    if executor not in ("local", "dask"):
        raise ValueError(f"executor must be 'local' or 'dask', got {executor!r}")
    if workers is not None:
        check_int(workers, "workers", 1)
    if executor == "local":
        given = [n for n, v in (("workers", workers), ("scheduler", scheduler), ("cluster", cluster)) if v is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} given with executor='local' (which runs in this process); "
                             f"use executor='dask'")
        return InProcess()
    if scheduler is not None and cluster is not None:
        raise ValueError("scheduler and cluster are exclusive: connect to a running scheduler, or start a cluster")
    if scheduler is not None:
        if workers is not None:
            raise ValueError("workers cannot be given with scheduler: the running scheduler has its own workers")
        return DaskScheduler(scheduler)
    if cluster is not None:
        if not isinstance(cluster, Mapping):
            raise ValueError(f"cluster must be a table (mapping), got {cluster!r}")
        options = dict(cluster)
        cls = options.pop("class", None)
        if cls is None:
            raise ValueError(f"cluster table needs 'class', one of {', '.join(JOBQUEUE_CLASSES)}")
        n = options.pop("workers", None)
        n = workers if workers is not None else n
        if n is None:
            raise ValueError("cluster table needs 'workers' (or give workers)")
        extra = {k: options.pop(k) for k in ("retries", "env", "resources") if k in options}
        return DaskJobqueue(cls, options, n, **extra)
    if workers is None:
        workers = cores()
    return DaskLocal(workers)
