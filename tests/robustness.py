"""Run the stochastic tests at several seed offsets and put each threshold in its statistic's distribution.

Every seed of the suite moves with ``BAYES_ATTN_TEST_SEED`` (tests/conftest.py:
``seed_of``), so each offset is a fresh draw of data, chains, bootstraps and
SBC replications; another CPU is another draw too (its matrix kernels differ in
the last bits, and a chain amplifies them). Passing at a handful of offsets
shows a false-failure rate below about 1/handful, not the ≤ 1e-3 the tests
state. So each test records the statistics it checks with their thresholds
(tests/conftest.py: ``check``), and this script estimates, for each, its mean
and standard deviation over the offsets on the scale where it is near normal
(log for ESS and ratios) and the distance of the threshold from the mean in
standard deviations. A distance under 3.09 (the normal's 1e-3 one-sided tail)
is flagged. A statistic with a known null law has a known tail: a p-value
checked against its null (``scale = "p"``, failing below) the threshold
itself, a standard normal ``|z|`` (``scale = "z"``) ``2 Φ(−bound)``; their
values over the offsets are tested for being no smaller than uniform p-values
(one-sided Kolmogorov–Smirnov at 1e-3). A statistic a test draws afresh
until it passes (``attempts`` > 1: a run whose own diagnostics fail is run
again with another seed) is recorded at its first attempt; its tail is the
one-attempt tail to the power ``attempts``, and a first attempt that failed
is a draw of the statistic, not a failure.

    python tests/robustness.py                      # offsets 0..11, the tests marked ``stochastic``
    python tests/robustness.py -k 6 --first 6       # offsets 6..11
    python tests/robustness.py -m "stochastic and not slow" --json out.json
    python tests/robustness.py --merge a.json b.json  # the table of runs made before (here or elsewhere)
    python tests/robustness.py --merge a.json --junit 0=make-test-0.xml  # with a whole suite's JUnit report

Exit status 1 when a test failed at any offset, when a statistic is flagged,
or when no test ran.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST = ["-q", "-n", "auto", "--maxprocesses", "4", "--dist", "loadgroup", "-p", "no:cacheprovider",
          "-o", "junit_family=xunit1"]  # xunit1: the tests' recorded properties without a warning
STAT_PREFIX = "stat:"  # tests/conftest.py: STAT_PREFIX
TAIL = 1e-3  # the one-sided false-failure rate each check is held to
FLAG = 3.09  # the normal's isf(TAIL) = 3.0902, rounded down: a threshold nearer than this many sds is flagged


def _outcomes(junit: Path) -> tuple[dict[str, str], dict[str, dict[str, dict]], dict[str, float]]:
    """``{test id: "passed" | "failed" | "skipped"}`` from a JUnit XML report (errors count as failures),
    ``{test id: {statistic: {"value", "threshold", "fails", "scale"}}}`` of the checked statistics, and each test's
    seconds (setup, call and teardown: summed over tests, the workers' seconds)."""
    out, stats, seconds = {}, {}, {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        kinds = {child.tag for child in case}
        out[name] = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        seconds[name] = float(case.get("time") or 0.0)
        for prop in case.iter("property"):
            key = prop.get("name") or ""
            if key.startswith(STAT_PREFIX):
                stats.setdefault(name, {})[key.removeprefix(STAT_PREFIX)] = json.loads(prop.get("value"))
    return out, stats, seconds


def run_offset(offset: int, marker: str, extra: list[str]) -> dict:
    """One offset's record: outcomes, statistics, wall time, pytest's status and the load average."""
    with tempfile.TemporaryDirectory(prefix="bayes_attn-robustness-") as tmp:
        junit = Path(tmp) / "junit.xml"
        env = os.environ | {"BAYES_ATTN_TEST_SEED": str(offset)}
        load, start = os.getloadavg()[0], time.perf_counter()
        status = subprocess.run([sys.executable, "-m", "pytest", *PYTEST, "-m", marker, f"--junitxml={junit}", *extra],
                                cwd=ROOT, env=env).returncode
        seconds = time.perf_counter() - start
        if not junit.is_file():
            raise SystemExit(f"pytest wrote no report at offset {offset} (exit status {status})")
        outcomes, stats, durations = _outcomes(junit)
        return {"offset": offset, "seconds": round(seconds, 1), "status": status, "load_average": load,
                "worker_seconds": round(sum(durations.values()), 1), "outcomes": outcomes, "stats": stats,
                "durations": durations}


def junit_run(item: str) -> dict:
    """The record of a run made elsewhere from ``"OFFSET=FILE"``, its JUnit report (wall time and load unknown).
    A whole suite's report holds tests that check no statistic: the tests that recorded statistics count, and every
    failure; the worker seconds are the whole report's."""
    offset, sep, file = item.partition("=")
    if not (sep and offset.isdigit() and Path(file).is_file()):
        raise ValueError(f"--junit takes OFFSET=FILE with an integer offset and an existing file, got {item!r}")
    outcomes, stats, durations = _outcomes(Path(file))
    outcomes = {test: o for test, o in outcomes.items() if test in stats or o == "failed"}
    failed = any(o == "failed" for o in outcomes.values())
    return {"offset": int(offset), "seconds": math.nan, "status": int(failed), "load_average": math.nan,
            "worker_seconds": round(sum(durations.values()), 1), "outcomes": outcomes, "stats": stats,
            "durations": durations, "source": file}


def _margin(stat: dict) -> float:
    """How far ``value`` is on the passing side of ``threshold``, on the statistic's scale (negative: failed):
    log for ``"log"``, the normal quantile ``isf(p)`` for a p-value (against its null, or a negative control's)."""
    from scipy.stats import norm

    v, t = _as_p(stat) if stat["scale"] == "z" else (stat["value"], stat["threshold"])
    if stat["scale"] in ("p", "z"):  # the normal quantile of a p-value: standard normal under the null, shifted under
        v, t = norm.isf(min(max(v, 1e-300), 1.0)), norm.isf(t)  # an alternative (a negative control)
    elif stat["scale"] == "log":
        v, t = (math.log(x) if x > 0 else -math.inf for x in (v, t))
    fails = "below" if stat["scale"] == "z" else stat["fails"]  # a large |z| is a small p-value
    above = (fails == "above") != (stat["scale"] in ("p", "z"))  # isf turns a p-value's sides around
    return t - v if above else v - t


def _as_p(stat: dict) -> tuple[float, float]:
    """A standard normal ``|z|`` (``scale = "z"``) and its bound as two-sided p-values ``2 Φ(−|z|)``."""
    from scipy.stats import norm

    return 2 * float(norm.sf(abs(stat["value"]))), 2 * float(norm.sf(stat["threshold"]))


def tails(runs: list[dict]) -> list[dict]:
    """One row per (test, statistic): its offsets, the mean and sd of its margin (threshold − value on its scale,
    passing side positive), the threshold(s), the distance ``mean / sd`` and the normal tail beyond it; a p-value
    against its null has the distance ``isf(threshold)``."""
    from scipy.stats import kstest, norm

    rows: dict[tuple[str, str], dict] = {}
    for run in runs:
        for test, stats in run["stats"].items():
            for name, stat in stats.items():
                row = rows.setdefault((test, name), {"test": test, "stat": name, "fails": stat["fails"],
                                                     "scale": stat["scale"], "attempts": stat.get("attempts", 1),
                                                     "values": [], "thresholds": [], "margins": [], "offsets": []})
                value, threshold = _as_p(stat) if stat["scale"] == "z" else (stat["value"], stat["threshold"])
                row["values"].append(value)  # a |z| as its p-value
                row["thresholds"].append(threshold)
                row["margins"].append(_margin(stat))
                row["offsets"].append(run["offset"])
    out = []
    for row in rows.values():
        margins, n = row["margins"], len(row["margins"])
        passed = sum(x > 0 for x in margins)  # NaN is a failure
        finite = [x for x in margins if math.isfinite(x)]  # a p-value of 1 is infinitely far on the z scale
        mean = statistics.fmean(finite) if finite else math.nan
        sd = statistics.stdev(finite) if len(finite) > 1 else math.nan
        null_p = (row["scale"] == "p" and row["fails"] == "below") or row["scale"] == "z"
        if passed < n and row["attempts"] == 1:
            distance = -math.inf  # failed (or NaN) at some offset
        elif null_p:
            distance = float(norm.isf(max(row["thresholds"])))  # the null's own tail
        else:
            distance = math.inf if sd == 0 else mean / sd
        if row["attempts"] > 1:  # drawn afresh until one passes: fails only if every attempt fails
            distance = float(norm.isf(norm.sf(distance) ** row["attempts"]))
        values = [v for v in row["values"] if math.isfinite(v)]
        uniform = float(kstest(values, "uniform", alternative="greater").pvalue) if null_p and values else 1.0
        out.append(row | {"n": n, "mean_margin": mean, "sd_margin": sd,
                          "mean": statistics.fmean(values) if values else math.nan,
                          "sd": statistics.stdev(values) if len(values) > 1 else math.nan,
                          "threshold": row["thresholds"][-1] if len(set(row["thresholds"])) == 1 else None,
                          "distance": distance, "tail": float(norm.sf(distance)), "uniform_p": uniform,
                          "flag": bool(not (distance >= FLAG) or n < 2 or uniform < TAIL)})
    return sorted(out, key=lambda r: (r["distance"], r["test"], r["stat"]))


def _fmt(x: float | None) -> str:
    return "varies" if x is None else f"{x:.4g}"


def report(runs: list[dict], rows: list[dict] | None = None) -> int:
    """Print each test's failures and the table of statistics ``rows`` (:func:`tails` of ``runs`` unless given);
    the exit status."""
    failures: dict[str, list[int]] = defaultdict(list)
    ran: dict[str, int] = defaultdict(int)
    for run in runs:
        for name, outcome in run["outcomes"].items():
            ran[name] += outcome != "skipped"
            if outcome == "failed":
                failures[name].append(run["offset"])
    offsets = sorted({r["offset"] for r in runs})
    if not any(ran.values()):
        print(f"no test ran at offsets {offsets}: nothing is shown robust (check the -m expression)")
        return 1
    for name in sorted(n for n in failures):
        print(f"FAILED {name} at offsets {', '.join(map(str, failures[name]))}")
    rows = tails(runs) if rows is None else rows
    header = ("test", "statistic", "n", "mean", "sd", "threshold", "sd of margin", "distance", "tail", "")
    table = [(r["test"].removeprefix("tests/"), r["stat"], str(r["n"]), _fmt(r["mean"]), _fmt(r["sd"]),
              _fmt(r["threshold"]) + (" (log)" if r["scale"] == "log" else " (p)" if r["scale"] == "p" else ""),
              _fmt(r["sd_margin"]), f"{r['distance']:.2f}", f"{r['tail']:.1e}", "FLAG" if r["flag"] else "")
             for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *table, strict=True)]
    for line in [header, *table]:
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    untracked = sorted(n for n in ran if ran[n] and not any(r["stats"].get(n) for r in runs))
    for name in untracked:
        print(f"NO STATISTIC {name}: the test records no checked statistic")
    flagged = sum(r["flag"] for r in rows)
    total = sum(map(len, failures.values()))
    print(f"\n{sum(1 for n in ran if ran[n])} tests, {len(rows)} statistics at offsets {offsets}: "
          f"{total} failures, {flagged} flagged (distance < {FLAG:.2f} sd), {len(untracked)} without a statistic")
    return 1 if total or flagged or untracked else 0


def markdown(runs: list[dict], rows: list[dict]) -> str:
    """The table ``rows`` (:func:`tails` of ``runs``) as Markdown."""
    offsets = sorted({r["offset"] for r in runs})
    lines = [f"Stochastic tests at seed offsets {', '.join(map(str, offsets))} (`python tests/robustness.py`): each "
             "checked statistic's mean and sd over the offsets, its threshold, the margin's sd on the statistic's "
             "scale (log for ESS and ratios, the normal quantile for p-values), the distance of the threshold "
             f"from the mean in those sds and the normal tail beyond it. Flagged: distance < {FLAG}.", "",
             "| test | statistic | n | mean | sd | threshold | scale | sd of margin | distance | tail | flag |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        scale = r["scale"] + (f" (first of {r['attempts']} attempts)" if r["attempts"] > 1 else "")
        lines.append(f"| `{r['test'].removeprefix('tests/')}` | {r['stat']} | {r['n']} | {_fmt(r['mean'])} | "
                     f"{_fmt(r['sd'])} | {_fmt(r['threshold'])} | {scale} | {_fmt(r['sd_margin'])} | "
                     f"{r['distance']:.2f} | {r['tail']:.1e} | {'FLAG' if r['flag'] else ''} |")
    return "\n".join(lines) + "\n"


SENTENCE = re.compile(r"Measured over \d+ seed offsets \(tests/robustness\.md\):.*?(?=\"\"\")", re.S)


def sentence(rows: list[dict]) -> str:
    """What a test's docstring says of its statistics ``rows``: the nearest threshold's distance and tail."""
    r = min(rows, key=lambda r: r["distance"])
    param = r["test"].split("::", 1)[1].removeprefix(_function(r["test"]))
    label = r["stat"] + (f" {param.split('@')[0]}" if param.split("@")[0] else "")
    where = (f"has its null's tail {r['tail']:.1e} ({'a p-value' if r['scale'] == 'p' else 'a standard normal |z|'})"
             if r["scale"] in ("p", "z") else
             f"is {r['distance']:.2f} sds from the statistic's mean (normal tail {r['tail']:.1e})")
    return (f"Measured over {r['n']} seed offsets (tests/robustness.md): the nearest threshold, that of {label}, "
            f"{where}.")


def _function(test: str) -> str:
    return re.split(r"[\[@]", test.split("::", 1)[1], maxsplit=1)[0]


def update_docstrings(rows: list[dict], root: Path = ROOT) -> list[str]:
    """Rewrite each measured test's "Measured over ..." sentence (the end of its docstring) from ``rows``; returns
    the tests whose docstring has no such sentence."""
    by_test: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        by_test[(r["test"].split("::", 1)[0], _function(r["test"]))].append(r)
    missing = []
    for (file, function), group in sorted(by_test.items()):
        path = root / (file if file.startswith("tests/") else f"tests/{file}")
        text = path.read_text()
        start = text.find(f"def {function}(")
        match = SENTENCE.search(text, start) if start >= 0 else None
        following = text.find("\ndef ", start + 1)  # the next function's: the sentence must come before it
        if match is None or -1 < following < match.start():
            missing.append(f"{file}::{function}")
            continue
        line_start = text.rfind("\n", 0, match.start()) + 1
        lead = text[line_start:match.start()]
        indent = " " * (len(lead) - len(lead.lstrip()))
        wrapped = textwrap.fill(sentence(group), width=117, initial_indent=lead, subsequent_indent=indent)
        path.write_text(text[:line_start] + wrapped + text[match.end():])
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", "--offsets", type=int, default=12, help="how many seed offsets (default 12)")
    parser.add_argument("--first", type=int, default=0, help="the first offset (default 0)")
    parser.add_argument("-m", "--marker", default="stochastic", help="pytest -m expression (default: stochastic)")
    parser.add_argument("--json", type=Path, help="also write the runs and the table to this file")
    parser.add_argument("--merge", type=Path, nargs="+", help="report the runs of these --json files; run nothing")
    parser.add_argument("--junit", nargs="+", default=[], metavar="OFFSET=FILE",
                        help="JUnit reports of runs made elsewhere, each with its offset (e.g. a whole `make test` at "
                             "BAYES_ATTN_TEST_SEED=OFFSET with "
                             "PYTEST_ADDOPTS='--junitxml=FILE -o junit_family=xunit1'); run nothing")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown to this file")
    parser.add_argument("--docstrings", action="store_true",
                        help="rewrite each measured test's \"Measured over ...\" sentence from the table")
    args, extra = parser.parse_known_args(argv)
    if args.offsets < 1 or args.first < 0:
        parser.error("--offsets must be >= 1 and --first >= 0")
    for flag, path in (("--json", args.json), ("--markdown", args.markdown)):
        if path is not None and not (path.parent.is_dir() and os.access(path.parent, os.W_OK)):
            parser.error(f"{flag}: folder {str(path.parent)!r} does not exist or is not writable")
    try:
        reports = [junit_run(item) for item in args.junit]
    except ValueError as e:
        parser.error(str(e))
    if args.merge or reports:
        by_offset = {run["offset"]: run for path in args.merge or [] for run in json.loads(path.read_text())["runs"]}
        by_offset |= {run["offset"]: run for run in reports}
        runs = [by_offset[k] for k in sorted(by_offset)]  # an offset run twice counts once (the last one given)
    else:
        runs = []
        for offset in range(args.first, args.first + args.offsets):
            runs.append(run_offset(offset, args.marker, extra))
            run = runs[-1]
            failed = sum(o == "failed" for o in run["outcomes"].values())
            print(f"offset {offset}: {failed} failed of {len(run['outcomes'])} in {run['seconds']:.0f} s, "
                  f"{run['worker_seconds']:.0f} worker s (load {run['load_average']:.1f})", flush=True)
    rows = tails(runs)
    status = report(runs, rows)
    if args.markdown:
        args.markdown.write_text(markdown(runs, rows))
    if args.json:
        args.json.write_text(json.dumps({"marker": args.marker, "runs": runs, "table": rows}, indent=1) + "\n")
    if args.docstrings:
        for test in update_docstrings(rows):
            print(f"no 'Measured over' sentence in the docstring of {test}")
    return status


if __name__ == "__main__":
    sys.exit(main())
