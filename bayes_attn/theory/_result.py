"""The solved theory (docs/theory.md §4): order parameters, predictors, read-outs, files."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from .. import gp
from .._internal import checks as _checks
from .._internal import io as _io
from .._internal.precision import float64
from ..kernels import kernel_from_xi
from ..network import Network, head_labels, order_parameter_labels
from ._correction import Mode, shapes_of
from ._newton import SolveReport
from ._objective import gp_order_parameters

if TYPE_CHECKING:
    import xarray

__all__ = ["Correction", "Theory", "head_scores", "load_theory"]


def head_scores(U, heads: Sequence[int]) -> list[np.ndarray]:
    """Head scores from ``U [D, D]`` (docs/theory.md §4; ``D = H_1···H_L``): one array ``[H_l]`` per layer, max over
    all heads = 1.

    View ``|U|`` as a tensor ``[H_1..H_L, H_1..H_L]``; for layer ``l`` let
    ``M[h, h']`` be its sum over all indices but the row's and the column's
    ``h_l``. Then ``score[l][h] = M[h, :].sum() + M[:, h].sum() - M[h, h]``
    (entries through ``h`` on both sides counted once). A low score marks a
    prunable head. Raises ``ValueError`` for a wrong shape or ``U = 0``.
    """
    if isinstance(heads, (int, np.integer)) or not isinstance(heads, Sequence) or len(heads) == 0:
        raise ValueError(f"heads must be a non-empty list of heads per layer, got {heads!r}")
    heads = tuple(_checks.positive_int(f"heads[{i}]", h) for i, h in enumerate(heads))
    D = math.prod(heads)
    A = np.abs(_checks.array("U", U, shape=(D, D))).reshape(heads + heads)
    L = len(heads)
    raw = []
    for l in range(L):
        M = A.sum(axis=tuple(i for i in range(2 * L) if i not in (l, L + l)))
        raw.append(M.sum(axis=1) + M.sum(axis=0) - np.diag(M))
    top = max(float(r.max()) for r in raw)
    if top <= 0:
        raise ValueError("U must not be zero: head scores are normalised by the largest one")
    return [r / top for r in raw]


@jax.jit
def _laplace_moments(U0, shift, E, xi_t, xi_train, y, temperature, s0):
    """Next-order predictor mean and variance (docs/theory.md §8); see :meth:`Theory._predict_laplace`."""

    def moments(U):  # [2, B]: mean and variance of f(x*) given U_1 = U
        return jnp.stack(gp.moments_from_xi(U, xi_train, xi_t, y, temperature, s0))

    base, along_shift = jax.jvp(moments, (U0,), (shift,))

    def first_and_second(Ek):
        return jax.jvp(lambda U: jax.jvp(moments, (U,), (Ek,))[1], (U0,), (Ek,))

    d1, d2 = jax.vmap(first_and_second)(E)  # [k, 2, B] each
    out = base + along_shift + 0.5 * jnp.sum(d2, axis=0)
    return out[0], out[1] + jnp.sum(d1[:, 0] ** 2, axis=0)


@dataclass(frozen=True, eq=False)
class Correction:
    """The finite-width correction of a theory (docs/theory.md §8): where ``S(θ)`` was expanded, what the
    expansion gives, and how far to trust it.

    Attributes:
        mode: the expansion point ``θ̂``, ``H = S''(θ̂)`` and the report of its Newton solve (:class:`Mode`).
        point, Ua_point: ``[U_1, ..., U_L]`` and ``Ua`` at ``θ̂``.
        order_parameters_leading, Ua_leading: the leading-order values (the minimum of ``S`` of §4).
        order_parameter_sds, Ua_sd: the predicted posterior standard deviation of every entry
            (``sqrt(g'ᵀ Σ g')``).
        U_covariance: posterior covariance ``Cov(U_ij, U_kl)`` of the entries of ``U_1``, ``[D, D, D, D]``.
        seconds: wall time of the Newton solve for ``θ̂`` and the expansion.
        problems: why the correction is unreliable (empty when it is not): no convergence, an indefinite
            Hessian, corrected means that are not finite or not positive semi-definite (widths too small).
    """

    mode: Mode
    point: tuple[np.ndarray, ...]
    Ua_point: float
    order_parameters_leading: tuple[np.ndarray, ...]
    Ua_leading: float
    order_parameter_sds: tuple[np.ndarray, ...]
    Ua_sd: float
    U_covariance: np.ndarray
    seconds: float
    problems: tuple[str, ...] = ()

    @property
    def U_leading(self) -> np.ndarray:
        """The leading-order ``U_1`` ``[D, D]``."""
        return self.order_parameters_leading[0]

    @property
    def U_sd(self) -> np.ndarray:
        """The predicted posterior standard deviation of every entry of ``U_1`` ``[D, D]``."""
        return self.order_parameter_sds[0]

    @property
    def message(self) -> str:
        """The mode's stopping reason, then the problems (each once)."""
        m = self.mode.report.message
        return m if not self.problems else "; ".join(dict.fromkeys([m, *self.problems]))


@dataclass(frozen=True, eq=False)
class Theory:
    """Order parameters at the minimum of ``S`` and what follows from them.

    Attributes:
        order_parameters: ``[U_1, ..., U_L]``; ``U_l`` is ``[H_l...H_L, H_l...H_L]`` (``U``: ``U_1``).
        Ua: the readout order parameter ``Ua`` (a positive scalar).
        action: ``S / N_max`` at the solution.
        hessian_min_eigenvalue: smallest eigenvalue of the Hessian of
            ``S/N_max`` w.r.t. the vech entries of all ``U_l`` (``Ua`` eliminated).
        temperature: the likelihood variance.
        net: the network.
        x_train: the training inputs ``[P, T, N0]``.
        y_train: the training labels ``[P]``.
        limit: ``"finite_width"`` (``solve_theory``) or ``"gp"`` (``gp_limit``).
        report: the Newton solve (:class:`SolveReport`; its ``measure`` is ``max_gradient``).
        correction: ``None`` (the theory of §4) or the finite-width correction of §8 (:class:`Correction`):
            ``order_parameters`` and ``Ua`` are then the corrected posterior means, and :meth:`predict` gives
            the corrected predictor; the leading-order values are the correction's.
    """

    order_parameters: tuple[np.ndarray, ...]
    Ua: float
    action: float
    hessian_min_eigenvalue: float
    temperature: float
    net: Network
    x_train: np.ndarray = field(repr=False)
    y_train: np.ndarray = field(repr=False)
    limit: str = "finite_width"
    report: SolveReport = SolveReport(False, 0, "", float("nan"), float("nan"))
    correction: Correction | None = field(default=None, repr=False)

    @property
    def U(self) -> np.ndarray:
        """``U_1``, ``[D, D]``, the order parameter over paths."""
        return self.order_parameters[0]

    @property
    def converged(self) -> bool:
        """Whether ``max_gradient <= tol`` was reached."""
        return self.report.converged

    @property
    def iterations(self) -> int:
        """Newton iterations taken."""
        return self.report.iterations

    @property
    def message(self) -> str:
        """The solver's stopping reason."""
        return self.report.message

    @property
    def max_gradient(self) -> float:
        """Max over ``l`` and entries of ``|∂(S/N_max)/∂U_l|`` at the solution."""
        return self.report.measure

    @property
    def solve_seconds(self) -> float:
        """Wall time of the solve (including compilation if any, and the correction's when corrected)."""
        return self.report.seconds + (0.0 if self.correction is None else self.correction.seconds)

    @property
    def correction_name(self) -> str:
        """``"laplace"`` when corrected (§8), else ``"none"`` (§4): a key of ``THEORY_NAMES``."""
        return "none" if self.correction is None else "laplace"

    @property
    def is_minimum(self) -> bool:
        """True when the Hessian at the solution is positive definite."""
        return bool(self.hessian_min_eigenvalue > 0)

    @property
    def problems(self) -> list[str]:
        """Why this solution is not one to trust (empty when it is): no convergence, or not a minimum."""
        if not self.converged:
            said = "gradient" in (self.message or "")  # the solver's message names the gradient already
            return [f"the theory did not converge ({self.message or 'no message'}"
                    + ("" if said else f"; max |dS/dU| {self.max_gradient:.3g}") + ")"]
        if not self.is_minimum:
            return [f"the theory stopped where the Hessian is not positive definite (min eigenvalue "
                    f"{self.hessian_min_eigenvalue:.3g})"]
        return []

    @property
    def correction_problems(self) -> list[str]:
        """Why the finite-width correction (§8) is unreliable (empty when it is not, or without one)."""
        c = self.correction
        return [] if c is None else [f"the Laplace correction is unreliable: {p}" for p in c.problems]

    # ----- kernels and predictors ---------------------------------------------
    @cached_property
    def _xi_train(self) -> jax.Array:
        """``xi`` of the training inputs, ``[P, D, N0]`` (float64)."""
        with float64():
            return self.net.xi(self.x_train)

    @cached_property
    def kernel_train(self) -> np.ndarray:
        """``K`` on the training inputs: ``[P, P]``."""
        with float64():
            xi = self._xi_train
            return np.asarray(kernel_from_xi(jnp.asarray(self.U), xi, xi, self.net.variances[0]))

    def kernel(self, x1, x2=None) -> np.ndarray:
        """``K(x1, x2)`` with this theory's ``U``: ``[P1, P2]`` (``x2`` defaults to ``x1``)."""
        x1 = self.net.check_inputs(x1, "x1")
        x2 = None if x2 is None else self.net.check_inputs(x2, "x2")
        with float64():
            return np.asarray(self.net.kernel(self.U, x1, x2))

    def leading_order(self) -> Theory:
        """The leading-order theory (docs/theory.md §4) this one was corrected from; ``self`` when not corrected."""
        c = self.correction
        if c is None:
            return self
        return replace(self, order_parameters=tuple(c.order_parameters_leading), Ua=c.Ua_leading, correction=None,
                       report=replace(self.report, seconds=self.solve_seconds))

    def predict(self, x_test, batch_size: int = 512) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of ``f(x*)`` (docs/theory.md §4 "Predictor statistics"):
        ``k*ᵀ G⁻¹ Y`` and ``k** − k*ᵀ G⁻¹ k*``, each ``[P*]``; ``batch_size`` test inputs at a time.

        With ``correction="laplace"`` (docs/theory.md §8) both are expanded to next
        order around ``U_1(θ̂)``: the mean is ``E[k*ᵀ G⁻¹ Y]``, the variance
        that of ``f(x*)``, ``E[k** − k*ᵀ G⁻¹ k*] + Var[k*ᵀ G⁻¹ Y]``.
        """
        xt = self.net.check_inputs(x_test, "x_test")
        batch_size = _checks.positive_int("batch_size", batch_size)
        if self.correction is not None:
            return self._predict_laplace(self.correction, xt, batch_size)
        s0 = self.net.variances[0]
        with float64():
            U = jnp.asarray(self.U)
            K, y = jnp.asarray(self.kernel_train), jnp.asarray(self.y_train)
            means, variances = [], []
            for xi_t, valid in self.net.xi_batches(xt, batch_size):  # [B, D, N0]
                k_cross, k_diag = gp.cross_kernels(U, xi_t, self._xi_train, s0)  # [B, P], [B]
                m, v = gp.moments(K, k_cross, k_diag, y, self.temperature)
                means.append(np.asarray(m)[:valid])
                variances.append(np.asarray(v)[:valid])
        return np.concatenate(means), np.concatenate(variances)

    def _predict_laplace(self, c: Correction, xt: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Corrected predictor: ``g(U) = (mean, variance)`` given ``U_1``, expanded as
        ``g(Û) + g'·(E[U_1] − Û) + ½ Σ_k g''[q_k, q_k]`` with ``Cov(U_1) = Σ_k q_k q_kᵀ``,
        plus ``Σ_k (mean'·q_k)²`` on the variance (``c``: this theory's :attr:`correction`)."""
        D = self.net.D
        U0 = np.asarray(c.point[0])
        iu = np.triu_indices(D)
        cov = c.U_covariance[iu[0], iu[1]][:, iu[0], iu[1]]  # covariance of the vech entries of U_1
        w, V = np.linalg.eigh(0.5 * (cov + cov.T))
        Q = V * np.sqrt(np.clip(w, 0.0, None))  # columns q_k
        E = np.zeros((Q.shape[1], D, D))
        E[:, iu[0], iu[1]] = Q.T
        E[:, iu[1], iu[0]] = Q.T
        means, variances = [], []
        with float64():
            args = [jnp.asarray(a, jnp.float64) for a in (U0, self.U - U0, E)]
            y, temperature = jnp.asarray(self.y_train), jnp.asarray(self.temperature)
            s0 = jnp.asarray(self.net.variances[0])
            for xi_t, valid in self.net.xi_batches(xt, batch_size):
                m, v = _laplace_moments(*args, xi_t, self._xi_train, y, temperature, s0)
                means.append(np.asarray(m)[:valid])
                variances.append(np.asarray(v)[:valid])
        return np.concatenate(means), np.concatenate(variances)

    # ----- read-outs of the paper ---------------------------------------------
    def alignment(self) -> tuple[np.ndarray, np.ndarray]:
        """Eigenvalues of ``K`` on the training set (descending, ``[P]``) and the
        cosine similarity ``|v·Y| / |Y|`` of each unit eigenvector with ``Y`` (``[P]``;
        absolute value because an eigenvector's sign is arbitrary)."""
        w, V = np.linalg.eigh(self.kernel_train)
        order = np.argsort(w)[::-1]
        w, V = w[order], V[:, order]
        return w, np.abs(V.T @ self.y_train) / np.linalg.norm(self.y_train)

    def head_scores(self) -> list[np.ndarray]:
        """Head scores (docs/theory.md §4) of this ``U``: one array ``[H_l]`` per layer, max over all heads = 1."""
        return head_scores(self.U, self.net.heads)

    # ----- files --------------------------------------------------------------
    def to_dataset(self):
        """All results as an ``xarray.Dataset`` (see module docs for names)."""
        import xarray as xr

        net = self.net
        labels = net.path_labels
        gpU = gp_order_parameters(net)[0][0]
        eig, cos = self.alignment()
        scores = self.head_scores()
        heads = head_labels(net.heads)
        ds = xr.Dataset(
            {
                "U": (("path", "path_"), self.U),
                "gp_U": (("path", "path_"), gpU),
                "Ua": ((), self.Ua),
                "action": ((), self.action),
                "max_gradient": ((), self.max_gradient),
                "hessian_min_eigenvalue": ((), self.hessian_min_eigenvalue),
                "converged": ((), self.converged),
                "iterations": ((), self.iterations),
                "temperature": ((), self.temperature),
                "alignment_eigenvalue": (("pc",), eig),
                "alignment_cosine": (("pc",), cos),
                "head_score": (("head",), np.concatenate(scores)),
            },
            coords={
                "path": labels,
                "path_": labels,
                "pc": np.arange(1, len(eig) + 1),
                "head": heads,
                "head_layer": ("head", [l + 1 for l, H in enumerate(net.heads) for _ in range(H)]),
                "head_index": ("head", [h + 1 for H in net.heads for h in range(H)]),
            },
        )
        if net.head_names is not None:
            ds = ds.assign_coords(head_name=("head", [n for layer in net.head_names for n in layer]))
        for l, U in enumerate(self.order_parameters, start=1):
            # index of U_l: (h_l, ..., h_L), h_l slowest, labels like the paths'
            lab = order_parameter_labels(net.heads, l)
            ds[f"U_{l}"] = ((f"index_{l}", f"index_{l}_"), U)
            ds = ds.assign_coords({f"index_{l}": lab, f"index_{l}_": lab})
        ds.attrs.update(
            **net.stored_attrs(),
            heads=np.asarray(net.heads),
            limit=self.limit,
            message=self.message,
            n_train=int(self.x_train.shape[0]),
            correction=self.correction_name,
        )
        return ds if self.correction is None else self._add_laplace(ds)

    def _add_laplace(self, ds):
        """The leading-order values, standard deviations and expansion of the correction (§8)."""
        c = self.correction
        m, r = c.mode, c.mode.report
        ds["U_leading"] = (("path", "path_"), c.U_leading)
        ds["U_sd"] = (("path", "path_"), c.U_sd)
        for l in range(1, self.net.L + 1):
            dims = (f"index_{l}", f"index_{l}_")
            ds[f"U_{l}_leading"] = (dims, c.order_parameters_leading[l - 1])
            ds[f"U_{l}_sd"] = (dims, c.order_parameter_sds[l - 1])
            ds[f"U_{l}_expansion_point"] = (dims, c.point[l - 1])
        ds["Ua_leading"] = ((), c.Ua_leading)
        ds["Ua_sd"] = ((), c.Ua_sd)
        ds["Ua_expansion_point"] = ((), c.Ua_point)
        labels = ds["path"].values
        ds["U_covariance"] = (("path", "path_", "cov_path", "cov_path_"), c.U_covariance)
        ds = ds.assign_coords(cov_path=labels, cov_path_=labels)
        for name, value in (("dimension", m.dimension), ("action", m.action), ("newton_decrement", r.measure),
                            ("hessian_min_eigenvalue", m.hessian_min_eigenvalue), ("converged", r.converged),
                            ("iterations", r.iterations)):
            ds[f"laplace_{name}"] = ((), value)
        # the mode itself (θ̂, its gradient and curvature), from which a read-back theory rebuilds it
        for name, dims in (("theta", ("theta",)), ("gradient", ("theta",)), ("hessian", ("theta", "theta_")),
                           ("data_gradient", ("theta_1",)), ("data_hessian", ("theta_1", "theta_1_"))):
            ds[f"laplace_{name}"] = (dims, np.asarray(getattr(m, name)))
        ds.attrs.update(laplace_coordinates=m.coordinates, laplace_message=c.message, laplace_seconds=float(c.seconds),
                        laplace_mode_seconds=float(r.seconds), laplace_mode_message=r.message,
                        laplace_problems=json.dumps(list(c.problems)))
        return ds

    def to_file_dataset(self) -> xarray.Dataset:
        """:meth:`to_dataset` plus what :func:`load_theory` needs to rebuild this theory (training data
        ``x_train``, ``y_train``, the attention matrices ``attention_l``, head names)."""
        ds = self.to_dataset()
        ds["x_train"] = (("example", "token", "feature"), np.asarray(self.x_train))
        ds["y_train"] = (("example",), np.asarray(self.y_train))
        for l, W in enumerate(self.net.attention, start=1):
            ds[f"attention_{l}"] = ((f"head_{l}", "feature", "feature_"), np.asarray(W))
        ds.attrs.update(solve_seconds=float(self.solve_seconds),  # the correction's seconds included
                        leading_solve_seconds=float(self.report.seconds))
        return ds

    def save(self, path: str | os.PathLike) -> Path:
        """Write :meth:`to_file_dataset` to netCDF, atomically (read it back with :func:`load_theory`)."""
        return _io.save(self.to_file_dataset(), path)


def _correction_of(ds, net: Network, level) -> Correction:
    """The :class:`Correction` stored by :meth:`Theory.to_file_dataset` in ``ds``."""
    a = ds.attrs
    arr = lambda name: np.asarray(ds[name].values, dtype=np.float64)  # noqa: E731
    coordinates = str(a["laplace_coordinates"])
    report = SolveReport(bool(ds["laplace_converged"]), int(ds["laplace_iterations"]),
                         str(a.get("laplace_mode_message", "")), float(a.get("laplace_mode_seconds", float("nan"))),
                         float(ds["laplace_newton_decrement"]))
    mode = Mode(coordinates, shapes_of(net.heads, net.widths, coordinates), arr("laplace_theta"),
                float(ds["laplace_action"]), arr("laplace_gradient"), arr("laplace_hessian"),
                arr("laplace_data_gradient"), arr("laplace_data_hessian"), report)
    return Correction(mode=mode, point=level("U_{}_expansion_point"), Ua_point=float(ds["Ua_expansion_point"]),
                      order_parameters_leading=level("U_{}_leading"), Ua_leading=float(ds["Ua_leading"]),
                      order_parameter_sds=level("U_{}_sd"), Ua_sd=float(ds["Ua_sd"]),
                      U_covariance=arr("U_covariance"), seconds=float(a["laplace_seconds"]),
                      problems=tuple(json.loads(a.get("laplace_problems", "[]"))))


def load_theory(path: str | os.PathLike) -> Theory:
    """Read a :class:`Theory` written by :meth:`Theory.save`."""
    ds = _io.load_dataset(path)
    a = ds.attrs
    if "x_train" not in ds or "head_names" not in a:
        raise ValueError(f"path must be a theory written by Theory.save (theory.nc, gp.nc), got {str(path)!r}"
                         + (", a posterior (read it with load_posterior)" if "sampler" in a else ""))
    L = len(np.atleast_1d(a["heads"]))
    net = Network.from_stored(a, ds)
    level = lambda name: tuple(np.asarray(ds[name.format(l)].values, dtype=np.float64) for l in range(1, L + 1))  # noqa: E731
    Us = level("U_{}")
    correction = _correction_of(ds, net, level) if str(a.get("correction", "none")) == "laplace" else None
    seconds = float(a.get("leading_solve_seconds", a["solve_seconds"]))
    return Theory(
        order_parameters=Us,
        Ua=float(ds["Ua"]),
        action=float(ds["action"]),
        hessian_min_eigenvalue=float(ds["hessian_min_eigenvalue"]),
        temperature=float(ds["temperature"]),
        net=net,
        x_train=np.asarray(ds["x_train"].values, dtype=np.float64),
        y_train=np.asarray(ds["y_train"].values, dtype=np.float64),
        limit=str(a["limit"]),
        report=SolveReport(bool(ds["converged"]), int(ds["iterations"]), str(a.get("message", "")), seconds,
                           float(ds["max_gradient"])),
        correction=correction,
    )
