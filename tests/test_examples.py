"""The gallery (examples/*.py) and the README's Python example run as written.

Each script runs in this process (``runpy``), one after another on one xdist worker, so that the programs they
share (the Fig. 2c network at N = 10 and 100) compile once; figures go to matplotlib's Agg backend. The
examples print the verdicts of their comparisons; what a verdict must be is asserted by the comparison's own
tests (tests/test_compare.py), not here, where a run on another CPU is another chain.
"""

from __future__ import annotations

import contextlib
import io
import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("examples")]


@pytest.fixture(autouse=True)
def _agg(monkeypatch):
    import matplotlib
    import matplotlib.pyplot as plt

    matplotlib.use("Agg")
    monkeypatch.setattr(plt, "show", lambda *a, **k: None)
    yield
    plt.close("all")


def run_printing(path: Path, code: str | None = None) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if code is None:
            runpy.run_path(str(path), run_name="__main__")
        else:
            exec(compile(code, str(path), "exec"), {"__name__": "__main__"})
    return out.getvalue()


def test_the_gallery_has_its_examples():
    names = {p.stem for p in EXAMPLES}
    assert len(names) >= 6 and all(n.startswith("plot_") for n in names), names
    for p in EXAMPLES:  # sphinx-gallery's header: a title underlined with '=' in the module docstring
        assert re.match(r'"""\n.+\n=+\n', p.read_text()), p.name


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_lines_fit_the_page(path):
    """The docs pages show the examples' code: every line fits 88 columns (examples/ruff.toml formats them so)."""
    long = [f"{path.name}:{i}" for i, line in enumerate(path.read_text().splitlines(), 1) if len(line) > 88]
    assert not long, f"lines over 88 columns: {long}"


def test_the_gallery_order_lists_every_example_quick_start_first():
    import importlib.util

    loader = importlib.util.spec_from_file_location("gallery_order", ROOT / "docs" / "gallery_order.py")
    assert loader is not None and loader.loader is not None
    order = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(order)
    assert sorted(order.ORDER) == sorted(p.name for p in EXAMPLES) and order.ORDER[0] == "plot_quickstart.py"
    key = order.ExampleOrder(ROOT / "examples")
    assert sorted((p.name for p in EXAMPLES), key=key) == list(order.ORDER)
    with pytest.raises(ValueError, match="no place"):
        key("plot_new.py")


@pytest.mark.validate  # an end-to-end run, minutes in all (make docs runs the gallery too)
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path):
    import matplotlib.pyplot as plt

    printed = run_printing(path)
    assert printed.strip(), f"{path.name} printed nothing"
    assert plt.get_fignums(), f"{path.name} drew no figure"


def test_readme_python_example_runs_as_written():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert len(blocks) == 1, "the README has one Python example"
    printed = run_printing(ROOT / "README.md", blocks[0]).splitlines()
    assert printed[-2] in ("agree", "disagree", "inconclusive"), printed[-2:]
    assert re.match(r"corrected \(Laplace, §8\): \w+ \(U gap .*\); leading order \(§4\): \w+ \(U gap .*\)$",
                    printed[-1]), printed[-1]
