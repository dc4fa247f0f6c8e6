"""tests/robustness.py: each threshold placed in its statistic's distribution over seed offsets, flags and exit
status; and every stochastic test records what it checks (tests/conftest.py: ``check``)."""

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from conftest import record_check

sys.path.insert(0, str(Path(__file__).parent))
import robustness  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _runs(stats_at, outcome="passed"):
    """Runs at offsets 0..len-1 of one test ``t.py::a`` whose statistics at offset ``i`` are ``stats_at[i]``."""
    return [{"offset": i, "outcomes": {"t.py::a": outcome}, "stats": {"t.py::a": s}} for i, s in enumerate(stats_at)]


def _stat(value, threshold, fails="above", scale="linear"):
    return {"value": value, "threshold": threshold, "fails": fails, "scale": scale}


def test_distance_is_the_margin_in_standard_deviations():
    """A normal statistic with mean 1, sd 0.25 against a threshold of 2 sits 4 sds away; against 1.5, 2 (flagged)."""
    z = np.linspace(-1.5, 1.5, 12)
    values = 1 + 0.25 * z / np.std(z, ddof=1)
    for threshold, distance in ((2.0, 4.0), (1.5, 2.0)):
        (row,) = robustness.tails(_runs([{"x": _stat(v, threshold)} for v in values]))
        assert row["distance"] == pytest.approx(distance)
        assert row["tail"] == pytest.approx(scipy.stats.norm.sf(distance))
        assert row["flag"] == (distance < robustness.FLAG)


def test_ess_is_measured_on_the_log_scale_and_fails_below():
    ess = np.exp(np.log(400) + 0.2 * np.linspace(-1.5, 1.5, 12))
    (row,) = robustness.tails(_runs([{"ess": _stat(v, 100, "below", "log")} for v in ess]))
    sd = np.std(np.log(ess), ddof=1)
    assert row["distance"] == pytest.approx((np.log(ess).mean() - np.log(100)) / sd)
    assert not row["flag"]


def test_a_p_value_against_its_null_has_its_threshold_as_tail_and_is_checked_for_uniformity():
    uniform = [{"p": _stat(p, 1e-3, "below", "p")} for p in (np.arange(12) + 0.5) / 12]
    (row,) = robustness.tails(_runs(uniform))
    assert row["distance"] == pytest.approx(scipy.stats.norm.isf(1e-3)) and not row["flag"]
    (row,) = robustness.tails(_runs([{"p": _stat(p, 0.05, "below", "p")} for p in (np.arange(12) + 0.5) / 12]))
    assert row["flag"]  # a 5 % test is not a 1e-3 one
    small = [{"p": _stat(p, 1e-3, "below", "p")} for p in np.linspace(0.002, 0.01, 30)]
    (row,) = robustness.tails(_runs(small))
    assert row["uniform_p"] < 1e-3 and row["flag"]  # p-values piled up near the threshold: not the null


def test_a_failure_or_nan_at_any_offset_is_flagged_and_fails_the_run(capsys):
    (row,) = robustness.tails(_runs([{"x": _stat(v, 1.0)} for v in (0.1, 0.2, 1.3)]))
    assert row["distance"] == -math.inf and row["flag"]
    (row,) = robustness.tails(_runs([{"x": _stat(v, 1.0)} for v in (0.1, math.nan, 0.3)]))
    assert row["flag"]
    assert robustness.report(_runs([{"x": _stat(0.1 * i, 1.0)} for i in range(3)], outcome="failed")) == 1
    assert "FAILED t.py::a at offsets 0, 1, 2" in capsys.readouterr().out


def test_a_statistic_drawn_again_until_it_passes_has_its_tail_to_the_power_of_its_attempts():
    """ESS of a sampler's first attempt, 1 sd of log above its threshold (tail 0.16, flagged alone), with four
    attempts: the test fails only if all four fail, 0.16 ** 4 = 6.4e-4 (distance 3.22); a first attempt below the
    threshold is one draw of the statistic, not a failure."""
    z = np.linspace(-1.5, 1.5, 12)
    ess = np.exp(np.log(100) + 0.5 + 0.5 * z / np.std(z, ddof=1))  # log mean 1 sd above log 100; two below
    runs = _runs([{"ess": _stat(v, 100, "below", "log") | {"attempts": 4}} for v in ess])
    (row,) = robustness.tails(runs)
    assert row["tail"] == pytest.approx(scipy.stats.norm.sf(1.0) ** 4) and not row["flag"]
    assert row["distance"] == pytest.approx(scipy.stats.norm.isf(scipy.stats.norm.sf(1.0) ** 4))
    (row,) = robustness.tails(_runs([{"ess": _stat(v, 100, "below", "log")} for v in ess]))
    assert row["distance"] == -math.inf and row["flag"]  # one attempt: a draw below the threshold failed
    recorded = {}
    record_check(lambda k, v: recorded.__setitem__(k, v), "ess", 50.0, 100, fails="below", scale="log", attempts=4)
    assert json.loads(recorded[robustness.STAT_PREFIX + "ess"])["attempts"] == 4
    with pytest.raises(ValueError, match="attempts a positive int"):
        record_check(lambda k, v: None, "ess", 50.0, 100, attempts=0)


def test_nothing_ran_is_a_failure_and_a_test_without_statistic_is_named(capsys):
    assert robustness.report([]) == 1
    assert "no test ran" in capsys.readouterr().out
    runs = _runs([{}] * 3)
    assert robustness.report(runs) == 1
    assert "NO STATISTIC t.py::a" in capsys.readouterr().out


def test_a_deterministic_statistic_is_infinitely_far_and_constant_runs_pass(capsys):
    runs = _runs([{"x": _stat(0.5, 1.0), "y": _stat(3.0, 1.0, "below", "log")}] * 3)
    assert all(r["distance"] == math.inf and not r["flag"] for r in robustness.tails(runs))
    assert robustness.report(runs) == 0


def test_record_check_writes_what_robustness_reads():
    recorded = {}
    assert record_check(lambda k, v: recorded.__setitem__(k, v), "ess", 250.0, 100, fails="below", scale="log")
    assert not record_check(lambda k, v: None, "z", 5.0, 4.0)
    (key, value), = recorded.items()
    assert key == robustness.STAT_PREFIX + "ess" and json.loads(value) == _stat(250.0, 100.0, "below", "log")
    with pytest.raises(ValueError, match="fails must be"):
        record_check(lambda k, v: None, "z", 1.0, 2.0, fails="sideways")


def test_bad_arguments_are_refused_before_anything_runs(tmp_path):
    script = ROOT / "tests" / "robustness.py"
    for args, message in ((["--json", str(tmp_path / "missing" / "out.json")], "--json: folder"),
                          (["--offsets", "0"], "--offsets must be")):
        r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and message in r.stderr, r.stderr
    merged = tmp_path / "runs.json"
    merged.write_text(json.dumps({"runs": _runs([{"x": _stat(0.1 * i, 1.0)} for i in range(1, 4)])}))
    r = subprocess.run([sys.executable, script, "--merge", str(merged)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "1 tests, 1 statistics at offsets [0, 1, 2]: 0 failures, 0 flagged" in r.stdout


def test_every_stochastic_test_records_the_statistics_it_checks():
    """Each test marked ``stochastic`` calls ``check`` or ``record_check`` (directly, or through a helper it hands
    ``check`` to), so that the robustness script sees its thresholds."""
    missing = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            marks = [ast.unparse(d) for d in getattr(node, "decorator_list", [])]
            if node.__class__ is ast.FunctionDef and any(m.endswith("mark.stochastic") for m in marks):
                names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                if not names & {"check", "record_check"}:
                    missing.append(f"{path.relative_to(ROOT)}::{node.name}")
    assert not missing, missing


def test_a_standard_normal_z_has_its_two_sided_tail():
    """``scale = "z"``: a ``|z|`` bound of 4 is a known two-sided tail 2Φ(−4) = 6.3e-5 (distance 3.83), whatever the
    few values seen; |z| values that are too large for a standard normal are flagged by the uniformity test."""
    calm = [{"z": _stat(v, 4.0, scale="z")} for v in (0.03, 1.1, 0.7, 1.06, 0.4, 1.58, 1.63, 3.9, 0.2, 0.9, 1.3, 0.5)]
    (row,) = robustness.tails(_runs(calm))
    assert row["distance"] == pytest.approx(scipy.stats.norm.isf(2 * scipy.stats.norm.sf(4.0))) and not row["flag"]
    loud = [{"z": _stat(v, 4.0, scale="z")} for v in np.linspace(2.5, 3.9, 12)]
    assert robustness.tails(_runs(loud))[0]["flag"]


def test_the_json_file_holds_the_runs_and_the_table(tmp_path):
    """``--json`` writes what ``--merge`` reads back (numbers from NumPy and SciPy included)."""
    merged, out = tmp_path / "runs.json", tmp_path / "out.json"
    merged.write_text(json.dumps({"runs": _runs([{"p": _stat(p, 1e-3, "below", "p")} for p in (0.2, 0.5, 0.9)])}))
    r = subprocess.run([sys.executable, ROOT / "tests" / "robustness.py", "--merge", str(merged), "--json", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
    assert [run["offset"] for run in json.loads(out.read_text())["runs"]] == [0, 1, 2]


def test_a_whole_suites_junit_report_counts_as_the_run_of_its_offset(tmp_path):
    """``--junit OFFSET=FILE`` reads a JUnit report written elsewhere (a whole ``make test``): its outcomes and
    recorded statistics join the runs of ``--merge`` at that offset, replacing a run of the same offset; a bad item
    is refused naming the flag."""
    def report(value, outcome=""):
        prop = json.dumps(_stat(value, 1.0)).replace('"', "&quot;")
        return (f'<testsuites><testsuite><testcase classname="t" name="a" time="2.5"><properties>'
                f'<property name="stat:x" value="{prop}"/></properties>{outcome}</testcase>'
                f'<testcase classname="u" name="b" time="1.0"/></testsuite></testsuites>')

    merged, out = tmp_path / "runs.json", tmp_path / "out.json"
    merged.write_text(json.dumps({"runs": _runs([{"x": _stat(0.1 * i, 1.0)} for i in range(1, 4)])}))
    (tmp_path / "a.xml").write_text(report(0.35))
    (tmp_path / "b.xml").write_text(report(0.3, "<failure/>"))
    script = ROOT / "tests" / "robustness.py"
    r = subprocess.run([sys.executable, script, "--merge", str(merged), "--junit", f"2={tmp_path / 'a.xml'}",
                        f"3={tmp_path / 'b.xml'}", "--json", str(out)], capture_output=True, text=True, timeout=60)
    runs = json.loads(out.read_text())["runs"]
    assert [run["offset"] for run in runs] == [0, 1, 2, 3]
    assert runs[2]["stats"]["t.py::a"]["x"]["value"] == 0.35 and runs[2]["worker_seconds"] == 3.5
    assert r.returncode == 1 and "FAILED t.py::a at offsets 3" in r.stdout, r.stdout  # offset 3's failure counts
    r = subprocess.run([sys.executable, script, "--junit", "x=nothing.xml"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--junit takes OFFSET=FILE" in r.stderr, r.stderr


@pytest.mark.parametrize("df", [None, 100.0])
def test_max_abs_z_p_value_makes_the_z_bound_decision(df):
    """``check_max_abs_z`` records a Bonferroni p-value on the "p" scale and passes exactly where the largest |z|
    is below ``z_bound(comparisons, TAIL, df)``, on both sides of the bound."""
    from conftest import TAIL, check_max_abs_z, z_bound

    recorded = {}

    def check(name, value, threshold, *, fails, scale, detail):
        recorded[name] = (value, threshold, fails, scale)
        assert value > threshold

    bound = z_bound(8, TAIL, df)
    for top, passes in ((bound * 0.999, True), (bound * 1.001, False)):
        z = np.array([0.3, -top, 1.0])
        if passes:
            check_max_abs_z(check, "s", z, 8, df=df)
            value, threshold, fails, scale = recorded["s"]
            assert (threshold, fails, scale) == (TAIL, "below", "p") and TAIL < value < 1.05 * TAIL
        else:
            with pytest.raises(AssertionError):
                check_max_abs_z(check, "s", z, 8, df=df)


def test_docstrings_are_rewritten_from_the_table(tmp_path):
    """``--docstrings``: each measured test's "Measured over ..." sentence names its nearest threshold (a p-value's
    by its null tail), for every parametrisation of the function together; a test without the sentence is named."""
    folder = tmp_path / "tests"
    folder.mkdir()
    old = "Measured over 3 seed offsets (tests/robustness.md): the nearest threshold, that of x, is 9 sds."
    (folder / "test_a.py").write_text(f'def test_f():\n    """Claim.\n\n    {old}"""\n\n\n'
                                      f'def test_g():\n    """No sentence."""\n')
    rows = [{"test": "tests/test_a.py::test_f[1]", "stat": "ess", "distance": 4.2, "tail": 1.3e-5, "scale": "log",
             "n": 12},
            {"test": "tests/test_a.py::test_f[2]@grp", "stat": "p", "distance": 3.0902, "tail": 1e-3, "scale": "p",
             "n": 12},
            {"test": "tests/test_a.py::test_g", "stat": "z", "distance": 5.0, "tail": 2.9e-7, "scale": "linear",
             "n": 12}]
    assert robustness.update_docstrings(rows, tmp_path) == ["tests/test_a.py::test_g"]
    text = (folder / "test_a.py").read_text()
    assert old not in text and text.count("Measured over 12 seed offsets") == 1
    assert " ".join(text.split()).count("that of p [2], has its null's tail 1.0e-03 (a p-value).\"\"\"") == 1
