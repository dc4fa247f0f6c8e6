"""The spec reference's tables, generated from the spec dataclasses and committed in docs/spec.md.

One Markdown table per spec table (:func:`tables`): key, type, default and meaning, the meaning read from the
``Attributes:`` (or ``Args:``) section of the class's docstring. Fields with ``metadata={"spec": False}`` are not
keys and are left out. Each sits in docs/spec.md between ``<!-- spec-table: STEM -->`` and
``<!-- end spec-table -->``, so that the page read from the source has them; ``python docs/spec_reference.py``
rewrites them (:func:`render`). tests/test_spec_reference.py checks that the page is current and that every key of
every table has a row with a meaning.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from pathlib import Path

from bayes_attn._internal.spec_types import _describe
from bayes_attn.oneshot._model import ModelConfig
from bayes_attn.oneshot._spec import ModelSpec, OneShotSpec, PruningSpec, TaskSpec, TheorySpec
from bayes_attn.oneshot._training import TrainConfig
from bayes_attn.samplers import SamplerSettings
from bayes_attn.spec import CompareSpec, NetworkSpec, Spec
from bayes_attn.tasks._arrays import ArraysNetwork, ArraysTask
from bayes_attn.tasks.markov import MarkovTask

TOP = {"run": (Spec, ("name", "temperature")), "oneshot": (OneShotSpec, ("name",))}
"""The top-level keys (not tables) of a run spec and of a one-shot spec."""

TABLES: dict[str, tuple[str, type, tuple[type, ...]]] = {
    # file stem: (the table's heading, its class, classes whose docstrings also describe its fields)
    "markov-task": ("[task], kind = \"markov\"", MarkovTask, ()),
    "markov-network": ("[network], kind = \"markov\"", NetworkSpec, ()),
    "arrays-task": ("[task], kind = \"arrays\"", ArraysTask, ()),
    "arrays-network": ("[network], kind = \"arrays\"", ArraysNetwork, ()),
    "sampler": ("[sampler]", SamplerSettings, ()),
    "compare": ("[compare]", CompareSpec, ()),
    "oneshot-task": ("[task]", TaskSpec, ()),
    "oneshot-model": ("[model]", ModelSpec, (ModelConfig,)),
    "oneshot-training": ("[training]", TrainConfig, ()),
    "oneshot-theory": ("[theory]", TheorySpec, ()),
    "oneshot-pruning": ("[pruning]", PruningSpec, ()),
}
"""Every table of both spec files but ``[cluster]`` (free-form: a dask-jobqueue class's options)."""

OVERRIDES = {(OneShotSpec, "sampler"): OneShotSpec().sampler}
"""Defaults that differ from the class's own: the one-shot spec's ``[sampler]``."""


def keys(cls: type) -> list[dataclasses.Field]:
    """The fields of ``cls`` that are spec keys."""
    return [f for f in dataclasses.fields(cls) if f.init and f.metadata.get("spec", True)]


def meanings(*classes: type) -> dict[str, str]:
    """Field name → meaning, from the ``Attributes:`` or ``Args:`` sections of the classes' docstrings (the first
    class that describes a name wins); an entry ``a, b: text`` describes both names."""
    out: dict[str, str] = {}
    for cls in classes:
        lines = inspect.cleandoc(cls.__doc__ or "").splitlines()
        starts = [i for i, line in enumerate(lines) if line.strip() in ("Attributes:", "Args:")]
        if not starts:
            continue
        entries: list[tuple[list[str], list[str]]] = []
        indent = None
        for line in lines[starts[0] + 1:]:
            if not line.strip():
                continue
            here = len(line) - len(line.lstrip())
            if indent is None:
                indent = here
            if here < indent:
                break
            m = re.fullmatch(r"([\w, ]+):(?:\s+(.*))?", line.strip()) if here == indent else None
            if m:
                entries.append(([n.strip() for n in m.group(1).split(",")], [m.group(2) or ""]))
            elif entries:
                entries[-1][1].append(line.strip())
        for names, text in entries:
            for name in names:
                out.setdefault(name, " ".join(text).strip())
    return out


def type_words(hint) -> str:
    """The TOML type of an annotation, in words (``an integer``, ``a list of strings``, ``a number or a list of
    numbers``; ``None`` as *optional*)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        words = " or ".join(type_words(a) for a in args if a is not type(None))
        return f"{words} (optional)" if type(None) in args else words
    return _describe(hint).removeprefix("a ").removeprefix("an ")


def _toml(value) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return repr(value)


def default(f: dataclasses.Field, instance=None) -> str:
    """The default of field ``f`` as TOML text (``instance``'s value where given), or *required*."""
    if instance is not None:
        return _toml(getattr(instance, f.name))
    if f.default is not dataclasses.MISSING:
        return _toml(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return _toml(f.default_factory())
    return "(required)"


def _code(text: str) -> str:
    return text if text in ("unset", "(required)") else f"`{text}`"


def _cell(text: str) -> str:
    """Table-safe text: reST roles become code, pipes escaped."""
    text = re.sub(r":\w+:`~?([^`]+)`", lambda m: f"`{m.group(1).split('.')[-1] if '~' in m.group(0) else m.group(1)}`",
                  text)
    return text.replace("``", "`").replace("|", "\\|")


def table(cls: type, extra: tuple[type, ...] = (), instance=None, only: tuple[str, ...] | None = None) -> str:
    """The Markdown table of ``cls``'s keys (``only``: these names)."""
    hints = typing.get_type_hints(cls)
    said = meanings(cls, *extra)
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for f in keys(cls):
        if only is not None and f.name not in only:
            continue
        cells = (f"`{f.name}`", type_words(hints[f.name]), _code(default(f, instance)), said.get(f.name, ""))
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


def tables() -> dict[str, str]:
    """File stem → Markdown table, for every stem of :data:`TABLES` and ``top-run``, ``top-oneshot``."""
    out = {f"top-{kind}": table(cls, only=names) for kind, (cls, names) in TOP.items()}
    out |= {stem: table(cls, extra) for stem, (_, cls, extra) in TABLES.items()}
    out["oneshot-sampler"] = table(SamplerSettings, instance=OVERRIDES[(OneShotSpec, "sampler")])
    return out


PAGE = Path(__file__).resolve().parent / "spec.md"
BLOCK = re.compile(r"^<!-- spec-table: ([\w-]+) -->\n.*?^<!-- end spec-table -->$", flags=re.S | re.M)
"""One generated table of docs/spec.md, between its markers."""


def render(page: str) -> str:
    """``page`` with every generated table (:data:`BLOCK`) as :func:`tables` gives it now (``KeyError`` for a
    stem that has no table)."""
    now = tables()
    return BLOCK.sub(lambda m: f"<!-- spec-table: {m.group(1)} -->\n{now[m.group(1)]}<!-- end spec-table -->", page)


def stems(page: str) -> list[str]:
    """The stems of the generated tables in ``page``, in order."""
    return BLOCK.findall(page)


if __name__ == "__main__":
    PAGE.write_text(render(PAGE.read_text()))
