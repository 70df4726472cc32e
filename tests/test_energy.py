"""Energy correction: debts are settled, never dropped."""

from __future__ import annotations

import numpy as np
import pytest

from physics.energy import (
    block_kinetic,
    block_sums,
    correct_velocities,
    correct_velocities_reference,
    scale_blocks,
    settle_debts,
)
from physics.potential import (
    MERGE_CHUNK,
    compute_potential,
    potential_at_points,
    potential_at_radii,
    potential_at_sorted_radii,
)


@pytest.mark.parametrize("n", [1, 2, 5, 3000, 3 * MERGE_CHUNK])
def test_potential_at_sorted_radii_matches_search(n):
    """The chunked merge (several chunks at the larger n, some starting on a star's own
    radius; four interleaved walks per chunk, some of them empty at the smallest n) gives
    each point the bisection's bits, on any number of threads."""
    gen = np.random.default_rng(3)
    r = np.sort(gen.exponential(1.0, n))
    m = gen.uniform(0.5, 1.5, r.size) / r.size
    phi, mcum = compute_potential(r, m)
    x = np.sort(np.concatenate([r * gen.uniform(0.7, 1.3, r.size), r[::5], [1e-9, 1e3]]))
    at = np.minimum(np.searchsorted(r, x[MERGE_CHUNK::MERGE_CHUNK]), n - 1)
    x[MERGE_CHUNK::MERGE_CHUNK] = r[at]
    x = np.sort(x)
    np.testing.assert_array_equal(potential_at_sorted_radii(r, phi, mcum, x),
                                  potential_at_radii(r, phi, mcum, x))


def test_potential_at_points_matches_merge():
    """The many-rank path (bisection at a rank's own stars' old radii) gives the merge's bits
    there and leaves the other entries alone."""
    gen = np.random.default_rng(4)
    r = np.sort(gen.exponential(1.0, 5000))
    m = gen.uniform(0.5, 1.5, r.size) / r.size
    phi, mcum = compute_potential(r, m)
    x = np.sort(np.concatenate([r * gen.uniform(0.7, 1.3, r.size), r[::5], [1e-9, 1e3]]))
    idx = gen.permutation(x.size)[: x.size // 3]
    out = np.full(x.size, np.nan)
    potential_at_points(r, phi, mcum, x, idx, out)
    np.testing.assert_array_equal(out[idx], potential_at_sorted_radii(r, phi, mcum, x)[idx])
    rest = np.ones(x.size, dtype=bool)
    rest[idx] = False
    assert np.isnan(out[rest]).all()


@pytest.mark.parametrize("offset", [0, 140])
def test_correct_velocities_matches_reference(offset):
    """The kernel against the shell sums of eq 1, including stars that cannot pay (v^2 < 0)."""
    gen = np.random.default_rng(5)
    n_all = 600
    r_old_all = np.sort(gen.exponential(1.0, n_all))
    m_all = gen.uniform(0.5, 1.5, n_all) / n_all
    old_index = gen.permutation(n_all)  # where each (new-order) star sat before
    r_all = np.sort(r_old_all * gen.uniform(0.5, 2.0, n_all))
    phi_all, mcum_all = compute_potential(r_all, m_all)
    phi_at_old = potential_at_sorted_radii(r_all, phi_all, mcum_all, r_old_all)
    n = 200
    sl = slice(offset, offset + n)
    m = m_all[sl].copy()
    vr = gen.normal(0, 0.5, n)
    vt = np.abs(gen.normal(0, 0.5, n))
    vt[::17] *= 1e-3  # slow stars: some cannot pay their energy change
    vr[::17] *= 1e-3
    phi_oo = gen.normal(-1.0, 0.3, n)
    phi_on = phi_oo + gen.normal(0, 0.05, n)
    r_old = r_old_all[old_index[sl]]
    vr_ref, vt_ref, d_ref = correct_velocities_reference(r_all, m_all, offset, m, r_old, vr, vt,
                                                         phi_oo, phi_on)
    deficit = np.zeros(d_ref.size)
    correct_velocities(r_all, phi_all, offset, m, r_old_all, phi_at_old,
                       old_index[sl].astype(np.int64), vr, vt, phi_on - phi_oo, deficit)
    assert d_ref.sum() > 0  # the test covers the deficit path
    np.testing.assert_allclose(vr, vr_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(vt, vt_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(deficit, d_ref, rtol=1e-9, atol=1e-15)


def settle_reference(debts, kinetic, fraction):
    pay = np.zeros_like(debts)
    carry = 0.0
    for b in range(len(debts)):
        take = min(carry, fraction * kinetic[b])
        pay[b] = take
        carry = carry - take + debts[b]
    return pay, carry


def test_settle_debts_matches_reference_and_conserves():
    gen = np.random.default_rng(4)
    for _ in range(50):
        nb = int(gen.integers(1, 60))
        debts = np.where(gen.random(nb) < 0.2, gen.exponential(0.3, nb), 0.0)
        kinetic = gen.exponential(1.0, nb)
        pay, left = settle_debts(debts, kinetic, 0.8)
        rp, rl = settle_reference(debts, kinetic, 0.8)
        np.testing.assert_allclose(pay, rp, rtol=1e-14, atol=1e-300)
        assert left == pytest.approx(rl, rel=1e-12, abs=1e-15)
        assert pay.sum() + left == pytest.approx(debts.sum(), rel=1e-12, abs=1e-15)
        assert np.all(pay <= 0.8 * kinetic + 1e-15)
        # a debt is only paid by blocks further out
        if debts.sum() > 0:
            first = int(np.argmax(debts > 0))
            assert np.all(pay[: first + 1] == 0)


def test_block_sums_fixed_order():
    x = np.arange(45, dtype=float)
    np.testing.assert_array_equal(block_sums(x, 20), [x[:20].sum(), x[20:40].sum(), x[40:].sum()])


@pytest.mark.parametrize("n", [0, 1, 20, 45, 1003])
def test_block_kinetic_and_scale_blocks_equal_their_numpy_twins(n):
    """The deficit scan's fused kernels give numpy's bits: the blocks' kinetic energies of
    ``0.5 * m * (vr**2 + vt**2)``, and the velocities times the blocks' factors repeated per
    row (factors of exactly 1 skipped, a partial last block)."""
    gen = np.random.default_rng(n)
    m, vr, vt = gen.random(n) * 1e-5, gen.standard_normal(n), np.abs(gen.standard_normal(n))
    np.testing.assert_array_equal(block_kinetic(m, vr, vt, 20),
                                  block_sums(0.5 * m * (vr ** 2 + vt ** 2), 20))
    nb = (n + 19) // 20
    factor = np.where(gen.random(nb) < 0.5, 1.0, np.sqrt(1.0 - 0.3 * gen.random(nb)))
    want_r = vr * np.repeat(factor, 20)[:n]
    want_t = vt * np.repeat(factor, 20)[:n]
    scale_blocks(vr, vt, factor, 20)
    np.testing.assert_array_equal(vr.view(np.uint64), want_r.view(np.uint64))
    np.testing.assert_array_equal(vt.view(np.uint64), want_t.view(np.uint64))
