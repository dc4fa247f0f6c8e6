"""bayes_attn: Bayesian posterior sampling and statistical-mechanics theory of
multi-head attention networks with fixed attention (Tiberi et al., NeurIPS 2024).

Importing the package changes no global state: JAX's 64-bit mode, environment
variables and the matplotlib backend stay as the caller set them. The theory
computes in float64 on its own (:mod:`bayes_attn.precision`); sampling uses the
dtype it is asked for.

The data flow (THEORY.md): task (:mod:`markov`) → :class:`Network` (paths,
kernels) → theory (:func:`solve_theory`) | posterior (:func:`sample_posterior`,
:mod:`samplers`) → :func:`compare` → reports and figures.
"""

from . import samplers
from .tasks import markov
from .compare import Comparison, compare
from .network import Network, Weights
from .posterior import Posterior, Summary, load_posterior, sample_posterior
from .samplers import SAMPLERS, SamplerSettings
from .spec import Spec, load_spec
from .theory import Theory, gp_limit, load_theory, solve_theory

__all__ = [
    "SAMPLERS",
    "Comparison",
    "Network",
    "Posterior",
    "SamplerSettings",
    "Spec",
    "Summary",
    "Theory",
    "Weights",
    "compare",
    "gp_limit",
    "load_posterior",
    "load_spec",
    "load_theory",
    "markov",
    "sample_posterior",
    "samplers",
    "solve_theory",
]
