"""Local order of the parallel sort: one rank's sort by ``(key, tiebreak)``, and merges.

:func:`_local_order` is the permutation that sorts this rank's stars: a stable bucket sort of
float64 keys (:func:`bucket_argsort`, numpy's stable argsort bit for bit), on several threads
for large input (the keys cut into ranges by value, one range per thread, so the permutation
is the same for any number of threads), the runs of equal keys then ordered by the tiebreak
(:func:`_order_ties`).  :func:`_selected_order` sorts only the rows kept (the step's escapers
dropped), and :func:`_sorted_fields` is the whole sort on one rank.  The merges of sorted
runs: :func:`_merge_runs` (the runs received from several ranks, and rank 0's samples) and
:func:`_merge_two` (this rank's own run with the received ones, as merged positions).  No
communication.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numba import njit, prange

from parallel.sort_records import (
    Fields,
    _fields_error,
    _uniform_column,
    _uniform_fields,
    gather_rows,
)

__all__ = ["THREADED_SORT_MIN", "BUCKET_SORT_MIN", "bucket_argsort"]


# Threads: the local sort (:func:`bucket_argsort`) runs on one core.  The keys are cut at
# T - 1 splitters (quantiles of a regular sample) into T ranges, and each range is sorted on
# its own thread (numba's, :func:`_sort_ranges`; keys other than float64 by numpy in Python
# threads, which release the GIL).  Every key's range is fixed by its value, and ties are
# ordered by the tiebreak, so the permutation is the same for any number of threads: the
# one-thread sort's.

#: Fewer keys than this are sorted on one thread (thread hand-off costs ~50 microseconds).
THREADED_SORT_MIN = 20_000
_POOL: dict[int, Any] = {}


def _pool(threads: int):
    from concurrent.futures import ThreadPoolExecutor

    if threads not in _POOL:
        _POOL[threads] = ThreadPoolExecutor(threads, thread_name_prefix="cmc-sort")
    return _POOL[threads]


#: Up to this many ranges :func:`_partition` fills each by a branch-free pass over all keys.
_BRANCH_FREE_RANGES = 8


@njit(cache=True)
def _partition(key, split):
    """Stable partition of the keys into ranges cut at ``split`` (sorted): (perm, starts).

    Range ``g`` holds the keys with ``g`` splitters at or below them (numpy's
    ``searchsorted(split, key, side="right")``; NaN last, where numpy sorts it).  The keys
    arrive in random order, so every data-dependent branch here would mispredict half the
    time: the range is a sum of comparisons, and with few ranges each is filled by a pass that
    writes every index and advances only on a member (0.79 -> 0.2 ms for 1e5 keys, 2 ranges).
    Two ranges take one counting pass, then one pass that sends each key to one of two
    counters by a select (0.13 ms).
    """
    t = split.shape[0] + 1
    n = key.shape[0]
    if t == 2:  # (two threads) count, then each key to one of two counters, a select
        s = split[0]
        c0 = 0
        for i in range(n):
            x = key[i]
            c0 += not (s <= x or x != x)
        perm = np.empty(n, dtype=np.int64)
        p0 = 0
        p1 = c0
        for i in range(n):
            x = key[i]
            g = np.int64(s <= x or x != x)
            perm[p1 if g else p0] = i
            p0 += 1 - g
            p1 += g
        return perm, np.array([0, c0, n], dtype=np.int64)
    grp = np.empty(n, dtype=np.int64)
    for i in range(n):
        x = key[i]
        g = 0
        for j in range(t - 1):
            g += split[j] <= x
        if x != x:
            g = t - 1
        grp[i] = g
    starts = np.zeros(t + 1, dtype=np.int64)
    if t <= _BRANCH_FREE_RANGES:
        perm = np.empty(n + 1, dtype=np.int64)  # one spare slot for the writes past the end
        pos = 0
        for g in range(t):
            starts[g] = pos
            for i in range(n):
                perm[pos] = i
                pos += grp[i] == g
        starts[t] = pos
        return perm[:n], starts
    for i in range(n):
        starts[grp[i] + 1] += 1
    for g in range(t):
        starts[g + 1] += starts[g]
    fill = starts[:-1].copy()
    perm = np.empty(n, dtype=np.int64)
    for i in range(n):
        g = grp[i]
        perm[fill[g]] = i
        fill[g] += 1
    return perm, starts


@njit(cache=True, parallel=True)
def _sort_ranges(key, perm, starts):
    """``perm`` with each range ``starts[g] .. starts[g+1]`` put in stable key order (one
    range per loop iteration, on numba's threads)."""
    out = np.empty_like(perm)
    for g in prange(starts.shape[0] - 1):
        p = perm[starts[g]:starts[g + 1]]
        sub = np.empty(p.shape[0])
        for i in range(p.shape[0]):
            sub[i] = key[p[i]]
        o = bucket_argsort(sub)
        for i in range(p.shape[0]):
            out[starts[g] + i] = p[o[i]]
    return out


def _threaded_order(key: np.ndarray, tiebreak: np.ndarray | None, threads: int) -> np.ndarray:
    """:func:`_local_order` on ``threads`` threads (same permutation)."""
    n = key.size
    sample = np.sort(key[:: max(1, n // (64 * threads))])
    split = np.ascontiguousarray(sample[(np.arange(1, threads) * sample.size) // threads])
    perm, starts = _partition(np.ascontiguousarray(key), split)
    if key.dtype == np.float64:
        # ranges hold increasing, disjoint key intervals (equal keys share a range) and each
        # range's rows are in input order, so stable sorts of the ranges make the stable
        # order of all: ties then as the serial path orders them
        order = _sort_ranges(np.ascontiguousarray(key), perm, starts)
        return order if tiebreak is None else _order_ties(key, tiebreak, order, gather_rows)

    def one(g: int) -> np.ndarray:
        p = perm[starts[g]:starts[g + 1]]
        # no parallel numba kernel in these threads (the workqueue layer is not re-entrant):
        # np.take, and the serial nogil bucket sort
        return p[_serial_order(key[p], None if tiebreak is None else tiebreak[p],
                               np.take)]

    return np.concatenate(list(_pool(threads).map(one, range(threads))))


def _local_order(
    key: np.ndarray, tiebreak: np.ndarray | None, sorted_runs: bool = False
) -> np.ndarray:
    """Permutation sorting by ``(key, tiebreak)``; threaded (:func:`_threaded_order`) for
    large unordered input when numba has more than one thread.

    Parameters
    ----------
    key, tiebreak : numpy.ndarray
        Primary and secondary keys (``tiebreak`` may be None: key only; ties are then
        ordered by position).
    sorted_runs : bool, optional
        The data are a concatenation of a few sorted runs (the merge phase);
        timsort (``kind='stable'``) merges those in ``O(n log runs)``, while
        numpy's SIMD quicksort is faster on unordered data.
    """
    import numba

    threads = numba.get_num_threads()
    if not sorted_runs and threads > 1 and key.size >= THREADED_SORT_MIN:
        return _threaded_order(key, tiebreak, threads)
    return _serial_order(key, tiebreak, gather_rows, sorted_runs)


#: Bucket count: the power of two at or above the key count, times 2**this (1 to 2 per key:
#: 0 measured faster inside the step than 1, whose larger table leaves the cache).
_BUCKET_EXTRA_BITS = 0
#: A bucket with more keys than this is sorted by a merge sort instead of insertion.
_BUCKET_INSERTION_MAX = 48
#: The buckets are cut in two levels: 2**this coarse bins, uniform in the keys' ordered bit
#: patterns, each split into a power of two of buckets in proportion to its keys.
_BUCKET_COARSE_BITS = 8
#: Fewer float64 keys than this are argsorted by numpy (the bucket sort's setup would dominate).
BUCKET_SORT_MIN = 512


@njit(cache=True, nogil=True, inline="always")
def _order_key(v, bits):
    """An unsigned integer that orders as ``v`` does in numpy's sort (NaN last, -0.0 == 0.0).

    ``bits`` is ``v``'s IEEE-754 bit pattern: positive floats order as their patterns, negative
    ones reversed; the sign bit is flipped so that every negative key is below every positive.
    """
    top = np.uint64(1) << np.uint64(63)
    if v != v:
        return ~np.uint64(0)
    w = bits if v != 0.0 else np.uint64(0)
    if w & top:
        return ~w
    return w | top


@njit(cache=True, nogil=True)
def bucket_argsort(x: np.ndarray) -> np.ndarray:
    """Stable argsort of float64 keys: ``numpy.argsort(x, kind="stable")``, bit for bit.

    The keys' ordered bit patterns (:func:`_order_key`, about log2 of the value) are cut
    into ``2**_BUCKET_COARSE_BITS`` coarse bins, uniform in the patterns; one counting pass
    gives each bin's keys, and each bin is split into a power of two of buckets, at least its
    share of one to two buckets per key (a step's radii crowd the upper decades, which
    uniform buckets left holding several keys each: 0.57 against 0.41 ms for 5e4 radii).
    Then one counting pass over the buckets, one scatter, and an insertion sort inside each
    bucket (a merge sort for a bucket of more than ``_BUCKET_INSERTION_MAX`` keys, should
    outliers stretch the range).  Sequential or bucket-local memory access: 1.0 against
    numpy's 5.3 ms for 1e5 radii on the CI machine kind (numpy's sort there is not the SIMD
    one).  The threaded sort runs it on numba's threads, one key range each
    (:func:`_sort_ranges`).
    """
    n = x.shape[0]
    idx = np.empty(n, dtype=np.int64)
    if n == 0:
        return idx
    xb = x.view(np.uint64)
    k = np.empty(n, dtype=np.uint64)
    kmin = ~np.uint64(0)
    kmax = np.uint64(0)
    for i in range(n):
        w = _order_key(x[i], xb[i])
        k[i] = w
        kmin = min(kmin, w)
        kmax = max(kmax, w)
    dbits = _BUCKET_EXTRA_BITS
    while (1 << dbits) < n:
        dbits += 1
    span = kmax - kmin
    # coarse bins: the span's top bits (all of them for a small span)
    shc = 0
    while (span >> np.uint64(shc)) >= (np.uint64(1) << np.uint64(_BUCKET_COARSE_BITS)):
        shc += 1
    ushc = np.uint64(shc)
    nc = int(span >> ushc) + 1
    count = np.zeros(nc, dtype=np.int64)
    for i in range(n):
        count[int((k[i] - kmin) >> ushc)] += 1
    # bin c: 2**e buckets (e at most shc: no more buckets than values), its keys' offsets in
    # the bin shifted right by shc - e; first bucket base[c]
    fsh = np.empty(nc, dtype=np.uint64)
    base = np.empty(nc + 1, dtype=np.int64)
    base[0] = 0
    for c in range(nc):
        want = (count[c] << dbits) // n
        e = 0
        while (1 << e) < want and e < shc:
            e += 1
        fsh[c] = np.uint64(shc - e)
        base[c + 1] = base[c] + (1 << e)
    nb = base[nc]
    start = np.zeros(nb + 1, dtype=np.int32)
    bucket = np.empty(n, dtype=np.int32)
    for i in range(n):
        off = k[i] - kmin
        c = int(off >> ushc)
        b = base[c] + int((off - (np.uint64(c) << ushc)) >> fsh[c])
        bucket[i] = b
        start[b + 1] += 1
    for b in range(nb):
        start[b + 1] += start[b]
    fill = start[:-1].copy()
    ks = np.empty(n, dtype=np.uint64)
    for i in range(n):  # in input order: stable
        w = k[i]
        d = bucket[i]
        j = fill[d]
        fill[d] = j + 1
        ks[j] = w
        idx[j] = i
    for b in range(nb):
        lo = start[b]
        hi = start[b + 1]
        if hi - lo > _BUCKET_INSERTION_MAX:
            o = np.argsort(ks[lo:hi], kind="mergesort")
            idx[lo:hi] = idx[lo:hi][o]
            continue
        for i in range(lo + 1, hi):  # moves only strictly greater keys: stable
            w = ks[i]
            ii = idx[i]
            j = i - 1
            while j >= lo and ks[j] > w:
                ks[j + 1] = ks[j]
                idx[j + 1] = idx[j]
                j -= 1
            ks[j + 1] = w
            idx[j + 1] = ii
    return idx


def _argsort_keys(key: np.ndarray) -> np.ndarray:
    """Stable argsort of unordered keys: :func:`bucket_argsort` for many float64 keys."""
    if key.dtype == np.float64 and key.ndim == 1 and key.size >= BUCKET_SORT_MIN:
        return bucket_argsort(np.ascontiguousarray(key))
    return np.argsort(key, kind="stable")


def _serial_order(
    key: np.ndarray, tiebreak: np.ndarray | None, take, sorted_runs: bool = False
) -> np.ndarray:
    """Permutation sorting by ``(key, tiebreak)``.

    Parameters
    ----------
    key, tiebreak : numpy.ndarray
        Primary and secondary keys (``tiebreak`` may be None: key only).
    sorted_runs : bool, optional
        The data are a concatenation of a few sorted runs (the merge phase);
        timsort (``kind='stable'``) merges those in ``O(n log runs)``, while
        the bucket sort (:func:`_argsort_keys`) is faster on unordered data.

    Notes
    -----
    Only elements whose key repeats need the tiebreak; they are re-sorted
    by ``(run of equal keys, tiebreak)``, which is cheap when ties are rare.
    Both sorts are stable, so the order is unique with or without ties.
    """
    if sorted_runs:
        order = np.argsort(key, kind="stable")
    else:  # ties by position: the same order whatever the threads
        order = _argsort_keys(key)
    if tiebreak is None:
        return order
    return _order_ties(key, tiebreak, order, take)


@njit(cache=True, nogil=True)
def _any_adjacent_equal(key, order):
    """Whether ``key[order]`` holds two equal neighbours (one pass, no temporaries: 0.08 ms
    for 1e5 keys against 0.27 for numpy's gather and compare; a threaded version of this
    and of the scans below compiled to slower code than one thread)."""
    found = False
    if order.shape[0] == 0:
        return found
    prev = key[order[0]]
    for i in range(1, order.shape[0]):
        cur = key[order[i]]
        found |= cur == prev
        prev = cur
    return found


def _order_ties(key: np.ndarray, tiebreak: np.ndarray, order: np.ndarray, take) -> np.ndarray:
    """``order`` (a stable order of ``key``) with each run of equal keys ordered by
    ``tiebreak`` (``take(a, idx)`` is ``a[idx]``)."""
    if key.size < 2:
        return order
    if key.ndim == 1 and key.dtype.kind in "iuf" and not _any_adjacent_equal(
            np.ascontiguousarray(key), np.ascontiguousarray(order)):
        return order  # (the common case: float radii do not tie)
    ks = take(key, order)
    eq = ks[1:] == ks[:-1]
    if not eq.any():
        return order
    tied = np.zeros(key.size, dtype=bool)
    tied[1:] = eq
    tied[:-1] |= eq
    pos = np.flatnonzero(tied)
    run = np.cumsum(np.concatenate(([True], ~eq)))[pos]
    sub = order[pos]
    # Runs occupy contiguous sorted positions, so this permutes within runs only.
    order[pos] = sub[np.lexsort((tiebreak[sub], run))]
    return order


def _selected_order(key: np.ndarray, tiebreak: np.ndarray | None,
                    rows: np.ndarray | None) -> np.ndarray:
    """Indices (into the full arrays) of the ``rows`` (all if None) sorted by
    ``(key, tiebreak)``: only the two keys are compacted, the other fields are read once, in
    sorted order, by the caller."""
    if rows is None:
        return _local_order(key, tiebreak)
    if 2 * rows.size < key.size:  # most rows dropped: sort the kept keys only
        return gather_rows(rows, _local_order(
            gather_rows(key, rows), None if tiebreak is None else gather_rows(tiebreak, rows)))
    # few dropped (the step's escapers): sort every key and filter the order, one pass
    # instead of compacting both keys and mapping back (the kept rows' relative order is the
    # same; a dropped NaN key sorts to the end)
    keep = np.zeros(key.size, dtype=bool)
    keep[rows] = True
    order = _local_order(key, tiebreak)
    return order[keep[order]]


def _sorted_fields(fields: Mapping[str, np.ndarray], key: str, tiebreak: str | None,
                   rows: np.ndarray | None = None, share_uniform: bool = False,
                   uniform: Mapping[str, bytes] | None = None) -> Fields:
    """Serial path: sort every array of ``fields`` (its ``rows`` only) by ``(key, tiebreak)``;
    ``share_uniform``, ``uniform``: see :func:`parallel_sort`."""
    err = _fields_error(fields, key, tiebreak, rows)
    if err:
        raise ValueError(err)
    order = _selected_order(fields[key], None if tiebreak is None else fields[tiebreak], rows)
    # a column holding one value needs no permutation: its random reads are a sort's cost
    same = _uniform_fields(fields, key, tiebreak, uniform)
    return {name: _uniform_column(arr, same[name], order.size, share_uniform) if name in same
            else gather_rows(arr, order) for name, arr in fields.items()}
@njit(cache=True)
def _merge_runs(keys, tbs, starts):
    """Permutation merging the sorted runs ``[starts[i], starts[i + 1])`` of ``(keys, tbs)``.

    Pairwise merges, ``log2(runs)`` passes of O(n); on equal pairs the earlier run comes
    first, so the order is a stable sort's (ties by position when ``tbs`` is all equal).
    """
    n = keys.shape[0]
    cur = np.arange(n)
    nxt = np.empty(n, dtype=np.int64)
    bounds = starts.copy()
    while bounds.shape[0] > 2:
        runs = bounds.shape[0] - 1
        new = np.empty(runs // 2 + runs % 2 + 1, dtype=np.int64)
        new[0] = bounds[0]
        for p in range(0, runs, 2):
            lo = bounds[p]
            if p + 1 == runs:  # odd run out: carried over
                for i in range(lo, bounds[p + 1]):
                    nxt[i] = cur[i]
                new[p // 2 + 1] = bounds[p + 1]
                continue
            mid = bounds[p + 1]
            hi = bounds[p + 2]
            i, j, o = lo, mid, lo
            while i < mid and j < hi:
                a = cur[i]
                b = cur[j]
                if keys[b] < keys[a] or (keys[b] == keys[a] and tbs[b] < tbs[a]):
                    nxt[o] = b
                    j += 1
                else:
                    nxt[o] = a
                    i += 1
                o += 1
            while i < mid:
                nxt[o] = cur[i]
                i += 1
                o += 1
            while j < hi:
                nxt[o] = cur[j]
                j += 1
                o += 1
            new[p // 2 + 1] = hi
        cur, nxt = nxt, cur
        bounds = new
    return cur


@njit(cache=True)
def _merge_two(ak, at, bk, bt, b_first):
    """Positions in the merged order of the elements of two sorted runs ``(ak, at)`` and
    ``(bk, bt)``: one merge walk, each run's positions written in order.  On equal pairs
    ``b[j]`` goes first where ``b_first[j]`` (its rank is below ``a``'s: the order of a stable
    sort of the runs in rank order).  Returns ``(where_a, where_b)``."""
    na = ak.shape[0]
    nb = bk.shape[0]
    where_a = np.empty(na, dtype=np.int64)
    where_b = np.empty(nb, dtype=np.int64)
    i = 0
    j = 0
    while i < na and j < nb:
        ka = ak[i]
        kb = bk[j]
        if kb < ka or (kb == ka and (bt[j] < at[i] or (bt[j] == at[i] and b_first[j]))):
            where_b[j] = i + j
            j += 1
        else:
            where_a[i] = i + j
            i += 1
    while i < na:
        where_a[i] = i + j
        i += 1
    while j < nb:
        where_b[j] = i + j
        j += 1
    return where_a, where_b
