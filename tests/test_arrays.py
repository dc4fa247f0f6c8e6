"""Your own arrays through the command (spec kind ``task.kind = "arrays"``, bayes_attn.tasks._arrays): the command's
theory equals the API's on the same arrays, each bad input is refused before computing with exit 2 naming the file
and the key, and the run's spec.toml records each file's sha256."""

import io
import os
import tomllib
import zipfile

import numpy as np
import pytest
import xarray as xr
from conftest import FAST, TINY
from conftest import forbid_calls as _forbid
from conftest import one_line as _one_line

import bayes_attn as ba
from bayes_attn import cli
from bayes_attn.spec import load_spec, spec_from_dict

SPEC = """name = "mine"
temperature = 0.1

[task]
kind = "arrays"
file = "data.npz"

[network]
attention = "attention.npz"
width = 3
variances = [1.0, 1.0, 0.5, 1.0]

[sampler]
name = "collapsed"
num_warmup = 60
num_samples = 40
num_chains = 2

[compare]
widths = [3, 30]
sample_widths = [3]
"""


def _arrays():
    """The TINY Markov task's arrays and the attention of its network (4 paths), and that network."""
    tiny = spec_from_dict(TINY)
    x, y, xt, yt = tiny.data()
    net = tiny.net()
    return {"x": x, "y": y, "x_test": xt, "y_test": yt}, {f"W_{l + 1}": a for l, a in enumerate(net.attention)}, net


def _write(folder, data=None, attention=None, spec=SPEC):
    d, a, _ = _arrays()
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "data.npz", **(d if data is None else data))
    np.savez(folder / "attention.npz", **(a if attention is None else attention))
    (folder / "spec.toml").write_text(spec)
    return folder / "spec.toml"


def test_the_commands_theory_equals_the_apis_on_the_same_arrays(tmp_path, monkeypatch):
    path = _write(tmp_path / "in")
    monkeypatch.chdir(tmp_path)  # the files are found relative to the spec, not to the working folder
    assert cli.main(["run", "in/spec.toml", "--out", "out", *FAST]) in (0, cli.EXIT_DIAGNOSTICS)
    d, _, net = _arrays()
    net = ba.Network(net.attention, 3, [1.0, 1.0, 0.5, 1.0])
    api = ba.solve_theory(net, d["x"], d["y"], temperature=0.1, correction="laplace")
    cmd = ba.load_theory(tmp_path / "out" / "theory.nc")
    for got, want in ((cmd.U, api.U), (cmd.Ua, api.Ua), (cmd.correction.U_leading, api.correction.U_leading),
                      *zip(cmd.predict(d["x_test"]), api.predict(d["x_test"]), strict=True)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.max(np.abs(want)))
    recorded = tomllib.loads((tmp_path / "out" / "spec.toml").read_text())
    assert recorded["task"]["file"] == "data.npz"  # as given
    assert recorded["task"]["sha256"] == load_spec(path).task.sha256
    assert len(recorded["task"]["sha256"]) == 64 and len(recorded["network"]["attention_sha256"]) == 64
    assert (tmp_path / "out" / "posterior.nc").is_file()


def test_queries_and_keys_give_the_network_of_their_bilinear_matrices(tmp_path):
    rng = np.random.default_rng(0)
    q = [rng.standard_normal((2, 3, 14)), rng.standard_normal((1, 3, 14))]
    k = [rng.standard_normal((2, 3, 14)), rng.standard_normal((1, 3, 14))]
    path = _write(tmp_path, attention={"Q_1": q[0], "K_1": k[0], "Q_2": q[1], "K_2": k[1]})
    got = load_spec(path).net()
    want = ba.Network.from_qk(q, k, 3, [1.0, 1.0, 0.5, 1.0])
    for a, b in zip(got.attention, want.attention, strict=True):
        np.testing.assert_array_equal(a, b)
    assert got.widths == want.widths and got.variances == want.variances


def _bad(case):
    """``(data, attention, file, key)``: the arrays of one bad input and the file and key its error names."""
    d, a, _ = _arrays()
    if case == "missing key":
        return {k: v for k, v in d.items() if k != "y_test"}, a, "data.npz", "y_test"
    if case == "wrong ndim":
        return d | {"x_test": d["x_test"][0]}, a, "data.npz", "x_test"
    if case == "N0 differs":
        return d, {k: v[:, 1:, 1:] for k, v in a.items()}, "attention.npz", "W_2"  # row 5: the keys named
    if case == "P differs":
        return d | {"y": d["y"][:-1]}, a, "data.npz", "y"
    if case == "NaN":
        x = d["x"].copy()
        x[2, 1, 0] = np.nan
        return d | {"x": x}, a, "data.npz", "x"
    if case == "inf":
        return d, a | {"W_2": np.full_like(a["W_2"], np.inf)}, "attention.npz", "W_2"
    if case == "dtype":
        return d | {"y": np.array(["a"] * len(d["y"]))}, a, "data.npz", "y"
    if case == "labels":
        return d | {"y_test": (d["y_test"] + 1) / 2}, a, "data.npz", "y_test"
    if case == "missing layer":
        return d, {"W_2": a["W_2"]}, "attention.npz", "W_1"
    if case == "layer 10^9":  # issue 74 row 7: named at once, without listing every layer up to it
        return d, {"W_1000000000": a["W_1"]}, "attention.npz", "W_1 is missing"
    if case == "huge labels":  # row 4: squares that overflow float64
        return d | {"y": d["y"] * 1e200}, a, "data.npz", "y must hold values of at most 1e+100"
    if case == "huge inputs":
        return d | {"x": d["x"] * 1e200}, a, "data.npz", "x must hold values of at most 1e+100"
    if case == "int64 extremes":  # row 4: finite, but K + T I singular to float64's precision
        return d | {"x": np.full(d["x"].shape, np.iinfo(np.int64).max)}, a, "data.npz", "x is too large for temperature"
    raise AssertionError(case)


BAD = ["missing key", "wrong ndim", "N0 differs", "P differs", "NaN", "inf", "dtype", "labels", "missing layer",
       "layer 10^9", "huge labels", "huge inputs", "int64 extremes"]


@pytest.mark.parametrize("case", BAD)
def test_each_bad_array_is_refused_before_computing_naming_the_file_and_the_key(tmp_path, capsys, monkeypatch, case):
    data, attention, file, key = _bad(case)
    path = _write(tmp_path, data, attention)
    _forbid(monkeypatch, (ba.theory._solve, "solve_theory"))
    assert cli.main(["theory", str(path), "--out", str(tmp_path / "out")]) == cli.EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert file in line and key in line, line
    assert not (tmp_path / "out").exists()


def _npy(arr: np.ndarray, header: dict | None = None) -> bytes:
    """``arr`` as ``.npy`` bytes, its header's fields replaced by ``header``'s."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, np.lib.format.header_data_from_array_1_0(arr) | (header or {}))
    return buf.getvalue() + arr.tobytes()


def _zip_case(folder, case) -> tuple[str, str]:
    """Rewrite ``data.npz`` in ``folder`` as one malformed archive (issue 74 rows 1–3 and 7); the member its
    error must name."""
    d, _, _ = _arrays()
    members = {f"{k}.npy": _npy(v) for k, v in d.items()}
    if case == "bytes member":
        members["notes"] = b"written by hand"
        named = "'notes'"
    elif case == "null header":
        raw = members["x.npy"]
        members["x.npy"] = raw[:10] + raw[10:60].replace(b"'", b"\0") + raw[60:]
        named = "x has a .npy header that cannot be read"
    elif case == "shape beyond the bytes":
        members["x.npy"] = _npy(d["x"], {"shape": (10**6, *d["x"].shape[1:])})
        named = "x declares shape (1000000, "
    elif case == "zip bomb":
        members["x.npy"] = _npy(d["x"], {"shape": (10**12, 5, 14)})
        named = "x declares shape (1000000000000, 5, 14)"
    with zipfile.ZipFile(folder / "data.npz", "w") as z:
        for name, raw in members.items():
            z.writestr(name, raw)
        if case == "duplicate":
            with pytest.warns(UserWarning, match="Duplicate name"):
                z.writestr("x.npy", _npy(-d["x"]))
            named = "'x.npy' more than once"
    return "data.npz", named


@pytest.mark.parametrize("case", ["bytes member", "null header", "duplicate", "shape beyond the bytes", "zip bomb"])
def test_a_malformed_archive_is_refused_naming_the_member(tmp_path, capsys, monkeypatch, case):
    """Anything in a ``.npz`` but ``.npy`` arrays that read is bad input (exit 2) naming the file and the member,
    refused before anything is computed or allocated (issue 74 rows 1–3, 7)."""
    path = _write(tmp_path)
    file, named = _zip_case(tmp_path, case)
    _forbid(monkeypatch, (ba.theory._solve, "solve_theory"))
    assert cli.main(["theory", str(path), "--out", str(tmp_path / "out")]) == cli.EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert file in line and named in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("key", ["task.file", "network.attention"])
def test_a_missing_required_key_is_refused_naming_it(tmp_path, capsys, key):
    """Issue 74 row 6: a spec without ``task.file`` or ``network.attention`` is bad input naming the key, not a
    ``TypeError``."""
    line = {"task.file": 'file = "data.npz"\n', "network.attention": 'attention = "attention.npz"\n'}[key]
    path = _write(tmp_path, spec=SPEC.replace(line, ""))
    assert cli.main(["theory", str(path), "--out", str(tmp_path / "out")]) == cli.EXIT_USAGE
    assert f"{key} is required" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("which", ["task.file", "network.attention"])
def test_a_file_that_is_not_there_is_refused_naming_the_key(tmp_path, capsys, which):
    path = _write(tmp_path)
    os.remove(tmp_path / ("data.npz" if which == "task.file" else "attention.npz"))
    assert cli.main(["theory", str(path), "--out", str(tmp_path / "out")]) == cli.EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert which in line and "does not exist" in line


def test_a_file_that_is_not_npz_is_refused_naming_it(tmp_path, capsys):
    path = _write(tmp_path)
    (tmp_path / "data.npz").write_text("x,y\n1,2\n")
    assert cli.main(["theory", str(path), "--out", str(tmp_path / "out")]) == cli.EXIT_USAGE
    assert "data.npz" in _one_line(capsys.readouterr().err)


def test_changed_arrays_are_not_taken_for_the_recorded_ones(tmp_path, capsys):
    path = _write(tmp_path)
    recorded = load_spec(path).to_toml()
    (tmp_path / "again.toml").write_text(recorded)
    assert load_spec(tmp_path / "again.toml") == load_spec(path)  # the recorded spec reads back as it was
    d, _, _ = _arrays()
    np.savez(tmp_path / "data.npz", **(d | {"y": -d["y"]}))
    with pytest.raises(ValueError, match=r"task.sha256: .*data.npz has sha256 .* the spec expects"):
        load_spec(tmp_path / "again.toml")
    assert load_spec(path).task.sha256 != tomllib.loads(recorded)["task"]["sha256"]  # the spec without a hash reads


def test_markov_keys_are_not_keys_of_an_arrays_spec(tmp_path):
    path = _write(tmp_path, spec=SPEC.replace("width = 3", "width = 3\nbeta = 2.0"))
    with pytest.raises(ValueError, match=r"\[network\] has unknown keys \['beta'\]"):
        load_spec(path)
    path = _write(tmp_path, spec=SPEC.replace('file = "data.npz"', 'file = "data.npz"\nroot = "/"'))
    with pytest.raises(ValueError, match=r"\[task\] has unknown keys \['root'\]"):
        load_spec(path)


def test_a_sweep_on_arrays_without_a_validation_set_runs_at_one_temperature_and_refuses_a_grid(tmp_path, capsys):
    path = _write(tmp_path)
    out = tmp_path / "sweep"
    assert cli.main(["sweep", str(path), "--out", str(out), "--sample-widths", "--no-progress"]) == 0
    ds = xr.open_dataset(out / "sweep.nc")
    assert np.isnan(ds["accuracy_validation_theory"]).all() and np.isfinite(ds["accuracy_theory"]).all()
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "grid"), "--sample-widths",
                     "--temperatures", "0.1", "0.2"]) == cli.EXIT_USAGE
    assert "x_val" in _one_line(capsys.readouterr().err)
    d, a, _ = _arrays()
    path = _write(tmp_path / "val", d | {"x_val": d["x_test"][:6], "y_val": d["y_test"][:6]}, a)
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "grid"), "--sample-widths", "--no-progress",
                     "--temperatures", "0.1", "0.2"]) == 0
    assert np.isfinite(xr.open_dataset(tmp_path / "grid" / "sweep.nc")["best_temperature_theory"]).all()


def test_an_alpha_sweep_needs_a_task_that_can_draw_more_sequences(tmp_path):
    from bayes_attn.sweep._table import alpha_sweep

    with pytest.raises(ValueError, match="alpha_sweep .* task.kind = 'markov', got 'arrays'"):
        alpha_sweep(load_spec(_write(tmp_path)), tmp_path / "out", alpha=2.0, widths=[3])
    assert not (tmp_path / "out").exists()


def test_an_arrays_spec_without_a_name_is_named_after_its_data_file(tmp_path):
    """Issue 71 item 6: not ``markov_4paths``, whose runs it would otherwise write beside."""
    d, a, _ = _arrays()
    _write(tmp_path, spec=SPEC.replace('name = "mine"\n', "").replace('"data.npz"', '"my data.v2.npz"'))
    np.savez(tmp_path / "my data.v2.npz", **d)
    assert load_spec(tmp_path / "spec.toml").name == "my_data.v2"
    assert load_spec(_write(tmp_path / "named")).name == "mine"
