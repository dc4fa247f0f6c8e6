"""Run the stochastic tests at several seed offsets and count each test's failures.

Every seed of the suite moves with ``BAYES_ATTN_TEST_SEED`` (tests/conftest.py:
``seed_of``), so each offset is a fresh draw of data, chains, bootstraps and
SBC replications. A test whose false-failure rate is the ≤ 1e-3 its docstring
states fails at none of a handful of offsets; one that fails at some offset is
tuned to its chains, not robust.

    python tests/robustness.py                 # offsets 0..4, the tests marked ``stochastic``
    python tests/robustness.py -k 5 --first 10 # offsets 10..14
    python tests/robustness.py -m "stochastic and not slow" --json out.json

Prints one line per test that ran: its failures out of the offsets it ran at,
and the range over the offsets of each margin the test records (pytest's
``record_property``: the smallest ESS, the largest |z| against its bound, a
p-value, ...). Exit status 1 when any test failed at any offset.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST = ["-q", "-n", "auto", "--maxprocesses", "4", "--dist", "loadgroup", "-p", "no:cacheprovider",
          "-o", "junit_family=xunit1"]  # xunit1: the tests' recorded properties without a warning


def _outcomes(junit: Path) -> tuple[dict[str, str], dict[str, dict[str, float]]]:
    """``{test id: "passed" | "failed" | "skipped"}`` from a JUnit XML report (errors count as failures), and
    ``{test id: {property: value}}`` of the numeric properties the tests recorded."""
    out, props = {}, {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        kinds = {child.tag for child in case}
        out[name] = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        for prop in case.iter("property"):
            try:
                props.setdefault(name, {})[prop.get("name")] = float(prop.get("value"))
            except (TypeError, ValueError):
                pass
    return out, props


def run_offset(offset: int, marker: str, extra: list[str]) -> tuple[tuple[dict, dict], float, int]:
    """The outcomes and recorded properties of the tests selected by ``marker`` at seed offset ``offset``, the
    wall time and pytest's status."""
    with tempfile.TemporaryDirectory(prefix="bayes_attn-robustness-") as tmp:
        junit = Path(tmp) / "junit.xml"
        env = os.environ | {"BAYES_ATTN_TEST_SEED": str(offset)}
        start = time.perf_counter()
        status = subprocess.run([sys.executable, "-m", "pytest", *PYTEST, "-m", marker, f"--junitxml={junit}", *extra],
                                cwd=ROOT, env=env).returncode
        seconds = time.perf_counter() - start
        if not junit.is_file():
            raise SystemExit(f"pytest wrote no report at offset {offset} (exit status {status})")
        return _outcomes(junit), seconds, status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", "--offsets", type=int, default=5, help="how many seed offsets (default 5)")
    parser.add_argument("--first", type=int, default=0, help="the first offset (default 0)")
    parser.add_argument("-m", "--marker", default="stochastic", help="pytest -m expression (default: stochastic)")
    parser.add_argument("--json", type=Path, help="also write the counts to this file")
    args, extra = parser.parse_known_args(argv)
    if args.offsets < 1 or args.first < 0:
        parser.error("--offsets must be >= 1 and --first >= 0")
    offsets = range(args.first, args.first + args.offsets)
    failures: dict[str, list[int]] = defaultdict(list)
    ran: dict[str, int] = defaultdict(int)
    margins: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    runs = []
    for offset in offsets:
        (outcomes, props), seconds, status = run_offset(offset, args.marker, extra)
        for name, values in props.items():
            for key, value in values.items():
                margins[name][key].append(value)
        for name, outcome in outcomes.items():
            if outcome != "skipped":
                ran[name] += 1
            if outcome == "failed":
                failures[name].append(offset)
        runs.append({"offset": offset, "seconds": round(seconds, 1), "status": status, "tests": len(outcomes),
                     "failed": sum(o == "failed" for o in outcomes.values()), "load_average": os.getloadavg()})
        print(f"offset {offset}: {runs[-1]['failed']} failed of {len(outcomes)} in {seconds:.0f} s "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)
    width = max(map(len, ran), default=10)
    print(f"\n{'test':<{width}}  failures")
    for name in sorted(ran):
        at = f"  (offsets {', '.join(map(str, failures[name]))})" if failures[name] else ""
        print(f"{name:<{width}}  {len(failures[name])}/{ran[name]}{at}")
        for key, values in sorted(margins.get(name, {}).items()):
            print(f"{'':<{width}}    {key}: {min(values):.4g} .. {max(values):.4g}")
    total = sum(map(len, failures.values()))
    print(f"\n{len(ran)} tests at offsets {offsets.start}..{offsets.stop - 1}: {total} failures")
    if args.json:
        args.json.write_text(json.dumps({"marker": args.marker, "offsets": list(offsets), "runs": runs,
                                         "failures": {n: failures[n] for n in sorted(ran)},
                                         "margins": {n: dict(m) for n, m in sorted(margins.items())},
                                         "ran": dict(sorted(ran.items()))}, indent=1) + "\n")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
