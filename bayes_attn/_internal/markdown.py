"""Markdown tables for the reports (``report.md`` of ``run`` and of ``prune``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The lines of a Markdown table: ``| a | b |``, the rule ``|---|---|`` and one line per row (cells by
    ``str``; an empty cell is ``| |``)."""
    width = len(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * width]
    for row in rows:
        if len(row) != width:
            raise ValueError(f"a table row has {len(row)} cells, the header {width}: {row!r}")
        lines.append("|" + "|".join(f" {c} " if str(c) else " " for c in row) + "|")
    return lines
