"""Run jobs on Dask: a local cluster, a running scheduler, or a dask-jobqueue cluster (SLURM, PBS, ...).

- :class:`DaskLocal` — a ``distributed.LocalCluster`` of worker processes on
  this machine;
- :class:`DaskScheduler` — the workers of an existing Dask scheduler;
- :class:`DaskJobqueue` — a dask-jobqueue cluster (SLURM, PBS, ...).

Each has ``run(fn, jobs, progress)`` for :func:`bayes_attn.sweep._jobs.run_jobs`.
On Dask a job that raises is rerun up to ``retries`` times; a job whose worker
process dies (killed, out of memory, ``os._exit``) is rerun on another worker,
and reported as failed (``KilledWorker``) once ``retries + 1`` workers died
running it. At most as many jobs as the workers have free threads (and free
resources) are handed to the scheduler at a time, so that a dying worker can
only be blamed for the job it was running. Each call starts and stops its own
cluster: give :func:`~bayes_attn.sweep._jobs.run_jobs` all the jobs of a sweep at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import shlex
import shutil
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .._internal.compile_cache import own_folder
from ._jobs import Job, Outcome, Progress, check_int, describe_exception, say

__all__ = ["CONNECT_TIMEOUT", "DaskJobqueue", "DaskLocal", "DaskScheduler", "JOBQUEUE_CLASSES", "SHELL_OPTIONS"]

JOBQUEUE_CLASSES = ("SLURMCluster", "PBSCluster", "SGECluster", "LSFCluster", "HTCondorCluster", "OARCluster",
                    "MoabCluster")
_BLAS_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SHELL_OPTIONS = frozenset({"job_script_prologue", "env_extra", "python", "shebang", "worker_command", "job_cls",
                           "header_skip", "job_directives_skip"})
"""dask-jobqueue options whose values are shell code or change the script's commands: refused from a spec
(set variables with the ``env`` table instead)."""
CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a Dask scheduler to accept a connection before giving up."""




class _DaskRun:
    """``run`` of every Dask executor (see :func:`_run_dask`)."""

    def run(self, fn: Callable[[Job], Any], jobs: list[Job], line: Progress) -> list[Outcome]:
        """Outcomes of ``fn`` on ``jobs`` on this executor's workers, in order; ``line``: the progress line."""
        return _run_dask(fn, jobs, self, line)


def _check_retries(retries: Any) -> None:
    check_int(retries, "retries", 0)


@dataclasses.dataclass(frozen=True)
class DaskLocal(_DaskRun):
    """A ``distributed.LocalCluster`` of ``workers`` processes with ``threads_per_worker`` threads each.

    Each worker process starts with one BLAS/OpenMP thread
    (``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``), with
    ``JAX_ENABLE_X64=1`` if ``x64``, and ``JAX_COMPILATION_CACHE_DIR`` if
    ``compilation_cache`` is given (a folder the workers share, so that each
    program compiles once); ``env`` adds or overrides variables. See
    :meth:`worker_env`. XLA's own threads are left alone: XLA's single-thread
    flag (``--xla_cpu_multi_thread_eigen=false``) changes floating-point results,
    and a job must give the same numbers on a worker as in this process.
    A worker that dies is
    restarted; ``retries`` bounds both reruns of a job that raised and the
    worker deaths a job may cause (``distributed.scheduler.allowed-failures``).
    Keep ``threads_per_worker`` at 1 for JAX jobs (JAX's 64-bit switch is
    process-wide).
    """

    workers: int
    threads_per_worker: int = 1
    retries: int = 2
    env: Mapping[str, str] | None = None
    x64: bool = False
    compilation_cache: str | os.PathLike | None = None

    def __post_init__(self) -> None:
        check_int(self.workers, "workers", 1)
        check_int(self.threads_per_worker, "threads_per_worker", 1)
        _check_retries(self.retries)
        if self.env is not None and not (isinstance(self.env, Mapping) and all(isinstance(k, str) for k in self.env)):
            raise ValueError(f"env must be a mapping of variable names to values, got {self.env!r}")

    def worker_env(self) -> dict[str, str]:
        """The environment variables each worker process gets (on top of this process's)."""
        env = dict(_BLAS_ONE_THREAD)
        if self.x64:
            env["JAX_ENABLE_X64"] = "1"
        if self.compilation_cache is not None:
            env["JAX_COMPILATION_CACHE_DIR"] = os.fspath(os.path.abspath(os.path.expanduser(self.compilation_cache)))
        env.update({k: str(v) for k, v in (self.env or {}).items()})
        return env

    @contextlib.contextmanager
    def client(self) -> Iterator[Any]:
        """Start the cluster; yield a connected ``distributed.Client``; close both afterwards.

        The worker variables are set in this process's environment while the
        cluster runs, so that worker processes (also those restarted after a
        crash) start with them: NumPy's BLAS, and JAX when the main module
        imports it, load before Dask applies a worker's own ``env``. Dask itself
        sets its ``distributed.nanny.pre-spawn-environ`` here the same way.
        This process's environment is restored afterwards.
        """
        import dask
        from distributed import Client, LocalCluster

        env = self.worker_env()
        if self.compilation_cache is not None:
            own_folder(env["JAX_COMPILATION_CACHE_DIR"])
        dask_pre = dict(dask.config.get("distributed.nanny.pre-spawn-environ") or {})
        with contextlib.ExitStack() as stack:
            stack.enter_context(_restored_environ({*dask_pre, *env}))
            os.environ.update(env)  # must win over values in this process's environment
            with dask.config.set({"distributed.scheduler.allowed-failures": self.retries,
                                  "distributed.nanny.pre-spawn-environ": {**dask_pre, **env}}):
                cluster = stack.enter_context(LocalCluster(
                    n_workers=self.workers, threads_per_worker=self.threads_per_worker, processes=True,
                    dashboard_address=":0", env=env))
            yield stack.enter_context(Client(cluster))


@dataclasses.dataclass(frozen=True)
class DaskScheduler(_DaskRun):
    """The workers of a running Dask scheduler at ``address`` (e.g. ``"tcp://10.0.0.1:8786"``).

    ``retries`` bounds reruns of a job that raised; how many worker deaths a
    job may cause is that scheduler's ``distributed.scheduler.allowed-failures``
    (set where it was started). The workers need this package and the job's
    dependencies installed, and their environment set where they were started.
    """

    address: str
    retries: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.address, str) or not self.address.strip():
            raise ValueError(f"address must be a scheduler address such as 'tcp://host:8786', got {self.address!r}")
        _check_retries(self.retries)

    def check(self, timeout: float = CONNECT_TIMEOUT) -> None:
        """A one-line ``ValueError`` when the scheduler does not accept a connection within ``timeout`` seconds."""
        address = self.address.strip()
        scheme = address.split("://", 1)[0] if "://" in address else "tcp"
        if scheme not in ("tcp", "tls"):
            return  # other transports (inproc, ucx, ws) are left to Dask
        m = re.fullmatch(r"(?:(?:tcp|tls)://)?(\[[^\]]+\]|[^:/\s\[\]]+)(?::(\d+))?/?", address)
        if m is None:
            raise ValueError(f"scheduler must be an address such as 'tcp://host:8786', got {self.address!r}")
        host, port = m.group(1).strip("[]"), int(m.group(2) or 8786)
        try:
            with socket.create_connection((host, port), timeout=timeout):
                pass
        except OSError as err:
            raise ValueError(f"scheduler {self.address!r} cannot be reached ({err.strerror or err}, after at most "
                             f"{timeout:g} s): start it (dask scheduler) or check the address and the "
                             "network") from None

    @contextlib.contextmanager
    def client(self) -> Iterator[Any]:
        """Yield a ``distributed.Client`` connected to the scheduler; close it afterwards."""
        from distributed import Client

        self.check()
        with Client(self.address, timeout=f"{CONNECT_TIMEOUT * 2:g}s") as client:
            yield client


@dataclasses.dataclass(frozen=True)
class DaskJobqueue(_DaskRun):
    """A dask-jobqueue cluster: ``getattr(dask_jobqueue, cls)(**options)`` scaled to ``workers`` Dask workers.

    ``cls`` is one of :data:`JOBQUEUE_CLASSES`; ``options`` are its keyword
    arguments (``queue``, ``cores``, ``memory``, ``walltime``,
    ``job_extra_directives``, ...); unknown ones are refused here, before
    anything starts. A worker runs as many jobs at once as it has threads
    (``cores / processes``): for JAX jobs that each use several cores, ask
    the batch system for them (SLURM: ``job_cpu = 4``) and set ``cores = 1``.

    ``env`` is exported in each batch job's script (``job_script_prologue``)
    before the worker starts. ``resources`` is what each job needs, e.g.
    ``{"GPU": 1}``: each worker is started with ``--resources GPU=1`` (unless
    ``worker_extra_args`` already has ``--resources``) and jobs are submitted
    with ``resources={"GPU": 1}``, so that one job at a time runs per GPU;
    request the GPU itself from the batch system (SLURM:
    ``job_extra_directives = ["--gres=gpu:1"]``).
    """

    cls: str
    options: Mapping[str, Any]
    workers: int
    retries: int = 2
    env: Mapping[str, str] | None = None
    resources: Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        if self.cls not in JOBQUEUE_CLASSES:
            raise ValueError(f"cls (cluster class) must be one of {', '.join(JOBQUEUE_CLASSES)}; got {self.cls!r}")
        check_int(self.workers, "workers", 1)
        _check_retries(self.retries)
        if not isinstance(self.options, Mapping):
            raise ValueError(f"options must be a mapping of {self.cls} keyword arguments, got {self.options!r}")
        if self.resources is not None:
            _check_resources(self.resources)
        if self.env is not None and not (isinstance(self.env, Mapping) and all(isinstance(k, str) for k in self.env)):
            raise ValueError(f"env must be a mapping of variable names to values, got {self.env!r}")
        if self.env is not None:
            bad_env = [k for k in self.env if not _ENV_NAME.fullmatch(k)]
            if bad_env:
                raise ValueError(f"cluster env names must be variable names (letters, digits, '_'), got {bad_env}")
        valid = _jobqueue_options(self.cls) - SHELL_OPTIONS
        shell = sorted(k for k in self.options if k in SHELL_OPTIONS)
        if shell:
            raise ValueError(f"cluster option(s) {', '.join(map(repr, shell))} put shell code into the batch script "
                             "and are not taken from a spec; set variables with the cluster's env table")
        bad = sorted(k for k in self.options if k not in valid)
        if bad:
            raise ValueError(f"unknown {self.cls} option(s) {', '.join(map(repr, bad))}; valid options: "
                             f"{', '.join(sorted(valid))}")
        for k, v in self.options.items():
            for item in v if isinstance(v, list | tuple) else [v]:
                if isinstance(item, str) and any(ord(c) < 32 or ord(c) == 127 for c in item):
                    raise ValueError(f"cluster option {k!r} holds a line break or control character: {item!r}")
                if not isinstance(item, str | int | float | bool) and item is not None:
                    raise ValueError(f"cluster option {k!r} must be a string, number or list of them, got {item!r}")

    def check(self) -> None:
        """A one-line ``ValueError`` when the batch system's submit command (e.g. ``sbatch``) is not on ``PATH``."""
        import dask_jobqueue

        command = getattr(getattr(dask_jobqueue, self.cls).job_cls, "submit_command", None)
        if command and shutil.which(command) is None:
            raise ValueError(f"cluster class {self.cls} submits jobs with {command!r}, which is not on PATH here: "
                             f"run the sweep on the cluster's login node, or use --executor dask without [cluster]")

    def cluster_options(self) -> dict[str, Any]:
        """The keyword arguments the cluster class is called with (``options`` plus ``env`` and ``resources``)."""
        options = {k: _quoted(v) for k, v in self.options.items()}
        if self.env:
            prologue = list(options.get("job_script_prologue") or [])
            prologue += [f"export {k}={shlex.quote(str(v))}" for k, v in self.env.items()]
            options["job_script_prologue"] = prologue
        if self.resources:
            args = list(options.get("worker_extra_args") or [])
            if "--resources" not in args and not any(str(a).startswith("--resources=") for a in args):
                args += ["--resources", ",".join(f"{k}={v:g}" for k, v in self.resources.items())]
            options["worker_extra_args"] = args
        return options

    def make_cluster(self) -> Any:
        """The cluster, not yet scaled (``.job_script()`` shows what it would submit); close it after use."""
        import dask
        import dask_jobqueue

        with dask.config.set({"distributed.scheduler.allowed-failures": self.retries}):
            return getattr(dask_jobqueue, self.cls)(**self.cluster_options())

    @contextlib.contextmanager
    def client(self) -> Iterator[Any]:
        """Start the cluster and ask for ``workers`` workers; yield a ``distributed.Client``; close both afterwards."""
        from distributed import Client

        self.check()
        with self.make_cluster() as cluster:
            cluster.scale(n=self.workers)
            say(f"{self.cls}: asked for {self.workers} worker(s); job script:\n{cluster.job_script()}")
            with Client(cluster) as client:
                yield client


def _quoted(value: Any) -> Any:
    """Strings (also in lists) quoted for the shell (``shlex.quote``); plain words are left as they are."""
    if isinstance(value, str):
        return shlex.quote(value)
    if isinstance(value, list | tuple):
        return [_quoted(v) for v in value]
    return value


def _check_resources(resources: Any) -> None:
    if not isinstance(resources, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool) and v > 0
            for k, v in resources.items()):
        raise ValueError(f"resources must map resource names to positive amounts, e.g. {{'GPU': 1}}; got {resources!r}")


def _jobqueue_options(cls: str) -> set[str]:
    """Keyword arguments a dask-jobqueue cluster class accepts (its own and its job class's)."""
    import inspect

    try:
        import dask_jobqueue
    except ImportError as exc:
        raise ValueError(f"cluster class {cls!r} needs dask-jobqueue (pip install 'bayes_attn[dask]')") from exc
    klass = getattr(dask_jobqueue, cls)
    names: set[str] = set()
    for c in (klass, *klass.job_cls.__mro__):
        if "__init__" in vars(c):
            names |= {p.name for p in inspect.signature(c.__init__).parameters.values()
                      if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return names - {"self", "scheduler", "name", "n_workers", "job_cls", "loop", "asynchronous"}


def _attempt(fn: bytes, job: Job) -> tuple[Any, float, str | None]:
    """One attempt at a job, on a worker: ``(value, seconds, worker address)``.

    ``fn`` comes pickled (cloudpickle), so that a worker unable to import it
    fails this job with the ``ImportError`` rather than its connection.
    """
    import pickle

    start = time.perf_counter()
    try:
        value = pickle.loads(fn)(job)
    except Exception as exc:
        with contextlib.suppress(Exception):
            exc.bayes_attn_attempt = (time.perf_counter() - start, _worker_address())  # type: ignore[attr-defined]
        raise
    return value, time.perf_counter() - start, _worker_address()


def _check_workers_import(client: Any, module: str) -> None:
    """Raise a clear error if the workers cannot import ``module`` (a task referring to a module a worker
    cannot import breaks that worker's connection, and the job would wait for ever)."""
    try:
        client.run(exec, f"import {module}")
    except ImportError as exc:
        raise ImportError(f"the Dask workers cannot import {module} ({exc}): install this package where they run"
                          ) from exc


def _worker_address() -> str | None:
    try:
        from distributed import get_worker

        return get_worker().address
    except Exception:
        return None


def _task_attempts(dask_scheduler: Any, keys: list[str], retries: int) -> dict[str, tuple[int, int]]:
    """On the scheduler: per task, (worker deaths while it was assigned, reruns after it raised)."""
    out = {}
    for key in keys:
        ts = dask_scheduler.tasks.get(key)
        if ts is not None:
            out[key] = (int(ts.suspicious), retries - int(ts.retries))
    return out


def _capacity(client: Any, resources: Mapping[str, float] | None) -> tuple[int, int]:
    """(jobs the workers can run at once, number of workers)."""
    workers = client.scheduler_info()["workers"].values()
    total = 0
    for w in workers:
        slots = int(w.get("nthreads", 1))
        for name, need in (resources or {}).items():
            slots = min(slots, math.floor(float(w.get("resources", {}).get(name, 0)) / need))
        total += slots
    return total, len(workers)


def _run_dask(fn: Callable[[Job], Any], jobs: list[Job], executor: Any, line: Progress) -> list[Outcome]:
    import cloudpickle
    from distributed import wait

    payload = cloudpickle.dumps(fn)
    resources = dict(executor.resources) if getattr(executor, "resources", None) else None
    retries = executor.retries
    with executor.client() as client:
        say(f"Dask dashboard: {client.dashboard_link or 'not available'}")
        checked = False
        token = uuid.uuid4().hex[:8]
        outcomes: list[Outcome | None] = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        running: dict[Any, int] = {}
        submitted: dict[int, float] = {}
        warned = False
        while pending or running:
            if pending:
                capacity, n_workers = _capacity(client, resources)
                if n_workers and not checked:
                    _check_workers_import(client, __name__)
                    checked = True
                if n_workers and not capacity and not running and not warned:
                    say(f"no worker offers the resources {resources}; waiting")
                    warned = True
                # no more jobs than the workers can run at once: the scheduler would queue the others on
                # busy workers, and a worker that dies counts against every job it holds (allowed-failures)
                while pending and len(running) < capacity:
                    i = pending.popleft()
                    submitted[i] = time.monotonic()
                    fut = client.submit(_attempt, payload, jobs[i], key=f"{jobs[i].name}-{token}", retries=retries,
                                        resources=resources, pure=False)
                    running[fut] = i
            line.update(running=len(running))
            if running:
                with contextlib.suppress(TimeoutError):
                    wait(list(running), timeout=1.0, return_when="FIRST_COMPLETED")
            else:
                time.sleep(1.0)
            done = [f for f in running if f.done()]
            if not done:
                continue
            try:
                tries = client.run_on_scheduler(_task_attempts, keys=[f.key for f in done], retries=retries)
            except Exception:
                tries = {}
            for fut in done:
                i = running.pop(fut)
                out = _outcome(fut, jobs[i], tries.get(fut.key), time.monotonic() - submitted[i])
                fut.release()
                outcomes[i] = out
                line.finished(out)
        return outcomes  # type: ignore[return-value]


def _outcome(fut: Any, job: Job, tries: tuple[int, int] | None, since_submit: float) -> Outcome:
    """The outcome of a finished future."""
    from distributed import KilledWorker

    earlier = None if tries is None else sum(tries)  # deaths + reruns
    if fut.status == "finished":
        value, seconds, worker = fut.result()
        attempts = None if earlier is None else earlier + 1
        return Outcome(job, True, value, seconds=seconds, worker=worker, attempts=attempts)
    if fut.status != "error":  # cancelled or lost: the client lost the scheduler, or the job was cancelled
        return Outcome(job, False, error=f"CancelledError: the job's future is {fut.status!r}",
                       seconds=since_submit, attempts=None)
    exc = fut.exception()
    if isinstance(exc, KilledWorker):
        last = getattr(exc, "last_worker", None)
        attempts = earlier
        return Outcome(job, False, error=describe_exception(exc, None), seconds=since_submit,
                       worker=getattr(last, "address", None), attempts=attempts)
    seconds, worker = getattr(exc, "bayes_attn_attempt", (since_submit, None))
    attempts = None if earlier is None else earlier + 1
    return Outcome(job, False, error=describe_exception(exc, fut.traceback()), seconds=seconds, worker=worker,
                   attempts=attempts)



@contextlib.contextmanager
def _restored_environ(keys: Iterable[str]) -> Iterator[None]:
    """Restore these environment variables (set or unset) on exit."""
    before = {k: os.environ.get(k) for k in keys}
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


