"""bayes_attn: Bayesian posterior sampling and statistical-mechanics theory of
multi-head attention networks with fixed attention (Tiberi et al., NeurIPS 2024).

The theory runs in float64, so importing the package enables JAX's 64-bit mode.

Unless ``OPENBLAS_NUM_THREADS`` is set, importing the package first sets it to
1: JAX's CPU LAPACK calls (Cholesky, triangular solves) go to OpenBLAS, whose
spinning threads oversubscribe the cores when chains run in parallel; for the
small matrices here one thread is several times faster. It takes effect only
if NumPy/SciPy are not imported yet.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402

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
