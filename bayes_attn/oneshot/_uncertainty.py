"""Step 6 of ``prune``: the uncertainty of its numbers (docs/theory.md §6).

:func:`spread`: class-bootstrap errors of the test accuracies, the same removal in the theory (a head's paths out of
``U``), and the spread of the score–drop ρ over draws of the ``P`` theory-training episodes (the theory solved
again on each draw) × class bootstraps of the test episodes → :class:`~bayes_attn.oneshot._prune_result.Spread`.
"""

from __future__ import annotations

import logging

import numpy as np

from .. import stats
from ..experiment import PointResult
from ..theory import Theory, head_scores, solve_theory
from . import _data as data
from . import _pruning as pruning
from ._data import Evaluation, ImageSets
from ._prune_result import Accuracy, ScoreSpreads, Spread, TrainedModel
from ._scan import Scan, corrected, path_inputs, predictor_mean
from ._spec import OneShotSpec

log = logging.getLogger(__name__)

__all__ = ["spread"]


def _bootstrap_accuracies(spec: OneShotSpec, net, scan: Scan, ev: Evaluation, xi_tr, xi_te, boots, c0) -> dict:
    """The model's, the theory's (at the score width, validation-chosen ``T``) and the GP's test accuracy ± bootstrap
    se; ``xi_tr``, ``xi_te``: the path inputs of the theory's and of the test episodes."""
    tr, te, score_width = ev.theory_train, ev.test, spec.theory.score_width

    def acc(U, temperature):
        f = predictor_mean(U, temperature, xi_tr, tr.y, xi_te, s0sq=net.variances[0])
        return Accuracy(*pruning.bootstrap_accuracy(stats.sign(f) == te.y, boots))

    temp_th, temp_gp = scan.best_temperature(score_width), float(scan.dataset["gp_best_temperature"])
    return dict(base=Accuracy(*pruning.bootstrap_accuracy(c0, boots)), theory=acc(scan.theory(score_width).U, temp_th),
                theory_temperature=temp_th, theory_width=score_width, gp=acc(net.gp_U, temp_gp), gp_temperature=temp_gp)


def _flat_scores(U, heads) -> np.ndarray:
    return np.concatenate([np.ravel(s) for s in head_scores(U, heads)])


def _draw_rows(spec: OneShotSpec, sets: ImageSets, heads, score_theory: Theory, ev: Evaluation, xis: tuple,
               progress_bar: bool, made: Theory | None = None) -> tuple[dict[str, list], pruning.TheoryAblation,
                                                                         list[str]]:
    """Per draw of the ``P`` episodes (draw 0: ``score_theory``'s; ``xis``: the path inputs of its episodes and of
    the test episodes): the head scores of the leading and of the corrected theory, and the theory-side ablation's
    drops on the test episodes ``[n_heads]`` each; draw 0's ablation; and the problems of the corrections.
    ``made``: ``score_theory`` corrected already (by the point sampled there), not computed again."""
    th, net = spec.theory, score_theory.net
    xi_tr, xi_te = xis
    net_score = net.with_width(th.score_width)
    rows: dict[str, list] = {"leading": [], "corrected": [], "ablation": []}
    problems, first = [], None
    for k, d in enumerate(data.theory_draws(spec, sets, ev.theory_train)):
        t = score_theory if k == 0 else solve_theory(net_score, d.x, d.y, temperature=th.score_temperature)
        c, why = (made, "; ".join(made.correction_problems)) if k == 0 and made is not None else corrected(t)
        rows["leading"].append(_flat_scores(t.U, heads))
        rows["corrected"].append(_flat_scores(c.U, heads) if c is not None else np.full(sum(heads), np.nan))
        problems += [f"draw {k}: {why}"] if why else []
        ab = pruning.theory_head_drops(t.U, th.score_temperature, xi_tr if k == 0 else path_inputs(net, d.x), d.y,
                                       xi_te, ev.test.y, heads, s0sq=net.variances[0])
        first = ab if k == 0 else first
        rows["ablation"].append(np.array([np.nan if v is None else v for layer in ab.drops for v in layer]))
        if progress_bar:
            log.info(f"theory draw {k}: head scores {np.round(rows['leading'][-1], 3).tolist()}")
    assert first is not None  # draw 0 is always made
    return rows, first, problems


def _spread_of(rows: list, drop_rows: list) -> pruning.SpearmanSpread | None:
    """:func:`~bayes_attn.oneshot._pruning.spearman_spread` over the finite rows, or ``None`` where none is."""
    finite = [r for r in rows if np.isfinite(r).any()]
    try:
        return pruning.spearman_spread(finite, drop_rows) if finite else None
    except ValueError:  # fewer than 2 heads with finite values, or every pair constant
        return None


def spread(spec: OneShotSpec, data: tuple[ImageSets, Evaluation], model: TrainedModel, scan: Scan,
           score_theory: Theory, pruned: pruning.PruningResult, sampled: PointResult | None = None,
           progress_bar: bool = False) -> Spread:
    """Class-bootstrap standard errors, theory/GP test accuracy, the theory-side ablation and the spread of ρ of
    each score (the leading and the corrected theory's ``U``, the exact posterior's mean ``U`` at the score width
    when it was sampled: the point ``sampled``, whose corrected theory is reused at the score temperature) and of
    the theory-side ablation with the model's drops, over draws of the ``P`` episodes × class bootstraps of the
    test episodes. ``data``: the images and the evaluation episodes."""
    sets, ev = data
    post = None if sampled is None else sampled.posterior
    made = (sampled.theory if sampled is not None and sampled.theory.correction is not None
            and sampled.theory.temperature == score_theory.temperature else None)
    net, pr = score_theory.net, spec.pruning
    tr, te = ev.theory_train, ev.test
    heads = model.config.heads
    query_class = te.episodes.classes[:, 2]
    boots = pruning.class_bootstrap(query_class, pr.n_bootstrap, seed=pr.seed)
    c0, rows = pruning.head_correctness(model.params, model.config, te.x, te.y)
    xi_tr, xi_te = path_inputs(net, tr.x), path_inputs(net, te.x)
    accuracies = _bootstrap_accuracies(spec, net, scan, ev, xi_tr, xi_te, boots, c0)
    se_method = (f"bootstrap over the query's class ({len(np.unique(query_class))} test classes, "
                 f"{pr.n_bootstrap} resamples)")
    draws, ablation, problems = _draw_rows(spec, sets, heads, score_theory, ev, (xi_tr, xi_te), progress_bar, made)
    rho_score = pruning.spearman(pruned.head_scores, ablation.drops, seed=pr.seed)
    rho_drops = pruning.spearman(ablation.drops, pruned.drops, seed=pr.seed)
    removable = np.array([heads[l] > 1 for l, _ in pruning.all_heads(heads)])
    drop_rows = []  # the drops on class bootstraps of the test episodes
    for i in pruning.class_bootstrap(query_class, pr.spread_bootstrap, seed=pr.seed + 1):
        d = c0[i].mean() - rows[:, i].mean(axis=1)
        drop_rows.append(np.where(removable, d, np.nan))
    others = {name: _spread_of(draws[name], drop_rows) for name in ("corrected", "ablation")}
    others["posterior"] = (None if post is None
                           else _spread_of([_flat_scores(post.order_parameter(1), heads)], drop_rows))
    return Spread(se_method=se_method, ablation=ablation, ablation_rho_score=rho_score, ablation_rho_drops=rho_drops,
                  rho=pruning.spearman_spread(draws["leading"], drop_rows),
                  score_draws=[s.tolist() for s in draws["leading"]],
                  others=ScoreSpreads(**others, posterior_temperature=None if post is None else post.temperature,
                                      correction_problems=problems), **accuracies)
