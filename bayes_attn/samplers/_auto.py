"""``sampler="auto"``: the samplers of :data:`~bayes_attn.samplers._settings.AUTO_ORDER` in turn, each judged by
what it measured (docs/theory.md §9), until one's diagnostics pass.

A guided sampler (``laplace-is``, ``laplace-mh``) is judged first by its pilot (an eighth of its proposals,
:func:`~bayes_attn.samplers._laplace.adapt`), whose cost counts: it is left before its proposals
(:class:`~bayes_attn.samplers._laplace.RuledOut`) where the pilot's ``k̂`` exceeds
:data:`~bayes_attn.samplers._laplace.PILOT_RULES_OUT` (weights without a finite mean), or, for a run of fixed
length, where the pilot's importance-sampling ESS per proposal projects fewer effective draws from the proposals
asked for than the convergence rule requires (:func:`~bayes_attn.diagnostics.required_ess`, or the user's
``target_ess``; the projection is optimistic, so a sampler left by it would have failed the rule after all its
proposals). A sampler that runs is judged by its diagnostics (:meth:`~bayes_attn.diagnostics.Summary.failures`).
Each entry of the record (attribute ``auto``, JSON) says what was tried, its seconds, why it was left and its
measured seconds per effective draw of the order parameters (``seconds_per_ess``: the pilot's wall time over its
importance-sampling ESS, or the run's over the least bulk ESS of ``U``).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable

from .._internal import checks as _checks
from . import _memory as memory
from ._settings import AUTO, AUTO_ORDER, GUIDED, SamplerSettings

__all__ = ["guided_refusal", "sample_auto"]

log = logging.getLogger(__name__)


def sample_auto(sample: Callable, problem: tuple, cfg: SamplerSettings, options, progress_bar: bool,
                until: Callable | None, required_ess: float):
    """``sampler="auto"`` on ``problem`` ``(net, x, y, temperature, x_test)`` (arguments checked) with ``sample``,
    the one-sampler call (``bayes_attn.posterior._sample``), and the ESS the convergence rule requires of
    ``cfg.num_chains`` chains (:func:`bayes_attn.diagnostics.required_ess`); the last sampler's draws are
    returned whatever their diagnostics (the verdict then says so). ``laplace-mh`` is not tried after a
    ``laplace-is`` whose ``k̂`` exceeds 1 (its acceptance was below 0.02 wherever that was measured,
    docs/theory.md §9). An explicit
    ``guided_samples`` too big for the memory is refused (``ValueError``), never left for ``wishart``. The
    expansion's proposal is computed once, by the first sampler that needs it
    (:class:`~bayes_attn.samplers._laplace.GuideOnce`; its cost counts in that sampler's seconds), and shared by
    the others."""
    from ._laplace import PILOT_RULES_OUT, GuideOnce, PilotRule, RuledOut

    need = None if cfg.in_blocks else max(required_ess, cfg.target_ess or 0.0)
    rule = PilotRule(PILOT_RULES_OUT, need)
    tried: list[dict] = []
    guide_of = GuideOnce()
    for i, name in enumerate(AUTO_ORDER):
        last = i + 1 == len(AUTO_ORDER)
        if name == "laplace-mh" and not last and tried and tried[-1].get("pareto_k", 0.0) > 1.0:
            tried.append(_tried(name, 0.0, "not tried: laplace-is's k-hat {} > {} (weights without a finite mean: "
                                "an independence chain on this proposal sticks)".format(
                                    *_checks.versus(tried[-1]["pareto_k"], 1.0, 2))))
            continue
        t0 = time.perf_counter()
        try:
            post = sample(problem, cfg.replace(name=name), options, progress_bar,
                          guide_of, rule if name in GUIDED and not last else None, until, requested_sampler=AUTO)
        except memory.TooBigError as err:  # an explicit guided_samples that does not fit: a refusal, no fallback
            if name in GUIDED and cfg.guided_samples is not None:
                raise guided_refusal(cfg, err) from None
            if last:
                raise
            tried.append(_tried(name, time.perf_counter() - t0, str(err)))
            continue
        except RuledOut as err:  # what its pilot measured: the proposals would not be used
            tried.append(_tried(name, time.perf_counter() - t0, str(err), err.pilot["pilot_seconds_per_ess"])
                         | {"pareto_k": err.pareto_k})
            continue
        except ValueError as err:  # no proposal: S or its Hessian is not finite at the expansion's mode
            if last:
                raise
            tried.append(_tried(name, time.perf_counter() - t0, str(err)))
            continue
        summary = post.summary()
        failures = summary.failures()
        seconds = time.perf_counter() - t0
        ess = summary.table.loc[summary.table.index.str.startswith("U["), "ess_bulk"].min()
        tried.append(_tried(name, seconds, "; ".join(failures) if failures and not last else "",
                            seconds / ess if ess > 0 else math.inf)
                     | ({"pareto_k": summary.pareto_k} if math.isfinite(summary.pareto_k) else {}))
        if not failures or last:
            post.tree.attrs["auto"] = json.dumps(tried)
            return post
    raise AssertionError("unreachable: the last sampler of AUTO_ORDER always returns")


def guided_refusal(cfg: SamplerSettings, err: Exception) -> ValueError:
    """``auto``'s refusal of an explicit ``guided_samples`` too big for the memory (never left for ``wishart``)."""
    return ValueError(f"sampler 'auto': guided_samples={cfg.guided_samples} cannot be honoured: {err}")


def _tried(name: str, seconds: float, left_because: str, seconds_per_ess: float = math.nan) -> dict:
    """One entry of ``auto``'s record (attribute ``auto``), also logged at INFO."""
    log.info(f"auto: {name} ({seconds:.1f} s, {seconds_per_ess:.3g} s per effective draw) "
             + (f"left: {left_because}" if left_because else "kept"))
    return {"sampler": name, "seconds": seconds, "left_because": left_because, "seconds_per_ess": seconds_per_ess}
