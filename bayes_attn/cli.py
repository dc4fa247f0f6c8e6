"""The ``bayes-attn`` command: a thin layer over the library.

Every subcommand reads a TOML spec (see ``models/``); without one it uses the
embedded default, the Fig. 2c Markov network at width 10.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .spec import Spec, load_spec


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", nargs="?", help="TOML spec of task, network and sampler (default: embedded Fig. 2c Markov spec)")
    p.add_argument("--width", type=int, help="set every hidden width N (default: the spec's)")
    p.add_argument("--temperature", type=float, help="likelihood temperature (default: the spec's)")
    p.add_argument("--out", type=Path, help="output folder (default: runs/<spec name>)")


def _sampling(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chains", type=int, help="number of chains")
    p.add_argument("--warmup", type=int, help="warm-up draws per chain")
    p.add_argument("--samples", type=int, help="kept draws per chain")
    p.add_argument("--seed", type=int, help="random seed of the sampler")
    p.add_argument("--method", choices=["full", "collapsed"], help="sampler: all weights, or V0 integrated out")
    p.add_argument("--dtype", choices=["float64", "float32"], help="floating point type for sampling")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="bayes-attn",
        description="Bayesian posterior (NUTS) and statistical-mechanics theory of attention networks "
        "with fixed attention (Tiberi et al., NeurIPS 2024).",
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser(
        "sample",
        help="sample the posterior with NUTS; write posterior.nc and print ArviZ diagnostics",
        description="Sample the posterior of the spec's network with NUTS, write posterior.nc (ArviZ DataTree) "
        "and print diagnostics (R-hat, ESS, MCSE) on the invariant observables U, f_train, f_test.",
    )
    _common(p)
    _sampling(p)
    p.set_defaults(func=cmd_sample)
    return top


def _setup(args) -> tuple[Spec, Path, float]:
    spec = load_spec(args.spec)
    if args.width is not None and args.width < 1:
        raise ValueError(f"--width must be a positive integer, got {args.width}")
    if args.temperature is not None and not args.temperature > 0:
        raise ValueError(f"--temperature must be positive, got {args.temperature}")
    width = args.width or spec.network.width
    out = args.out or Path("runs") / f"{spec.name}-N{width}"
    return spec, out, args.temperature or spec.temperature


def _sampler_kwargs(spec: Spec, args) -> dict:
    return spec.sampler_kwargs(
        num_chains=args.chains, num_warmup=args.warmup, num_samples=args.samples, seed=args.seed,
        method=args.method, dtype=args.dtype,
    )


def cmd_sample(args) -> int:
    from .posterior import sample_posterior

    spec, out, temperature = _setup(args)
    kw = _sampler_kwargs(spec, args)
    net = spec.net(args.width)
    x, y, xt, _ = spec.data()
    print(f"{spec.name}: N={net.widths[0]}, paths {net.path_labels}, P={len(y)}, temperature={temperature}, "
          f"{kw['num_chains']} chains × ({kw['num_warmup']} warm-up + {kw['num_samples']}) draws, method={kw['method']}")
    post = sample_posterior(net, x, y, temperature=temperature, x_test=xt, progress_bar=not args.no_progress, **kw)
    path = post.save(out / "posterior.nc")
    text = str(post.summary())
    (out / "summary.txt").write_text(text + "\n")
    print(text)
    print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    chains = getattr(args, "chains", None) or 4
    # One CPU device per chain (up to the core count) so chains run in parallel;
    # must happen before JAX starts its backend.
    import numpyro

    numpyro.set_host_device_count(max(1, min(chains, os.cpu_count() or 1)))
    try:
        return args.func(args)
    except ValueError as err:
        print(f"bayes-attn {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
