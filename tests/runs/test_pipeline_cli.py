"""Specs, the run pipeline and its figures (bayes_attn.runs) and the bayes-attn command on a tiny Markov problem."""

import json
import tomllib

import numpy as np
import pytest
import xarray as xr
from conftest import TINY, spec_file

import bayes_attn as ba
from bayes_attn import cli, gp_limit
from bayes_attn.runs import _pipeline as pipeline
from bayes_attn.spec import Spec, load_spec, spec_from_dict


def _write(tmp_path, data=TINY):
    spec = spec_from_dict(data)
    path = tmp_path / "tiny.toml"
    path.write_text(spec.to_toml())
    return spec, path


def test_spec_round_trip_and_shipped_specs(tmp_path):
    spec, path = _write(tmp_path)
    assert load_spec(path) == spec
    assert spec_from_dict(tomllib.loads(Spec().to_toml())) == Spec()
    assert load_spec() == load_spec("models/markov_4paths.toml")  # the default is the shipped Fig. 2c spec
    assert load_spec().compare.gp_paths == {"good path": ("1-1",), "good + denoising paths": ("1-1", "2-1")}
    two = load_spec("models/markov_2paths.toml")
    assert two.net().D == 2 and two.task.noise_perp == 5.0


def test_spec_correction_round_trips(tmp_path):
    assert Spec().compare.correction == load_spec().compare.correction == "laplace"  # the corrected theory headlines
    spec, path = _write(tmp_path, {**TINY, "compare": {**TINY["compare"], "correction": "none"}})
    assert spec.compare.correction == "none" and load_spec(path) == spec


def test_spec_without_compare_table_for_other_depths():
    for layers in ([["same_token", "uniform"]], [["same_token"], ["uniform"], ["random", "uniform"]]):
        spec = spec_from_dict({"network": {"layers": layers}})
        assert spec.compare.gp_paths == {} and spec.net().L == len(layers)


@pytest.mark.parametrize(
    "change, match",
    [
        ({"network": {"layers": [["sideways"]]}}, "kind"),
        ({"sampler": {"chains": 2}}, r"\[sampler\]: unknown key 'chains'"),
        ({"sampler": {"method": "collapsed"}}, "replaced by one sampler name"),
        ({"sampler": {"name": "gibbs"}}, "sampler must be one of"),
        ({"temperature": -1}, "temperature"),
        ({"extra": 1}, "unknown keys"),
        ({"task": {"kind": "cifar"}}, "task.kind"),
        ({"compare": {"gp_paths": {"x": ["9-9"]}}}, "gp_paths"),
        ({"compare": {"path_names": {"7-7": "x"}}}, "path_names"),
        ({"sampler": {"num_chains": 0}}, "num_chains"),
        ({"sampler": {"thinning": 500, "num_samples": 10}}, "thinning"),
        ({"compare": {"correction": "second_order"}}, r"compare.correction must be one of \['laplace', 'none'\]"),
    ],
)
def test_bad_specs(change, match):
    with pytest.raises(ValueError, match=match):
        spec_from_dict({**TINY, **change})


@pytest.mark.slow
def test_run_writes_everything(tmp_path):
    spec = spec_from_dict(TINY)
    res = pipeline.run(spec, tmp_path / "run", progress_bar=False)
    for name in ("theory.nc", "gp.nc", "posterior.nc", "comparison.nc", "report.md", "spec.toml",
                 "order_parameter.png", "predictor.png", "alignment.png"):
        assert (tmp_path / "run" / name).stat().st_size > 0, name
    report = (tmp_path / "run" / "report.md").read_text()
    assert "Verdict" in report and "GP limits" in report and "Head scores" in report
    # both theories side by side, the corrected one as headline
    assert res.comparison.correction == "laplace" and res.comparison.alternative.correction == "none"
    assert "leading order (§4): " in report and "corrected (Laplace, §8): " in report
    assert xr.load_dataset(tmp_path / "run" / "comparison.nc").attrs["correction"] == "laplace"
    assert res.theory.converged
    assert res.posterior.sampler == "collapsed" and "Sampled with `collapsed` (NUTS" in report
    # overrides in the folder's spec.toml: test_cli_run_correction_picks_the_headline


@pytest.mark.slow
def test_gp_on_paths_equals_gp_of_subnetwork():
    spec = spec_from_dict(TINY)
    x, y, xt, _ = spec.data()
    net = spec.net()
    gp = gp_limit(net, x, y, temperature=0.1)
    sub = gp_limit(net.with_paths_of([[0, 1], [0]]), x, y, temperature=0.1)  # paths 1-1 and 2-1
    m1, v1 = pipeline.gp_on_paths(gp, ("1-1", "2-1")).predict(xt)
    m2, v2 = sub.predict(xt)
    np.testing.assert_allclose(m1, m2, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(v1, v2, rtol=1e-9, atol=1e-12)


def test_log_axis_ticks_are_plain_numbers_and_heatmap_numbers_readable():
    from matplotlib.figure import Figure

    from bayes_attn.runs import _figures as figures

    fig = Figure()
    ax = fig.subplots()
    ax.plot([3, 6, 30, 300], [1, 2, 3, 4])
    ax.set_xscale("log")
    figures.plain_log_ticks(ax, "x")
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() + ax.get_xticklabels(minor=True) if t.get_text()]
    assert labels and all("times" not in s and "^" not in s for s in labels), labels
    M = np.array([[1.0, 0.0], [0.0, -1.0]])
    heat = Figure().subplots()
    figures.heatmap(heat, M, ["a", "b"], "t", 1.0)
    colours = {t.get_text(): t.get_color() for t in heat.texts}
    assert colours["1.00"] == "white" and colours["0.00"] == "black"


@pytest.mark.slow
def test_cli_sample_and_theory(tmp_path, capsys):
    _, path = _write(tmp_path)
    # 2 chains × 30 draws cannot give a bulk ESS of 100: the command says so and exits with status 3
    assert cli.main(["sample", str(path), "--out", str(tmp_path / "s"), "--samples", "30", "--warmup", "30",
                     "--no-progress"]) == cli.EXIT_DIAGNOSTICS
    captured = capsys.readouterr()
    assert "Worst diagnostics per observable" in captured.out and (tmp_path / "s" / "posterior.nc").exists()
    assert "WARNING: the sampler's diagnostics failed" in captured.err and "bulk ESS" in captured.err
    assert cli.main(["theory", str(path), "--width", "5", "--out", str(tmp_path / "t")]) == 0
    out = capsys.readouterr().out
    assert "Ua =" in out and "GP (whole network)" in out and (tmp_path / "t" / "theory.nc").exists()


@pytest.mark.slow
def test_run_with_failed_diagnostics_is_inconclusive_and_exits_3(tmp_path, capsys):
    path = spec_file(tmp_path)
    out = tmp_path / "run"
    status = cli.main(["run", str(path), "--out", str(out), "--width", "8", "--temperature", "0.2", "--samples", "30",
                       "--warmup", "20", "--chains", "3", "--seed", "3", "--no-progress"])
    assert status == cli.EXIT_DIAGNOSTICS
    assert "WARNING: the sampler's diagnostics failed" in capsys.readouterr().err
    comp = xr.open_dataset(out / "comparison.nc")
    assert comp.attrs["verdict"] == "inconclusive"
    comp.close()
    assert "INCONCLUSIVE" in (out / "report.md").read_text()
    assert json.loads((out / "manifest.json").read_text())["verdict"] == "inconclusive"

    # provenance: the folder's spec.toml is the run that wrote it
    ran = load_spec(out / "spec.toml")
    assert (ran.network.width, ran.temperature) == (8, 0.2)
    s = ran.sampler
    assert (s.num_samples, s.num_warmup, s.num_chains, s.seed, s.name) == (30, 20, 3, 3, "collapsed")
    assert s.chain_method in ("parallel", "vectorized", "sequential")  # resolved, not "auto"
    post = ba.load_posterior(out / "posterior.nc")
    assert json.loads(post.tree.attrs["settings"]) == s.to_dict()
    versions = json.loads(post.tree.attrs["versions"])
    assert versions["numpyro"] and versions["jax"] and versions["bayes_attn"]


@pytest.mark.slow
def test_cli_run_correction_picks_the_headline(tmp_path, capsys):
    _, path = _write(tmp_path)
    cli.main(["run", str(path), "--out", str(tmp_path / "r"), "--correction", "none", "--width", "4",
              "--temperature", "0.2", "--seed", "5", "--no-progress"])
    out = capsys.readouterr().out
    ds = xr.load_dataset(tmp_path / "r" / "comparison.nc")
    assert ds.attrs["correction"] == "none" and ds.attrs["alternative_correction"] == "laplace"
    assert "headline (none): leading order (§4): " in out
    # the folder's spec.toml is the run as made, overrides included
    ran = load_spec(tmp_path / "r" / "spec.toml")
    assert (ran.compare.correction, ran.network.width, ran.temperature, ran.sampler.seed) == ("none", 4, 0.2, 5)
    with pytest.raises(SystemExit):
        cli.main(["run", str(path), "--correction", "first"])
    assert "--correction" in capsys.readouterr().err


def test_theory_command_reads_the_specs_correction_and_the_option(tmp_path, capsys):
    path = spec_file(tmp_path)
    assert cli.main(["theory", str(path), "--out", str(tmp_path / "a")]) == 0
    assert "corrected (Laplace, §8)" in capsys.readouterr().out
    assert ba.load_theory(tmp_path / "a" / "theory.nc").correction_name == "laplace"
    assert cli.main(["theory", str(path), "--out", str(tmp_path / "b"), "--correction", "none"]) == 0
    assert ba.load_theory(tmp_path / "b" / "theory.nc").correction_name == "none"
    none = spec_file(tmp_path, TINY | {"compare": TINY["compare"] | {"correction": "none"}})
    assert cli.main(["theory", str(none), "--out", str(tmp_path / "c")]) == 0
    assert ba.load_theory(tmp_path / "c" / "theory.nc").correction_name == "none"


@pytest.mark.slow
def test_same_seed_same_draws_from_library_and_command(tmp_path):
    path = spec_file(tmp_path)
    spec = load_spec(path)
    x, y, xt, _ = spec.data()
    assert cli.main(["sample", str(path), "--out", str(tmp_path / "s"), "--chain-method", "sequential", "--seed", "7",
                     "--no-progress"]) in (0, cli.EXIT_DIAGNOSTICS)
    from_cli = ba.load_posterior(tmp_path / "s" / "posterior.nc")
    lib = ba.sample_posterior(spec.net(), x, y, temperature=spec.temperature, x_test=xt, progress_bar=False,
                              sampler=spec.sampler.replace(seed=7, chain_method="sequential"))
    for v in ("U", "f_test"):
        np.testing.assert_array_equal(from_cli.tree["posterior"][v].values, lib.tree["posterior"][v].values)
    assert json.loads(from_cli.tree.attrs["settings"])["chain_method"] == "sequential"


def test_cli_errors_are_clear(tmp_path, capsys):
    assert cli.main(["theory", str(tmp_path / "missing.toml")]) == 2
    assert "spec must be an existing TOML file" in capsys.readouterr().err
    _, path = _write(tmp_path)
    assert cli.main(["theory", str(path), "--width", "0"]) == 2
    assert "--width must be a positive integer" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "sample" in capsys.readouterr().out


@pytest.mark.slow
def test_cli_theory_only_sweep(tmp_path, capsys):
    _, path = _write(tmp_path)
    assert cli.main(["sweep", str(path), "--widths", "3", "10", "--sample-widths", "--out", str(tmp_path / "sw")]) == 0
    out = capsys.readouterr().out
    assert "accuracy_theory" in out and (tmp_path / "sw" / "sweep.nc").exists()
    assert not (tmp_path / "sw" / "finite_size.png").exists()  # nothing sampled, no finite-size plot


def test_spec_with_numpy_scalars_writes_valid_toml():
    """Specs are written by tomli-w: NumPy scalars (as a script computes them) become plain TOML numbers."""
    import dataclasses
    import tomllib

    import numpy as np

    spec = dataclasses.replace(Spec(), temperature=np.float64(0.1))
    again = spec_from_dict(tomllib.loads(spec.to_toml()))
    assert again.temperature == 0.1 and type(again.temperature) is float


def test_console_script_is_main_with_the_commands_collector_settings():
    """``bayes-attn`` (``bayes_attn.__main__:console``, also ``python -m bayes_attn``) runs :func:`cli.main` with
    the command's cycle-collector threshold, set before the command's imports, and exits with main's status."""
    import subprocess
    import sys
    from pathlib import Path

    scripts = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"bayes-attn": "bayes_attn.__main__:console"}
    probe = ("import gc, sys; from bayes_attn.__main__ import GC_THRESHOLD, console\n"
             "seen = []\n"
             "import bayes_attn.cli as cli\n"
             "cli.main = lambda: seen.append(gc.get_threshold()) or 5\n"
             "try:\n    console()\nexcept SystemExit as e:\n"
             "    assert seen == [GC_THRESHOLD] and e.code == 5 and gc.get_freeze_count() > 0, (seen, e.code)\n"
             "    print('ok')\n")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout == "ok\n"
    usage = subprocess.run([sys.executable, "-m", "bayes_attn", "--help"], capture_output=True, text=True)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: bayes-attn")
