"""Typed TOML specs: field types checked from dataclass annotations, values written back as TOML.

Shared by the run specs (:mod:`bayes_attn.spec`) and the one-shot specs
(:mod:`bayes_attn.oneshot._spec`). Every error names the field
(``task.seed must be an integer, got 1.5``).
"""

from __future__ import annotations

import codecs
import dataclasses
import importlib.resources
import re
import tomllib
import types
import typing
from pathlib import Path

import numpy as np
import tomli_w


def read_toml(path: str | Path) -> dict:
    """The tables of the TOML spec at ``path``: one-line ``ValueError`` for a missing file, text that is not
    UTF-8 (a UTF-8 byte-order mark is accepted), or invalid TOML; each names the file."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"spec must be an existing TOML file, got {str(path)!r}")
    raw = path.read_bytes()
    try:
        text = raw.removeprefix(codecs.BOM_UTF8).decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"spec {str(path)!r} is not UTF-8 text (byte {err.start}: {raw[err.start:err.start + 1]!r}); "
                         "TOML files are UTF-8: save it as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"spec {str(path)!r} is not valid TOML: {err}") from None


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


def read_shipped_toml(package: str, name: str) -> dict:
    """The tables of the spec ``name`` shipped as package data of ``package`` (:func:`read_toml`)."""
    with importlib.resources.as_file(importlib.resources.files(package) / name) as shipped:
        return read_toml(shipped)


def check_name(name: str) -> str:
    """A spec name is used in file and folder names: letters, digits, ``_.+-``, not starting with a dot."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or len(name) > 100:
        raise ValueError(f"name must be 1-100 letters, digits or '_.+-' not starting with '.' or '-' "
                         f"(it names output folders), got {name!r}")
    return name


def _plain(v):
    """``v`` as plain TOML values: NumPy scalars and arrays, tuples become numbers and lists; ``None`` entries are
    left out (TOML has no null: a field left out takes its default, which is ``None`` for every optional field)."""
    if isinstance(v, dict):
        return {str(k): _plain(e) for k, e in v.items() if e is not None}
    if isinstance(v, (tuple, list, np.ndarray)):
        return [_plain(e) for e in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def to_toml(data: dict) -> str:
    """TOML text of a spec's table ``data`` (written by tomli-w; NumPy scalars become plain numbers)."""
    return tomli_w.dumps(_plain(data))


def check_type(where: str, value, hint):
    """``value`` converted to the annotated type ``hint``, or a ``ValueError`` naming ``where``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        for option in args:
            if option is type(None):
                if value is None:
                    return None
                continue
            try:
                return check_type(where, value, option)
            except ValueError:
                pass
        options = " or ".join(_describe(a) for a in args if a is not type(None))
        raise ValueError(f"{where} must be {options}, got {value!r}")
    if hint is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{where} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where} must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where} must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ValueError(f"{where} must be a string, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where} must be {_describe(hint)}, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(check_type(f"{where}[{i}]", v, args[0]) for i, v in enumerate(value))
        if len(value) != len(args):
            raise ValueError(f"{where} must be {_describe(hint)}, got {value!r}")
        return tuple(check_type(f"{where}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, args, strict=True)))
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where} must be a table, got {value!r}")
        return {check_type(f"{where} key", k, args[0]): check_type(f"{where}[{k!r}]", v, args[1])
                for k, v in value.items()}
    raise TypeError(f"no check for the annotation {hint!r} of {where}")  # a field type this module does not know


def _describe(hint) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_plural(args[0])}"
        return f"a list of {len(args)} {_plural(args[0])}"
    if origin is dict:
        return "a table"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))


def _plural(hint) -> str:
    """``"strings"``, ``"lists of numbers"``: the plural of :func:`_describe` without its article."""
    one = _describe(hint).removeprefix("a ").removeprefix("an ")
    if one.startswith("list of "):
        return "lists of " + one.removeprefix("list of ")
    return "true or false values" if one == "true or false" else one + "s"


def section(cls, name: str, table):
    """An instance of the dataclass ``cls`` from the spec table ``[name]``, every field's type checked (fields
    with ``metadata={"spec": False}`` are not keys of the table)."""
    if not isinstance(table, dict):
        raise ValueError(f"[{name}] must be a table, got {table!r}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls) if f.init and f.metadata.get("spec", True)}
    unknown = set(table) - known
    if unknown:
        raise ValueError(f"[{name}] has unknown keys {sorted(unknown)}; expected some of {sorted(known)}")
    required = [f.name for f in dataclasses.fields(cls) if f.init and f.metadata.get("spec", True)
                and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [k for k in required if k not in table]
    if missing:
        raise ValueError(f"{name}.{missing[0]} is required ([{name}] must give {', '.join(required)}), got "
                         f"{sorted(table) or 'no keys'}")
    values = {k: check_type(f"{name}.{k}", v, hints[k]) for k, v in table.items()}
    try:
        return cls(**values)
    except ValueError as err:
        msg = str(err)
        raise ValueError(msg if msg.startswith((f"{name}.", f"[{name}]")) else f"[{name}] {msg}") from err
