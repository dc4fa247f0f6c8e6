"""bayes_attn: Bayesian posterior sampling and statistical-mechanics theory of
multi-head attention networks with fixed attention (Tiberi et al., NeurIPS 2024).

Importing the package changes no global state: JAX's 64-bit mode, environment
variables, thread settings and the matplotlib backend stay as the caller set
them. The theory computes in float64 on its own (:mod:`bayes_attn.precision`);
sampling uses the dtype it is asked for; both run with the thread settings of
:mod:`bayes_attn.threads` for the duration of the call only.

The data flow (THEORY.md): task (:mod:`markov`) → :class:`Network` (paths,
kernels) → theory (:func:`solve_theory`) | posterior (:func:`sample_posterior`,
:mod:`samplers`) → :func:`compare` → reports and figures.

Names are imported on first use (``bayes_attn.threads``, ``bayes_attn.Network``,
...), so that ``import bayes_attn`` is quick and a command loads only what it needs.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

_LAZY = {
    # name: (module, attribute or None for the module itself)
    "SAMPLERS": (".samplers", "SAMPLERS"),
    "Comparison": (".compare", "Comparison"),
    "Network": (".network", "Network"),
    "Posterior": (".posterior", "Posterior"),
    "SamplerSettings": (".samplers", "SamplerSettings"),
    "Spec": (".spec", "Spec"),
    "Summary": (".posterior", "Summary"),
    "Theory": (".theory", "Theory"),
    "Weights": (".network", "Weights"),
    "compare": (".compare", "compare"),
    "gp_limit": (".theory", "gp_limit"),
    "load_posterior": (".posterior", "load_posterior"),
    "load_spec": (".spec", "load_spec"),
    "load_theory": (".theory", "load_theory"),
    "markov": (".tasks.markov", None),
    "sample_posterior": (".posterior", "sample_posterior"),
    "samplers": (".samplers", None),
    "solve_theory": (".theory", "solve_theory"),
}
_SUBMODULES = ("calibration", "gp", "network", "posterior", "precision", "spec", "tasks", "theory", "threads", "compile_cache",
               "oneshot", "run", "sweep", "outputs", "cli")

__all__ = sorted(k for k in _LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = importlib.import_module(module, __name__)
        value = mod if attr is None else getattr(mod, attr)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))


class _Package(types.ModuleType):
    """``bayes_attn.compare`` is the function :func:`~bayes_attn.compare.compare`, also after its module loads.

    Python sets a package's attribute to a submodule when the submodule is first imported; for the one
    name shared by a function and its module that would hide the function (``from bayes_attn.compare
    import ...`` still reaches the module through ``sys.modules``).
    """

    def __setattr__(self, name: str, value) -> None:
        if name == "compare" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from . import samplers, threads  # noqa: F401
    from .compare import Comparison, compare  # noqa: F401
    from .network import Network, Weights  # noqa: F401
    from .posterior import Posterior, Summary, load_posterior, sample_posterior  # noqa: F401
    from .samplers import SAMPLERS, SamplerSettings  # noqa: F401
    from .spec import Spec, load_spec  # noqa: F401
    from .tasks import markov  # noqa: F401
    from .theory import Theory, gp_limit, load_theory, solve_theory  # noqa: F401
