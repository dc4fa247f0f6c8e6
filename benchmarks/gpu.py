"""GPU against CPU on one machine: the samplers at the image scale and at large width, the theory solve and the
paper-size training step.

Each measurement runs twice, on the accelerator JAX finds (``device``: the GPU of a lent machine) and on the same
machine's CPU (``cpu``: ``JAX_PLATFORMS=cpu``), each platform in a worker process of its own (``--worker``; the
stages are in ``benchmarks/gpu_stages.py``; CPU devices as ``bayes-attn`` sets them, so the CPU's chains run in
parallel and the GPU's vectorized, as ``chain_method="auto"`` chooses), the two alternating so that every pair is
complete when time runs out. With ``JAX_PLATFORMS=cpu`` set both workers run on the CPU: the dry run.

Stages (the image task's scale: the landed Fig. 3 model, P = 600, 16 paths, 200 test episodes), in the order of
:data:`ORDER` (each on the device, then the CPU, but the CPU's N = 10 NUTS after ``laplace-is N=100``):

1. ``gradient``: one ``wishart`` gradient (a leapfrog step of one chain) at N = 10 and 100, float32 and float64;
2. ``wishart N=100 float32``, ``wishart N=10 float32``: NUTS as ``sample_posterior`` runs it, with the CPU spec's
   settings (``models/omniglot_oneshot.toml``: 4 chains × (150 + 350), tree depth 5; the CPU:
   ``--cpu-warmup-fraction`` of the warm-up, at least 50, and ``--cpu-fraction`` of the draws, at least 30):
   set-up, the expansion's start, warm-up, sampling and the draws of ``f``, each with its compile seconds;
   leapfrog steps, useful gradients per second over all chains (the rate compared), bulk ESS and R-hat of ``U``
   (ArviZ), ESS/s;
3. ``train``: one optimiser step of the paper-size model (``models/omniglot_paper.toml``);
4. ``laplace-is N=100 float32``: ``sample_posterior``, 4 × 2500 proposals (the CPU: ``--cpu-fraction``);
5. ``theory``: ``solve_theory`` (float64) at N = 100 twice, N = 10, and twice with the §8 correction;
6. ``laplace-is N=10 float32``, ``wishart N=10 float64``;
7. ``wishart fig2c N=10000 float32``, ``collapsed fig2c N=1000 float32``: the exact samplers at large width on the
   Fig. 2c network (P = 100 training sequences, temperature 0.01, 4 chains × (500 + 500), tree depth 10), NUTS
   as in 2 (``wishart``'s cost should not grow with N: 14 sampled dimensions at any width; ``collapsed``'s does).

A stage starts only with ``--min-start-s`` of ``--budget-s`` left (else it is recorded as skipped, with the
reason) and is stopped at ``--stage-cap-s`` or at the budget's end (recorded as ``timeout``; its worker is started
afresh for the next stage); an error is recorded with its traceback and the next stage runs. The envelope
(``--out``, default ``$OUT/gpu.json`` where ``OUT`` is set, else ``benchmarks/results/gpu.json``) is rewritten
after every stage, with the devices under ``machine``, each pair's ratios under ``results.speedups`` (CPU over
device for times, device over CPU for rates), the CPU's seconds for the device's NUTS runs under
``results.projected``, and the headline: ``wishart`` at N = 100, the device's gradients per second over the CPU's.
The workers' standard error goes to ``<out stem>_device.log`` and ``<out stem>_cpu.log`` beside it.

    bash benchmarks/gpu.sh                                         # on a lent GPU: wheels, devices, tests, this
    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/gpu.py --quick   # the dry run (tiny sizes, both workers on CPU)
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from harness import REPO, Record, parser, resolve_out
from harness import headline as make_headline

PLATFORMS = ("device", "cpu")
MARK = "@@gpu-stage@@ "
"""Prefix of a worker's JSON lines on its standard output (anything else there is the libraries' printing)."""
HEADLINE = ("wishart N=100 float32", "gradients_per_s")
ORDER = ("gradient @device", "gradient @cpu", "wishart N=100 float32 @device", "wishart N=100 float32 @cpu",
         "wishart N=10 float32 @device", "train @device", "train @cpu", "laplace-is N=100 float32 @device",
         "laplace-is N=100 float32 @cpu", "wishart N=10 float32 @cpu", "theory @device", "theory @cpu",
         "laplace-is N=10 float32 @device", "laplace-is N=10 float32 @cpu", "wishart N=10 float64 @device",
         "wishart N=10 float64 @cpu", "wishart fig2c N=10000 float32 @device", "wishart fig2c N=10000 float32 @cpu",
         "collapsed fig2c N=1000 float32 @device", "collapsed fig2c N=1000 float32 @cpu")
"""The stages by value, each label's device run soon followed by its CPU run: what the budget leaves out is at the
end (the CPU's N = 10 NUTS, dearest on the CPU, after the cheaper pairs)."""
MIN_START_S = {"gradient": 15.0, "train": 15.0, "sample": 20.0, "theory": 25.0, "nuts": 40.0}
"""Least budget left for a stage of each kind to start (a rough floor of its cost on the device; below it the stage
is skipped, leaving the time to a cheaper one after it)."""
STARTUP_S = 90.0
"""Most seconds a worker may take to start (load JAX, find its devices)."""
QUICK_LABELS = ("theory", "gradient", "wishart N=100 float32", "train", "laplace-is N=100 float32",
                "wishart fig2c N=10000 float32")
"""``--quick`` runs one label of each kind (every code path; each compiles once per worker)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick``: 40 training episodes, 10 test episodes, 2 chains × (10 + 10) draws, a tiny
    training model)."""
    ap = parser("gpu", __doc__, "P = 40, 10 test episodes, 2 chains x (10 + 10) draws, a tiny model's step")
    ap.add_argument("--budget-s", type=float, default=300.0, help="wall seconds for all stages (default 300)")
    ap.add_argument("--stage-cap-s", type=float, default=150.0, help="most wall seconds of one stage (default 150)")
    ap.add_argument("--min-start-s", type=float, default=15.0,
                    help="a stage starts only with this much of the budget left (default 15; more for dearer kinds)")
    ap.add_argument("--cpu-fraction", type=float, default=0.1,
                    help="the CPU's share of the device's draws (default 0.1; its rates are per gradient or per draw)")
    ap.add_argument("--cpu-warmup-fraction", type=float, default=0.34,
                    help="the CPU's share of the device's NUTS warm-up (default 0.34; at least 50)")
    ap.add_argument("--stages", nargs="+", metavar="PREFIX", help="only the stages whose names start so")
    ap.add_argument("--worker", choices=PLATFORMS, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return a
    if a.out is None and os.environ.get("OUT") and not a.quick:
        a.out = Path(os.environ["OUT"]) / "gpu.json"
    return resolve_out(a)


# ----------------------------------------------------------------------------
# the plan
# ----------------------------------------------------------------------------
def spec_sampler() -> dict:
    """The CPU spec's ``[sampler]`` table (``models/omniglot_oneshot.toml``: what ``bayes-attn prune`` samples)."""
    import tomllib

    return tomllib.loads((REPO / "models/omniglot_oneshot.toml").read_text())["sampler"]


def plan(a: argparse.Namespace) -> list[dict]:
    """``[{name, label, platform, kind, params}]`` in the order of :data:`ORDER` (``--stages``: those whose label
    starts so; ``--quick``: one label of each kind, :data:`QUICK_LABELS`, at tiny sizes)."""
    s = spec_sampler()
    q = a.quick
    data = dict(p_train=40, n_test=10) if q else dict(p_train=None, n_test=200)
    nuts = dict(chains=2, warmup=10, samples=10, max_tree_depth=3) if q else dict(
        chains=s["num_chains"], warmup=s["num_warmup"], samples=s["num_samples"], max_tree_depth=s["max_tree_depth"])
    guided = dict(chains=2, samples=50) if q else dict(chains=s["num_chains"], samples=s["guided_samples"])
    fig2c = nuts if q else dict(chains=4, warmup=500, samples=500, max_tree_depth=10)
    labels = {
        "gradient": ("gradient", dict(widths=[100], dtypes=["float32"], calls=3) if q else
                     dict(widths=[10, 100], dtypes=["float32", "float64"], calls=30)),
        "wishart N=100 float32": ("nuts", dict(N=100, dtype="float32", **nuts)),
        "wishart N=10 float32": ("nuts", dict(N=10, dtype="float32", **nuts)),
        "train": ("train", dict(short=1, long=2, tiny=True) if q else dict(short=2, long=8)),
        "laplace-is N=100 float32": ("sample", dict(sampler="laplace-is", N=100, dtype="float32", **guided)),
        "theory": ("theory", dict(widths=[100], correction=False) if q else dict(widths=[100, 10], correction=True)),
        "laplace-is N=10 float32": ("sample", dict(sampler="laplace-is", N=10, dtype="float32", **guided)),
        "wishart N=10 float64": ("nuts", dict(N=10, dtype="float64", **nuts)),
        # the exact samplers at large width on Fig. 2c (P = 100; 4 chains x (500 + 500) on the device)
        "wishart fig2c N=10000 float32": ("nuts", dict(N=10000, dtype="float32", problem="fig2c", **fig2c)),
        "collapsed fig2c N=1000 float32": ("nuts", dict(N=1000, dtype="float32", problem="fig2c", sampler="collapsed",
                                                         **fig2c)),
    }
    out = []
    for name in ORDER:
        label, platform = name.rsplit(" @", 1)
        kind, params = labels[label]
        if (a.stages and not any(label.startswith(p) for p in a.stages)) or (q and label not in QUICK_LABELS):
            continue
        params = params | (data if kind != "train" else {})
        if params.get("problem") == "fig2c":  # its own data: P = 100 sequences (40 when quick)
            params = params | {"p_train": data["p_train"] or 100, "n_test": data["n_test"]}
        out.append({"name": name, "label": label, "platform": platform, "kind": kind,
                    "params": params if platform == "device" or q else cpu_params(kind, params, a)})
    return out


def cpu_params(kind: str, params: dict, a: argparse.Namespace) -> dict:
    """The CPU's smaller share of a stage (its rates are per gradient, per draw, per step or per call)."""
    p = dict(params)
    if kind == "nuts":  # a warm-up long enough to adapt the step size (20 was not), fewer draws
        p["warmup"] = max(50, round(p["warmup"] * a.cpu_warmup_fraction))
        p["samples"] = max(30, round(p["samples"] * a.cpu_fraction))
    elif kind == "sample":
        p["samples"] = max(100, round(p["samples"] * a.cpu_fraction))
    elif kind == "train":
        p = dict(short=1, long=3)
    elif kind == "gradient":
        p["calls"] = 10
    return p


# ----------------------------------------------------------------------------
# the workers
# ----------------------------------------------------------------------------
class Worker:
    """One platform's worker process: stages sent as JSON lines on its standard input, results read back."""

    def __init__(self, platform: str, log: Path, **env: str) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1", **env)
        if platform == "cpu":
            env["JAX_PLATFORMS"] = "cpu"
        self.platform, self.log = platform, log
        self.log_file = open(log, "a")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", platform], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log_file, text=True, env=env, cwd=REPO,
                                     start_new_session=True)
        self.lines: queue.Queue = queue.Queue()
        self.tail: list[str] = []
        self.partial: dict | None = None  # the running stage's last partial result
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def receive(self, timeout: float) -> dict:
        """The worker's next JSON line; ``{"status": "timeout" | "error", ...}`` when none comes in time or it ended."""
        deadline = time.perf_counter() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.perf_counter()))
            except queue.Empty:
                self.stop()
                return {"status": "timeout", "error": f"no answer within {timeout:.0f} s; the worker was stopped",
                        "partial": self.partial}
            if line is None:
                code = self.proc.wait()
                return {"status": "error", "error": f"the worker ended (exit {code}); its log ends: "
                        + log_tail(self.log) + " | stdout: " + " ".join(self.tail[-5:])[-500:],
                        "partial": self.partial}
            if line.startswith(MARK):
                answer = json.loads(line[len(MARK):])
                if answer.get("status") != "partial":
                    return answer | ({"partial": self.partial} if answer["status"] != "ok" and self.partial else {})
                self.partial = answer["result"]
                continue
            self.tail = (self.tail + [line.strip()])[-20:]

    def call(self, stage: dict, timeout: float) -> dict:
        self.partial = None
        try:
            self.proc.stdin.write(json.dumps({"kind": stage["kind"], "params": stage["params"]}) + "\n")
            self.proc.stdin.flush()
        except OSError as err:
            return {"status": "error", "error": f"the worker is gone: {err}"}
        return self.receive(timeout)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, wait: float = 0.0) -> None:
        """Close its input (it ends by itself), wait ``wait`` seconds, then kill its process group."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=wait)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log_file.close()


def log_tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def worker_main(platform: str) -> None:
    """A worker: set its CPU devices as ``bayes-attn`` does, load JAX, answer each stage on standard input."""
    from bayes_attn.cli import host_devices

    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    os.environ["XLA_FLAGS"] = " ".join([f"--xla_force_host_platform_device_count={host_devices(4)}", *flags])
    import gpu_stages

    def emit(obj: dict) -> None:
        print(MARK + json.dumps(obj, default=float), flush=True)

    gpu_stages.REPORT = lambda fields: emit({"status": "partial", "result": fields})
    emit({"status": "ok", "hello": gpu_stages.device_info()})
    for line in sys.stdin:
        stage = json.loads(line)
        try:
            emit({"status": "ok", "result": gpu_stages.STAGES[stage["kind"]](**stage["params"])})
        except Exception:  # noqa: BLE001 (recorded with what it measured before; the next stage runs)
            emit({"status": "error", "error": traceback.format_exc()[-3000:]})


# ----------------------------------------------------------------------------
# the run
# ----------------------------------------------------------------------------
def nvidia_smi() -> dict | None:
    """GPU name, memory, driver (``nvidia-smi``), or ``None`` where there is none."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as err:
        return {"error": str(err)}
    return {"gpus": [dict(zip(("name", "memory", "driver"), (v.strip() for v in row.split(",")), strict=False))
                     for row in out.splitlines()]}


def speedups(stages: dict) -> dict:
    """For each label run on both platforms: CPU over device for numbers where lower is better, device over CPU
    where higher is."""
    out: dict = {}
    for name, rec in stages.items():
        if not name.endswith(" @device") or rec.get("status") != "ok":
            continue
        label = name.removesuffix(" @device")
        cpu = stages.get(f"{label} @cpu", {})
        if cpu.get("status") != "ok":
            continue
        for key, (value, better) in rec["result"].get("compare", {}).items():
            other = cpu["result"].get("compare", {}).get(key)
            if other and value and other[0]:
                out.setdefault(label, {})[key] = other[0] / value if better == "lower" else value / other[0]
    return out


def projected(stages: dict) -> dict:
    """For each NUTS label run on both platforms: the device's run (compilation excluded) beside the CPU's
    seconds for the same leapfrog steps (warm-up and draws) at the CPU's measured gradients per second."""
    out = {}
    for name, rec in stages.items():
        cpu = stages.get(name.removesuffix(" @device") + " @cpu", {})
        if name.endswith(" @device") and rec.get("status") == cpu.get("status") == "ok" \
                and "gradients_total" in rec["result"]:
            dev = rec["result"]
            out[name.removesuffix(" @device")] = {
                "device_run_seconds": dev["run_seconds"], "device_compile_seconds": dev["compile_seconds"],
                "cpu_seconds_for_the_same_gradients": dev["gradients_total"] / cpu["result"]["gradients_per_s"],
                "cpu_compile_seconds": cpu["result"]["compile_seconds"]}
    return out


def headline(results: dict) -> dict | None:
    value = results["speedups"].get(HEADLINE[0], {}).get(HEADLINE[1])
    return make_headline(f"{HEADLINE[0]}: the device's gradients per second over the CPU's (same machine)", value,
                         "x")


def show(name: str, rec: dict) -> None:
    """One line per stage: its status, seconds and main numbers (or its reason, or its error's last line)."""
    r = rec.get("result", {})
    nums = {k: r[k] for k in ("wall_seconds", "compile_seconds", "gradients_per_s", "mean_steps", "seconds_per_draw",
                              "min_ess_bulk_U", "max_rhat_U", "ess_per_s_run", "pareto_k")
            if isinstance(r.get(k), (int, float))}
    nums = nums or {k: v[0] for k, v in r.get("compare", {}).items()}
    text = "  ".join(f"{k} {v:.4g}" for k, v in nums.items())
    why = (rec.get("error") or rec.get("reason") or "").strip().splitlines()
    print(f"{name:32s} {rec['status']:8s} {rec.get('seconds', 0):6.1f} s  {text}{'  ' + why[-1] if why else ''}",
          flush=True)


def quick_env(a: argparse.Namespace) -> dict[str, str]:
    """``--quick``: the workers share a persistent compilation cache (a temporary folder; the second loads what
    the first compiled) and compile without LLVM's optimisation (as ``make test-fast``); nothing otherwise."""
    if not a.quick:
        return {}
    if not getattr(a, "cache", None):
        a.cache = tempfile.mkdtemp(prefix="gpu_quick_jax-")
    return {"JAX_COMPILATION_CACHE_DIR": a.cache, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"}


def log(a: argparse.Namespace, platform: str) -> Path:
    """A worker's log (its standard error), beside the result file."""
    return a.out.with_name(f"{a.out.stem}_{platform}.log")


def describe(workers: dict) -> dict:
    """``machine``'s part: each worker's backend, devices and versions (the last one started), and ``device``: the
    device worker's in words."""
    out = {f"{p}_worker": ws[-1].get("hello") for p, ws in workers.items()}
    dev = out.get("device_worker")
    if dev:
        out["device"] = f"{dev['device_kind']} ({dev['backend']}; jax.devices() = {', '.join(dev['devices'])})"
    return out


def run_stage(stage: dict, workers: dict, a: argparse.Namespace, left: float, results: dict) -> dict:
    """One stage on its platform's worker (started afresh where needed)."""
    platform = stage["platform"]
    w = workers.get(platform)
    if w is None or not w.alive():
        w = workers[platform] = Worker(platform, log(a, platform), **quick_env(a))
        t0 = time.perf_counter()
        hello = w.receive(min(STARTUP_S, left))
        results["workers"].setdefault(platform, []).append(hello | {"seconds": time.perf_counter() - t0})
        if hello.get("status") != "ok":
            workers.pop(platform).stop()
            return {"status": "error", "error": "the worker did not start: " + hello.get("error", "")}
        left -= time.perf_counter() - t0
        print(f"[{platform}] backend {hello['hello']['backend']}: {hello['hello']['devices']}", flush=True)
    rec = w.call(stage, max(1.0, min(a.stage_cap_s, left)))
    if rec["status"] != "ok" and not w.alive():
        workers.pop(platform).stop()
    return rec


def main(a: argparse.Namespace) -> dict:
    """Every stage of :func:`plan` within the budget; the envelope rewritten after each."""
    stages = plan(a)
    record = Record(a, stages=[s["name"] for s in stages], jax_platforms=os.environ.get("JAX_PLATFORMS"))
    results: dict = {"stages": {}, "workers": {}, "speedups": {}}
    hardware = {"gpu": nvidia_smi()}
    workers: dict[str, Worker] = {}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    for platform in PLATFORMS:  # this run's logs only
        log(a, platform).write_text("")
    t0 = time.perf_counter()
    print(f"gpu.py: {len(stages)} stages, budget {a.budget_s:.0f} s, JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS')}",
          flush=True)
    try:
        for stage in stages:
            left = a.budget_s - (time.perf_counter() - t0)
            t1 = time.perf_counter()
            need = max(a.min_start_s, 0.0 if a.quick else MIN_START_S[stage["kind"]])
            if left < need:
                rec = {"status": "skipped", "reason": f"budget spent: {left:.0f} s left of {a.budget_s:.0f} s, "
                                                      f"under the {need:.0f} s this stage needs at least"}
            else:
                try:
                    rec = run_stage(stage, workers, a, left, results)
                except Exception:  # noqa: BLE001 (this script's own failure: recorded, the next stage runs)
                    rec = {"status": "error", "error": traceback.format_exc()[-3000:]}
            rec |= {"platform": stage["platform"], "params": stage["params"], "seconds": time.perf_counter() - t1}
            results["stages"][stage["name"]] = rec
            results["speedups"] = speedups(results["stages"])
            results["projected"] = projected(results["stages"])
            hardware |= describe(results["workers"])
            record.write(results, headline=headline(results), hardware=hardware,
                         files=[log(a, p).name for p in PLATFORMS if log(a, p).is_file()])
            show(stage["name"], rec)
    finally:
        for w in workers.values():
            w.stop(wait=10.0)
        if getattr(a, "cache", None):
            shutil.rmtree(a.cache, ignore_errors=True)
    print("speed-ups (CPU over device for times, device over CPU for rates):", flush=True)
    for label, ratios in results["speedups"].items():
        print(f"  {label:28s} " + "  ".join(f"{k} {v:.3g}x" for k, v in ratios.items()), flush=True)
    for label, p in results.get("projected", {}).items():
        print(f"  {label:28s} device run {p['device_run_seconds']:.1f} s (+ {p['device_compile_seconds']:.1f} s "
              f"compiling); the CPU for the same gradients {p['cpu_seconds_for_the_same_gradients']:.1f} s "
              f"(+ {p['cpu_compile_seconds']:.1f} s)", flush=True)
    print(f"gpu.py: {time.perf_counter() - t0:.0f} s", flush=True)
    return results


if __name__ == "__main__":
    ARGS = parse_args()
    if ARGS.worker:
        worker_main(ARGS.worker)
    else:
        main(ARGS)
