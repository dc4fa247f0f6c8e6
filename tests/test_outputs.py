"""Output folders and files (bayes_attn._internal.outputs): whose files may be replaced, one writer, staging,
interrupted and replaced runs, foreign manifests, linked locks and stale temporaries; checksums, JSON attributes and
package versions of saved files."""

import json
import os

import numpy as np
import pytest
import xarray as xr
from conftest import (
    FAST,
    THEORY_ONLY,
    snapshot_tree,
    users_folder,
)
from conftest import (
    forbid_calls as _forbid,
)
from conftest import (
    one_line as _one_line,
)
from conftest import (
    spec_file as _spec_file,
)

import bayes_attn as ba
from bayes_attn import cli, experiment
from bayes_attn._internal import outputs
from bayes_attn.runs import _pipeline as pipeline
from bayes_attn.spec import spec_from_dict
from bayes_attn.sweep import _table as table


def _snapshot(folder):
    """Every entry's bytes; the package's own lock reads as its kind only, since each hold writes its holder line
    (pid and start time, to the second) anew."""
    def content(p):
        data = p.read_bytes() if p.is_file() else "dir"
        return "the package's lock" if p.name == outputs.LOCK and data[:4] == b"pid " else data
    return {p.name: content(p) for p in folder.iterdir()}


def test_out_on_a_users_folder_is_refused_and_force_deletes_nothing_of_theirs(tmp_path, capsys, monkeypatch):
    path = _spec_file(tmp_path)
    out = users_folder(tmp_path)
    before = snapshot_tree(out)
    with monkeypatch.context() as m:
        _forbid(m, (experiment, "solve_theory"))
        assert cli.main(["theory", str(path), "--out", str(out)]) == cli.EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert "did not write" in line and "--force" in line and "backup.tar.tmp" in line
    assert snapshot_tree(out) == before
    assert cli.main(["theory", str(path), "--out", str(out), "--force"]) == 0
    assert "removed" not in capsys.readouterr().err
    after = snapshot_tree(out)
    assert {k: v for k, v in after.items() if k in before} == before
    assert "theory.nc" in after


def test_force_over_the_users_own_files_is_refused_before_computing(tmp_path, capsys, monkeypatch):
    out = tmp_path / "mine"
    out.mkdir()
    for name, text in (("spec.toml", "# my notes\n"), ("theory.nc", "my data"), ("manifest.json", '{"mine": 1}'),
                       (".lock", "my lock notes")):
        (out / name).write_text(text)
    before = _snapshot(out)
    _forbid(monkeypatch, (experiment, "solve_theory"))
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(out), "--force"]) == cli.EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    for name in ("spec.toml", "theory.nc", "manifest.json", ".lock"):
        assert name in line
    assert "did not write" in line
    assert _snapshot(out) == before


def test_force_writes_beside_the_users_files_without_touching_them(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(out), "--force"]) == 0
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "manifest.json").read_text())["files"] == ["spec.toml", "theory.nc"]


def _fake_run_folder(out):
    with outputs.output_folder(out, command="run", files=pipeline.RUN_FILES) as stage:
        for name in pipeline.RUN_FILES:
            stage.path(name).write_text(f"run's {name}")


def test_theory_into_a_run_folder_names_what_it_would_remove_and_needs_force(tmp_path, capsys, monkeypatch):
    out = tmp_path / "r"
    _fake_run_folder(out)
    before = _snapshot(out)
    with monkeypatch.context() as m:
        _forbid(m, (experiment, "solve_theory"))
        assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(out)]) == cli.EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert "`bayes-attn run`" in line and "posterior.nc" in line and "--force" in line
    assert _snapshot(out) == before
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(out), "--force"]) == 0
    err = capsys.readouterr().err
    assert "WARNING: replacing the results of `bayes-attn run`" in err and "posterior.nc" in err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["command"] == "theory" and manifest["files"] == ["spec.toml", "theory.nc"]
    assert not (out / "posterior.nc").exists() and not (out / "report.md").exists()


def test_same_command_again_needs_no_force(tmp_path):
    out = tmp_path / "t"
    path = _spec_file(tmp_path)
    assert cli.main(["theory", str(path), "--out", str(out)]) == 0
    assert cli.main(["theory", str(path), "--out", str(out), "--temperature", "0.2"]) == 0


def test_foreign_manifest_is_not_replaced_and_its_list_not_deleted(tmp_path):
    out = tmp_path / "site"
    out.mkdir()
    (out / "index.html").write_text("<html>")
    (out / "app.js").write_text("js")
    mine = json.dumps({"files": ["index.html", "app.js"], "name": "my app"})
    (out / "manifest.json").write_text(mine)
    with pytest.raises(outputs.ForeignFolderError, match="did not write"):
        with outputs.output_folder(out):
            pass
    with pytest.raises(outputs.ClashError, match="holds manifest.json, which this package did not write"):
        with outputs.output_folder(out, force=True):
            pytest.fail("computing started although manifest.json would be replaced")
    assert (out / "index.html").read_text() == "<html>" and (out / "app.js").read_text() == "js"
    assert (out / "manifest.json").read_text() == mine
    assert sorted(p.name for p in out.iterdir()) == ["app.js", "index.html", "manifest.json"]  # no lock left behind


def test_own_manifest_removes_what_its_run_wrote_and_the_next_does_not(tmp_path):
    out = tmp_path / "o"
    with outputs.output_folder(out) as stage:
        stage.path("a.txt").write_text("1")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == outputs.FORMAT and manifest["files"] == ["a.txt"] and len(manifest["run_id"]) == 32
    (out / "index.html").write_text("<html>")  # the user's, added later
    with outputs.output_folder(out) as stage:
        stage.path("b.txt").write_text("2")
    assert not (out / "a.txt").exists() and (out / "index.html").exists()


def test_lock_symlink_is_refused_not_followed(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "received"
    out.mkdir()
    (out / ".lock").symlink_to(victim)
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(out)]) == cli.EXIT_USAGE
    assert "not a plain file" in _one_line(capsys.readouterr().err)
    assert victim.read_text() == "precious"


def test_hard_linked_lock_is_refused(tmp_path, capsys):
    precious = tmp_path / "precious.txt"
    precious.write_text("precious")
    out = tmp_path / "folder"
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(out)]) == 0
    (out / ".lock").unlink()
    os.link(precious, out / ".lock")
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(out)]) == cli.EXIT_USAGE
    assert "hard link" in _one_line(capsys.readouterr().err)
    assert precious.read_text() == "precious"


def test_staging_symlink_is_neither_followed_nor_an_error(tmp_path, capsys):
    path = _spec_file(tmp_path)
    out = tmp_path / "o"
    assert cli.main(["theory", str(path), "--out", str(out)]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep")
    (out / ".bayes_attn-staging-evil").symlink_to(elsewhere)
    (out / ".staging-evil").symlink_to(elsewhere)
    (out / ".bayes_attn-abc.nc.tmp").symlink_to(elsewhere / "keep.txt")
    assert cli.main(["theory", str(path), "--out", str(out)]) == 0
    assert (elsewhere / "keep.txt").read_text() == "keep"


def test_second_writer_fails_at_once(tmp_path, capsys, monkeypatch):
    path = _spec_file(tmp_path, THEORY_ONLY)
    out = tmp_path / "sw"
    _forbid(monkeypatch, (experiment, "solve_theory"), (experiment, "gp_limit"))
    with outputs.hold(out):
        assert cli.main(["sweep", str(path), "--out", str(out)]) == cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert "is in use by another run" in err and "pid" in err
    assert not (out / "sweep.nc").exists()


@pytest.mark.parametrize("where", ["file", "under_file", "proc"])
def test_unwritable_output_fails_before_sampling(tmp_path, capsys, monkeypatch, where):
    path = _spec_file(tmp_path)
    (tmp_path / "a_file").write_text("x")
    out = {"file": tmp_path / "a_file", "under_file": tmp_path / "a_file" / "sub",
           "proc": "/proc/bayes_attn_out"}[where]
    _forbid(monkeypatch, (ba.posterior, "sample_posterior"))
    for command in ("sample", "run"):
        assert cli.main([command, str(path), "--out", str(out), "--no-progress"]) == cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert "out" in err and ("existing file" in err or "cannot write" in err), err


def test_interrupt_keeps_previous_results_whole(tmp_path, monkeypatch):
    spec = spec_from_dict(THEORY_ONLY)
    out = tmp_path / "sw"
    table.sweep(spec, out, progress_bar=False)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name not in (".lock", outputs.MARKER)}
    assert json.loads((out / "manifest.json").read_text())["files"] == sorted(
        n for n in before if n != "manifest.json")

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(experiment, "gp_of", interrupt)  # after the new per-job files, before sweep.nc
    with pytest.raises(KeyboardInterrupt):
        table.sweep(spec, out, temperatures=[0.3], progress_bar=False)
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name not in (".lock", outputs.MARKER)}
    assert after == before
    assert not list(out.glob(outputs.STAGING_PREFIX + "*"))
    assert (out / "widths" / "theory-N3-T0.3.nc").exists()  # the cache of the interrupted run may stay


def test_folder_in_the_way_of_an_output_is_refused_before_computing(tmp_path, capsys, monkeypatch):
    out = tmp_path / "m"
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(out)]) == 0
    (out / "report.md").mkdir()
    before = _snapshot(out)
    _forbid(monkeypatch, (experiment, "solve_theory"), (ba.posterior, "sample_posterior"))
    assert cli.main(["run", str(_spec_file(tmp_path)), "--out", str(out), "--force", *FAST]) == cli.EXIT_USAGE
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


def test_a_parked_file_stays_beside_the_old_set_until_its_run_commits(tmp_path):
    """Issue 59: a file parked by a run (prune's newly trained model) moves into the folder under its parked name,
    claimed by the manifest, while the previous run's files stay one set; a failed run leaves it there, the folder
    still ours; the commit of a later run that parks it moves it to its own name and no parked copy is left."""
    out, files = tmp_path / "o", ("m.txt", "m.parked.txt", "r.txt")
    with outputs.output_folder(out, files=files) as stage:
        stage.path("m.txt").write_text("old model")
        stage.path("r.txt").write_text("old results")
    before = _snapshot(out)
    with pytest.raises(ValueError, match="failed later"):
        with outputs.output_folder(out, files=files) as stage:
            stage.path("m.txt").write_text("new model")
            outputs.park(stage, {"m.txt": "m.parked.txt"}, command="t")
            stage.path("r.txt").write_text("new results")
            raise ValueError("failed later")
    kept, old = _snapshot(out), before.pop("manifest.json")
    assert kept.pop("m.parked.txt") == b"new model" and kept.pop("manifest.json") != old
    assert kept == before  # the old set, whole
    manifest = json.loads((out / "manifest.json").read_text())
    assert "m.parked.txt" in manifest["files"] and manifest["parked"] == {"m.parked.txt": "m.txt"}
    with pytest.raises(RuntimeError, match="did not declare"):  # a parked name is declared, its clashes checked
        with outputs.output_folder(out, files=("m.txt", "r.txt")) as stage:
            outputs.park(stage, {"m.txt": "m.parked.txt"})
    assert (out / "m.parked.txt").read_text() == "new model"
    with outputs.output_folder(out, files=files) as stage:
        stage.path("m.txt").write_text("newer model")
        outputs.park(stage, {"m.txt": "m.parked.txt"})
        stage.path("r.txt").write_text("newer results")
    assert {p.name: p.read_text() for p in out.glob("*.txt")} == {"m.txt": "newer model", "r.txt": "newer results"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["files"] == ["m.txt", "r.txt"] and "parked" not in manifest
    (out / "m.parked.txt").write_text("the user's")
    with pytest.raises(outputs.ClashError, match="m.parked.txt"):
        with outputs.output_folder(out, files=files):
            pass


def test_replacing_run_removes_files_the_new_run_does_not_write(tmp_path):
    out = tmp_path / "o"
    with outputs.output_folder(out) as stage:
        stage.path("a.txt").write_text("1")
        stage.path("b.txt").write_text("1")
    with outputs.output_folder(out) as stage:
        stage.path("a.txt").write_text("2")
    assert (out / "a.txt").read_text() == "2" and not (out / "b.txt").exists()
    with pytest.raises(ValueError, match="plain file name"):
        stage.path("../escape.txt")  # 13. output names cannot leave the folder


def test_stale_temporaries_are_removed(tmp_path, capsys):
    out = tmp_path / "t"
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(out)]) == 0
    (out / "widths").mkdir(parents=True)
    (out / "widths" / ".bayes_attn-ab12.nc.tmp").write_bytes(b"\0" * 1000)
    (out / ".bayes_attn-staging-xyz").mkdir()
    (out / ".bayes_attn-staging-xyz" / "theory.nc").write_bytes(b"\0")
    assert cli.main(["theory", str(_spec_file(tmp_path)), "--out", str(out)]) == 0
    assert "removed 2 temporary" in capsys.readouterr().err
    assert not list(out.rglob("*.tmp")) and not list(out.glob(".bayes_attn-staging-*"))


def test_a_run_failing_before_writing_leaves_the_folder_as_it_was(tmp_path):
    """A run that fails having written nothing leaves no folder it created (nor its parents), and an existing
    folder byte for byte as it was, its lock's holder line included; a run that wrote a cache keeps it (issue 59)."""
    out = tmp_path / "new" / "sub"
    with pytest.raises(ValueError, match="bad input"), outputs.output_folder(out, command="run"):
        raise ValueError("bad input")
    assert not (tmp_path / "new").exists()
    _fake_run_folder(tmp_path / "r")
    (tmp_path / "empty").mkdir()
    for folder in (tmp_path / "r", tmp_path / "empty"):
        before = snapshot_tree(folder)
        with pytest.raises(ValueError, match="bad input"), \
                outputs.output_folder(folder, command="run", files=pipeline.RUN_FILES):
            raise ValueError("bad input")
        assert snapshot_tree(folder) == before and sorted(p.name for p in folder.iterdir()) == sorted(before)
    with pytest.raises(ValueError, match="later"), outputs.output_folder(tmp_path / "c", command="sweep") as stage:
        outputs.cache_folder(stage.folder, "widths")
        raise ValueError("later")
    assert (tmp_path / "c" / "widths").is_dir()
    outputs.check_ours(tmp_path / "c")  # still this package's folder: a rerun uses its cache
    with outputs.output_folder(tmp_path / "empty") as stage:  # the next run takes the folder as usual
        stage.path("a.txt").write_text("1")
    assert json.loads((tmp_path / "empty" / "manifest.json").read_text())["files"] == ["a.txt"]


@pytest.mark.parametrize("command", ["run", "sample"])
def test_refused_run_creates_no_output_folder(tmp_path, capsys, monkeypatch, command):
    """A run refused for bad input (exit 2: a width too big for the memory) creates no output folder, marker or
    lock, and is refused before the theory is solved (issue 59)."""
    _forbid(monkeypatch, (experiment, "solve_theory"), (ba.posterior, "sample_posterior"))
    out = tmp_path / "runs" / "o"
    argv = [command, str(_spec_file(tmp_path)), "--out", str(out), "--width", str(10**8), "--sampler", "full", *FAST]
    assert cli.main(argv) == cli.EXIT_USAGE
    assert "sampling with 'full'" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_flipped_byte_in_saved_data_is_an_error(tiny, tmp_path):
    net, x, y, _ = tiny
    theory = ba.solve_theory(net, x, y, temperature=0.5)
    path = theory.save(tmp_path / "theory.nc")
    raw = bytearray(path.read_bytes())
    at = raw.find(np.ascontiguousarray(x[5, 2]).tobytes())  # the training inputs, stored in the file
    assert at > 0
    raw[at + 3] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="corrupted"):
        ba.load_theory(path)


def test_flipped_byte_in_a_saved_scalar_is_an_error(tiny, tmp_path):
    net, x, y, _ = tiny
    theory = ba.solve_theory(net, x, y, temperature=0.5)
    raw = theory.save(tmp_path / "theory.nc").read_bytes()
    for name, value in (("Ua", theory.Ua), ("temperature", 0.5)):  # 0-d variables, which Fletcher-32 skips
        at, flipped = raw.find(np.float64(value).tobytes()), bytearray(raw)
        assert at > 0 and raw.count(np.float64(value).tobytes()) == 1
        flipped[at + 6] ^= 0x10  # an exponent bit: another number altogether
        path = tmp_path / f"flipped-{name}.nc"
        path.write_bytes(bytes(flipped))
        with pytest.raises(outputs.CorruptFileError, match=r"flipped-.*contents do not match"):
            ba.load_theory(path)


def test_values_edited_with_xarray_are_refused(tiny, tmp_path):
    """Issue 74 rows A and E: ``U`` of ``theory.nc`` multiplied by 1.3 with xarray and written back
    (``to_netcdf``, which keeps every attribute and rewrites the Fletcher-32 checksums), and made-up ``U`` draws
    written into ``posterior.nc`` the same way, are refused at load with the package's one-line corrupt-file
    error; so is a file whose ``U_sd`` became NaN."""
    net, x, y, _ = tiny
    path = ba.solve_theory(net, x, y, temperature=0.5, correction="laplace").save(tmp_path / "theory.nc")
    for name, change in (("U", lambda v: v * 1.3), ("U_sd", lambda v: v * np.nan)):
        ds = xr.load_dataset(path)
        assert name in ds, list(ds)
        ds[name].values[...] = change(ds[name].values)
        ds.to_netcdf(tmp_path / f"edited-{name}.nc")
        with pytest.raises(outputs.CorruptFileError, match=r"edited-.*changed by something other than bayes_attn"):
            ba.load_theory(tmp_path / f"edited-{name}.nc")
    n = len(net.path_labels)
    U = np.broadcast_to(np.eye(n), (2, 3, n, n))
    post = ba.posterior.Posterior.from_draws(net, {"U": U}, {}, x, y, temperature=0.1, sampler="full")
    tree = xr.load_datatree(post.save(tmp_path / "posterior.nc"))
    tree["posterior"]["U"].values[...] = 2.0
    tree.to_netcdf(tmp_path / "made-up.nc")
    with pytest.raises(outputs.CorruptFileError, match="one line|changed by something other") as err:
        ba.load_posterior(tmp_path / "made-up.nc")
    assert "\n" not in str(err.value)


def test_changed_attribute_is_an_error(tiny, tmp_path):
    import netCDF4

    net, x, y, _ = tiny
    path = ba.solve_theory(net, x, y, temperature=0.5).save(tmp_path / "theory.nc")
    with netCDF4.Dataset(path, "r+") as f:
        f.setncattr("variances", np.array([1.0, 1.0, 1.0, 2.0]))  # another prior, same shape and type
    with pytest.raises(outputs.CorruptFileError, match="do not match their checksum"):
        ba.load_theory(path)
    n = len(net.path_labels)
    U = np.broadcast_to(np.eye(n), (2, 3, n, n))  # 2 chains of 3 draws
    post = ba.posterior.Posterior.from_draws(net, {"U": U}, {}, x, y, temperature=0.1, sampler="full")
    for group, attr, value in ((None, "temperature", 0.2), ("posterior", "created_at", "2001-01-01")):
        path = post.save(tmp_path / "posterior.nc")  # the root's attribute, then a group's
        ba.load_posterior(path)
        with netCDF4.Dataset(path, "r+") as f:
            (f[group] if group else f).setncattr(attr, value)
        with pytest.raises(outputs.CorruptFileError, match="do not match their checksum"):
            ba.load_posterior(path)


def test_file_without_metadata_checksum_loads_with_a_warning(tiny, tmp_path):
    import warnings

    import netCDF4

    net, x, y, _ = tiny
    theory = ba.solve_theory(net, x, y, temperature=0.5)
    path = theory.save(tmp_path / "theory.nc")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a file of this version verifies, without a note
        assert ba.load_theory(path).Ua == theory.Ua
    with netCDF4.Dataset(path, "r+") as f:
        f.delncattr("content_sha256")  # as written before the contents were checksummed
    with pytest.warns(RuntimeWarning, match="records no checksum of its contents.*unchecked"):
        assert ba.load_theory(path).Ua == theory.Ua


def test_corrupt_json_attribute_is_a_corrupt_file(tiny, tmp_path):
    import netCDF4

    net, x, y, _ = tiny
    path = ba.solve_theory(net, x, y, temperature=0.5).save(tmp_path / "theory.nc")
    with netCDF4.Dataset(path, "a") as f:
        f.setncattr("head_names", "[[\"a\", ")
    with pytest.raises(outputs.CorruptFileError, match="contents do not match their checksum"):
        ba.load_theory(path)  # an edit: refused by the checksum first
    broken = tmp_path / "broken.nc"  # the package itself writing the broken attribute: checksummed, not JSON
    outputs.save(xr.Dataset({"a": ("i", [1.0])}, attrs={"head_names": "[[\"a\", "}), broken)
    with pytest.raises(outputs.CorruptFileError, match="head_names"):
        outputs.load_dataset(broken)


def test_other_version_missing_versions_and_unknown_sampler(tmp_path, monkeypatch):
    ds = xr.Dataset({"a": ("i", [1.0, 2.0])})
    outputs.save(ds, tmp_path / "ok.nc")
    outputs.load_dataset(tmp_path / "ok.nc")  # this version: no warning (pytest -W error would show one)
    ds.to_netcdf(tmp_path / "bare.nc")
    with pytest.warns(RuntimeWarning, match="records no package versions"):
        with pytest.warns(RuntimeWarning, match="contents.*unchecked"):  # nor a checksum of those
            outputs.load_dataset(tmp_path / "bare.nc")
    outputs.save(ds.assign_attrs(versions=json.dumps({"bayes_attn": "0.0.1"})), tmp_path / "old.nc")
    with pytest.warns(RuntimeWarning, match="written by bayes_attn 0.0.1"):
        outputs.load_dataset(tmp_path / "old.nc")
    outputs.save(ds.assign_attrs(sampler="magic"), tmp_path / "magic.nc")
    with pytest.raises(outputs.CorruptFileError, match="sampler 'magic'"):
        outputs.load_dataset(tmp_path / "magic.nc", samplers=ba.samplers.SAMPLERS)
    import inspect

    assert "samplers=SAMPLERS" in inspect.getsource(ba.posterior.load_posterior)  # posteriors are loaded so
