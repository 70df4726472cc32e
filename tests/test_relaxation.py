"""Relaxation kernels: the two-body deflection against a plain 3-D reference, time step bins."""

from __future__ import annotations

import numpy as np
import pytest

from physics.relaxation import bin_relaxation_times, relax_pairs, scatter_pair
from tests.conftest import rng_states


def scatter_reference(m1, m2, vr1, vt1, vr2, vt2, beta, phi, psi):
    """Plain numpy: rotate w = v1 - v2 by beta about a random axis perpendicular to it."""
    v1 = np.array([vt1, 0.0, vr1])
    v2 = np.array([vt2 * np.cos(phi), vt2 * np.sin(phi), vr2])
    w = v1 - v2
    wn = np.linalg.norm(w)
    # same perpendicular basis as the kernel: e1 = z x w-ish, e2 = w x e1
    e1 = np.array([w[1], -w[0], 0.0])
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(w / wn, e1)
    # kernel's w2 = (-wx wz, -wy wz, wp^2)/wp normalised; cross(w, e1) equals it up to sign
    e2 *= np.sign(e2[2]) if e2[2] != 0 else 1.0
    w_new = wn * (np.cos(beta) * w / wn + np.sin(beta) * (np.cos(psi) * e1 + np.sin(psi) * e2))
    dv = w_new - w
    n1 = v1 + m2 / (m1 + m2) * dv
    n2 = v2 - m1 / (m1 + m2) * dv
    return n1[2], np.hypot(n1[0], n1[1]), n2[2], np.hypot(n2[0], n2[1]), w, w_new


def test_scatter_pair_matches_reference_and_conserves():
    gen = np.random.default_rng(1)
    for _ in range(200):
        m1, m2 = gen.uniform(0.1, 2, 2)
        vr1, vr2 = gen.normal(size=2)
        vt1, vt2 = np.abs(gen.normal(size=2))
        beta, phi, psi = gen.uniform(0, np.pi / 2), gen.uniform(0, 2 * np.pi), gen.uniform(
            0, 2 * np.pi)
        got = scatter_pair(m1, m2, vr1, vt1, vr2, vt2, beta, phi, psi)
        ref = scatter_reference(m1, m2, vr1, vt1, vr2, vt2, beta, phi, psi)
        np.testing.assert_allclose(got, ref[:4], rtol=1e-10, atol=1e-12)
        # kinetic energy conserved, deflection angle is beta
        ke0 = m1 * (vr1 ** 2 + vt1 ** 2) + m2 * (vr2 ** 2 + vt2 ** 2)
        ke1 = m1 * (got[0] ** 2 + got[1] ** 2) + m2 * (got[2] ** 2 + got[3] ** 2)
        assert ke1 == pytest.approx(ke0, rel=1e-12)
        w, wn = ref[4], ref[5]
        ang = np.arccos(np.clip(w @ wn / (w @ w), -1, 1))
        assert ang == pytest.approx(beta, abs=1e-7)


def test_relax_pairs_conserves_pair_energy_and_draws_per_block(plummer_5k):
    st = plummer_5k
    r, m = st["r"], st["m"]
    vr, vt = st["vr"].copy(), st["vt"].copy()
    states = rng_states((r.size + 19) // 20)
    before = states.copy()
    ke0 = m * (vr ** 2 + vt ** 2)
    stats_ = np.zeros((states.shape[0], 2))
    relax_pairs(r, 0, m, vr, vt, states, 1e-3, 5000.0, 1.0, stats_)
    ke1 = m * (vr ** 2 + vt ** 2)
    pair0 = ke0[0::2] + ke0[1::2]
    pair1 = ke1[0::2] + ke1[1::2]
    np.testing.assert_allclose(pair1, pair0, rtol=1e-11)
    assert np.all(vt >= 0)
    assert not np.array_equal(vr, st["vr"])
    assert np.all(np.any(states != before, axis=1))
    assert 0 < stats_[:, 0].sum() / (r.size // 2) < np.pi / 2


def test_relaxation_time_of_bins(plummer_5k):
    """Central bins of a Plummer model: T from its analytic density and dispersion."""
    st = plummer_5k
    n0 = 5000.0
    t = bin_relaxation_times(st["r"], st["m"], st["vr"], st["vt"], n0, 1.0)
    assert t.shape == (250,)
    a = 3 * np.pi / 16
    # analytic for the bins between r = 0.2 and 0.4
    rmid = np.array([np.median(st["r"][20 * b:20 * b + 20]) for b in range(250)])
    sel = (rmid > 0.2) & (rmid < 0.4)
    nprime = 3 / (4 * np.pi * a ** 3) * (1 + rmid[sel] ** 2 / a ** 2) ** -2.5
    sigma3 = np.sqrt(3 / (6 * np.sqrt(rmid[sel] ** 2 + a ** 2)))
    w = 4 * sigma3 / np.sqrt(3 * np.pi)
    t_an = np.pi / 32 * w ** 3 / (4 * nprime)
    ratio = np.median(t[sel] / t_an)
    assert ratio == pytest.approx(1.0, rel=0.25)


@pytest.mark.parametrize("width", [1, 2, 3])
def test_window_minimum_from_rank_segments_is_the_whole_arrays(plummer_5k, width):
    """Each rank's minimum over the windows inside its blocks, with the windows straddling
    rank boundaries made from the gathered boundary blocks, is the minimum of all windows
    bit for bit, for any block layout (empty ranks, one block, a partial last block); a NaN
    window gives NaN as numpy's minimum does, and no window at all gives inf."""
    from parallel.decomposition import rank_bounds
    from physics.relaxation import (
        block_moments,
        window_boundary_counts,
        window_boundary_rows,
        window_min_inside,
        window_min_straddling,
        window_relaxation_times,
    )

    n = 4990  # a partial last block
    r, m = plummer_5k["r"][:n], plummer_5k["m"][:n] * 1.3
    vr, vt = plummer_5k["vr"][:n], plummer_5k["vt"][:n]
    n0 = float(n)

    def by_segments(moments, p):
        bounds = (rank_bounds(n, p) + 19) // 20  # blocks; the last one partial
        nb = moments.shape[0]
        inside, rows = [], []
        for k in range(p):
            mine = moments[bounds[k]:bounds[k + 1]]
            inside.append(window_min_inside(r, mine, int(bounds[k]), nb, n0, 0.9, width))
            rows.append(window_boundary_rows(mine, int(bounds[k]), nb, width))
            assert rows[-1].shape[0] <= 2 * (width - 1)
            # twin: every local block whose window leaves the local blocks, in order
            g = np.arange(bounds[k], bounds[k + 1])
            ws = (g // width) * width
            edge = (ws < bounds[k]) | (np.minimum(nb, ws + width) > bounds[k + 1])
            np.testing.assert_array_equal(rows[-1], np.column_stack((
                g[edge].astype(np.float64), mine[edge])).reshape(-1, 5))
        # every rank's count from the layout alone (the gather's sizes, not exchanged)
        counts = window_boundary_counts(bounds[:-1], np.diff(bounds), nb, width)
        assert counts.tolist() == [x.shape[0] for x in rows], (p, width)
        edge = np.ascontiguousarray(np.vstack(rows))
        return np.min(np.append(inside, window_min_straddling(r, edge, n0, 0.9, width)))

    moments = block_moments(m, vr, vt, n0)
    for p in (1, 2, 3, 5, 7, 60, 300):  # 300 ranks: most of them empty
        whole = window_relaxation_times(r, moments, n0, 0.9, width)
        assert by_segments(moments, p) == whole.min(), p
    # the shortest window straddles the boundary between ranks 0 and 1 of three (block 83)
    cold = moments.copy()
    cold[82:84, 1] *= 1e-3
    t = window_relaxation_times(r, cold, n0, 0.9, width)
    assert np.isfinite(t).all() and int(np.argmin(t)) == 82 // width
    assert by_segments(cold, 3) == t.min()
    if width > 1:  # only the straddling windows' rows hold it
        inside = [window_min_inside(r, cold[a:b], a, cold.shape[0], n0, 0.9, width)
                  for a, b in ((0, 83), (83, 166), (166, 250))]
        assert min(inside) > t.min()
    bad = moments.copy()
    bad[37, 1] = np.nan  # a NaN window propagates, whichever rank holds it
    for p in (1, 3, 7):
        assert np.isnan(by_segments(bad, p))
    empty = np.zeros((0, 4))
    assert window_min_inside(r, empty, 0, 0, n0, 0.9, width) == np.inf
    assert window_min_straddling(r, np.zeros((0, 5)), n0, 0.9, width) == np.inf


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_block_moments_equal_plain_loop(threads, plummer_5k):
    """The per-block moments (blocks on the threads) are a plain loop's sums in row order, bit
    for bit, with a partial last block and no stars at all."""
    import numba

    from physics.relaxation import block_moments

    n = 1003
    m = plummer_5k["m"][:n] * np.linspace(0.5, 1.5, n)
    vr, vt = plummer_5k["vr"][:n], plummer_5k["vt"][:n]
    n0 = 5000.0
    want = np.zeros(((n + 19) // 20, 4))
    for i in range(n):
        mm = float(m[i]) * n0
        row = want[i // 20]
        row += (1.0, 0.0, 0.0, 0.0)
        row[1] += mm * (float(vr[i]) * float(vr[i]) + float(vt[i]) * float(vt[i]))
        row[2] += mm * mm
        row[3] += mm
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        np.testing.assert_array_equal(block_moments(m, vr, vt, n0), want)
        assert block_moments(m[:0], vr[:0], vt[:0], n0).shape == (0, 4)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
