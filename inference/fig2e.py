"""Paper Fig. 2e: the two-path network (good and denoising paths), perpendicular noise 5.

    python inference/fig2e.py [--out runs/fig2e] [--sample-widths 10 30 100] [--chains 4]

Theory over widths, collapsed NUTS at the sample widths, GP lines for each
path alone and for the whole network; writes sweep.nc and figures into OUT.
"""

import argparse

from bayes_attn.cli import main

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/fig2e")
    p.add_argument("--sample-widths", nargs="*", default=["10", "30", "100"])
    p.add_argument("--chains", default="4")
    p.add_argument("--samples", default="1000")
    p.add_argument("--warmup", default="500")
    a = p.parse_args()
    raise SystemExit(
        main(["sweep", "models/markov_2paths.toml", "--out", a.out, "--chains", a.chains, "--samples", a.samples,
              "--warmup", a.warmup, "--sample-widths", *a.sample_widths])
    )
