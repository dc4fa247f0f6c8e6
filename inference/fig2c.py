"""Paper Fig. 2c: test accuracy and order parameter vs width, theory against NUTS.

Theory at every width of the spec (N = 10 … 10000), NUTS (4 chains) with the
spec's sampler — the exact order-parameter sampler ``wishart`` — at the
sample widths (by default every width), GP-limit lines for the whole network,
the good path alone, and the good + denoising paths. Resumable: rerun after
an interruption.

    python inference/fig2c.py [--out runs/fig2c] [--sample-widths 10 100 1000] [--chains 4] [--sampler collapsed]

At every sampled width both the leading-order theory (docs/theory.md §4) and the
finite-width (Laplace) correction (§8) are compared with the posterior: the
gap of each in ``U`` against N on one log–log figure with fitted slopes
(``finite_size.png``; expected ≈ 1 and ≈ 2), and the predicted posterior sd
of ``U`` against the sampled sd (``order_parameter_sd.png``).

Writes sweep.nc, accuracy_vs_width.png, finite_size.png, order_parameter_sd.png
and, per sampled width, the posterior and comparison under OUT/widths/.
"""

import argparse


def sweep_main(spec: str, out: str, doc: str) -> int:
    """Parse the script's options and run ``bayes-attn sweep`` on ``spec``."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=out)
    p.add_argument("--sample-widths", nargs="*", help="default: the spec's")
    p.add_argument("--sampler", help="default: the spec's")
    p.add_argument("--chains", default="4")
    p.add_argument("--samples", default="1000")
    p.add_argument("--warmup", default="500")
    p.add_argument("--quick", action="store_true",
                   help="a smoke test: the theory at N = 10 only, nothing sampled (seconds)")
    a = p.parse_args()
    from bayes_attn.cli import main  # after parsing: --help imports nothing heavy

    args = ["sweep", spec, "--out", a.out, "--chains", a.chains, "--samples", a.samples, "--warmup", a.warmup]
    if a.quick:
        args += ["--widths", "10", "--sample-widths"]
    elif a.sample_widths is not None:
        args += ["--sample-widths", *a.sample_widths]
    if a.sampler:
        args += ["--sampler", a.sampler]
    return main(args)


if __name__ == "__main__":
    raise SystemExit(sweep_main("models/markov_4paths.toml", "runs/fig2c", __doc__))
