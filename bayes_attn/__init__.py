"""bayes_attn: Bayesian posterior sampling and statistical-mechanics theory of
multi-head attention networks with fixed attention (Tiberi et al., NeurIPS 2024).

Importing the package changes no global state: JAX's 64-bit mode, environment
variables, thread settings and the matplotlib backend stay as the caller set
them. The theory computes in float64 on its own (``bayes_attn._internal.precision``);
sampling uses the dtype it is asked for; both run with the thread settings of
``bayes_attn._internal.threads`` for the duration of the call only. Modules that moved
(:data:`MOVED`) still import under their old names for one release, with a warning.

The data flow (docs/theory.md): task (:mod:`markov`) → :class:`Network` (paths,
kernels) → theory (:func:`solve_theory`) | posterior (:func:`sample_posterior`,
:mod:`samplers`) → :func:`compare` → reports and figures.

Names are imported on first use (``bayes_attn.theory``, ``bayes_attn.Network``,
...), so that ``import bayes_attn`` is quick and a command loads only what it needs.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from importlib import metadata
from typing import TYPE_CHECKING

import lazy_loader

try:
    __version__ = metadata.version("bayes_attn")
    """The installed distribution's version (pyproject.toml's ``version``)."""
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

# Imported on first use (lazy_loader); ``bayes_attn.compare`` is the function (its module: ``bayes_attn.comparison``).
_SUBMODULES = {"calibration", "cli", "comparison", "diagnostics", "experiment", "gp", "kernels", "network", "oneshot",
               "posterior", "runs", "spec", "stats", "sweep", "tasks", "theory", "verdict"}
_lazy_getattr, __dir__, _names = lazy_loader.attach(
    __name__,
    submodules=[*_SUBMODULES, "samplers"],
    submod_attrs={
        "comparison": ["Comparison", "compare"],
        "network": ["Network", "Weights"],
        "diagnostics": ["Summary"],
        "posterior": ["Posterior", "load_posterior", "sample_posterior"],
        "samplers": ["SAMPLERS", "SamplerSettings"],
        "spec": ["Spec", "load_spec"],
        "tasks": ["markov"],
        "theory": ["Theory", "gp_limit", "load_theory", "solve_theory"],
    },
)
__all__ = sorted(set(_names) - _SUBMODULES)  # the names, and `samplers`; not every module (and not __version__)

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from . import samplers  # noqa: F401
    from .comparison import Comparison, compare  # noqa: F401
    from .diagnostics import Summary  # noqa: F401
    from .network import Network, Weights  # noqa: F401
    from .posterior import Posterior, load_posterior, sample_posterior  # noqa: F401
    from .samplers import SAMPLERS, SamplerSettings  # noqa: F401
    from .spec import Spec, load_spec  # noqa: F401
    from .tasks import markov  # noqa: F401
    from .theory import Theory, gp_limit, load_theory, solve_theory  # noqa: F401

MOVED = {"outputs": "_internal.outputs", "precision": "_internal.precision", "threads": "_internal.threads",
         "compile_cache": "_internal.compile_cache", "fingerprints": "_internal.fingerprints",
         "interrupt": "_internal.interrupt", "bartlett": "theory.bartlett", "run": "runs",
         "run.pipeline": "runs.pipeline", "run.figures": "runs.figures", "run.report": "runs.report"}
"""Modules that moved in this release (CHANGELOG.md), old name → new, below ``bayes_attn``: for one release the
old name still imports, as a copy of the new module's names, with a ``DeprecationWarning`` naming the new home."""


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the old names of :data:`MOVED` (only those: every other import goes on as before)."""

    def find_spec(self, fullname, path=None, target=None):
        old = fullname.removeprefix(__name__ + ".")
        if old == fullname or old not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=any(k.startswith(old + ".") for k in MOVED))

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        old = module.__name__
        new = f"{__name__}.{MOVED[old.removeprefix(__name__ + '.')]}"
        warnings.warn(f"{old} moved to {new}: import it from there ({old} goes in the next release)",
                      DeprecationWarning, stacklevel=2)
        names = vars(importlib.import_module(new))
        module.__dict__.update({k: v for k, v in names.items() if not k.startswith("__") or k == "__all__"})


sys.meta_path.insert(0, _MovedModules())  # before an editable install's finder, which maps the package's old tree


def __getattr__(name: str):
    if name in MOVED:  # bayes_attn.precision etc.: the old module, with its warning
        return importlib.import_module(f"{__name__}.{name}")
    return _lazy_getattr(name)

