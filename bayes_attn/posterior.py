"""Posterior sampling with NUTS and the invariant observables of docs/theory.md §5.

Individual weights are not identifiable (hidden-unit permutations and sign
flips), so the stored draws are invariant observables:

- ``U`` ``[chain, draw, path, path_]``: ``w_pi · w_pi' / N1`` per draw, and the
  deeper order parameters ``U_2 .. U_L`` ``[chain, draw, index_l, index_l_]`` and
  ``Ua`` ``[chain, draw]`` (docs/theory.md §7);
- ``f_train`` ``[chain, draw, example]`` and ``f_test`` ``[chain, draw, test_example]``:
  the network output on the training and test inputs.

Raw weights (``V0``, ``V1..VL``, ``a``) and effective weights ``w``
``[chain, draw, path, unit]`` are stored only on request, by samplers that
draw weights. The samplers themselves live in :mod:`bayes_attn.samplers`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from . import gp
from ._internal import checks as _checks
from ._internal import io as _io
from ._internal import threads
from ._internal.compile_cache import for_library
from ._internal.fingerprints import data_fingerprint, fingerprint
from ._internal.precision import check_temperature, x64
from .diagnostics import (
    EXTRA_FIELDS,
    GROSS_RHAT,
    Summary,
    convergence_failures,
    required_ess,
    sample_stats,
    summary_table,
)
from .kernels import kernel_diag_from_xi, kernel_from_C, path_kernel_from_xi
from .network import Network, order_parameter_labels
from .samplers import SAMPLERS, SamplerSettings, Storage, get, prepare
from .samplers import _blocks as blocks
from .samplers import _memory as memory
from .samplers import _nuts as nuts
from .samplers._auto import guided_refusal, sample_auto
from .samplers._base import check_weights, map_batches
from .samplers._nuts import resolve_chain_method
from .samplers._settings import AUTO, AUTO_ORDER, GUIDED

__all__ = ["GUIDED", "Posterior", "check_sampling", "invariant_observables", "load_posterior", "resolve_chain_method",
           "sample_posterior"]

log = logging.getLogger(__name__)


def invariant_observables(names) -> list[str]:
    """The invariant observables among ``names``: ``U``, ``U_l``, ``Ua``, ``f_train``, ``f_test``."""
    return [n for n in names if n in ("U", "Ua", "f_train", "f_test") or (n.startswith("U_") and n[2:].isdigit())]


# ----------------------------------------------------------------------------
# sampling
# ----------------------------------------------------------------------------
def sample_posterior(
    net: Network,
    x,
    y,
    *,
    temperature: float,
    x_test=None,
    sampler: str | SamplerSettings | None = None,
    keep_weights: bool = False,
    keep_effective_weights: bool = False,
    progress_bar: bool = True,
    until: Callable[[Posterior], list[str]] | None = None,
    y_test=None,
) -> Posterior:
    """Sample the posterior: NUTS (docs/theory.md §5, §7), or the samplers guided by the finite-width expansion (§9).

    Args:
        net: the network.
        x: training inputs ``[P, T, N0]``; y: labels ``[P]``.
        temperature: likelihood variance (> 0).
        x_test: optional test inputs ``[P_test, T, N0]`` for ``f_test``.
        y_test: optional test labels ``[P_test]`` (±1; needs ``x_test``): not used in sampling, their fingerprint
            with ``x_test`` is stored (attribute ``test_fingerprint``) so that :func:`~bayes_attn.compare` refuses
            other labels.
        sampler: a sampler name (``"full"``, ``"full-token"``, ``"collapsed"``,
            ``"wishart"``, ``"laplace-is"``, ``"laplace-mh"``, ``"auto"``; see
            :mod:`bayes_attn.samplers`) with the other settings at their defaults, or a whole
            :class:`~bayes_attn.samplers.SamplerSettings` (draws, chains, seed, dtype, ...); default:
            ``SamplerSettings()``. ``"auto"`` tries ``laplace-is``, then ``laplace-mh``,
            then ``wishart``, and keeps the first whose pilot and diagnostics pass (attribute ``auto``;
            :mod:`bayes_attn.samplers._auto`).
        keep_weights: also store the raw weights (large at large width).
        keep_effective_weights: also store ``w`` ``[D, N1]`` per draw.
        progress_bar: NumPyro's progress bar (and the guided samplers' log lines).
        until: with a sampler in blocks (a target or a budget in its settings,
            :mod:`bayes_attn.samplers._blocks`), further reasons to draw another block, given the draws so far
            (the comparison's precision: :func:`bayes_attn.experiment.evaluate`); needed by ``target_precision``.

    Returns:
        A :class:`Posterior` whose ``tree`` is an ArviZ ``DataTree``.
    """
    x, y, temperature, x_test, cfg, options = _arguments(net, x, y, temperature, x_test, sampler, keep_weights,
                                                          keep_effective_weights)
    if cfg.target_precision is not None and until is None:
        raise ValueError("sampler.target_precision is the comparison's precision and needs a theory to compare with "
                         "(bayes-attn run, sweep, prune; bayes_attn.experiment.evaluate); without one, ask for "
                         "target_ess")
    if y_test is not None:
        if x_test is None:
            raise ValueError("y_test needs x_test: they are the test set's labels and inputs")
        test = data_fingerprint(x_test, _checks.signs("y_test", y_test, x_test.shape[0]))
    if cfg.name == AUTO:
        post = sample_auto(_sample, (net, x, y, temperature, x_test), cfg, options, progress_bar, until,
                           required_ess(cfg.num_chains))
    else:
        post = _sample((net, x, y, temperature, x_test), cfg, options, progress_bar, until=until)
    if y_test is not None:
        post.tree.attrs["test_fingerprint"] = test
    return post


def _arguments(net: Network, x, y, temperature: float, x_test, sampler: str | SamplerSettings | None,
               keep_weights: bool, keep_effective_weights: bool) -> tuple:
    """:func:`sample_posterior`'s arguments checked: ``(x, y, temperature, x_test, cfg, options)``."""
    if not isinstance(net, Network):
        raise ValueError(f"net must be a bayes_attn.Network, got {type(net).__name__}")
    x = net.check_inputs(x, "x")
    y = _checks.labels("y", y, x.shape[0])
    temperature = _checks.positive("temperature", temperature)
    if x_test is not None:
        x_test = net.check_inputs(x_test, "x_test")
    if isinstance(sampler, SamplerSettings):
        cfg = sampler
    elif sampler is None or isinstance(sampler, str):
        cfg = SamplerSettings().replace(name=sampler)
    else:
        raise ValueError(f"sampler must be a sampler name or a SamplerSettings, got {type(sampler).__name__}")
    temperature = check_temperature(temperature, cfg.dtype)
    net.check_scale(x, temperature)
    return x, y, temperature, x_test, cfg, Storage(bool(keep_weights), bool(keep_effective_weights))


def check_sampling(net: Network, x, y, *, temperature: float, x_test=None,
                   sampler: str | SamplerSettings | None = None, keep_weights: bool = False,
                   keep_effective_weights: bool = False, memory_check: bool = True) -> SamplerSettings:
    """Refuse (one-line ``ValueError``) what :func:`sample_posterior` would refuse before drawing, computing
    nothing: its arguments, the temperature for the dtype, weights of a sampler that draws none, and (unless
    ``memory_check`` is false) a run too big for this machine's memory (:func:`~bayes_attn.samplers._memory.check_fits`,
    the rule sampling applies); with ``"auto"``, an explicit ``guided_samples`` that cannot fit, or no sampler
    that fits. Returns the settings."""
    x, y, temperature, x_test, cfg, options = _arguments(net, x, y, temperature, x_test, sampler, keep_weights,
                                                          keep_effective_weights)
    names = AUTO_ORDER if cfg.name == AUTO else (cfg.name,)
    with x64(cfg.dtype == "float64"):
        inputs = prepare(net, x, y, x_test, temperature, cfg.dtype) if memory_check else None
        for i, name in enumerate(names):
            try:
                smp = get(name)
                check_weights(smp, options)
                if inputs is not None:  # memory_check
                    memory.check_fits(smp, inputs, cfg.replace(name=name).most_stored(), options)
                return cfg
            except ValueError as err:  # as sample_auto: the next sampler, else the refusal
                if isinstance(err, memory.TooBigError) and cfg.name == AUTO and name in GUIDED \
                        and cfg.guided_samples is not None:
                    raise guided_refusal(cfg, err) from None
                if i + 1 == len(names):
                    raise
    return cfg


def _sample(problem: tuple, cfg: SamplerSettings, options: Storage, progress_bar: bool,
            guide_of: Callable | None = None, rule_out=None, until: Callable | None = None,
            **attrs) -> Posterior:
    """:func:`sample_posterior` with one registered sampler on ``problem`` ``(net, x, y, temperature, x_test)``
    (arguments checked); ``guide_of``: where the guided samplers and the expansion's start take their proposal
    (default: computed afresh; one for all blocks); ``rule_out``: the
    :class:`~bayes_attn.samplers._laplace.PilotRule` that stops a guided sampler before its proposals
    (:class:`~bayes_attn.samplers._laplace.RuledOut`); ``until``: see
    :func:`sample_posterior`."""
    net, x, y, temperature, x_test = problem
    smp = get(cfg.name)
    check_weights(smp, options)
    chain_method = resolve_chain_method(cfg.chain_method, cfg.num_chains)
    for_library()  # the command's persistent compilation cache, unless the caller configured JAX's

    with x64(cfg.dtype == "float64"), threads.limits():
        thread_record = threads.record(chain_method)
        inputs = prepare(net, x, y, x_test, temperature, cfg.dtype)
        if cfg.in_blocks and smp.draw is not None and guide_of is None:
            from .samplers._laplace import GuideOnce
            guide_of = GuideOnce()
        given = {} if guide_of is None else {"guide_of": guide_of}
        key_mcmc, key_cond = jax.random.split(jax.random.key(cfg.seed))
        rewarm = None
        judged_last: dict[str, float] = {}  # the diagnostics of the last draws judged
        if smp.draw is not None:  # a guided sampler (docs/theory.md §9): its own draws, no NUTS
            memory.check_fits(smp, inputs, cfg, options)
            t0 = time.perf_counter()
            block = blocks.guided(smp.draw, inputs, cfg, key_mcmc, progress_bar=progress_bar, rule_out=rule_out,
                                  **given)
        else:
            model, args = smp.build(inputs)
            memory.check_fits(smp, inputs, cfg.most_stored(), options, (model, args))
            t0 = time.perf_counter()
            start, attrs = nuts.start_of(smp, cfg, inputs, attrs, given)
            mcmc_of = lambda warm: nuts.mcmc(smp, cfg.replace(chain_method=chain_method, num_warmup=warm),  # noqa: E731
                                             model, inputs, options, progress_bar=progress_bar, start=start)
            block = blocks.nuts(mcmc_of(cfg.num_warmup), key_mcmc, args, EXTRA_FIELDS, sample_stats)
            if cfg.in_blocks and cfg.num_chains > 1:  # a failed warm-up is run again (blocks.run)
                rewarm = blocks.nuts_rewarm(mcmc_of, block, (key_mcmc, args, EXTRA_FIELDS, sample_stats), cfg,
                                            judged_last, lambda: restart(), GROSS_RHAT)

        done: list[dict] = []  # conditional draws of the blocks so far, keyed by draw number (base.draw_keys)
        seen = [0]  # draws per chain that have them

        def restart() -> None:  # a warm-up run again: the draws so far are dropped
            done.clear()
            seen[0] = 0

        def complete(drawn: blocks.Block) -> tuple[dict, dict, dict]:
            new = {k: v[:, seen[0]:] for k, v in drawn.draws.items()}
            done.append(jax.block_until_ready(smp.conditional(new, key_cond, inputs, options, start=seen[0])))
            seen[0] = next(iter(drawn.draws.values())).shape[1]
            cond = {k: np.concatenate([np.asarray(d[k]) for d in done], axis=1) for k in done[0]}
            return dict(drawn.draws) | cond, drawn.stats, attrs | drawn.attrs

        if cfg.in_blocks:
            judge = functools.partial(_judge, complete=complete, problem=problem, cfg=cfg, until=until,
                                      record=judged_last)
            (draws, stats, attrs), stopping = blocks.run(block, judge, cfg, t0, rewarm)
            attrs |= {"stopping": stopping.to_json()}
        else:
            draws, stats, attrs = complete(block(0))
        seconds = time.perf_counter() - t0
    ran = cfg.replace(chain_method=chain_method)
    tree = Posterior.from_draws(
        net, draws, stats, x, y, temperature,
        sampler=cfg.name, settings=ran.to_json(), seconds=seconds, num_warmup=cfg.num_warmup,
        seed=cfg.seed, dtype=cfg.dtype, versions=json.dumps(_io.versions()), threads=json.dumps(thread_record),
        **({} if x_test is None else {"x_test_fingerprint": fingerprint(x_test)}), **attrs,
    ).tree
    return Posterior(tree, net)


def _judge(drawn, *, complete: Callable, problem: tuple, cfg: SamplerSettings, until: Callable | None,
           record: dict) -> tuple:
    """The reasons to draw another block after ``drawn`` (the rule's R-hat and ESS,
    :func:`~bayes_attn.diagnostics.convergence_failures`; the user's targets,
    :func:`bayes_attn.samplers._blocks.reasons`; then ``until``'s) and the draws completed with their exact
    conditional draws (the last block's are the result); the diagnostics judged go into ``record``."""
    net, x, y, temperature, _ = problem
    draws, stats, attrs = complete(drawn)
    post = Posterior(Posterior.from_draws(net, draws, stats, x, y, temperature, sampler=cfg.name, **attrs).tree, net)
    diagnostics = post.summary().diagnostics()
    record.clear()
    record.update(diagnostics)
    unmet = convergence_failures(diagnostics) + blocks.reasons(diagnostics, cfg)
    return unmet + (list(until(post)) if until is not None else []), (draws, stats, attrs)


# ----------------------------------------------------------------------------
# results
# ----------------------------------------------------------------------------

@jax.jit
def _moments_of_draws(U: jax.Array, C: jax.Array, Cx: jax.Array, Cxx: jax.Array, y: jax.Array,
                      temperature: jax.Array) -> tuple[jax.Array, jax.Array]:
    """:func:`bayes_attn.gp.moments` for each draw of ``U`` ``[B, D, D]`` from the path kernels ``C`` ``[D, D, P, P]``,
    ``Cx`` ``[D, D, Px, P]``, ``Cxx`` ``[D, D, Px]``: mean and variance ``[B, Px]`` each (one program per shape)."""
    return jax.vmap(lambda u: gp.moments(kernel_from_C(u, C), kernel_from_C(u, Cx), kernel_from_C(u, Cxx), y,
                                         temperature))(U)


@dataclass(frozen=True, eq=False)
class Posterior:
    """Posterior draws of the invariant observables, as an ArviZ ``DataTree``.

    ``tree`` groups: ``posterior`` (``U``, ``U_l``, ``Ua``, ``f_train``, ``f_test``,
    optional ``w`` and raw weights), ``sample_stats``, ``observed_data`` (``y``) and
    ``constant_data`` (training inputs and attention matrices).

    The draws are read-only once sampled: :meth:`summary` is computed once per Posterior.
    """

    tree: xr.DataTree
    net: Network

    @property
    def temperature(self) -> float:
        return float(self.tree.attrs["temperature"])

    @property
    def x_train(self) -> np.ndarray:
        """Training inputs ``[P, T, N0]``."""
        return np.asarray(self.tree["constant_data"]["x_train"].values)

    @property
    def y_train(self) -> np.ndarray:
        """Training labels ``[P]``."""
        return np.asarray(self.tree["observed_data"]["y"].values)

    @property
    def num_draws(self) -> int:
        p = self.tree["posterior"]
        return p.sizes["chain"] * p.sizes["draw"]

    @property
    def sampler(self) -> str:
        """Name of the sampler that made the draws."""
        return str(self.tree.attrs["sampler"])

    @property
    def settings(self) -> SamplerSettings:
        """The settings the draws were made with (``chain_method`` as it ran, e.g. ``"sequential"`` for ``"auto"``)."""
        return SamplerSettings.from_json(self.tree.attrs["settings"])

    def method(self) -> str:
        """How the draws were made, in a line: the sampler and its method (NUTS, importance sampling,
        independence Metropolis–Hastings), where NUTS started, and what ``auto`` tried first."""
        a = self.tree.attrs
        kind = {"laplace-is": "importance sampling from the finite-width expansion, resampled",
                "laplace-mh": "independence Metropolis-Hastings with the finite-width expansion's proposal"}
        text = f"`{self.sampler}` ({kind.get(self.sampler, 'NUTS')}"
        if "pareto_k" in a:
            text += f"; Pareto k-hat {float(a['pareto_k']):.2f}, IS ESS {float(a['is_ess']):.0f}"
        if "acceptance" in a:
            text += f"; acceptance {float(a['acceptance']):.2f}"
        if str(a.get("start", "")).startswith("expansion"):
            text += "; started at the expansion's mode with its metric"
        text += f"; in blocks: {blocks.Stopping.from_json(a['stopping'])})" if "stopping" in a else ")"
        if "auto" in a:
            left = [f"`{t['sampler']}` ({t['left_because']})" for t in json.loads(a["auto"]) if t["left_because"]]
            text += ", chosen by `auto`" + (f" after {'; '.join(left)}" if left else "")
        return text

    @property
    def observables(self) -> list[str]:
        """The invariant observables stored (``U``, ``U_l``, ``Ua``, ``f_train``, ``f_test``)."""
        return invariant_observables(self.tree["posterior"].data_vars)

    def order_parameter(self, level: int = 1) -> np.ndarray:
        """Empirical ``U_level`` (default ``U = U_1``): the posterior mean, ``[D_l, D_l]``."""
        name = "U" if level == 1 else f"U_{level}"
        return np.asarray(self.tree["posterior"][name].mean(("chain", "draw")).values)

    def predict(self, x, batch_size: int = 512) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of ``f(x)`` (``[P_x]`` each).

        Rao-Blackwellised over ``V0``: for each draw of ``U`` the conditional of
        ``f(x)`` is Gaussian (:func:`bayes_attn.gp.moments`); the result averages
        these over draws (law of total variance). Computed in float64.
        """
        x = self.net.check_inputs(x, "x")
        batch_size = _checks.positive_int("batch_size", batch_size)
        s0sq = self.net.variances[0]
        with x64(True):
            temperature = jnp.asarray(self.temperature, jnp.float64)
            xi = self.net.xi(self.x_train)
            C = path_kernel_from_xi(xi, xi, s0sq)
            U = jnp.asarray(self.tree["posterior"]["U"].values, jnp.float64).reshape(-1, self.net.D, self.net.D)
            y = jnp.asarray(self.y_train, jnp.float64)
            means, variances = [], []
            for xs, valid in self.net.xi_batches(x, batch_size):
                Cx = path_kernel_from_xi(xs, xi, s0sq)  # [D, D, Px, P]
                Cxx = kernel_diag_from_xi(xs, s0sq)  # [D, D, Px]
                m, v = map_batches(lambda u, Cx=Cx, Cxx=Cxx: _moments_of_draws(u, C, Cx, Cxx, y, temperature), (U,), 64)
                means.append(np.asarray(m.mean(0))[:valid])
                variances.append(np.asarray(v.mean(0) + m.var(0))[:valid])
        return np.concatenate(means), np.concatenate(variances)

    def summary(self) -> Summary:
        """ArviZ diagnostics on the invariant observables, plus sampler statistics (those the sampler has).

        Computed at the first call and returned again after (ArviZ's diagnostics of every output over every draw:
        ``auto``, ``bayes-attn sample`` and :func:`~bayes_attn.comparison.compare` all read it)."""
        return self._summary

    @functools.cached_property
    def _summary(self) -> Summary:
        import arviz_stats as azs

        table = summary_table(self.tree["posterior"].to_dataset()[self.observables])
        stats = self.tree["sample_stats"]
        nuts = "energy" in stats
        attrs = self.tree.attrs
        return Summary(
            table=table,
            divergences=int(stats["diverging"].sum()) if "diverging" in stats else 0,
            bfmi=np.asarray(azs.bfmi(self.tree)["energy"].values) if nuts else np.zeros(0),
            acceptance_rate=float(stats["acceptance_rate"].mean()) if "acceptance_rate" in stats else float("nan"),
            mean_steps=float(stats["n_steps"].mean()) if "n_steps" in stats else float("nan"),
            seconds=float(attrs.get("seconds", np.nan)),
            pareto_k=float(attrs.get("pareto_k", np.nan)),
            is_ess=float(attrs.get("is_ess", np.nan)),
            sampler=str(attrs.get("sampler", "")),
            stopping=blocks.Stopping.from_json(attrs["stopping"]) if "stopping" in attrs else None,
            chains=int(self.tree["posterior"].sizes["chain"]), draws=int(self.tree["posterior"].sizes["draw"]),
        )

    @classmethod
    def from_draws(cls, net: Network, draws: dict, stats: dict, x, y, temperature: float, **attrs) -> Posterior:
        """Wrap draws ``{name: [chain, draw, ...]}`` and sample statistics into a Posterior.

        ``draws`` holds invariant observables (and optionally ``w`` or raw
        weights); ``stats`` the NUTS statistics of :func:`sample_stats`; ``attrs``
        go to the tree's attributes (``sampler``, ``settings``, ``seconds``, ...).
        """
        import arviz_base as azb  # imported here: the sampler core runs without ArviZ (e.g. on a GPU box)

        labels = net.path_labels
        draws = {k: np.asarray(v, dtype=np.float64) for k, v in draws.items()}
        dims = {"U": ["path", "path_"], "f_train": ["example"], "f_test": ["test_example"], "w": ["path", "unit"],
                "y": ["example"], "x_train": ["example", "token", "feature"]}
        coords = {"path": labels, "path_": labels}
        for l in range(2, net.L + 1):
            dims[f"U_{l}"] = [f"index_{l}", f"index_{l}_"]
            coords[f"index_{l}"] = coords[f"index_{l}_"] = order_parameter_labels(net.heads, l)
        constant = {"x_train": np.asarray(x)}
        for l, W in enumerate(net.attention, start=1):
            constant[f"attention_{l}"] = W
            dims[f"attention_{l}"] = [f"head_{l}", "feature", "feature_"]
        groups = {"posterior": draws, "sample_stats": stats, "observed_data": {"y": np.asarray(y)},
                  "constant_data": constant}
        tree = azb.from_dict(
            {k: v for k, v in groups.items() if v},
            dims=dims,
            coords=coords,
        )
        tree.attrs.update(
            {
                **net.stored_attrs(),
                "temperature": float(temperature),
                **attrs,
            }
        )
        return cls(tree, net)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the tree to netCDF atomically (temporary file, then rename)."""
        return _io.save(self.tree, path)


def load_posterior(path: str | os.PathLike) -> Posterior:
    """Read a :class:`Posterior` written by :meth:`Posterior.save`."""
    tree = _io.load_tree(path, samplers=SAMPLERS)  # an unknown sampler name is refused
    missing = [g for g in ("posterior", "constant_data") if g not in tree.children]
    if missing:
        kind = f" (it is a {tree.attrs['limit']!r} theory: read it with load_theory)" if "limit" in tree.attrs else ""
        raise ValueError(f"path must be a posterior written by Posterior.save (posterior.nc), got {str(path)!r}, "
                         f"which has no {' and no '.join(missing)} group{kind}")
    return Posterior(tree, Network.from_stored(tree.attrs, tree["constant_data"]))
