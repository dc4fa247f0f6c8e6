"""Head scores from the order parameter and head ablation of the gradient-descent model (docs/theory.md §4, §6).

The head score of head ``(l, h)`` sums ``|U_1|`` over the entries whose row or
column path passes through that head. Ablating heads zeroes their value maps
and rescales the remaining heads of the layer by ``sqrt(H/(H-k))`` (no
retraining). The paper's claim: the score predicts the accuracy drop, and
pruning in ascending score order keeps accuracy better than descending or
random order.

Layers and heads are 0-based ``(layer, head)`` pairs; ``U`` paths are
row-major with ``h1`` slowest. Results are frozen dataclasses of floats and
lists; :mod:`bayes_attn.oneshot._prune_result` writes them to ``pruning.json``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.stats

from .. import stats
from .._internal import checks as _checks
from ..theory import head_scores  # noqa: F401  (re-exported: the one implementation lives with Theory)
from ._model import ModelConfig, Params, check_params, correct

__all__ = ["ALTERNATIVES", "Cumulative", "HeadDrops", "PruningResult", "RandomPruning", "Spearman", "SpearmanSpread",
           "TheoryAblation", "ablate", "all_heads", "ascending_order", "bootstrap_accuracy", "class_bootstrap",
           "cumulative_pruning", "descending_order", "head_correctness", "path_factors", "pruning_report",
           "random_orders", "random_pruning", "rank_correlation", "single_head_drops", "spearman", "spearman_spread",
           "theory_head_drops"]

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
    sets: list[set[int]] = [set() for _ in heads]
    for p in pairs:
        if len(p) != 2:
            raise ValueError(f"heads_removed entries must be (layer, head) pairs, got {p!r}")
        l, h = p
        if isinstance(l, bool) or not isinstance(l, (int, np.integer)) or not 0 <= l < len(heads):
            raise ValueError(f"heads_removed: layer must be an int in [0, {len(heads)}), got {l!r}")
        if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or not 0 <= h < heads[int(l)]:
            raise ValueError(f"heads_removed: head of layer {l} must be an int in [0, {heads[int(l)]}), got {h!r}")
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
@dataclass(frozen=True)
class HeadDrops:
    """Accuracy after removing each head alone (per layer lists ``[H_l]``).

    base_binomial_se: the binomial standard error of ``base_accuracy`` (episodes
    counted as independent); drops = base − accuracy without the head
    (positive: the head helped); drop_se: paired standard error,
    ``std(c_base − c_without)/sqrt(n)`` over the per-example correctness ``c``.
    Entries are ``None`` for the only head of a layer (it cannot be removed).
    """

    base_accuracy: float
    base_binomial_se: float
    accuracy: list[list[float | None]]
    drops: list[list[float | None]]
    drop_se: list[list[float | None]]


def head_correctness(params: Params, config: ModelConfig, x, y) -> tuple[np.ndarray, np.ndarray]:
    """Per-example correctness of the full model ``[P]`` and without each head alone ``[n_heads, P]`` (bool).

    Heads layer-major; the row of a layer's only head is the full model's (it cannot be removed).
    """
    check_params(params, config)
    x = _checks.inputs("x", x, config.N0)
    c0 = correct(params, x, y)
    rows = [c0 if H == 1 else correct(ablate(params, config, [(l, h)]), x, y) for l, h in all_heads(config.heads)
            for H in (config.heads[l],)]
    return c0, np.array(rows)


def single_head_drops(params: Params, config: ModelConfig, x, y) -> HeadDrops:
    """Remove each head alone (with rescaling) and measure the accuracy drop on ``x [P, T, N0]``, ``y [P]``."""
    c0, rows = head_correctness(params, config, x, y)
    c0 = c0.astype(np.float64)
    n = c0.size
    acc: list[list[float | None]] = []
    drops: list[list[float | None]] = []
    ses: list[list[float | None]] = []
    k = 0
    for H in config.heads:
        for part in (acc, drops, ses):
            part.append([])
        for _ in range(H):
            c, k = rows[k].astype(np.float64), k + 1
            if H == 1:  # the only head of a layer cannot be removed
                for part in (acc, drops, ses):
                    part[-1].append(None)
                continue
            diff = c0 - c
            acc[-1].append(float(c.mean()))
            drops[-1].append(float(diff.mean()))
            ses[-1].append(float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else None)
    return HeadDrops(*stats.proportion(c0.astype(bool)), acc, drops, ses)


# ----- rank correlation -------------------------------------------------------
@dataclass(frozen=True)
class Spearman:
    """A Spearman ρ with its permutation p-value (:func:`spearman`); ``rho``, ``p_value`` ``None`` for constant
    input."""

    alternative: str
    n: int
    rho: float | None
    p_value: float | None
    method: str
    n_permutations: int

    def describe(self) -> str:
        """``ρ = …, p = … (alternative, method)``, or ``n/a`` when ρ is undefined."""
        if self.rho is None:
            return "n/a"
        return f"ρ = {self.rho:.3f}, p = {self.p_value:.3g} ({self.alternative}, {self.method})"


def _flat(name: str, v) -> np.ndarray:
    if isinstance(v, np.ndarray):
        return _checks.array(name, v).ravel()
    try:
        parts = [np.ravel(np.asarray(p, dtype=np.float64)) for p in v]
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numbers or a list of per-layer arrays") from err
    return np.concatenate(parts) if parts else np.zeros(0)


def spearman(scores, drops, *, alternative: str = "greater", n_permutations: int = 10_000, seed: int = 0,
             exact_max: int = 8) -> Spearman:
    """Spearman rank correlation of ``scores`` and ``drops`` with a permutation p-value.

    Both may be flat or per-layer lists (flattened layer-major). ``alternative``:
    ``"greater"`` (default: high score ⇔ large drop), ``"less"`` or ``"two-sided"``.
    With ``n <= exact_max`` items all ``n!`` permutations are enumerated (a
    perfectly ordered pair gives ``p = 1/n!`` for ``"greater"``, ``2/n!``
    two-sided); otherwise ``n_permutations`` seeded random permutations give
    ``p = (1 + #{rho_perm at least as extreme}) / (1 + n_permutations)``.
    Ties get average ranks. ``rho`` and ``p_value`` are ``None``
    when either input is constant. NaN pairs (e.g. a layer's only head) are dropped.
    Returns a :class:`Spearman`.
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
    rho = rank_correlation(a, b)
    if np.isnan(rho):
        return Spearman(alternative, int(n), None, None, "constant input", 0)
    exact = n <= exact_max
    # ranks are fixed under re-pairing, so ρ of a pairing is a dot product of centred ranks
    ra, rb = (scipy.stats.rankdata(v) - (n + 1) / 2 for v in (a, b))
    norm = math.sqrt(float(ra @ ra) * float(rb @ rb))
    # one sample: "pairings" re-orders ``ra`` against the fixed ``rb`` (n! pairings; with both samples given
    # SciPy would enumerate (n!)² orderings, 1.6e9 for 8 heads)
    res = scipy.stats.permutation_test(
        (ra,), lambda u, axis: np.sum(u * rb, axis=axis) / norm, permutation_type="pairings", vectorized=True,
        n_resamples=np.inf if exact else n_permutations, alternative=alternative, rng=seed)
    return Spearman(alternative, int(n), rho, float(res.pvalue), "exact" if exact else "permutation",
                    math.factorial(n) if exact else n_permutations)


# ----- cumulative pruning -----------------------------------------------------
@dataclass(frozen=True)
class Cumulative:
    """Heads removed one after another: ``accuracy[k]``, ``se[k]`` (binomial) after the first ``k`` removals.

    removed: the ``[layer, head]`` pairs removed, in order; skipped: those
    that would have left a layer without heads.
    """

    removed: list[list[int]]
    skipped: list[list[int]]
    accuracy: list[float]
    se: list[float]


@dataclass(frozen=True)
class RandomPruning:
    """Cumulative pruning in seeded random orders: mean, sd, min and max accuracy per step, and every curve."""

    accuracy_mean: list[float]
    accuracy_std: list[float]
    accuracy_min: list[float]
    accuracy_max: list[float]
    curves: list[Cumulative]
    seed: int


def cumulative_pruning(params: Params, config: ModelConfig, x, y, order: Sequence[Sequence[int]]) -> Cumulative:
    """Remove heads one after another in ``order`` and measure accuracy after each removal.

    A removal that would leave a layer without heads is skipped (listed in
    ``skipped``), so a full order of all heads ends with one head per layer;
    ``accuracy[0]`` is the full model's.
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
        return stats.proportion(correct(ablate(params, config, removed), x, y))

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
        accs.append(a)
        ses.append(s)
    return Cumulative(removed, skipped, accs, ses)


def ascending_order(scores: Sequence) -> list[tuple[int, int]]:
    """All heads ``(layer, head)`` by ascending score (ties: layer-major); ``scores`` per layer as from
    :func:`head_scores`."""
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


def random_pruning(params: Params, config: ModelConfig, x, y, *, n_orders: int = 10, seed: int = 0) -> RandomPruning:
    """Cumulative pruning in ``n_orders`` seeded random orders: mean, std, min and max accuracy per step."""
    curves = [cumulative_pruning(params, config, x, y, o) for o in random_orders(config.heads, n_orders, seed)]
    acc = np.array([c.accuracy for c in curves])  # all of length 1 + sum(H_l - 1)
    std = acc.std(axis=0, ddof=1).tolist() if len(curves) > 1 else [0.0] * acc.shape[1]
    return RandomPruning(acc.mean(axis=0).tolist(), std, acc.min(axis=0).tolist(), acc.max(axis=0).tolist(), curves,
                         int(seed))


@dataclass(frozen=True)
class PruningResult:
    """The head scores and what removing heads does to the model (the pruning figure).

    head_scores, drops, drop_se: per layer ``[H_l]`` (as in :class:`HeadDrops`);
    spearman: ρ of score and drop (one-sided, ``"greater"``); ascending,
    descending, random: cumulative pruning in score order and in random orders.
    """

    head_scores: list[list[float]]
    base_accuracy: float
    base_binomial_se: float | None  # None: read from a pruning.json written before it was
    drops: list[list[float | None]]
    drop_se: list[list[float | None]]
    spearman: Spearman
    ascending: Cumulative
    descending: Cumulative
    random: RandomPruning


def pruning_report(params: Params, config: ModelConfig, x, y, scores, *, n_random: int = 10,
                   seed: int = 0) -> PruningResult:
    """Single-head drops, their Spearman ρ with ``scores`` (per layer, :func:`head_scores`) and cumulative pruning."""
    scores = [np.ravel(np.asarray(s, dtype=np.float64)) for s in scores]
    if [s.size for s in scores] != list(config.heads):
        raise ValueError(f"scores must give one value per head of every layer {config.heads}")
    drops = single_head_drops(params, config, x, y)
    return PruningResult(
        [s.tolist() for s in scores], drops.base_accuracy, drops.base_binomial_se, drops.drops, drops.drop_se,
        spearman(scores, drops.drops, seed=seed),
        cumulative_pruning(params, config, x, y, ascending_order(scores)),
        cumulative_pruning(params, config, x, y, descending_order(scores)),
        random_pruning(params, config, x, y, n_orders=n_random, seed=seed))


# ----- theory-side ablation -----------------------------------------------------
def path_factors(heads: Sequence[int], heads_removed) -> np.ndarray:
    """The factor of each path's effective weight ``w_π`` when heads go as in :func:`ablate`: ``[D]``.

    0 for a path through a removed head, else ``Π_l sqrt(H_l/(H_l − k_l))`` (the
    survivors' rescaling; ``k_l`` heads removed from layer ``l``). Paths row-major,
    ``h1`` slowest (docs/theory.md §2). So the ablated model is the path sum of §2
    with ``w_π`` times these factors, and its ``U`` is ``m mᵀ ∘ U``.
    """
    heads = [int(H) for H in heads]
    sets = _removal_sets(heads_removed, heads)
    out = np.ones(1)
    for H, s in zip(heads, sets, strict=True):
        f = np.full(H, math.sqrt(H / (H - len(s))))
        f[list(s)] = 0.0
        out = np.outer(out, f).ravel()
    return out


@dataclass(frozen=True)
class TheoryAblation:
    """The theory's test accuracy with all heads, and without each head's paths (per layer; ``None``: a layer's
    only head)."""

    accuracy: float
    accuracy_without: list[list[float | None]]
    drops: list[list[float | None]]


def theory_head_drops(U, temperature: float, xi_train, y_train, xi_test, y_test, heads: Sequence[int], *,
                      s0sq: float = 1.0) -> TheoryAblation:
    """Remove each head's paths from the theory's ``U`` and re-evaluate its predictor on the test episodes.

    ``U`` ``[D, D]`` becomes ``m mᵀ ∘ U`` with ``m`` = :func:`path_factors` (the
    same removal and rescaling as :func:`ablate` applies to the trained model);
    the predictor mean of docs/theory.md §4 is recomputed with the training episodes'
    path inputs ``xi_train`` ``[P, D, N0]`` and evaluated at ``xi_test``.
    """
    from ._scan import predictor_mean  # the one predictor through xi

    U = np.asarray(U, dtype=np.float64)
    y_test = np.asarray(y_test, dtype=np.float64)

    def acc(Um):
        f = predictor_mean(Um, temperature, xi_train, y_train, xi_test, s0sq=s0sq)
        return float(np.mean(stats.sign(f) == y_test))

    base = acc(U)
    without: list[list[float | None]] = []
    drops: list[list[float | None]] = []
    for l, H in enumerate(heads):
        without.append([])
        drops.append([])
        for h in range(H):
            if H == 1:
                without[-1].append(None)
                drops[-1].append(None)
                continue
            m = path_factors(heads, [(l, h)])
            a = acc(np.outer(m, m) * U)
            without[-1].append(a)
            drops[-1].append(base - a)
    return TheoryAblation(base, without, drops)


# ----- uncertainty: class bootstrap and the spread of ρ ------------------------------
def class_bootstrap(classes, n_boot: int, seed: int = 0) -> list[np.ndarray]:
    """Cluster-bootstrap resamples of episodes: ``n_boot`` index arrays into ``classes`` ``[n]``.

    Each resample draws as many classes as there are, with replacement, and
    takes every episode of each drawn class (so episodes that share a class
    move together). ``classes``: one cluster label per episode (e.g. the
    query's class).
    """
    classes = np.asarray(classes).ravel()
    if classes.size == 0:
        raise ValueError("classes must label at least one episode")
    n_boot = _checks.positive_int("n_boot", n_boot)
    _, inv = np.unique(classes, return_inverse=True)
    members = [np.flatnonzero(inv == g) for g in range(inv.max() + 1)]
    rng = np.random.default_rng(seed)
    return [np.concatenate([members[g] for g in rng.integers(len(members), size=len(members))]) for _ in range(n_boot)]


def bootstrap_accuracy(correct, resamples: Sequence[np.ndarray]) -> tuple[float, float]:
    """``(accuracy, se)``: the mean of ``correct`` ``[n]`` and the sd of its mean over the ``resamples``."""
    c = np.asarray(correct, dtype=np.float64).ravel()
    means = np.array([c[i].mean() for i in resamples])
    return float(c.mean()), float(means.std(ddof=1)) if len(means) > 1 else float("nan")


def rank_correlation(a, b) -> float:
    """Spearman ρ of two flat arrays (average ranks for ties); NaN when either is constant."""
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(scipy.stats.spearmanr(a, b).statistic)


@dataclass(frozen=True)
class SpearmanSpread:
    """ρ(score, drop) over draws of the scores × resamples of the drops: the finite values (draw-major), their
    median and 5 %, 95 % quantiles (linear), and the counts (``n_constant``: pairs with a constant side, no ρ)."""

    draws: list[float]
    median: float
    q05: float
    q95: float
    n_draws: int
    n_resamples: int
    n_constant: int


def spearman_spread(score_draws, drop_resamples) -> SpearmanSpread:
    """ρ(score, drop) over every draw of the scores × every resample of the drops.

    Args:
        score_draws: ``[n_draws, n_heads]`` head scores, one row per draw of the
            theory's training episodes.
        drop_resamples: ``[n_resamples, n_heads]`` accuracy drops, one row per
            (class-bootstrap) resample of the test episodes.

    Heads with a non-finite entry (a layer's only head) are left out.
    """
    S = np.atleast_2d(np.asarray(score_draws, dtype=np.float64))
    Dr = np.atleast_2d(np.asarray(drop_resamples, dtype=np.float64))
    if S.shape[1] != Dr.shape[1]:
        raise ValueError("score_draws and drop_resamples must have the same number of heads, "
                         f"got {S.shape[1]} and {Dr.shape[1]}")
    keep = np.all(np.isfinite(S), axis=0) & np.all(np.isfinite(Dr), axis=0)
    if keep.sum() < 2:
        raise ValueError("spearman_spread needs at least 2 heads with finite scores and drops")
    rho = np.array([rank_correlation(s[keep], d[keep]) for s in S for d in Dr])
    finite = rho[np.isfinite(rho)]
    if finite.size == 0:
        raise ValueError("every pair of scores and drops has a constant side: no ρ")
    q05, med, q95 = (float(v) for v in np.quantile(finite, [0.05, 0.5, 0.95]))
    return SpearmanSpread(finite.tolist(), med, q05, q95, int(S.shape[0]), int(Dr.shape[0]),
                          int(rho.size - finite.size))
