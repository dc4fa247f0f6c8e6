"""One table of benchmark results: per result file its benchmark, headline number, unit, date and load average.

Reads the envelopes (``harness.SCHEMA``) of the files given, or of every ``*.json`` in ``--folder`` (default
``benchmarks/results``), and prints one Markdown table; a file that is not an envelope is listed below it with
what is wrong, and the exit status is then 1. ``make bench`` ends with it.

    .venv/bin/python benchmarks/report.py [FILE ...] [--folder DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness import RESULTS, validate

COLUMNS = ("file", "benchmark", "headline", "value", "unit", "date", "load 1 min (before → after)")


def row(path: Path, record: dict) -> list[str]:
    """The table's cells for one envelope."""
    h = record.get("headline") or {}
    m = record["machine"]
    load = " → ".join(f"{m[k][0]:.1f}" if m.get(k) else "?" for k in ("load_before", "load_after"))
    value = f"{h['value']:.4g}" if h else "—"
    return [path.name, record["benchmark"], h.get("name", "—"), value, h.get("unit", ""), record["date"][:10], load]


def table(rows: list[list[str]]) -> str:
    """``rows`` under :data:`COLUMNS` as a Markdown table, the columns padded to their widths."""
    widths = [max(len(str(c)) for c in col) for col in zip(COLUMNS, *rows, strict=True)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"  # noqa: E731
    return "\n".join([line(COLUMNS), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def main(argv: list[str] | None = None) -> int:
    """Print the table; 1 where a file is not an envelope."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, help="result files (default: every *.json in --folder)")
    ap.add_argument("--folder", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    rows, bad = [], []
    for path in a.files or sorted(a.folder.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            bad.append(f"{path}: {err}")
            continue
        problems = validate(record)
        if problems:
            bad.append(f"{path}: {'; '.join(problems)}")
        else:
            rows.append(row(path, record))
    print(table(rows))
    for b in bad:
        print(f"not a benchmark envelope: {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
