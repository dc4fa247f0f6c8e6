"""The spec reference (docs/spec.md and the tables docs/spec_reference.py generates for it) lists every key of
every spec table with a meaning, and its example specs load.

A new field of a spec dataclass (a sampler setting, a task parameter) fails these tests until its class's
docstring describes it under ``Attributes:`` (or ``Args:``), docs/spec.md is rewritten
(``python docs/spec_reference.py``) and, for a new table, holds its markers.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY

from bayes_attn.oneshot._spec import SECTIONS, OneShotSpec
from bayes_attn.samplers import SamplerSettings
from bayes_attn.spec import Spec, spec_from_dict

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "spec.md").read_text()
_loader = importlib.util.spec_from_file_location("spec_reference", ROOT / "docs" / "spec_reference.py")
assert _loader is not None and _loader.loader is not None
ref = importlib.util.module_from_spec(_loader)
_loader.loader.exec_module(ref)
TABLES = ref.tables()


def rows(text: str) -> dict[str, list[str]]:
    """Key → its row's cells (type, default, meaning) of a generated Markdown table."""
    out = {}
    for line in text.splitlines()[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        out[cells[0].strip("`")] = cells[1:]
    return out


CLASSES = [(stem, cls) for stem, (_, cls, _) in ref.TABLES.items()] + [("oneshot-sampler", SamplerSettings)]


@pytest.mark.parametrize("stem, cls", CLASSES, ids=[s for s, _ in CLASSES])
def test_every_key_of_every_table_has_a_row_with_a_meaning(stem, cls):
    table = rows(TABLES[stem])
    for f in dataclasses.fields(cls):
        if f.metadata.get("spec", True):
            assert f.name in table, f"{cls.__name__}.{f.name} has no row in the spec reference"
            assert all(table[f.name]), f"{cls.__name__}.{f.name}: describe it under 'Attributes:' of its docstring"
        else:
            assert f.name not in table, f"{cls.__name__}.{f.name} is not a spec key"


def test_the_samplers_settings_are_listed_in_both_specs():
    names = [f.name for f in dataclasses.fields(SamplerSettings)]
    assert list(rows(TABLES["sampler"])) == names == list(rows(TABLES["oneshot-sampler"]))
    assert rows(TABLES["oneshot-sampler"])["num_chains"][1] == f"`{OneShotSpec().sampler.num_chains}`"


def test_every_field_of_both_specs_is_a_top_level_key_or_a_table_of_the_page():
    run_tables = {"task", "network", "sampler", "compare", "cluster"}
    assert {f.name for f in dataclasses.fields(Spec)} == set(ref.TOP["run"][1]) | run_tables
    assert set(rows(TABLES["top-run"])) == set(ref.TOP["run"][1])
    assert set(rows(TABLES["top-oneshot"])) == {"name"}
    oneshot_keys = {f.name for f in dataclasses.fields(OneShotSpec) if f.name != "source"}  # source: not a key
    assert oneshot_keys == {"name", *SECTIONS}
    for key in run_tables | set(SECTIONS):
        assert f"`[{key}]`" in PAGE, f"docs/spec.md has no section of [{key}]"


def test_the_page_holds_every_generated_table_and_is_current():
    """Issue 71 item 6: the tables are committed in docs/spec.md (readable in the source), each as the spec
    classes give it now; ``python docs/spec_reference.py`` rewrites them."""
    assert sorted(ref.stems(PAGE)) == sorted(TABLES)
    assert ref.render(PAGE) == PAGE, "docs/spec.md is out of date: run `python docs/spec_reference.py`"


def test_a_field_without_a_meaning_is_caught():
    @dataclass(frozen=True)
    class Settings:
        """Settings.

        Attributes:
            a, b: two documented numbers,
                on two lines.
            c: a third.
        """

        a: int = 1
        b: float = 2.0
        c: str | None = None
        d: int = 4
        root: str = field(default=".", metadata={"spec": False})

    table = rows(ref.table(Settings))
    assert list(table) == ["a", "b", "c", "d"]
    assert table["a"] == ["integer", "`1`", "two documented numbers, on two lines."] and table["b"][2] == table["a"][2]
    assert table["c"] == ["string (optional)", "unset", "a third."]
    assert table["d"][2] == ""  # the empty meaning the tests above refuse


def _examples() -> list[dict]:
    return [tomllib.loads(b) for b in re.findall(r"^```toml\n(.*?)^```", PAGE, flags=re.S | re.M)]


def test_the_example_specs_load(tmp_path):
    markov, arrays, oneshot = _examples()
    spec = spec_from_dict(markov)
    assert spec.kind == "markov" and spec.network.width == 30 and spec.sampler.name == "collapsed"
    tiny = spec_from_dict(TINY)  # arrays for the example of kind "arrays": the tiny Markov task and its 4 paths
    x, y, xt, yt = tiny.data()
    np.savez(tmp_path / "data.npz", x=x, y=y, x_test=xt, y_test=yt)
    np.savez(tmp_path / "attention.npz", **{f"W_{l + 1}": a for l, a in enumerate(tiny.net().attention)})
    spec = spec_from_dict(arrays, root=tmp_path)
    assert spec.kind == "arrays" and spec.net().D == 4 and len(spec.task.sha256) == 64
    one = OneShotSpec.from_dict(oneshot)
    assert one.task.kind == "digits" and one.theory.sample_widths == (10,)
