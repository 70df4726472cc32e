"""Two-body relaxation: shared time step from 20-star bins and representative encounters.

Units: masses in Hénon units (total initial mass 1), times in relaxation units
``t_NB * N0 / ln(gamma N0)``.  With ``m' = N0 m`` and ``n' = n / N0`` the deflection of a pair
over ``dt`` is (Hénon 1971; paper eq 7)

    beta^2 = 8 pi m12'^2 n' L dt / w^3,   L = ln(gamma N) / ln(gamma N0),

which is N-independent.  With ``T = (pi/32) w^3 / (m12'^2 n' L)``, ``beta = (pi/2) sqrt(dt/T)``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from parallel.decomposition import MIN_CHUNK
from parallel.rng import taus_uniform
from physics.binaries import strong_encounter_cross_section

#: Neighbours on each side for the local density of a pair (the C code's AVEKERNEL).
DENSITY_NEIGHBOURS = 20
#: Consecutive 20-star blocks in one time-step window when the caller gives none (the run's
#: window is ``run.dt_window``, default 40 stars as CMC-COSMIC's simul_relax_new, p = AVEKERNEL
#: = 20; the CMC paper's mpi_simul_relax_new took p = 10: docs/method.md, "Time step").
WINDOW_BLOCKS = 2
#: Stars per bin: the decomposition's block, so that pairs and bins never straddle ranks.
BIN = MIN_CHUNK
#: (85 pi sqrt(2) / 12)^(2/7): the gravitational-wave capture pericentre's constant (Quinlan &
#: Shapiro 1989, as CMC-COSMIC writes it).
GW_CAPTURE_RP = 2.6789966


@njit(cache=True)
def gw_capture_pericentre(m1, m2, w, clight):
    """Largest pericentre at which two black holes of masses ``m1``, ``m2`` meeting at relative
    speed ``w`` at infinity radiate their kinetic energy at infinity in gravitational waves
    on the first passage (Quinlan & Shapiro 1989; CMC-COSMIC's BH_CAPTURE; G = 1, ``clight``
    the speed of light in the same units): ``2.6789966 (m1 m2)^(2/7) (m1 + m2)^(3/7) /
    (w^(4/7) c^(10/7))``."""
    return (GW_CAPTURE_RP * (m1 * m2) ** (2.0 / 7.0) * (m1 + m2) ** (3.0 / 7.0)
            / (w ** (4.0 / 7.0) * clight ** (10.0 / 7.0)))


@njit(cache=True)
def local_number_density(r_all, g, n0, p=DENSITY_NEIGHBOURS):
    """``n'`` around global index ``g`` from ``2p`` radial neighbours (p = 20), per N0.

    The window keeps its width at the centre and the edge (it is shifted, as in the C code).
    """
    n = r_all.shape[0]
    lo = g - p
    hi = g + p
    if lo < 0:
        lo = 0
        hi = min(2 * p, n - 1)
    elif hi > n - 1:
        hi = n - 1
        lo = max(hi - 2 * p, 0)
    r_lo = r_all[lo] if lo > 0 else 0.0
    vol = 4.0 / 3.0 * np.pi * (r_all[hi] ** 3 - r_lo ** 3)
    count = hi - lo
    if vol <= 0.0 or count <= 0:
        return 0.0
    return count / (vol * n0)


@njit(cache=True, parallel=True)
def block_moments(m, vr, vt, n0):
    """Per 20-star block of the local stars: (number of stars, sum m' v^2, sum m'^2, sum m'),
    ``m' = N0 m`` (blocks on the threads, each summed in row order from 0.0: the same bits on
    any thread count)."""
    n = m.shape[0]
    nb = (n + BIN - 1) // BIN
    out = np.empty((nb, 4))
    for b in prange(nb):
        c = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for i in range(b * BIN, min(n, (b + 1) * BIN)):
            mm = m[i] * n0
            c += 1.0
            s1 += mm * (vr[i] * vr[i] + vt[i] * vt[i])
            s2 += mm * mm
            s3 += mm
        out[b, 0] = c
        out[b, 1] = s1
        out[b, 2] = s2
        out[b, 3] = s3
    return out


@njit(cache=True)
def window_relaxation_times(r_all, moments, n0, coulomb_ratio, width=WINDOW_BLOCKS):
    """Relaxation time of consecutive, non-overlapping windows of ``width`` blocks.

    ``T = (pi/32) w^3 / (4 <m'^2> n' L)`` with ``w = 4 sigma_3D / sqrt(3 pi)`` the mean relative
    speed of a Maxwellian (``sigma_3D^2 = sum m v^2 / sum m``, mass-weighted as in CMC's
    simul_relax_new) and ``n'`` = (stars in the window - 1) / (N0 x shell volume between
    its first and last star).  ``moments`` are the global per-block sums from
    :func:`block_moments` in block order; ``r_all`` the replicated radii.  Every rank gets the
    same numbers (no reduction needed).
    """
    nb = moments.shape[0]
    nw = (nb + width - 1) // width
    out = np.empty(nw)
    for wdx in range(nw):
        out[wdx] = _window_time(r_all, moments, wdx * width, min(nb, (wdx + 1) * width),
                                wdx * width * BIN, n0, coulomb_ratio)
    return out


@njit(cache=True)
def _window_time(r_all, moments, b0, b1, first, n0, coulomb_ratio):
    """T of one window: the blocks ``moments[b0:b1]`` (summed in order), whose first star is
    global star ``first`` (:func:`window_relaxation_times`)."""
    cnt = 0.0
    mv2 = 0.0
    m2 = 0.0
    m1 = 0.0
    for b in range(b0, b1):
        cnt += moments[b, 0]
        mv2 += moments[b, 1]
        m2 += moments[b, 2]
        m1 += moments[b, 3]
    last = min(r_all.shape[0], first + int(cnt)) - 1
    if cnt < 3.0 or mv2 <= 0.0 or m2 <= 0.0:
        return np.inf
    vol = 4.0 / 3.0 * np.pi * (r_all[last] ** 3 - r_all[first] ** 3)
    if vol <= 0.0:
        return np.inf
    nprime = (cnt - 1.0) / (vol * n0)
    w = 4.0 * np.sqrt(mv2 / m1) / np.sqrt(3.0 * np.pi)
    return np.pi / 32.0 * w ** 3 / (4.0 * (m2 / cnt) * nprime * coulomb_ratio)


@njit(cache=True)
def _nan_min(a, b):
    """min that keeps a NaN, as ``numpy.min`` of the whole array does."""
    if a != a or b != b:
        return np.nan
    return a if a <= b else b


@njit(cache=True)
def window_times_inside(r_all, moments, block0, nb_total, n0, coulomb_ratio, width):
    """The :func:`window_relaxation_times` values of the windows that lie wholly in the local
    blocks (global blocks ``block0 .. block0 + len(moments) - 1`` of ``nb_total``), and the
    global index of the first.  Each such window gets the whole-array function's operations,
    so any split over ranks gives the same windows and times, bit for bit."""
    end = block0 + moments.shape[0]
    first = (block0 + width - 1) // width  # the first window starting in the local blocks
    wdx = first
    while wdx * width < end and min(nb_total, (wdx + 1) * width) <= end:
        wdx += 1
    out = np.empty(wdx - first)
    for k in range(out.shape[0]):
        b0 = (first + k) * width
        out[k] = _window_time(r_all, moments, b0 - block0, min(nb_total, b0 + width) - block0,
                              b0 * BIN, n0, coulomb_ratio)
    return first, out


@njit(cache=True)
def window_min_inside(r_all, moments, block0, nb_total, n0, coulomb_ratio, width):
    """Smallest :func:`window_times_inside` value; ``inf`` if none, NaN if any is NaN (the
    minimum over the ranks' values and :func:`window_min_straddling`'s is the whole array's
    minimum, bit for bit)."""
    best = np.inf
    for t in window_times_inside(r_all, moments, block0, nb_total, n0, coulomb_ratio,
                                 width)[1]:
        best = _nan_min(best, t)
    return best


@njit(cache=True)
def _note_below(t, wdx, limits, last):
    """Time-step zones: ``last[z] = max(last[z], wdx)`` for each limit ``z`` that window
    ``wdx``'s time ``t`` is below (NaN counts as below)."""
    for z in range(limits.shape[0]):
        if not t >= limits[z] and wdx > last[z]:
            last[z] = wdx


@njit(cache=True)
def window_last_below_inside(r_all, moments, block0, nb_total, n0, coulomb_ratio, width,
                             limits, last):
    """Time-step zones: for each of ``limits`` (relaxation times), the largest global index
    of the windows of :func:`window_times_inside` whose time is below it, into ``last``
    (left as it is where none is)."""
    first, times = window_times_inside(r_all, moments, block0, nb_total, n0, coulomb_ratio,
                                       width)
    for k in range(times.shape[0]):
        _note_below(times[k], first + k, limits, last)


@njit(cache=True)
def window_times_straddling(r_all, rows, n0, coulomb_ratio, width):
    """The global indices and relaxation times of the windows made of the gathered boundary
    ``rows`` (:func:`window_boundary_rows` of every rank, in rank order: ascending global
    blocks)."""
    n = rows.shape[0]
    mom = np.ascontiguousarray(rows[:, 1:5])
    index = np.empty(n, dtype=np.int64)
    times = np.empty(n)
    count = 0
    i = 0
    while i < n:
        wdx = int(rows[i, 0]) // width
        j = i + 1
        while j < n and int(rows[j, 0]) // width == wdx:
            j += 1
        index[count] = wdx
        times[count] = _window_time(r_all, mom, i, j, wdx * width * BIN, n0, coulomb_ratio)
        count += 1
        i = j
    return index[:count], times[:count]


@njit(cache=True)
def window_last_below_straddling(r_all, rows, n0, coulomb_ratio, width, limits, last):
    """:func:`window_last_below_inside` for the windows of :func:`window_times_straddling`."""
    index, times = window_times_straddling(r_all, rows, n0, coulomb_ratio, width)
    for k in range(times.shape[0]):
        _note_below(times[k], index[k], limits, last)


def window_boundary_rows(moments: np.ndarray, block0: int, nb_total: int,
                         width: int) -> np.ndarray:
    """The local blocks whose window does not lie wholly in the local blocks, as rows
    ``(global block index, the block's four moments)``, shape (k, 5): what the neighbouring
    ranks need to evaluate the windows that straddle a rank boundary (at most ``2 (width - 1)``
    blocks per rank).

    Only the windows holding the first and the last local block can straddle the ends, so
    the rows are at most two runs at the ends, found from the layout (a mask over every
    local block cost 0.08 ms per step at N = 1e5 on two ranks)."""
    nloc = moments.shape[0]
    end = block0 + nloc
    runs = []
    first_window = -1
    for b in ((block0, end - 1) if nloc else ()):
        ws = (b // width) * width
        we = min(nb_total, ws + width)
        if ws == first_window or not (ws < block0 or we > end):
            continue
        first_window = ws
        runs.append(np.arange(max(ws, block0), min(we, end)))
    g = np.concatenate(runs) if runs else np.zeros(0, dtype=np.int64)
    return np.column_stack((g.astype(np.float64), moments[g - block0]))


def window_boundary_counts(block0: np.ndarray, nloc: np.ndarray, nb_total: int,
                           width: int) -> np.ndarray:
    """How many rows :func:`window_boundary_rows` gives for local blocks
    ``[block0, block0 + nloc)`` (arrays: one entry per rank), from the layout alone: only
    the windows holding a range's first and last block can straddle its ends.  Every rank
    knows every rank's count, so their gather needs no exchange of sizes."""
    block0 = np.asarray(block0, dtype=np.int64)
    nloc = np.asarray(nloc, dtype=np.int64)
    end = block0 + nloc
    out = np.zeros(block0.shape, dtype=np.int64)
    for first, last_block in ((True, block0), (False, end - 1)):
        ws = (last_block // width) * width
        we = np.minimum(nb_total, ws + width)
        edge = (nloc > 0) & ((ws < block0) | (we > end))
        if not first:  # the last block's window, unless it is the first block's
            edge &= ws != (block0 // width) * width
        out += np.where(edge, np.minimum(we, end) - np.maximum(ws, block0), 0)
    return out


@njit(cache=True)
def window_min_straddling(r_all, rows, n0, coulomb_ratio, width):
    """Smallest relaxation time over the windows of :func:`window_times_straddling`; ``inf``
    if none, NaN if any is NaN."""
    best = np.inf
    for t in window_times_straddling(r_all, rows, n0, coulomb_ratio, width)[1]:
        best = _nan_min(best, t)
    return best


def bin_relaxation_times(r, m, vr, vt, n0, coulomb_ratio, width=1):
    """Relaxation time of windows of ``width`` blocks of one set of stars (serial helper)."""
    return window_relaxation_times(np.ascontiguousarray(r), block_moments(m, vr, vt, n0),
                                   n0, coulomb_ratio, width)


@njit(cache=True)
def scatter_pair(m1, m2, vr1, vt1, vr2, vt2, beta, phi, psi):
    """Rotate the relative velocity of a pair by ``beta`` (azimuth ``psi``).

    The two transverse velocities are placed at angle ``phi`` to each other.  Momentum and
    kinetic energy of the pair are conserved exactly.  Returns (vr1, vt1, vr2, vt2).
    """
    return _scatter_pair_cs(m1, m2, vr1, vt1, vr2, vt2, beta, np.cos(phi), np.sin(phi), psi)


@njit(cache=True, inline="always")
def _scatter_pair_cs(m1, m2, vr1, vt1, vr2, vt2, beta, cos_phi, sin_phi, psi):
    """:func:`scatter_pair` given cos and sin of ``phi`` (the relaxation kernel has them
    already: two trigonometric calls fewer per pair, 8 % of the kernel)."""
    v1x = vt1
    v1y = 0.0
    v1z = vr1
    v2x = vt2 * cos_phi
    v2y = vt2 * sin_phi
    v2z = vr2
    wx = v1x - v2x
    wy = v1y - v2y
    wz = v1z - v2z
    w = np.sqrt(wx * wx + wy * wy + wz * wz)
    if w == 0.0:
        return vr1, vt1, vr2, vt2
    # two unit vectors perpendicular to w
    wp = np.sqrt(wx * wx + wy * wy)
    if wp > 0.0:
        w1x = wy * w / wp
        w1y = -wx * w / wp
        w1z = 0.0
        w2x = -wx * wz / wp
        w2y = -wy * wz / wp
        w2z = wp
    else:
        w1x = w
        w1y = 0.0
        w1z = 0.0
        w2x = 0.0
        w2y = w
        w2z = 0.0
    # w1, w2 have length w; new relative velocity w cos(beta) + sin(beta) (w1 cos + w2 sin)
    cb = np.cos(beta)
    sb = np.sin(beta)
    cp = np.cos(psi)
    sp = np.sin(psi)
    nwx = wx * cb + sb * (w1x * cp + w2x * sp)
    nwy = wy * cb + sb * (w1y * cp + w2y * sp)
    nwz = wz * cb + sb * (w1z * cp + w2z * sp)
    mt = m1 + m2
    dx = nwx - wx
    dy = nwy - wy
    dz = nwz - wz
    f1 = m2 / mt
    f2 = m1 / mt
    n1x = v1x + f1 * dx
    n1y = v1y + f1 * dy
    n1z = v1z + f1 * dz
    n2x = v2x - f2 * dx
    n2y = v2y - f2 * dy
    n2z = v2z - f2 * dz
    return n1z, np.sqrt(n1x * n1x + n1y * n1y), n2z, np.sqrt(n2x * n2x + n2y * n2y)


@njit(cache=True, inline="always")
def _relax_pair(r_all, g, m, vr, vt, i, j, phi, psi, dt, n0, coulomb_ratio):
    """Deflect pair (i, j) (local rows; ``g`` the global index of j) over ``dt`` in place.

    Returns (beta, capped): the deflection and 1.0 if it was capped at pi/2 (0.0 otherwise);
    beta = -1 when the pair has no relative motion.
    """
    # relative speed with the same phi used for the scattering geometry
    cos_phi = np.cos(phi)
    sin_phi = np.sin(phi)
    dx = vt[i] - vt[j] * cos_phi
    dy = -vt[j] * sin_phi
    dz = vr[i] - vr[j]
    w = np.sqrt(dx * dx + dy * dy + dz * dz)
    if w == 0.0:
        return -1.0, 0.0
    npr = local_number_density(r_all, g, n0)
    m12 = (m[i] + m[j]) * n0
    beta2 = 8.0 * np.pi * m12 * m12 * npr * coulomb_ratio * dt / (w * w * w)
    beta = np.sqrt(beta2)
    capped = 0.0
    if beta > 0.5 * np.pi:
        beta = 0.5 * np.pi
        capped = 1.0
    a, c, d, e = _scatter_pair_cs(m[i], m[j], vr[i], vt[i], vr[j], vt[j], beta, cos_phi,
                                  sin_phi, psi)
    vr[i] = a
    vt[i] = c
    vr[j] = d
    vt[j] = e
    return beta, capped


@njit(cache=True, parallel=True)
def relax_pairs(r_all, offset, m, vr, vt, states, dt, n0, coulomb_ratio, beta_stats,
                dt_ratio=None, due=None):
    """Apply one representative encounter to each radial-neighbour pair (in place).

    Pairs are local stars (2i, 2i+1) inside each 20-star block, so a pair never straddles a
    block or an MPI rank; an odd last star is left alone.  Two random numbers per pair (the
    angle between the transverse velocities and the azimuth of the deflection), drawn from
    the block's sub-stream.

    Parameters
    ----------
    r_all : ndarray
        Replicated sorted radii of all stars.
    offset : int
        Global index of local star 0.
    m, vr, vt : ndarray
        Local masses and velocities; ``vr`` and ``vt`` are updated.
    states : ndarray of uint32, shape (nblocks, 4)
        Sub-stream state per block.
    dt : float
        Time step [relaxation units].
    n0 : float
        Initial number of stars (unit conversion).
    coulomb_ratio : float
        ``ln(gamma N) / ln(gamma N0)``.
    beta_stats : ndarray, shape (nblocks, 2)
        Output per block: sum of beta, number of pairs with beta capped at pi/2.
    dt_ratio : ndarray, optional
        Time-step zones: each row's own step over ``dt`` (the time since its last step); a
        pair is relaxed for ``dt`` times the mean of its two rows' ratios.  None (the
        default): every pair for ``dt``.
    due : ndarray of bool, optional
        Time-step zones: the rows due this step; a pair with neither due is skipped (draws
        nothing).  None (the default): every pair.
    """
    n = m.shape[0]
    nb = states.shape[0]
    for b in prange(nb):
        i0 = b * BIN
        i1 = min(i0 + BIN, n)
        bsum = 0.0
        capped = 0.0
        for i in range(i0, i1 - 1, 2):
            if due is not None:
                if not (due[i] or due[i + 1]):
                    continue
            phi = 2.0 * np.pi * taus_uniform(states, b)
            psi = 2.0 * np.pi * taus_uniform(states, b)
            dtp = dt
            if dt_ratio is not None:
                dtp = dt * (0.5 * (dt_ratio[i] + dt_ratio[i + 1]))
            beta, cap = _relax_pair(r_all, offset + i, m, vr, vt, i, i + 1, phi, psi, dtp,
                                    n0, coulomb_ratio)
            if beta >= 0.0:
                bsum += beta
                capped += cap
        beta_stats[b, 0] = bsum
        beta_stats[b, 1] = capped


@njit(cache=True, inline="always")
def _tally(p, n_p1, p_max):
    """The block's count of pairs with P >= 1 and its largest P, with this pair's ``p``."""
    if p >= 1.0:
        n_p1 += 1.0
    if p > p_max:
        p_max = p
    return n_p1, p_max


@njit(cache=True, inline="always")
def _selected(u, p, k, phi, w, encounter, enc_phi, enc_w):
    """Pair ``k`` meets in a strong encounter or collision when its uniform ``u`` is below its
    probability ``p``: then flagged, with its phi and relative speed W."""
    if u < p:
        encounter[k] = True
        enc_phi[k] = phi
        enc_w[k] = w
        return True
    return False


@njit(cache=True, parallel=True)
def relax_or_select_pairs(r_all, offset, m, vr, vt, bin_a, is_binary, wide, states, dt, n0,
                          coulomb_ratio, dt_nb, x_bs, x_bb, bs_on, bb_on, beta_stats,
                          encounter, enc_phi, enc_w, p_stats, coll_rad=None, is_bh=None,
                          clight=0.0, dt_ratio=None, due=None):
    """:func:`relax_pairs` for a cluster with binaries: a pair holding a binary may instead
    have a strong encounter (the paper's section 2, CMC's ``dynamics_apply``).

    A pair draws phi and psi as in :func:`relax_pairs`; a pair with a binary then draws one
    more uniform ``u`` and has a strong encounter when ``u < P``,
    ``P = n W S dt_nb`` with ``n`` the local number density (N-body units), ``W`` the
    relative speed at the drawn phi, ``S = pi r_p^2 (1 + 2 (m_i + m_j) / (r_p W^2))`` and
    ``r_p = x_bs a`` (binary-single) or ``x_bb (a_i + a_j)`` (binary-binary); otherwise it
    relaxes.  A pair that has an encounter keeps its velocities here (the caller runs the
    encounter after this kernel, drawing from the same block stream).

    Extra parameters
    ----------------
    bin_a : ndarray
        Semi-major axis of each local binary (any value for singles).
    is_binary : ndarray of bool
        Binaries that may meet another object (the wide ones excluded).
    wide : ndarray of bool
        Binaries broken this step (:func:`physics.encounter_selection.select_wide_binaries`): a pair
        holding one relaxes and never has an encounter (CMC breaks them before its
        encounters), also when its partner is a binary that may meet.
    dt_nb : float
        The step in N-body time units (``dt N0 / ln(gamma N0)``).
    x_bs, x_bb : float
        Pericentre caps in units of a (CMC's XBS, XBB: 2).
    bs_on, bb_on : bool
        Whether binary-single / binary-binary encounters happen.
    encounter : ndarray of bool, shape (n // 2 + 1,)
        Out: pair ``k`` (rows 2k, 2k+1 of the local stars) has an encounter.
    enc_phi, enc_w : ndarray, shape (n // 2 + 1,)
        Out: its phi and relative speed W.
    p_stats : ndarray, shape (nblocks, 3)
        Out per block: pairs with a binary, pairs with P >= 1, largest P (collisions
        included in the last two).
    coll_rad : ndarray, optional
        Each row's sticky-sphere radius [N-body length] for single-single collisions (CMC's
        COLL_FACTOR times the stellar radius); None (the default): no collisions, and single
        pairs draw nothing more.
    is_bh : ndarray of bool, optional
        Single black holes (with ``clight`` > 0: CMC's BH_CAPTURE): a pair of two is tested
        (with ``coll_rad`` given, its radii 0 or not) with ``S = max(S_coll, S_cap)``, S_cap
        the focused cross section of :func:`gw_capture_pericentre`.  None (the default): no
        capture.
    clight : float
        The speed of light [N-body velocity]; 0 (the default): no capture.
    dt_ratio : ndarray, optional
        Time-step zones (:func:`relax_pairs`): a pair's relaxation and its encounter
        probability take ``dt`` and ``dt_nb`` times the mean of its rows' ratios.
    due : ndarray of bool, optional
        Time-step zones (:func:`relax_pairs`): a pair with neither row due is skipped.
    """
    n = m.shape[0]
    nb = states.shape[0]
    for b in prange(nb):
        i0 = b * BIN
        i1 = min(i0 + BIN, n)
        bsum = 0.0
        capped = 0.0
        n_bin_pairs = 0.0
        n_p1 = 0.0
        p_max = 0.0
        for i in range(i0, i1 - 1, 2):
            j = i + 1
            k = i // 2
            encounter[k] = False
            if due is not None:
                if not (due[i] or due[j]):
                    continue
            phi = 2.0 * np.pi * taus_uniform(states, b)
            psi = 2.0 * np.pi * taus_uniform(states, b)
            dtp = dt
            f = 1.0
            if dt_ratio is not None:
                f = 0.5 * (dt_ratio[i] + dt_ratio[j])
                dtp = dt * f
            if is_binary[i] or is_binary[j]:
                n_bin_pairs += 1.0
                u = taus_uniform(states, b)
                both = is_binary[i] and is_binary[j]
                on = bb_on if both else bs_on
                dx = vt[i] - vt[j] * np.cos(phi)
                dy = -vt[j] * np.sin(phi)
                dz = vr[i] - vr[j]
                w = np.sqrt(dx * dx + dy * dy + dz * dz)
                # a pair with a binary that is broken this step relaxes: the encounter would
                # treat that binary as whole, and its break afterwards would split a product
                if on and w > 0.0 and not (wide[i] or wide[j]):
                    if both:
                        rp = x_bb * (bin_a[i] + bin_a[j])
                    else:
                        rp = x_bs * (bin_a[i] if is_binary[i] else bin_a[j])
                    dens = local_number_density(r_all, offset + i, n0) * n0
                    p = dens * w * strong_encounter_cross_section(rp, m[i] + m[j], w) * dt_nb
                    if dt_ratio is not None:
                        p *= f
                    n_p1, p_max = _tally(p, n_p1, p_max)
                    if _selected(u, p, k, phi, w, encounter, enc_phi, enc_w):
                        continue
            elif coll_rad is not None and not (wide[i] or wide[j]):
                rp = coll_rad[i] + coll_rad[j]
                cap = False  # two single black holes that may capture each other
                if is_bh is not None:
                    if clight > 0.0:
                        cap = is_bh[i] and is_bh[j]
                if rp > 0.0 or cap:  # two stars with radii (sticky spheres), or two BHs
                    u = taus_uniform(states, b)
                    dx = vt[i] - vt[j] * np.cos(phi)
                    dy = -vt[j] * np.sin(phi)
                    dz = vr[i] - vr[j]
                    w = np.sqrt(dx * dx + dy * dy + dz * dz)
                    if w > 0.0:
                        dens = local_number_density(r_all, offset + i, n0) * n0
                        s = 0.0
                        if rp > 0.0:
                            s = strong_encounter_cross_section(rp, m[i] + m[j], w)
                        if cap:
                            s_cap = strong_encounter_cross_section(
                                gw_capture_pericentre(m[i], m[j], w, clight), m[i] + m[j], w)
                            if s_cap > s:
                                s = s_cap
                        p = dens * w * s * dt_nb
                        if dt_ratio is not None:
                            p *= f
                        n_p1, p_max = _tally(p, n_p1, p_max)
                        if _selected(u, p, k, phi, w, encounter, enc_phi, enc_w):
                            continue
            beta, cap = _relax_pair(r_all, offset + i, m, vr, vt, i, j, phi, psi, dtp, n0,
                                    coulomb_ratio)
            if beta >= 0.0:
                bsum += beta
                capped += cap
        beta_stats[b, 0] = bsum
        beta_stats[b, 1] = capped
        p_stats[b, 0] = n_bin_pairs
        p_stats[b, 1] = n_p1
        p_stats[b, 2] = p_max
