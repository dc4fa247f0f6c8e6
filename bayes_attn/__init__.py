"""bayes_attn: Bayesian posterior sampling and statistical-mechanics theory of
multi-head attention networks with fixed attention (Tiberi et al., NeurIPS 2024).

Importing the package changes no global state: JAX's 64-bit mode, environment
variables, thread settings and the matplotlib backend stay as the caller set
them. The theory computes in float64 on its own (``bayes_attn._internal.precision``);
sampling uses the dtype it is asked for; both run with the thread settings of
``bayes_attn._internal.threads`` for the duration of the call only.

The data flow (docs/theory.md): task (:mod:`markov`) → :class:`Network` (paths,
kernels) → theory (:func:`solve_theory`) | posterior (:func:`sample_posterior`,
:mod:`samplers`) → :func:`compare` → reports and figures; one experiment point
(:class:`Point`) runs them all with :func:`evaluate`, its outcome a :class:`Verdict`.

Names are imported on first use (``bayes_attn.theory``, ``bayes_attn.Network``,
...), so that ``import bayes_attn`` is quick and a command loads only what it needs.
"""

from __future__ import annotations

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
        "experiment": ["Point", "evaluate"],
        "verdict": ["Verdict"],
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
    from .experiment import Point, evaluate  # noqa: F401
    from .network import Network, Weights  # noqa: F401
    from .posterior import Posterior, load_posterior, sample_posterior  # noqa: F401
    from .samplers import SAMPLERS, SamplerSettings  # noqa: F401
    from .spec import Spec, load_spec  # noqa: F401
    from .tasks import markov  # noqa: F401
    from .theory import Theory, gp_limit, load_theory, solve_theory  # noqa: F401
    from .verdict import Verdict  # noqa: F401


def __getattr__(name: str):
    return _lazy_getattr(name)

