"""``pruning.json``: one serialiser and one loader of the typed result of ``bayes-attn prune``
(bayes_attn.oneshot._prune_result)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bayes_attn.oneshot import _prune_result as prune_result
from bayes_attn.oneshot._pruning import PruningResult, Spearman

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "inference/results/fig3").rglob("pruning.json"))
NEWER_KEYS = {"base_binomial_se": ((), None), "epochs_run": (("model",), None), "kept_epoch": (("model",), None),
              "comparisons": ((), {}),
              "score_spreads": ((), {"corrected": None, "posterior": None, "ablation": None,
                                     "posterior_temperature": None, "correction_problems": []})}
"""Keys (where they sit, and what they are read as) of fields added after some shipped files were written."""


def test_the_shipped_results_are_found():
    assert len(SHIPPED) >= 8, SHIPPED


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_loading_and_writing_a_shipped_file_gives_its_bytes_back(path, tmp_path):
    """Every key of the file is read into a typed field and written back in its place: with the keys of fields
    the file was written without taken out again, the text is the file's, byte for byte."""
    result = prune_result.load_pruning(path)
    assert isinstance(result.pruning, PruningResult) and isinstance(result.trained_spearman, Spearman)
    text = prune_result.write(result, tmp_path / "pruning.json").read_text()
    written, old = json.loads(text), json.loads(path.read_text())
    if prune_result.SHA256_KEY not in old:  # written before the file carried its hash
        assert written.pop(prune_result.SHA256_KEY) == prune_result.content_sha256(written)
    assert (result.pruning.base_binomial_se is None) == ("base_binomial_se" not in old)  # None: written before it
    for key, (where, empty) in NEWER_KEYS.items():
        inner_old, inner = old, written
        for k in where:
            inner_old, inner = inner_old[k], inner[k]
        if key not in inner_old:
            assert inner.pop(key) == empty, key
    if "headline_verdict" not in old:  # derived: without comparisons, that of the sampling
        assert written.pop("headline_verdict") == ("not sampled" if old["verdict"] == "not sampled" else
                                                   "inconclusive" if old["verdict"] == "inconclusive" else
                                                   "not compared")
    assert json.dumps(written, indent=2) + "\n" == path.read_text()
    assert prune_result.load_pruning(tmp_path) == result  # the folder or the file


UNCOMPARED = [p for p in SHIPPED if (d := json.loads(p.read_text()))["verdict"] == "diagnostics passed"
              and not d.get("comparisons")]
"""Shipped files whose samples passed their diagnostics but were written before ``prune`` compared them."""


def test_a_shipped_file_with_samples_but_no_comparison_reads_not_compared():
    """No "agree" without a comparison: ``inference/results/fig3/pruning.json`` (and any other such shipped file)
    reads ``not compared`` in the API, in the file written back and in ``report.md``, never ``agree``."""
    from bayes_attn import verdict
    from bayes_attn._internal import outputs
    from bayes_attn.oneshot import _results as results

    assert ROOT / "inference/results/fig3/pruning.json" in UNCOMPARED, UNCOMPARED
    for path in UNCOMPARED:
        r = prune_result.load_pruning(path)
        assert r.verdict == verdict.NOT_COMPARED == "not compared", (path, r.verdict)
        assert prune_result.to_json(r)["headline_verdict"] == "not compared"
        report = results.report_markdown("x", r, outputs.load_dataset(path.parent / "oneshot.nc"), {})
        assert "Verdict of the theory against the samples: **not compared**" in report, report[:600]
        assert "agree" not in report.split("## ")[0], report[:600]


def test_agree_needs_every_compared_width_to_agree():
    """The headline over widths: one disagreeing width makes it ``disagree``, no width compared ``not compared``,
    no samples ``not sampled``; ``agree`` only from comparisons that agree."""
    r = prune_result.load_pruning(ROOT / "inference/results/fig3/compared/pruning.json")
    assert len(r.comparisons) >= 2
    agreeing = {N: _with_verdict(c, "agree") for N, c in r.comparisons.items()}
    assert dataclasses.replace(r, comparisons=agreeing).verdict == "agree"
    first = next(iter(r.comparisons))
    one_off = {**agreeing, first: _with_verdict(r.comparisons[first], "disagree")}
    assert dataclasses.replace(r, comparisons=one_off).verdict == "disagree"
    assert dataclasses.replace(r, comparisons={}).verdict == "not compared"
    unsampled = dataclasses.replace(r, comparisons={}, sampling=prune_result.SamplingVerdict("not sampled", []))
    assert unsampled.verdict == "not sampled"


def _with_verdict(c: prune_result.WidthComparison, verdict: str) -> prune_result.WidthComparison:
    theories = {name: dataclasses.replace(t, verdict=verdict) for name, t in c.theories.items()}
    return dataclasses.replace(c, theories=theories)


def test_which_side_failed_survives_the_file_and_decides_the_advice(tmp_path):
    """Issue 71 item 1: a width whose theory is not a solution (its sampler fine) is stored as such; read back, the
    headline's warning advises on the theory alone, with the width's reason. Files written before the flags load
    with both sides failed where inconclusive (their bytes round-trip: the test above)."""
    r = prune_result.load_pruning(ROOT / "inference/results/fig3/compared/pruning.json")
    passed = dataclasses.replace(r, sampling=prune_result.SamplingVerdict("diagnostics passed", []))
    first = next(iter(r.comparisons))
    c = r.comparisons[first]
    theories = {name: dataclasses.replace(t, verdict="inconclusive", reasons=["not a minimum"], sampler_failed=False,
                                          theory_failed=True) for name, t in c.theories.items()}
    mine = dataclasses.replace(passed, comparisons={first: dataclasses.replace(c, theories=theories)})
    back = prune_result.load_pruning(prune_result.write(mine, tmp_path / "pruning.json"))
    assert back == mine
    warning = back.outcome.warning("at some sampled width")
    assert f"N={first} (comparison, on every observable): not a minimum" in warning
    assert "check the spec's scales" in warning and "sample longer" not in warning
    legacy = dataclasses.replace(theories[c.headline], sampler_failed=None, theory_failed=None)
    assert legacy.outcome.sampler_failed and legacy.outcome.theory_failed


def test_the_binomial_and_the_bootstrap_error_are_two_fields(tmp_path):
    result = prune_result.load_pruning(SHIPPED[0])
    result = dataclasses.replace(result, pruning=dataclasses.replace(result.pruning, base_binomial_se=0.0123))
    saved = json.loads(prune_result.write(result, tmp_path / "p.json").read_text())
    assert saved["base_binomial_se"] == 0.0123 and saved["base_se"] == result.spread.base.se != 0.0123
    assert prune_result.load_pruning(tmp_path / "p.json") == result


def test_a_file_without_a_key_is_refused_by_name(tmp_path):
    d = json.loads(SHIPPED[0].read_text())
    del d["spearman_draws"]
    with pytest.raises(KeyError, match="spearman_draws"):
        prune_result.from_json(d)


def test_the_seed_summary_puts_the_scores_and_the_comparisons_side_by_side():
    """``inference/fig3.py``'s ``summary.md`` holds, per run, ρ of the leading, corrected and posterior scores and of
    the ablation, each as median [5 %, 95 %], and the theory's verdicts at each sampled width; a run written before
    they were leaves the cells empty rather than failing."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fig3_script", ROOT / "inference/fig3.py")
    fig3 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fig3)
    compared = prune_result.load_pruning(ROOT / "inference/results/fig3/compared/pruning.json")
    older = prune_result.load_pruning(ROOT / "inference/results/fig3/2x8/seed0/pruning.json")
    text = fig3.markdown(fig3.summarise({"2x4": {0: compared}, "2x8": {0: older}}))
    o, cell = compared.spread.others, lambda x: f"{x.median:.2f} [{x.q05:.2f}, {x.q95:.2f}]"  # noqa: E731
    assert f"| 2x4 | 0 | {' | '.join(map(cell, (compared.spread.rho, o.corrected, o.posterior, o.ablation)))} |" \
        in text, text
    assert f"| 2x8 | 0 | {cell(older.spread.rho)} |  |  |  |" in text, text
    for N, c in compared.comparisons.items():
        assert f"- 2x4 seed 0, N = {N}: {c.summary()}" in text, text
