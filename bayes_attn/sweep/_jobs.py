"""Independent jobs and how they end: :class:`Job`, :class:`Outcome`, :func:`run_jobs` and the in-process runner.

A :class:`Job` is a name, JSON settings and a seed; ``fn(job)`` is a
module-level (picklable) function that does the work, typically writing one
result file and returning its path. :func:`run_jobs` runs the jobs on an
executor (anything with ``run(fn, jobs, progress)``: :class:`InProcess`
here, the Dask executors of :mod:`bayes_attn.sweep._dask_executors`) and
returns one :class:`Outcome` per job, in job order: a job that raises (or
whose worker keeps dying) is reported as failed and the others finish.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TextIO

from .._internal.io import digest

__all__ = ["InProcess", "Job", "Outcome", "Progress", "check_int", "describe_exception", "job_seed", "run_jobs", "say"]

log = logging.getLogger(__name__)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+-]*")
_TRACEBACK_FRAMES = 5


def _canonical(obj: Any, what: str) -> str:
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be JSON-serialisable (str, int, float, bool, None, lists, dicts): {exc}"
                         ) from None


def check_int(value: Any, what: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{what} must be at least {minimum}, got {value}")
    return value


def job_seed(base_seed: int, **params: Any) -> int:
    """A seed in ``[0, 2**31)`` from ``base_seed`` and a job's ``params``.

    SHA-256 of the canonical JSON (sorted keys) of both: the same on every
    machine, process and Python version, whatever order jobs run in. Values
    count as JSON sees them: ``100`` and ``100.0`` give different seeds.
    """
    check_int(base_seed, "base_seed")
    text = _canonical({"base_seed": base_seed, "params": params}, "job_seed params")
    return int(digest(text), 16) & 0x7FFF_FFFF  # the first 8 bytes of the SHA-256, big-endian


@dataclasses.dataclass(frozen=True)
class Job:
    """One unit of work: a unique, filesystem-safe ``name`` (e.g. ``"sample-N100-T0.01"``),
    JSON-serialisable ``params`` and its ``seed``."""

    name: str
    params: Mapping[str, Any]
    seed: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name) or len(self.name) > 200:
            raise ValueError(f"Job name must be 1-200 characters from letters, digits and ._=+- (not starting with "
                             f"one of ._=+-), got {self.name!r}")
        if not isinstance(self.params, Mapping) or not all(isinstance(k, str) for k in self.params):
            raise ValueError(f"Job params must be a mapping with string keys, got {self.params!r}")
        _canonical(dict(self.params), f"params of job {self.name!r}")
        object.__setattr__(self, "params", dict(self.params))  # a copy: the caller's dict may change later
        check_int(self.seed, f"seed of job {self.name!r}", 0)

    def __hash__(self) -> int:
        return hash((self.name, self.seed, _canonical(self.params, "params")))

    @classmethod
    def seeded(cls, name: str, params: Mapping[str, Any], base_seed: int) -> Job:
        """A job whose seed is :func:`job_seed` ``(base_seed, **params)``."""
        return cls(name, params, job_seed(base_seed, **params))


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a job ended.

    ``value``: what ``fn(job)`` returned (``None`` if it failed); ``error``:
    ``"Type: message"`` and the innermost frames of the traceback;
    ``seconds``: run time of the last attempt (for a job whose worker died,
    from submission until it was given up); ``worker``: the Dask worker's
    address (``None`` in-process); ``attempts``: runs started (worker deaths
    and retries included; ``None`` where the scheduler could not be asked).
    """

    job: Job
    ok: bool
    value: Any = None
    error: str | None = None
    seconds: float = 0.0
    worker: str | None = None
    attempts: int | None = 1


@dataclasses.dataclass(frozen=True)
class InProcess:
    """Run the jobs one by one in this process (no retries)."""

    def run(self, fn: Callable[[Job], Any], jobs: list[Job], line: Progress) -> list[Outcome]:
        """Outcomes of ``fn`` on ``jobs``, in order; ``line``: the progress line."""
        outcomes = []
        for job in jobs:
            line.update(running=1)
            start = time.perf_counter()
            try:
                value = fn(job)
            except Exception as exc:
                tb = exc.__traceback__.tb_next if exc.__traceback__ else None  # without this function's frame
                out = Outcome(job, False, error=describe_exception(exc, tb), seconds=time.perf_counter() - start)
            else:
                out = Outcome(job, True, value, seconds=time.perf_counter() - start)
            line.finished(out)
            outcomes.append(out)
        return outcomes


def run_jobs(fn: Callable[[Job], Any], jobs: Iterable[Job], executor: Any = None, *,
             progress: bool = True) -> list[Outcome]:
    """Run ``fn(job)`` for each job on ``executor`` (default :class:`InProcess`); outcomes in job order.

    ``fn`` must be a module-level function (it is pickled to the workers).
    A progress line (finished/failed/total, elapsed) and each failure go to
    stderr unless ``progress`` is false; Dask runs also print the dashboard
    address.
    """
    if not callable(fn):
        raise ValueError(f"fn must be a callable taking a Job, got {fn!r}")
    jobs = list(jobs)
    bad = [j for j in jobs if not isinstance(j, Job)]
    if bad:
        raise ValueError(f"jobs must be Job instances, got {bad[0]!r}")
    names = [j.name for j in jobs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"jobs must have unique names; repeated: {', '.join(dup)}")
    executor = InProcess() if executor is None else executor
    if not callable(getattr(executor, "run", None)):
        raise ValueError(f"executor must be InProcess, DaskLocal, DaskScheduler or DaskJobqueue, got {executor!r}")
    if not jobs:
        return []
    line = Progress(len(jobs), sys.stderr if progress else None)
    try:
        return executor.run(fn, jobs, line)
    finally:
        line.close()


def describe_exception(exc: BaseException, tb: Any) -> str:
    """``"Type: message"`` and the innermost frames of the traceback."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    frames = [f for f in (traceback.extract_tb(tb) if tb is not None else [])
              if not (f.name == "_attempt" and os.path.basename(f.filename) == "dask_executors.py")]
    frames = frames[-_TRACEBACK_FRAMES:]
    if frames:
        text += "\nTraceback (innermost calls last):\n" + "".join(traceback.format_list(frames)).rstrip()
    return text



def say(text: str) -> None:
    log.info(text)


class Progress:
    """The progress line on ``stream``: redrawn in place on a terminal, one line per finished job elsewhere."""

    def __init__(self, total: int, stream: TextIO | None) -> None:
        self.total, self.stream = total, stream
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self.done = self.failed = self.running = 0
        self.start = time.monotonic()
        self.drawn = False

    def text(self) -> str:
        elapsed = int(time.monotonic() - self.start)
        return (f"jobs: {self.done}/{self.total} finished, {self.failed} failed, {self.running} running, "
                f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d} elapsed")

    def update(self, running: int) -> None:
        self.running = running
        if self.tty and self.stream is not None:  # (a terminal is a stream)
            self.stream.write("\r" + self.text() + "\033[K")
            self.stream.flush()
            self.drawn = True

    def finished(self, out: Outcome) -> None:
        self.done += 1
        self.failed += not out.ok
        self.running = max(self.running - 1, 0)
        if self.stream is None:
            return
        if self.tty and self.drawn:
            self.stream.write("\r\033[K")
        if not out.ok:
            first = (out.error or "").splitlines()[0] if out.error else ""
            self.stream.write(f"job {out.job.name} failed: {first}\n")
        if self.tty:
            self.stream.write(self.text() + "\033[K")
        else:
            self.stream.write(self.text() + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self.stream is not None and (self.drawn or self.done):
            self.stream.write("\n")
            self.stream.flush()
