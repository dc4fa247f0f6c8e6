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
derivative in closed form), reported as ``<form> autodiff``; and as before the
likelihood of ``Φ Φᵀ + T I`` was differentiated in the features
(:func:`bayes_attn.gp.log_likelihood_features`) and its Cholesky factor and
triangular inverse were taken by halves (:func:`bayes_attn.gp.cholesky`,
:func:`bayes_attn.gp.triangular_inverse`): the Gram-level closed form with
LAPACK's factorisation and a triangular solve against the identity, reported as
``<form> before`` (the leaves ``gp.CHOLESKY_LEAF``, ``gp.TRIANGULAR_LEAF`` set
past ``P`` while it is traced).

Cases: the one-shot image task's scale (heads (4, 4): 16 paths, P = 600,
N0 = 64, width 100, so ``r_1 = 16``), the same at width 10 (``prune``'s
N = 10, ``r_1 = 10``) and at width 2 (``r_1 = 2``:
Woodbury applies), and the Fig. 2c network (4 paths, P = 100, N0 = 231).
Random inputs: the cost depends on the shapes only.

Run::

    .venv/bin/python benchmarks/bench_kernel_forms.py          # a few minutes
    .venv/bin/python benchmarks/bench_kernel_forms.py --quick  # smoke test
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

from record import write_record  # benchmarks/record.py

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer.util import initialize_model

import bayes_attn as ba
from bayes_attn import gp, threads
from bayes_attn.kernels import choose_kernel_form, kernel_form_costs
from bayes_attn.precision import x64
from bayes_attn.samplers import prepare
from bayes_attn.gp import covariance
from bayes_attn.samplers.base import GramNormal, gram, likelihood_data
from bayes_attn.samplers.wishart import factor_chain, factor_shapes, factor_sites, model

RESULTS = Path(__file__).resolve().parent / "results"
CASES = {
    "image N=100": dict(heads=(4, 4), P=600, N0=64, T=8, width=100),
    "image N=10": dict(heads=(4, 4), P=600, N0=64, T=8, width=10),
    "image N=2": dict(heads=(4, 4), P=600, N0=64, T=8, width=2),
    "fig2c N=100": dict(heads=(2, 2), P=100, N0=231, T=31, width=100),
}


def problem(heads, P, N0, T, width, seed=0):
    rng = np.random.default_rng(seed)
    att = [rng.normal(size=(h, N0, N0)) / N0 for h in heads]
    net = ba.Network(att, width, 1.0, "mean")
    x = rng.normal(size=(P, T, N0))
    y = np.where(rng.random(P) < 0.5, -1.0, 1.0)
    return net, x, y


def model_autodiff(data, y, *, heads, widths, variances, temperature, form):
    """The ``wishart`` model with ``Normal(0, K + T I)`` as NumPyro's ``MultivariateNormal`` (no closed-form derivative)."""
    F1 = factor_chain(factor_sites(heads, widths, data.dtype), heads, widths, variances)[0]
    K = gram(F1 @ F1.T, F1, data, form, variances[0])
    L = jnp.linalg.cholesky(K + temperature * jnp.eye(K.shape[0], dtype=K.dtype))
    numpyro.sample("y", dist.MultivariateNormal(jnp.zeros(K.shape[0], K.dtype), scale_tril=L, validate_args=False),
                   obs=y)


def model_before(data, y, *, heads, widths, variances, temperature, form):
    """The ``wishart`` model with ``Normal(0, K + T I)`` as :class:`GramNormal` (the Gram-level closed form)."""
    F1 = factor_chain(factor_sites(heads, widths, data.dtype), heads, widths, variances)[0]
    numpyro.sample("y", GramNormal(covariance(gram(F1 @ F1.T, F1, data, form, variances[0]), temperature)), obs=y)


@contextlib.contextmanager
def lapack_leaves():
    """Trace with LAPACK's Cholesky factorisation and triangular solve at every size (the code before)."""
    saved = gp.CHOLESKY_LEAF, gp.TRIANGULAR_LEAF
    gp.CHOLESKY_LEAF = gp.TRIANGULAR_LEAF = 10**9
    try:
        yield
    finally:
        gp.CHOLESKY_LEAF, gp.TRIANGULAR_LEAF = saved


def gradient_fn(inputs, form):
    variant = form.split(" ")[1] if " " in form else None
    form = form.split(" ")[0]
    data = likelihood_data(inputs, form)
    m = partial({None: model, "autodiff": model_autodiff, "before": model_before}[variant], form=form,
                **inputs.consts())
    with lapack_leaves() if variant == "before" else contextlib.nullcontext():
        info = initialize_model(jax.random.key(0), m, model_args=(data, inputs.y))
        f = jax.jit(jax.value_and_grad(info.potential_fn))
        z = info.param_info.z
        jax.block_until_ready(f(z))  # compile (traced here, under the leaves)
    return (lambda: jax.block_until_ready(f(z))), int(data.nbytes)


def time_case(name, cfg, dtype, rounds, per_round):
    net, x, y = problem(**cfg)
    P, D, N0, r = cfg["P"], net.D, cfg["N0"], factor_shapes(net.heads, net.widths)[0][1]
    forms = [f for f in ("tensor", "xi", "woodbury") if f in kernel_form_costs(D, P, N0, r)]
    chosen = choose_kernel_form(D, P, N0, r)
    if chosen != "woodbury":
        forms += [f"{chosen} autodiff", f"{chosen} before"]
    load = os.getloadavg()
    with x64(dtype == "float64"), threads.limits():
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
        out["speedup_vs_before"] = sec[f"{chosen} before"] / sec[chosen]
    print(f"{name:12s} {dtype}  r={r:2d}  " + "  ".join(f"{f} {1e3 * s:8.2f} ms" for f, s in sec.items())
          + f"   chosen {chosen} ({out['speedup_chosen_vs_tensor']:.2f}x vs tensor"
          + (f", {out['speedup_closed_form_derivative']:.2f}x vs autodiff" if "speedup_closed_form_derivative" in out
             else "") + (f", {out['speedup_vs_before']:.2f}x vs before" if "speedup_vs_before" in out else "")
          + f")   load {load[0]:.1f}", flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small cases, few repeats; output to a temp folder")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--per-round", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    cases = CASES
    if a.quick:
        cases = {"tiny": dict(heads=(2, 2), P=12, N0=6, T=4, width=3), "tiny r=1": dict(heads=(2, 2), P=40, N0=6, T=4, width=1)}
        a.rounds, a.per_round = 2, 2
    out_dir = a.out or (Path(tempfile.mkdtemp()) if a.quick else RESULTS)
    runs = [time_case(n, c, dt, a.rounds, a.per_round) for n, c in cases.items() for dt in ("float32", "float64")]
    record = dict(runs=runs, rounds=a.rounds, per_round=a.per_round, threads=threads.record(),
                  note="seconds per jitted value_and_grad of the wishart potential; median over rounds, forms interleaved")
    write_record(out_dir / "kernel_forms.json", record)


if __name__ == "__main__":
    main()
