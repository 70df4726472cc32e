"""New orbits: turning points by a level search and radius sampling by rejection (sec. 2, step 5).

A star ``s`` with specific energy ``E`` and angular momentum ``J`` moves in the potential of all
*other* stars, ``phi_s(x) = phi(x) + m_s / max(x, r_s)`` (its own shell removed).  Inside the
interval between stars ``k`` and ``k+1`` that potential is ``A - B/x``, so
``Q(x) = 2E - 2 phi_s(x) - J^2/x^2`` becomes a quadratic in ``1/x`` and its roots are exact.

Sampling uses the change of variable ``x = (rmin+rmax)/2 + (rmax-rmin)/4 (3u - u^3)``,
``u`` in (-1, 1), under which ``g(u) = (dx/du)/|v_r|`` is finite at both turning points; a new
radius is accepted with probability ``g(u)/F(u)`` (von Neumann), ``u`` being drawn from the
density proportional to the linear envelope ``F(u)`` through 1.1 times the analytic end values
``g(+-1) = sqrt(3 (rmax-rmin) / |Q'(r_turn)|)``, each end raised to at least 0.6 of the larger
(the C code uses a constant 1.2 max(g(+-1)); this envelope needs 1.42 trials per star on a
Plummer model instead of 1.75 for the constant 1.1 max(g(+-1)), with no bound violations in
6e4 Plummer orbits).  A trial with
``g > F`` (a bound violation) raises the envelope and restarts the star, and is counted.

Random numbers: each 20-star block ``b`` draws from its own sub-stream ``states[b]`` in star
order, so results do not depend on the number of threads or MPI ranks.

One source, two targets: the per-block work (:func:`_orbit_block` and everything it calls,
down to :func:`parallel.rng.taus_uniform`) is written in the subset of Python that both
``numba.njit`` and ``numba.cuda.jit(device=True)`` compile -- scalars, tuples, arrays passed
in, ``math`` functions, no allocation -- and :mod:`physics.orbits_gpu` compiles the very same
functions for a GPU (one thread per 20-star block).  The CPU kernel runs the same per-star
functions in two phases per group of blocks (all turning points, then the draws:
:func:`new_orbits_rows_lut`); :func:`new_orbits_rows_blockwise`, one star at a time through
:func:`_orbit_block`, is its reference twin.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit, prange

from parallel.decomposition import MIN_CHUNK
from parallel.rng import taus_uniform, taus_uniform_z
from physics.potential import locate_radius, radius_lookup_table_threaded

#: Envelope factor over the end values of g(u).
F_FACTOR = 1.1
#: Lowest envelope end, as a fraction of the larger end value (guards orbits whose g rises
#: steeply away from a small end value).
ENVELOPE_FLOOR = 0.6
#: Trials after which a star's rejection sampling gives up (counted, radius drawn uniformly).
MAX_TRIALS = 100000

ORBIT_OK = 0
ORBIT_ESCAPED_UNBOUND = 1
ORBIT_ESCAPED_TIDAL = 2
#: Set by the caller before the kernel: the row already left (unbound before the orbits) and
#: stays in the arrays only so that they need not be copied; the kernel skips it, drawing
#: nothing, and the sort drops it.
ORBIT_REMOVED = 3


@njit(cache=True, inline="always")
def _interval_coeffs(lo, r, phi, mcum, s, ms, rs):
    """(A, B) of phi_s = A - B/x in the interval (r[lo], r[lo+1]); lo = -1 means (0, r[0])."""
    if lo < 0:
        a = phi[0]
        b = 0.0
    else:
        a = phi[lo] + mcum[lo] / r[lo]
        b = mcum[lo]
    if lo < s:
        a += ms / rs  # star inside its own shell: constant self term
    else:
        b -= ms  # outside its own shell: remove its mass from the enclosed mass
    return a, b


#: Branching factor of the search levels (every 16th, 256th, ... star's radius/potential);
#: a power of two, so that index arithmetic is shifts (an integer division costs ~40 cycles).
FANOUT_BITS = 4
FANOUT = 1 << FANOUT_BITS
#: Most entries scanned on the top search level.
TOP_ENTRIES = 128
#: Stars per bucket of the radius lookup table (:func:`physics.potential.radius_lookup_table`).
LOOKUP_PER_BUCKET = 4
#: Blocks per group of the orbit kernel's loop; a thread takes every T-th group (load balance).
ORBIT_GROUP = 16


@njit(cache=True)
def search_levels(r, phi):
    """Subsampled copies of (r, phi) for the turning-point search, coarsest level first.

    Level ``k`` holds every ``FANOUT**k``-th star (``k = K .. 1``, ``K`` the smallest with at
    most ``TOP_ENTRIES`` entries); the full arrays are the last level.  A search scans at most
    ``TOP_ENTRIES`` entries on the top level and at most ``FANOUT`` on each finer one: every
    scan reads contiguous memory with independent loads (vectorised by the compiler), where a
    bisection's dependent loads miss the cache one after the other (both turning points of a
    star: 0.33 instead of 0.47 microseconds at N = 1e5 near core collapse, one core).

    Returns
    -------
    lev_r, lev_phi : ndarray
        The levels concatenated.
    offsets, shifts : ndarray of int64
        Start of each level in ``lev_r`` and the log2 of its stride in stars.
    """
    n = r.shape[0]
    k = 0
    while (n + (1 << (k * FANOUT_BITS)) - 1) >> (k * FANOUT_BITS) > TOP_ENTRIES:
        k += 1
    shifts = np.empty(k, dtype=np.int64)
    offsets = np.empty(k, dtype=np.int64)
    total = 0
    for lev in range(k):
        shifts[lev] = (k - lev) * FANOUT_BITS
        offsets[lev] = total
        total += (n + (1 << shifts[lev]) - 1) >> shifts[lev]
    lev_r = np.empty(total)
    lev_phi = np.empty(total)
    for lev in range(k):
        sh = shifts[lev]
        for c in range((n + (1 << sh) - 1) >> sh):
            lev_r[offsets[lev] + c] = r[c << sh]
            lev_phi[offsets[lev] + c] = phi[c << sh]
    return lev_r, lev_phi, offsets, shifts


@njit(cache=True, inline="always")
def _turning_predicate(x, p, outside, c1, c2, j2):
    """Sign test of Q at a grid radius, multiplied by x^2 so that it needs no division.

    Inside the star (``outside`` False, x <= r_s): ``Q < 0``, i.e. ``(c1 - 2p) x^2 < J^2`` with
    ``c1 = 2E - 2 m_s / r_s``.  Outside (x >= r_s): ``Q >= 0``, i.e.
    ``((c1 - 2p) x - c2) x >= J^2`` with ``c1 = 2E``, ``c2 = 2 m_s``.
    """
    if outside:
        return ((c1 - 2.0 * p) * x - c2) * x >= j2
    return (c1 - 2.0 * p) * x * x < j2


@njit(cache=True, inline="always")
def _count_true(xs, ps, start, stop, outside, c1, c2, j2):
    """Number of indices in range(start, stop) where the predicate holds (``start >= 0``)."""
    # Unsigned indices: numba wraps a signed index that could be negative (i + n if i < 0),
    # which made LLVM vectorise this loop with gathers and run its <= 16-entry scans scalar;
    # with the unsigned index the loads are contiguous (search 0.26 -> 0.15 us per star).
    cnt = 0
    u0 = np.uint64(start)
    for i in range(stop - start):
        j = u0 + np.uint64(i)
        cnt += _turning_predicate(xs[j], ps[j], outside, c1, c2, j2)
    return cnt


@njit(cache=True, inline="always")
def _bisect_true(lo, hi, outside, r, phi, c1, c2, j2):
    """Plain bisection for the last index where the predicate holds (the fallback)."""
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if _turning_predicate(r[mid], phi[mid], outside, c1, c2, j2):
            lo = mid
        else:
            hi = mid
    return lo


@njit(cache=True, inline="always")
def _narrow(lo, hi, sh, off, lev_r, lev_phi, outside, c1, c2, j2):
    """One level of the search: narrow (lo, hi) to the stride-``2**sh`` entries around the
    sign change, from the count of entries where the predicate holds."""
    c_first = (lo >> sh) + 1  # -1 >> sh == -1
    c_last = (hi - 1) >> sh
    if c_first > c_last:
        return lo, hi
    cnt = _count_true(lev_r, lev_phi, off + c_first, off + c_last + 1, outside, c1, c2, j2)
    if cnt > 0:
        lo = (c_first + cnt - 1) << sh
    if c_first + cnt <= c_last:
        hi = (c_first + cnt) << sh
    return lo, hi


@njit(cache=True, inline="always")
def _checked(lo, lo0, hi0, outside, r, phi, c1, c2, j2):
    """``lo`` if the predicate holds there and not at ``lo + 1``, else a bisection's answer
    (should rounding have made the sign pattern non-monotonic)."""
    ok_lo = lo == lo0 or _turning_predicate(r[lo], phi[lo], outside, c1, c2, j2)
    ok_hi = lo + 1 >= hi0 or not _turning_predicate(r[lo + 1], phi[lo + 1], outside,
                                                     c1, c2, j2)
    if ok_lo and ok_hi:
        return lo
    return _bisect_true(lo0, hi0, outside, r, phi, c1, c2, j2)


@njit(cache=True, inline="always")
def _level_search(s, r, phi, lev_r, lev_phi, offsets, shifts, c1_in, c1_out, c2, j2,
                  bound):
    """Intervals holding the pericentre and the apocentre of star ``s``.

    The pericentre interval is the last index in [-1, s) where Q < 0, the apocentre interval
    the last in [s, n) where Q >= 0 (see :func:`_turning_predicate`).  The predicate changes
    sign once on each range (one turning point on each side of the star), so the count of
    entries where it holds locates the crossing on each level.  Both searches advance level
    by level together, so that their memory accesses overlap.  ``bound`` False skips the
    apocentre (unbound orbit).  ``lev_r, lev_phi, offsets, shifts``: :func:`search_levels`.
    """
    n = r.shape[0]
    lo_p, hi_p = -1, s
    lo_a, hi_a = s, n
    for lev in range(shifts.shape[0]):
        sh = shifts[lev]
        off = offsets[lev]
        lo_p, hi_p = _narrow(lo_p, hi_p, sh, off, lev_r, lev_phi, False, c1_in, 0.0, j2)
        if bound:
            lo_a, hi_a = _narrow(lo_a, hi_a, sh, off, lev_r, lev_phi, True, c1_out, c2, j2)
    lo_p = lo_p + _count_true(r, phi, lo_p + 1, hi_p, False, c1_in, 0.0, j2)
    if bound:
        lo_a = lo_a + _count_true(r, phi, lo_a + 1, hi_a, True, c1_out, c2, j2)
    return lo_p, lo_a


@njit(cache=True, inline="always")
def _turning_intervals(s, r, phi, lev_r, lev_phi, offsets, shifts, c1_in, c1_out, c2, j2,
                       bound):
    """:func:`_level_search`, its answers checked (bisection where a check fails)."""
    n = r.shape[0]
    lo_p, lo_a = _level_search(s, r, phi, lev_r, lev_phi, offsets, shifts, c1_in, c1_out, c2,
                               j2, bound)
    kmin = _checked(lo_p, -1, s, False, r, phi, c1_in, 0.0, j2)
    kmax = _checked(lo_a, s, n, True, r, phi, c1_out, c2, j2) if bound else n - 1
    return kmin, kmax


@njit(cache=True)
def turning_points(r, phi, mcum, s, ms, e, jang, levels=None):
    """Pericentre and apocentre of star ``s`` (exact roots of Q in the bracketing intervals).

    ``levels`` (from :func:`search_levels`, made here if not given) speed up the search.

    Returns
    -------
    rmin, rmax, kmin, kmax, dq_min, dq_max
        Turning radii, interval indices (``-1`` .. ``n-1``) holding them, and Q' there.
        ``rmax`` is ``inf`` for an unbound orbit (E >= 0).
    """
    levels = search_levels(r, phi) if levels is None else levels
    return _turning_points_lv(r, phi, mcum, s, ms, e, jang, levels[0], levels[1], levels[2],
                              levels[3])


@njit(cache=True, inline="always")
def _turning_points_lv(r, phi, mcum, s, ms, e, jang, lev_r, lev_phi, offsets, shifts):
    """:func:`turning_points` with the search levels given as four arrays (the device-side
    form: no allocation)."""
    n = r.shape[0]
    rs = r[s]
    j2 = jang * jang
    # pericentre: Q(r=0) < 0 <= Q(r_s); apocentre: Q(r_s) >= 0 > Q(r = inf) = 2E
    kmin, kmax = _turning_intervals(s, r, phi, lev_r, lev_phi, offsets, shifts,
                                    2.0 * e - 2.0 * ms / rs, 2.0 * e, 2.0 * ms, j2, e < 0.0)
    lo = kmin
    a, b = _interval_coeffs(lo, r, phi, mcum, s, ms, rs)
    c = e - a
    d = b * b + 2.0 * c * j2
    sq = math.sqrt(d) if d > 0.0 else 0.0
    if j2 == 0.0:
        rmin = 0.0
    elif b + sq > 0.0:
        rmin = j2 / (b + sq)
    else:
        rmin = math.sqrt(j2 / (2.0 * c)) if c > 0.0 else rs
    rlo = r[lo] if lo >= 0 else 0.0
    if rmin < rlo:
        rmin = rlo
    if rmin > rs:
        rmin = rs
    dq_min = (-2.0 * b / (rmin * rmin) + 2.0 * j2 / (rmin * rmin * rmin) if rmin > 0.0
              else math.inf)
    if e >= 0.0:
        return rmin, math.inf, kmin, n - 1, dq_min, 0.0
    lo = kmax
    a, b = _interval_coeffs(lo, r, phi, mcum, s, ms, rs)
    c = e - a
    if c >= 0.0:
        return rmin, math.inf, kmin, n - 1, dq_min, 0.0
    d = b * b + 2.0 * c * j2
    sq = math.sqrt(d) if d > 0.0 else 0.0
    rmax = (b + sq) / (-2.0 * c)
    if rmax < r[lo]:
        rmax = r[lo]
    if lo + 1 < n and rmax > r[lo + 1]:
        rmax = r[lo + 1]
    if rmax < rs:
        rmax = rs
    dq_max = -2.0 * b / (rmax * rmax) + 2.0 * j2 / (rmax * rmax * rmax)
    return rmin, rmax, kmin, kmax, dq_min, dq_max


@njit(cache=True, inline="always")
def _interval_lut(x, r, lut, lut_lo, lut_inv, kmin, hi_idx):
    """Interval index of radius x (as _interval_of), via the lookup table, within the orbit."""
    k = locate_radius(x, r, lut, lut_lo, lut_inv) - 1
    if k < kmin:
        k = kmin
    if k > hi_idx - 1:
        k = hi_idx - 1
    return k


@njit(cache=True)
def _sample_one(states, blk, r, phi, mcum, s, ms, e, jang, rmin, rmax, kmin, kmax,
                dq_min, dq_max, lut, lut_lo, lut_inv):
    """Sample a radius on the orbit; returns (x, vr, vt, phi_s(x), trials, violations)."""
    n = r.shape[0]
    rs = r[s]
    j2 = jang * jang
    width = rmax - rmin
    trials = 0
    violations = 0
    # A (nearly) circular orbit: the radial motion is negligible.
    if width <= 1e-13 * rmax or not (dq_min > 0.0) or not (dq_max < 0.0):
        x = rmin + width * taus_uniform(states, blk)
        k = _interval_lut(x, r, lut, lut_lo, lut_inv, kmin, kmax + 1 if kmax + 1 <= n else n)
        a, b = _interval_coeffs(k, r, phi, mcum, s, ms, rs)
        q = 2.0 * (e - a) + 2.0 * b / x - j2 / (x * x)
        vr = math.sqrt(q) if q > 0.0 else 0.0
        if taus_uniform(states, blk) < 0.5:
            vr = -vr
        return x, vr, jang / x, a - b / x, 1, 0
    g1 = math.sqrt(3.0 * width / dq_min)
    g2 = math.sqrt(3.0 * width / (-dq_max))
    # Envelope F(u) = ea + eb u through F_FACTOR times the end values; u is drawn from the
    # density proportional to F by inverting its CDF, then accepted with probability g/F.
    gmax = g1 if g1 > g2 else g2
    f1 = F_FACTOR * (g1 if g1 > ENVELOPE_FLOOR * gmax else ENVELOPE_FLOOR * gmax)
    f2 = F_FACTOR * (g2 if g2 > ENVELOPE_FLOOR * gmax else ENVELOPE_FLOOR * gmax)
    ea = 0.5 * (f1 + f2)
    eb = 0.5 * (f2 - f1)
    hi_idx = kmax + 1 if kmax + 1 <= n else n
    while True:
        trials += 1
        xu = taus_uniform(states, blk)
        c = ea - 0.5 * eb - 2.0 * ea * xu
        disc = ea * ea - 2.0 * eb * c
        if disc < 0.0:  # not max(): numba.cuda 0.68 mistypes max of two floats
            disc = 0.0
        u = -2.0 * c / (ea + math.sqrt(disc))
        if u < -1.0:
            u = -1.0
        elif u > 1.0:
            u = 1.0
        fbound = ea + eb * u
        y = fbound * taus_uniform(states, blk)
        x = 0.5 * (rmin + rmax) + 0.25 * width * (3.0 * u - u * u * u)
        k = _interval_lut(x, r, lut, lut_lo, lut_inv, kmin, hi_idx)
        a, b = _interval_coeffs(k, r, phi, mcum, s, ms, rs)
        inv_x = 1.0 / x
        q = 2.0 * (e - a) + (2.0 * b - j2 * inv_x) * inv_x
        if q <= 0.0:
            if trials >= MAX_TRIALS:
                break
            continue
        # g = dx/du / |v_r| = gnum / sqrt(q); tests multiplied by sqrt(q) need no division
        gnum = 0.75 * width * (1.0 - u * u)
        sq = math.sqrt(q)
        if gnum > fbound * sq:
            # The envelope was too low for this orbit: raise it and start again.
            violations += 1
            scale = 1.2 * gnum / (fbound * sq)
            ea *= scale
            eb *= scale
            continue
        if y * sq < gnum or trials >= MAX_TRIALS:
            break
    vr = math.sqrt(q) if q > 0.0 else 0.0
    if taus_uniform(states, blk) < 0.5:
        vr = -vr
    return x, vr, jang / x, a - b * inv_x, trials, violations


def block_rows(n: int, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(global index of each row, first row of each 20-star block) of ``n`` rows in the
    standard layout: row ``i`` is star ``offset + i`` and block ``b`` rows ``20b .. 20b+19``."""
    nb = (n + MIN_CHUNK - 1) // MIN_CHUNK
    gidx = np.arange(offset, offset + n, dtype=np.int64)
    block_start = np.minimum(np.arange(nb + 1, dtype=np.int64) * MIN_CHUNK, n)
    return gidx, block_start


def new_orbits(r_all, phi_all, mcum_all, offset, m, vr, vt, states, r_tidal,
               r_new, vr_new, vt_new, phi_oo, phi_on, status, counters, r_apo=None):
    """:func:`new_orbits_rows` for local stars in the standard layout (row ``i`` is star
    ``offset + i``, blocks of 20 rows)."""
    gidx, block_start = block_rows(m.shape[0], offset)
    if r_apo is None:
        r_apo = np.empty(m.shape[0])
    new_orbits_rows(r_all, phi_all, mcum_all, gidx, block_start, m, vr, vt, states, r_tidal,
                    r_new, vr_new, vt_new, phi_oo, phi_on, status, counters, r_apo)


def new_orbits_rows(r_all, phi_all, mcum_all, gidx, block_start, m, vr, vt, states, r_tidal,
                    r_new, vr_new, vt_new, phi_oo, phi_on, status, counters, r_apo):
    """Sample new orbits for the local stars (one kernel over all of them, on all threads).

    A row is an object at the radius of star ``gidx[row]`` of the replicated arrays; block
    ``b`` (sub-stream ``states[b]``) owns rows ``block_start[b] .. block_start[b+1] - 1``.
    Normally row ``i`` is star ``offset + i`` and blocks have 20 rows (:func:`new_orbits`);
    after strong encounters a block may hold more or fewer rows, the products of an
    encounter sitting at the radii of the stars that met.

    Parameters
    ----------
    r_all, phi_all, mcum_all : ndarray, shape (N,)
        Replicated sorted radii, potential and enclosed mass of all stars (old potential).
    gidx : ndarray of int64, shape (n,)
        Index in the replicated arrays of each row's radius.
    block_start : ndarray of int64, shape (nblocks + 1,)
        First row of each block, and ``n`` last.
    m, vr, vt : ndarray, shape (n,)
        Local masses and velocities after relaxation [Hénon units].
    states : ndarray of uint32, shape (nblocks, 4)
        Random sub-stream state of each block, advanced in place.
    r_tidal : float
        Stars whose apocentre exceeds it escape; ``<= 0`` disables the tidal cut.
    r_new, vr_new, vt_new : ndarray, shape (n,)
        Output radius and velocities; unchanged for escapers.
    phi_oo, phi_on : ndarray, shape (n,)
        Output potential (own shell removed) of the old potential at the old and new radius.
    status : ndarray of int8, shape (n,)
        In: ``ORBIT_REMOVED`` for rows to skip (their other outputs are undefined), anything
        else for the others.  Out: ``ORBIT_OK`` or an escape reason for the others.
    counters : ndarray of float64, shape (nblocks, 2)
        Per block: rejection trials and bound violations.
    r_apo : ndarray, shape (n,)
        Output apocentre of each row's orbit in the old potential (``inf`` if unbound): a
        shrinking tidal radius strips by it after the step's mass loss is known.
    """
    threads = numba.get_num_threads()
    lut, lut_lo, lut_inv = radius_lookup_table_threaded(r_all, LOOKUP_PER_BUCKET, threads)
    new_orbits_rows_lut(r_all, phi_all, mcum_all, gidx, block_start, m, vr, vt, states,
                        r_tidal, r_new, vr_new, vt_new, phi_oo, phi_on, status, counters, r_apo,
                        lut, lut_lo, lut_inv, threads)


@njit(cache=True, parallel=True)
def new_orbits_rows_lut(r_all, phi_all, mcum_all, gidx, block_start, m, vr, vt, states,
                        r_tidal, r_new, vr_new, vt_new, phi_oo, phi_on, status, counters, r_apo,
                        lut, lut_lo, lut_inv, nthreads):
    """:func:`new_orbits_rows` with the radius lookup table of ``r_all`` given
    (:func:`physics.potential.radius_lookup_table`'s three values): under MPI the ranks
    build it together (:func:`physics.potential.radius_lookup_entries`).  ``nthreads``:
    ``numba.get_num_threads()`` of the caller (an argument, not read here, so that the
    kernel stays in the on-disk cache); the bits do not depend on it.

    The same per-star work as :func:`_orbit_block` (the GPU's and
    :func:`new_orbits_rows_blockwise`'s), in two phases per group of blocks: first every
    row's turning points (:func:`_orbit_turning`: no random numbers, so the rows' searches are
    independent and the CPU overlaps their cache misses), then the draws, each block's rows
    in order from its stream, in two lanes that alternate one rejection trial at a time
    (:func:`_orbit_lane_step`): a trial is one chain of dependent operations (draws, square
    root, division, table lookup, loads, division, square root), and two independent chains
    side by side keep the core busy while each waits.  The same draws in the same order
    within each block, so the same bits.  N = 1e5: 0.336 -> 0.29 us per star on one thread,
    0.170 -> 0.146 on two (docs/performance.md, tenth sitting).
    """
    nblocks = states.shape[0]
    lev_r, lev_phi, offsets, shifts = search_levels(r_all, phi_all)
    # Each thread takes every T-th group of ORBIT_GROUP blocks instead of one contiguous share
    # of the radii, whose stars cost unevenly deep in core collapse (the kernel alone on two
    # threads, N = 1e5: 17.6-17.8 -> 16.6-17.3 ms in collapse, 17.2-17.4 -> 16.9 ms on a
    # Plummer model; in the whole step within the noise).  Groups, not single blocks, so that
    # threads do not write the same cache lines.  Each block draws from its own stream: the
    # bits do not depend on the threads.
    ngroups = (nblocks + ORBIT_GROUP - 1) // ORBIT_GROUP
    most = 1  # rows of the largest group (after encounters a block may hold more than 20)
    for g in range(ngroups):
        rows = block_start[min(nblocks, (g + 1) * ORBIT_GROUP)] - block_start[g * ORBIT_GROUP]
        if rows > most:
            most = rows
    # each thread's turning points of one group: rmin, dq_min, dq_max, E, J; kmin, kmax
    tp = np.empty((nthreads, most, 5))
    tk = np.empty((nthreads, most, 2), dtype=np.int64)
    for lane in prange(nthreads):
        for g in range(lane, ngroups, nthreads):
            b0 = g * ORBIT_GROUP
            b1 = min(nblocks, (g + 1) * ORBIT_GROUP)
            i0 = block_start[b0]
            for i in range(i0, block_start[b1]):
                ok, rmin, rmax, kmin, kmax, dqmin, dqmax, e, jang = _orbit_turning(
                    i, r_all, phi_all, mcum_all, lev_r, lev_phi, offsets, shifts, gidx, m, vr,
                    vt, r_tidal, r_new, phi_oo, phi_on, status, r_apo)
                if ok:
                    k = i - i0
                    tp[lane, k, 0] = rmin
                    tp[lane, k, 1] = dqmin
                    tp[lane, k, 2] = dqmax
                    tp[lane, k, 3] = e
                    tp[lane, k, 4] = jang
                    tk[lane, k, 0] = kmin
                    tk[lane, k, 1] = kmax
            # the draws: two lanes, the group's even and odd blocks, one trial of each in
            # turn, so that the two independent chains of dependent operations overlap
            tpl = tp[lane]
            tkl = tk[lane]
            ia, fa, za, on_a = _lane_start(b0, block_start, states)
            on_b = b0 + 1 < b1
            ib, fb, zb, _ = _lane_start(b0 + 1 if on_b else b0, block_start, states)
            while on_a or on_b:
                if on_a:
                    ia, fa, za, on_a = _orbit_lane_step(
                        ia, fa, za, r_all, phi_all, mcum_all, lut, lut_lo, lut_inv, gidx, m,
                        states, block_start, b1, status, r_new, vr_new, vt_new, phi_on, r_apo,
                        tpl, tkl, i0, counters)
                if on_b:
                    ib, fb, zb, on_b = _orbit_lane_step(
                        ib, fb, zb, r_all, phi_all, mcum_all, lut, lut_lo, lut_inv, gidx, m,
                        states, block_start, b1, status, r_new, vr_new, vt_new, phi_on, r_apo,
                        tpl, tkl, i0, counters)


@njit(cache=True, inline="always")
def _orbit_turning(i, r_all, phi_all, mcum_all, lev_r, lev_phi, offsets, shifts, gidx, m, vr,
                   vt, r_tidal, r_new, phi_oo, phi_on, status, r_apo):
    """Row ``i``'s work before its draws (:func:`_orbit_block` and the CPU kernel's first
    phase): energy, angular momentum and turning points, its status, and an escaper's outputs.
    Returns (to be drawn, rmin, rmax, kmin, kmax, dq_min, dq_max, E, J)."""
    if status[i] == ORBIT_REMOVED:
        return False, 0.0, 0.0, 0, 0, 0.0, 0.0, 0.0, 0.0
    s = gidx[i]
    rs = r_all[s]
    ms = m[i]
    pot = phi_all[s] + ms / rs
    e = pot + 0.5 * (vr[i] * vr[i] + vt[i] * vt[i])
    jang = rs * vt[i]
    phi_oo[i] = pot
    rmin, rmax, kmin, kmax, dqmin, dqmax = _turning_points_lv(
        r_all, phi_all, mcum_all, s, ms, e, jang, lev_r, lev_phi, offsets, shifts)
    r_apo[i] = rmax
    ok = True
    if not math.isfinite(rmax):
        status[i] = ORBIT_ESCAPED_UNBOUND
        ok = False
    elif r_tidal > 0.0 and rmax > r_tidal:
        status[i] = ORBIT_ESCAPED_TIDAL
        ok = False
    else:
        status[i] = ORBIT_OK
    if not ok:
        r_new[i] = rs
        phi_on[i] = pot
    return ok, rmin, rmax, kmin, kmax, dqmin, dqmax, e, jang


#: Blocks a lane of the draws moves on by: the kernel's two lanes take a group's even and odd
#: blocks.
LANES = 2


@njit(cache=True)
def _lane_start(blk, block_start, states):
    """A lane of :func:`_orbit_lane_step` at the start of block ``blk``: its integer and float
    state and the block's stream state (four words), and True."""
    ints = (blk, block_start[blk], block_start[blk + 1], 0, 0, 0, 0, 0, 0, 0)
    floats = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    z = (np.uint64(states[blk, 0]), np.uint64(states[blk, 1]), np.uint64(states[blk, 2]),
         np.uint64(states[blk, 3]))
    return ints, floats, z, True


@njit(cache=True, inline="always")
def _orbit_lane_step(ints, floats, z, r, phi, mcum, lut, lut_lo, lut_inv, gidx, m, states,
                     block_start, b_end, status, r_new, vr_new, vt_new, phi_on, r_apo, tp, tk,
                     i0, counters):
    """One step of a lane of the draws: start its next star (:func:`_sample_one` before its
    loop; a nearly circular orbit is drawn at once), or run one trial of its star (an
    iteration of that loop; the star's last draw, the sign of v_r, when it ends), or close
    its block and move to the lane's next one.  The operations and draws of
    :func:`_sample_one`, in the same order within a block, so the same bits.

    ``ints`` = (block, next row, end row, in a star, row, slot, kmin, hi_idx, trials,
    violations); ``floats`` = (m, r_s, E, J^2, J, rmin, rmax, width, ea, eb, the block's
    trials, its violations); ``z``: the block's stream state in registers (written back when
    the block closes).  ``tp``, ``tk``: :func:`_orbit_turning`'s results by row - ``i0``.
    Returns the lane's new state and whether it still has work.
    """
    blk, i, end, in_star, row, s, kmin, hi, trials, viol = ints
    ms, rs, e, j2, jang, rmin, rmax, width, ea, eb, btr, bvl = floats
    z1, z2, z3, z4 = z
    n = r.shape[0]
    if in_star == 0:
        while i < end and status[i] != ORBIT_OK:
            i += 1
        if i >= end:  # the block is done: its stream state and counters, then the next block
            states[blk, 0] = np.uint32(z1)
            states[blk, 1] = np.uint32(z2)
            states[blk, 2] = np.uint32(z3)
            states[blk, 3] = np.uint32(z4)
            counters[blk, 0] = btr
            counters[blk, 1] = bvl
            if blk + LANES >= b_end:
                return ints, floats, z, False
            return _lane_start(blk + LANES, block_start, states)
        row = i
        i += 1
        k = row - i0
        s = gidx[row]
        ms = m[row]
        rs = r[s]
        e = tp[k, 3]
        jang = tp[k, 4]
        rmin = tp[k, 0]
        rmax = r_apo[row]
        kmin = tk[k, 0]
        kmax = tk[k, 1]
        dq_min = tp[k, 1]
        dq_max = tp[k, 2]
        j2 = jang * jang
        width = rmax - rmin
        if width <= 1e-13 * rmax or not (dq_min > 0.0) or not (dq_max < 0.0):
            z1, z2, z3, z4, u1 = taus_uniform_z(z1, z2, z3, z4)
            x = rmin + width * u1
            kx = _interval_lut(x, r, lut, lut_lo, lut_inv, kmin, kmax + 1 if kmax + 1 <= n else n)
            a, b = _interval_coeffs(kx, r, phi, mcum, s, ms, rs)
            q = 2.0 * (e - a) + 2.0 * b / x - j2 / (x * x)
            vr = math.sqrt(q) if q > 0.0 else 0.0
            z1, z2, z3, z4, u2 = taus_uniform_z(z1, z2, z3, z4)
            if u2 < 0.5:
                vr = -vr
            r_new[row] = x
            vr_new[row] = vr
            vt_new[row] = jang / x
            phi_on[row] = a - b / x
            return ((blk, i, end, 0, row, s, kmin, hi, trials, viol),
                    (ms, rs, e, j2, jang, rmin, rmax, width, ea, eb, btr + 1.0, bvl),
                    (z1, z2, z3, z4), True)
        g1 = math.sqrt(3.0 * width / dq_min)
        g2 = math.sqrt(3.0 * width / (-dq_max))
        gmax = g1 if g1 > g2 else g2
        f1 = F_FACTOR * (g1 if g1 > ENVELOPE_FLOOR * gmax else ENVELOPE_FLOOR * gmax)
        f2 = F_FACTOR * (g2 if g2 > ENVELOPE_FLOOR * gmax else ENVELOPE_FLOOR * gmax)
        ea = 0.5 * (f1 + f2)
        eb = 0.5 * (f2 - f1)
        hi = kmax + 1 if kmax + 1 <= n else n
        return ((blk, i, end, 1, row, s, kmin, hi, 0, 0),
                (ms, rs, e, j2, jang, rmin, rmax, width, ea, eb, btr, bvl),
                (z1, z2, z3, z4), True)
    trials += 1
    z1, z2, z3, z4, xu = taus_uniform_z(z1, z2, z3, z4)
    c = ea - 0.5 * eb - 2.0 * ea * xu
    disc = ea * ea - 2.0 * eb * c
    if disc < 0.0:
        disc = 0.0
    u = -2.0 * c / (ea + math.sqrt(disc))
    if u < -1.0:
        u = -1.0
    elif u > 1.0:
        u = 1.0
    fbound = ea + eb * u
    z1, z2, z3, z4, uy = taus_uniform_z(z1, z2, z3, z4)
    y = fbound * uy
    x = 0.5 * (rmin + rmax) + 0.25 * width * (3.0 * u - u * u * u)
    kx = _interval_lut(x, r, lut, lut_lo, lut_inv, kmin, hi)
    a, b = _interval_coeffs(kx, r, phi, mcum, s, ms, rs)
    inv_x = 1.0 / x
    q = 2.0 * (e - a) + (2.0 * b - j2 * inv_x) * inv_x
    done = False
    if q <= 0.0:
        done = trials >= MAX_TRIALS
    else:
        gnum = 0.75 * width * (1.0 - u * u)
        sq = math.sqrt(q)
        if gnum > fbound * sq:  # the envelope was too low: raise it, go on drawing
            viol += 1
            scale = 1.2 * gnum / (fbound * sq)
            ea *= scale
            eb *= scale
        elif y * sq < gnum or trials >= MAX_TRIALS:
            done = True
    if done:
        vr = math.sqrt(q) if q > 0.0 else 0.0
        z1, z2, z3, z4, us = taus_uniform_z(z1, z2, z3, z4)
        if us < 0.5:
            vr = -vr
        r_new[row] = x
        vr_new[row] = vr
        vt_new[row] = jang / x
        phi_on[row] = a - b * inv_x
        btr += trials
        bvl += viol
        in_star = 0
    return ((blk, i, end, in_star, row, s, kmin, hi, trials, viol),
            (ms, rs, e, j2, jang, rmin, rmax, width, ea, eb, btr, bvl),
            (z1, z2, z3, z4), True)


@njit(cache=True, parallel=True)
def new_orbits_rows_blockwise(r_all, phi_all, mcum_all, gidx, block_start, m, vr, vt, states,
                              r_tidal, r_new, vr_new, vt_new, phi_oo, phi_on, status, counters,
                              r_apo, lut, lut_lo, lut_inv):
    """Reference twin of :func:`new_orbits_rows_lut`: :func:`_orbit_block` (the GPU's per-block
    work) once per block, one star at a time; the same bits (tested)."""
    lev_r, lev_phi, offsets, shifts = search_levels(r_all, phi_all)
    for blk in prange(states.shape[0]):
        _orbit_block(blk, r_all, phi_all, mcum_all, lev_r, lev_phi, offsets, shifts, lut,
                     lut_lo, lut_inv, gidx, block_start, m, vr, vt, states, r_tidal, r_new,
                     vr_new, vt_new, phi_oo, phi_on, status, counters, r_apo)


@njit(cache=True, inline="always")
def _orbit_block(blk, r_all, phi_all, mcum_all, lev_r, lev_phi, offsets, shifts, lut, lut_lo,
                 lut_inv, gidx, block_start, m, vr, vt, states, r_tidal, r_new, vr_new, vt_new,
                 phi_oo, phi_on, status, counters, r_apo):
    """New orbits of the rows of block ``blk`` (drawing from ``states[blk]``): the work of one
    CPU thread's loop iteration and of one GPU thread.  Arguments as :func:`new_orbits_rows`,
    with the radius lookup table (:func:`physics.potential.radius_lookup_table`) and the search
    levels (:func:`search_levels`) of ``r_all`` made by the caller."""
    i0 = block_start[blk]
    i1 = block_start[blk + 1]
    tr = 0.0
    viol = 0.0
    for i in range(i0, i1):
        ok, rmin, rmax, kmin, kmax, dqmin, dqmax, e, jang = _orbit_turning(
            i, r_all, phi_all, mcum_all, lev_r, lev_phi, offsets, shifts, gidx, m, vr, vt,
            r_tidal, r_new, phi_oo, phi_on, status, r_apo)
        if not ok:
            continue
        x, vr_i, vt_i, phi_x, trials, violations = _sample_one(
            states, blk, r_all, phi_all, mcum_all, gidx[i], m[i], e, jang, rmin, rmax, kmin,
            kmax, dqmin, dqmax, lut, lut_lo, lut_inv)
        r_new[i] = x
        vr_new[i] = vr_i
        vt_new[i] = vt_i
        phi_on[i] = phi_x
        tr += trials
        viol += violations
    counters[blk, 0] = tr
    counters[blk, 1] = viol


@njit(cache=True, parallel=True)
def specific_energies(r_all, phi_all, gidx, m, vr, vt):
    """Each row's specific energy ``phi_s + v^2/2`` at its slot (own shell removed), as the
    orbit kernel computes it; ``>= 0`` means unbound."""
    n = m.shape[0]
    e = np.empty(n)
    for i in prange(n):
        s = gidx[i]
        e[i] = phi_all[s] + m[i] / r_all[s] + 0.5 * (vr[i] * vr[i] + vt[i] * vt[i])
    return e
