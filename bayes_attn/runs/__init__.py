"""One run at one width (docs/theory.md §4–5): theory and GP limit, sampling, comparison, report, figures.

- :func:`theory_run` and :func:`run`: the jobs behind ``bayes-attn theory`` and ``bayes-attn run``;
- :func:`comparison_report`: the Markdown report of a comparison;
- :func:`alignment`, :func:`finite_size`: figures of a run and of a sweep.

The implementation lives in the private modules ``bayes_attn.runs._*``.
"""

from ._figures import alignment, finite_size
from ._pipeline import RunResult, TheoryResult, gp_accuracies, gp_on_paths, run, theory_run
from ._report import comparison_report

__all__ = ["RunResult", "TheoryResult", "alignment", "comparison_report", "finite_size", "gp_accuracies", "gp_on_paths",
           "run", "theory_run"]
