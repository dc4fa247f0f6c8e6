"""The arguments of the ``bayes-attn`` command (:mod:`bayes_attn.cli` runs them): one builder per subcommand."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from ..samplers._settings import CHAIN_METHODS, SAMPLER_DESCRIPTIONS
from ..spec import CompareSpec
from ..theory._correction import CORRECTIONS
from .precision import DTYPES

DEFAULT_OUT = {"theory": "runs/<spec name>-N<width>-theory", "sample": "runs/<spec name>-N<width>-sample",
               "run": "runs/<spec name>-N<width>", "sweep": "runs/<spec name>-sweep", "prune": "runs/<spec name>"}
"""Each command's default output folder: no command replaces another's files."""


def _out(p: argparse.ArgumentParser, command: str) -> None:
    p.add_argument("--out", type=Path, help=f"output folder (default: {DEFAULT_OUT[command]})")
    p.add_argument("--force", action="store_true",
                   help="write into an existing non-empty folder that this package did not write, or replace "
                   "another command's results there; a file this package did not write is never replaced (the "
                   "command stops before computing and names it)")


def _common(p: argparse.ArgumentParser, command: str, width: bool = True) -> None:
    p.add_argument("spec", nargs="?",
                   help="TOML spec of task, network and sampler (default: embedded Fig. 2c Markov spec)")
    if width:
        p.add_argument("--width", type=int, help="set every hidden width N (default: the spec's)")
    else:
        p.set_defaults(width=None)
    p.add_argument("--temperature", type=float, help="likelihood temperature (default: the spec's)")
    _out(p, command)
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)


def _correction(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--correction", choices=list(CORRECTIONS),
                   help=f"{what} (default: the spec's compare.correction, {CompareSpec().correction})")


NO_PROGRESS_HELP = ("no progress bars or lines and no info messages on stderr (warnings and errors only); the "
                    "result still goes to stdout")


def _sampling(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chains", type=int, help="number of chains (at least 2: the verdict checks R-hat)")
    p.add_argument("--warmup", type=int, help="warm-up draws per chain")
    p.add_argument("--samples", type=int, help="kept draws per chain")
    p.add_argument("--guided-samples", type=int,
                   help="draws per chain of laplace-is and laplace-mh (also within auto; default: --samples)")
    p.add_argument("--seed", type=int, help="random seed of the sampler (0 to 2**32 - 1)")
    p.add_argument("--sampler", choices=list(SAMPLER_DESCRIPTIONS), help="the sampler: "
                   + "; ".join(f"{k}: {v}" for k, v in SAMPLER_DESCRIPTIONS.items()))
    p.add_argument("--dtype", choices=list(DTYPES), help="floating point type for sampling")
    p.add_argument("--chain-method", choices=list(CHAIN_METHODS),
                   help="how chains run: parallel (one CPU device each), vectorized, sequential, or auto")


def _precision(p: argparse.ArgumentParser, comparison: bool = True) -> None:
    """Sampling in blocks until a target or a budget (:mod:`bayes_attn.samplers._blocks`); ``comparison``: the
    command compares with a theory (then ``--target-precision``)."""
    g = p.add_argument_group("sampling to a precision (in blocks of --samples draws per chain, each continuing the "
                             "chains, until the targets hold or the budget is spent; the verdict says which)")
    g.add_argument("--target-ess", type=float, help="bulk ESS every entry of U, U_l, Ua, f_train, f_test must reach "
                   "(beside the ESS the convergence rule asks: 400, and 100 per split chain)")
    if comparison:
        g.add_argument("--target-precision", type=float,
                       help="the comparison's precision, a fraction in (0, 1]: sample until every check's Monte-Carlo "
                       "bound (noise floor + n_sigma MC errors) is at most this fraction of its tolerance")
    g.add_argument("--max-rhat", type=float, help="R-hat every entry must reach, in (1, 1.1] (beside the rule's own "
                   "bound per group of entries)")
    g.add_argument("--max-samples", type=int,
                   help="budget: draws per chain, every block included (default, with no --max-seconds either: 16 "
                   "blocks)")
    g.add_argument("--max-seconds", type=float, help="budget: seconds of sampling, a warm-up run again included (no "
                   "block is started that would pass it at the pace so far); alone, the whole budget")


def _sample(p: argparse.ArgumentParser) -> None:
    """The ``sample`` subcommand's arguments."""
    _common(p, "sample")
    _sampling(p)
    _precision(p, comparison=False)


def _theory(p: argparse.ArgumentParser) -> None:
    """The ``theory`` subcommand's arguments."""
    _common(p, "theory")
    _correction(p, "the theory to solve and print: laplace (the leading order corrected at finite width, "
                "docs/theory.md §8; the leading order is printed and saved beside it) or none (the leading order, §4)")


def _run(p: argparse.ArgumentParser) -> None:
    """The ``run`` subcommand's arguments."""
    _common(p, "run")
    _sampling(p)
    _precision(p)
    _correction(p, "theory whose verdict is the headline: laplace (finite-width correction, docs/theory.md §8) or "
                "none (the leading order, §4); both are reported side by side")


def _sweep(p: argparse.ArgumentParser) -> None:
    """The ``sweep`` subcommand's arguments."""
    _common(p, "sweep", width=False)
    _sampling(p)
    _precision(p)
    p.add_argument("--widths", type=int, nargs="+", help="widths for the theory (default: the spec's)")
    p.add_argument("--sample-widths", type=int, nargs="*",
                   help="widths to sample at (default: the spec's; none: theory only)")
    p.add_argument("--temperatures", type=float, nargs="+",
                   help="a temperature grid instead of one temperature: the best per width is chosen on a "
                   "validation set")
    p.add_argument("--executor", choices=["local", "dask"], default="local",
                   help="run the jobs in this process (local, the default) or on Dask: a local cluster of --workers "
                   "processes, the scheduler at --scheduler, or the spec's [cluster] (dask-jobqueue)")
    p.add_argument("--workers", type=int, help="Dask worker processes (one thread each)")
    p.add_argument("--scheduler", help="address of a running Dask scheduler, e.g. tcp://host:8786")


def _prune(p: argparse.ArgumentParser) -> None:
    """The ``prune`` subcommand's arguments."""
    p.add_argument("spec", nargs="?",
                   help="one-shot TOML spec (default: the embedded CPU spec, models/omniglot_oneshot.toml)")
    p.add_argument("--data-dir", type=Path, help="folder with the Omniglot zip files (default: the spec's data_dir)")
    _out(p, "prune")
    p.add_argument("--retrain", action="store_true",
                   help="train again even if OUT holds a model trained with the same settings (model.npz, or "
                   "model.parked.npz left by a run that failed)")
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
    _precision(p)


SUBCOMMANDS: dict[str, tuple[str, str, Callable[[argparse.ArgumentParser], None]]] = {
    "sample": (
        "sample the posterior (--sampler); write posterior.nc and print ArviZ diagnostics",
        "Sample the posterior of the spec's network (--sampler), write posterior.nc (ArviZ DataTree) "
        "and print diagnostics (R-hat, ESS, MCSE) on the invariant observables U, U_l, Ua, f_train, f_test; "
        "exit status 3 when a diagnostic failed.",
        _sample,
    ),
    "theory": (
        "solve the order-parameter theory; print U, Ua, action and test accuracies; write theory.nc",
        "Minimise the action S over the order parameters (docs/theory.md), print U with path labels, "
        "Ua, the action and the test accuracy of the theory and of the GP limit, and write theory.nc; "
        "exit status 3 when the theory is not a solution (not converged, or not a minimum).",
        _theory,
    ),
    "run": (
        "theory + sampling + comparison at one width, into a run folder with report.md and figures",
        "Solve the theory, sample the posterior, compare them with Monte-Carlo error bars and write "
        "theory.nc, gp.nc, posterior.nc, comparison.nc, report.md and figures into the output folder; "
        "exit status 3 when the verdict is inconclusive.",
        _run,
    ),
    "sweep": (
        "theory over widths and sampling at some of them (paper Fig. 2c/2e); resumable",
        "Theory at every --widths and sampling at --sample-widths, into one sweep.nc with a width "
        "dimension and the figures accuracy_vs_width.png, finite_size.png and (with sampled widths at one "
        "temperature) order_parameter_sd.png. Finished widths are kept in OUT/widths/ and not recomputed when the "
        "sweep is run again with the same settings. Exit status 3 when the sampler's diagnostics failed at some "
        "width (those points are ringed in the figures) or the theory is not a solution at some width.",
        _sweep,
    ),
    "prune": (
        "paper Fig. 3: train the transformer, theory and sampling on its attention, head scores, pruning",
        "One-shot image task (docs/theory.md): train the gradient-descent transformer (or reuse OUT/model.npz "
        "made with the same settings), scan the theory over widths × temperatures (chosen on validation episodes), "
        "sample, score the heads from the theory's U and prune the trained model; writes pruning.json, oneshot.nc, "
        "report.md and figures. Exit status 3 when the verdict is inconclusive at some sampled width: a "
        "diagnostic of the sampler or of the comparison failed (R-hat, bulk ESS, divergences, Pareto k-hat) or the "
        "theory is not a solution there; 0 for agree, disagree, not compared and not sampled.",
        _prune,
    ),
}
"""Each subcommand's one-line help, description and the builder of its arguments, in the order ``--help`` lists
them."""


def build(commands: dict[str, Callable[[argparse.Namespace], int]]) -> argparse.ArgumentParser:
    """The parser of ``bayes-attn``; ``commands`` maps each subcommand to the function that runs it."""
    top = argparse.ArgumentParser(
        prog="bayes-attn",
        description="Bayesian posterior (NUTS, or samplers guided by the finite-width expansion) and "
        "statistical-mechanics theory of attention networks "
        "with fixed attention (Tiberi et al., NeurIPS 2024). The theory: docs/theory.md.",
        epilog="Exit status: 0 success; 1 failed after computing (what was kept is named); 2 bad input (nothing "
        "computed); 3 inconclusive (the sampler's diagnostics "
        "failed at some point; results written); 4 some sweep jobs failed; 130 interrupted.",
    )
    top.add_argument("-v", "--verbose", action="store_true",
                     help="more messages (debug level); --no-progress of a subcommand keeps only warnings and errors")
    top.add_argument("--no-compile-cache", action="store_true",
                     help="do not use the persistent JAX compilation cache in the user's cache folder "
                     "(also: BAYES_ATTN_NO_COMPILE_CACHE=1)")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_, description, add_arguments) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_, description=description)
        add_arguments(p)
        p.set_defaults(func=commands[name])
    return top
