"""Benchmark: the damped-Newton theory solver against a first-order baseline.

Problem: minimise ``S / N_max`` (docs/theory.md §4) for the Fig. 2c Markov network
(D = 4 paths, P = 100 training sequences, temperature 0.01), ``Ua`` eliminated
by its closed form, for N in {10, 100, 1000}.

- ours: ``bayes_attn.theory`` damped Newton (default log-Cholesky coordinates;
  also timed in vech coordinates) with stop at max |∂(S/N_max)/∂U_l| <= 1e-8;
- baseline (like the paper): ``optax.adam`` (learning rate 0.1) on Cholesky
  factors of every ``U_l`` with log-diagonal, same action, same start (GP
  point); stop when max |∂(S/N_max)/∂U_l| <= 1e-5 or after 50 000 steps. The
  whole loop is one jit-compiled ``lax.while_loop``.

Both use the same precomputed path kernel; wall times exclude compilation
(reported separately) and the shared set-up (kernel precomputation, also
reported). Results: a printed table and ``benchmarks/results/solver.json``.

Run: ``.venv/bin/python benchmarks/bench_solver.py [--quick] [--out FILE]`` (under a minute; ``--quick``: N = 10,
one repeat, seconds).
"""

from __future__ import annotations

import argparse
import os

from harness import Record, parse, parser
from harness import headline as make_headline

WIDTHS = (10, 100, 1000)
TEMPERATURE = 0.01
TOL_OURS = 1e-8
TOL_ADAM = 1e-5
ADAM_LR = 0.1
ADAM_MAX_STEPS = 50_000
REPEATS = 5  # best of REPEATS timed runs, after compilation


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: N = 10, one repeat, Adam at most 2000 steps)."""
    ap = parser("solver", __doc__, "N = 10, one repeat, Adam at most 2000 steps")
    ap.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS))
    ap.add_argument("--repeats", type=int, default=REPEATS, help="best of this many timed runs")
    ap.add_argument("--adam-max-steps", type=int, default=ADAM_MAX_STEPS)
    a = parse(ap, argv)
    if a.quick:
        a.widths, a.repeats, a.adam_max_steps = [10], 1, 2000
    return a


def headline(results: dict) -> dict | None:
    """``solve_theory`` end to end, warm, at the largest width."""
    r = max(results["rows"], key=lambda r: r["N"])
    return make_headline(f"solve_theory warm, Fig. 2c N = {r['N']}", 1e3 * r["ours_solve_theory_end_to_end_s"], "ms")


if __name__ == "__main__":
    ARGS = parse_args()  # before JAX loads: --help answers at once and writes nothing

# Small matrices: one BLAS thread avoids oversubscription (on a shared 2-core
# machine multithreaded OpenBLAS made 100×100 solves ~100× slower). Applies
# to both methods alike.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from harness import times, x64  # noqa: E402

from bayes_attn import markov  # noqa: E402
from bayes_attn import theory as th  # noqa: E402
from bayes_attn.theory._coordinates import (  # noqa: E402
    log_cholesky,
    log_cholesky_to_vech,
    matrix_gradients,
    unpack,
    vech_weights,
)
from bayes_attn.theory._objective import reduced_action  # noqa: E402


# ----------------------------------------------------------------------------
# baseline: Adam on log-diagonal Cholesky factors
# ----------------------------------------------------------------------------
def make_adam(heads: tuple[int, ...], tol: float, max_steps: int):
    """Jitted Adam run from ``phi0`` (log-Cholesky coordinates, as the Newton solver's):
    returns (steps, phi, S/N_max, max matrix gradient) at the final point."""
    opt = optax.adam(ADAM_LR)
    weights = jnp.asarray(vech_weights(heads))

    def loss_and_grads(phi, problem):
        theta, vjp = jax.vjp(lambda p: log_cholesky_to_vech(p, heads), phi)
        f, g_theta = jax.value_and_grad(reduced_action)(theta, problem)
        (g_phi,) = vjp(g_theta)
        return f, g_phi, jnp.max(jnp.abs(g_theta / weights))  # matrix gradient, as for ours

    def run(phi0, problem):
        # carry: step, phi, optimiser state, and f, grad, max matrix grad *at phi*
        def cond(c):
            return (c[0] < max_steps) & (c[5] > tol)

        def body(c):
            k, phi, state, _, g, _ = c
            upd, state = opt.update(g, state, phi)
            phi = optax.apply_updates(phi, upd)
            f, g, gmax = loss_and_grads(phi, problem)
            return k + 1, phi, state, f, g, gmax

        f0, g0, m0 = loss_and_grads(phi0, problem)
        k, phi, _, f, _, gmax = jax.lax.while_loop(cond, body, (0, phi0, opt.init(phi0), f0, g0, m0))
        return k, phi, f, gmax

    return jax.jit(run)


_COMPILED: dict = {}


def run_adam(net, problem: th.Problem, Us0, tol: float, a: argparse.Namespace) -> dict:
    """Best of ``a.repeats`` runs; compiled once per (structure, tol) and reused across widths (widths are traced)."""
    phi0 = jnp.asarray(log_cholesky(Us0))
    key = (net.heads, problem.form, tol)
    compile_s = 0.0
    if key not in _COMPILED:
        t = time.perf_counter()
        _COMPILED[key] = make_adam(net.heads, tol, a.adam_max_steps).lower(phi0, problem).compile()
        compile_s = time.perf_counter() - t
    compiled = _COMPILED[key]
    times = []
    for _ in range(a.repeats):
        t = time.perf_counter()
        k, phi, f, g = jax.block_until_ready(compiled(phi0, problem))
        times.append(time.perf_counter() - t)
    U = np.asarray(unpack(log_cholesky_to_vech(phi, net.heads), net.heads)[0])
    return dict(s=min(times), compile_s=compile_s, steps=int(k), action=float(f), max_gradient=float(g),
                converged=bool(float(g) <= tol), U=U)


# ----------------------------------------------------------------------------
def best(fn, repeats: int) -> float:
    """The least wall seconds of ``repeats`` calls of ``fn``."""
    return min(times(fn, repeats))


def width_row(net, x, y, a: argparse.Namespace) -> dict:
    """Ours (Newton in log-Cholesky and vech coordinates, ``solve_theory`` end to end) and Adam at one width."""
    t = time.perf_counter()
    problem = th.make_problem(net, x, y, TEMPERATURE)
    jax.block_until_ready(problem)
    setup_s = time.perf_counter() - t
    Us0 = th.gp_order_parameters(net)[0]
    newton = th.NewtonSolver(tol=TOL_OURS, max_iter=200)
    newton_vech = th.NewtonSolver(tol=TOL_OURS, max_iter=200, coordinates="vech")
    t = time.perf_counter()
    res = newton.minimise(Us0, problem)  # the first call includes compilation (cached after the first width)
    ours_first_s = time.perf_counter() - t
    ours_s = best(lambda: newton.minimise(Us0, problem), a.repeats)
    ours_gmax = max(np.abs(G).max() for G in matrix_gradients(res.grad, net.heads))
    newton_vech.minimise(Us0, problem)  # the same Newton solver in vech coordinates (the entries of U_l)
    vech_s = best(lambda: newton_vech.minimise(Us0, problem), a.repeats)
    res_vech = newton_vech.minimise(Us0, problem)
    # solve_theory as a user calls it (path inputs, kernel, solve, result), warm: median of repeats
    end_to_end_s = float(np.median(times(lambda: th.solve_theory(net, x, y, temperature=TEMPERATURE), a.repeats)))
    sol = th.solve_theory(net, x, y, temperature=TEMPERATURE)
    adam, adam8 = (run_adam(net, problem, Us0, tol, a) for tol in (TOL_ADAM, TOL_OURS))  # its tolerance, and ours
    row = {"N": net.widths[0], "setup_s": setup_s, "ours_s": ours_s, "ours_first_call_s_incl_compile": ours_first_s,
           "ours_solve_theory_end_to_end_s": end_to_end_s, "ours_iterations": res.iterations,
           "ours_converged": res.converged, "ours_action": res.value, "ours_max_gradient": float(ours_gmax),
           "ours_hessian_min_eigenvalue": float(np.linalg.eigvalsh(res.hess)[0]), "ours_vech_coordinates_s": vech_s,
           "ours_vech_coordinates_iterations": res_vech.iterations, "ours_vech_coordinates_action": res_vech.value}
    row |= {f"adam_{k}": adam[k] for k in ("s", "compile_s", "steps", "converged", "action", "max_gradient")}
    row |= {"action_adam_minus_ours": adam["action"] - res.value,
            "max_abs_U_difference": float(np.abs(adam["U"] - sol.U).max()),
            "speedup_adam_over_ours": adam["s"] / ours_s, "ours_compile_s": ours_first_s - ours_s}
    row |= {f"adam_tol1e-8_{k}": adam8[k] for k in ("s", "steps", "compile_s", "converged", "action", "max_gradient")}
    row["speedup_same_tol"] = adam8["s"] / ours_s
    print(f"N={row['N']}: ours {ours_s * 1e3:.1f} ms ({res.iterations} it; solve_theory end to end "
          f"{end_to_end_s * 1e3:.0f} ms), adam {adam['s']:.3f} s ({adam['steps']} steps), speed-up "
          f"{row['speedup_adam_over_ours']:.1f}x; adam to tol {TOL_OURS:g}: {adam8['s']:.2f} s ({adam8['steps']} "
          f"steps, max|g| {adam8['max_gradient']:.1e})", flush=True)
    return row


def print_table(rows: list[dict]) -> None:
    header = (
        f"{'N':>5} | {'ours ms':>8} {'it':>3} {'action':>14} {'max|g|':>8} | "
        f"{'adam ms':>8} {'steps':>6} {'action':>14} {'max|g|':>8} | {'ΔS adam-ours':>12} {'speed-up':>9} | "
        f"{'adam@1e-8 s':>11} {'steps':>6} {'max|g|':>8} {'speed-up':>9}"
    )
    print(f"\n{header}\n{'-' * len(header)}")
    for r in rows:
        print(
            f"{r['N']:>5} | {r['ours_s'] * 1e3:8.2f} {r['ours_iterations']:>3} {r['ours_action']:14.10f} "
            f"{r['ours_max_gradient']:8.1e} | {r['adam_s'] * 1e3:8.2f} {r['adam_steps']:>6} {r['adam_action']:14.10f} "
            f"{r['adam_max_gradient']:8.1e} | {r['action_adam_minus_ours']:12.2e} "
            f"{r['speedup_adam_over_ours']:8.1f}x | "
            f"{r['adam_tol1e-8_s']:11.2f} {r['adam_tol1e-8_steps']:>6} {r['adam_tol1e-8_max_gradient']:8.1e} "
            f"{r['speedup_same_tol']:8.0f}x"
        )
    print(f"\ncompilation (once, reused for every N): ours {rows[0]['ours_compile_s']:.2f} s, adam "
          f"{rows[0]['adam_compile_s']:.2f} s (tol {TOL_ADAM:g}) + {rows[0]['adam_tol1e-8_compile_s']:.2f} s "
          f"(tol {TOL_OURS:g})")


def main(a: argparse.Namespace) -> dict:
    """Run the benchmark (in float64, as the theory), print the table, write the envelope."""
    record = Record(a, problem="Fig. 2c Markov network, D=4, P=100, temperature 0.01, S/N_max with Ua eliminated",
                    ours="damped Newton in log-Cholesky coordinates (also vech: ours_vech_*), analytic data-term "
                         f"Hessian, tol {TOL_OURS} (best of {a.repeats})",
                    baseline=f"optax.adam lr {ADAM_LR} on log-diagonal Cholesky factors, jit lax.while_loop, tol "
                             f"{TOL_ADAM} or {a.adam_max_steps} steps; also run to our tol {TOL_OURS} (adam_tol1e-8_*)",
                    timing="wall seconds, best of repeats, excluding compilation (*_compile_s, nonzero only for the "
                           "first N) and the shared kernel set-up (setup_s)")
    with x64(True):
        task, net0 = markov.fig2c(10)
        x, y, _, _ = task.generate()
        rows = [width_row(net0.with_width(N), x, y, a) for N in a.widths]
    print_table(rows)
    results = {"rows": rows}
    record.write(results, headline=headline(results))
    return results


if __name__ == "__main__":
    main(ARGS)
