"""The theory's own limit: N and P grow together at fixed alpha = P / N.

    python inference/alpha_scaling.py [--out runs/alpha] [--alphas 0.5 2] [--max-p 2000] [--fixed runs/fig2c]

On the Fig. 2c network, samples the exact order-parameter posterior (the
``wishart`` sampler) at widths N with P = alpha N training sequences, and
compares it with the theory at every point. The theory is exact as
N, P → ∞ at fixed alpha, so along these lines the gaps of U and of the
predictor mean must shrink; the figure shows them next to the fixed-P curve
of Fig. 2c (read from ``--fixed``/sweep.nc when it exists). Resumable.
Writes OUT/alpha-<a>/alpha_sweep.nc and OUT/finite_size_alpha.png.
"""

import argparse
import dataclasses
from pathlib import Path


def widths_for(alpha: float, max_p: int, min_p: int = 50) -> list[int]:
    """Widths whose P = alpha N runs from ``min_p`` to ``max_p`` in roughly even log steps."""
    ps = [p for p in (50, 100, 200, 500, 1000, 2000, 5000) if min_p <= p <= max_p]
    return sorted({max(2, round(p / alpha)) for p in ps})


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/alpha"))
    p.add_argument("--alphas", type=float, nargs="+", default=[0.5, 2.0])
    p.add_argument("--max-p", type=int, default=2000)
    p.add_argument("--fixed", type=Path, default=Path("runs/fig2c"), help="folder of the fixed-P sweep (fig2c.py)")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--samples", type=int, default=1000)
    a = p.parse_args()
    from bayes_attn._internal.threads import one_blas_thread  # after parsing: --help imports nothing heavy

    one_blas_thread()
    import numpyro
    import xarray as xr

    from bayes_attn import load_spec
    from bayes_attn.runs import finite_size
    from bayes_attn.sweep import alpha_sweep

    numpyro.set_host_device_count(4)  # one CPU device per chain
    spec = load_spec("models/markov_4paths.toml")
    spec = dataclasses.replace(spec, sampler=spec.sampler.replace(name="wishart", num_chains=a.chains,
                                                                  num_warmup=a.warmup, num_samples=a.samples))
    sweeps = {}
    for alpha in a.alphas:
        ws = widths_for(alpha, a.max_p)
        print(f"alpha = {alpha}: N = {ws}, P = {[round(alpha * w) for w in ws]}")
        ds = alpha_sweep(spec, a.out / f"alpha-{alpha:g}", alpha=alpha, widths=ws)
        print(ds[["check_gap", "check_mcse", "check_noise_floor"]].sel(
            check=["U (relative Frobenius)", "predictor mean (relative L2)"]).to_dataframe().to_string())
        print({k: v for k, v in ds.attrs.items() if k.startswith("slope")})
        sweeps[f"α = {alpha:g}"] = ds
    fixed = a.fixed / "sweep.nc"
    base = xr.load_dataset(fixed) if fixed.exists() else None
    if base is None:
        print(f"no fixed-P sweep at {fixed}: run inference/fig2c.py first for the side-by-side figure")
    else:
        print("wrote", finite_size(base, a.out / "finite_size_alpha.png", alpha_sweeps=sweeps))
