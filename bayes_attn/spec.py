"""Declarative run specifications (TOML files in ``models/``).

A spec names a task, a network built from the task's heads, the likelihood
temperature and the sampler settings. Every field has a default, and the
defaults are the embedded main job: the Fig. 2c Markov network at width 10.

Example::

    name = "markov_4paths"
    temperature = 0.01

    [task]            # MarkovTask fields
    kind = "markov"
    n_train = 100

    [network]
    layers = [["same_token", "random"], ["uniform", "random"]]
    width = 10

    [sampler]         # SamplerSettings fields
    name = "wishart"
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import _checks
from .tasks.markov import FIG2C_LAYERS, MarkovTask
from .network import Network
from .samplers import SamplerSettings
from .samplers.settings import check_keys


@dataclass(frozen=True)
class NetworkSpec:
    """Heads per layer (names from :data:`bayes_attn.tasks.markov.HEADS`) and priors."""

    layers: tuple[tuple[str, ...], ...] = FIG2C_LAYERS
    width: int = 10
    variances: float | tuple[float, ...] = 1.0
    beta: float = 10.0
    random_strength: float = 1.0
    random_seed: int = 1
    readout: str = "last"

    def __post_init__(self):
        _checks.positive_int("width", self.width)
        _checks.positive_int("random_seed", self.random_seed, minimum=0)
        for name in ("beta", "random_strength"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a non-negative number, got {v!r}")
        for i, v in enumerate(self.variances if isinstance(self.variances, tuple) else [self.variances]):
            _checks.positive(f"variances[{i}]" if isinstance(self.variances, tuple) else "variances", v)


@dataclass(frozen=True)
class CompareSpec:
    """Theory-vs-sampling settings.

    ``gp_paths`` names path subsets whose GP limits are drawn as reference
    lines (a subset's GP is that of a network with only those paths).
    """

    gp_paths: dict[str, tuple[str, ...]] = field(default_factory=dict)
    path_names: dict[str, str] = field(default_factory=dict)
    rtol: float = 0.05
    n_sigma: float = 3.0
    widths: tuple[int, ...] = (10, 30, 100, 300, 1000, 3000, 10000)
    sample_widths: tuple[int, ...] = (10, 30, 100, 300, 1000, 3000, 10000)


FIG2C_COMPARE = CompareSpec(
    gp_paths={"good path": ("1-1",), "good + denoising paths": ("1-1", "2-1")},
    path_names={"1-1": "good", "2-1": "denoising"},
)
"""Comparison settings of the embedded default (Fig. 2c paths)."""


@dataclass(frozen=True)
class Spec:
    """A whole run: task, network, temperature, sampler settings, comparison settings."""

    name: str = "markov_4paths"
    temperature: float = 0.01
    task: MarkovTask = field(default_factory=MarkovTask)
    network: NetworkSpec = field(default_factory=NetworkSpec)
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    compare: CompareSpec = field(default_factory=lambda: FIG2C_COMPARE)
    cluster: dict = field(default_factory=dict)

    def __post_init__(self):
        check_name(self.name)
        if not isinstance(self.cluster, dict):
            raise ValueError(f"[cluster] must be a table, got {self.cluster!r}")

    def net(self, width: int | None = None) -> Network:
        """The network, at ``width`` if given."""
        n = self.network
        return self.task.network(
            n.layers,
            width=n.width if width is None else _checks.positive_int("width", width),
            variances=list(n.variances) if isinstance(n.variances, tuple) else n.variances,
            beta=n.beta,
            random_strength=n.random_strength,
            random_seed=n.random_seed,
            readout=n.readout,
        )

    def data(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Training and test data ``(x, y, x_test, y_test)``."""
        return self.task.generate()

    def validation(self) -> tuple[np.ndarray, np.ndarray]:
        """Validation set ``(x_val, y_val)``, disjoint from training and test data."""
        return self.task.validation()

    def to_toml(self) -> str:
        """The spec as TOML text (round-trips through :func:`load_spec`)."""
        lines = [f'name = "{self.name}"', f"temperature = {self.temperature!r}", ""]
        sections = (("task", self.task), ("network", self.network), ("sampler", self.sampler), ("compare", self.compare))
        for section, obj in sections:
            lines.append(f"[{section}]")
            if section == "task":
                lines.append('kind = "markov"')
            for k, v in dataclasses.asdict(obj).items():
                lines.append(f"{k} = {_toml_value(v)}")
            lines.append("")
        if self.cluster:
            lines.append("[cluster]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in self.cluster.items()]
            lines.append("")
        return "\n".join(lines)


def _toml_value(v) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f'"{k}" = {_toml_value(e)}' for k, e in v.items()) + "}"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_toml_value(e) for e in v) + "]"
    return repr(v)


def _check_type(where: str, value, hint):
    """``value`` converted to the annotated type ``hint``, or a ``ValueError`` naming ``where``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        errors = []
        for option in args:
            try:
                return _check_type(where, value, option)
            except ValueError as err:
                errors.append(err)
        raise ValueError(f"{where} must be {' or '.join(_describe(a) for a in args)}, got {value!r}")
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
            return tuple(_check_type(f"{where}[{i}]", v, args[0]) for i, v in enumerate(value))
        if len(value) != len(args):
            raise ValueError(f"{where} must be {_describe(hint)}, got {value!r}")
        return tuple(_check_type(f"{where}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, args)))
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where} must be a table, got {value!r}")
        return {_check_type(f"{where} key", k, args[0]): _check_type(f"{where}[{k!r}]", v, args[1]) for k, v in value.items()}
    raise TypeError(f"no check for the annotation {hint!r} of {where}")  # a field type this module does not know


def _describe(hint) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_describe(args[0]).removeprefix('a ').removeprefix('an ')}s"
        return f"a list of {len(args)} {_describe(args[0]).removeprefix('a ').removeprefix('an ')}s"
    if origin is dict:
        return "a table"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))


def _section(cls, name: str, table):
    """An instance of the dataclass ``cls`` from the spec table ``[name]``, every field's type checked."""
    if not isinstance(table, dict):
        raise ValueError(f"[{name}] must be a table, got {table!r}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(table) - known
    if unknown:
        raise ValueError(f"[{name}] has unknown keys {sorted(unknown)}; expected some of {sorted(known)}")
    values = {k: _check_type(f"{name}.{k}", v, hints[k]) for k, v in table.items()}
    try:
        return cls(**values)
    except ValueError as err:
        raise ValueError(f"[{name}] {err}") from err


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


def check_name(name: str) -> str:
    """A spec name is used in file and folder names: letters, digits, ``_.+-``, not starting with a dot."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or len(name) > 100:
        raise ValueError(f"name must be 1-100 letters, digits or '_.+-' not starting with '.' or '-' "
                         f"(it names output folders), got {name!r}")
    return name


def spec_from_dict(data: dict) -> Spec:
    """Build and check a :class:`Spec` from a parsed TOML table."""
    known = {"name", "temperature", "task", "network", "sampler", "compare", "cluster"}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"spec has unknown keys {sorted(unknown)}; expected some of {sorted(known)}")
    for section in ("task", "network", "sampler", "compare", "cluster"):
        if not isinstance(data.get(section, {}), dict):
            raise ValueError(f"[{section}] must be a table, got {data[section]!r}")
    task = dict(data.get("task", {}))
    kind = task.pop("kind", "markov")
    _checks.choice("task.kind", kind, ("markov",))
    sampler = data.get("sampler", {})
    check_keys(sampler, "[sampler]")  # renamed keys get their own message
    spec = Spec(
        name=check_name(_check_type("name", data.get("name", Spec.name), str)),
        temperature=_checks.positive("temperature", _check_type("temperature", data.get("temperature", Spec.temperature), float)),
        task=_section(MarkovTask, "task", task),
        network=_section(NetworkSpec, "network", data.get("network", {})),
        sampler=_section(SamplerSettings, "sampler", sampler),
        compare=_section(CompareSpec, "compare", data.get("compare", {})),
        cluster=dict(data.get("cluster", {})),
    )
    labels = spec.net().path_labels  # fail early on a bad network
    for name, paths in spec.compare.gp_paths.items():
        bad = [p for p in paths if p not in labels]
        if bad or not paths:
            raise ValueError(f"compare.gp_paths[{name!r}] must list paths among {labels}, got {list(paths)}")
    bad = [p for p in spec.compare.path_names if p not in labels]
    if bad:
        raise ValueError(f"compare.path_names must name paths among {labels}, got {bad}")
    _checks.positive("compare.rtol", spec.compare.rtol)
    _checks.positive("compare.n_sigma", spec.compare.n_sigma)
    for key in ("widths", "sample_widths"):
        for w in getattr(spec.compare, key):
            _checks.positive_int(f"compare.{key}", w)
    return spec


def load_spec(path: str | Path | None = None) -> Spec:
    """Read a TOML spec; ``None`` gives the embedded default."""
    if path is None:
        return Spec()
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"spec must be an existing TOML file, got {str(path)!r}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"spec {str(path)!r} is not valid TOML: {err}") from err
    return spec_from_dict(data)
