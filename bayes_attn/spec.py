"""Declarative run specifications (TOML files in ``models/``).

A spec names a task, a network, the likelihood temperature and the sampler
settings. Two task kinds: ``"markov"``, the paper's hidden-Markov-chain task
with a network of its named heads, and ``"arrays"``, your own data and attention
in ``.npz`` files (:mod:`bayes_attn.tasks._arrays`). Every other field has a
default. The embedded main job, the Fig. 2c Markov network at width 10, is the
shipped spec ``models/markov_4paths.toml`` (package data: :func:`load_spec`
without a path).

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

Your own arrays (paths relative to the spec's folder)::

    [task]            # ArraysTask fields
    kind = "arrays"
    file = "data.npz"            # x, y, x_test, y_test (x_val, y_val optional)

    [network]         # ArraysNetwork fields
    attention = "attention.npz"  # W_1, W_2, ... or Q_1, K_1, ...
    width = 20
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._internal import checks as _checks
from ._internal.spec_types import check_name, check_type, read_shipped_toml, read_toml, section, to_toml
from .experiment import Point
from .network import Network
from .samplers import SamplerSettings
from .samplers._settings import check_keys
from .tasks._arrays import ArraysNetwork, ArraysTask
from .tasks.markov import FIG2C_LAYERS, MarkovTask
from .theory._correction import CORRECTIONS
from .verdict import check_tolerances

__all__ = ["TASK_KINDS", "CompareSpec", "NetworkSpec", "SHIPPED_SPEC", "Spec", "load_spec", "spec_from_dict"]


@dataclass(frozen=True)
class NetworkSpec:
    """Heads per layer (names from :data:`bayes_attn.tasks.markov.HEADS`) and priors (``[network]`` of a spec of
    kind ``"markov"``).

    Attributes:
        layers: the heads of each layer, by name (``"same_token"``, ``"different_token"``, ``"uniform"``,
            ``"random"``); default the Fig. 2c network, two layers of two heads (docs/theory.md §6).
        width: ``N``, every layer's width and the readout's.
        variances: prior variances, one number or ``[s0², s1², ..., sL², sa²]``.
        beta: factor on every head's bilinear matrix (the sharpness of its attention).
        random_strength: scale of the ``"random"`` heads' entries (0: uniform attention).
        random_seed: seed of the first ``"random"`` head (each further head: the next seed).
        readout: query position of the last layer, ``"last"``, ``"first"`` or ``"mean"``.
    """

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

    Attributes:
        gp_paths: name → path labels (``"1-1"``: head 1 of layer 1, then head 1 of layer 2): the GP limit of a
            network with only those paths, whose test accuracy the report lists and the figures draw.
        path_names: path label → a name shown beside it in the figures (e.g. ``"good path"``).
        rtol: relative tolerance of each theory-vs-sampling check (:func:`bayes_attn.compare`), in (0, 1).
        n_sigma: Monte-Carlo standard errors beyond the noise floor that make a difference significant, in [1, 10].
        widths: the widths of ``bayes-attn sweep``'s theory (``--widths`` overrides them).
        sample_widths: the widths ``bayes-attn sweep`` samples (``--sample-widths`` overrides them).
        correction: the headline theory, ``"laplace"`` (§8) or ``"none"`` (§4).
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
    """A whole run: task, network, temperature, sampler settings, comparison settings.

    Attributes:
        name: the run's name: the default output folder is ``runs/<name>-N<width>`` (``bayes-attn run``); a spec
            without it is named ``markov_4paths``, or after its data file for ``kind = "arrays"``.
        temperature: the likelihood temperature (the variance of the labels' Gaussian noise, docs/theory.md §1).
        task: ``[task]``: :class:`~bayes_attn.tasks.markov.MarkovTask` (``kind = "markov"``) or
            :class:`~bayes_attn.tasks._arrays.ArraysTask` (``kind = "arrays"``).
        network: ``[network]``: :class:`NetworkSpec` or :class:`~bayes_attn.tasks._arrays.ArraysNetwork`.
        sampler: ``[sampler]``: :class:`~bayes_attn.samplers.SamplerSettings`.
        compare: ``[compare]``: :class:`CompareSpec`.
        cluster: ``[cluster]``: a dask-jobqueue cluster for ``bayes-attn sweep --executor dask`` (docs/sweeps.md).
    """

    name: str = "markov_4paths"
    temperature: float = 0.01
    task: MarkovTask | ArraysTask = field(default_factory=MarkovTask)
    network: NetworkSpec | ArraysNetwork = field(default_factory=NetworkSpec)
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    compare: CompareSpec = field(default_factory=CompareSpec)
    cluster: dict = field(default_factory=dict)

    def __post_init__(self):
        check_name(self.name)
        if not isinstance(self.cluster, dict):
            raise ValueError(f"[cluster] must be a table, got {self.cluster!r}")

    @property
    def kind(self) -> str:
        """The task's kind, ``"markov"`` or ``"arrays"``."""
        return "arrays" if isinstance(self.task, ArraysTask) else "markov"

    @property
    def root(self) -> str:
        """The folder the spec's data files are relative to (``"."`` for the Markov task, which has none)."""
        return self.task.root if isinstance(self.task, ArraysTask) else "."

    def net(self, width: int | None = None) -> Network:
        """The network, at ``width`` if given."""
        n = self.network
        width = n.width if width is None else _checks.width("width", width)
        if isinstance(n, ArraysNetwork):
            return n.build(width)
        assert isinstance(self.task, MarkovTask)  # spec_from_dict pairs the kinds
        return self.task.network(
            n.layers,
            width=width,
            variances=list(n.variances) if isinstance(n.variances, tuple) else n.variances,
            beta=n.beta,
            random_strength=n.random_strength,
            random_seed=n.random_seed,
            readout=n.readout,
        )

    def point(self, width: int | None = None, temperature: float | None = None, *, data: tuple | None = None,
              correction: str = "laplace", sampler: SamplerSettings | None = None, progress_bar: bool = False) -> Point:
        """The experiment point of this spec at ``width`` and ``temperature`` (default: the spec's): its data
        (:meth:`data` unless the caller has them: ``(x, y, x_test, y_test)``), the comparison's tolerances and
        headline, ``sampler`` (``None``: theory only) and the theory's ``correction``."""
        x, y, xt, yt = self.data() if data is None else data
        temperature = self.temperature if temperature is None else temperature
        return Point(self.net(width), x, y, xt, yt, temperature, correction=correction, sampler=sampler,
                     rtol=self.compare.rtol, n_sigma=self.compare.n_sigma, headline=self.compare.correction,
                     progress_bar=progress_bar)

    def data(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Training and test data ``(x, y, x_test, y_test)`` (after :meth:`check_size`)."""
        self.check_size()
        return self.task.generate()

    def data_bytes(self) -> int:
        """Bytes of the largest arrays a run holds (an estimate, float64): the tokens of the training, test and
        validation sets (two copies), the heads' ``[N0, N0]`` matrices and the theory's ``[D, P, P + P_test]``
        kernels."""
        t = self.task
        if isinstance(t, ArraysTask):
            return t.data_bytes(self.net().D)
        n = t.n_train + 2 * t.n_test
        assert isinstance(self.network, NetworkSpec)
        D = int(np.prod([len(layer) for layer in self.network.layers]))
        N0 = t.feature_dim + t.seq_len
        return 8 * (2 * n * t.seq_len * t.feature_dim + 4 * N0**2 + 3 * D * t.n_train * (t.n_train + t.n_test))

    def check_size(self) -> None:
        """A one-line ``ValueError`` when the task's arrays cannot fit in memory (before anything is allocated)."""
        _checks.fits_in_memory(f"the task ({self.describe_task()})", self.data_bytes())

    def describe_task(self) -> str:
        """The task's sizes in one phrase, e.g. ``n_train=100, n_test=1000, feature_dim=200, seq_len=30``."""
        t = self.task
        if isinstance(t, ArraysTask):
            return t.describe()
        return f"n_train={t.n_train}, n_test={t.n_test}, feature_dim={t.feature_dim}, seq_len={t.seq_len}"

    def validation(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Validation set ``(x_val, y_val)``, disjoint from training and test data (``None``: a task of your own
        arrays without one)."""
        return self.task.validation()

    def tables(self) -> dict:
        """The spec's tables as ``spec.toml`` records them (``[task]`` with its kind; no local fields)."""
        def table(obj) -> dict:
            return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.metadata.get("spec", True)}

        data = {"name": self.name, "temperature": self.temperature, "task": {"kind": self.kind} | table(self.task),
                "network": table(self.network), "sampler": dataclasses.asdict(self.sampler),
                "compare": dataclasses.asdict(self.compare)}
        return data | ({"cluster": self.cluster} if self.cluster else {})

    def to_toml(self) -> str:
        """The spec as TOML text (round-trips through :func:`load_spec`)."""
        return to_toml(self.tables())


TASK_KINDS = ("markov", "arrays")
"""The spec's task kinds: the paper's hidden-Markov-chain task, or your own arrays."""


def _sections(kind: str, task: dict, network: dict, root: str) -> tuple:
    """The task and network of ``kind``, their arrays checked (``"arrays"``: each file read, hashed, and its
    ``N0`` compared with the other's)."""
    if kind == "markov":
        t = section(MarkovTask, "task", task)
        _checks.seed("task.seed", t.seed)
        return t, section(NetworkSpec, "network", network)
    at, an = section(ArraysTask, "task", task), section(ArraysNetwork, "network", network)
    at = dataclasses.replace(at, root=root).checked()
    an = dataclasses.replace(an, root=root).checked()
    n0_data, n0_net = at.N0, an.build(an.width).N0
    if n0_data != n0_net:
        with np.load(an.path, allow_pickle=False) as f:
            keys = sorted(k.removesuffix(".npy") for k in f.files)
        raise ValueError(f"{an.path}: {', '.join(keys)} have N0 = {n0_net}, which must equal the tokens' of "
                         f"{at.path}: x (N0 = {n0_data}); W_l is [H_l, N0, N0], Q_l and K_l [H_l, d, N0]")
    return at, an


def _default_name(task) -> str:
    """A spec without ``name``: an arrays task is named after its data file (``data.npz`` → ``data``, characters
    a folder name may not hold replaced by ``_``), the Markov task ``markov_4paths``."""
    if not isinstance(task, ArraysTask):
        return Spec.name
    stem = re.sub(r"[^A-Za-z0-9_.+-]", "_", Path(task.file).stem).lstrip(".-")[:100]
    return stem or "arrays"


def spec_from_dict(data: dict, root: str | Path = ".") -> Spec:
    """Build and check a :class:`Spec` from a parsed TOML table (``root``: the folder its data files are relative
    to, the spec file's)."""
    known = {"name", "temperature", "task", "network", "sampler", "compare", "cluster"}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"spec has unknown keys {sorted(unknown)}; expected some of {sorted(known)}")
    for key in ("task", "network", "sampler", "compare", "cluster"):
        if not isinstance(data.get(key, {}), dict):
            raise ValueError(f"[{key}] must be a table, got {data[key]!r}")
    task = dict(data.get("task", {}))
    kind = task.pop("kind", "markov")
    _checks.choice("task.kind", kind, TASK_KINDS)
    sampler = data.get("sampler", {})
    check_keys(sampler, "[sampler]")  # renamed keys get their own message
    task_, network = _sections(kind, task, data.get("network", {}), str(root))
    spec = Spec(
        name=check_name(check_type("name", data.get("name", _default_name(task_)), str)),
        temperature=_checks.positive(
            "temperature", check_type("temperature", data.get("temperature", Spec.temperature), float)),
        task=task_,
        network=network,
        sampler=section(SamplerSettings, "sampler", sampler),
        compare=section(CompareSpec, "compare", data.get("compare", {})),
        cluster=dict(data.get("cluster", {})),
    )
    spec.check_size()
    net = spec.net()
    labels = net.path_labels  # fail early on a bad network
    if isinstance(spec.task, ArraysTask):  # inputs too large for the temperature: refused before any theory
        net.check_scale(spec.task.arrays()["x"], spec.temperature, f"{spec.task.path}: x")
    for name, paths in spec.compare.gp_paths.items():
        bad = [p for p in paths if p not in labels]
        if bad or not paths:
            raise ValueError(f"compare.gp_paths[{name!r}] must list paths among {labels}, got {list(paths)}")
    bad = [p for p in spec.compare.path_names if p not in labels]
    if bad:
        raise ValueError(f"compare.path_names must name paths among {labels}, got {bad}")
    check_tolerances(spec.compare.rtol, spec.compare.n_sigma, "compare.")
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
    return spec_from_dict(read_toml(path), root=Path(path).parent)
