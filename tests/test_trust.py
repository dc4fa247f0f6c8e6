"""No user file replaced, whole results or none, failures that say so (issue 33's rows 2-5 and 8-14).

Rows 1 and 1b-1c, 6 (exported programs) are in ``tests/test_threads.py``; row 4
(swapped sweep width files) in ``tests/sweep/test_sweeps.py``.
"""

import json
import os

import pytest

import bayes_attn as ba
from bayes_attn import cli, outputs
from bayes_attn.run import pipeline
from conftest import forbid_calls, one_line as _one_line, spec_file

FAST = ["--samples", "10", "--warmup", "10", "--chains", "2", "--no-progress"]


def _snapshot(folder):
    """Every entry's bytes; the package's own lock reads as its kind only, since each hold writes its holder line
    (pid and start time, to the second) anew."""
    def content(p):
        data = p.read_bytes() if p.is_file() else "dir"
        return "the package's lock" if p.name == outputs.LOCK and data[:4] == b"pid " else data
    return {p.name: content(p) for p in folder.iterdir()}


# row 2: --force never replaces the user's own files ------------------------------------------------------------
def test_force_over_the_users_own_files_is_refused_before_computing(tmp_path, capsys, monkeypatch):
    out = tmp_path / "mine"
    out.mkdir()
    for name, text in (("spec.toml", "# my notes\n"), ("theory.nc", "my data"), ("manifest.json", '{"mine": 1}'),
                       (".lock", "my lock notes")):
        (out / name).write_text(text)
    before = _snapshot(out)
    forbid_calls(monkeypatch, (pipeline, "solve_theory"))
    assert cli.main(["theory", str(spec_file(tmp_path)), "--out", str(out), "--force"]) == cli.EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    for name in ("spec.toml", "theory.nc", "manifest.json", ".lock"):
        assert name in line
    assert "did not write" in line
    assert _snapshot(out) == before


def test_force_writes_beside_the_users_files_without_touching_them(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert cli.main(["theory", str(spec_file(tmp_path)), "--out", str(out), "--force"]) == 0
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "manifest.json").read_text())["files"] == ["spec.toml", "theory.nc"]


# row 3: one command does not silently delete another's results -------------------------------------------------
def _fake_run_folder(out):
    with outputs.output_folder(out, command="run", files=pipeline.RUN_FILES) as stage:
        for name in pipeline.RUN_FILES:
            stage.path(name).write_text(f"run's {name}")


def test_theory_into_a_run_folder_names_what_it_would_remove_and_needs_force(tmp_path, capsys, monkeypatch):
    out = tmp_path / "r"
    _fake_run_folder(out)
    before = _snapshot(out)
    with monkeypatch.context() as m:
        forbid_calls(m, (pipeline, "solve_theory"))
        assert cli.main(["theory", str(spec_file(tmp_path)), "--out", str(out)]) == cli.EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert "`bayes-attn run`" in line and "posterior.nc" in line and "--force" in line
    assert _snapshot(out) == before
    assert cli.main(["theory", str(spec_file(tmp_path)), "--out", str(out), "--force"]) == 0
    err = capsys.readouterr().err
    assert "WARNING: replacing the results of `bayes-attn run`" in err and "posterior.nc" in err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["command"] == "theory" and manifest["files"] == ["spec.toml", "theory.nc"]
    assert not (out / "posterior.nc").exists() and not (out / "report.md").exists()


def test_same_command_again_needs_no_force(tmp_path):
    out = tmp_path / "t"
    path = spec_file(tmp_path)
    assert cli.main(["theory", str(path), "--out", str(out)]) == 0
    assert cli.main(["theory", str(path), "--out", str(out), "--temperature", "0.2"]) == 0


# row 5: every clash is settled before computing; replacement is all or nothing ---------------------------------
def test_folder_in_the_way_of_an_output_is_refused_before_computing(tmp_path, capsys, monkeypatch):
    out = tmp_path / "m"
    assert cli.main(["theory", str(spec_file(tmp_path)), "--out", str(out)]) == 0
    (out / "report.md").mkdir()
    before = _snapshot(out)
    forbid_calls(monkeypatch, (pipeline, "solve_theory"), (ba.posterior, "sample_posterior"))
    assert cli.main(["run", str(spec_file(tmp_path)), "--out", str(out), "--force", *FAST]) == cli.EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert "report.md (a folder)" in line
    assert _snapshot(out) == before


def test_file_made_while_computing_is_not_replaced_and_nothing_moves(tmp_path):
    out = tmp_path / "o"
    with outputs.output_folder(out, files=("a.txt", "b.txt")) as stage:
        stage.path("a.txt").write_text("old")
    before = _snapshot(out)
    with pytest.raises(outputs.ClashError, match="b.txt"):
        with outputs.output_folder(out, files=("a.txt", "b.txt")) as stage:
            stage.path("a.txt").write_text("new")
            stage.path("b.txt").write_text("new")
            (out / "b.txt").write_text("the user's, made meanwhile")
    assert _snapshot(out) == before | {"b.txt": b"the user's, made meanwhile"}
    assert not list(out.glob(outputs.STAGING_PREFIX + "*"))


def test_undeclared_output_is_an_error_before_anything_moves(tmp_path):
    out = tmp_path / "o"
    with pytest.raises(RuntimeError, match="did not declare"):
        with outputs.output_folder(out, files=("a.txt",)) as stage:
            stage.path("a.txt").write_text("1")
            stage.path("c.txt").write_text("1")
    assert not (out / "a.txt").exists() and not (out / "manifest.json").exists()


def test_interrupted_replacement_leaves_every_file_claimed(tmp_path, monkeypatch):
    out = tmp_path / "o"
    with outputs.output_folder(out, files=("a.txt", "b.txt")) as stage:
        stage.path("a.txt").write_text("old")
    real, moved = os.replace, []

    def replace_once(src, dst):
        if moved:
            raise KeyboardInterrupt
        moved.append(dst)
        real(src, dst)

    with pytest.raises(KeyboardInterrupt):
        with outputs.output_folder(out, files=("a.txt", "b.txt")) as stage:
            stage.path("a.txt").write_text("new")
            stage.path("b.txt").write_text("new")
            monkeypatch.setattr(outputs.os, "replace", replace_once)
    monkeypatch.setattr(outputs.os, "replace", real)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "replacing" and manifest["files"] == ["a.txt", "b.txt"]
    with outputs.output_folder(out, files=("a.txt", "b.txt")) as stage:  # the next run finds no clash
        stage.path("b.txt").write_text("next")
    assert json.loads((out / "manifest.json").read_text())["files"] == ["b.txt"] and not (out / "a.txt").exists()


# row 13: a hard-linked .lock is refused like a symbolic one ----------------------------------------------------
def test_hard_linked_lock_is_refused(tmp_path, capsys):
    precious = tmp_path / "precious.txt"
    precious.write_text("precious")
    out = tmp_path / "folder"
    assert cli.main(["theory", str(spec_file(tmp_path)), "--out", str(out)]) == 0
    (out / ".lock").unlink()
    os.link(precious, out / ".lock")
    assert cli.main(["theory", str(spec_file(tmp_path)), "--out", str(out)]) == cli.EXIT_USAGE
    assert "hard link" in _one_line(capsys.readouterr().err)
    assert precious.read_text() == "precious"


# row 7: a damaged zip member is a one-line error naming the member and the zip -----------------------------------
@pytest.mark.parametrize("compression", ["deflated", "stored"])
def test_damaged_zip_member_is_named(tmp_path, compression):
    import io
    import zipfile

    import numpy as np
    from PIL import Image

    from bayes_attn.tasks import read_omniglot

    rng = np.random.default_rng(0)
    members = {}
    for c in (1, 2):
        for d in (1, 2):
            buf = io.BytesIO()
            Image.fromarray((rng.random((40, 40)) < 0.5).astype(np.uint8) * 255).save(buf, format="PNG")
            members[f"top/Alpha/character0{c}/01{c}_0{d}.png"] = buf.getvalue()
    path = tmp_path / "one.zip"
    mode = zipfile.ZIP_DEFLATED if compression == "deflated" else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=mode) as z:
        for name, data in members.items():
            z.writestr(name, data)
    victim = "top/Alpha/character02/012_01.png"
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(victim)
    raw = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for i in range(start + 20, start + 60):  # inside the member's (compressed) bytes
        raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=rf"{victim}' in 'one.zip' cannot be read .*damaged"):
        read_omniglot(tmp_path, files=("one.zip",), size=20)


# row 8: labels far from unit scale -----------------------------------------------------------------------------
def test_labels_far_from_unit_scale_are_named_not_a_linalg_traceback():
    from bayes_attn.spec import Spec

    spec = Spec()
    x, y, _, _ = spec.data()
    with pytest.raises(ValueError, match=r"max \|y\| = 1e\+03, far from unit scale: rescale them"):
        ba.solve_theory(spec.net(None), x, 1000 * y, temperature=spec.temperature)


# row 9: the wrong kind of file -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_loaders_name_the_kind_of_file_they_need(tmp_path, tiny_full):
    net, x, y, _, post = tiny_full
    theory = ba.solve_theory(net, x, y, temperature=0.1)
    theory.save(tmp_path / "theory.nc")
    with pytest.raises(ValueError, match=r"must be a posterior written by Posterior.save .*read it with load_theory"):
        ba.load_posterior(tmp_path / "theory.nc")
    post.save(tmp_path / "posterior.nc")
    with pytest.raises(ValueError, match=r"must be a theory written by Theory.save .*read it with load_posterior"):
        ba.load_theory(tmp_path / "posterior.nc")


# row 10: failures exit non-zero ----------------------------------------------------------------------------------
def test_unconverged_theory_exits_3_in_theory_and_sweep(tmp_path, capsys):
    from conftest import TINY

    data = TINY | {"task": TINY["task"] | {"noise_perp": 1e150},
                   "compare": TINY["compare"] | {"widths": [3], "sample_widths": []}}
    path = spec_file(tmp_path, data)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        assert cli.main(["theory", str(path), "--out", str(tmp_path / "t")]) == cli.EXIT_DIAGNOSTICS
    err = capsys.readouterr().err
    assert "WARNING: inconclusive: the theory did not converge" in err and "Traceback" not in err
    assert not bool(ba.load_theory(tmp_path / "t" / "theory.nc").converged)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        assert cli.main(["sweep", str(path), "--out", str(tmp_path / "s"), "--no-progress"]) == cli.EXIT_DIAGNOSTICS
    assert "N=3, T=0.1: the theory is not a solution" in capsys.readouterr().err
    assert json.loads((tmp_path / "s" / "manifest.json").read_text())["verdict"] == "inconclusive"


def test_empty_width_list_is_a_usage_error(tmp_path, capsys, monkeypatch):
    from conftest import TINY

    path = spec_file(tmp_path, TINY | {"compare": TINY["compare"] | {"widths": []}})
    forbid_calls(monkeypatch, (ba.sweep.table, "solve_theory"))
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "s"), "--no-progress"]) == cli.EXIT_USAGE
    assert "widths must hold at least one width" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())


# row 11: a huge number of chains neither creates a device per chain nor looks hung -------------------------------
def test_host_devices_are_capped():
    cores = os.cpu_count() or 1
    assert cli.host_devices(100000) == max(cli.MAX_HOST_DEVICES, cores)
    assert cli.host_devices(8) == max(8, cores) and cli.host_devices(None) == max(4, cores)


# row 12: spec encodings, an unreliable correction beside the verdict ---------------------------------------------
def test_spec_with_a_byte_order_mark_reads_and_latin1_is_named(tmp_path):
    from bayes_attn.spec import load_spec

    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf" + '# café\nname = "bom"\n'.encode())
    assert load_spec(bom).name == "bom"
    latin = tmp_path / "latin.toml"
    latin.write_bytes('# café\nname = "latin"\n'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin.toml' is not UTF-8 text \(byte 5"):
        load_spec(latin)


def test_unreliable_correction_stands_beside_the_verdict(tmp_path):
    from types import SimpleNamespace

    from bayes_attn.compare import Comparison
    from bayes_attn.run.report import comparison_report

    import numpy as np

    comp = Comparison(path_labels=["1-1"], width=1, U_theory=np.eye(1), U_sampled=np.eye(1), U_mcse=np.eye(1),
                      mean_theory=np.array([0.1, -0.2]), mean_sampled=np.array([0.2, -0.1]), mean_mcse=np.ones(2), var_theory=np.ones(2),
                      var_sampled=np.ones(2), var_mcse=np.ones(2), y_test=np.array([1.0, -1.0]),
                      accuracy={"theory": 0.5}, correction="laplace",
                      theory_warnings=["the Laplace correction is unreliable: the widths are too small"])
    assert "**Warning:** the Laplace correction is unreliable" in comparison_report(comp)
    comp.save(tmp_path / "c.nc")
    import xarray as xr

    with xr.open_dataset(tmp_path / "c.nc") as ds:
        assert ds.attrs["theory_warnings"] == "the Laplace correction is unreliable: the widths are too small"
    stalled = SimpleNamespace(converged=False, message="stalled", max_gradient=1.0, is_minimum=False,
                              hessian_min_eigenvalue=-1.0)
    assert ba.Theory.problems.fget(stalled) == ["the theory did not converge (stalled; max |dS/dU| 1)"]


# row 14: one default for the corrected theory ---------------------------------------------------------------------
def test_theory_command_reads_the_specs_correction_and_the_option(tmp_path, capsys):
    from conftest import TINY

    path = spec_file(tmp_path)
    assert cli.main(["theory", str(path), "--out", str(tmp_path / "a")]) == 0
    assert "corrected (Laplace, §8)" in capsys.readouterr().out
    assert ba.load_theory(tmp_path / "a" / "theory.nc").correction == "laplace"
    assert cli.main(["theory", str(path), "--out", str(tmp_path / "b"), "--correction", "none"]) == 0
    assert ba.load_theory(tmp_path / "b" / "theory.nc").correction == "none"
    none = spec_file(tmp_path, TINY | {"compare": TINY["compare"] | {"correction": "none"}})
    assert cli.main(["theory", str(none), "--out", str(tmp_path / "c")]) == 0
    assert ba.load_theory(tmp_path / "c" / "theory.nc").correction == "none"


def test_nested_list_types_read_well():
    from bayes_attn.spec import spec_from_dict

    with pytest.raises(ValueError, match=r"network.layers must be a list of lists of strings, got 5$"):
        spec_from_dict({"network": {"layers": 5}})
    with pytest.raises(ValueError, match=r"compare.widths must be a list of integers, got 'x'$"):
        spec_from_dict({"compare": {"widths": "x"}})
