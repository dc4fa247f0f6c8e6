"""The API reference's pages and its tables by workflow (docs/api.md includes the tables).

:func:`write_pages` writes one page per name into ``docs/api/`` — the public names of ``bayes_attn.__all__`` and
the functions of :data:`EXTRA` that the pages use from the package's modules — and :func:`write_groups` one table
per workflow of :data:`GROUPS` into ``docs/_generated/api/`` (name, the first line of its docstring).
tests/test_docs.py checks that every page is in one group.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import bayes_attn

EXTRA = {
    "run": "bayes_attn.runs.run",
    "theory_run": "bayes_attn.runs.theory_run",
    "comparison_report": "bayes_attn.runs.comparison_report",
    "sweep": "bayes_attn.sweep.sweep",
    "alpha_sweep": "bayes_attn.sweep.alpha_sweep",
    "executor_from_options": "bayes_attn.sweep.executor_from_options",
    "run_oneshot": "bayes_attn.oneshot.run_oneshot",
    "load_oneshot_spec": "bayes_attn.oneshot.load_oneshot_spec",
    "load_pruning": "bayes_attn.oneshot.load_pruning",
    "calibration": "bayes_attn.calibration",
    **{f"bayes_attn.{m}": f"bayes_attn.{m}" for m in (
        "cli", "comparison", "diagnostics", "experiment", "gp", "kernels", "network", "oneshot", "posterior", "runs",
        "spec", "stats", "sweep", "tasks", "theory", "verdict")},
}
"""Names outside ``bayes_attn.__all__`` that the pages and the gallery use, by their public home; and the public
modules, each paged with the names of its ``__all__`` that no other page documents."""

DATA = {"SAMPLERS": "bayes_attn.samplers._registry.SAMPLERS"}
"""Where the public data names are defined (their docstrings live there)."""

GROUPS = {
    "Build a network": ("Network", "Weights", "markov", "Spec"),
    "Theory": ("solve_theory", "gp_limit", "Theory"),
    "Sampling": ("sample_posterior", "SamplerSettings", "SAMPLERS", "samplers", "Posterior", "Summary"),
    "Comparison": ("compare", "Comparison", "comparison_report"),
    "One experiment point": ("Point", "evaluate", "Verdict"),
    "Runs and sweeps": ("run", "theory_run", "sweep", "alpha_sweep", "executor_from_options"),
    "One-shot pruning (Fig. 3)": ("run_oneshot",),
    "Calibration": ("calibration",),
    "Files": ("load_spec", "load_theory", "load_posterior", "load_oneshot_spec", "load_pruning"),
    "Modules": tuple(f"bayes_attn.{m}" for m in (
        "kernels", "network", "tasks", "gp", "theory", "diagnostics", "verdict", "posterior", "comparison",
        "experiment", "spec", "stats", "runs", "sweep", "oneshot", "cli")),
}
"""The API reference's workflows, each a table of its names in this order."""


def target(name: str):
    """``(object, dotted name)`` of a page's name."""
    if name in EXTRA:
        module, _, attr = EXTRA[name].rpartition(".")
        try:
            return getattr(importlib.import_module(module), attr), EXTRA[name]
        except (ImportError, AttributeError):
            return importlib.import_module(EXTRA[name]), EXTRA[name]
    obj = getattr(bayes_attn, name)
    return obj, (obj.__name__ if inspect.ismodule(obj) else DATA.get(name, f"bayes_attn.{name}"))


def page_text(name: str) -> str:
    """The reST page of ``name`` (autodoc)."""
    obj, dotted = target(name)
    kind = ("automodule" if inspect.ismodule(obj) else "autoclass" if isinstance(obj, type)
            else "autofunction" if callable(obj) else "autodata")
    own = own_names(obj) if kind == "automodule" else []
    # a sampler's settings are indexed on the samplers page, as bayes_attn.samplers.SamplerSettings
    indexed = "   :no-index:\n" if getattr(obj, "__module__", "").startswith("bayes_attn.samplers") else ""
    options = {"autoclass": "   :members:\n" + indexed, "autodata": "   :no-value:\n",
               "automodule": f"   :members: {', '.join(own)}\n"}.get(kind, "")
    return f"{name}\n{'=' * len(name)}\n\n.. {kind}:: {dotted}\n{options}"


def own_names(module) -> list[str]:
    """The names of a public module's ``__all__`` its page documents: not those of ``bayes_attn.__all__`` nor of
    :data:`EXTRA` (paged on their own)."""
    paged = set(EXTRA.values())
    return [n for n in module.__all__ if n not in bayes_attn.__all__ and f"{module.__name__}.{n}" not in paged]


def names() -> list[str]:
    """Every paged name: ``bayes_attn.__all__``, then :data:`EXTRA`."""
    return [*bayes_attn.__all__, *EXTRA]


def _write(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def write_pages(folder: Path) -> None:
    """One page per name of :func:`names` (``folder/<name>.rst``)."""
    folder.mkdir(exist_ok=True)
    for name in names():
        _write(folder / f"{name}.rst", page_text(name))


def _code(m: re.Match) -> str:
    """A reST role as Markdown code (``~a.b``: ``b``)."""
    return f"`{m.group(1).split('.')[-1]}`" if "~" in m.group(0) else f"`{m.group(1)}`"


def summary(name: str) -> str:
    """The first line of the docstring of ``name`` (its first sentence where it goes on)."""
    obj, dotted = target(name)
    doc = inspect.getdoc(obj) or ""
    if name in DATA:  # a dict's docstring is dict's: the module's attribute docstring is in the module's source
        doc = "The registry of samplers by name."
    first = " ".join(doc.split("\n\n")[0].split())
    first = re.split(r"(?<!Fig)(?<!al)(?<!e\.g)\.\s+(?=[A-Z`(])", first)[0].rstrip(".") + "." if first else ""
    first = re.sub(r":\w+:`~?([^`]+)`", _code, first)  # reST roles: code
    return first.replace("``", "`")


def group_table(group: str) -> str:
    """The Markdown table of one workflow: each name linked to its page, and its summary."""
    rows = ["| name | what |", "|---|---|"]
    for name in GROUPS[group]:
        text = summary(name).replace("|", "\\|")
        rows.append(f"| {{doc}}`{name} </api/{name}>` | {text} |")
    return "\n".join(rows) + "\n"


def slug(group: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in group.lower()).strip("-").replace("--", "-")


def write_groups(folder: Path) -> None:
    """One table per workflow of :data:`GROUPS` (``folder/<slug>.md``)."""
    folder.mkdir(parents=True, exist_ok=True)
    for group in GROUPS:
        _write(folder / f"{slug(group)}.md", group_table(group))
