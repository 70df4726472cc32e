"""Spherical potential of a radially sorted set of stars (paper eqs 1-6).

Stars are shells. With stars sorted by radius, ``phi[k]`` is the potential at ``r[k]`` and
``mcum[k]`` the mass of stars ``0..k`` (star ``k`` included).  Between stars ``k`` and ``k+1``
the potential is ``phi[k] + mcum[k] * (1/r[k] - 1/r)`` (eq 6 written as a + b/r); inside the
innermost star it is constant, beyond the outermost ``-M/r``.  The star's own shell is part of
``phi``; kernels that need the potential a star moves in add back ``m_s / max(r, r_s)``.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

#: Rows per block of the potential's two running sums.  Each sum runs inside fixed blocks of
#: the global order from 0, and the blocks' totals are chained in order (below): the blocks
#: are the same for any number of ranks or threads, so the sums are too, and the ranks of a
#: node (or the threads of one process) each sum their own blocks.
POTENTIAL_BLOCK = 1024


def compute_potential(r: np.ndarray, m: np.ndarray, threads: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Potential at every star and cumulative mass (eqs 2-5), G = 1.

    Parameters
    ----------
    r : ndarray of float64, shape (N,)
        Radii sorted increasingly [Hénon length].
    m : ndarray of float64, shape (N,)
        Masses [Hénon mass].
    threads : int, optional
        Threads for the blocks (default ``numba.get_num_threads()``); the same bits for any.

    Returns
    -------
    phi : ndarray, shape (N,)
        Potential at each star [Hénon energy per unit mass].
    mcum : ndarray, shape (N,)
        Mass enclosed by each star, itself included.
    """
    n = r.shape[0]
    phi = np.empty(n)
    mcum = np.empty(n)
    potential_from(r, m, phi, mcum, 0, POTENTIAL_BLOCK, _chunks(n, 0, POTENTIAL_BLOCK, threads))
    return phi, mcum


# The potential in three stages: the enclosed mass and the final sum are running sums, the
# increments between them independent (vectorised: one division per star, none on the final
# sum's dependency chain).  Each running sum is blocked: inside block b it runs from 0 and the
# value written is the block's offset plus it; the offset of the next block is this offset
# plus the block's total, so that the row where a block's sum ends (its last row for the
# enclosed mass, its first for the potential, summed inward) holds exactly the next block's
# offset (the sum restarts from any block with the bits of the whole), and a
# block's total can be summed apart from the writes (``*_totals``), which lets the ranks of a
# node (parallel.shared.NodeReplicas) or the threads each take a share of the blocks.  The
# final sum's outermost block starts from phi[N - 1] with offset 0: there it is the plain
# chain.  updated_potential runs the stages from the innermost changed block on.
# (The loops run over views of one block from 0: with row indices from a variable start numba
# cannot tell they are not negative, and the wrap-around selects made the sums 1.5x slower.)
@njit(cache=True)
def enclosed_mass_totals(m: np.ndarray, totals: np.ndarray, b0: int, b1: int,
                         block: int) -> None:
    """``totals[b]``: the masses of block ``b`` summed in order from 0, for ``b0 <= b < b1``
    [Hénon mass]."""
    n = m.shape[0]
    for b in range(b0, b1):
        mb = m[b * block:min(n, (b + 1) * block)]
        acc = 0.0
        for k in range(mb.shape[0]):
            acc += mb[k]
        totals[b] = acc


@njit(cache=True)
def enclosed_mass_blocks(m: np.ndarray, mcum: np.ndarray, totals: np.ndarray, bf: int, b0: int,
                         b1: int, block: int) -> None:
    """``mcum`` of blocks ``b0 <= b < b1``: the offset (``mcum`` at the last row of block
    ``bf - 1``, 0 for ``bf = 0``, plus ``totals`` of blocks ``bf .. b0 - 1`` in order) plus the
    block's running sum [Hénon mass].  ``totals`` is read only where ``b0 > bf``."""
    n = m.shape[0]
    off = mcum[bf * block - 1] if bf > 0 else 0.0
    for b in range(bf, b0):
        off += totals[b]
    for b in range(b0, b1):
        lo = b * block
        mb = m[lo:min(n, lo + block)]
        cb = mcum[lo:min(n, lo + block)]
        acc = 0.0
        for k in range(mb.shape[0]):
            acc += mb[k]
            cb[k] = off + acc
        off += acc


@njit(cache=True)
def potential_increments_into(r: np.ndarray, mcum: np.ndarray, phi: np.ndarray, lo: int,
                              hi: int) -> None:
    """Rows ``lo <= k < hi``: ``phi[k] = mcum[k] (1/r[k] - 1/r[k+1])`` below the last
    row, ``phi[N-1] = -mcum[N-1] / r[N-1]`` at it (reads ``r[hi]``; any split of the rows
    gives the same values)."""
    n = r.shape[0]
    top = min(hi, n - 1)
    if top > lo:
        inv = 1.0 / r[lo:top + 1]
        for k in range(lo, top):
            phi[k] = mcum[k] * (inv[k - lo] - inv[k - lo + 1])
    if lo < hi and hi == n:
        phi[n - 1] = -mcum[n - 1] / r[n - 1]


@njit(cache=True, inline="always")
def _suffix_start(pb, last):
    """(running sum, rows left) at the top of block view ``pb``: the outermost block
    (``last``) starts from its last row's value, the others from 0."""
    if last:
        return pb[pb.shape[0] - 1], pb.shape[0] - 1
    return 0.0, pb.shape[0]


@njit(cache=True)
def potential_suffix_totals(phi: np.ndarray, totals: np.ndarray, b0: int, b1: int,
                            block: int) -> None:
    """``totals[b]``: block ``b``'s running sum of the final stage (``phi`` holding the
    increments) down to its first row, for ``b0 <= b < b1`` [Hénon energy per mass]."""
    n = phi.shape[0]
    for b in range(b0, b1):
        hi = min(n, (b + 1) * block)
        pb = phi[b * block:hi]
        acc, top = _suffix_start(pb, hi == n)
        for k in range(top - 1, -1, -1):
            acc -= pb[k]
        totals[b] = acc


@njit(cache=True)
def potential_suffix_blocks(phi: np.ndarray, totals: np.ndarray, b0: int, b1: int, nb: int,
                            block: int) -> None:
    """The final stage on blocks ``b0 <= b < b1`` of ``nb``: ``phi[k] = phi[k + 1] -
    phi[k]`` from the outermost row in, blocked: the offset (``totals`` of the blocks above,
    from the outermost in; read only where ``b1 < nb``) plus the block's running sum
    [Hénon energy per mass]."""
    n = phi.shape[0]
    off = 0.0
    for b in range(nb - 1, b1 - 1, -1):
        off += totals[b]
    for b in range(b1 - 1, b0 - 1, -1):
        hi = min(n, (b + 1) * block)
        pb = phi[b * block:hi]
        acc, top = _suffix_start(pb, hi == n)
        if top < pb.shape[0]:
            pb[top] = off + acc
        for k in range(top - 1, -1, -1):
            acc -= pb[k]
            pb[k] = off + acc
        off += acc


@njit(cache=True)
def potential_blocks_into(r: np.ndarray, m: np.ndarray, phi: np.ndarray, mcum: np.ndarray,
                          mass_totals: np.ndarray, phi_totals: np.ndarray, bf: int, b0: int,
                          b1: int, block: int) -> None:
    """The middle of the staged potential on blocks ``b0 <= b < b1`` (``bf``: the first block
    computed, :func:`enclosed_mass_blocks`): their enclosed mass, their increments and their
    final-sum totals (``phi_totals``), given the mass totals of blocks ``bf .. b0 - 1``."""
    n = r.shape[0]
    enclosed_mass_blocks(m, mcum, mass_totals, bf, b0, b1, block)
    potential_increments_into(r, mcum, phi, min(n, b0 * block), min(n, b1 * block))
    potential_suffix_totals(phi, phi_totals, b0, b1, block)


@njit(cache=True)
def compute_potential_into(r: np.ndarray, m: np.ndarray, phi: np.ndarray,
                           mcum: np.ndarray, first: int = 0,
                           block: int = POTENTIAL_BLOCK) -> None:
    """:func:`compute_potential` into given arrays ``phi`` and ``mcum`` (of ``r``'s length),
    one thread, from block ``first // block`` on (``mcum`` below it is read; ``phi`` below it
    is left alone): the stages in one pass each (a block's offset is the last one's plus its
    sum, as its total would give)."""
    n = r.shape[0]
    nb = (n + block - 1) // block
    bf = max(0, min(first, n)) // block
    none = np.empty(0)
    enclosed_mass_blocks(m, mcum, none, bf, bf, nb, block)
    potential_increments_into(r, mcum, phi, min(n, bf * block), n)
    potential_suffix_blocks(phi, none, bf, nb, nb, block)


@njit(cache=True, parallel=True)
def potential_threaded_into(r: np.ndarray, m: np.ndarray, phi: np.ndarray, mcum: np.ndarray,
                            chunks: int, block: int, first: int = 0) -> None:
    """:func:`compute_potential_into` on the threads: ``chunks`` shares of the blocks from
    ``first``'s on, each summing its blocks' totals, then writing them (the same bits)."""
    n = r.shape[0]
    nb = (n + block - 1) // block
    bf = max(0, min(first, n)) // block
    bounds = bf + (np.arange(chunks + 1) * (nb - bf)) // chunks
    mass_totals = np.empty(nb)
    phi_totals = np.empty(nb)
    for c in prange(chunks):
        enclosed_mass_totals(m, mass_totals, bounds[c], bounds[c + 1], block)
    for c in prange(chunks):
        potential_blocks_into(r, m, phi, mcum, mass_totals, phi_totals, bf, bounds[c],
                              bounds[c + 1], block)
    for c in prange(chunks):
        potential_suffix_blocks(phi, phi_totals, bounds[c], bounds[c + 1], nb, block)


@njit(cache=True)
def potential_from(r: np.ndarray, m: np.ndarray, phi: np.ndarray, mcum: np.ndarray, first: int,
                   block: int, chunks: int) -> None:
    """:func:`compute_potential_into` from ``first``'s block on, in ``chunks`` thread shares
    of the blocks (:func:`potential_threaded_into`) or, for 1, in one pass each."""
    if chunks > 1:
        potential_threaded_into(r, m, phi, mcum, chunks, block, first)
    else:
        compute_potential_into(r, m, phi, mcum, first, block)


def _chunks(n: int, first: int, block: int, threads: int | None) -> int:
    """Thread shares for the blocks of rows ``first .. n - 1``: 1 (one pass each, no parallel
    region, ~10 us) for fewer than four blocks."""
    if threads is None:
        threads = numba.get_num_threads()
    blocks = (n + block - 1) // block - first // block
    return min(threads, blocks) if threads > 1 and blocks >= 4 else 1


def updated_potential(r: np.ndarray, m: np.ndarray, phi: np.ndarray, mcum: np.ndarray,
                      first: int, block: int = POTENTIAL_BLOCK, threads: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The potential and enclosed mass after the masses from star ``first`` on changed.

    Parameters
    ----------
    r : ndarray of float64, shape (N,)
        Radii sorted increasingly [Hénon length].
    m : ndarray of float64, shape (N,)
        The new masses [Hénon mass]: those below ``first`` as before.
    phi, mcum : ndarray of float64, shape (N,)
        :func:`compute_potential` of the old masses (not written).
    first : int
        Index of the first star whose mass changed (``N``: none did).
    block : int
        Rows per block of the running sums (:data:`POTENTIAL_BLOCK`; others for tests).
    threads : int, optional
        Threads for the blocks (default ``numba.get_num_threads()``); the same bits for any.

    Returns
    -------
    phi, mcum : ndarray, shape (N,)
        New arrays.  From the first row of ``first``'s block (``f``)
        on they hold :func:`compute_potential`'s bits for the new masses (the same sums from
        the unchanged ``mcum[f - 1]`` and from the outermost star in); inside, the enclosed
        mass is unchanged and the potential is shifted by a constant (the shells that changed
        lie outside), ``phi[f]``'s change: equal to the full sum's up to its rounding, without
        its division per star and its two running sums over all N.
    """
    return _updated_potential(r, m, phi, mcum, first, block,
                              _chunks(r.shape[0], max(0, first), block, threads))


@njit(cache=True)
def _updated_potential(r: np.ndarray, m: np.ndarray, phi: np.ndarray, mcum: np.ndarray,
                       first: int, block: int, chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`updated_potential` on ``chunks`` thread shares of the blocks."""
    n = r.shape[0]
    new_phi = np.empty(n)
    new_mcum = np.empty(n)
    first = max(0, min(first, n))
    if first == n:
        for k in range(n):
            new_mcum[k] = mcum[k]
            new_phi[k] = phi[k]
        return new_phi, new_mcum
    first = (first // block) * block
    for k in range(first):
        new_mcum[k] = mcum[k]
    # the full sum's operations on the blocks from `first` on (the same bits there)
    potential_from(r, m, new_phi, new_mcum, first, block, chunks)
    if first > 0:
        shift = new_phi[first] - phi[first]
        for k in range(first):
            new_phi[k] = phi[k] + shift
    return new_phi, new_mcum


@njit(cache=True, inline="always")
def _count_at_most(r, x, lo, hi):
    """Number of stars with ``r <= x``, known to lie in ``[lo, hi]`` (bisection)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if r[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def enclosing_index(r: np.ndarray, x: float) -> int:
    """Number of stars with ``r <= x`` (bisection; ``r`` sorted)."""
    return _count_at_most(r, x, 0, r.shape[0])


@njit(cache=True, inline="always")
def potential_below(r, phi, mcum, k, x):
    """Potential at ``x`` given ``k`` = number of stars with ``r <= x`` (eq 6)."""
    if k == 0:
        return phi[0]
    return phi[k - 1] + mcum[k - 1] * (1.0 / r[k - 1] - 1.0 / x)


@njit(cache=True)
def potential_at_radius(r: np.ndarray, phi: np.ndarray, mcum: np.ndarray, x: float) -> float:
    """Potential at radius ``x`` by eq 6 (all stars' shells included)."""
    return potential_below(r, phi, mcum, enclosing_index(r, x), x)


@njit(cache=True)
def potential_at_radii(r: np.ndarray, phi: np.ndarray, mcum: np.ndarray,
                       x: np.ndarray) -> np.ndarray:
    """Vectorised :func:`potential_at_radius`."""
    out = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = potential_at_radius(r, phi, mcum, x[i])
    return out


#: Old radii per merge chunk of :func:`potential_at_sorted_radii` (a chunk per loop iteration,
#: whatever the thread count).
MERGE_CHUNK = 8192


@njit(cache=True, inline="always")
def _merge_step(r, x, i, k, cnt, base):
    """One branch-free step of a merge walk: record point ``i``'s count ``k`` (final once the
    walk moves past it) and advance either the stars or the point."""
    le = r[k] <= x[i]
    cnt[i - base] = k
    return i + 1 - le, k + le


@njit(cache=True, inline="always")
def _merge_lane(r, x, i, end, k, cnt, base):
    """Finish one merge walk: ``cnt[i - base]`` = number of ``r <= x[i]`` for i in [i, end)."""
    n = r.shape[0]
    while i < end and k < n:
        i, k = _merge_step(r, x, i, k, cnt, base)
    while i < end:
        cnt[i - base] = n
        i += 1


@njit(cache=True)
def _merge_counts(r, x, i0, i1, cnt):
    """``cnt[i - i0]`` = number of ``r <= x[i]`` for ``i`` in [i0, i1) (both sorted).

    A merge walk's steps depend on each other (the next comparison's address on this one's
    outcome), so one walk runs at the latency of a load and a compare per step; written
    branch-free (each step advances either the stars or the points, 2 steps per point) and
    with four walks over consecutive quarters of the points interleaved in one loop,
    their steps overlap: 0.27 instead of 0.72 ms for 1e5 points (one core).
    """
    n = r.shape[0]
    q = (i1 - i0 + 3) // 4
    starts = np.empty(4, dtype=np.int64)
    ends = np.empty(4, dtype=np.int64)
    ks = np.empty(4, dtype=np.int64)
    for lane in range(4):
        a = min(i1, i0 + lane * q)
        starts[lane] = a
        ends[lane] = min(i1, a + q)
        ks[lane] = _count_at_most(r, x[a], 0, n) if a < ends[lane] else n
    a0, a1, a2, a3 = starts[0], starts[1], starts[2], starts[3]
    e0, e1, e2, e3 = ends[0], ends[1], ends[2], ends[3]
    k0, k1, k2, k3 = ks[0], ks[1], ks[2], ks[3]
    while (a0 < e0 and k0 < n and a1 < e1 and k1 < n and a2 < e2 and k2 < n
           and a3 < e3 and k3 < n):
        a0, k0 = _merge_step(r, x, a0, k0, cnt, i0)
        a1, k1 = _merge_step(r, x, a1, k1, cnt, i0)
        a2, k2 = _merge_step(r, x, a2, k2, cnt, i0)
        a3, k3 = _merge_step(r, x, a3, k3, cnt, i0)
    _merge_lane(r, x, a0, e0, k0, cnt, i0)
    _merge_lane(r, x, a1, e1, k1, cnt, i0)
    _merge_lane(r, x, a2, e2, k2, cnt, i0)
    _merge_lane(r, x, a3, e3, k3, cnt, i0)


@njit(cache=True, parallel=True)
def potential_at_sorted_radii(r: np.ndarray, phi: np.ndarray, mcum: np.ndarray,
                              x: np.ndarray) -> np.ndarray:
    """:func:`potential_at_radii` for increasing ``x``, by merge walks (no per-point search).

    The energy correction needs the new potential at every star's old radius; the old radii
    are the previous step's sorted array, so merge walks find every interval in O(N) with
    sequential memory access (:func:`_merge_counts`), and the potential follows in a second,
    independent pass.  The points are cut into chunks of ``MERGE_CHUNK`` that run on the
    threads; every point gets the same interval and formula as in a single walk, so the result
    is :func:`potential_at_radii`'s bit for bit.
    """
    n = r.shape[0]
    m = x.shape[0]
    out = np.empty(m)
    for c in prange((m + MERGE_CHUNK - 1) // MERGE_CHUNK):
        i0 = c * MERGE_CHUNK
        i1 = min(m, i0 + MERGE_CHUNK)
        cnt = np.empty(i1 - i0, dtype=np.int64)
        if n > 0:
            _merge_counts(r, x, i0, i1, cnt)
        else:
            cnt[:] = 0
        for i in range(i0, i1):
            out[i] = potential_below(r, phi, mcum, cnt[i - i0], x[i])
    return out


@njit(cache=True, parallel=True)
def potential_at_points(r: np.ndarray, phi: np.ndarray, mcum: np.ndarray, x: np.ndarray,
                        idx: np.ndarray, out: np.ndarray) -> None:
    """``out[j] = potential_at_radius(x[j])`` for ``j`` in ``idx`` only (others untouched).

    The energy correction of a rank needs the new potential at its own stars' old radii: a
    bisection each, O(n log N), against :func:`potential_at_sorted_radii`'s merge over all N
    (12 ns per star of all N; a bisection 125-260 ns at N = 1e5-1e6, one core).  Equal to it
    bit for bit (same interval, same formula).
    """
    for i in prange(idx.shape[0]):
        j = idx[i]
        out[j] = potential_at_radius(r, phi, mcum, x[j])


def compute_potential_reference(r: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Plain numpy version of :func:`compute_potential` (eq 1 evaluated directly)."""
    r = np.asarray(r, dtype=float)
    m = np.asarray(m, dtype=float)
    mcum = np.cumsum(m)
    outer = np.cumsum((m / r)[::-1])[::-1]  # sum_{i >= k} m_i / r_i
    outer_excl = np.append(outer[1:], 0.0)
    phi = -mcum / r - outer_excl
    return phi, mcum


def potential_energy(r: np.ndarray, m: np.ndarray, phi: np.ndarray) -> float:
    """Gravitational energy of the shells without self-energy [Hénon energy].

    ``W = 1/2 sum_i m_i (phi_i + m_i / r_i)``: the pair energy ``-sum_{i<j} m_i m_j / max(r)``;
    each star's own shell term is removed so that it matches the potential stars move in.
    """
    return 0.5 * float(np.sum(m * (phi + m / r)))


@intrinsic
def _float_bits(typingctx, x):
    """The IEEE-754 bit pattern of a float64 as an int64 (a register move)."""
    if not isinstance(x, types.Float) or x.bitwidth != 64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@njit(cache=True, inline="always")
def _log_scale(x):
    """A monotone stand-in for log(x), x > 0: the float's bit pattern read as a number.

    For positive floats the bit pattern grows with the value and is, up to scale and offset,
    a piecewise-linear approximation of log2(x).  One register move and one conversion instead
    of a ~45-cycle ``log`` per lookup; table and lookups use this same function.
    """
    return np.float64(_float_bits(x))


@njit(cache=True)
def radius_lookup_table(r: np.ndarray, per_bucket: int = 4):
    """Table that narrows a radius search to a few stars (buckets uniform in ~log r).

    Returns ``(lut, f0, inv_width)``; with ``t(x) = (_log_scale(x) - f0) * inv_width``, bucket
    ``j`` holds the stars with ``int(t(r)) == j`` (the last bucket also ``t >= nb``) and
    ``lut[j]`` is the number of stars in buckets below ``j``.  Used by :func:`locate_radius`.
    """
    n = r.shape[0]
    if n == 0:
        return np.zeros(3, dtype=np.int64), 0.0, 1.0
    lo, inv = _lookup_scale(r, max(1, n // per_bucket))
    # every entry: the one segment that holds all stars
    return radius_lookup_entries(r, per_bucket, 0, n), lo, inv


@njit(cache=True, inline="always")
def _lookup_scale(r, nb):
    """(f0, inv_width) of :func:`radius_lookup_table` for ``nb`` buckets (``r`` not empty)."""
    lo = _log_scale(r[0])
    span = _log_scale(r[r.shape[0] - 1]) - lo
    return lo, (nb / span if span > 0.0 else 1.0)


@njit(cache=True, inline="always")
def _lookup_bucket(x, lo, inv, nb):
    """The bucket of radius ``x`` (the last one also holds everything beyond it)."""
    return min(int((_log_scale(x) - lo) * inv), nb)


@njit(cache=True)
def radius_lookup_scale(r: np.ndarray, per_bucket: int) -> tuple[float, float]:
    """The ``(f0, inv_width)`` of :func:`radius_lookup_table` (``r`` sorted, not empty)."""
    return _lookup_scale(r, max(1, r.shape[0] // per_bucket))


@njit(cache=True)
def radius_lookup_entries(r: np.ndarray, per_bucket: int, a: int, b: int) -> np.ndarray:
    """The entries of :func:`radius_lookup_table`'s table owned by the stars ``a .. b - 1``.

    Entry ``j`` counts the stars of buckets below ``j``; the stars ``[a, b)`` own the entries
    whose last counted star is one of theirs (the first ones, down to 0, belong to ``a = 0``;
    the last ones, up to ``n``, to ``b = n``).  The ranks' entries, for the consecutive
    segments of the block layout concatenated in rank order, are the whole table, the same
    values; each rank walks its own stars and their buckets only, so building the table divides
    by the number of ranks (followed by one Allgatherv of about 2 bytes per star).

    Parameters
    ----------
    r : ndarray, shape (N,), N > 0
        All radii, sorted (the replicated array) [Hénon length].
    per_bucket : int
        Stars per bucket on average, as for :func:`radius_lookup_table`.
    a, b : int
        The segment, ``0 <= a <= b <= N``; an empty one gets no entries.

    Returns
    -------
    ndarray of int64
        The entries ``j0 .. j1 - 1`` of the table (``j0`` = 0 for ``a`` = 0, else one past the
        bucket of star ``a - 1``; ``j1`` = ``nb + 2`` for ``b`` = N, else one past the bucket
        of star ``b - 1``).
    """
    n = r.shape[0]
    if a >= b:  # an empty segment owns nothing (its neighbours own the entries at its cut)
        return np.empty(0, dtype=np.int64)
    nb = max(1, n // per_bucket)
    lo, inv = _lookup_scale(r, nb)
    j0 = 0 if a == 0 else _lookup_bucket(r[a - 1], lo, inv, nb) + 1
    j1 = nb + 2 if b == n else _lookup_bucket(r[b - 1], lo, inv, nb) + 1
    out = np.empty(max(0, j1 - j0), dtype=np.int64)
    i = a  # every star before a lies in a bucket below j0
    for j in range(j0, j1):
        # stars of buckets below j: the same bucket formula as in locate_radius
        while i < n and _lookup_bucket(r[i], lo, inv, nb) < j:
            i += 1
        out[j - j0] = i
    if j0 == 0 and out.shape[0] > 0:
        out[0] = 0
    if j1 == nb + 2 and out.shape[0] > 0:
        out[out.shape[0] - 1] = n
    return out


@njit(cache=True, parallel=True)
def radius_lookup_table_threaded(r: np.ndarray, per_bucket: int, segments: int):
    """:func:`radius_lookup_table` built by ``segments`` consecutive segments of the stars on
    the threads, each writing its own entries (:func:`radius_lookup_entries`: the segments'
    entries in order are the whole table, the same values whatever the cut)."""
    n = r.shape[0]
    nb = max(1, n // per_bucket)
    if n == 0:
        return np.zeros(3, dtype=np.int64), 0.0, 1.0
    lo, inv = _lookup_scale(r, nb)
    out = np.empty(nb + 2, dtype=np.int64)
    k_max = max(1, segments)
    for k in prange(k_max):
        a = n * k // k_max
        b = n * (k + 1) // k_max
        if b > a:
            j0 = 0 if a == 0 else _lookup_bucket(r[a - 1], lo, inv, nb) + 1
            ent = radius_lookup_entries(r, per_bucket, a, b)
            out[j0:j0 + ent.shape[0]] = ent
    return out, lo, inv


@njit(cache=True, inline="always")
def locate_radius(x, r, lut, f0, inv_width):
    """Number of stars with ``r <= x``, same as :func:`enclosing_index`, via the table."""
    n = r.shape[0]
    if x <= 0.0:
        return 0
    t = (_log_scale(x) - f0) * inv_width
    nb = lut.shape[0] - 2
    if t < 0.0:
        lo = 0
        hi = lut[1]
    elif t >= nb:
        lo = lut[nb]
        hi = n
    else:
        j = int(t)
        lo = lut[j]
        hi = lut[j + 1]
    # buckets below j hold only stars with r < x, buckets above only r > x; one more star on
    # each side costs nothing and guards the table against any inconsistency
    lo = lo - 1 if lo > 0 else 0
    hi = hi + 1 if hi < n else n
    return _count_at_most(r, x, lo, hi)
