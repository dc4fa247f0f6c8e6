"""The benchmarks (``benchmarks/``): one result envelope, ``--help`` everywhere, ``--quick`` runs that write it.

- every ``benchmarks/results/*.json`` is an envelope (``benchmarks/harness.py``: ``validate``), and the files it
  names lie beside it;
- every script with a ``__main__`` answers ``--help`` with exit 0 in under 10 s and writes nothing (the
  ``benchmarks/`` folder byte for byte the same afterwards); the scripts run in parallel subprocesses;
- the sampling benchmarks' cases (``benchmarks/cases.toml``) name problems, levers and settings that exist;
- slow: a ``--quick --out`` run of each script in :data:`QUICK` (2-50 CPU seconds each) writes an envelope of its
  own name, and ``report.py`` reads them. Left out, to keep the part near a minute on 2 cores (CPU seconds of a
  quick run in parentheses): ``run.py guided`` and ``run.py image_n10`` (40 and 60: the runner's code paths are
  ``guided_fresh``'s), ``bench_sampler`` (160), ``sbc`` (104), ``bench_correction`` (39: fresh processes),
  ``bench_cold_start`` (38: a cold ``bayes-attn theory`` compiles everything), ``bench_paper_step`` (18: the
  paper-size model), ``bench_solver`` (17); ``bench_contention`` starts one CPU-bound process per core,
  ``bench_sweep_dask`` two Dask clusters; ``bench_suite`` runs pytest itself (the suite within the suite);
- slow: the dry run of ``benchmarks/gpu.sh`` (the one command on a lent GPU machine) on the CPU, with ``gpu.py
  --quick`` (its stages in two worker processes, every code path) and without its tests.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import hashlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))
import harness  # noqa: E402  (benchmarks/harness.py)

RESULTS = sorted((BENCH / "results").glob("*.json"))
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if 'if __name__ == "__main__":' in p.read_text())
QUICK = {"solve_theory": ("bench_solve_theory", []), "rhat_null": ("bench_rhat_null", []),
         "guided_fresh": ("run", ["guided_fresh"])}
"""Benchmarks run with ``--quick`` (seconds each): the name of their result, their script and its arguments."""
HELP_SECONDS = 10.0
pytestmark = pytest.mark.xdist_group("benchmarks")


def run(script: Path, args: list[str], timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    """``script *args`` in a fresh Python process from the repository root (its code first on the path), no
    bytecode written; the process and its wall seconds."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, str(script), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=timeout)
    return out, time.perf_counter() - t0


def snapshot(folder: Path) -> dict[str, str]:
    """The SHA-256 of every file under ``folder`` (``__pycache__`` left out), by relative path."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


# ----------------------------------------------------------------------------
# the result files
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("path", RESULTS, ids=[p.name for p in RESULTS])
def test_result_file_is_an_envelope(path):
    record = json.loads(path.read_text())
    assert harness.validate(record) == []
    assert all((path.parent / name).is_file() for name in record.get("files", [])), record["files"]


def test_results_are_there():
    assert len(RESULTS) >= 20 and {"solver.json", "sampler.json", "cold_start.json"} <= {p.name for p in RESULTS}


def test_validate_can_fail():
    good = json.loads((BENCH / "results" / "solver.json").read_text())
    assert harness.validate(good) == []
    bad = {"schema": lambda r: r.update(schema="bayes_attn.benchmark/0"), "date": lambda r: r.update(date="today"),
           "results": lambda r: r.update(results=[1]), "machine.cpu_count": lambda r: r["machine"].pop("cpu_count"),
           "load": lambda r: [r["machine"].pop(k, None) for k in ("load_before", "load_after")],
           "headline": lambda r: r.update(headline={"name": "x", "value": "1", "unit": "s"}),
           "unknown key": lambda r: r.update(environment={}), "settings": lambda r: r.pop("settings")}
    for key, spoil in bad.items():
        record = copy.deepcopy(good)
        spoil(record)
        assert any(key in p for p in harness.validate(record)), key
    assert harness.validate([]) == ["not a JSON object"]
    assert len(harness.validate({})) == len(harness.REQUIRED) + 1  # each required key, and the schema


def test_ab_rounds_alternate_and_time_both():
    calls = []
    rows = harness.ab_rounds({"a": lambda r: calls.append(("a", r)) or time.sleep(0.02),
                              "b": lambda r: calls.append(("b", r))}, 3)
    assert calls == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2)]
    assert [r["first"] for r in rows] == ["a", "b", "a"]
    assert all(r["seconds"]["a"] >= 0.02 > r["seconds"]["b"] and r["ratio"] > 1 for r in rows)
    assert harness.ab_summary(rows)["min_ratio"] > 1


# ----------------------------------------------------------------------------
# --help
# ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def helped() -> tuple[dict, dict, dict]:
    """Every script's ``--help``, in parallel: ``{name: (process, seconds)}`` and the snapshots of ``benchmarks/``
    before and after."""
    before = snapshot(BENCH)
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = dict(zip([p.stem for p in SCRIPTS], pool.map(lambda p: run(p, ["--help"], 60), SCRIPTS), strict=True))
    return done, before, snapshot(BENCH)


def test_every_benchmark_has_a_main():
    names = {p.stem for p in SCRIPTS}
    assert {"bench_solver", "bench_sampler", "bench_cold_start", "bench_sweep_dask", "report"} <= names
    assert "harness" not in names


def internal_imports(source: str) -> list[str]:
    """The imports of ``bayes_attn._internal`` (in any spelling) in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [n for n in names if n == "bayes_attn._internal" or n.startswith("bayes_attn._internal.")][:1]
    return found


def test_no_benchmark_imports_the_internals():
    """The benchmarks measure the package as its users call it: no ``bayes_attn._internal`` (the harness has the
    few helpers they need, on JAX's and threadpoolctl's public switches)."""
    assert internal_imports("from bayes_attn import _internal\nimport bayes_attn._internal.threads\n"
                            "from bayes_attn._internal.precision import x64\nfrom bayes_attn import experiment\n") \
        == ["bayes_attn._internal", "bayes_attn._internal.threads", "bayes_attn._internal.precision"]
    found = {p.name: internal_imports(p.read_text()) for p in sorted(BENCH.glob("*.py"))}
    assert not {k: v for k, v in found.items() if v}


def test_harness_switches_precision_and_blas_threads_for_a_block(monkeypatch):
    import jax
    import jax.numpy as jnp
    from threadpoolctl import threadpool_info

    before = bool(jax.config.jax_enable_x64)
    for enabled, dtype in ((True, jnp.float64), (False, jnp.float32)):
        with harness.x64(enabled):
            assert jnp.ones(2).dtype == dtype
        assert bool(jax.config.jax_enable_x64) == before
    blas = lambda: {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}  # noqa: E731
    for name in harness.BLAS_ENV:
        monkeypatch.delenv(name, raising=False)
    with harness.one_blas_thread_here():
        assert blas() <= {1}
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")  # the user's choice wins: nothing is changed
    assert isinstance(harness.one_blas_thread_here(), contextlib.nullcontext)


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_help_is_fast_and_writes_nothing(script, helped):
    done, before, after = helped
    out, seconds = done[script.stem]
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage:" in out.stdout and "--help" in out.stdout
    assert seconds < HELP_SECONDS
    assert before == after


@pytest.mark.parametrize("script", [p for p in SCRIPTS if p.stem != "report"], ids=lambda p: p.stem)
def test_every_benchmark_has_quick_and_out(script, helped):
    out, _ = helped[0][script.stem]
    assert "--quick" in out.stdout and "--out" in out.stdout


# ----------------------------------------------------------------------------
# --quick
# ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, float, Path]]:
    """The scripts of :data:`QUICK` with ``--quick --out``, two at a time."""
    folder = tmp_path_factory.mktemp("bench_quick")

    def one(name: str):
        out, (script, args) = folder / f"{name}.json", QUICK[name]
        return (*run(BENCH / f"{script}.py", [*args, "--quick", "--out", str(out)], 300), out)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(QUICK, pool.map(one, QUICK), strict=True))


@pytest.mark.slow
@pytest.mark.validate  # every benchmark end to end at its quick size
@pytest.mark.parametrize("name", list(QUICK))
def test_quick_run_writes_an_envelope(name, quick_runs):
    out, seconds, path = quick_runs[name]
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads(path.read_text())
    assert harness.validate(record) == []
    assert record["benchmark"] == name and record["settings"]["quick"] is True
    assert record["results"] and record["headline"]["value"] == record["headline"]["value"]  # a number, not NaN
    assert {p.name for p in path.parent.iterdir()} >= {path.name}


@pytest.mark.slow
@pytest.mark.validate
def test_report_reads_the_quick_runs(quick_runs):
    paths = [str(p) for _, _, p in quick_runs.values()]
    out, _ = run(BENCH / "report.py", paths, 60)
    assert out.returncode == 0, out.stderr
    assert all(f"| {Path(p).name}" in out.stdout for p in paths)


def test_report_flags_a_file_that_is_no_envelope(tmp_path):
    (tmp_path / "old.json").write_text(json.dumps({"environment": {}, "results": []}))
    (tmp_path / "ok.json").write_text((BENCH / "results" / "solver.json").read_text())
    out, _ = run(BENCH / "report.py", ["--folder", str(tmp_path)], 60)
    assert out.returncode == 1 and "old.json" in out.stderr and "| ok.json" in out.stdout


# ----------------------------------------------------------------------------
# the GPU script's dry run
# ----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.validate  # the GPU harness end to end on the CPU
def test_gpu_script_dry_run(tmp_path):
    """``JAX_PLATFORMS=cpu GPU_SH_TESTS=0 bash benchmarks/gpu.sh --quick`` (the wheels of ``.whl/``, where
    scripts/gpu-wheels put them, into a temporary folder; no pytest inside, so that the suite does not run
    itself): exit 0, one envelope in ``$OUT`` whose every stage is ok and ran on the CPU, both platforms' workers
    named, a ratio for every pair and the headline. ~60-170 s on 2 cores (two workers compile every stage's
    programs; the second loads them from a shared cache)."""
    out_dir = tmp_path / "out"
    env = dict(os.environ, JAX_PLATFORMS="cpu", GPU_SH_TESTS="0", OUT=str(out_dir), PYTHON=sys.executable,
               GPU_SH_SITE=str(tmp_path / "site"), PYTHONDONTWRITEBYTECODE="1")
    before = snapshot(BENCH)
    done = subprocess.run(["bash", str(BENCH / "gpu.sh"), "--quick"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "default backend: cpu" in done.stdout and "== gpu.py: exit 0" in done.stdout, done.stdout[-3000:]
    record = json.loads((out_dir / "gpu.json").read_text())
    assert harness.validate(record) == []
    assert record["benchmark"] == "gpu" and record["settings"]["quick"] is True
    stages = record["results"]["stages"]
    assert list(stages) == record["settings"]["stages"] and len(stages) == 12  # gpu.QUICK_LABELS on both platforms
    failed = {name: s.get("error") or s.get("reason") for name, s in stages.items() if s["status"] != "ok"}
    assert not failed, failed
    machine = record["machine"]
    assert machine["device_worker"]["backend"] == machine["cpu_worker"]["backend"] == "cpu"
    assert machine["device"].startswith("cpu (cpu;") and machine["gpu"] is None
    assert set(record["results"]["speedups"]) == {name.rsplit(" @", 1)[0] for name in stages}
    assert record["headline"]["value"] > 0 and set(record["files"]) == {"gpu_device.log", "gpu_cpu.log"}
    assert snapshot(BENCH) == before


def test_the_cases_name_what_exists():
    """Every set of ``benchmarks/cases.toml`` resolves (problem, levers) and builds cases whose settings are
    ``SamplerSettings`` fields for registered samplers; its quick cases run on the tiny problem."""
    import dataclasses

    import bayes_attn as ba

    sys.path.insert(0, str(BENCH))
    import run as runner  # benchmarks/run.py

    cases = runner.load_cases()
    fields = {f.name for f in dataclasses.fields(ba.SamplerSettings)}
    assert {"image_n10", "guided", "guided_fresh"} <= set(cases["sets"])
    for name in cases["sets"]:
        for quick in (False, True):
            built = runner.cases_of(cases, name, quick)
            assert built, (name, quick)
            for c in built:
                assert set(c["settings"]) <= fields, (name, c["label"], set(c["settings"]) - fields)
                assert c["sampler"] in ba.SAMPLERS or c["sampler"] == "auto", c["sampler"]
                ba.SamplerSettings(name=c["sampler"]).replace(**c["settings"])  # every value accepted
            assert all(c["problem"] == "tiny" for c in built) == quick
    guided = runner.cases_of(cases, "guided", False)
    assert {c["place"] for c in guided if c["label"] == "collapsed"} == {10, 100}  # only_widths
    assert len(guided) == 3 * 7 + 2
    bad = dict(cases, sets={"x": dict(cases["sets"]["guided"], levers=["nope"])})
    with pytest.raises(ValueError, match="lever 'nope'"):
        runner.check_cases(bad)
