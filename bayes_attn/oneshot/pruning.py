"""Head scores from the order parameter and head ablation of the gradient-descent model (THEORY.md §4, §6).

The head score of head ``(l, h)`` sums ``|U_1|`` over the entries whose row or
column path passes through that head. Ablating heads zeroes their value maps
and rescales the remaining heads of the layer by ``sqrt(H/(H-k))`` (no
retraining). The paper's claim: the score predicts the accuracy drop, and
pruning in ascending score order keeps accuracy better than descending or
random order.

Layers and heads are 0-based ``(layer, head)`` pairs; ``U`` paths are
row-major with ``h1`` slowest. Results are plain dicts/dataclasses of floats
and lists, ready for JSON.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import scipy.stats

from .. import _checks
from ..theory import head_scores  # noqa: F401  (re-exported: the one implementation lives with Theory)
from .training import ModelConfig, Params, check_params, correct

ALTERNATIVES = ("greater", "less", "two-sided")


# ----- ablation ---------------------------------------------------------------
def _removal_sets(heads_removed, heads: Sequence[int]) -> list[set[int]]:
    if isinstance(heads_removed, Mapping):
        pairs = [(l, h) for l, hs in heads_removed.items() for h in hs]
    else:
        try:
            pairs = [tuple(p) for p in heads_removed]
        except TypeError as err:
            raise ValueError("heads_removed must be a dict {layer: [heads]} or a list of (layer, head)") from err
    sets = [set() for _ in heads]
    for p in pairs:
        if len(p) != 2:
            raise ValueError(f"heads_removed entries must be (layer, head) pairs, got {p!r}")
        l, h = p
        if isinstance(l, bool) or not isinstance(l, (int, np.integer)) or not 0 <= l < len(heads):
            raise ValueError(f"heads_removed: layer must be an int in [0, {len(heads)}), got {l!r}")
        if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or not 0 <= h < heads[l]:
            raise ValueError(f"heads_removed: head of layer {l} must be an int in [0, {heads[l]}), got {h!r}")
        if int(h) in sets[l]:
            raise ValueError(f"heads_removed lists head (layer={l}, head={h}) twice")
        sets[int(l)].add(int(h))
    for l, s in enumerate(sets):
        if len(s) == heads[l]:
            raise ValueError(f"heads_removed would remove all {heads[l]} heads of layer {l}")
    return sets


def ablate(params: Params, config: ModelConfig, heads_removed) -> Params:
    """The model without some heads: their ``V[l][h]`` set to zero, the layer's others times ``sqrt(H/(H-k))``.

    ``heads_removed``: ``{layer: [heads]}`` or a list of ``(layer, head)``, 0-based.
    Layers with nothing removed keep their arrays unchanged (so removing nothing
    gives back an identical model). Removing every head of a layer is a ``ValueError``.
    """
    check_params(params, config)
    sets = _removal_sets(heads_removed, config.heads)
    V = list(params.V)
    for l, s in enumerate(sets):
        if not s:
            continue
        H = config.heads[l]
        keep = np.ones(H)
        keep[list(s)] = 0.0
        factor = keep * math.sqrt(H / (H - len(s)))
        V[l] = params.V[l] * np.asarray(factor, dtype=params.V[l].dtype)[:, None, None]
    return params._replace(V=tuple(V))


def all_heads(heads: Sequence[int]) -> list[tuple[int, int]]:
    """Every ``(layer, head)``, layer-major."""
    return [(l, h) for l, H in enumerate(heads) for h in range(H)]


# ----- single-head drops ------------------------------------------------------
@dataclass
class HeadDrops:
    """Accuracy after removing each head alone (per layer lists ``[H_l]``).

    drops = base − accuracy without the head (positive: the head helped);
    drop_se: paired standard error, ``std(c_base − c_without)/sqrt(n)`` over
    the per-example correctness ``c``. Entries are ``None`` for the only head
    of a layer (it cannot be removed).
    """

    base_accuracy: float
    base_se: float
    accuracy: list[list[float | None]]
    drops: list[list[float | None]]
    drop_se: list[list[float | None]]

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        return asdict(self)


def single_head_drops(params: Params, config: ModelConfig, x, y) -> HeadDrops:
    """Remove each head alone (with rescaling) and measure the accuracy drop on ``x [P, T, N0]``, ``y [P]``."""
    check_params(params, config)
    x = _checks.inputs("x", x, config.N0)
    c0 = correct(params, x, y).astype(np.float64)
    n = c0.size
    acc, drops, ses = [], [], []
    for l, H in enumerate(config.heads):
        acc.append([]), drops.append([]), ses.append([])
        for h in range(H):
            if H == 1:  # the only head of a layer cannot be removed
                acc[-1].append(None), drops[-1].append(None), ses[-1].append(None)
                continue
            c = correct(ablate(params, config, [(l, h)]), x, y).astype(np.float64)
            diff = c0 - c
            acc[-1].append(float(c.mean()))
            drops[-1].append(float(diff.mean()))
            ses[-1].append(float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else None)
    base = float(c0.mean())
    return HeadDrops(base, math.sqrt(base * (1 - base) / n), acc, drops, ses)


# ----- rank correlation -------------------------------------------------------
def _flat(name: str, v) -> np.ndarray:
    if isinstance(v, np.ndarray):
        return _checks.array(name, v).ravel()
    try:
        parts = [np.ravel(np.asarray(p, dtype=np.float64)) for p in v]
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numbers or a list of per-layer arrays") from err
    return np.concatenate(parts) if parts else np.zeros(0)


def spearman(scores, drops, *, alternative: str = "greater", n_permutations: int = 10_000, seed: int = 0, exact_max: int = 8) -> dict:
    """Spearman rank correlation of ``scores`` and ``drops`` with a permutation p-value.

    Both may be flat or per-layer lists (flattened layer-major). ``alternative``:
    ``"greater"`` (default: high score ⇔ large drop), ``"less"`` or ``"two-sided"``.
    With ``n <= exact_max`` items all ``n!`` permutations are enumerated (a
    perfectly ordered pair gives ``p = 1/n!`` for ``"greater"``, ``2/n!``
    two-sided); otherwise ``n_permutations`` seeded random permutations give
    ``p = (1 + #{rho_perm at least as extreme}) / (1 + n_permutations)``.
    Ties get average ranks. Returns ``{"rho", "p_value", "alternative",
    "method", "n", "n_permutations"}``; ``rho`` and ``p_value`` are ``None``
    when either input is constant. NaN pairs (e.g. a layer's only head) are dropped.
    """
    _checks.choice("alternative", alternative, ALTERNATIVES)
    a, b = _flat("scores", scores), _flat("drops", drops)
    if a.shape != b.shape:
        raise ValueError(f"scores and drops must have the same number of items, got {a.size} and {b.size}")
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    n = a.size
    if n < 2:
        raise ValueError(f"spearman needs at least 2 finite (score, drop) pairs, got {n}")
    n_permutations = _checks.positive_int("n_permutations", n_permutations)
    ra = scipy.stats.rankdata(a) - (n + 1) / 2
    rb = scipy.stats.rankdata(b) - (n + 1) / 2
    out = {"alternative": alternative, "n": int(n)}
    norm = math.sqrt(float(ra @ ra) * float(rb @ rb))
    if norm == 0:
        return {**out, "rho": None, "p_value": None, "method": "constant input", "n_permutations": 0}
    rho = float(ra @ rb) / norm
    if n <= exact_max:
        perms = np.array(list(itertools.permutations(range(n))))
        method = "exact"
    else:
        rng = np.random.default_rng(seed)
        perms = rng.permuted(np.tile(np.arange(n), (n_permutations, 1)), axis=1)
        method = "permutation"
    null = (rb[perms] @ ra) / norm
    tol = 1e-12
    if alternative == "greater":
        hits = int(np.sum(null >= rho - tol))
    elif alternative == "less":
        hits = int(np.sum(null <= rho + tol))
    else:
        hits = int(np.sum(np.abs(null) >= abs(rho) - tol))
    p = hits / len(perms) if method == "exact" else (1 + hits) / (1 + len(perms))
    return {**out, "rho": rho, "p_value": float(p), "method": method, "n_permutations": int(len(perms))}


# ----- cumulative pruning -----------------------------------------------------
def cumulative_pruning(params: Params, config: ModelConfig, x, y, order: Sequence[tuple[int, int]]) -> dict:
    """Remove heads one after another in ``order`` and measure accuracy after each removal.

    A removal that would leave a layer without heads is skipped (listed under
    ``"skipped"``), so a full order of all heads ends with one head per layer.
    Returns ``{"removed": [[l, h], ...], "skipped": [...], "accuracy": [...],
    "se": [...]}`` with ``accuracy[k]`` after the first ``k`` removals
    (``accuracy[0]``: the full model).
    """
    check_params(params, config)
    x = _checks.inputs("x", x, config.N0)
    try:
        order = [tuple(int(v) for v in p) for p in order]
    except (TypeError, ValueError) as err:
        raise ValueError("order must be a list of (layer, head) pairs") from err
    for p in order:
        if len(p) != 2 or not 0 <= p[0] < config.L or not 0 <= p[1] < config.heads[p[0]]:
            raise ValueError(f"order must list (layer, head) pairs of this model, got {p!r}")
    if len(set(order)) != len(order):
        raise ValueError("order lists a head more than once")

    def measure(removed):
        c = correct(ablate(params, config, removed), x, y)
        acc = float(c.mean())
        return acc, math.sqrt(acc * (1 - acc) / c.size)

    removed, skipped = [], []
    acc0, se0 = measure([])
    accs, ses = [acc0], [se0]
    left = list(config.heads)
    for l, h in order:
        if left[l] == 1:
            skipped.append([l, h])
            continue
        left[l] -= 1
        removed.append([l, h])
        a, s = measure(removed)
        accs.append(a), ses.append(s)
    return {"removed": removed, "skipped": skipped, "accuracy": accs, "se": ses}


def ascending_order(scores: Sequence) -> list[tuple[int, int]]:
    """All heads ``(layer, head)`` by ascending score (ties: layer-major); ``scores`` per layer as from :func:`head_scores`."""
    pairs = [((l, h), float(s)) for l, layer in enumerate(scores) for h, s in enumerate(np.ravel(layer))]
    return [p for p, _ in sorted(pairs, key=lambda t: t[1])]


def descending_order(scores: Sequence) -> list[tuple[int, int]]:
    """All heads ``(layer, head)`` by descending score (ties: layer-major)."""
    pairs = [((l, h), float(s)) for l, layer in enumerate(scores) for h, s in enumerate(np.ravel(layer))]
    return [p for p, _ in sorted(pairs, key=lambda t: -t[1])]


def random_orders(heads: Sequence[int], n: int, seed: int = 0) -> list[list[tuple[int, int]]]:
    """``n`` seeded random orders of all heads."""
    n = _checks.positive_int("n", n)
    pairs = all_heads(heads)
    rng = np.random.default_rng(seed)
    return [[pairs[i] for i in rng.permutation(len(pairs))] for _ in range(n)]


def random_pruning(params: Params, config: ModelConfig, x, y, *, n_orders: int = 10, seed: int = 0) -> dict:
    """Cumulative pruning in ``n_orders`` seeded random orders: mean, std, min and max accuracy per step."""
    curves = [cumulative_pruning(params, config, x, y, o) for o in random_orders(config.heads, n_orders, seed)]
    acc = np.array([c["accuracy"] for c in curves])  # all of length 1 + sum(H_l - 1)
    return {
        "accuracy_mean": acc.mean(axis=0).tolist(),
        "accuracy_std": acc.std(axis=0, ddof=1).tolist() if len(curves) > 1 else [0.0] * acc.shape[1],
        "accuracy_min": acc.min(axis=0).tolist(),
        "accuracy_max": acc.max(axis=0).tolist(),
        "curves": curves,
        "seed": int(seed),
    }


def pruning_report(params: Params, config: ModelConfig, x, y, scores, *, n_random: int = 10, seed: int = 0) -> dict:
    """Everything of the pruning figure as one JSON-ready dict.

    ``scores``: per-layer head scores (:func:`head_scores`). Keys:
    ``base_accuracy``, ``base_se``, ``head_scores``, ``accuracy_drops``,
    ``drop_se``, ``spearman`` (one-sided, ``"greater"``), ``cumulative``
    (``ascending``, ``descending``, ``random``).
    """
    scores = [np.ravel(np.asarray(s, dtype=np.float64)) for s in scores]
    if [s.size for s in scores] != list(config.heads):
        raise ValueError(f"scores must give one value per head of every layer {config.heads}")
    drops = single_head_drops(params, config, x, y)
    return {
        "base_accuracy": drops.base_accuracy,
        "base_se": drops.base_se,
        "head_scores": [s.tolist() for s in scores],
        "accuracy_drops": drops.drops,
        "drop_se": drops.drop_se,
        "spearman": spearman(scores, drops.drops, seed=seed),
        "cumulative": {
            "ascending": cumulative_pruning(params, config, x, y, ascending_order(scores)),
            "descending": cumulative_pruning(params, config, x, y, descending_order(scores)),
            "random": random_pruning(params, config, x, y, n_orders=n_random, seed=seed),
        },
    }
