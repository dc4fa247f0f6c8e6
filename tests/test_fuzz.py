"""Every file the package reads, damaged at random, is refused or reads as it was (issue 74).

For each kind (``theory.nc``, ``posterior.nc``, ``comparison.nc``, ``data.npz`` and ``attention.npz`` through the
spec a run records, with their sha256, that spec itself, ``pruning.json``, a model checkpoint), 100 single-bit
flips at uniformly drawn positions and 20 truncations at uniformly drawn lengths are each loaded by the package's
own loader in a worker process (``tests/fuzz_worker.py``): each must raise the package's one-line ``ValueError``
(exit 2 from the command) or load exactly what the undamaged file loads. None may crash the interpreter, hang past
:data:`HANG_SECONDS`, raise anything else, or load other numbers without an error. The one exception is the spec:
a flipped digit of a spec's text is another valid spec (``width = 3`` → ``width = 2``), which is the user's text
and cannot be told from an edit; those are counted apart (``other spec``) and listed, and every other outcome of the
spec is held to the same rule. Deterministic given the seed offset (positions from ``rng_of``); a flip that the
package cannot detect would fail at some offset, which is the point.
"""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import random_data, random_network, rng_of

import bayes_attn as ba

ROOT = Path(__file__).resolve().parents[1]
FLIPS, TRUNCATIONS = 100, 20
HANG_SECONDS = 30.0
"""Most seconds one load may take (the worker's start, importing JAX, gets twice as long)."""
KINDS = ("theory", "posterior", "comparison", "data", "attention", "spec", "pruning", "checkpoint")


def _originals(folder: Path) -> dict[str, tuple[Path, Path]]:
    """``{kind: (file to damage, file the loader reads)}``, written into ``folder`` by this version."""
    from test_arrays import _write
    from test_compare import _synthetic_posterior

    from bayes_attn.oneshot import _prune_result as prune_result
    from bayes_attn.oneshot import load_pruning
    from bayes_attn.spec import load_spec

    net = random_network((2, 2), width=6)
    x, y = random_data(15)
    xt, _ = random_data(12, seed=9)
    yt = np.where(rng_of(3).random(12) < 0.5, -1.0, 1.0)
    theory = ba.solve_theory(net, x, y, temperature=0.1, correction="laplace")
    m, v = theory.predict(xt)
    post = _synthetic_posterior(net, x, y, xt, theory.U, m, np.sqrt(v), chains=2, draws=50)
    post.tree.attrs["sampler"] = "wishart"  # a sampler load_posterior knows
    out = {"theory": theory.save(folder / "theory.nc"), "posterior": post.save(folder / "posterior.nc"),
           "comparison": ba.compare(theory, post, xt, yt).save(folder / "comparison.nc")}
    spec = _write(folder / "arrays")
    recorded = folder / "arrays" / "recorded.toml"  # as a run records it: with both files' sha256
    recorded.write_text(load_spec(spec).to_toml())
    out = {k: (p, p) for k, p in out.items()}
    out |= {"data": (folder / "arrays" / "data.npz", recorded),
            "attention": (folder / "arrays" / "attention.npz", recorded), "spec": (recorded, recorded)}
    fig3 = ROOT / "inference" / "results" / "fig3"
    out["pruning"] = (prune_result.write(load_pruning(fig3), folder / "pruning.json"),) * 2
    out["checkpoint"] = (Path(shutil.copy(fig3 / "model.npz", folder / "model.npz")),) * 2
    return out


def _variants(damaged: Path, reads: Path, kind: str, folder: Path) -> list[tuple[str, Path]]:
    """``(what, file to load)`` of every damaged copy of ``damaged`` (each in a folder of its own, beside copies of
    the files ``reads`` needs)."""
    raw = damaged.read_bytes()
    rng = rng_of(74 + KINDS.index(kind))
    cuts = [("flip", int(rng.integers(len(raw))), int(rng.integers(8))) for _ in range(FLIPS)]
    cuts += [("truncate", int(rng.integers(len(raw))), 0) for _ in range(TRUNCATIONS)]
    out = []
    for i, (how, at, bit) in enumerate(cuts):
        d = folder / f"{kind}-{i}"
        shutil.copytree(reads.parent, d) if reads != damaged or kind == "spec" else d.mkdir(parents=True)
        target = d / damaged.name
        bad = bytearray(raw)
        if how == "flip":
            bad[at] ^= 1 << bit
        else:
            bad = bad[:at]
        target.write_bytes(bytes(bad))
        out.append((f"{how} at byte {at}" + (f" bit {bit}" if how == "flip" else ""), d / reads.name))
    return out


def _pump(stream, lines: queue.Queue) -> None:
    """Each line of ``stream`` into ``lines``, then ``None`` at its end."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def _load_all(kind: str, paths: list[Path]) -> list[dict]:
    """Each path's outcome from the worker (:mod:`fuzz_worker`); a worker that dies or hangs gives ``crash`` or
    ``hang`` for the file it was on and is started again after it."""
    results: list[dict] = []
    while len(results) < len(paths):
        rest = paths[len(results):]
        proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("fuzz_worker.py")), kind,
                                 *map(str, rest)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
        first = True
        while len(results) < len(paths):
            try:
                line = lines.get(timeout=HANG_SECONDS * (2 if first else 1))
            except queue.Empty:
                proc.kill()
                results.append({"hang": f"no answer in {HANG_SECONDS:g} s"})
                break
            first = False
            if line is None:
                proc.wait()
                results.append({"crash": f"the worker exited with {proc.returncode}"})
                break
            results.append(json.loads(line))
        proc.wait()
    return results


@pytest.mark.validate
@pytest.mark.slow  # ~3 min: 8 kinds × 121 loads, each kind in a worker of its own
def test_every_damaged_file_is_refused_or_reads_as_it_was(tmp_path, record_property):
    originals = _originals(tmp_path / "originals")
    counts, failures, other_specs = {}, [], []
    for kind, (damaged, reads) in originals.items():
        variants = _variants(damaged, reads, kind, tmp_path / "variants")
        reference, *results = _load_all(kind, [reads] + [p for _, p in variants])
        assert "ok" in reference, (kind, reference)
        tally = {"refused": 0, "identical": 0, "other spec": 0, "other": 0}
        for (what, _), r in zip(variants, results, strict=True):
            if "refused" in r:
                tally["refused"] += 1
            elif r.get("ok") == reference["ok"]:
                tally["identical"] += 1
            elif "ok" in r and kind == "spec":
                tally["other spec"] += 1
                other_specs.append(what)
            else:
                tally["other"] += 1
                failures.append((kind, what, r if "ok" not in r else "other numbers, no error"))
        counts[kind] = tally
    record_property("fuzz_counts", json.dumps(counts))
    record_property("fuzz_other_specs", json.dumps(other_specs))
    print(json.dumps(counts))
    assert not failures, failures
