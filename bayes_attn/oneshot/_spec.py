"""Run specification of the one-shot image task (docs/theory.md §6, paper Fig. 3).

A TOML file in ``models/`` names the data, the gradient-descent model and its
training, the theory scan (widths × temperatures), the sampling and the
pruning. Every section is a frozen dataclass that checks itself in
``__post_init__``, so library users get the same errors as spec files;
:meth:`OneShotSpec.from_dict` adds a type check of every field that names it.

Example (every key has a default; see ``models/omniglot_oneshot.toml``)::

    name = "omniglot_oneshot"

    [task]                  # TaskSpec: data, split, episodes
    kind = "omniglot"
    channels = 1
    rotations = true
    shift = 2

    [model]                 # ModelConfig fields but N0 (= channels·patch²)
    width = 128
    heads = [4, 4]

    [training]              # TrainConfig fields
    epochs = 8

    [theory]                # TheorySpec: scan, head scores, sampling widths
    widths = [10, 100, 1000]

    [sampler]               # SamplerSettings fields
    name = "wishart"

    [pruning]               # PruningSpec
    n_random = 10
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._internal import checks as _checks
from .._internal import io as _io
from .._internal.spec_types import check_name, check_type, read_shipped_toml, read_toml, section, to_toml
from ..experiment import Point
from ..network import Network
from ..samplers import SamplerSettings
from ..samplers._settings import check_keys
from ..tasks import OMNIGLOT_RUNS_FILE, OMNIGLOT_SMALL_FILES
from ._model import ModelConfig
from ._training import TrainConfig

__all__ = ["DEFAULT_DATA_DIR", "DIGITS_SPLIT", "KINDS", "ModelSpec", "ONESHOT_SPLIT", "OOD_SETS", "OPTIONAL_PARTS",
           "OneShotSpec", "PAPER_RECIPE", "PAPER_STEPS", "PARTS", "PROJECT_ROOT", "PruningSpec", "SECTIONS",
           "SHIPPED_SPEC", "TORCH_QK_SCALE", "TaskSpec", "TheorySpec", "deviations", "load_oneshot_spec"]

KINDS = ("omniglot", "digits")
OOD_SETS = ("all_runs", "digits")
PARTS = ("gd_train", "validation", "test")
"""The three disjoint class sets: gradient-descent training, validation
(chooses the temperature) and test. The theory's ``P`` training episodes come
from the ``gd_train`` classes (unaugmented), as in the authors' code, unless
the split names a fourth part ``theory_train`` (then its own classes)."""

OPTIONAL_PARTS = ("theory_train",)

ONESHOT_SPLIT: dict[str, tuple[str, ...]] = {
    "gd_train": ("Greek", "Japanese_(katakana)", "Korean", "Latin", "Sanskrit"),
    "validation": ("Tagalog",),
    "test": ("Balinese", "Early_Aramaic"),
}
"""Alphabet split of the 8 distinct small-set alphabets: ``gd_train`` 179
characters (also the classes of the theory's training episodes), validation
Tagalog (17), test Balinese and Early_Aramaic pooled (46 characters)."""

DIGITS_SPLIT: dict[str, tuple[str, ...]] = {
    "gd_train": ("digit0", "digit1", "digit2", "digit3", "digit4", "digit5"),
    "validation": ("digit6", "digit7"),
    "test": ("digit8", "digit9"),
}
"""Class split of scikit-learn's digits (one group: split by class name)."""

DEFAULT_DATA_DIR = "../data/omniglot"
"""The Omniglot subset shipped with the project, relative to ``models/``."""

PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""The folder holding ``bayes_attn/``, ``models/`` and ``data/``."""


def _positive_ints(name: str, values, minimum: int = 1) -> tuple[int, ...]:
    if isinstance(values, (str, int)) or not isinstance(values, (tuple, list)) or not values:
        raise ValueError(f"{name} must be a non-empty list of integers, got {values!r}")
    out = tuple(_checks.positive_int(f"{name}[{i}]", v, minimum=minimum) for i, v in enumerate(values))
    if len(set(out)) != len(out):
        raise ValueError(f"{name} repeats a value: {list(out)}")
    return out


# ----- sections ----------------------------------------------------------------
@dataclass(frozen=True)
class TaskSpec:
    """Data, class split and episodes (docs/theory.md §6).

    Args:
        kind: ``"omniglot"`` (zip files in ``data_dir``) or ``"digits"`` (scikit-learn's, no files).
        data_dir: folder of the zip files; a relative path is relative to the
            spec file's folder (``models/`` for a spec built in code), so the
            default is the subset shipped in ``data/omniglot``; a caller's
            ``data_dir`` argument overrides it.
        files: the Omniglot zips read (default the two "small" background sets).
        runs_file: the one-shot runs zip (``all_runs``, an OOD set).
        size, patch, channels, label_scale: images ``size×size``, cut into
            ``patch×patch`` tokens of ``N0 = channels·patch²`` features (paper 32, 8, 3).
        split: part → alphabets (omniglot) or class names (digits), for the
            parts of :data:`PARTS` (and optionally ``theory_train``: theory
            episodes from classes of their own instead of ``gd_train``'s);
            default :data:`ONESHOT_SPLIT` / :data:`DIGITS_SPLIT`.
        rotations: add 90°/180°/270° rotations as new classes to gradient-descent
            training only (the theory's episodes stay unrotated).
        mirrors: add left-right mirror images (of the rotations too) as new classes, likewise.
        within_alphabet: both classes of every gradient-descent training episode from one alphabet (group), as
            in the validation alphabet's episodes: negatives that share the alphabet's strokes.
        shift: random translation (pixels) of gradient-descent training images only.
        n_gd_train: fresh gradient-descent episodes per epoch.
        n_theory_train: ``P``, the theory/sampling training episodes.
        n_theory_draws: draws of the ``P`` episodes (each its own seed; draw 0
            is the one of the scan) over which the head-score–drop Spearman ρ
            is spread (``spearman_draws``).
        n_validation, n_test, n_ood: validation, test and per-OOD-set episodes.
        ood: out-of-distribution sets, among :data:`OOD_SETS` (``all_runs``:
            the 20 one-shot runs, both classes of an episode from one run).
        seed: seed of every episode draw.
    """

    kind: str = "omniglot"
    data_dir: str = DEFAULT_DATA_DIR
    files: tuple[str, ...] = OMNIGLOT_SMALL_FILES
    runs_file: str = OMNIGLOT_RUNS_FILE
    size: int = 32
    patch: int = 8
    channels: int = 1
    label_scale: float = 1.0
    split: dict[str, tuple[str, ...]] = None  # type: ignore[assignment]  # None: the kind's, set by __post_init__
    rotations: bool = False
    mirrors: bool = False
    within_alphabet: bool = False
    shift: int = 0
    n_gd_train: int = 20000
    n_theory_train: int = 600
    n_theory_draws: int = 5
    n_validation: int = 1000
    n_test: int = 1000
    n_ood: int = 1000
    ood: tuple[str, ...] = ("all_runs", "digits")
    seed: int = 0

    def __post_init__(self) -> None:
        _checks.choice("task.kind", self.kind, KINDS)
        for name in ("data_dir", "runs_file"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"task.{name} must be a non-empty string, got {getattr(self, name)!r}")
        if isinstance(self.files, str) or not self.files or not all(isinstance(f, str) and f for f in self.files):
            raise ValueError(f"task.files must be a non-empty list of zip file names, got {self.files!r}")
        object.__setattr__(self, "files", tuple(self.files))
        _checks.positive_int("task.n_theory_draws", self.n_theory_draws)
        for name in ("size", "patch", "channels", "n_gd_train", "n_theory_train", "n_validation", "n_test", "n_ood"):
            _checks.positive_int(f"task.{name}", getattr(self, name), minimum=2 if name.startswith("n_") else 1)
            if name.startswith("n_") and getattr(self, name) % 2:
                raise ValueError(f"task.{name} must be even (balanced episodes), got {getattr(self, name)}")
        if self.size % self.patch:
            raise ValueError(f"task.size ({self.size}) must be a multiple of task.patch ({self.patch})")
        _checks.positive_int("task.shift", self.shift, minimum=0)
        if self.shift >= self.size:
            raise ValueError(f"task.shift must be smaller than task.size={self.size}, got {self.shift}")
        _checks.seed("task.seed", self.seed)
        if isinstance(self.label_scale, bool) or not isinstance(self.label_scale, (int, float)) or self.label_scale < 0:
            raise ValueError(f"task.label_scale must be a number >= 0, got {self.label_scale!r}")
        for name in ("rotations", "mirrors", "within_alphabet"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"task.{name} must be true or false, got {getattr(self, name)!r}")
        if isinstance(self.ood, str) or not all(o in OOD_SETS for o in self.ood) or len(set(self.ood)) != len(self.ood):
            raise ValueError(f"task.ood must list distinct sets among {list(OOD_SETS)}, got {self.ood!r}")
        object.__setattr__(self, "ood", tuple(self.ood))
        if self.kind == "digits" and "digits" in self.ood:
            raise ValueError("task.ood cannot hold 'digits' when task.kind is 'digits' (it is not out of distribution)")
        split = (ONESHOT_SPLIT if self.kind == "omniglot" else DIGITS_SPLIT) if self.split is None else self.split
        if not isinstance(split, dict) or not set(PARTS) <= set(split) <= set(PARTS + OPTIONAL_PARTS):
            raise ValueError(f"task.split must be a table with the parts {list(PARTS)} (and optionally "
                             f"{list(OPTIONAL_PARTS)}), got {split!r}")
        parts = [p for p in PARTS + OPTIONAL_PARTS if p in split]
        seen: dict[str, str] = {}
        for part in parts:
            names = split[part]
            if isinstance(names, str) or not names or not all(isinstance(n, str) for n in names):
                raise ValueError(f"task.split.{part} must be a non-empty list of names, got {names!r}")
            for n in names:
                if n in seen:
                    raise ValueError(f"task.split: {n!r} is in both {seen[n]!r} and {part!r}; "
                                     "the parts must be disjoint")
                seen[n] = part
        object.__setattr__(self, "split", {p: tuple(split[p]) for p in parts})

    @property
    def N0(self) -> int:
        """Features per token, ``channels·patch²``."""
        return self.channels * self.patch**2

    @property
    def theory_part(self) -> str:
        """The part whose classes the theory's ``P`` episodes come from (``gd_train`` unless the split names
        ``theory_train``)."""
        return "theory_train" if "theory_train" in self.split else "gd_train"


@dataclass(frozen=True)
class ModelSpec:
    """The gradient-descent model: :class:`~bayes_attn.oneshot._model.ModelConfig` without ``N0``.

    Attributes:
        width: value width ``d`` (paper 512).
        d_qk: query/key dimension (paper 128).
        heads: heads per layer ``(H_1, ..., H_L)``.
        qk_scale: factor on the usual query/key initialisation (0 starts from uniform attention).
    """

    width: int = 128
    d_qk: int = 32
    heads: tuple[int, ...] = (4, 4)
    qk_scale: float = 0.1

    def __post_init__(self):
        heads = self.heads
        if isinstance(heads, (str, int)) or not isinstance(heads, (tuple, list)):
            raise ValueError(f"heads must be a non-empty list of heads per layer, got {heads!r}")
        object.__setattr__(self, "heads", tuple(heads))
        self.config(1)  # ModelConfig's checks

    def config(self, N0: int) -> ModelConfig:
        """The :class:`ModelConfig` for tokens of ``N0`` features."""
        return ModelConfig(N0=N0, width=self.width, d_qk=self.d_qk, heads=tuple(self.heads), qk_scale=self.qk_scale)


@dataclass(frozen=True)
class TheorySpec:
    """Theory scan, head scores and sampling widths (docs/theory.md §4, §6).

    Args:
        widths: ``N`` of the scan (all widths equal ``N``).
        temperatures: the temperature grid; each width (and the GP limit)
            gets the grid value of best *validation* accuracy.
        score_width, score_temperature: where the head scores are read off
            the theory's ``U`` (paper: 10 and 0.5).
        sample_widths: widths sampled with ``[sampler]`` at their chosen
            temperature; each must be in ``widths``.
        variances: prior variances of the theory network (one for all).
    """

    widths: tuple[int, ...] = (10, 30, 100, 300, 1000, 3000, 10000)
    temperatures: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 0.5, 1.0, 1.5)
    score_width: int = 10
    score_temperature: float = 0.5
    sample_widths: tuple[int, ...] = (10, 100)
    variances: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "widths", _positive_ints("theory.widths", self.widths))
        sample_widths = tuple(self.sample_widths) and _positive_ints("theory.sample_widths", self.sample_widths)
        object.__setattr__(self, "sample_widths", sample_widths)
        if isinstance(self.temperatures, (str, int, float)) or not self.temperatures:
            raise ValueError("theory.temperatures must be a non-empty list of positive numbers, "
                             f"got {self.temperatures!r}")
        temps = tuple(_checks.positive(f"theory.temperatures[{i}]", t) for i, t in enumerate(self.temperatures))
        if len(set(temps)) != len(temps):
            raise ValueError(f"theory.temperatures repeats a value: {list(temps)}")
        object.__setattr__(self, "temperatures", temps)
        _checks.positive_int("theory.score_width", self.score_width)
        score_temperature = _checks.positive("theory.score_temperature", self.score_temperature)
        object.__setattr__(self, "score_temperature", score_temperature)
        object.__setattr__(self, "variances", _checks.positive("theory.variances", self.variances))
        if self.score_width not in self.widths:
            raise ValueError(f"theory.score_width must be among theory.widths {list(self.widths)}, "
                             f"got {self.score_width}")
        missing = [w for w in self.sample_widths if w not in self.widths]
        if missing:
            raise ValueError(f"theory.sample_widths must be among theory.widths {list(self.widths)}, got {missing}")


@dataclass(frozen=True)
class PruningSpec:
    """Random pruning orders, the class bootstrap of the test episodes, their seed.

    Args:
        n_random: random pruning orders (the reference curve).
        n_bootstrap: class-bootstrap resamples of the test episodes for the
            standard errors of accuracies.
        spread_bootstrap: class-bootstrap resamples of the test episodes per
            draw of the theory's training episodes in ``spearman_draws``
            (``task.n_theory_draws × spread_bootstrap`` values of ρ).
        seed: seed of the random orders and of the bootstraps.
    """

    n_random: int = 10
    n_bootstrap: int = 200
    spread_bootstrap: int = 20
    seed: int = 0

    def __post_init__(self):
        _checks.positive_int("pruning.n_random", self.n_random, minimum=2)
        _checks.positive_int("pruning.n_bootstrap", self.n_bootstrap, minimum=2)
        _checks.positive_int("pruning.spread_bootstrap", self.spread_bootstrap)
        _checks.seed("pruning.seed", self.seed)


SECTIONS = {"task": TaskSpec, "model": ModelSpec, "training": TrainConfig, "theory": TheorySpec,
            "sampler": SamplerSettings, "pruning": PruningSpec}


@dataclass(frozen=True)
class OneShotSpec:
    """A whole Fig. 3 run: data, model, training, theory scan, sampling, pruning.

    Attributes:
        name: the run's name: the default output folder of ``bayes-attn prune`` is ``runs/<name>``.
        task: ``[task]``: :class:`TaskSpec`.
        model: ``[model]``: :class:`ModelSpec`.
        training: ``[training]``: :class:`~bayes_attn.oneshot._training.TrainConfig`.
        theory: ``[theory]``: :class:`TheorySpec`.
        sampler: ``[sampler]``: :class:`~bayes_attn.samplers.SamplerSettings` (default 2 chains of 200 warm-up
            and 200 kept draws).
        pruning: ``[pruning]``: :class:`PruningSpec`.
    """

    name: str = "omniglot_oneshot"
    task: TaskSpec = field(default_factory=TaskSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    training: TrainConfig = field(default_factory=TrainConfig)
    theory: TheorySpec = field(default_factory=TheorySpec)
    sampler: SamplerSettings = field(
        default_factory=lambda: SamplerSettings(num_chains=2, num_warmup=200, num_samples=200))
    pruning: PruningSpec = field(default_factory=PruningSpec)
    source: str | None = field(default=None, compare=False, repr=False)
    """The spec file it was read from (``None`` when built in code); relative ``data_dir`` resolve against its
    folder."""

    def __post_init__(self):
        check_name(self.name)
        for key, cls in SECTIONS.items():
            if not isinstance(getattr(self, key), cls):
                raise ValueError(f"{key} must be a {cls.__name__}, got {type(getattr(self, key)).__name__}")

    def data_path(self, data_dir: str | os.PathLike | None = None) -> Path:
        """The data folder: ``data_dir`` when given (as is), else ``task.data_dir`` resolved against the spec file's
        folder."""
        if data_dir is not None:
            return Path(data_dir).expanduser()
        path = Path(self.task.data_dir).expanduser()
        if path.is_absolute():
            return path
        base = Path(self.source).resolve().parent if self.source else PROJECT_ROOT / "models"
        return Path(os.path.normpath(base / path))

    def point(self, net: Network, train: tuple, test: tuple, temperature: float, *, correction: str = "laplace",
              sampler: SamplerSettings | None = None, progress_bar: bool = False) -> Point:
        """The experiment point of the frozen network ``net`` (at its width) trained on ``train`` ``(x, y)`` and
        tested on ``test`` at ``temperature``, as :meth:`bayes_attn.spec.Spec.point` makes one of a run spec:
        ``sampler`` (``None``: theory only; prune passes ``[sampler]``) and the theory's ``correction``."""
        (x, y), (x_test, y_test) = train, test
        return Point(net, x, y, x_test, y_test, temperature, correction=correction, sampler=sampler,
                     progress_bar=progress_bar)

    @property
    def model_config(self) -> ModelConfig:
        """The gradient-descent :class:`ModelConfig` (``N0`` from the task's tokens)."""
        return self.model.config(self.task.N0)

    def training_settings(self) -> dict:
        """Everything the trained model depends on (a JSON-ready dict; ``data_dir`` and evaluation sets excluded)."""
        t = dataclasses.asdict(self.task)
        for k in ("data_dir", "n_theory_train", "n_theory_draws", "n_validation", "n_test", "n_ood", "ood"):
            t.pop(k)
        for k in ("mirrors", "within_alphabet"):  # settings from before these options keep their hash
            if not t[k]:
                t.pop(k)
        t["split"] = {"gd_train": list(t["split"]["gd_train"])}
        return {"task": t, "model": dataclasses.asdict(self.model), "training": self.training.to_dict()}

    def training_hash(self) -> str:
        """Short hash of :meth:`training_settings`, stored with the model to reuse it only when they match."""
        return _io.digest(json.dumps(self.training_settings(), sort_keys=True, default=list))

    @classmethod
    def from_dict(cls, table: dict) -> OneShotSpec:
        """Build from a parsed TOML table, checking every field's type (errors name the field)."""
        if not isinstance(table, dict):
            raise ValueError(f"spec must be a table, got {table!r}")
        unknown = set(table) - {"name", *SECTIONS}
        if unknown:
            raise ValueError(f"spec has unknown keys {sorted(unknown)}; expected some of {sorted({'name', *SECTIONS})}")
        kwargs: dict[str, Any] = {"name": check_name(check_type("name", table.get("name", cls.name), str))}
        for key, table_cls in SECTIONS.items():
            sub = table.get(key, {})
            if key == "sampler" and isinstance(sub, dict):
                check_keys(sub, "[sampler]")
                sub = {**dataclasses.asdict(cls().sampler), **sub}
            kwargs[key] = section(table_cls, key, sub)
        return cls(**kwargs)

    def to_toml(self) -> str:
        """The spec as TOML text; ``OneShotSpec.from_dict(tomllib.loads(text)) == self``."""
        return to_toml({"name": self.name} | {key: dataclasses.asdict(getattr(self, key)) for key in SECTIONS})


TORCH_QK_SCALE = 1 / 3**0.5
"""``qk_scale`` giving PyTorch's default ``nn.Linear`` standard deviation ``1/sqrt(3·fan_in)``."""

PAPER_RECIPE = {
    "task.channels": 3, "task.rotations": False, "task.mirrors": False, "task.within_alphabet": False,
    "task.shift": 0, "task.label_scale": 1.0,
    "model.width": 512, "model.d_qk": 128, "model.qk_scale": round(TORCH_QK_SCALE, 3),
    "training.optimizer": "adam", "training.lr": 3e-4, "training.weight_decay": 5e-5, "training.batch": 128,
    "training.patience": None, "training.lr_factor": None, "theory.score_width": 10, "theory.score_temperature": 0.5,
}
"""The authors' settings (docs/theory.md §6) that a spec sets; :func:`deviations` lists the others."""

PAPER_STEPS = 41_000
"""About the authors' number of Adam steps (10 epochs at batch 128)."""


def deviations(spec: OneShotSpec) -> list[str]:
    """Every way ``spec`` departs from the authors' Fig. 3 recipe, one line each (fixed departures included)."""
    out = []
    for key, want in PAPER_RECIPE.items():
        section_, name = key.split(".")
        got = getattr(getattr(spec, section_), name)
        if isinstance(want, float) and isinstance(got, float) and abs(got - want) <= 1e-3 * abs(want):
            continue
        if got != want:
            out.append(f"{key} = {got!r} (authors: {want!r})")
    steps = spec.training.epochs * -(-spec.task.n_gd_train // spec.training.batch)
    if steps < 0.9 * PAPER_STEPS:
        out.append(f"{'at most ' if spec.training.patience else ''}{steps} optimiser steps (authors: ~{PAPER_STEPS})")
    out += [
        "initialisation: normal with std qk_scale/sqrt(fan_in) for query/key and 1/sqrt(fan_in) for V0, the value "
        "maps and the readout (PyTorch's nn.Linear default: uniform, std 1/sqrt(3 fan_in)); no biases",
        "fresh episodes each epoch from a seeded sampler (authors: their episode loader)",
        f"theory episodes: fresh episodes of the {spec.task.theory_part} classes (authors: a replay of their "
        "training loader's episodes)",
        "temperature chosen on validation episodes (authors: on the test episodes)",
        "the 8 smallest Omniglot background alphabets (242 characters) instead of the full 964/659-character sets",
    ]
    return out


SHIPPED_SPEC = "omniglot_oneshot.toml"
"""The shipped CPU spec, package data of :mod:`bayes_attn.oneshot` (a link to ``models/omniglot_oneshot.toml``,
the one copy; ``models/`` itself is not installed with the package). Read without a source, its relative
``data_dir`` resolves against ``models/`` like the file's (:meth:`OneShotSpec.data_path`)."""


def load_oneshot_spec(path: str | Path | None = None) -> OneShotSpec:
    """Read a one-shot TOML spec (``ValueError`` for a missing file, bad TOML or a bad field).

    ``None`` gives the embedded default: the shipped CPU spec ``models/omniglot_oneshot.toml``
    (the default of ``bayes-attn prune``; :class:`OneShotSpec` ``()`` keeps the dataclass defaults).
    """
    if path is None:
        return OneShotSpec.from_dict(read_shipped_toml(__package__, SHIPPED_SPEC))
    return dataclasses.replace(OneShotSpec.from_dict(read_toml(path)), source=str(Path(path).resolve()))
