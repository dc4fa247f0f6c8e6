"""One run at one width (docs/theory.md §4–5): theory and GP limit, sampling, comparison, report, figures.

- :mod:`.pipeline`: :func:`theory_run` and :func:`run`, the jobs behind
  ``bayes-attn theory`` and ``bayes-attn run``;
- :mod:`.report`: the Markdown report of a comparison;
- :mod:`.figures`: the figures of a run and of a sweep.
"""

from .pipeline import RunResult, TheoryResult, gp_accuracies, gp_on_paths, run, theory_run

__all__ = ["RunResult", "TheoryResult", "gp_accuracies", "gp_on_paths", "run", "theory_run"]
