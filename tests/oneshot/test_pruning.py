"""Head ablation, head scores and Spearman's rank correlation of the one-shot model (bayes_attn.oneshot._pruning)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import jax
import numpy as np
import pytest
from conftest import (
    SMALL_MODEL as SMALL,
)
from conftest import (
    numpy_forward,
    random_data,
    random_network,
    rng_of,
    seed_of,
    small_model,
    small_x,
)

from bayes_attn.oneshot import _model as model
from bayes_attn.oneshot import _pruning as pruning
from bayes_attn.theory import Theory, head_scores, solve_theory


# ----- ablation -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_ablate_nothing_is_identical_and_emptying_a_layer_errors():
    params = small_model()
    same = pruning.ablate(params, SMALL, {})
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(same), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    x = small_x()
    np.testing.assert_array_equal(np.asarray(model.forward(same, x)), np.asarray(model.forward(params, x)))
    with pytest.raises(ValueError, match="all 2 heads of layer 0"):
        pruning.ablate(params, SMALL, [(0, 0), (0, 1)])
    with pytest.raises(ValueError, match="head of layer 1"):
        pruning.ablate(params, SMALL, [(1, 3)])
    with pytest.raises(ValueError, match="twice"):
        pruning.ablate(params, SMALL, [(1, 0), (1, 0)])


@pytest.mark.parametrize("layer,head", [(0, 1), (1, 0), (1, 2)])
def test_ablating_one_head_equals_the_hand_computed_rescaled_forward(layer, head):
    params, x = small_model(seed=2), small_x()
    f = np.asarray(model.forward(pruning.ablate(params, SMALL, {layer: [head]}), x))
    np.testing.assert_allclose(f, numpy_forward(params, x, removed={layer: head}), rtol=1e-10, atol=1e-10)
    assert not np.allclose(f, numpy_forward(params, x))


# ----- head removal in the model = removal of the head's paths from the path sum ------------------
@pytest.mark.parametrize("removed", [[(0, 1)], [(1, 0)], [(1, 2)], [(0, 0), (1, 1)], [(1, 0), (1, 2)]])
def test_ablating_heads_equals_removing_their_paths_from_the_network_path_sum(removed):
    import jax.numpy as jnp

    from bayes_attn._internal.precision import float64
    from bayes_attn.network import forward_from_xi

    with float64():  # both sides in float64, so 1e-6 tests the algebra, not float32 round-off
        params = model.init_params(SMALL, jax.random.PRNGKey(seed_of(6)), dtype=jnp.float64)
        x = small_x(P=9)
        f_gd = model.predict(pruning.ablate(params, SMALL, removed), x)
        net, weights = model.to_network(params, SMALL)
        w = np.asarray(net.effective_weights(weights), dtype=np.float64)  # [D, N1]
        m = pruning.path_factors(SMALL.heads, removed)
        f_paths = np.asarray(forward_from_xi(jnp.asarray(np.asarray(net.xi(x)), jnp.float64),
                                             jnp.asarray(np.asarray(weights.V0), jnp.float64),
                                             jnp.asarray(m[:, None] * w)))
    np.testing.assert_allclose(f_gd, f_paths, rtol=1e-6, atol=1e-6 * np.abs(f_paths).max())
    # the paths through a removed head are exactly the zero factors (h1 slowest)
    gone = [any(p[l] == h for l, h in removed) for p in itertools.product(*[range(H) for H in SMALL.heads])]
    np.testing.assert_array_equal(m == 0, gone)


# ----- accuracy drops of the model and of the theory ----------------------------------------------
@pytest.mark.slow
def test_single_head_drops_and_cumulative_pruning():
    params, x = small_model(seed=4), small_x(P=40)
    y = np.where(np.asarray(model.forward(params, x)) >= 0, 1.0, -1.0)  # the full model is always right
    d = pruning.single_head_drops(params, SMALL, x, y)
    assert d.base_accuracy == 1.0 and [len(v) for v in d.drops] == [2, 3]
    c = model.correct(pruning.ablate(params, SMALL, [(1, 2)]), x, y)
    assert d.drops[1][2] == pytest.approx(1 - c.mean())
    assert d.drop_se[1][2] == pytest.approx(np.std(1.0 - c, ddof=1) / math.sqrt(40))
    order = pruning.all_heads(SMALL.heads)
    cum = pruning.cumulative_pruning(params, SMALL, x, y, order)
    assert cum.removed == [[0, 0], [1, 0], [1, 1]] and cum.skipped == [[0, 1], [1, 2]]
    assert len(cum.accuracy) == 4 and cum.accuracy[0] == 1.0
    assert cum.accuracy[1] == pytest.approx(d.accuracy[0][0])
    scores = [np.array([0.2, 1.0]), np.array([0.5, 0.1, 0.3])]
    assert pruning.ascending_order(scores) == [(1, 1), (0, 0), (1, 2), (1, 0), (0, 1)]
    assert pruning.descending_order(scores) == [(0, 1), (1, 0), (1, 2), (0, 0), (1, 1)]
    rep = pruning.pruning_report(params, SMALL, x, y, scores, n_random=3)
    assert rep.drops == d.drops and rep.base_accuracy == d.base_accuracy == 1.0 and rep.base_binomial_se == 0.0
    assert rep.ascending == pruning.cumulative_pruning(params, SMALL, x, y, pruning.ascending_order(scores))
    json.dumps(dataclasses.asdict(rep), allow_nan=False)  # plain numbers and lists, no NaN
    rnd = rep.random
    assert len(rnd.accuracy_mean) == 4 and rnd.accuracy_mean[0] == 1.0 and len(rnd.curves) == 3


@pytest.mark.slow
def test_theory_ablation_is_the_predictor_with_the_heads_paths_out_of_U():
    from bayes_attn.oneshot._scan import path_inputs, predictor_mean

    net = random_network((2, 3), width=5, N0=6, scale=2.0)
    x, y = random_data(30)
    xt, yt = random_data(40, seed=9)
    t = solve_theory(net, x, y, temperature=0.3)
    xi, xit = path_inputs(net, x), path_inputs(net, xt)
    ab = pruning.theory_head_drops(t.U, 0.3, xi, y, xit, yt, net.heads)
    f = predictor_mean(t.U, 0.3, xi, y, xit)
    assert ab.accuracy == pytest.approx(np.mean(np.where(f >= 0, 1, -1) == yt))
    # by hand: zero the rows and columns of the paths through head (1, 2), rescale the rest by 3/2
    keep = np.array([p[1] != 2 for p in itertools.product(range(2), range(3))], float)
    f2 = predictor_mean(1.5 * np.outer(keep, keep) * t.U, 0.3, xi, y, xit)
    assert ab.drops[1][2] == pytest.approx(ab.accuracy - np.mean(np.where(f2 >= 0, 1, -1) == yt))
    assert [len(d) for d in ab.drops] == [2, 3]


# ----- head scores --------------------------------------------------------------------------------
def loop_head_scores(U, heads):
    paths = list(itertools.product(*[range(H) for H in heads]))
    raw = [np.zeros(H) for H in heads]
    for l, H in enumerate(heads):
        for h in range(H):
            for i, p in enumerate(paths):
                for j, q in enumerate(paths):
                    if p[l] == h or q[l] == h:
                        raw[l][h] += abs(U[i, j])
    top = max(r.max() for r in raw)
    return [r / top for r in raw]


def test_head_scores_by_hand_and_against_a_loop():
    # one layer, two heads: head 0 sees (0,0), (0,1), (1,0) -> 1+2+2; head 1 sees (1,1), (0,1), (1,0) -> 4+2+2
    (s,) = pruning.head_scores(np.array([[1.0, -2.0], [-2.0, 4.0]]), (2,))
    np.testing.assert_allclose(s, [5 / 8, 1.0])
    # 2x2 heads, U = diag(1, 2, 3, 4) on paths (1,1), (1,2), (2,1), (2,2)
    s1, s2 = pruning.head_scores(np.diag([1.0, 2, 3, 4]), (2, 2))
    np.testing.assert_allclose(s1, [3 / 7, 1.0])
    np.testing.assert_allclose(s2, [4 / 7, 6 / 7])
    rng = rng_of(0)
    for heads in [(2, 3), (3, 2, 2)]:
        D = math.prod(heads)
        A = rng.normal(size=(D, D))
        U = A @ A.T + 0.3 * rng.normal(size=(D, D))
        for got, want in zip(pruning.head_scores(U, heads), loop_head_scores(U, heads), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(ValueError, match="U must have shape"):
        pruning.head_scores(np.eye(5), (2, 3))


@pytest.mark.slow
def test_one_head_score_implementation():
    assert pruning.head_scores is head_scores
    net = random_network((2, 3), width=4)
    x, y = random_data(12)
    t = solve_theory(net, x, y, temperature=0.5)
    for a, b in zip(Theory.head_scores(t), head_scores(t.U, net.heads), strict=True):
        np.testing.assert_array_equal(a, b)


# ----- Spearman's rank correlation and its spread -------------------------------------------------
def test_spearman_p_values():
    # exact enumeration (n = 4 <= 8): one-sided p = 1/4!, two-sided 2/4!
    r = pruning.spearman([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4])
    assert r.rho == pytest.approx(1.0) and r.method == "exact"
    assert r.p_value == pytest.approx(1 / 24)
    two_sided = pruning.spearman([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4], alternative="two-sided")
    assert two_sided.p_value == pytest.approx(2 / 24)
    assert pruning.spearman([1, 2, 3, 4], [0.4, 0.3, 0.2, 0.1]).p_value == pytest.approx(1.0)
    # per-layer lists are flattened; n = 9 > 8 uses seeded random permutations
    r = pruning.spearman([[1, 2, 3], [4, 5, 6, 7, 8, 9]], [[1, 2, 3], [4, 5, 6, 7, 8, 9]], n_permutations=2000)
    assert r.method == "permutation" and r.p_value == pytest.approx(1 / 2001)
    assert pruning.spearman([1, 2, 3], [1, 1, 1]).rho is None


def test_spearman_exact_p_value_of_eight_heads_equals_enumeration():
    # the paper's case: 8 heads, all 8! = 40320 re-pairings (fast and small: not (8!)² orderings)
    rng = rng_of(3)
    a, b = rng.normal(size=8), rng.normal(size=8)
    r = pruning.spearman(a, b, alternative="two-sided")
    ra, rb = np.argsort(np.argsort(a)) - 3.5, np.argsort(np.argsort(b)) - 3.5
    perms = np.array(list(itertools.permutations(range(8))))
    rhos = (ra[perms] @ rb) / (ra @ ra)
    want = np.mean(np.abs(rhos) >= abs(r.rho) - 1e-12)
    assert r.method == "exact" and r.n_permutations == 40320
    assert r.p_value == pytest.approx(want, rel=1e-9)


def test_spearman_spread_on_a_case_with_a_known_answer():
    drops = np.array([0.1, 0.2, 0.3, 0.4])
    # scores: the identity order (ρ = 1), its reverse (ρ = −1), one swap of the top two (ρ = 0.8)
    scores = [[1, 2, 3, 4], [4, 3, 2, 1], [1, 2, 4, 3]]
    # drop resamples that keep the order (every ρ as above) and one constant row (no ρ)
    resamples = [drops, 2 * drops, drops + 1, np.full(4, 0.2)]
    r = pruning.spearman_spread(scores, resamples)
    want = [1.0] * 3 + [-1.0] * 3 + [0.8] * 3
    np.testing.assert_allclose(r.draws, want)
    assert r.n_constant == 3 and r.n_draws == 3 and r.n_resamples == 4
    assert r.median == pytest.approx(0.8)
    assert r.q05 == pytest.approx(np.quantile(want, 0.05)) == pytest.approx(-1.0)
    assert r.q95 == pytest.approx(1.0)
    # a layer's only head (NaN) is left out of every ρ
    r = pruning.spearman_spread([[1, 2, np.nan]], [[0.1, 0.2, np.nan]])
    assert r.draws == [pytest.approx(1.0)]
    with pytest.raises(ValueError, match="same number of heads"):
        pruning.spearman_spread([[1, 2, 3]], [[1, 2]])
