"""The bayes-attn command (bayes_attn.cli): default folders, usage errors and one-line failures, logging."""

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import xarray as xr
from conftest import FAST, TINY, snapshot_tree
from conftest import forbid_calls as _forbid
from conftest import one_line as _one_line
from conftest import spec_file as _spec_file

import bayes_attn as ba
from bayes_attn import cli, experiment
from bayes_attn._internal import outputs
from bayes_attn.spec import spec_from_dict


def test_theory_sample_and_run_have_their_own_default_folders(tmp_path, monkeypatch):
    from bayes_attn.runs import _pipeline as pipeline
    from bayes_attn.sweep import _table as table

    path = _spec_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["theory", str(path)]) == 0
    theory = tmp_path / "runs" / "tiny-N3-theory"
    before = snapshot_tree(theory)
    assert "theory.nc" in before
    used = {}

    def record(command):
        def output_folder(folder, *a, **k):
            used[command] = Path(folder)
            raise ValueError("stop before computing")
        return output_folder

    for command, module in (("sample", pipeline), ("run", pipeline), ("sweep", table)):
        monkeypatch.setattr(module.outputs, "output_folder", record(command))
        assert cli.main([command, str(path), *FAST]) == cli.EXIT_USAGE
    assert used == {"sample": Path("runs/tiny-N3-sample"), "run": Path("runs/tiny-N3"),
                    "sweep": Path("runs/tiny-sweep")}
    assert snapshot_tree(theory) == before


@pytest.mark.parametrize("case", ["missing", "file", "no_zip"])
def test_prune_bad_data_dir_is_one_line(tmp_path, capsys, monkeypatch, case):
    from bayes_attn.oneshot import _data as data

    (tmp_path / "a_file").write_text("x")
    (tmp_path / "empty").mkdir()
    where = {"missing": tmp_path / "nope", "file": tmp_path / "a_file", "no_zip": tmp_path / "empty"}[case]
    _forbid(monkeypatch, (data, "datasets"))
    assert cli.main(["prune", "--data-dir", str(where), "--out", str(tmp_path / "p")]) == cli.EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert "data_dir" in line and {"missing": "does not exist", "file": "is a file", "no_zip": "lacks"}[case] in line
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("change", [{"n_train": 10**8}, {"feature_dim": 10**7}])
def test_huge_task_is_refused_before_allocating(tmp_path, capsys, change):
    path = tmp_path / "big.toml"
    path.write_text(spec_from_dict(TINY).to_toml().replace("n_train = 12", f"n_train = {change.get('n_train', 12)}")
                    .replace("feature_dim = 8", f"feature_dim = {change.get('feature_dim', 8)}"))
    assert cli.main(["theory", str(path), "--out", str(tmp_path / "o")]) == cli.EXIT_USAGE
    assert "of memory" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("argv, match", [(["theory", "--width", str(10**23)], "--width must be an integer between"),
                                         (["sample", "--seed", str(2**70)], "--seed must be an integer between"),
                                         (["sweep", "--widths", "3", str(10**23)],
                                          "--widths must be an integer between")])
def test_huge_width_or_seed_is_a_usage_error(capsys, monkeypatch, argv, match):
    from bayes_attn import spec

    _forbid(monkeypatch, (spec.Spec, "data"))  # refused before the data are made (not timed: a loaded machine)
    assert cli.main(argv) == cli.EXIT_USAGE
    assert match in _one_line(capsys.readouterr().err)
    with pytest.raises(ValueError, match=r"\[sampler\] seed must be an integer between"):
        spec_from_dict(TINY | {"sampler": TINY["sampler"] | {"seed": 2**70}})


def test_one_chain_is_refused_before_computing(tmp_path, capsys, monkeypatch):
    """A verdict checks R-hat, which one chain cannot give (ArviZ: NaN): ``--chains 1`` (or a spec's
    ``num_chains = 1``) is refused before computing, naming the argument, rather than always inconclusive with
    the advice to sample longer (issue 53)."""

    _forbid(monkeypatch, (ba.posterior, "sample_posterior"), (experiment, "solve_theory"))
    for command in ("sample", "run", "sweep"):
        argv = [command, str(_spec_file(tmp_path)), "--out", str(tmp_path / command), *FAST, "--chains", "1"]
        assert cli.main(argv) == cli.EXIT_USAGE
        line = _one_line(capsys.readouterr().err)
        assert "--chains" in line and "at least 2" in line and "R-hat" in line, line
        assert not (tmp_path / command).exists()
    one = _spec_file(tmp_path, TINY | {"sampler": TINY["sampler"] | {"num_chains": 1}})
    assert cli.main(["sample", str(one), "--out", str(tmp_path / "o"), "--no-progress"]) == cli.EXIT_USAGE
    assert "sampler.num_chains) must be at least 2" in _one_line(capsys.readouterr().err)


def test_temperature_out_of_the_dtypes_range_is_refused_before_computing(tmp_path, capsys, monkeypatch):
    """``--dtype float32 --temperature 1e39`` (past float32's largest number) is a one-line error naming the
    temperature and the dtype before anything is computed, not ArviZ's failure after sampling (issue 53)."""

    _forbid(monkeypatch, (ba.posterior, "sample_posterior"), (experiment, "solve_theory"))
    for command, temperature in (("sample", "1e39"), ("run", "1e39"), ("sample", "1e-25"), ("sweep", "1e30")):
        argv = [command, str(_spec_file(tmp_path)), "--out", str(tmp_path / command), *FAST, "--dtype", "float32",
                "--temperatures" if command == "sweep" else "--temperature", temperature]
        assert cli.main(argv) == cli.EXIT_USAGE
        line = _one_line(capsys.readouterr().err)
        assert "temperature" in line and "float32" in line, line
    from bayes_attn._internal.precision import check_temperature

    assert check_temperature(1e39, "float64") == 1e39 and check_temperature(0.01, "float32") == 0.01
    for bad in (float("inf"), float("nan"), 0.0, -1.0):
        with pytest.raises(ValueError, match="temperature"):
            check_temperature(bad, "float32")


def test_unconverged_theory_exits_3_in_theory_and_sweep(tmp_path, capsys):
    """Inputs large enough that the solve stalls at the rounding level of S, yet inside the scale check
    (``Network.check_scale``: prior variance over temperature about 1e11 of the 1e12 accepted)."""
    data = TINY | {"task": TINY["task"] | {"noise_perp": 1e5},
                   "compare": TINY["compare"] | {"widths": [3], "sample_widths": []}}
    path = _spec_file(tmp_path, data)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        assert cli.main(["theory", str(path), "--out", str(tmp_path / "t")]) == cli.EXIT_DIAGNOSTICS
    err = capsys.readouterr().err
    assert "WARNING: inconclusive: the theory did not converge" in err and "Traceback" not in err
    assert not bool(ba.load_theory(tmp_path / "t" / "theory.nc").converged)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        assert cli.main(["sweep", str(path), "--out", str(tmp_path / "s"), "--no-progress"]) == cli.EXIT_DIAGNOSTICS
    assert "N=3, T=0.1: the theory is not a solution" in capsys.readouterr().err
    assert json.loads((tmp_path / "s" / "manifest.json").read_text())["verdict"] == "inconclusive"


# a huge number of chains neither creates a device per chain nor looks hung
def test_host_devices_are_capped():
    cores = os.cpu_count() or 1
    assert cli.host_devices(100000) == max(cli.MAX_HOST_DEVICES, cores)
    assert cli.host_devices(8) == max(8, cores) and cli.host_devices(None) == max(4, cores)


def test_disk_full_is_one_line(tmp_path, capsys, monkeypatch):
    def full(*a, **k):
        raise RuntimeError("NetCDF: HDF error")

    monkeypatch.setattr(xr.Dataset, "to_netcdf", full)
    monkeypatch.setattr(xr.Dataset, "dump_to_store", full)  # how bayes_attn._internal.io writes a Dataset in memory
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9, 0))
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(tmp_path / "o")]) == cli.EXIT_FAILED
    line = _one_line(capsys.readouterr().err)  # a failure after computing (issue 74 row 9), not bad input
    assert "no space left" in line and "MiB free" in line and cli.KEPT in line
    assert not list((tmp_path / "o").glob("*.nc"))


def test_ctrl_c_is_one_line(tmp_path, capsys, monkeypatch):

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(experiment, "solve_theory", interrupt)
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(tmp_path / "o")]) == cli.EXIT_INTERRUPTED
    assert "interrupted" in _one_line(capsys.readouterr().err)


class _XlaError(RuntimeError):
    """Stands in for jaxlib's ``XlaRuntimeError`` (a ``RuntimeError``) with its many-line message."""


@pytest.mark.parametrize("error", [_XlaError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 9.3GiB.\n"
                                             + "\n".join(f"  buffer {i}: ..." for i in range(20))),
                                   KeyError("U"), OSError(5, "Input/output error")], ids=["xla", "key", "io"])
def test_a_late_failure_is_one_line_and_status_1(tmp_path, capsys, monkeypatch, error):
    """Any exception after the input was accepted, not only a ``ValueError``: one line naming its type, its first
    line and what was kept, exit 1 (no traceback; ``-v`` logs it)."""

    def fail(*a, **k):
        raise error

    monkeypatch.setattr(experiment, "solve_theory", fail)
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(tmp_path / "o")]) == cli.EXIT_FAILED
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("bayes-attn theory: error: ") and type(error).__name__ in line and cli.KEPT in line, line
    assert ("out of memory on the device" in line) == isinstance(error, _XlaError), line
    assert not list((tmp_path / "o").glob("*.nc"))


def test_every_command_takes_no_progress():
    """The docs promise ``--no-progress`` on every command, with one help text."""
    commands = cli.parser()._subparsers._group_actions[0].choices
    helps = {name: [a.help for a in p._actions if "--no-progress" in a.option_strings] for name, p in commands.items()}
    assert all(len(h) == 1 for h in helps.values()) and len({h[0] for h in helps.values()}) == 1, helps


def test_the_help_names_every_cause_of_exit_3():
    """``prune --help`` and ``theory --help`` name what makes them exit 3 as :func:`bayes_attn.cli.main` does: for
    ``prune``, any failed diagnostic of the sampler or the comparison, or a theory that is not a solution (not only
    R-hat or divergences); for ``theory``, a theory that is not a solution."""
    commands = cli.parser()._subparsers._group_actions[0].choices
    prune, theory = commands["prune"].description, commands["theory"].description
    assert all(w in prune for w in ("R-hat", "bulk ESS", "divergences", "k-hat", "not a solution")), prune
    assert "not compared" in prune and "exit status 3 when the theory is not a solution" in theory, theory


@pytest.mark.slow
def test_theory_with_no_progress_is_quiet(tmp_path, capsys):
    """``theory --no-progress`` leaves stderr to warnings and errors (the info line about a stale temporary file
    is not shown); ~10 s of compiling."""
    out = tmp_path / "o"
    out.mkdir()
    (out / outputs.MARKER).touch()
    (out / ".bayes_attn-abc.nc.tmp").write_text("left by a killed run")
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(out), "--no-progress", "--correction",
                     "none"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "wrote" in captured.out, captured.err


def test_messages_go_through_logging_quiet_or_verbose(tmp_path, capsys):
    """Library messages use the ``logging`` module: shown at the command's default level, hidden by --no-progress."""
    import logging

    def stale_then_hold(level):
        folder = tmp_path / f"o{level}"
        folder.mkdir()
        (folder / outputs.MARKER).touch()
        (folder / ".bayes_attn-abc.nc.tmp").write_text("left by a killed run")
        cli.configure_logging(level)
        with outputs.output_folder(folder):
            pass
        return capsys.readouterr().err

    assert "removed 1 temporary file(s)" in stale_then_hold(logging.INFO)
    assert stale_then_hold(logging.WARNING) == ""
    logging.getLogger("bayes_attn.cli").warning("look")
    assert capsys.readouterr().err == "WARNING: look\n"


@pytest.mark.parametrize("name", ["laplace-is", "laplace-mh", "auto"])
def test_guided_sampler_header_names_its_own_settings(name):
    """A guided sampler's first line names its proposals and batches (what its progress bars count), not the NUTS
    chains × warm-up; ``auto`` names each sampler it may try, NUTS last (issue 53 row 8)."""
    cfg = cli.SamplerSettings(name=name, num_chains=2, num_warmup=50, num_samples=50, guided_samples=200_000)
    line = cli.sampling_plan(cfg, 12)
    assert line.startswith(f"sampler={name}: ") and "batches of 1024" in line
    proposals = {"laplace-is": "2 chains × 200000 proposals",
                 "laplace-mh": "2 chains × (50 dropped + 200000) proposals"}
    if name == "auto":
        assert all(f"{n} ({proposals[n]}" in line for n in proposals)
        assert line.endswith("else wishart (2 chains × (50 warm-up + 50) draws)")
    else:
        assert proposals[name] in line and "warm-up" not in line
    assert cli.sampling_plan(cfg.replace(name="wishart"), 12) == "sampler=wishart: 2 chains × (50 warm-up + 50) draws"


@pytest.mark.parametrize("progress", [True, False])
def test_guided_sampler_shows_progress_over_its_batches(tmp_path, capsys, progress):
    """laplace-is draws in batches with a progress bar on stderr, as NUTS does; --no-progress hides it (row 8)."""
    args = ["sample", str(_spec_file(tmp_path)), "--sampler", "laplace-is", "--samples", "10", "--warmup", "10",
            "--chains", "2", "--guided-samples", "300", "--out", str(tmp_path / "o")]
    assert cli.main(args + ([] if progress else ["--no-progress"])) in (0, cli.EXIT_DIAGNOSTICS)
    out, err = capsys.readouterr()
    assert "2 chains × 300 proposals in 1 batch of" in out.splitlines()[0]
    shown = ["laplace-is pilot 1", "laplace-is proposals", "1/1"]
    assert all(s in err for s in shown) if progress else not any(s in err for s in shown), err


@pytest.mark.parametrize("progress", [True, False])
def test_ctrl_c_while_sampling_is_one_line_and_status_130(tmp_path, progress):
    """SIGINT while NUTS runs: exit status 130 and one line, with or without the progress bar (before: a JAX
    traceback from the bar's callback; a segmentation fault without it), and the folder gets no results (row 4)."""
    import signal
    import subprocess
    import sys

    spec, out, log = _spec_file(tmp_path), tmp_path / "o", tmp_path / "stderr"
    # SIGINT handled as a terminal's Ctrl-C finds it, even where this process ignores it (a background job)
    command = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
               "runpy.run_module('bayes_attn', run_name='__main__')")
    args = [sys.executable, "-c", command, *([] if progress else ["-v"]), "sample", str(spec), "--width", "3",
            "--warmup", "400000", "--samples", "20000", "--chains", "2", "--out", str(out),
            *([] if progress else ["--no-progress"])]
    with open(log, "wb") as err:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.monotonic() + 120
            # sampling: some seconds after the memory line, which comes just before it (where a progress bar is
            # shown, its callback runs all along: where the old KeyboardInterrupt was raised); the bar's own text
            # is not waited for, since where stderr is no terminal it may not be written before the end
            while b"sampling with" not in log.read_bytes():
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
            time.sleep(4.0)
            assert proc.poll() is None, "sampling ended before the signal: make it longer"
            mark = len(log.read_bytes())
            proc.send_signal(signal.SIGINT)
            rc = proc.wait(timeout=60)
        finally:
            proc.kill()
    after = log.read_bytes()[mark:].decode(errors="replace")
    lines = [line for line in after.replace("\r", "\n").splitlines() if line.strip() and "it/s]" not in line]
    assert rc == cli.EXIT_INTERRUPTED and "Traceback" not in after, after
    assert len(lines) == 1 and lines[0].startswith("bayes-attn sample: error: interrupted (Ctrl-C)"), after
    assert not (out / "posterior.nc").exists()


@pytest.mark.slow
def test_tiny_temperatures_solve_and_predict_or_are_refused_before_solving(tmp_path, capsys, monkeypatch):
    """Issue 74 row 8: down to 1e-11 the theory solves and predicts (exit 0; 3 at most for a theory that is not a
    solution, never a late exit 2 or a LinAlgError); at 1e-13, beyond float64 for this kernel's scale, it is bad
    input naming x and the temperature, refused before anything is solved."""
    path = _spec_file(tmp_path, TINY | {"compare": TINY["compare"] | {"widths": [3], "sample_widths": []}})
    for T in ("1e-5", "1e-9", "1e-11"):
        assert cli.main(["theory", str(path), "--temperature", T, "--out", str(tmp_path / T)]) in (0, 3), T
        assert float(xr.load_dataset(tmp_path / T / "theory.nc")["accuracy"]) >= 0, T  # finite: NaN is not
    _forbid(monkeypatch, (ba.theory._solve, "solve_theory"), (ba.experiment, "solve_theory"))
    capsys.readouterr()
    assert cli.main(["theory", str(path), "--temperature", "1e-13", "--out", str(tmp_path / "t13")]) == cli.EXIT_USAGE
    assert "x is too large for temperature 1e-13" in capsys.readouterr().err
    assert not (tmp_path / "t13").exists()
