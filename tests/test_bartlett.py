"""Bartlett factors of the order parameters' Wishart chain (bayes_attn.theory._bartlett; docs/theory.md §7)."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from conftest import rng_of

from bayes_attn.theory import _bartlett as bartlett

# three layers, two of them singular (U_1: 8×8 of rank 3, U_2: 4×4 of rank 3), and a regular network
SINGULAR = dict(heads=(2, 2, 2), widths=(3, 3, 2, 4), variances=(1.0, 0.7, 1.3, 0.8, 1.5))
REGULAR = dict(heads=(2, 3), widths=(7, 4, 5), variances=(1.0, 0.6, 1.4, 0.9))


def random_factors(heads, widths, seed=0):
    """Factors of the shapes of ``factor_shapes``: positive diagonals, normal entries below, zeros above (NumPy)."""
    rng = rng_of(seed)
    out = []
    for m, r in bartlett.factor_shapes(heads, widths):
        A = np.tril(rng.normal(size=(m, r)), -1)
        A[np.arange(r), np.arange(r)] = rng.uniform(0.5, 2.0, size=r)
        out.append(A)
    return out


def block_recursion(A_list, heads, widths, variances):
    """§7's recursion with ``I_H ⊗ F`` written as ``H`` diagonal blocks ``F``: ``[U_1, ..., U_L, Ua]`` (NumPy)."""
    hs = (*heads, 1)
    F = np.ones((1, 1))
    Us = []
    for k in reversed(range(len(A_list))):
        F = math.sqrt(variances[k + 1] / widths[k]) * scipy.linalg.block_diag(*[F] * hs[k]) @ A_list[k]
        Us.insert(0, F @ F.T)
    return Us


def test_shapes_counts_and_indices_by_hand():
    # level a: 1 × 1; level 2: 3 heads under it, width 2 < 3: 3 × 2; level 1: 2 heads × rank 2, width 4: 4 × 4
    assert bartlett.factor_shapes((2, 3), (4, 2, 5)) == [(4, 4), (3, 2), (1, 1)]
    assert bartlett.num_parameters((2, 3), (4, 2, 5)) == (16 - 6) + (6 - 1) + 1  # entries of each lower trapezoid
    assert bartlett.factor_shapes(SINGULAR["heads"], SINGULAR["widths"]) == [(6, 3), (4, 3), (2, 2), (1, 1)]
    assert bartlett.num_parameters((1,), (7, 9)) == 2  # one layer, one head: two chi-squares
    assert bartlett.level_names(3) == ["1", "2", "3", "a"]
    np.testing.assert_array_equal(bartlett.chi2_dofs(3, 2, 5), [5.0, 4.0])  # n − i + 1, i = 1..r
    rows, cols = bartlett.lower_indices(3, 2)  # column by column
    assert rows.tolist() == [1, 2, 2] and cols.tolist() == [0, 0, 1]
    assert [len(i) for i in bartlett.lower_indices(1, 1)] == [0, 0]


def test_assemble_by_hand():
    A = bartlett.assemble(jnp.array([1.5, 2.5]), jnp.array([10.0, 20.0, 30.0]), 3)
    np.testing.assert_array_equal(np.asarray(A), [[1.5, 0.0], [10.0, 2.5], [20.0, 30.0]])
    np.testing.assert_array_equal(np.asarray(bartlett.assemble(jnp.array([4.0]), None, 1)), [[4.0]])


def test_factors_of_sqrt_n_times_identity_give_the_product_of_the_variances():
    """``A_k = sqrt(n_k) I``: every ``A_k A_kᵀ / n_k`` is the identity, so ``Ua = sa²``, ``U_2 = s2² Ua I`` and
    ``U_1 = s1² (I_2 ⊗ U_2)``, the prior means of §7."""
    heads, widths, variances = (2, 3), (6, 3, 5), (1.0, 0.5, 2.0, 3.0)
    A = [math.sqrt(n) * np.eye(m) for n, (m, _) in zip(widths, bartlett.factor_shapes(heads, widths), strict=True)]
    (U1, U2), Ua = bartlett.order_parameters_from_factors([jnp.asarray(a) for a in A], heads, widths, variances)
    assert float(Ua) == pytest.approx(3.0, rel=1e-14)
    np.testing.assert_allclose(np.asarray(U2), 6.0 * np.eye(3), rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(np.asarray(U1), 3.0 * np.eye(6), rtol=1e-14, atol=1e-14)


def test_the_level_above_enters_as_diagonal_blocks_with_the_first_head_slowest():
    """With ``A_1 = sqrt(N_1) I``, ``U_1 = s1² (I_{H_1} ⊗ U_2)``: ``H_1`` diagonal blocks ``s1² U_2`` (``h_1``
    slowest), zeros between them, whatever ``U_2``."""
    heads, widths, variances = (2, 3), (6, 4, 5), (1.0, 0.5, 2.0, 3.0)
    A = random_factors(heads, widths, seed=1)
    A[0] = math.sqrt(widths[0]) * np.eye(6)
    (U1, U2), _ = bartlett.order_parameters_from_factors([jnp.asarray(a) for a in A], heads, widths, variances)
    U1, U2 = np.asarray(U1), np.asarray(U2)
    assert not np.allclose(U2, np.diag(np.diag(U2)))  # the test can see the order of the blocks' entries
    np.testing.assert_allclose(U1, 0.5 * np.kron(np.eye(2), U2), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("cfg", [REGULAR, SINGULAR], ids=["regular", "singular"])
def test_order_parameters_match_the_recursion_with_explicit_blocks(cfg):
    """Every level against §7's recursion written with block-diagonal matrices; ``factor_chain``'s factors are
    ``D_k × r_k`` with ``F_k F_kᵀ = U_k``; the rank of a singular level is its factor's column count."""
    heads, widths, variances = cfg["heads"], cfg["widths"], cfg["variances"]
    A = random_factors(heads, widths, seed=2)
    want = block_recursion(A, heads, widths, variances)
    Us, Ua = bartlett.order_parameters_from_factors([jnp.asarray(a) for a in A], heads, widths, variances)
    for got, ref in zip([*Us, jnp.reshape(Ua, (1, 1))], want, strict=True):
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    Fs = bartlett.factor_chain([jnp.asarray(a) for a in A], heads, widths, variances)
    shapes = bartlett.factor_shapes(heads, widths)
    for l, (F, U, (_, r)) in enumerate(zip(Fs, want, shapes, strict=True)):
        assert F.shape == (math.prod((*heads, 1)[l:]), r)
        np.testing.assert_allclose(np.asarray(F @ F.T), U, rtol=1e-12, atol=1e-12 * np.abs(U).max())
        assert np.linalg.matrix_rank(U, tol=1e-10 * np.abs(U).max()) == r


def test_sites_of_full_rank_order_parameters_are_their_factors():
    """At full rank the factors are unique (Cholesky, positive diagonal): the sites of the order parameters made
    from factors ``A_k`` are the logs of their squared diagonals, then their lower entries column by column."""
    heads, widths, variances = REGULAR["heads"], REGULAR["widths"], REGULAR["variances"]
    assert all(m == r for m, r in bartlett.factor_shapes(heads, widths))
    A = random_factors(heads, widths, seed=3)
    Us, Ua = bartlett.order_parameters_from_factors([jnp.asarray(a) for a in A], heads, widths, variances)
    theta = bartlett.sites_of_order_parameters([np.asarray(U) for U in Us], float(Ua), heads, widths, variances)
    logc = [2 * np.log(np.diag(a)) for a in A]
    low = [np.array([a[i, j] for j in range(a.shape[1]) for i in range(j + 1, a.shape[0])]) for a in A]
    assert theta.shape == (bartlett.num_parameters(heads, widths),)
    np.testing.assert_allclose(theta, np.concatenate(logc + low), rtol=1e-9, atol=1e-10)


def test_factor_chain_checks_the_factors():
    with pytest.raises(ValueError, match="need L \\+ 1 = 2 factors"):
        bartlett.factor_chain([jnp.ones((1, 1))], (2,), (3, 4), (1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match=r"factor 1 must have 2 rows, got shape \(3, 1\)"):
        bartlett.factor_chain([jnp.ones((3, 1)), jnp.ones((1, 1))], (2,), (3, 4), (1.0, 1.0, 1.0))
