"""bayes_attn: Bayesian posterior sampling and statistical-mechanics theory of
multi-head attention networks with fixed attention (Tiberi et al., NeurIPS 2024).

The theory runs in float64, so importing the package enables JAX's 64-bit mode.
"""

import jax

jax.config.update("jax_enable_x64", True)

from .compare import Comparison, compare  # noqa: E402
from .network import Network, Weights  # noqa: E402
from .posterior import Posterior, Summary, load_posterior, sample_posterior  # noqa: E402
from .theory import Theory, gp_limit, solve_theory  # noqa: E402

__all__ = [
    "Comparison",
    "Network",
    "Posterior",
    "Summary",
    "Theory",
    "Weights",
    "compare",
    "gp_limit",
    "load_posterior",
    "sample_posterior",
    "solve_theory",
]
