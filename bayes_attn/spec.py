"""Declarative run specifications (TOML files in ``models/``).

A spec names a task, a network built from the task's heads, the likelihood
temperature and the sampler settings. Every field has a default. The embedded
main job, the Fig. 2c Markov network at width 10, is the shipped spec
``models/markov_4paths.toml`` (package data: :func:`load_spec` without a path).

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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._internal import checks as _checks
from ._internal.spec_types import check_name, check_type, read_shipped_toml, read_toml, section, to_toml
from .network import Network
from .samplers import SamplerSettings
from .samplers.settings import check_keys
from .tasks.markov import FIG2C_LAYERS, MarkovTask
from .theory.correction import CORRECTIONS

__all__ = ["CompareSpec", "NetworkSpec", "SHIPPED_SPEC", "Spec", "load_spec", "spec_from_dict"]


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
        _checks.width("width", self.width)
        _checks.seed("random_seed", self.random_seed)
        for name in ("beta", "random_strength"):
            _checks.nonnegative(name, getattr(self, name))
        for i, v in enumerate(self.variances if isinstance(self.variances, tuple) else [self.variances]):
            _checks.positive(f"variances[{i}]" if isinstance(self.variances, tuple) else "variances", v)


@dataclass(frozen=True)
class CompareSpec:
    """Theory-vs-sampling settings.

    ``gp_paths`` names path subsets whose GP limits are drawn as reference
    lines (a subset's GP is that of a network with only those paths).
    ``correction``: the theory whose verdict is the headline, ``"laplace"``
    (the finite-width correction of docs/theory.md §8, the default; the leading
    order is shown beside it) or ``"none"`` (the leading order of §4 alone).
    """

    gp_paths: dict[str, tuple[str, ...]] = field(default_factory=dict)
    path_names: dict[str, str] = field(default_factory=dict)
    rtol: float = 0.05
    n_sigma: float = 3.0
    widths: tuple[int, ...] = (10, 30, 100, 300, 1000, 3000, 10000)
    sample_widths: tuple[int, ...] = (10, 30, 100, 300, 1000, 3000, 10000)
    correction: str = "laplace"


@dataclass(frozen=True)
class Spec:
    """A whole run: task, network, temperature, sampler settings, comparison settings."""

    name: str = "markov_4paths"
    temperature: float = 0.01
    task: MarkovTask = field(default_factory=MarkovTask)
    network: NetworkSpec = field(default_factory=NetworkSpec)
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    compare: CompareSpec = field(default_factory=CompareSpec)
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
            width=n.width if width is None else _checks.width("width", width),
            variances=list(n.variances) if isinstance(n.variances, tuple) else n.variances,
            beta=n.beta,
            random_strength=n.random_strength,
            random_seed=n.random_seed,
            readout=n.readout,
        )

    def data(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Training and test data ``(x, y, x_test, y_test)`` (after :meth:`check_size`)."""
        self.check_size()
        return self.task.generate()

    def data_bytes(self) -> int:
        """Bytes of the largest arrays a run holds (an estimate, float64): the tokens of the training, test and
        validation sets (two copies), the heads' ``[N0, N0]`` matrices and the theory's ``[D, P, P + P_test]``
        kernels."""
        t = self.task
        n = t.n_train + 2 * t.n_test
        D = int(np.prod([len(layer) for layer in self.network.layers]))
        N0 = t.feature_dim + t.seq_len
        return 8 * (2 * n * t.seq_len * t.feature_dim + 4 * N0**2 + 3 * D * t.n_train * (t.n_train + t.n_test))

    def check_size(self) -> None:
        """A one-line ``ValueError`` when the task's arrays cannot fit in memory (before anything is allocated)."""
        t = self.task
        _checks.fits_in_memory(f"the task (n_train={t.n_train}, n_test={t.n_test}, feature_dim={t.feature_dim}, "
                               f"seq_len={t.seq_len})", self.data_bytes())

    def validation(self) -> tuple[np.ndarray, np.ndarray]:
        """Validation set ``(x_val, y_val)``, disjoint from training and test data."""
        return self.task.validation()

    def to_toml(self) -> str:
        """The spec as TOML text (round-trips through :func:`load_spec`)."""
        data = {"name": self.name, "temperature": self.temperature,
                "task": {"kind": "markov"} | dataclasses.asdict(self.task), "network": dataclasses.asdict(self.network),
                "sampler": dataclasses.asdict(self.sampler), "compare": dataclasses.asdict(self.compare)}
        if self.cluster:
            data["cluster"] = self.cluster
        return to_toml(data)


def spec_from_dict(data: dict) -> Spec:
    """Build and check a :class:`Spec` from a parsed TOML table."""
    known = {"name", "temperature", "task", "network", "sampler", "compare", "cluster"}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"spec has unknown keys {sorted(unknown)}; expected some of {sorted(known)}")
    for key in ("task", "network", "sampler", "compare", "cluster"):
        if not isinstance(data.get(key, {}), dict):
            raise ValueError(f"[{key}] must be a table, got {data[key]!r}")
    task = dict(data.get("task", {}))
    kind = task.pop("kind", "markov")
    _checks.choice("task.kind", kind, ("markov",))
    sampler = data.get("sampler", {})
    check_keys(sampler, "[sampler]")  # renamed keys get their own message
    spec = Spec(
        name=check_name(check_type("name", data.get("name", Spec.name), str)),
        temperature=_checks.positive(
            "temperature", check_type("temperature", data.get("temperature", Spec.temperature), float)),
        task=section(MarkovTask, "task", task),
        network=section(NetworkSpec, "network", data.get("network", {})),
        sampler=section(SamplerSettings, "sampler", sampler),
        compare=section(CompareSpec, "compare", data.get("compare", {})),
        cluster=dict(data.get("cluster", {})),
    )
    _checks.seed("task.seed", spec.task.seed)
    spec.check_size()
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
    _checks.choice("compare.correction", spec.compare.correction, CORRECTIONS)
    for key in ("widths", "sample_widths"):
        for w in getattr(spec.compare, key):
            _checks.width(f"compare.{key}", w)
    return spec


SHIPPED_SPEC = "markov_4paths.toml"
"""The embedded main job (Fig. 2c), package data of :mod:`bayes_attn` (a link to ``models/markov_4paths.toml``,
the one copy; ``models/`` itself is not installed with the package)."""


def load_spec(path: str | Path | None = None) -> Spec:
    """Read a TOML spec (``ValueError`` for a missing file, bad TOML or a bad field); ``None`` gives the embedded
    default, the shipped ``models/markov_4paths.toml`` (:class:`Spec` ``()`` keeps the dataclass defaults)."""
    if path is None:
        return spec_from_dict(read_shipped_toml(__package__, SHIPPED_SPEC))
    return spec_from_dict(read_toml(path))
