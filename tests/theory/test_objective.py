"""The action, its derivatives and the kernel basis of the theory's problem (bayes_attn.theory._objective)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import CONFIGS, N0, TOKENS, P, random_problem, random_spd, rng_of

from bayes_attn import Network, kernels
from bayes_attn import theory as th
from bayes_attn.theory._coordinates import matrix_gradients, pack, unpack
from bayes_attn.theory._objective import value_grad_hess


# ----------------------------------------------------------------------------
# numpy reference of the action (explicit inverses are fine in tests)
# ----------------------------------------------------------------------------
def numpy_action(net, x, y, Us, temperature, Ua):
    heads, L = net.heads, net.L
    N, s2 = net.widths, net.variances
    Na, sa2, NL, sL2 = N[L], s2[L + 1], N[L - 1], s2[L]
    logdet = lambda A: np.linalg.slogdet(A)[1]  # noqa: E731
    S = Na * (Ua / sa2 - np.log(Ua))
    S += NL * (np.trace(Us[-1]) / (sL2 * Ua) - logdet(Us[-1]) + heads[-1] * np.log(Ua))
    for l in range(1, L):  # layer l (1-based), U_l = Us[l-1]
        H, M = heads[l - 1], Us[l].shape[0]
        tr_l = sum(Us[l - 1][h * M : (h + 1) * M, h * M : (h + 1) * M] for h in range(H))
        S += N[l - 1] * (np.trace(np.linalg.inv(Us[l]) @ tr_l) / s2[l] - logdet(Us[l - 1]) + H * logdet(Us[l]))
    C = np.asarray(net.path_kernel(x))
    K = np.einsum("de,depq->pq", Us[0], C)
    G = K + temperature * np.eye(len(y))
    return S + logdet(G) + y @ np.linalg.inv(G) @ y


def closed_form_readout(net, UL):
    L = net.L
    N, s2 = net.widths, net.variances
    b = s2[-1] * (net.heads[-1] * N[L - 1] / N[L] - 1)
    g = np.trace(UL) * N[L - 1] * s2[-1] / (N[L] * s2[L])
    return (-b + math.sqrt(b * b + 4 * g)) / 2


@pytest.mark.parametrize("heads,widths,variances", CONFIGS)
def test_action_matches_numpy_reference(heads, widths, variances):
    net, x, y = random_problem(heads, widths, variances)
    rng = rng_of(1)
    Us = [random_spd(rng, U) for U in th.gp_order_parameters(net)[0]]
    for Ua in (None, 0.77):
        got = th.action(net, x, y, Us, temperature=0.1, Ua=Ua)
        ua = closed_form_readout(net, Us[-1]) if Ua is None else Ua
        assert got == pytest.approx(numpy_action(net, x, y, Us, 0.1, ua), rel=1e-11)


@pytest.mark.parametrize("heads,widths,variances", CONFIGS)
def test_gradient_matches_finite_differences(heads, widths, variances):
    net, x, y = random_problem(heads, widths, variances)
    rng = rng_of(2)
    Us = [random_spd(rng, U) for U in th.gp_order_parameters(net)[0]]
    T = 0.1
    for Ua in (None, 0.9):
        grads, gUa = th.action_gradient(net, x, y, Us, temperature=T, Ua=Ua)
        S = lambda V, a=Ua: th.action(net, x, y, V, temperature=T, Ua=a)  # noqa: E731
        h = 1e-5
        for l, U in enumerate(Us):
            for i, j in zip(*np.triu_indices(U.shape[0]), strict=True):
                E = np.zeros_like(U)
                E[i, j] = E[j, i] = 1.0
                Vp, Vm = list(Us), list(Us)
                Vp[l], Vm[l] = U + h * E, U - h * E
                fd = (S(Vp) - S(Vm)) / (2 * h)
                # symmetric perturbation: derivative = G_ii on the diagonal, 2 G_ij off it
                want = grads[l][i, j] * (1 if i == j else 2)
                assert want == pytest.approx(fd, rel=1e-6, abs=1e-6), (l, i, j)
        if Ua is not None:
            fd = (S(Us, Ua + h) - S(Us, Ua - h)) / (2 * h)
            assert gUa == pytest.approx(fd, rel=1e-6, abs=1e-6)
        else:
            assert abs(gUa) < 1e-8  # the closed form is stationary in Ua


@pytest.mark.slow
def test_solver_hessian_matches_differences_of_its_gradient():
    """The solver's analytic data-term Hessian (both kernel forms) equals central
    differences of its gradient (which test_gradient_matches_finite_differences ties to S)."""
    heads, widths, variances = CONFIGS[1]
    net, x, y = random_problem(heads, widths, variances)
    rng = rng_of(3)
    theta = pack([random_spd(rng, U) for U in th.gp_order_parameters(net)[0]])
    h = 1e-5
    for form in ("C", "xi"):
        problem = th.make_problem(net, x, y, 0.1, form=form)
        grad = lambda t, problem=problem: np.asarray(value_grad_hess(t, problem)[1])  # noqa: E731
        f, g, H = (np.asarray(a) for a in value_grad_hess(theta, problem))
        Hfd = np.stack([(grad(theta + h * e) - grad(theta - h * e)) / (2 * h) for e in np.eye(len(theta))], axis=1)
        np.testing.assert_allclose(H, H.T, atol=1e-12 * np.abs(H).max())
        np.testing.assert_allclose(H, Hfd, rtol=1e-6, atol=1e-7 * np.abs(H).max())
        # and the solver's value/gradient equal those of the public action (scaled by 1/N_max)
        Us = unpack(theta, net.heads)
        assert float(f) == pytest.approx(th.action(net, x, y, Us, temperature=0.1) / max(widths), rel=1e-12)
        grads, _ = th.action_gradient(net, x, y, Us, temperature=0.1)
        for G, Gs in zip(grads, matrix_gradients(g, net.heads), strict=True):
            np.testing.assert_allclose(Gs, G / max(widths), rtol=1e-9, atol=1e-12 * np.abs(G).max())


def test_kernel_form_follows_C_MAX_ENTRIES(monkeypatch):
    net, x, y = random_problem((2, 2), [6, 4, 9])
    assert th.make_problem(net, x, y, 0.1).form == "C"
    monkeypatch.setattr(kernels, "C_MAX_ENTRIES", net.D**2 * len(y) ** 2 - 1)
    assert th.make_problem(net, x, y, 0.1).form == "xi"
    with pytest.raises(ValueError, match="form"):
        th.make_problem(net, x, y, 0.1, form="K")


def _numpy_basis(net, x, form):
    """``Problem.basis`` by hand in NumPy: softmax over keys of every query, paths as matrix products, ``C``,
    folding."""
    omegas = []
    for W in net.attention:
        score = np.einsum("psi,hij,ptj->phst", x, W, x)
        e = np.exp(score - score.max(axis=2, keepdims=True))
        omegas.append(e / e.sum(axis=2, keepdims=True))  # [P, H, key, query]
    col = {"last": lambda o: o[..., -1], "first": lambda o: o[..., 0], "mean": lambda o: o.mean(axis=-1)}[net.readout]
    P, D, N0 = x.shape[0], net.D, net.N0
    xi = np.empty((P, D, N0))
    for d, path in enumerate(net.paths):
        for mu in range(P):
            r = col(omegas[-1][mu, path[-1]])
            for l in reversed(range(net.L - 1)):
                r = omegas[l][mu, path[l]] @ r
            xi[mu, d] = x[mu].T @ r
    if form == "xi":
        return xi * math.sqrt(net.variances[0] / (N0 * D))
    C = net.variances[0] * np.einsum("adi,bei->deab", xi, xi) / (N0 * D)
    i, j = np.triu_indices(D)
    return np.stack([C[a, b] if a == b else C[a, b] + C[b, a] for a, b in zip(i, j, strict=True)])


@pytest.mark.parametrize("heads", [(2, 2), (3,), (2, 1, 2)])
@pytest.mark.parametrize("readout", ["last", "first", "mean"])
@pytest.mark.parametrize("form", ["C", "xi"])
def test_problem_basis_matches_numpy(heads, readout, form):
    """The kernel basis (one compiled program: attention, ξ, C, folding) equals a NumPy computation to 1e-12."""
    rng = rng_of(7)
    net = Network([rng.normal(size=(h, N0, N0)) for h in heads], 5, [0.8, 1.0, 1.1, 1.2, 0.9][: len(heads) + 2],
                  readout)
    x = rng.normal(size=(P, TOKENS, N0))
    y = np.where(rng.random(P) < 0.5, 1.0, -1.0)
    basis = np.asarray(th.make_problem(net, x, y, 0.1, form=form).basis)
    expect = _numpy_basis(net, x, form)
    assert basis.dtype == np.float64 and basis.shape == expect.shape
    np.testing.assert_allclose(basis, expect, rtol=1e-12, atol=1e-12 * np.abs(expect).max())


@pytest.mark.slow  # 5-11 s: two theory solves (with and without the basis) compiled for this network
def test_basis_is_reused_at_other_widths_and_refused_for_other_inputs():
    """A basis passed on serves the same data at any width and temperature (the same array); one computed from
    other inputs (changed in place too), attention, readout or s0² is refused, naming the argument."""
    net, x, y = random_problem((2, 2), [6, 4, 9])
    basis = th.kernel_basis(net, x)
    assert th.make_problem(net.with_width(50), x, y, 0.3, basis=basis).basis is basis.array
    np.testing.assert_allclose(np.asarray(basis.array), _numpy_basis(net, x, "C"), rtol=1e-12, atol=1e-12)
    theory = th.solve_theory(net, x, y, temperature=0.1, basis=basis)
    assert theory.U == pytest.approx(th.solve_theory(net, x, y, temperature=0.1).U, rel=1e-13, abs=1e-13)
    x2 = x.copy()
    x2[3, 1, 2] += 0.5  # other inputs, same shape
    others = [(net, x2), (Network([a * 1.5 for a in net.attention], net.widths, net.variances), x),
              (Network(net.attention, net.widths, [2.0, 1.0, 1.0, 1.0]), x),
              (Network(net.attention, net.widths, net.variances, readout="first"), x),
              (random_problem((4,), [6, 9])[0], x)]
    for other, xo in others:
        with pytest.raises(ValueError, match="^basis was computed from other inputs"):
            th.make_problem(other, xo, y, 0.1, basis=basis)
    x[3, 1, 2] += 0.5  # the caller's array changed in place after the basis was computed
    with pytest.raises(ValueError, match="^basis"):
        th.solve_theory(net, x, y, temperature=0.1, basis=basis)
    with pytest.raises(ValueError, match="^basis must be"):
        th.gp_limit(net, x, y, temperature=0.1, basis=np.asarray(basis.array))
    with pytest.raises(ValueError, match="form='xi'"):
        th.make_problem(net, x2, y, 0.1, basis=th.kernel_basis(net, x2), form="xi")
