"""Orbit kernel: turning points, conservation of E and J, the sampled radial distribution."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from physics.orbits import ORBIT_OK, _sample_one, new_orbits, turning_points
from physics.potential import (
    compute_potential,
    compute_potential_reference,
    potential_at_radius,
    radius_lookup_table,
)
from tests.conftest import rng_states


@pytest.mark.parametrize("per_bucket", [1, 4])
def test_locate_radius_matches_bisection(per_bucket):
    """The table lookup counts the stars with r <= x exactly (duplicates, 12 decades)."""
    from numba import njit

    from physics.potential import enclosing_index, locate_radius

    @njit
    def locate_all(r, xs, lut, f0, inv):
        return np.array([locate_radius(x, r, lut, f0, inv) for x in xs])

    gen = np.random.default_rng(11)
    r = np.sort(np.concatenate([10.0 ** gen.uniform(-8, 4, 5000), np.full(30, 0.5)]))
    r[100:110] = r[100]  # a run of equal radii
    lut = radius_lookup_table(r, per_bucket)
    xs = np.concatenate([r, np.nextafter(r, 0), np.nextafter(r, np.inf),
                         10.0 ** gen.uniform(-9, 5, 5000), [0.0, 1e-300, 1e300]])
    got = locate_all(r, xs, *lut)
    want = np.array([enclosing_index(r, x) for x in xs])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("per_bucket", [1, 4])
def test_lookup_table_entries_of_segments_are_the_table(per_bucket):
    """The entries each rank builds from its own stars (radius_lookup_entries), concatenated
    in rank order, are the whole table for any cut of the stars into segments: empty ones,
    one star, cuts inside a run of equal radii, 1-7 segments."""
    from physics.potential import radius_lookup_entries

    gen = np.random.default_rng(5)
    r = np.sort(np.concatenate([10.0 ** gen.uniform(-6, 3, 3000), np.full(40, 0.5)]))
    lut = radius_lookup_table(r, per_bucket)[0]
    n = r.size
    equal = int(np.searchsorted(r, 0.5)) + 5  # a cut between two equal radii
    cuts = [[0, n], [0, 0, n], [0, n, n], [0, 1, n], [0, equal, n], [0, 1500, 1500, n],
            [0, n - 1, n], [0, 0, 0, n, n]]
    cuts += [[0, *np.sort(gen.integers(0, n, p - 1)).tolist(), n] for p in range(2, 8)]
    for bounds in cuts:
        parts = [radius_lookup_entries(r, per_bucket, int(a), int(b))
                 for a, b in zip(bounds[:-1], bounds[1:])]
        np.testing.assert_array_equal(np.concatenate(parts), lut, err_msg=str(bounds))


def phi_self_removed(r, phi, mcum, s, m_s, x):
    """Reference: potential at x of all stars but s (plain Python, eq 6)."""
    return potential_at_radius(r, phi, mcum, x) + m_s / max(x, r[s])


def test_potential_matches_reference(plummer_5k):
    r, m = plummer_5k["r"], plummer_5k["m"]
    phi, mcum = compute_potential(r, m)
    phi_ref, mcum_ref = compute_potential_reference(r, m)
    np.testing.assert_allclose(phi, phi_ref, rtol=1e-12)
    np.testing.assert_allclose(mcum, mcum_ref, rtol=1e-12)
    # analytic Plummer potential (a = 3 pi / 16) in the bulk
    a = 3 * np.pi / 16
    bulk = (r > 0.1) & (r < 5)
    np.testing.assert_allclose(phi[bulk], -1 / np.sqrt(r[bulk] ** 2 + a ** 2), rtol=0.03)
    # interpolation is exact at the stars and continuous
    for k in (0, 10, 2500, 4999):
        assert potential_at_radius(r, phi, mcum, r[k]) == pytest.approx(phi[k], rel=1e-13)
    assert potential_at_radius(r, phi, mcum, 2 * r[-1]) == pytest.approx(-mcum[-1] / (2 * r[-1]))


@pytest.mark.parametrize("s", [3, 200, 2500, 4900])
def test_turning_points_against_root_finder(plummer_5k, s):
    r, m, vr, vt = (plummer_5k[k] for k in ("r", "m", "vr", "vt"))
    phi, mcum = compute_potential(r, m)
    e = phi[s] + m[s] / r[s] + 0.5 * (vr[s] ** 2 + vt[s] ** 2)
    j = r[s] * vt[s]

    def q(x):
        return 2 * e - 2 * phi_self_removed(r, phi, mcum, s, m[s], x) - j * j / (x * x)

    rmin, rmax, kmin, kmax, dqmin, dqmax = turning_points(r, phi, mcum, s, m[s], e, j)
    ref_min = optimize.brentq(q, 1e-12, r[s] * (1 - 1e-15) if q(r[s]) > 0 else r[s])
    ref_max = optimize.brentq(q, r[s], 1e3)
    assert rmin == pytest.approx(ref_min, rel=1e-9)
    assert rmax == pytest.approx(ref_max, rel=1e-9)
    assert rmin <= r[s] <= rmax
    assert dqmin > 0 > dqmax


def test_turning_search_matches_bisection(plummer_5k):
    """The level-count search (unchecked) finds the same intervals as plain bisection."""
    from physics.orbits import _bisect_true, _level_search, search_levels

    r, m, vr, vt = (plummer_5k[k] for k in ("r", "m", "vr", "vt"))
    phi, mcum = compute_potential(r, m)
    levels = search_levels(r, phi)
    assert levels[3].size >= 2  # the test exercises several levels
    n = r.size
    for s in range(0, n, 7):
        e = phi[s] + m[s] / r[s] + 0.5 * (vr[s] ** 2 + vt[s] ** 2)
        j2 = (r[s] * vt[s]) ** 2
        c_in, c_out, c2 = 2 * e - 2 * m[s] / r[s], 2 * e, 2 * m[s]
        kmin, kmax = _level_search(s, r, phi, *levels, c_in, c_out, c2, j2, e < 0)
        assert kmin == _bisect_true(-1, s, False, r, phi, c_in, 0.0, j2)
        assert kmax == _bisect_true(s, n, True, r, phi, c_out, c2, j2)


def _orbit_setup(plummer_5k, s):
    r, m, vr, vt = (plummer_5k[k] for k in ("r", "m", "vr", "vt"))
    phi, mcum = compute_potential(r, m)
    e = phi[s] + m[s] / r[s] + 0.5 * (vr[s] ** 2 + vt[s] ** 2)
    j = r[s] * vt[s]
    return r, m, phi, mcum, e, j


@pytest.mark.parametrize("s", [100, 2600])
def test_sampled_radii_follow_dt_over_T(plummer_5k, s):
    """Histogram of many samples of one orbit against the time fraction dr/|v_r| / T."""
    r, m, phi, mcum, e, j = _orbit_setup(plummer_5k, s)
    tp = turning_points(r, phi, mcum, s, m[s], e, j)
    rmin, rmax = tp[0], tp[1]
    states = rng_states(1, seed=5)
    lut = radius_lookup_table(r, 4)
    nsamp = 20000
    xs = np.empty(nsamp)
    viol = 0
    for i in range(nsamp):
        out = _sample_one(states, 0, r, phi, mcum, s, m[s], e, j, *tp, *lut)
        xs[i] = out[0]
        viol += out[5]
        # E and J are kept by the new position and velocities
        e_new = phi_self_removed(r, phi, mcum, s, m[s], out[0]) + 0.5 * (out[1] ** 2 + out[2] ** 2)
        assert e_new == pytest.approx(e, abs=1e-12)
        assert out[0] * out[2] == pytest.approx(j, rel=1e-12)
    assert viol == 0
    assert xs.min() >= rmin and xs.max() <= rmax

    def inv_vr(u):
        x = 0.5 * (rmin + rmax) + 0.25 * (rmax - rmin) * (3 * u - u ** 3)
        q = 2 * e - 2 * phi_self_removed(r, phi, mcum, s, m[s], x) - j * j / (x * x)
        return 0.75 * (rmax - rmin) * (1 - u * u) / np.sqrt(max(q, 1e-300))

    grid = np.linspace(-1, 1, 401)
    pieces = [integrate.quad(inv_vr, a, b)[0] for a, b in zip(grid[:-1], grid[1:])]
    cdf_u = np.concatenate([[0], np.cumsum(pieces)])
    cdf_u /= cdf_u[-1]
    x_grid = 0.5 * (rmin + rmax) + 0.25 * (rmax - rmin) * (3 * grid - grid ** 3)

    def cdf(x):
        return np.interp(x, x_grid, cdf_u)

    res = stats.kstest(xs, cdf)
    assert res.pvalue > 1e-3, res


def test_bisection_kernel_no_bound_violations(plummer_20k):
    """All stars of a Plummer model: no rejection-bound violations, radii within the orbit."""
    st = plummer_20k
    r, m, vr, vt = (st[k].copy() for k in ("r", "m", "vr", "vt"))
    n = r.size
    phi, mcum = compute_potential(r, m)
    states = rng_states((n + 19) // 20)
    r_new = np.empty(n)
    vr_new, vt_new = vr.copy(), vt.copy()
    poo, pon = np.empty(n), np.empty(n)
    status = np.zeros(n, dtype=np.int8)
    counters = np.zeros((states.shape[0], 2))
    new_orbits(r, phi, mcum, 0, m, vr, vt, states, 0.0, r_new, vr_new, vt_new, poo, pon,
               status, counters)
    ok = status == ORBIT_OK
    assert ok.sum() >= n - 5
    assert counters[:, 1].sum() == 0
    assert 1.0 <= counters[:, 0].sum() / ok.sum() < 3.0
    e = poo + 0.5 * (vr ** 2 + vt ** 2)
    e_new = pon + 0.5 * (vr_new ** 2 + vt_new ** 2)
    np.testing.assert_allclose(e_new[ok], e[ok], atol=1e-12)
    np.testing.assert_allclose((r_new * vt_new)[ok], (r * vt)[ok], rtol=1e-10)
    # the new radii are again a Plummer model: half-mass radius barely moves
    assert np.median(r_new[ok]) == pytest.approx(np.median(r), rel=0.03)


def test_orbit_kernel_thread_count_independent(plummer_5k):
    """Same states in, same numbers out, whatever the number of numba threads."""
    import numba

    st = plummer_5k
    r, m, vr, vt = (st[k] for k in ("r", "m", "vr", "vt"))
    n = r.size
    phi, mcum = compute_potential(r, m)
    results = []
    for threads in (1, numba.config.NUMBA_NUM_THREADS):
        numba.set_num_threads(threads)
        states = rng_states((n + 19) // 20)
        out = [np.empty(n), vr.copy(), vt.copy(), np.empty(n), np.empty(n)]
        status = np.zeros(n, dtype=np.int8)
        new_orbits(r, phi, mcum, 0, m, vr, vt, states, 0.0, *out, status,
                   np.zeros((states.shape[0], 2)))
        results.append((out, states))
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    for a, b in zip(results[0][0], results[1][0]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_orbit_kernel_skips_removed_rows(plummer_5k):
    """Rows preset to ORBIT_REMOVED (unbound before the orbits, left in the arrays instead of
    copied out) are skipped without a draw: the other rows get the same bits, and the blocks'
    streams the same states, as the kernel run on the table without them."""
    from physics.orbits import ORBIT_REMOVED, new_orbits_rows

    st = plummer_5k
    r, m, vr, vt = (st[k] for k in ("r", "m", "vr", "vt"))
    n = r.size
    phi, mcum = compute_potential(r, m)
    gidx = np.arange(n, dtype=np.int64)
    nb = (n + 19) // 20
    block_start = np.minimum(np.arange(nb + 1, dtype=np.int64) * 20, n)
    removed = np.zeros(n, dtype=bool)
    removed[[0, 7, 8, 19, 20, 2500, n - 1]] = True
    removed[40:60] = True  # a whole block
    keep = ~removed
    row_block = np.repeat(np.arange(nb), 20)[:n]

    def run(g, bs, mm, v_r, v_t, status):
        k = g.size
        states = rng_states(nb)
        out = [np.full(k, -7.0), v_r.copy(), v_t.copy(), np.full(k, -7.0), np.full(k, -7.0)]
        counters = np.zeros((nb, 2))
        r_apo = np.full(k, -7.0)
        new_orbits_rows(r, phi, mcum, g, bs, mm, v_r, v_t, states, 0.0, *out, status,
                        counters, r_apo)
        return out + [r_apo, status], states, counters

    status = np.zeros(n, dtype=np.int8)
    status[removed] = ORBIT_REMOVED
    full, s_full, c_full = run(gidx, block_start, m, vr, vt, status)
    bs_keep = np.searchsorted(row_block[keep], np.arange(nb + 1)).astype(np.int64)
    part, s_part, c_part = run(gidx[keep], bs_keep, m[keep], vr[keep], vt[keep],
                               np.zeros(keep.sum(), dtype=np.int8))
    for a, b in zip(full, part):
        np.testing.assert_array_equal(a[keep], b)
    np.testing.assert_array_equal(s_full, s_part)
    np.testing.assert_array_equal(c_full, c_part)
    assert np.all(full[-1][removed] == ORBIT_REMOVED)  # still marked for the sort


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_two_phase_kernel_equals_blockwise_twin(plummer_5k, threads):
    """The CPU kernel (turning points of a group of blocks first, then each block's draws)
    gives the bits of its reference twin, ``_orbit_block`` (the GPU's per-block work) one
    star at a time: every output, the streams' states and the counters, with removed rows,
    tidal and unbound escapers, and blocks of uneven size (as after strong encounters: empty,
    short, and one of 400 rows, more than a whole group of 20-row blocks), and nearly circular
    orbits (drawn without the rejection loop)."""
    import numba

    from physics.orbits import (
        LOOKUP_PER_BUCKET,
        ORBIT_REMOVED,
        _interval_coeffs,
        new_orbits_rows_blockwise,
        new_orbits_rows_lut,
        search_levels,
    )
    from physics.potential import radius_lookup_table

    st = plummer_5k
    r, m, vr, vt = (st[k] for k in ("r", "m", "vr", "vt"))
    n = r.size
    phi, mcum = compute_potential(r, m)
    vr, vt = vr.copy(), vt.copy()
    vr[[3, 900, 4000]] *= 4.0  # unbound
    gen = np.random.default_rng(5)
    gidx = np.sort(gen.integers(0, n, n)).astype(np.int64)  # rows at shared slots too
    # circular orbits (Q and Q' zero at the star's radius: the draws' shortcut), in several
    # blocks of both lanes
    levels = search_levels(r, phi)
    circular = []
    for row in range(100, n, 37):
        s_ = gidx[row]
        a_, b_ = _interval_coeffs(s_ - 1, r, phi, mcum, s_, m[row], r[s_])
        v_c = np.sqrt(b_ / r[s_])
        e_ = phi[s_] + m[row] / r[s_] + 0.5 * v_c ** 2
        tp = turning_points(r, phi, mcum, s_, m[row], e_, r[s_] * v_c, levels)
        if tp[1] - tp[0] <= 1e-13 * tp[1] or not tp[4] > 0.0 or not tp[5] < 0.0:
            vr[row], vt[row] = 0.0, v_c
            circular.append(row)
    assert len(circular) >= 10
    sizes = np.full(n // 20, 20)
    sizes[:6] = (0, 3, 37, 400, 1, 19)
    sizes = sizes[np.cumsum(sizes) <= n]
    block_start = np.concatenate(([0], np.cumsum(sizes), [n])).astype(np.int64)
    nb = block_start.size - 1
    lut = radius_lookup_table(r, LOOKUP_PER_BUCKET)
    r_tidal = float(np.quantile(r, 0.97))

    def run(kernel, extra):
        states = rng_states(nb)
        status = np.zeros(n, dtype=np.int8)
        status[[0, 5, 450, n - 1]] = ORBIT_REMOVED
        out = [np.full(n, -7.0), vr.copy(), vt.copy(), np.full(n, -7.0), np.full(n, -7.0)]
        counters = np.zeros((nb, 2))
        r_apo = np.full(n, -7.0)
        kernel(r, phi, mcum, gidx, block_start, m, vr, vt, states, r_tidal, *out, status,
               counters, r_apo, *lut, *extra)
        return out + [status, r_apo, states, counters]

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        got = run(new_orbits_rows_lut, (numba.get_num_threads(),))
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    want = run(new_orbits_rows_blockwise, ())
    assert {1, 2} <= set(np.unique(got[5]).tolist())  # escapers of both kinds
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def _blocked_potential(r: np.ndarray, m: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Plain numpy/Python twin of compute_potential's arithmetic, so its bits: the enclosed
    mass as a cumulative sum from 0 in each block of ``block`` rows plus the sum of the
    blocks before (those blocks' sums added in order); the increments; the final sum from
    the outermost star in, blocked the same way from the outermost block in."""
    n = r.size
    starts = np.arange(0, n, block)
    mcum = np.empty(n)
    off = 0.0
    for lo in starts:
        local = np.add.accumulate(m[lo:lo + block])
        mcum[lo:lo + block] = off + local
        off = off + local[-1]
    inv = 1.0 / r
    inc = np.empty(n)
    inc[:-1] = mcum[:-1] * (inv[:-1] - inv[1:])
    phi = np.empty(n)
    off = 0.0
    for lo in starts[::-1]:
        hi = min(n, lo + block)
        acc = 0.0
        for k in range(hi - 1, lo - 1, -1):
            acc = -mcum[k] / r[k] if k == n - 1 else acc - inc[k]
            phi[k] = off + acc
        off = off + acc
    return phi, mcum


def _chained_potential(r: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The potential summed without blocks (one running sum each way)."""
    mcum = np.add.accumulate(m)
    inv = 1.0 / r
    phi = np.empty_like(r)
    phi[:-1] = mcum[:-1] * (inv[:-1] - inv[1:])
    phi[-1] = -mcum[-1] / r[-1]
    for k in range(r.size - 2, -1, -1):
        phi[k] = phi[k + 1] - phi[k]
    return phi, mcum


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("n", [1, 2, 1023, 1024, 1025, 4097, 5000])
def test_potential_equals_its_plain_twin(n, threads):
    """compute_potential holds its blocked twin's bits on any number of threads; within one
    block (n <= POTENTIAL_BLOCK) that is the plain running sums', and with more blocks it
    stays within rounding of them (the blocks' sums are added in a different order)."""
    from physics.potential import POTENTIAL_BLOCK, compute_potential

    rng = np.random.default_rng(n)
    r = np.sort(rng.random(n) ** -0.6)
    m = rng.random(n) / n
    got = compute_potential(r, m, threads=threads)
    for a, b in zip(got, _blocked_potential(r, m, POTENTIAL_BLOCK), strict=True):
        np.testing.assert_array_equal(a, b)
    chained = _chained_potential(r, m)
    for a, b in zip(got, chained, strict=True):
        if n <= POTENTIAL_BLOCK:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=0)
    if n > POTENTIAL_BLOCK:  # the blocks do change the rounding (a test of the twin)
        assert not all(np.array_equal(a, b) for a, b in zip(got, chained, strict=True))


@pytest.mark.parametrize("n", [989, 999])
@pytest.mark.parametrize("parts", [1, 2, 3, 7, 16])
@pytest.mark.parametrize("first", [0, 1, 13, 500, 988, 998, 999])
def test_staged_potential_equals_its_plain_twin(parts, first, n):
    """The potential in stages over blocks of 13 rows, as the ranks of a node compute it (the
    blocks' mass totals, then their enclosed mass, increments and final-sum totals, then their
    final sum, each stage by ``parts`` shares of the blocks from ``first``'s on, in any
    order), holds the twin's bits from ``first``'s block on and leaves the rows inside alone;
    compute_potential_into (one pass each, from any block) and potential_threaded_into (the
    same shares on the threads) hold them too; n = 989 ends in a block of one row."""
    from parallel.shared import block_shares
    from physics.potential import (
        compute_potential_into,
        enclosed_mass_totals,
        potential_blocks_into,
        potential_suffix_blocks,
        potential_threaded_into,
    )

    block = 13
    rng = np.random.default_rng(parts * 1000 + first + n)
    first = min(first, n)
    r = np.sort(rng.random(n) ** -0.6)
    m = rng.random(n) / n
    want_phi, want_mcum = _blocked_potential(r, m, block)
    nb = (n + block - 1) // block
    bf = first // block
    lo = bf * block
    phi, mcum = np.full(n, np.nan), want_mcum.copy()
    mcum[lo:] = np.nan
    compute_potential_into(r, m, phi, mcum, first, block)
    np.testing.assert_array_equal(mcum, want_mcum)
    np.testing.assert_array_equal(phi[lo:], want_phi[lo:])
    assert np.isnan(phi[:lo]).all()
    phi, mcum = np.full(n, np.nan), want_mcum.copy()
    mcum[lo:] = np.nan
    potential_threaded_into(r, m, phi, mcum, parts, block, first)  # the threads' shares
    np.testing.assert_array_equal(mcum, want_mcum)
    np.testing.assert_array_equal(phi[lo:], want_phi[lo:])
    assert np.isnan(phi[:lo]).all()
    phi, mcum = np.full(n, np.nan), want_mcum.copy()
    mcum[lo:] = np.nan
    mass_totals, phi_totals = np.full(nb, np.nan), np.full(nb, np.nan)
    share = bf + block_shares(nb - bf, parts)
    for k in rng.permutation(parts):  # any order: the shares are independent
        enclosed_mass_totals(m, mass_totals, int(share[k]), int(share[k + 1]), block)
    for k in rng.permutation(parts):
        potential_blocks_into(r, m, phi, mcum, mass_totals, phi_totals, bf, int(share[k]),
                              int(share[k + 1]), block)
    for k in rng.permutation(parts):
        potential_suffix_blocks(phi, phi_totals, int(share[k]), int(share[k + 1]), nb, block)
    np.testing.assert_array_equal(mcum, want_mcum)
    np.testing.assert_array_equal(phi[lo:], want_phi[lo:])
    assert np.isnan(phi[:lo]).all()


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("first", [0, 1, 700, 1024, 1500, 5999, 6000])
def test_updated_potential_equals_a_full_recomputation(first, threads):
    """After the masses from star ``first`` on change (stars removed: zero mass; products
    heavier), the updated potential holds the full recomputation's bits from the first row of
    ``first``'s block on and its values inside to rounding (a constant shift), the enclosed
    mass its bits everywhere, on one thread or several; the inputs are not written."""
    from physics.potential import POTENTIAL_BLOCK, compute_potential, updated_potential

    rng = np.random.default_rng(first)
    n = 6000
    r = np.sort(rng.random(n) ** -0.6)
    m = rng.random(n) / n
    phi, mcum = compute_potential(r, m)
    saved = phi.copy(), mcum.copy()
    m2 = m.copy()
    if first < n:
        slots = np.unique(np.concatenate(([first], rng.integers(first, n, 5))))
        m2[slots] = np.where(rng.random(slots.size) < 0.5, 0.0, m2[slots] * 1.7)
    want_phi, want_mcum = compute_potential(r, m2)
    got_phi, got_mcum = updated_potential(r, m2, phi, mcum, first, threads=threads)
    lo = first // POTENTIAL_BLOCK * POTENTIAL_BLOCK
    np.testing.assert_array_equal(got_mcum, want_mcum)
    np.testing.assert_array_equal(got_phi[lo:], want_phi[lo:])
    np.testing.assert_allclose(got_phi[:lo], want_phi[:lo], rtol=1e-14, atol=0)
    if 0 < lo and first < n:  # the shells that changed did change the potential inside
        assert not np.allclose(phi[:lo], want_phi[:lo], rtol=1e-6, atol=0)
    np.testing.assert_array_equal(phi, saved[0])
    np.testing.assert_array_equal(mcum, saved[1])
