"""docs/own-data.md runs as written, in an empty folder: its Python block writes data.npz and attention.npz, its
TOML block is spec.toml, and each of its ``bayes-attn`` commands runs (in this process) to a result; the run's
spec.toml records the files' sha256, and a spec that gives them refuses a changed file."""

from __future__ import annotations

import hashlib
import re
import shlex
import tomllib
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from bayes_attn import cli

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "own-data.md").read_text()
pytestmark = [pytest.mark.slow, pytest.mark.validate, pytest.mark.xdist_group("examples")]  # end to end


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", PAGE, flags=re.S | re.M)


def test_the_page_runs_as_written(tmp_path, monkeypatch, capsys):
    [python], [spec], shell = _blocks("python"), _blocks("toml"), _blocks("bash")
    monkeypatch.chdir(tmp_path)
    exec(compile(python, "docs/own-data.md", "exec"), {"__name__": "__main__"})
    (tmp_path / "spec.toml").write_text(spec)
    lines = [line.split(" #")[0].strip() for body in shell for line in body.splitlines() if line.strip()]
    assert [shlex.split(line)[:2] for line in lines] == [["bayes-attn", "run"]] + [["bayes-attn", "sweep"]] * 2
    for line in lines:
        status = cli.main([*shlex.split(line)[1:], "--no-progress"])
        assert status in (0, cli.EXIT_INCONCLUSIVE), f"{line!r} exited {status}"
    printed = capsys.readouterr().out
    assert "data.npz: P=40, P_test=100, T=6, N0=14" in printed  # the sizes the page quotes
    recorded = tomllib.loads((tmp_path / "runs/mine/spec.toml").read_text())
    digest = hashlib.sha256((tmp_path / "data.npz").read_bytes()).hexdigest()
    assert recorded["task"]["sha256"] == digest and len(recorded["network"]["attention_sha256"]) == 64
    with xr.open_dataset(tmp_path / "runs/temperatures/sweep.nc") as ds:
        assert set(np.unique(ds["best_temperature_theory"].values)) <= {0.01, 0.1, 1.0}
    assert (tmp_path / "runs/widths/sweep.nc").is_file()

    # the recorded spec, beside the data, refuses a changed data file
    (tmp_path / "recorded.toml").write_text((tmp_path / "runs/mine/spec.toml").read_text())
    with np.load(tmp_path / "data.npz") as f:
        arrays = dict(f)
    np.savez(tmp_path / "data.npz", **arrays | {"y": -arrays["y"]})
    assert cli.main(["theory", "recorded.toml", "--out", "again", "--no-progress"]) == cli.EXIT_USAGE
    assert "the spec expects " + digest in capsys.readouterr().err
