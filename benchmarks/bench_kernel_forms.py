"""Benchmark: one gradient of the ``wishart`` likelihood in each kernel form, side by side.

The likelihood ``Y ~ Normal(0, K(U_1) + T I)`` evaluated as the stored path-kernel
tensor ``C`` ``[D, D, P, P]`` (the only form before the choice by shape), the
ξ product ``Φ Φᵀ`` and the Woodbury form (where ``r N0 < P``); see
:data:`bayes_attn.kernels.KERNEL_FORMS`. Per case: seconds per jitted
``value_and_grad`` of NumPyro's potential (the cost of one leapfrog step),
median over rounds in which the forms take turns (so that a change of load
hits all of them alike), float32 and float64; the form
:func:`bayes_attn.kernels.choose_kernel_form` picks, and the bytes of the data
each form holds. The load average is recorded before every case.

The likelihood's derivative, side by side in the same rounds: for the chosen
form (unless Woodbury) also the same potential with the Gaussian density
through NumPyro's ``MultivariateNormal`` (autodiff through the Cholesky
factorisation, as before :func:`bayes_attn.gp.log_likelihood` carried its
derivative in closed form), reported as ``<form> autodiff``.

``results/kernel_forms.json`` (2026-12-03) also holds ``<form> before`` and ``speedup_vs_before``: the code of
8c65c69, before the likelihood was differentiated in the features and factorised by halves (the Gram-level
closed form with LAPACK's factorisation and triangular solve), emulated in this script at 3685725; the
emulation is no longer kept here.

Cases: the one-shot image task's scale (heads (4, 4): 16 paths, P = 600,
N0 = 64, width 100, so ``r_1 = 16``), the same at width 10 (``prune``'s
N = 10, ``r_1 = 10``) and at width 2 (``r_1 = 2``:
Woodbury applies), and the Fig. 2c network (4 paths, P = 100, N0 = 231).
Random inputs: the cost depends on the shapes only.

Run::

    .venv/bin/python benchmarks/bench_kernel_forms.py          # a few minutes
    .venv/bin/python benchmarks/bench_kernel_forms.py --quick  # smoke test: two tiny cases in float32
"""

from __future__ import annotations

import argparse

from harness import Record, one_blas_thread_here, parse, parser, threads_now, x64
from harness import headline as make_headline


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: two tiny cases in float32, 2 rounds of 2 calls)."""
    ap = parser("kernel_forms", __doc__, "two tiny cases in float32, 2 rounds of 2 calls")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--per-round", type=int, default=5)
    a = parse(ap, argv)
    if a.quick:
        a.rounds, a.per_round = 2, 2
    return a


def headline(results: dict) -> dict | None:
    """One gradient in the chosen form at the image scale, N = 10, float32 (or the first case run)."""
    r = next((r for r in results["runs"] if (r["case"], r["dtype"]) == ("image N=10", "float32")), results["runs"][0])
    return make_headline(f"wishart gradient ({r['chosen']} form), {r['case']}, {r['dtype']}",
                         1e3 * r["seconds_per_gradient"][r["chosen"]], "ms")


if __name__ == "__main__":
    ARGS = parse_args()  # before JAX loads: --help answers at once and writes nothing

import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from functools import partial  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from numpyro.infer.util import initialize_model  # noqa: E402

import bayes_attn as ba  # noqa: E402
from bayes_attn.kernels import choose_kernel_form, kernel_form_costs  # noqa: E402
from bayes_attn.samplers import prepare  # noqa: E402
from bayes_attn.samplers._base import gram, likelihood_data  # noqa: E402
from bayes_attn.samplers._wishart import factor_sites, model  # noqa: E402
from bayes_attn.theory._bartlett import factor_chain, factor_shapes  # noqa: E402

CASES = {
    "image N=100": dict(heads=(4, 4), P=600, N0=64, T=8, width=100),
    "image N=10": dict(heads=(4, 4), P=600, N0=64, T=8, width=10),
    "image N=2": dict(heads=(4, 4), P=600, N0=64, T=8, width=2),
    "fig2c N=100": dict(heads=(2, 2), P=100, N0=231, T=31, width=100),
}


def problem(heads, P, N0, T, width, seed=0):
    """A random network of these shapes, inputs ``[P, T, N0]`` and labels ±1."""
    rng = np.random.default_rng(seed)
    att = [rng.normal(size=(h, N0, N0)) / N0 for h in heads]
    net = ba.Network(att, width, 1.0, "mean")
    x = rng.normal(size=(P, T, N0))
    y = np.where(rng.random(P) < 0.5, -1.0, 1.0)
    return net, x, y


def model_autodiff(data, y, *, heads, widths, variances, temperature, form):
    """The ``wishart`` model with ``Normal(0, K + T I)`` as NumPyro's ``MultivariateNormal`` (no closed-form
    derivative)."""
    F1 = factor_chain(factor_sites(heads, widths, data.dtype), heads, widths, variances)[0]
    K = gram(F1 @ F1.T, F1, data, form, variances[0])
    L = jnp.linalg.cholesky(K + temperature * jnp.eye(K.shape[0], dtype=K.dtype))
    numpyro.sample("y", dist.MultivariateNormal(jnp.zeros(K.shape[0], K.dtype), scale_tril=L, validate_args=False),
                   obs=y)


def gradient_fn(inputs, form):
    """A call of the jitted ``value_and_grad`` of the potential in ``form`` (``"<form> autodiff"``: through
    NumPyro's ``MultivariateNormal``), compiled; and the bytes of the form's data."""
    variant = form.split(" ")[1] if " " in form else None
    form = form.split(" ")[0]
    data = likelihood_data(inputs, form)
    m = partial({None: model, "autodiff": model_autodiff}[variant], form=form, **inputs.consts())
    info = initialize_model(jax.random.key(0), m, model_args=(data, inputs.y))
    f = jax.jit(jax.value_and_grad(info.potential_fn))
    z = info.param_info.z
    jax.block_until_ready(f(z))  # compile
    return (lambda: jax.block_until_ready(f(z))), int(data.nbytes)


def time_case(name, cfg, dtype, rounds, per_round):
    """Seconds per gradient of every form of one case, the forms taking turns within each round."""
    net, x, y = problem(**cfg)
    P, D, N0, r = cfg["P"], net.D, cfg["N0"], factor_shapes(net.heads, net.widths)[0][1]
    forms = [f for f in ("tensor", "xi", "woodbury") if f in kernel_form_costs(D, P, N0, r)]
    chosen = choose_kernel_form(D, P, N0, r)
    if chosen != "woodbury":
        forms.append(f"{chosen} autodiff")
    load = os.getloadavg()
    with x64(dtype == "float64"), one_blas_thread_here():
        inputs = prepare(net, x, y, None, 0.1, dtype)
        fns = {f: gradient_fn(inputs, f) for f in forms}
        times = {f: [] for f in forms}
        for _ in range(rounds):
            for f in forms:
                call = fns[f][0]
                t0 = time.perf_counter()
                for _ in range(per_round):
                    call()
                times[f].append((time.perf_counter() - t0) / per_round)
    sec = {f: statistics.median(v) for f, v in times.items()}
    forms_only = {f: t for f, t in sec.items() if " " not in f}
    out = dict(case=name, dtype=dtype, D=D, P=P, N0=N0, rank=r, chosen=chosen, load_before=load,
               seconds_per_gradient=sec, data_bytes={f: fns[f][1] for f in forms},
               speedup_chosen_vs_tensor=sec["tensor"] / sec[chosen], fastest=min(forms_only, key=forms_only.get))
    if f"{chosen} autodiff" in sec:
        out["speedup_closed_form_derivative"] = sec[f"{chosen} autodiff"] / sec[chosen]
    vs_autodiff = out.get("speedup_closed_form_derivative")
    print(f"{name:12s} {dtype}  r={r:2d}  " + "  ".join(f"{f} {1e3 * s:8.2f} ms" for f, s in sec.items())
          + f"   chosen {chosen} ({out['speedup_chosen_vs_tensor']:.2f}x vs tensor"
          + (f", {vs_autodiff:.2f}x vs autodiff" if vs_autodiff else "") + f")   load {load[0]:.1f}", flush=True)
    return out


def main(a: argparse.Namespace) -> dict:
    """Every case in float32 and float64; the envelope."""
    cases = CASES
    if a.quick:
        cases = {"tiny": dict(heads=(2, 2), P=12, N0=6, T=4, width=3),
                 "tiny r=1": dict(heads=(2, 2), P=40, N0=6, T=4, width=1)}
    record = Record(a, threads=threads_now(),
                    note="seconds per jitted value_and_grad of the wishart potential; median over rounds, forms "
                         "interleaved")
    dtypes = ("float32",) if a.quick else ("float32", "float64")
    results = {"runs": [time_case(n, c, dt, a.rounds, a.per_round) for n, c in cases.items() for dt in dtypes]}
    record.write(results, headline=headline(results))
    return results


if __name__ == "__main__":
    main(ARGS)
