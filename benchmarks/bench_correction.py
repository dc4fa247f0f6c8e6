"""Benchmark: the finite-width correction of the theory (docs/theory.md §8) — its cost and its accuracy.

Problem: the Fig. 2c network (``markov.fig2c``; D = 4 paths, P = 100
training sequences, temperature 0.01), float64 as the theory computes.

Cost (default), at N = 10, 100, 1000:

- leading: ``solve_theory(net, x, y, temperature=0.01)`` (the theory of §4);
- corrected: ``solve_theory(..., correction="laplace")`` — the leading solve,
  then the Newton solve for ``θ̂`` from it and the expansion;
- correction alone: ``laplace_correction(leading)``;
- predictor on 200 test inputs: ``Theory.predict`` without and with the correction.

*Warm*: best of ``REPEATS`` calls after a first one in this process (JAX
compilation done; widths are traced, so one compilation serves every N).
*Cold*: one call in a fresh Python process per N (imports and data
generation excluded, compilation included). Prints the corrected/leading
ratio and the load average; writes ``results/correction.json``.

Accuracy (``--accuracy``), at N = 10, 30, 100, 300: relative Frobenius
distance (as ``bayes_attn.compare``) of the leading and the corrected ``U``
from the posterior mean of the ``wishart`` sampler (4 chains × (500 + 2000)
draws), its Monte-Carlo floor, the same for ``U_2`` and ``Ua``, and the
predicted against the sampled posterior sd of ``U[1-1, 1-1]``; writes
``results/correction_accuracy.json``.

Run: ``.venv/bin/python benchmarks/bench_correction.py [--accuracy] [--quick] [--out FILE]``
(``--quick``: N = 10, one repeat; with ``--accuracy`` 2 × (500 + 100) draws; output to a temporary folder,
numbers meaningless).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # small matrices on a shared 2-core machine

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from harness import Record, parser, resolve_out, times  # noqa: E402
from harness import headline as make_headline  # noqa: E402

WIDTHS = (10, 100, 1000)
ACCURACY_WIDTHS = (10, 30, 100, 300)
TEMPERATURE = 0.01
REPEATS = 5
N_TEST = 200

COLD = """
import os, sys, time, json
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
from bayes_attn import markov
from bayes_attn.theory import solve_theory
N, correction = int(sys.argv[1]), sys.argv[2]
task, net = markov.fig2c(N)
x, y, _, _ = task.generate()
t = time.perf_counter()
solve_theory(net, x, y, temperature={T}, correction=None if correction == "none" else correction)
print(json.dumps(time.perf_counter() - t))
"""


def best(fn, repeats: int = REPEATS) -> float:
    """The least wall seconds of ``repeats`` calls of ``fn``."""
    return min(times(fn, repeats))


def cold(N: int, correction: str) -> float:
    """Seconds of one ``solve_theory`` call in a fresh interpreter (compilation included)."""
    out = subprocess.run([sys.executable, "-c", COLD.format(T=TEMPERATURE), str(N), correction], capture_output=True,
                         text=True, check=True, env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


# ----------------------------------------------------------------------------
def cost(widths, record: Record, repeats: int) -> dict:
    """Leading and corrected solves, warm and cold, and the predictors, at each width; the envelope."""
    import numpy as np

    from bayes_attn import markov
    from bayes_attn import theory as th

    task, net0 = markov.fig2c(10)
    x, y, xt, _ = task.generate()
    xt = xt[:N_TEST]
    rows = []
    for N in widths:
        net = net0.with_width(N)
        load_before = os.getloadavg()[0]
        cold_leading, cold_corrected = cold(N, "none"), cold(N, "laplace")
        t = time.perf_counter()
        lead = th.solve_theory(net, x, y, temperature=TEMPERATURE)
        first_leading = time.perf_counter() - t
        t = time.perf_counter()
        corr = th.laplace_correction(lead)
        first_correction = time.perf_counter() - t
        # each closure is timed at once, in its own iteration: the defaults only say so
        warm_leading = best(lambda net=net: th.solve_theory(net, x, y, temperature=TEMPERATURE), repeats)
        warm_corrected = best(lambda net=net: th.solve_theory(net, x, y, temperature=TEMPERATURE,
                                                              correction="laplace"), repeats)
        warm_correction = best(lambda lead=lead: th.laplace_correction(lead), repeats)
        lead.predict(xt), corr.predict(xt)  # compile
        predict_leading = best(lambda lead=lead: lead.predict(xt), repeats)
        predict_corrected = best(lambda corr=corr: corr.predict(xt), repeats)
        row = {
            "N": N,
            "leading_warm_s": warm_leading,
            "corrected_warm_s": warm_corrected,
            "correction_only_warm_s": warm_correction,
            "ratio_warm": warm_corrected / warm_leading,
            "leading_cold_s": cold_leading,
            "corrected_cold_s": cold_corrected,
            "ratio_cold": cold_corrected / cold_leading,
            "leading_first_call_in_process_s": first_leading,
            "correction_first_call_in_process_s": first_correction,
            "predict_leading_warm_s": predict_leading,
            "predict_corrected_warm_s": predict_corrected,
            "leading_iterations": lead.iterations,
            "correction_newton_iterations": corr.correction.mode.report.iterations,
            "correction_newton_decrement": corr.correction.mode.report.measure,
            "correction_converged": corr.correction.mode.report.converged,
            "dimension": corr.correction.mode.dimension,
            "relative_change_of_U": float(np.linalg.norm(corr.U - lead.U) / np.linalg.norm(corr.U)),
            "load_average_1min": [load_before, os.getloadavg()[0]],
        }
        rows.append(row)
        print(f"N={N:>5}: warm leading {warm_leading * 1e3:7.1f} ms, corrected {warm_corrected * 1e3:7.1f} ms "
              f"(ratio {row['ratio_warm']:.2f}; correction alone {warm_correction * 1e3:.1f} ms, "
              f"{corr.correction.mode.report.iterations} Newton steps) | cold leading {cold_leading:.1f} s, corrected "
              f"{cold_corrected:.1f} s (ratio {row['ratio_cold']:.2f}) | predict {predict_leading * 1e3:.1f} / "
              f"{predict_corrected * 1e3:.1f} ms | load {os.getloadavg()[0]:.2f}", flush=True)
    results = {"rows": rows}
    record.settings |= {
        "problem": f"Fig. 2c Markov network, D=4, P=100, temperature {TEMPERATURE}",
        "leading": "solve_theory(net, x, y, temperature) (docs/theory.md §4)",
        "corrected": "solve_theory(..., correction='laplace'): leading solve + Newton for the minimiser of the exact "
                     "S(θ) (Bartlett sites) + third-order expansion (docs/theory.md §8)",
        "timing": f"wall seconds; warm: best of {repeats} after compilation; cold: one call in a fresh process "
                  f"(imports and data excluded, compilation included); predict: {N_TEST} test inputs, warm"}
    record.write(results, headline=headline(results))
    return results


# ----------------------------------------------------------------------------
def relative_distance(draws, theory, mcse) -> dict:
    """``bayes_attn.compare``'s relative Frobenius distance ``||mean − theory|| / ||theory||`` of the posterior mean
    of ``draws`` ``[chain, draw, k]`` (arrays), with its Monte-Carlo floor ``sqrt(Σ mcse²) / ||theory||`` and the gap
    ``sqrt(distance² − floor²)`` (the distance with Monte-Carlo error taken out)."""
    import numpy as np

    t = np.ravel(theory)
    d = float(np.linalg.norm(draws.mean(axis=(0, 1)) - t) / np.linalg.norm(t))
    floor = float(np.linalg.norm(mcse) / np.linalg.norm(t))
    return {"distance": d, "mc_floor": floor, "gap": float(np.sqrt(max(d * d - floor * floor, 0.0)))}


def accuracy(widths, record: Record, num_samples: int, num_chains: int) -> dict:
    """Leading and corrected theory against the ``wishart`` sampler's posterior at each width; the envelope."""
    import numpy as np
    import numpyro

    numpyro.set_host_device_count(2)
    import arviz_stats as azs

    import bayes_attn as ba
    from bayes_attn import markov
    from bayes_attn import theory as th

    task, net0 = markov.fig2c(10)
    x, y, _, _ = task.generate()
    rows = []
    for N in widths:
        net = net0.with_width(N)
        sol = th.solve_theory(net, x, y, temperature=TEMPERATURE, correction="laplace")
        t = time.perf_counter()
        post = ba.sample_posterior(net, x, y, temperature=TEMPERATURE,
                                   sampler=ba.SamplerSettings(name="wishart", num_warmup=500, num_samples=num_samples,
                                                              num_chains=num_chains, seed=N),
                                   progress_bar=False)
        seconds = time.perf_counter() - t
        s = post.summary()
        p = post.tree["posterior"]
        row = {"N": N, "sampling_s": seconds, "max_rhat": s.max_rhat, "min_ess_bulk": s.min_ess,
               "divergences": s.divergences}
        c = sol.correction
        for name, lead, corr in (("U", c.U_leading, sol.U), ("U_2", c.order_parameters_leading[1],
                                                               sol.order_parameters[1]), ("Ua", c.Ua_leading, sol.Ua)):
            draws = p[name].values
            draws = draws.reshape(*draws.shape[:2], -1)
            se = np.atleast_1d(np.asarray(azs.mcse(post.tree, var_names=[name])[name].values)).ravel()
            row[name] = {"leading": relative_distance(draws, lead, se), "corrected": relative_distance(draws, corr, se),
                         "mc_floor": float(np.linalg.norm(se) / np.linalg.norm(np.ravel(corr)))}
        sampled_sd = float(p["U"].values[..., 0, 0].std())
        row["sd_U_1-1_1-1"] = {"predicted": float(sol.correction.U_sd[0, 0]), "sampled": sampled_sd}
        rows.append(row)
        u = {k: row["U"][k]["distance"] if k != "mc_floor" else row["U"][k] for k in row["U"]}
        print(f"N={N:>4}: U distance leading {u['leading']:.4f} -> corrected {u['corrected']:.4f} "
              f"(MC floor {u['mc_floor']:.4f}); sd U[1-1,1-1] predicted {sol.correction.U_sd[0, 0]:.4g} vs sampled "
              f"{sampled_sd:.4g}; R-hat {s.max_rhat:.3f}, ESS {s.min_ess:.0f}, {seconds:.0f} s", flush=True)
    results = {"rows": rows}
    record.settings |= {
        "problem": f"Fig. 2c Markov network, D=4, P=100, temperature {TEMPERATURE}",
        "reference": f"wishart sampler, {num_chains} chains x (500 + {num_samples}) draws",
        "distance": "relative Frobenius distance ||mean_sampled - theory|| / ||theory|| (bayes_attn.compare); "
                    "mc_floor: sqrt(sum of squared MCSEs) / ||theory||, the distance expected from Monte-Carlo "
                    "error alone; gap: sqrt(distance^2 - mc_floor^2)",
        "theory": "leading: docs/theory.md §4; corrected: solve_theory(correction='laplace'), Bartlett-site "
                  "coordinates"}
    record.write(results, headline=headline(results))
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: N = 10, one repeat; ``--accuracy``: 2 × (500 + 100) draws)."""
    ap = parser("correction", __doc__, "N = 10, one repeat (with --accuracy: 2 x (500 + 100) draws)")
    ap.add_argument("--accuracy", action="store_true", help="compare with the wishart sampler instead of timing "
                    "(default output benchmarks/results/correction_accuracy.json)")
    a = ap.parse_args(argv)
    a.benchmark = "correction_accuracy" if a.accuracy else "correction"
    return resolve_out(a)


def headline(results: dict) -> dict | None:
    """Timing: the corrected over the leading solve, warm, at the largest width; accuracy: the corrected ``U``'s
    relative distance from the sampled posterior mean at the smallest width."""
    rows = results["rows"]
    if "ratio_warm" in rows[0]:
        r = max(rows, key=lambda r: r["N"])
        return make_headline(f"corrected / leading solve, warm, Fig. 2c N = {r['N']}", r["ratio_warm"], "x")
    r = min(rows, key=lambda r: r["N"])
    return make_headline(f"corrected U's distance from the posterior mean, Fig. 2c N = {r['N']}",
                         r["U"]["corrected"]["distance"], "relative")


def main(argv: list[str] | None = None) -> dict:
    """The cost (default) or the accuracy (``--accuracy``) of the correction."""
    a = parse_args(argv)
    record = Record(a)
    if a.accuracy:
        return accuracy((10,) if a.quick else ACCURACY_WIDTHS, record, 100 if a.quick else 2000,
                        2 if a.quick else 4)
    return cost((10,) if a.quick else WIDTHS, record, 1 if a.quick else REPEATS)


if __name__ == "__main__":
    main()
