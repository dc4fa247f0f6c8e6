"""Posterior sampling with NUTS and the invariant observables of THEORY.md §5.

Individual weights are not identifiable (hidden-unit permutations and sign
flips), so the stored draws are invariant observables:

- ``U`` ``[chain, draw, path, path_]``: ``w_pi · w_pi' / N1`` per draw;
- ``f_train`` ``[chain, draw, example]`` and ``f_test`` ``[chain, draw, test_example]``:
  the network output on the training and test inputs.

Raw weights (``V0``, ``V1..VL``, ``a``) and effective weights ``w``
``[chain, draw, path, unit]`` are stored only on request.

Samplers (``method``):

- ``"full"``: NUTS over all weights; ``form="path"`` (default) evaluates ``f``
  from path inputs ``xi`` computed once, ``form="token"`` runs §1 over tokens.
- ``"collapsed"``: NUTS over the upper weights ``(V[l][h], a)`` under the
  marginal likelihood with ``V0`` integrated out, then per draw an exact draw
  of ``V0`` from its Gaussian conditional (by pathwise conditioning:
  ``V0 = V0' + s0² Phi^T G^{-1} (Y − Phi V0' − eps)`` with ``V0'`` from the
  prior and ``eps ~ Normal(0, temperature)``), which gives ``f`` exactly.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import xarray as xr
from numpyro.infer import MCMC, NUTS, init_to_sample

from . import _checks, _io
from .models import collapsed_model, order_parameter, path_model, token_model
from .network import (
    Network,
    effective_weights,
    forward_from_xi,
    gram_cholesky,
    kernel_diag_from_xi,
    path_kernel_from_xi,
)

METHODS = ("full", "collapsed")
FORMS = ("path", "token")
OBSERVABLES = ("U", "f_train", "f_test")


# ----------------------------------------------------------------------------
# sampling
# ----------------------------------------------------------------------------
def sample_posterior(
    net: Network,
    x,
    y,
    *,
    temperature: float,
    num_warmup: int = 500,
    num_samples: int = 500,
    num_chains: int = 2,
    seed: int = 0,
    x_test=None,
    method: str = "full",
    form: str = "path",
    dtype: str = "float64",
    chain_method: str = "auto",
    thinning: int = 1,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
    keep_weights: bool = False,
    keep_effective_weights: bool = False,
    progress_bar: bool = True,
) -> Posterior:
    """Sample the posterior of ``net``'s weights with NUTS.

    Args:
        net: the network.
        x: training inputs ``[P, T, N0]``; y: labels ``[P]``.
        temperature: likelihood variance (> 0).
        x_test: optional test inputs ``[P_test, T, N0]`` for ``f_test``.
        method: ``"full"`` (all weights) or ``"collapsed"`` (``V0`` integrated out).
        form: ``"path"`` or ``"token"`` evaluation of ``f`` for ``method="full"``.
        dtype: ``"float64"`` or ``"float32"`` for sampling (float32 suits GPUs).
        chain_method: NumPyro's ``"parallel"``, ``"vectorized"``, ``"sequential"``
            or ``"auto"`` (parallel when there are enough devices, else vectorized).
        thinning: keep every ``thinning``-th draw.
        keep_weights: also store the raw weights (large at large width).
        keep_effective_weights: also store ``w`` ``[D, N1]`` per draw.

    Returns:
        A :class:`Posterior` whose ``tree`` is an ArviZ ``DataTree``.
    """
    if not isinstance(net, Network):
        raise ValueError(f"net must be a bayes_attn.Network, got {type(net).__name__}")
    x = net.check_inputs(x, "x")
    y = _checks.labels("y", y, x.shape[0])
    temperature = _checks.positive("temperature", temperature)
    if x_test is not None:
        x_test = net.check_inputs(x_test, "x_test")
    check_sampler_settings(
        num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains, seed=seed, method=method, form=form,
        dtype=dtype, chain_method=chain_method, thinning=thinning, target_accept=target_accept,
        max_tree_depth=max_tree_depth,
    )
    if chain_method == "auto":
        chain_method = "parallel" if jax.local_device_count() >= num_chains else "vectorized"

    with _x64(dtype == "float64"):
        jdt = jnp.dtype(dtype)
        xi = net.xi(x).astype(jdt)
        xi_test = None if x_test is None else net.xi(x_test).astype(jdt)
        yj = jnp.asarray(y, jdt)
        consts = dict(heads=net.heads, widths=net.widths, variances=net.variances, temperature=temperature)
        if method == "collapsed":
            model = partial(collapsed_model, **consts)
            args = (path_kernel_from_xi(xi, xi, net.variances[0]), yj)
        elif form == "path":
            model = partial(path_model, **consts)
            args = (xi, yj)
        else:
            xj = jnp.asarray(x, jdt)
            model = partial(token_model, **consts)
            args = (xj, tuple(o.astype(jdt) for o in net.attention_matrices(x)), yj)
        collect = partial(
            _observables,
            xi=xi,
            xi_test=xi_test,
            widths=net.widths,
            full=method == "full",
            keep_weights=keep_weights,
            keep_effective_weights=keep_effective_weights,
        )
        kernel = NUTS(model, target_accept_prob=target_accept, max_tree_depth=max_tree_depth, init_strategy=init_to_sample)
        mcmc = MCMC(
            kernel,
            num_warmup=num_warmup,
            num_samples=num_samples,
            num_chains=num_chains,
            thinning=thinning,
            chain_method=chain_method,
            postprocess_fn=collect,
            progress_bar=progress_bar,
        )
        t0 = time.perf_counter()
        key_mcmc, key_cond = jax.random.split(jax.random.key(seed))
        mcmc.run(
            key_mcmc,
            *args,
            extra_fields=("diverging", "energy", "num_steps", "accept_prob", "adapt_state.step_size", "potential_energy"),
        )
        draws = mcmc.get_samples(group_by_chain=True)
        if method == "collapsed" and keep_weights:
            draws["V0"] = _conditional_V0(draws, key_cond, xi, yj, net, temperature)
            full = jax.vmap(jax.vmap(partial(collect, full=True, keep_weights=False, keep_effective_weights=False)))
            draws |= full(draws)
        elif method == "collapsed":
            draws |= _conditional_outputs(draws["U"], key_cond, xi, yj, xi_test, net.variances[0], temperature)
        draws = jax.block_until_ready(draws)
        seconds = time.perf_counter() - t0
        extra = mcmc.get_extra_fields(group_by_chain=True)
    tree = _to_datatree(
        net, draws, extra, x, y, temperature, method=method, form=form, dtype=dtype, seconds=seconds, num_warmup=num_warmup, seed=seed,
        **({} if x_test is None else {"x_test_fingerprint": fingerprint(x_test)}),
    )
    return Posterior(tree, net)


def _x64(enabled: bool):
    """Context manager switching JAX's 64-bit mode (``jax.enable_x64`` or, in older JAX, ``jax.experimental``)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(enabled)
    from jax import experimental

    return experimental.enable_x64() if enabled else experimental.disable_x64()


def check_sampler_settings(
    *, num_warmup=500, num_samples=500, num_chains=2, seed=0, method="full", form="path", dtype="float64",
    chain_method="auto", thinning=1, target_accept=0.8, max_tree_depth=10,
) -> None:
    """Raise ``ValueError`` naming the first bad sampler setting (see :func:`sample_posterior`)."""
    _checks.positive_int("num_warmup", num_warmup, minimum=0)
    _checks.positive_int("num_samples", num_samples)
    _checks.positive_int("num_chains", num_chains)
    _checks.positive_int("thinning", thinning)
    if thinning > num_samples:
        raise ValueError(f"thinning must be at most num_samples={num_samples}, got {thinning}")
    _checks.positive_int("max_tree_depth", max_tree_depth)
    if isinstance(target_accept, bool) or not isinstance(target_accept, (int, float)) or not 0.0 < target_accept < 1.0:
        raise ValueError(f"target_accept must be a number in (0, 1), got {target_accept!r}")
    _checks.positive_int("seed", seed, minimum=0)
    _checks.choice("method", method, METHODS)
    _checks.choice("form", form, FORMS)
    _checks.choice("dtype", dtype, ("float64", "float32"))
    _checks.choice("chain_method", chain_method, ("auto", "parallel", "vectorized", "sequential"))


def fingerprint(x: np.ndarray) -> str:
    """Short hash of an input array, to check later which inputs draws belong to."""
    return hashlib.sha1(np.ascontiguousarray(x, dtype=np.float64).tobytes()).hexdigest()[:16]


def _observables(z, *, xi, xi_test, widths, full, keep_weights, keep_effective_weights):
    """Per-draw observables collected inside the sampler (no raw weights unless asked)."""
    V = tuple(z[f"V{l + 1}"] for l in range(len(widths) - 1))
    w = effective_weights(V, z["a"], widths)
    out = {"U": order_parameter(w)}
    if full:
        out["f_train"] = forward_from_xi(xi, z["V0"], w)
        if xi_test is not None:
            out["f_test"] = forward_from_xi(xi_test, z["V0"], w)
    if keep_effective_weights:
        out["w"] = w
    if keep_weights:
        out |= z
    return out


def _prior_outputs(U, key, xis, s0sq):
    """Outputs ``f`` of the network for ``V0`` from the prior, given ``U`` (``[D, D]``).

    With ``U = R R^T``, ``f(x) = s0 / sqrt(N0 D) sum_{pi,k} R[pi, k] Z[k] · xi_pi(x)``
    with ``Z`` ``[D, N0]`` standard normal has covariance ``K(U)``.
    """
    D, N0 = xis[0].shape[1], xis[0].shape[2]
    R = _psd_sqrt(U)
    Z = jax.random.normal(key, (D, N0), U.dtype)
    RZ = R @ Z * math.sqrt(s0sq / (N0 * D))
    return [jnp.einsum("pdi,di->p", xi, RZ) for xi in xis]


def _psd_sqrt(U):
    """``R`` with ``R R^T = U`` for a positive semi-definite ``U``."""
    lam, vec = jnp.linalg.eigh(U)
    return vec * jnp.sqrt(jnp.clip(lam, 0.0))


def _conditional_outputs(U_draws, key, xi, y, xi_test, s0sq, temperature) -> dict:
    """Draw ``f_train`` (and ``f_test``) exactly from ``f | U, Y`` for every draw of ``U``."""
    D, N0 = xi.shape[1], xi.shape[2]
    C = path_kernel_from_xi(xi, xi, s0sq)
    xis = [xi] if xi_test is None else [xi, xi_test]

    def one(U, k):
        k1, k2 = jax.random.split(k)
        priors = _prior_outputs(U, k1, xis, s0sq)
        chol = gram_cholesky(U, C, temperature)
        eps = math.sqrt(temperature) * jax.random.normal(k2, y.shape, U.dtype)
        alpha = jax.scipy.linalg.cho_solve((chol, True), y - priors[0] - eps)
        v = s0sq / (N0 * D) * jnp.einsum("b,bei,de->di", alpha, xi, U)  # K(x, X) alpha = xi(x) · v
        return [f + jnp.einsum("pdi,di->p", xq, v) for f, xq in zip(priors, xis)]

    shape = U_draws.shape[:2]
    keys = jax.random.split(key, math.prod(shape))
    flat = U_draws.reshape(-1, *U_draws.shape[2:])
    outs = jax.lax.map(lambda a: one(*a), (flat, keys), batch_size=256)
    names = ["f_train", "f_test"][: len(outs)]
    return {n: o.reshape(*shape, -1) for n, o in zip(names, outs)}


def _conditional_V0(draws, key, xi, y, net: Network, temperature) -> jax.Array:
    """Raw ``V0`` draws ``[chain, draw, N1, N0]`` from ``V0 | upper weights, Y`` (pathwise).

    ``V0 = V0' + s0² sum_mu alpha_mu df(x_mu)/dV0`` with ``V0'`` from the prior,
    ``alpha = G^{-1}(Y − f'(X) − eps)`` and
    ``df(x_mu)/dV0 = sum_pi w_pi ⊗ xi_pi(x_mu) / sqrt(N1 N0 D)``.
    """
    s0sq = net.variances[0]
    N1, N0, D = net.widths[0], net.N0, net.D
    C = path_kernel_from_xi(xi, xi, s0sq)

    def one(V, a, k):
        w = effective_weights(V, a, net.widths)
        k1, k2 = jax.random.split(k)
        V0p = math.sqrt(s0sq) * jax.random.normal(k1, (N1, N0), xi.dtype)
        chol = gram_cholesky(order_parameter(w), C, temperature)
        eps = math.sqrt(temperature) * jax.random.normal(k2, y.shape, xi.dtype)
        alpha = jax.scipy.linalg.cho_solve((chol, True), y - forward_from_xi(xi, V0p, w) - eps)
        return V0p + s0sq * jnp.einsum("b,dn,bdi->ni", alpha, w, xi) / math.sqrt(N1 * N0 * D)

    shape = draws["a"].shape[:2]
    flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in draws.items()}
    V = tuple(flat[f"V{l + 1}"] for l in range(net.L))
    keys = jax.random.split(key, math.prod(shape))
    out = jax.lax.map(lambda t: one(*t), (V, flat["a"], keys), batch_size=64)
    return out.reshape(*shape, N1, N0)


# ----------------------------------------------------------------------------
# results
# ----------------------------------------------------------------------------
def _to_datatree(net: Network, draws: dict, extra: dict, x, y, temperature, **attrs) -> xr.DataTree:
    import arviz_base as azb  # imported here: the sampler core runs without ArviZ (e.g. on a GPU box)

    labels = net.path_labels
    draws = {k: np.asarray(v, dtype=np.float64) for k, v in draws.items()}
    dims = {"U": ["path", "path_"], "f_train": ["example"], "f_test": ["test_example"], "w": ["path", "unit"], "y": ["example"]}
    steps = np.asarray(extra["num_steps"])
    stats = {
        "diverging": np.asarray(extra["diverging"], dtype=bool),
        "energy": np.asarray(extra["energy"], dtype=np.float64),
        "lp": -np.asarray(extra["potential_energy"], dtype=np.float64),
        "n_steps": steps.astype(np.int64),
        "tree_depth": np.ceil(np.log2(steps + 1)).astype(np.int64),
        "acceptance_rate": np.asarray(extra["accept_prob"], dtype=np.float64),
        "step_size": np.asarray(extra["adapt_state.step_size"], dtype=np.float64),
    }
    constant = {"x_train": np.asarray(x)}
    for l, W in enumerate(net.attention, start=1):
        constant[f"attention_{l}"] = W
        dims[f"attention_{l}"] = [f"head_{l}", "feature", "feature_"]
    dims["x_train"] = ["example", "token", "feature"]
    tree = azb.from_dict(
        {"posterior": draws, "sample_stats": stats, "observed_data": {"y": np.asarray(y)}, "constant_data": constant},
        dims=dims,
        coords={"path": labels, "path_": labels},
    )
    tree.attrs.update(
        {
            "widths": list(net.widths),
            "variances": list(net.variances),
            "readout": net.readout,
            "head_names": json.dumps(net.head_names),
            "temperature": float(temperature),
            **{k: v for k, v in attrs.items()},
        }
    )
    return tree


def _network_from_tree(tree: xr.DataTree) -> Network:
    a = tree.attrs
    const = tree["constant_data"]
    L = len(a["widths"]) - 1
    att = [np.asarray(const[f"attention_{l}"].values) for l in range(1, L + 1)]
    names = json.loads(a["head_names"])
    return Network(att, [int(n) for n in np.atleast_1d(a["widths"])], [float(v) for v in np.atleast_1d(a["variances"])], str(a["readout"]), names)


@dataclass(frozen=True)
class Summary:
    """Convergence diagnostics on the invariant observables.

    Attributes:
        table: ArviZ summary (mean, sd, MCSE, bulk/tail ESS, R-hat) per entry of
            ``U``, ``f_train`` and ``f_test``.
        divergences: number of divergent transitions after warm-up.
        bfmi: Bayesian fraction of missing information per chain.
        acceptance_rate: mean acceptance probability.
        mean_steps: mean leapfrog steps per draw.
        seconds: sampling wall time (warm-up included).
    """

    table: pd.DataFrame
    divergences: int
    bfmi: np.ndarray
    acceptance_rate: float
    mean_steps: float
    seconds: float

    @property
    def max_rhat(self) -> float:
        """Largest R-hat over all invariant observables."""
        return float(self.table["r_hat"].max())

    @property
    def min_ess(self) -> float:
        """Smallest bulk or tail ESS over all invariant observables."""
        return float(self.table[["ess_bulk", "ess_tail"]].min().min())

    def by_variable(self) -> pd.DataFrame:
        """Worst R-hat, smallest ESS and largest MCSE per observable."""
        var = self.table.index.to_series().str.split("[", n=1).str[0]
        return self.table.groupby(var.values).agg(
            entries=("r_hat", "size"), max_r_hat=("r_hat", "max"), min_ess_bulk=("ess_bulk", "min"),
            min_ess_tail=("ess_tail", "min"), max_mcse_mean=("mcse_mean", "max"),
        )

    def __str__(self) -> str:
        u = self.table[self.table.index.str.startswith("U[")]
        return "\n".join(
            [
                "Order parameter U (per-draw w·w'/N1):",
                u.to_string(),
                "",
                "Worst diagnostics per observable:",
                self.by_variable().to_string(),
                "",
                f"divergences: {self.divergences}   BFMI per chain: {np.array2string(self.bfmi, precision=2)}   "
                f"acceptance: {self.acceptance_rate:.3f}   leapfrog steps/draw: {self.mean_steps:.1f}   "
                f"sampling time: {self.seconds:.1f} s",
            ]
        )


@dataclass(frozen=True, eq=False)
class Posterior:
    """Posterior draws of the invariant observables, as an ArviZ ``DataTree``.

    ``tree`` groups: ``posterior`` (``U``, ``f_train``, ``f_test``, optional
    ``w`` and raw weights), ``sample_stats``, ``observed_data`` (``y``) and
    ``constant_data`` (training inputs and attention matrices).
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

    def order_parameter(self) -> np.ndarray:
        """Empirical ``U``: posterior mean of ``w_pi · w_pi' / N1``, ``[D, D]``."""
        return np.asarray(self.tree["posterior"]["U"].mean(("chain", "draw")).values)

    def predict(self, x, batch_size: int = 512) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of ``f(x)`` (``[P_x]`` each).

        Rao-Blackwellised over ``V0``: for each draw of ``U`` the conditional of
        ``f(x)`` given the upper weights is Gaussian with mean
        ``K(x, X) G^{-1} Y`` and variance ``K(x, x) − K(x, X) G^{-1} K(X, x)``;
        the result averages these over draws (law of total variance).
        """
        x = self.net.check_inputs(x, "x")
        batch_size = _checks.positive_int("batch_size", batch_size)
        s0sq, T = self.net.variances[0], self.temperature
        xi = self.net.xi(self.x_train)
        C = path_kernel_from_xi(xi, xi, s0sq)
        U = jnp.asarray(self.tree["posterior"]["U"].values).reshape(-1, self.net.D, self.net.D)
        y = jnp.asarray(self.y_train)
        means, variances = [], []
        for start in range(0, x.shape[0], batch_size):
            xs = self.net.xi(x[start : start + batch_size])
            Cx = path_kernel_from_xi(xs, xi, s0sq)  # [D, D, Px, P]
            Cxx = kernel_diag_from_xi(xs, s0sq)  # [D, D, Px]

            def cond(u):  # conditional mean and variance of f(x) given one draw of U
                chol = gram_cholesky(u, C, T)
                kx = jnp.einsum("de,deab->ab", u, Cx)
                v = jax.scipy.linalg.solve_triangular(chol, kx.T, lower=True)
                alpha = jax.scipy.linalg.solve_triangular(chol, y, lower=True)
                return v.T @ alpha, jnp.einsum("de,dep->p", u, Cxx) - jnp.sum(v * v, axis=0)

            m, v = jax.lax.map(cond, U, batch_size=64)
            means.append(m.mean(0))
            variances.append(v.mean(0) + m.var(0))
        return np.concatenate(means), np.concatenate(variances)

    def summary(self) -> Summary:
        """ArviZ diagnostics on ``U``, ``f_train``, ``f_test``, plus sampler statistics."""
        import arviz_stats as azs

        names = [v for v in OBSERVABLES if v in self.tree["posterior"]]
        table = azs.summary(self.tree, var_names=names, kind="all", round_to="none")
        stats = self.tree["sample_stats"]
        return Summary(
            table=table,
            divergences=int(stats["diverging"].sum()),
            bfmi=np.asarray(azs.bfmi(self.tree)["energy"].values),
            acceptance_rate=float(stats["acceptance_rate"].mean()),
            mean_steps=float(stats["n_steps"].mean()),
            seconds=float(self.tree.attrs.get("seconds", np.nan)),
        )

    def save(self, path: str | os.PathLike) -> Path:
        """Write the tree to netCDF atomically (temporary file, then rename)."""
        return _io.save(self.tree, path)


def load_posterior(path: str | os.PathLike) -> Posterior:
    """Read a :class:`Posterior` written by :meth:`Posterior.save`."""
    tree = _io.load_tree(path)
    return Posterior(tree, _network_from_tree(tree))
