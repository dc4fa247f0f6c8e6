"""One verdict (bayes_attn.verdict): its values, how several combine, the exit status and the warning read from
it, and that no other module decides one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bayes_attn import cli, verdict
from bayes_attn.verdict import (
    AGREE,
    DIAGNOSTICS_PASSED,
    DISAGREE,
    INCONCLUSIVE,
    NOT_COMPARED,
    NOT_SAMPLED,
    THEORY_ONLY,
    Verdict,
    combine,
)

ROOT = Path(__file__).resolve().parents[1]
GOOD = {"max_r_hat": 1.001, "min_ess_bulk": 800.0, "divergences": 0.0}
BAD = {"max_r_hat": 1.2, "min_ess_bulk": 800.0, "divergences": 3.0}


def test_a_comparison_is_inconclusive_before_it_agrees():
    assert verdict.of_comparison(True, [], []) == Verdict(AGREE)
    assert verdict.of_comparison(False, [], []).value == DISAGREE
    v = verdict.of_comparison(True, ["max R-hat 1.2 > 1.01"], ["not converged"])
    assert (v.value, v.reasons, v.sampler_failed, v.theory_failed) == (
        INCONCLUSIVE, ("max R-hat 1.2 > 1.01", "not converged"), True, True)


def test_sampling_and_theory_alone():
    assert verdict.of_sampling({"N=10": GOOD, "N=100": GOOD}) == Verdict(DIAGNOSTICS_PASSED)
    v = verdict.of_sampling({"N=10": GOOD, "N=100": BAD})
    assert v.value == INCONCLUSIVE and len(v.reasons) == 1 and v.reasons[0].startswith("N=100: max R-hat 1.2")
    assert verdict.of_sampling({"": BAD}).reasons[0].startswith("max R-hat")  # one unnamed point: no label
    assert verdict.of_theory([]) == Verdict(THEORY_ONLY)
    assert verdict.of_theory(["not a minimum"]) == Verdict(INCONCLUSIVE, ("not a minimum",), theory_failed=True)


@pytest.mark.parametrize("parts, sampled, expected", [
    ([Verdict(AGREE), Verdict(AGREE)], True, AGREE),
    ([Verdict(DIAGNOSTICS_PASSED), Verdict(AGREE)], True, AGREE),
    ([Verdict(AGREE), Verdict(DISAGREE)], True, DISAGREE),
    ([Verdict(DISAGREE), Verdict(INCONCLUSIVE, ("x",))], True, INCONCLUSIVE),
    ([Verdict(DIAGNOSTICS_PASSED)], True, NOT_COMPARED),  # samples, nothing compared: never "agree"
    ([], True, NOT_COMPARED),
    ([Verdict(THEORY_ONLY)], False, THEORY_ONLY),
    ([Verdict(NOT_SAMPLED)], False, NOT_SAMPLED),
    ([Verdict(THEORY_ONLY), Verdict(AGREE)], True, AGREE),  # a sweep: theory at every width, samples at some
])
def test_combine(parts, sampled, expected):
    assert combine(parts, sampled=sampled).value == expected


def test_combine_keeps_every_reason_once_and_what_failed():
    v = combine([Verdict(INCONCLUSIVE, ("a", "b"), sampler_failed=True), Verdict(AGREE),
                 Verdict(INCONCLUSIVE, ("b", "c"), theory_failed=True)])
    assert (v.reasons, v.sampler_failed, v.theory_failed) == (("a", "b", "c"), True, True)


def test_exit_status_and_warning_are_read_from_the_verdict():
    assert [Verdict(x).exit_status for x in verdict.VALUES if x != INCONCLUSIVE] == [0] * 6
    assert Verdict(INCONCLUSIVE).exit_status == verdict.EXIT_INCONCLUSIVE == cli.EXIT_DIAGNOSTICS == 3
    assert Verdict(AGREE).warning() is None
    sampler = Verdict(INCONCLUSIVE, ("max R-hat 1.2 > 1.01",), sampler_failed=True).warning()
    assert sampler.startswith("the sampler's diagnostics failed: max R-hat 1.2") and "sample longer" in sampler
    assert "spec's scales" not in sampler
    at = Verdict(INCONCLUSIVE, ("N=10 (sampler, on U): max R-hat 1.2 > 1.01",), sampler_failed=True)
    assert at.warning("at some sampled width").startswith("inconclusive at some sampled width: N=10")
    theory = Verdict(INCONCLUSIVE, ("not converged",), theory_failed=True).warning("at some sampled width")
    assert theory.startswith("inconclusive at some sampled width: not converged") and "sample longer" not in theory
    with pytest.raises(ValueError, match="a verdict is one of"):
        Verdict("fine")


def test_the_commands_read_their_status_from_the_verdict():
    """The CLI's own status helpers are gone: every command returns ``_status(<a Verdict>)``."""
    assert not {"_diagnostics_status", "_theory_status", "_inconclusive"} & set(vars(cli))
    source = (ROOT / "bayes_attn/cli.py").read_text()
    assert source.count("return _status(") == 5, "sample, theory, run, sweep and prune"


def test_verdict_strings_are_made_in_one_module():
    """No module but bayes_attn/verdict.py writes a verdict's value as a literal (dictionary keys that name a
    file's attribute aside): the others use the module's names."""
    found = []
    for path in sorted((ROOT / "bayes_attn").rglob("*.py")):
        if path.name == "verdict.py":
            continue
        tree = ast.parse(path.read_text())
        keys = {id(k) for d in ast.walk(tree) if isinstance(d, ast.Dict) for k in d.keys if k is not None}
        found += [f"{path.relative_to(ROOT)}:{n.lineno} {n.value!r}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and n.value in verdict.VALUES and id(n) not in keys]
    assert not found, found


def test_a_verdict_round_trips_through_its_one_stored_form():
    """Issue 71 item 1: value, reasons and which side failed survive the file boundary; a bare value of a file
    written before reads as itself; anything else is refused; ``at`` labels each reason with its point."""
    for v in (Verdict(AGREE), Verdict(INCONCLUSIVE, ("R-hat 1.2 > 1.01", "ESS 80 < 400"), sampler_failed=True),
              Verdict(INCONCLUSIVE, ("not a minimum",), theory_failed=True)):
        assert Verdict.from_json(v.to_json()) == v
    assert Verdict.from_json(DISAGREE) == Verdict(DISAGREE)
    assert Verdict.from_json(INCONCLUSIVE) == Verdict(INCONCLUSIVE, (), True, True)
    for bad in ("maybe", '{"value": "agree"}', "[1, 2]"):
        with pytest.raises(ValueError, match="not a stored verdict|a verdict is one of"):
            Verdict.from_json(bad)
    v = Verdict(INCONCLUSIVE, ("a", "b"), sampler_failed=True).at("N=3, T=0.1")
    assert v.reasons == ("N=3, T=0.1: a", "N=3, T=0.1: b") and v.sampler_failed and not v.theory_failed
    assert Verdict(INCONCLUSIVE).at("N=3").reasons == ("N=3",) and Verdict(AGREE).at("N=3") == Verdict(AGREE)


VERDICT_NAMES = {"AGREE", "DISAGREE", "INCONCLUSIVE", "NOT_COMPARED", "NOT_SAMPLED", "THEORY_ONLY",
                 "DIAGNOSTICS_PASSED", "VALUES", "COMPARISONS"}
"""bayes_attn.verdict's values (and their tuples): only verdict.py compares with them."""


def _verdict_decisions(source: str) -> list[str]:
    """Where a module compares with a verdict value (a name of :data:`VERDICT_NAMES`, or its string) or builds a
    ``Verdict(...)`` itself: ``"line: code"``."""
    def is_value(node: ast.AST) -> bool:
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        return name in VERDICT_NAMES or isinstance(node, ast.Constant) and node.value in verdict.VALUES

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(map(is_value, [node.left, *node.comparators])) or (
                isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Verdict"):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_but_verdict_decides_a_verdict():
    """Issue 71 item 1: the verdict's values are compared, built and rebuilt in ``verdict.py`` alone; every other
    module asks a :class:`~bayes_attn.verdict.Verdict` (or ``verdict.stored`` / ``verdict.combine``)."""
    found = {str(p.relative_to(ROOT)): hits for p in sorted((ROOT / "bayes_attn").rglob("*.py"))
             if p.name != "verdict.py" and (hits := _verdict_decisions(p.read_text()))}
    assert not found, found


def test_verdict_decision_detector_can_fail():
    source = "if v.value == verdict.INCONCLUSIVE: pass\nx = Verdict('agree')\ny = s != 'disagree'\nz = a == b\n"
    assert _verdict_decisions(source) == ["1: v.value == verdict.INCONCLUSIVE", "2: Verdict('agree')",
                                          "3: s != 'disagree'"]


def test_what_other_modules_ask_a_verdict():
    """The questions reports, figures and results ask instead of comparing values (issue 71 item 1)."""
    inc = Verdict(INCONCLUSIVE, ("R-hat",), sampler_failed=True)
    assert [inc.is_inconclusive, Verdict(AGREE).is_inconclusive] == [True, False]
    assert [Verdict(DISAGREE).disagrees, Verdict(AGREE).disagrees, inc.disagrees] == [True, False, False]
    assert [Verdict(NOT_SAMPLED).sampled, Verdict(THEORY_ONLY).sampled] == [False, True]
    assert [Verdict(NOT_COMPARED).uncompared, Verdict(DIAGNOSTICS_PASSED).uncompared] == [True, False]
    assert Verdict(AGREE).text() == "theory and sampling agree"
    assert Verdict(DISAGREE).text("leading order (§4)") == "leading order (§4) theory and sampling DISAGREE"
    assert inc.text("x") == "INCONCLUSIVE (sampler diagnostics failed)"
    assert Verdict(INCONCLUSIVE, (), True, True).text() == (
        "INCONCLUSIVE (sampler diagnostics failed; the theory is not a solution)")
    assert verdict.inconclusive_values([[AGREE, INCONCLUSIVE], [DISAGREE, NOT_SAMPLED]]).tolist() == [
        [False, True], [False, False]]
