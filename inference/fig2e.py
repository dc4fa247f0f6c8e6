"""Paper Fig. 2e: the two-path network (good and denoising paths), perpendicular noise 5.

    python inference/fig2e.py [--out runs/fig2e] [--sample-widths 10 100 1000] [--chains 4] [--sampler collapsed]

Theory over widths, NUTS with the spec's sampler (wishart) at the sample widths, GP lines for each
path alone and for the whole network; the leading-order and the corrected (Laplace, docs/theory.md §8)
theory side by side at every sampled width (gaps with slopes in finite_size.png, predicted vs sampled
sd of U in order_parameter_sd.png); writes sweep.nc and figures into OUT.
"""

from fig2c import sweep_main

if __name__ == "__main__":
    raise SystemExit(sweep_main("models/markov_2paths.toml", "runs/fig2e", __doc__))
