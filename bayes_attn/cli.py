"""The ``bayes-attn`` command: a thin layer over the library.

Every subcommand reads a TOML spec (see ``models/``); without one it uses the
embedded default, the Fig. 2c Markov network at width 10 (``prune``: the
shipped one-shot spec ``models/omniglot_oneshot.toml``). Each calls one
library function, which holds its own output folder (:mod:`bayes_attn._internal.outputs`);
each has its own default folder, so that no command replaces another's files.
Exit status: 0 success, 1 failed after computing (one line; what was kept is
named), 2 bad input (before anything is computed), 3 inconclusive (the
sampler's diagnostics failed; results written), 4 failed sweep jobs, 130
interrupted. The theory: ``docs/theory.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import json
import logging
import math
import os
import re
import sys
from pathlib import Path

from . import verdict
from ._internal import checks as _checks
from ._internal.arguments import DEFAULT_OUT, build
from ._internal.compile_cache import enable_compile_cache
from ._internal.interrupt import exit_on_interrupt
from ._internal.outputs import FailedAfterComputing, FolderBusyError
from ._internal.precision import check_temperature
from ._internal.threads import one_blas_thread
from .samplers._settings import AUTO, AUTO_ORDER, SamplerSettings
from .spec import Spec, load_spec
from .theory._correction import THEORY_NAMES
from .verdict import EXIT_INCONCLUSIVE, Verdict

__all__ = ["EXIT_DIAGNOSTICS", "EXIT_FAILED", "EXIT_FAILED_JOBS", "EXIT_INTERRUPTED", "EXIT_USAGE", "main", "parser"]
"""The command's entry point, its parser and its exit statuses (docs/cli.md); the rest is the command's own."""

log = logging.getLogger(__name__)


def parser() -> argparse.ArgumentParser:
    """The parser of ``bayes-attn`` (:func:`bayes_attn._arguments.build`)."""
    return build({"sample": cmd_sample, "theory": cmd_theory, "run": cmd_run, "sweep": cmd_sweep,
                  "prune": cmd_prune})


def _check_options(args) -> None:
    """Widths and seeds of the command line, checked before the spec is even read (one-line errors)."""
    if args.width is not None:
        if args.width < 1:
            raise ValueError(f"--width must be a positive integer, got {args.width}")
        _checks.width("--width", args.width)
    for name in ("widths", "sample_widths"):
        for w in getattr(args, name, None) or []:
            _checks.width(f"--{name.replace('_', '-')}", w)
    if getattr(args, "seed", None) is not None:
        _checks.seed("--seed", args.seed)


def _setup(args, *, sampler: bool = True) -> tuple[Spec, Path]:
    """The spec resolved once with the command line's options (the one value every step reads and the folder's
    ``spec.toml`` records) and the output folder; ``sampler``: the command samples at the spec's width and
    temperature (its sampler options are applied and checked, :func:`_settings`)."""
    _check_options(args)
    spec = load_spec(args.spec)
    if args.temperature is not None and not args.temperature > 0:
        raise ValueError(f"--temperature must be positive, got {args.temperature}")
    width = getattr(args, "width", None) or spec.network.width
    out = args.out or Path(DEFAULT_OUT[args.command].replace("<spec name>", spec.name).replace("<width>", str(width)))
    spec = dataclasses.replace(spec, temperature=args.temperature or spec.temperature,
                               network=dataclasses.replace(spec.network, width=width))
    if getattr(args, "correction", None) is not None and args.command != "theory":
        spec = dataclasses.replace(spec, compare=dataclasses.replace(spec.compare, correction=args.correction))
    return (dataclasses.replace(spec, sampler=_settings(spec, args)) if sampler else spec), out


def _settings(spec: Spec, args, samples: bool = True) -> SamplerSettings:
    """The spec's sampler settings with the command line's applied; ``samples``: the command samples (then at
    least :data:`MIN_CHAINS` chains)."""
    cfg = spec.sampler.replace(
        num_chains=args.chains, num_warmup=args.warmup, num_samples=args.samples, seed=args.seed,
        name=args.sampler, dtype=args.dtype, chain_method=args.chain_method,
        guided_samples=getattr(args, "guided_samples", None), **_precision(args),
    )
    if samples:
        check_chains(cfg, "--chains (the spec's sampler.num_chains)")
        grid = getattr(args, "temperatures", None)
        name = "--temperatures" if grid else "--temperature" if args.temperature else "the spec's temperature"
        for t in grid or [args.temperature or spec.temperature]:  # the sampler's dtype holds T and 1/T
            check_temperature(t, cfg.dtype, name)
    return cfg


def _precision(args) -> dict:
    """The command line's targets and budget of sampling in blocks (``None`` where not given)."""
    from .samplers._settings import BLOCK_KEYS

    return {k: getattr(args, k, None) for k in BLOCK_KEYS}


MIN_CHAINS = 2
"""Chains a verdict needs: R-hat compares chains (ArviZ gives NaN for one), so one chain could never pass."""


def check_chains(cfg: SamplerSettings, what: str) -> None:
    """One-line ``ValueError`` before computing when ``cfg`` has fewer than :data:`MIN_CHAINS` chains."""
    if cfg.num_chains < MIN_CHAINS:
        raise ValueError(f"{what} must be at least {MIN_CHAINS}, got {cfg.num_chains}: the verdict needs R-hat, "
                         "which compares chains (one chain gives none)")


EXIT_FAILED = 1
"""Exit status for a failure after something was computed (not bad input): one line naming what was kept."""
EXIT_USAGE = 2
"""Exit status for bad input (spec, options, output folder), before anything is computed."""
EXIT_DIAGNOSTICS = EXIT_INCONCLUSIVE
"""Exit status when the verdict is inconclusive (:attr:`bayes_attn.verdict.Verdict.exit_status`): a diagnostic of
the sampler failed, or the theory is not a solution; results are still written."""
EXIT_FAILED_JOBS = 4
"""Exit status of ``sweep`` when some jobs failed (the others' results are written; a rerun retries the failed)."""
EXIT_INTERRUPTED = 130
"""Exit status after Ctrl-C (the output folder keeps the previous run's files)."""


class _Format(logging.Formatter):
    """Messages as they are; warnings and errors prefixed with their level (``WARNING: ...``)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text if record.levelno < logging.WARNING else f"{record.levelname}: {text}"


class _Stderr(logging.StreamHandler):
    """A handler that writes to ``sys.stderr`` as it is when a message comes (a replaced or closed stream of an
    earlier call, e.g. under pytest's capture, is never written to)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def configure_logging(level: int) -> None:
    """The package's messages (logger ``bayes_attn``) to this process's current stderr at ``level``."""
    logger = logging.getLogger("bayes_attn")
    for h in [h for h in logger.handlers if getattr(h, "_bayes_attn", False)]:
        logger.removeHandler(h)
    handler = _Stderr()
    handler.setFormatter(_Format("%(message)s"))
    handler._bayes_attn = True  # type: ignore[attr-defined]  # marks the handler as this package's
    logger.addHandler(handler)
    logger.setLevel(level)


def _status(v: Verdict, where: str = "") -> int:
    """The exit status the verdict ``v`` reads (:attr:`bayes_attn.verdict.Verdict.exit_status`), its warning on
    stderr when inconclusive (``where``: the points, e.g. ``"at some sampled width"``)."""
    if (warning := v.warning(where)) is not None:
        log.warning(warning)
    return v.exit_status


def sampling_plan(cfg: SamplerSettings, P: int) -> str:
    """The sampler and what it will compute for ``P`` training examples, for a command's first line: NUTS's chains
    × (warm-up + draws), a guided sampler's proposals and batches (:func:`bayes_attn.samplers._laplace.plan`),
    ``auto``'s samplers in the order it tries them."""
    from .posterior import GUIDED
    from .samplers import _laplace as laplace

    def plan(name: str) -> str:
        if name in GUIDED:
            return laplace.plan(cfg.replace(name=name), P)
        return f"{cfg.num_chains} chains × ({cfg.num_warmup} warm-up + {cfg.num_samples}) draws"

    if cfg.name == AUTO:
        return "sampler=auto: " + ", else ".join(f"{n} ({plan(n)})" for n in AUTO_ORDER)
    return f"sampler={cfg.name}: {plan(cfg.name)}"


def cmd_sample(args) -> int:
    from .runs._pipeline import sample_run

    spec, out = _setup(args)
    if spec.sampler.target_precision is not None:
        raise ValueError("sampler.target_precision is the comparison's precision: sample has no theory to compare "
                         "with (use run, sweep or prune), ask for --target-ess here")
    net = spec.net()
    print(f"{spec.name}: N={net.widths[0]}, paths {net.path_labels}, {spec.describe_task()}, "
          f"temperature={spec.temperature}, {sampling_plan(spec.sampler, spec.task.n_train)}")
    res = sample_run(spec, out, progress_bar=not args.no_progress, force=args.force)
    print(res.summary)
    print(f"wrote {res.out}/: posterior.nc, summary.txt, spec.toml")
    return _status(verdict.of_sampling({"": res.summary.diagnostics()}))


def cmd_theory(args) -> int:
    import pandas as pd

    from .runs._pipeline import theory_run

    spec, out = _setup(args, sampler=False)
    temperature = spec.temperature
    res = theory_run(spec, out, correction=args.correction, force=args.force)
    t = res.theory
    labels = t.net.path_labels
    table = lambda U: pd.DataFrame(U, index=labels, columns=labels).to_string(float_format=lambda v: f"{v:.5g}")  # noqa: E731
    print(f"{spec.name}: N={t.net.widths[0]}, temperature={temperature}, P={len(t.y_train)}, theory: "
          f"{THEORY_NAMES[t.correction_name]}")
    if t.correction is not None:
        print("U at leading order (the minimum of S, docs/theory.md §4):")
        print(table(t.correction.U_leading))
        print("U corrected at finite width (its posterior mean, §8; the accuracy below is of this theory):")
    else:
        print("U (order parameter over paths):")
    print(table(t.U))
    print(f"Ua = {t.Ua:.6g}   S/N = {t.action:.8g}   max|dS/dU| = {t.max_gradient:.2g}   "
          f"Hessian min eigenvalue = {t.hessian_min_eigenvalue:.3g}   converged = {t.converged} "
          f"({t.iterations} Newton steps)")
    print(f"test accuracy: theory {res.accuracy:.4f}"
          + "".join(f"   GP ({k}) {v:.4f}" for k, v in res.gp_accuracies.items()))
    print(f"wrote {res.path}")
    return _status(verdict.of_theory(t.problems))


def cmd_run(args) -> int:
    from .runs._pipeline import run
    from .runs._report import comparison_report

    spec, out = _setup(args)
    print(f"{spec.name} ({spec.describe_task()}, {spec.net().D} paths): theory + "
          f"{sampling_plan(spec.sampler, spec.task.n_train)} + comparison at N={spec.network.width} → {out}")
    res = run(spec, out, progress_bar=not args.no_progress, force=args.force)
    print(res.posterior.summary())
    print()
    print(comparison_report(res.comparison))
    print(f"headline ({res.comparison.correction}): {res.comparison.theories_summary()}")
    print(f"wrote {out}/: report.md, theory.nc, gp.nc, posterior.nc, comparison.nc, "
          "order_parameter.png, predictor.png, alignment.png")
    return _status(res.comparison.outcome)


def cmd_sweep(args) -> int:
    from ._internal.compile_cache import cache_dir, disabled_by_env
    from .sweep._executors import DaskLocal, InProcess, check_reachable, executor_from_options
    from .sweep._table import sweep, sweep_verdict
    from .sweep._temperature import CHOSEN_SPEC, choice_lines

    spec, out = _setup(args, sampler=False)
    sampled = spec.compare.sample_widths if args.sample_widths is None else args.sample_widths
    spec = dataclasses.replace(spec, sampler=_settings(spec, args, samples=bool(sampled)))
    cluster = spec.cluster if args.executor == "dask" and spec.cluster and not args.scheduler else None
    executor = executor_from_options(args.executor, args.workers, args.scheduler, cluster)
    if isinstance(executor, DaskLocal) and not (args.no_compile_cache or disabled_by_env()):
        # workers share compiled programs across jobs and reruns, in the user's cache folder
        executor = dataclasses.replace(executor, compilation_cache=cache_dir(),
                                       env={"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"})
    check_reachable(executor)  # no submit command or no scheduler: fail now, not after the theory
    ds = sweep(spec, out, widths=args.widths, sample_widths=args.sample_widths, temperatures=args.temperatures,
               executor=None if isinstance(executor, InProcess) else executor,
               progress_bar=not args.no_progress, force=args.force)
    for names in (["accuracy_theory", "accuracy_validation_theory"], ["accuracy_gp"],
                  ["best_temperature_theory", "best_temperature_margin", "accuracy_theory_at_best"],
                  ["accuracy_sampled", "accuracy_sampled_se", "accuracy_sampled_test_se", "verdict",
                   "alternative_verdict"],
                  ["check_value", "check_mcse", "check_gap"],
                  ["alternative_check_value", "alternative_check_mcse", "alternative_check_gap"]):
        if all(n in ds for n in names):
            print(ds[names].to_dataframe().to_string())
    for prefix, corr in (("", ds.attrs.get("correction")), ("alternative_", ds.attrs.get("alternative_correction"))):
        if f"{prefix}slope_U" in ds.attrs:
            slope, se, points = (ds.attrs[f"{prefix}slope_U{k}"] for k in ("", "_se", "_points"))
            estimated = math.isfinite(slope) and math.isfinite(se)
            print(f"{corr or 'none'} theory: U gap ~ N^-slope, "
                  + (f"slope {slope:.2f} ± {se:.2f}" if estimated else "slope not estimated")
                  + f" ({points} widths above the noise floor)")
    for line in choice_lines(ds):
        print(line)
    chosen = f"; {out}/{CHOSEN_SPEC}: the spec at the pooled temperature" if "pooled_temperature" in ds else ""
    print(f"wrote {out}/sweep.nc and figures{chosen} (verdict: {ds.attrs['verdict']})")
    failed = json.loads(ds.attrs["failed_jobs"])
    if failed:
        log.warning(f"{len(failed)} job(s) failed: " + "; ".join(f["job"] for f in failed) + ". sweep.nc holds what "
                    "finished; run the sweep again to retry them.")
        return EXIT_FAILED_JOBS
    v = sweep_verdict(ds)
    return _status(v, "at some points (sampled ones ringed in the figures)")


def cmd_prune(args) -> int:
    from .oneshot._pipeline import run_oneshot
    from .oneshot._spec import load_oneshot_spec

    spec = load_oneshot_spec(args.spec)  # None: the embedded shipped spec, models/omniglot_oneshot.toml
    spec = dataclasses.replace(spec, sampler=spec.sampler.replace(**_precision(args)))
    out = args.out or Path(DEFAULT_OUT["prune"].replace("<spec name>", spec.name))
    if spec.theory.sample_widths:
        check_chains(spec.sampler, "the spec's [sampler] num_chains")
    result = run_oneshot(spec, out, data_dir=args.data_dir, retrain=args.retrain, progress_bar=not args.no_progress,
                         force=args.force)
    rho = result.pruning.spearman  # undefined (None) where the scores or the drops are all equal
    spearman = ("Spearman rho undefined (constant input)" if rho.rho is None else
                f"Spearman rho = {rho.rho:.3g}, p = {rho.p_value:.2g}")
    base = result.spread.base
    print(f"base accuracy {base.accuracy:.3f} ± {base.se:.3f}; head score vs drop: {spearman}")
    for N, c in result.comparisons.items():
        print(f"N = {N}: {c.summary()}")
    print(f"wrote {out}/: pruning.json, oneshot.nc, report.md, figures (verdict: {result.verdict})")
    return _status(result.outcome, "at some sampled width")


def _error(command: str, message: str) -> None:
    print(f"bayes-attn {command}: error: {message}", file=sys.stderr)


MAX_HOST_DEVICES = 64
"""At most this many CPU devices (beyond the cores): XLA sets each up at start (~0.5 MB and some time each), so
``--chains 100000`` must not ask for 100000; more chains than devices run vectorized (``chain_method="auto"``)."""


def host_devices(chains: int | None) -> int:
    """CPU devices for a command sampling ``chains`` chains: one per chain, at least 4 and the cores, at most
    :data:`MAX_HOST_DEVICES` (or the cores, if more)."""
    return max(4, min(chains or 0, MAX_HOST_DEVICES), os.cpu_count() or 1)


def _set_host_device_count(n: int) -> None:
    """``numpyro.set_host_device_count(n)`` (the same ``XLA_FLAGS``) without importing NumPyro for every command."""
    flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", os.getenv("XLA_FLAGS", "")).split()
    os.environ["XLA_FLAGS"] = " ".join([f"--xla_force_host_platform_device_count={n}", *flags])


INTERRUPTED = "interrupted (Ctrl-C); the output folder keeps the previous run's files"


def _interrupt_handling(args) -> contextlib.AbstractContextManager:
    """Ctrl-C during a command: one line and :data:`EXIT_INTERRUPTED` at once, without unwinding
    (:func:`bayes_attn._internal.interrupt.exit_on_interrupt`: no ``KeyboardInterrupt`` inside a JAX callback, no
    exit racing XLA's threads). A Dask sweep keeps ``KeyboardInterrupt``, so that its cluster is shut down."""
    if getattr(args, "executor", None) == "dask":
        return contextlib.nullcontext()
    lead = "" if getattr(args, "no_progress", True) else "\n"  # after a progress bar's unfinished line
    return exit_on_interrupt(f"{lead}bayes-attn {args.command}: error: {INTERRUPTED}", EXIT_INTERRUPTED)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure_logging(logging.DEBUG if args.verbose else logging.WARNING if getattr(args, "no_progress", False)
                      else logging.INFO)
    one_blas_thread()  # this process only; see bayes_attn._internal.threads
    enable_compile_cache(not args.no_compile_cache)  # the user's cache folder; see bayes_attn._internal.compile_cache
    # One CPU device per chain, so chains run in parallel rather than in lockstep
    # (vectorized NUTS waits for the longest trajectory of all chains at every
    # draw); must happen before JAX starts its backend.
    _set_host_device_count(host_devices(getattr(args, "chains", None)))
    try:
        with _interrupt_handling(args):
            return args.func(args)
    except (ValueError, FolderBusyError) as err:
        _error(args.command, str(err))
        return EXIT_USAGE
    except FailedAfterComputing as err:
        _error(args.command, str(err))
        return EXIT_FAILED
    except KeyboardInterrupt:
        _error(args.command, INTERRUPTED)
        return EXIT_INTERRUPTED
    except MemoryError:
        _error(args.command, "out of memory: make the task, the width or the number of chains or draws smaller")
        return EXIT_USAGE
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):  # not bad input: a failure after computing, with what was kept
            text = (f"{err.strerror or err}" if "no space" in str(err.strerror) else
                    f"no space left on the device ({err}): free some disk space or choose another output folder")
            _error(args.command, text if "kept" in text else f"{text} ({KEPT})")
            return EXIT_FAILED
        return _late_failure(args.command, err)
    except Exception as err:  # noqa: BLE001 (any other late failure: one line, exit 1; -v logs the traceback)
        return _late_failure(args.command, err)


KEPT = "the output folder keeps the previous run's files"
"""What a failed run keeps: its results are committed together at its end
(:func:`bayes_attn._internal.outputs.commit`)."""


def _late_failure(command: str, err: BaseException) -> int:
    """A failure that is not bad input, after something may have been computed: one line with the error's type and
    first line and what was kept (:data:`KEPT`), the traceback at ``-v``; :data:`EXIT_FAILED`."""
    log.debug("traceback of the failure", exc_info=err)
    text = _checks.one_line(err)
    memory = "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()
    hint = "out of memory on the device: make the width, the number of chains or of draws smaller; " if memory else ""
    _error(command, f"{hint}{text} ({KEPT}; run with -v for the traceback)")
    return EXIT_FAILED


if __name__ == "__main__":  # the command is ``bayes-attn`` or ``python -m bayes_attn`` (bayes_attn.__main__)
    sys.exit(main())
