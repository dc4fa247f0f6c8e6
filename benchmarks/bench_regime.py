"""Benchmark: the theories where the 1/N expansion is strained, against the exact posterior (issue 73,
docs/theory.md §8).

Theories: the leading order (§4); the Laplace correction in the Bartlett sites ``(log c, z)`` (§8, the default);
the same expansion in cube-root sites ``(c^{1/3}, z)`` (``coordinates="bartlett_cbrt"``: Wilson–Hilferty, where a
χ² site of a few degrees of freedom is closer to normal than in ``log c``).

Problems:

- Fig. 2c (``markov.fig2c``: 4 paths, P = 100, temperature 0.01) at N = 2, 3, 5, 10, 30, 100 (N = 2, 3 below
  its 4 paths), the exact posterior by the ``wishart`` sampler (4 chains × (500 + 2000) draws);
- ``--image``: the image task's trained models of ``inference/results/fig3`` (16 paths, P = 600; training
  reused) at N = 10, their exact posterior means of ``U`` as ``prune`` sampled and stored them
  (``oneshot.nc``: ``U_sampled``, at the temperature it sampled at).

Measured per point: the relative Frobenius distance of each theory's ``U`` from the exact posterior mean (as
``bayes_attn.compare``), its Monte-Carlo floor (Fig. 2c), the smallest eigenvalue of each ``U`` over its largest
entry (negative: not positive semi-definite), the problems the correction reports, each theory's seconds.

Run: ``.venv/bin/python benchmarks/bench_regime.py [--widths 2 3 5 10 30 100] [--image] [--quick] [--out FILE]``
(~10 min for Fig. 2c, ~2 min with ``--image`` on 2 cores; ``--quick``: N = 3, 2 × (100 + 100) draws, no image).
Output: ``benchmarks/results/regime.json``.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

from harness import Record, parse, parser, trained_image
from harness import headline as make_headline

ROOT = Path(__file__).resolve().parents[1]
TEMPERATURE = 0.01
COORDINATES = ("bartlett", "bartlett_cbrt")
RUNS = ("rotations", "rotations/seed1", "rotations/seed2")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = parser("regime", __doc__, "N = 3, 2 x (100 + 100) draws, no image")
    ap.add_argument("--widths", type=int, nargs="+", default=[2, 3, 5, 10, 30, 100])
    ap.add_argument("--image", action="store_true", help="the image task's three trained models at N = 10 too")
    return parse(ap, argv)


def theories(lead, exact, *, floor: float | None = None) -> dict:
    """Each theory's distance from ``exact`` (``[D, D]``), its PSD margin, its problems and seconds."""
    import numpy as np

    from bayes_attn import theory as th

    def row(U, seconds, problems=()):
        return {"distance": float(np.linalg.norm(exact - U) / np.linalg.norm(exact)), "seconds": seconds,
                "min_eigenvalue": float(np.linalg.eigvalsh(U)[0] / np.abs(U).max()), "problems": list(problems)}

    out = {"leading": row(lead.U, lead.solve_seconds)}
    for coords in COORDINATES:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # its problems are recorded
            c = th.laplace_correction(lead, coordinates=coords)
        out[f"laplace-{coords}"] = row(c.U, time.perf_counter() - t0, c.correction.problems)
    return out | ({"mc_floor": floor} if floor is not None else {})


def fig2c(widths, draws: int, chains: int) -> list[dict]:
    import arviz_stats as azs
    import numpy as np

    import bayes_attn as ba
    from bayes_attn import markov
    from bayes_attn import theory as th

    task, net0 = markov.fig2c(10)
    x, y, _, _ = task.generate()
    rows = []
    for N in widths:
        net = net0.with_width(N)
        lead = th.solve_theory(net, x, y, temperature=TEMPERATURE)
        t0 = time.perf_counter()
        post = ba.sample_posterior(net, x, y, temperature=TEMPERATURE, progress_bar=False,
                                   sampler=ba.SamplerSettings(name="wishart", num_warmup=500 if draws > 100 else 100,
                                                              num_samples=draws, num_chains=chains, seed=N))
        exact_seconds = time.perf_counter() - t0
        U = post.tree["posterior"]["U"].values
        mean = U.reshape(-1, net.D, net.D).mean(axis=0)
        se = np.asarray(azs.mcse(post.tree, var_names=["U"])["U"].values).ravel()
        row = {"problem": "fig2c", "N": N, "exact_seconds": exact_seconds, "max_rhat": post.summary().max_rhat}
        rows.append(row | theories(lead, mean, floor=float(np.linalg.norm(se) / np.linalg.norm(mean))))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def image(runs) -> list[dict]:
    import xarray as xr

    from bayes_attn import theory as th

    rows = []
    for run in runs:
        folder = ROOT / "inference/results/fig3" / run
        ds = xr.open_dataset(folder / "oneshot.nc")
        i = list(ds["sample_width"].values).index(10)
        T, exact = float(ds["temperature_sampled"].values[i]), ds["U_sampled"].values[i]
        _, ev, net = trained_image(folder)
        lead = th.solve_theory(net, ev.theory_train.x, ev.theory_train.y, temperature=T)
        rows.append({"problem": "image", "run": run, "N": 10, "temperature": T} | theories(lead, exact))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(a: argparse.Namespace) -> dict:
    import jax

    jax.config.update("jax_enable_x64", True)
    record = Record(a, temperature=TEMPERATURE, coordinates=list(COORDINATES))
    rows = fig2c([3] if a.quick else a.widths, 100 if a.quick else 2000, 2 if a.quick else 4)
    if a.image and not a.quick:
        rows += image(RUNS)
    results = {"rows": rows}
    smallest = min((r for r in rows if r["problem"] == "fig2c"), key=lambda r: r["N"])
    record.write(results, headline=make_headline(f"Laplace (log c) U distance, Fig. 2c N = {smallest['N']}",
                                                 smallest["laplace-bartlett"]["distance"], "relative"))
    return results


if __name__ == "__main__":
    main(parse_args())
