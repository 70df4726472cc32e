"""Parallel sort of star records: Sample Sort plus block redistribution.

Star data are a structure of arrays, ``dict[str, numpy.ndarray]`` whose values
share their length along axis 0. For communication the arrays are packed into
one structured array (one record per star) so that a star always travels
whole, and the records are sent as raw bytes.

The sort follows the paper (sections 3.4 and 3.5):

1. local sort by ``(key, tiebreak)``;
2. ``s`` regular samples per rank, gathered on rank 0;
3. rank 0 picks ``P - 1`` splitters and broadcasts them;
4. each rank cuts its sorted data at the splitters (binary search), exchanges
   counts with ``Alltoall`` and records with ``Alltoallv`` (only the stars that
   change rank travel; a rank's own slice stays, at P = 2 about four fifths);
5. the received runs are merged (pairwise merges of the sorted runs), then with the own
   slice, and every record is placed at its merged position.

:func:`sample_sort` leaves the ranks approximately balanced; then
:func:`redistribute_to_blocks` moves stars so that rank ``k`` holds exactly
``block_counts(N, P)[k]`` stars in global order (``Exscan`` gives each rank its
global index range, one more ``Alltoallv`` moves the pieces).  The step's
:func:`parallel_sort` needs no second exchange: before the one exchange it moves
the cuts from the splitters to the block bounds (one reduction of the splitters'
global counts and one gather of the few keys next to them, :func:`_exact_cuts`).
Since the cuts are exact, the splitters need only be guesses: the step passes the
last step's radii at the block bounds (``splitters``), and steps 2 and 3 (a gather
of samples on rank 0, whose choice of splitters grows with P times the samples, and
a broadcast) are skipped; the input checks and the columns of one value then travel
in the cuts' reduction and gather.

Ordering is by the pair ``(key, tiebreak)``, splitters included, so with
unique ``(key, tiebreak)`` pairs (unique star ids) the global result is the
same for every number of ranks. Input errors are detected collectively: every
rank raises the same :class:`ValueError` instead of leaving the others blocked
in a collective.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
from numba import njit, prange

from parallel.comm import allreduce_sum, exscan_sum
from parallel.decomposition import MIN_CHUNK, block_counts, rank_bounds

__all__ = [
    "pack_records",
    "unpack_records",
    "default_sample_size",
    "sample_sort",
    "redistribute_to_blocks",
    "parallel_sort",
    "bracketing_guesses",
    "guess_deviation",
]

Fields = dict[str, np.ndarray]


# ---------------------------------------------------------------------------
# records
# ---------------------------------------------------------------------------


def _fields_error(fields: Any, key: str | None = None, tiebreak: str | None = None,
                  rows: np.ndarray | None = None) -> str | None:
    """Describe what is wrong with ``fields`` (``None`` if it is usable).

    Returns a message instead of raising so that parallel callers can first
    agree collectively that something is wrong.  With ``rows`` (checked by
    :func:`_rows_error`), only those rows' keys must not be NaN: the others are dropped.
    """
    if not isinstance(fields, Mapping) or len(fields) == 0:
        return "fields must be a non-empty mapping of name -> numpy array"
    n = None
    for name, arr in fields.items():
        if not isinstance(name, str):
            return f"field names must be str, got {name!r}"
        if not isinstance(arr, np.ndarray) or arr.ndim < 1:
            return f"field {name!r} must be a numpy array with ndim >= 1"
        if arr.dtype.hasobject:
            return f"field {name!r} has an object dtype, which cannot be sent as bytes"
        if n is None:
            n = arr.shape[0]
        elif arr.shape[0] != n:
            return f"field {name!r} has length {arr.shape[0]}, expected {n}"
    for role, name in (("key", key), ("tiebreak", tiebreak)):
        if name is None:
            continue
        if name not in fields:
            return f"{role} field {name!r} missing (have {list(fields)})"
        if fields[name].ndim != 1:
            return f"{role} field {name!r} must be 1-D"
    if key is not None:
        k = fields[key]
        err = _rows_error(rows, k.shape[0])
        if err:
            return err
        # the rows' keys only when some key is NaN (the dropped rows' may be anything)
        if np.issubdtype(k.dtype, np.floating) and _key_has_nan(k) and (
                rows is None or np.isnan(k[rows]).any()):
            return f"key field {key!r} contains NaN"
    return None


def _key_has_nan(k: np.ndarray) -> bool:
    """Whether a float key holds a NaN (compiled for 1-d float64, the step's radii)."""
    if k.ndim == 1 and k.dtype == np.float64:
        return bool(_any_nan(np.ascontiguousarray(k)))
    return bool(np.isnan(k).any())


def _record_dtype(fields: Mapping[str, np.ndarray]) -> np.dtype:
    """Structured dtype with one member per field, in dict order.

    Members are aligned (C-struct padding): packing and unpacking aligned
    members is faster, at the price of a few padding bytes on the wire.
    """
    return np.dtype([(name, arr.dtype, arr.shape[1:]) for name, arr in fields.items()], align=True)


def pack_records(fields: Mapping[str, np.ndarray], order: np.ndarray | None = None) -> np.ndarray:
    """Pack a structure of arrays into a structured array, one record per star.

    Parameters
    ----------
    fields : mapping of str to numpy.ndarray
        Arrays of equal length along axis 0 (usually 1-D; an ``(n, k)`` array
        becomes a length-``k`` sub-array member).
    order : numpy.ndarray of int, optional
        Permutation applied while packing (``rec[i]`` is star ``order[i]``).

    Returns
    -------
    numpy.ndarray
        Structured array of length ``n``; members in dict order.

    Raises
    ------
    ValueError
        If the arrays are not of equal length or cannot be packed.
    """
    err = _fields_error(fields)
    if err:
        raise ValueError(err)
    n = next(iter(fields.values())).shape[0]
    rec = np.empty(n, dtype=_record_dtype(fields))
    if not _pack_words(fields, rec):
        for name, arr in fields.items():
            rec[name] = arr
    # then whole records move at once: one random access per star instead of one per field
    # (reading the fields in that order instead, 12 random reads per record, is slower: the
    # fields together are larger than the cache)
    return rec if order is None else _take(rec, order)


# Packing field by field writes one member of every record per pass: with records larger
# than the cache, each pass moves the whole buffer through memory (12 fields: 12 passes).
# These kernels fill (or empty) the records a chunk of stars at a time: the chunk's records
# stay in the cache while its fields are copied in one after another, each by a plain strided
# loop (the field's tuple index out of the inner loop).  Per record, 96 bytes: 35 ns with a
# record-by-record loop over the fields, 13 ns chunked (one core).  Two mirror kernels rather
# than one with a direction flag: the flagged one measured 30-40 % slower.
_PACK_CHUNK = 256


@njit(cache=True, parallel=True)
def _words_to_records(srcs, offsets, dst):
    n = dst.shape[0]
    for c in prange((n + _PACK_CHUNK - 1) // _PACK_CHUNK):
        lo = c * _PACK_CHUNK
        hi = min(n, lo + _PACK_CHUNK)
        for f in range(len(srcs)):
            src = srcs[f]
            o = offsets[f]
            if src.shape[1] == 2:  # 8-byte fields, nearly all
                for i in range(lo, hi):
                    dst[i, o] = src[i, 0]
                    dst[i, o + 1] = src[i, 1]
            else:
                for i in range(lo, hi):
                    for w in range(src.shape[1]):
                        dst[i, o + w] = src[i, w]


# The mirror of the kernel above, with the rows read and the rows written given: unpacking
# records in a given order (``unpack_records``; permuting the records and then unpacking them
# read and wrote every record twice, 2 + 1.2 ms for 5e4 records of 96 bytes, where here each
# record is read where it lies, once), and the MPI sort's placement of its own slice and of
# the received runs at their merged positions (``pos``; each run read in order, its rows
# written at increasing positions).  A chunk's records stay in the cache while its fields are
# copied out one after another.  ``order`` or ``pos`` None is the identity: numba compiles a
# version without that load.
@njit(cache=True, parallel=True)
def _records_to_words(src, offsets, n, order, pos, dsts):
    """``dsts[f][pos[i]] = field f of record order[i]`` for ``i < n``."""
    for c in prange((n + _PACK_CHUNK - 1) // _PACK_CHUNK):
        lo = c * _PACK_CHUNK
        hi = min(n, lo + _PACK_CHUNK)
        for f in range(len(dsts)):
            dst = dsts[f]
            o = offsets[f]
            if dst.shape[1] == 2:
                for i in range(lo, hi):
                    j = i if order is None else order[i]
                    k = i if pos is None else pos[i]
                    dst[k, 0] = src[j, o]
                    dst[k, 1] = src[j, o + 1]
            else:
                for i in range(lo, hi):
                    j = i if order is None else order[i]
                    k = i if pos is None else pos[i]
                    for w in range(dst.shape[1]):
                        dst[k, w] = src[j, o + w]


def _word_layout(dtype: np.dtype, names) -> np.ndarray | None:
    """Offsets (in 32-bit words) of the members, or None if not all are word-aligned."""
    if dtype.itemsize % 4:
        return None
    offs = []
    for name in names:
        sub, off = dtype.fields[name][:2]
        if off % 4 or sub.itemsize % 4 or sub.hasobject:
            return None
        offs.append(off // 4)
    return np.array(offs, dtype=np.int64)


def _as_words(arr: np.ndarray, n: int) -> np.ndarray:
    return arr.view(np.uint8).reshape(n, -1).view(np.uint32)


@njit(cache=True)
def _all_equal_words(w: np.ndarray) -> bool:
    """Whether every element of ``w`` (unsigned words) equals the first (``False`` if empty).

    Chunks of 256 are OR-reduced before the test, so the scan vectorises (a fixed trip count:
    6-13x faster than chunks bounded by ``min(n, ...)``), and a column whose values differ
    stops at its first chunk."""
    n = w.shape[0]
    if n == 0:
        return False
    first = w[0]
    full = n // 256
    for c in range(full):
        acc = w[0] ^ first
        base = c * 256
        for i in range(256):
            acc |= w[base + i] ^ first
        if acc != 0:
            return False
    acc = w[0] ^ first
    for i in range(full * 256, n):
        acc |= w[i] ^ first
    return acc == 0


def _words_of(arr: np.ndarray) -> np.ndarray | None:
    """A 1-d numeric array as unsigned words of its item size (``None`` for other arrays)."""
    if arr.ndim != 1 or arr.dtype.kind not in "iufb" or arr.dtype.itemsize not in (1, 2, 4, 8):
        return None
    return np.ascontiguousarray(arr).view(f"u{arr.dtype.itemsize}")


def uniform_value(arr: np.ndarray) -> bytes | None:
    """The bytes of the one value every element of ``arr`` holds, bit for bit (``-0.0`` and
    ``0.0``, or two NaN payloads, differ); ``None`` if they differ, if ``arr`` is empty or
    not a 1-d numeric array.

    A sort need not permute such a column (today every star's ``startype`` and ``rad``
    without stellar evolution, ``binind`` without binaries, ``m`` of a single-mass model):
    its sorted copy is the value repeated.
    """
    w = _words_of(arr)
    if w is None or not _all_equal_words(w):
        return None
    return w[:1].tobytes()


def _filled(dtype: np.dtype, n: int, value: bytes) -> np.ndarray:
    """``n`` copies of the element whose bytes are ``value`` (bits kept, NaN payloads too)."""
    out = np.empty(n, dtype=dtype)
    out.view(f"u{out.dtype.itemsize}").fill(np.frombuffer(value, dtype=f"u{len(value)}")[0])
    return out


def _uniform_fields(fields: Mapping[str, np.ndarray], key: str | None,
                    tiebreak: str | None) -> dict[str, bytes]:
    """The fields of ``fields`` (not the keys) whose values are all the same, with that
    value's bytes (:func:`uniform_value`)."""
    out = {}
    for name, arr in fields.items():
        if name in (key, tiebreak):
            continue
        v = uniform_value(arr)
        if v is not None:
            out[name] = v
    return out


def _pack_words(fields: Mapping[str, np.ndarray], rec: np.ndarray) -> bool:
    """Fill ``rec`` from ``fields`` record by record; False if the layout does not allow it."""
    n = rec.shape[0]
    offs = _word_layout(rec.dtype, list(fields))
    if n == 0 or offs is None:
        return False
    srcs = tuple(_as_words(np.ascontiguousarray(a), n) for a in fields.values())
    _words_to_records(srcs, offs, _as_words(rec, n))
    return True


@njit(cache=True, parallel=True)
def _gather_kernel(src: np.ndarray, order: np.ndarray, dst: np.ndarray) -> None:
    for i in prange(order.shape[0]):
        dst[i] = src[order[i]]


def gather_rows(arr: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``arr[order]`` for a 1-d array, by a compiled threaded loop.

    A sort permutes every star field with random reads; numpy's fancy indexing is 3x slower
    than this loop on one core (N = 1e5, 12 fields: 12 ms against 4 ms), and threads help.
    """
    arr = np.ascontiguousarray(arr)
    if arr.ndim != 1 or arr.dtype.kind not in "iufb":
        return np.ascontiguousarray(arr[order])
    out = np.empty(order.shape[0], dtype=arr.dtype)
    _gather_kernel(arr, np.ascontiguousarray(order, dtype=np.intp), out)
    return out


@njit(cache=True, parallel=True)
def _gather_rows_kernel(src: np.ndarray, order: np.ndarray, dst: np.ndarray) -> None:
    for i in prange(order.shape[0]):
        j = order[i]
        for k in range(src.shape[1]):
            dst[i, k] = src[j, k]


def _take(rec: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``rec[order]`` for structured arrays, moving each record as one opaque blob.

    Records whose size is a multiple of 8 bytes (aligned members make them so) are copied as
    rows of 64-bit words by a compiled loop (5x faster than numpy on 500k records; 32-bit
    rows are slower); others through a void view, itself several times faster than indexing
    the structured array.
    """
    rec = np.ascontiguousarray(rec)
    size = rec.dtype.itemsize
    if size % 8 == 0 and rec.shape[0] > 0:
        words = rec.view(np.uint64).reshape(rec.shape[0], size // 8)
        out = np.empty((len(order), size // 8), dtype=np.uint64)
        _gather_rows_kernel(words, np.ascontiguousarray(order, dtype=np.intp), out)
        return out.reshape(-1).view(rec.dtype)
    blob = np.dtype((np.void, size))
    return rec.view(blob)[order].view(rec.dtype)


def unpack_records(rec: np.ndarray, names: list[str] | tuple[str, ...] | None = None,
                   order: np.ndarray | None = None) -> Fields:
    """Split a structured array back into a dict of C-contiguous arrays.

    Parameters
    ----------
    rec : numpy.ndarray
        Structured array, e.g. from :func:`pack_records`.
    names : sequence of str, optional
        Members to extract, in this order (default: all, in dtype order).
    order : numpy.ndarray of int, optional
        Permutation applied while unpacking (row ``i`` of each array is ``rec[order[i]]``).

    Returns
    -------
    dict of str to numpy.ndarray
        Independent copies (they never share memory with ``rec``).
    """
    if names is None:
        names = rec.dtype.names or ()
    n = rec.shape[0]
    offs = _word_layout(rec.dtype, names) if rec.ndim == 1 and n > 0 else None
    if offs is None:
        if order is not None:
            rec = rec[order]
        return {name: np.array(rec[name], copy=True, order="C") for name in names}
    m = n if order is None else order.shape[0]
    # a sub-array member's dtype gives an (n, k) array, as numpy's rec[name] does
    out = {name: np.empty(m, dtype=rec.dtype.fields[name][0]) for name in names}
    dsts = tuple(_as_words(a, m) for a in out.values())
    _records_to_words(_as_words(np.ascontiguousarray(rec), n), offs, m,
                      None if order is None else np.ascontiguousarray(order, dtype=np.intp),
                      None, dsts)
    return out


@functools.lru_cache(maxsize=64)
def _dtype_signature(dtype: np.dtype) -> int:
    """16-bit checksum of a record dtype, identical across processes (kept per dtype: the
    step sorts the same fields every time, and the description costs 0.13 ms)."""
    return zlib.crc32(repr(dtype.descr).encode()) & 0xFFFF


# ---------------------------------------------------------------------------
# local ordering
# ---------------------------------------------------------------------------


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


def _lex_searchsorted(
    keys: np.ndarray,
    tbs: np.ndarray | None,
    split_keys: np.ndarray,
    split_tbs: np.ndarray | None,
) -> np.ndarray:
    """Number of sorted ``(keys, tbs)`` pairs strictly below each splitter pair."""
    lo = np.searchsorted(keys, split_keys, side="left")
    if tbs is None or split_tbs is None:
        return lo.astype(np.int64)
    hi = np.searchsorted(keys, split_keys, side="right")
    pos = lo.astype(np.int64)
    # Loop over splitters (P - 1 of them), not stars; tbs is sorted within equal keys.
    for j in np.flatnonzero(hi > lo):
        pos[j] += np.searchsorted(tbs[lo[j] : hi[j]], split_tbs[j], side="left")
    return pos


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


@njit(cache=True, nogil=True)
def _increasing(a):
    """Whether ``a`` increases strictly (one vectorised pass: half numpy's time)."""
    bad = False
    for i in range(a.shape[0] - 1):
        bad |= a[i + 1] <= a[i]
    return not bad


@njit(cache=True, nogil=True)
def _any_nan(a):
    """Whether ``a`` holds a NaN (one vectorised pass, no temporary)."""
    found = False
    for i in range(a.shape[0]):
        found |= a[i] != a[i]
    return found


def _rows_error(rows: np.ndarray | None, n: int) -> str | None:
    """Why ``rows`` cannot select among ``n`` rows, or None."""
    if rows is None:
        return None
    if rows.ndim != 1 or rows.dtype.kind not in "iu":
        return "rows must be a 1-d integer array"
    # increasing, so its ends bound it: one pass over the rows (this runs every step)
    if rows.size and (rows[0] < 0 or rows[-1] >= n or not _increasing(rows)):
        return f"rows must be increasing indices in [0, {n})"
    return None


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
                   rows: np.ndarray | None = None, share_uniform: bool = False) -> Fields:
    """Serial path: sort every array of ``fields`` (its ``rows`` only) by ``(key, tiebreak)``;
    ``share_uniform``: see :func:`parallel_sort`."""
    err = _fields_error(fields, key, tiebreak, rows)
    if err:
        raise ValueError(err)
    order = _selected_order(fields[key], None if tiebreak is None else fields[tiebreak], rows)
    # a column holding one value needs no permutation: its random reads are a sort's cost
    same = _uniform_fields(fields, key, tiebreak)
    return {name: _uniform_column(arr, same[name], order.size, share_uniform) if name in same
            else gather_rows(arr, order) for name, arr in fields.items()}


def _uniform_column(arr: np.ndarray, value: bytes, n: int, share: bool) -> np.ndarray:
    """A column of ``n`` elements ``value`` (the bytes every element of ``arr`` holds): with
    ``share`` a prefix of ``arr`` where it is long enough (every element is the value, so any
    prefix is the column), else a new array."""
    if share and arr.ndim == 1 and arr.flags.c_contiguous and arr.shape[0] >= n:
        return arr[:n]
    return _filled(arr.dtype, n, value)


# ---------------------------------------------------------------------------
# communication
# ---------------------------------------------------------------------------


def _check_params(sample_size: int | None = None, chunk: int = MIN_CHUNK) -> None:
    """Validate scalar arguments (identical on all ranks, so raising is collective)."""
    if sample_size is not None and int(sample_size) < 1:
        raise ValueError(f"sample_size must be >= 1, got {sample_size}")
    block_counts(0, 1, chunk)  # raises ValueError for a bad chunk


def _exclusive_cumsum(a: np.ndarray) -> np.ndarray:
    out = np.zeros_like(a)
    np.cumsum(a[:-1], out=out[1:])
    return out


def _exchange(comm: Any, rec: np.ndarray, send_counts: np.ndarray,
              send_starts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Send slices of ``rec`` to ranks 0..P-1; receive in rank order.

    ``send_counts[j]`` records go to rank ``j``, starting at record ``send_starts[j]``
    (default: consecutive slices from the front of ``rec``).  Counts travel with
    ``Alltoall``; the records travel as bytes of their structured dtype with ``Alltoallv``.
    Returns the records received and how many came from each rank.
    """
    from mpi4py import MPI

    size = comm.Get_size()
    send_counts = np.ascontiguousarray(send_counts, dtype=np.int64)
    if send_starts is None:
        send_starts = _exclusive_cumsum(send_counts)
    recv_counts = np.empty(size, dtype=np.int64)
    comm.Alltoall(send_counts, recv_counts)
    item = rec.dtype.itemsize
    out = np.empty(int(recv_counts.sum()), dtype=rec.dtype)
    sendbuf = np.ascontiguousarray(rec).view(np.uint8)
    comm.Alltoallv(
        [sendbuf, (send_counts * item, np.asarray(send_starts, dtype=np.int64) * item),
         MPI.BYTE],
        [out.view(np.uint8), (recv_counts * item, _exclusive_cumsum(recv_counts) * item), MPI.BYTE],
    )
    return out, recv_counts


def default_sample_size(n_ranks: int, n_local: int = 0) -> int:
    """Default number of regular samples per rank: ``n_local / 64`` clipped to
    ``[max(4 P, 64), 4096]``.

    Oversampling (``s > P``) tightens the splitters and so reduces what the
    redistribution has to move afterwards (in :func:`parallel_sort`, the keys
    gathered to move the cuts to the block bounds, about ``n_local / sqrt(s P)`` per
    cut from every rank); rank 0 merges the ``s * P`` samples.  One sample per 64
    local stars: at N = 1e6 on 16 ranks (16 cores, 2026-11-26) 1024 samples per rank
    instead of 64 took the sort from 0.094-0.099 to 0.050-0.051 us per star (the step
    0.210-0.220 -> 0.167-0.170), while at N = 1e5 there 64 stayed the best (1024: sort
    0.117-0.120 -> 0.127-0.136; 4096: 0.22-0.27, rank 0 then sorting 65,536 samples with
    ``np.lexsort`` for 12 ms, which a merge of the ranks' sorted samples now replaces).
    The final layout never depends on ``s``.
    """
    return int(min(max(4 * n_ranks, 64, n_local // 64), 4096))


#: Up to this many stars on a rank, the MPI sort reads its fields one at a time in sorted
#: order (:func:`_move_fields`): 1 MB per 8-byte field, within a core's L2 cache (2 MB on
#: the machines measured).  Above it a field does not fit, and the records are packed whole
#: and permuted (one random access per star instead of one per field): at N = 1e6 on two
#: ranks (5e5 stars each) the sort took 0.066-0.078 us per star-step reading the fields,
#: 0.059-0.063 with whole records.
FIELD_GATHER_MAX = 1 << 17

# The MPI sort's own stars go from this rank's fields straight to their merged positions, and
# the stars that leave straight into their records: one field after another, each read at
# random but alone (a rank's field, 0.4 MB at N = 1e5 on two ranks, stays in its core's L2
# cache; all fields together, 2.4 MB, do not: a loop over the fields inside a chunk of stars
# took 2.5 ms per step for the own stars, against 1.3 to pack and permute whole records and
# 0.7 to unpack them at their positions).  The 8-byte fields (nearly all) move as one 64-bit
# word each (0.41 against 0.74 ms for 4e4 stars' six fields as 32-bit words), the rows shared
# between the threads; each field is first read in order, one load per cache line, so that
# its random reads then hit the core's cache: inside the step the fields are cold (the orbit
# step came between), and the random reads paid a miss each (_place 1.0-1.25 against 2.1-2.7
# ms per rank and step at N = 1e5 on two ranks, three alternations).
@njit(cache=True, parallel=True)
def _move_words(srcs, rows, pos, dsts):
    """``dsts[f][pos[i]] = srcs[f][rows[i]]`` for every field ``f`` (64-bit words; ``pos``
    None: row ``i``).  Returns a checksum of the words read in order (so that the compiler
    keeps those reads)."""
    seen = np.uint64(0)
    for f in range(len(srcs)):
        src = srcs[f]
        dst = dsts[f]
        for i in range(0, src.shape[0], 8):  # one load per cache line, in order
            seen ^= src[i]
        if pos is None:
            for i in prange(rows.shape[0]):
                dst[i] = src[rows[i]]
        else:
            for i in prange(rows.shape[0]):
                dst[pos[i]] = src[rows[i]]
    return seen


def _move_fields(fields: Mapping[str, np.ndarray], rows: np.ndarray, pos: np.ndarray | None,
                 dsts: Mapping[str, np.ndarray]) -> None:
    """``dsts[name][pos[i]] = fields[name][rows[i]]`` for every field (``pos`` None: row
    ``i``); ``dsts`` are arrays or a record array's members.  The 1-d 8-byte fields by
    :func:`_move_words`, the others (rare: none travels in a step) by numpy."""
    rows = np.ascontiguousarray(rows, dtype=np.intp)
    pos = None if pos is None else np.ascontiguousarray(pos, dtype=np.intp)
    srcs, words = [], []
    for name, arr in fields.items():
        dst = dsts[name]
        if arr.ndim == 1 and arr.dtype.itemsize == 8 and dst.view(np.uint64).flags.aligned:
            srcs.append(np.ascontiguousarray(arr).view(np.uint64))
            words.append(dst.view(np.uint64))
        elif pos is None:
            dst[...] = arr[rows]
        else:
            dst[pos] = arr[rows]
    if srcs:
        _move_words(tuple(srcs), rows, pos, tuple(words))


def _pack_rows(fields: Mapping[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """The records of the stars ``rows`` of ``fields``, in that order (the MPI sort's stars
    that leave: about a fifth at P = 2; :func:`pack_records` with an order packs every star
    and then permutes them all)."""
    rec = np.empty(rows.shape[0], dtype=_record_dtype(fields))
    if rows.shape[0]:
        _move_fields(fields, rows, None, {name: rec[name] for name in fields})
    return rec


def _place(fields: Mapping[str, np.ndarray], own_rows: np.ndarray, own_pos: np.ndarray,
           rec: np.ndarray, rec_pos: np.ndarray, own_rec: np.ndarray | None = None) -> Fields:
    """New arrays of ``own_rows.size + rec.size`` rows (the dtypes and shapes of ``fields``):
    row ``own_pos[i]`` is star ``own_rows[i]`` of ``fields`` (or, with ``own_rec``, record
    ``own_rec[i]``), row ``rec_pos[j]`` is record ``rec[j]``."""
    m = own_rows.shape[0] + rec.shape[0]
    out = {name: np.empty((m,) + arr.shape[1:], dtype=arr.dtype) for name, arr in fields.items()}
    offs = _word_layout(rec.dtype, list(fields))
    if m == 0:
        return out
    if offs is None:
        for name, arr in fields.items():
            out[name][own_pos] = arr[own_rows] if own_rec is None else own_rec[name]
            out[name][rec_pos] = rec[name]
        return out
    dsts = tuple(_as_words(a, m) for a in out.values())
    if own_rec is not None:
        if own_rec.shape[0]:
            _records_to_words(_as_words(np.ascontiguousarray(own_rec), own_rec.shape[0]), offs,
                              own_rec.shape[0], None,
                              np.ascontiguousarray(own_pos, dtype=np.intp), dsts)
    elif own_rows.shape[0]:
        _move_fields(fields, own_rows, own_pos, out)
    if rec_pos.shape[0]:
        _records_to_words(_as_words(np.ascontiguousarray(rec), rec.shape[0]), offs,
                          rec_pos.shape[0], None, np.ascontiguousarray(rec_pos, dtype=np.intp),
                          dsts)
    return out


def _sample_sort_records(
    comm: Any,
    fields: Mapping[str, np.ndarray],
    key: str,
    tiebreak: str | None,
    sample_size: int | None,
    rows: np.ndarray | None = None,
    chunk: int | None = None,
    splitters: np.ndarray | None = None,
    report: dict | None = None,
    share_uniform: bool = False,
) -> Fields:
    """Sample Sort proper on ``size > 1`` communicators: this rank's sorted run of stars.

    The records of the stars that change rank (at P = 2 about a fifth) go out in sorted
    order, one slice per destination, and both this rank's own stars and the received runs
    are placed at their merged positions (:func:`_place`).  Up to :data:`FIELD_GATHER_MAX`
    stars on the rank only those that leave are packed, and the own stars are read from
    the fields; above it every star is packed whole, in sorted order.

    With ``chunk`` the cuts are made exact (:func:`_exact_cuts`), so that the one exchange
    leaves every rank its ``block_counts(N, P, chunk)`` records: no redistribution after it.
    With ``splitters`` too (guesses of the ``P - 1`` keys at the block bounds, the same on
    every rank) there is no sampling round: one reduction checks the input and counts the
    stars below the guesses, and the exact cuts' gather agrees on the columns of one value.
    """
    size = comm.Get_size()
    me = comm.Get_rank()

    # Phase 1: local sort (of the keys). Errors are held back until all ranks know about them.
    err = _fields_error(fields, key, tiebreak, rows)
    if err is None:
        kv = fields[key]
        tv = None if tiebreak is None else fields[tiebreak]
        order = _selected_order(kv, tv, rows)
        keys = gather_rows(kv, order)
        tbs = None if tv is None else gather_rows(tv, order)
        rec_dtype = _record_dtype(fields)
    else:
        order = keys = tbs = rec_dtype = None
    n_local = 0 if order is None else order.size
    # columns of one value here (a rank without stars does not constrain them): those of
    # one value on every rank stay out of the records (rank 0 decides with the splitters,
    # or every rank from the exact cuts' gather)
    same = _uniform_fields(fields, key, tiebreak) if n_local else None
    own_same = same or {}

    if splitters is None:
        msg, split, n_total, same = _sampled_splitters(comm, keys, tbs, n_local, sample_size,
                                                       None if rec_dtype is None
                                                       else rec_dtype.descr, err, same)
        if msg:
            raise ValueError(err or f"sample_sort: invalid input on another rank: {msg}")
        split_k, split_t = split
    else:  # the caller's guesses: no sampling round, the cuts are made exact below
        split_k, split_t = splitters, None
        cuts = (np.zeros(splitters.shape, dtype=np.int64) if err else
                _lex_searchsorted(keys, tbs, splitters.ravel(), None).reshape(splitters.shape))
        # one reduction: N, errors, the dtype check and the guesses' global counts
        n_total, counts = _checked_total(comm, "sample_sort", n_local, err,
                                         rec_dtype, cuts.ravel())
        counts = counts.reshape(splitters.shape)
        if report is not None:
            report["counts"] = counts
            report["targets"] = rank_bounds(n_total, size, chunk)[1:-1]

    if report is not None:
        report["n_total"] = n_total
    # Phase 4: cut at the splitters, exchange the stars that leave this rank.
    if split_k is None:  # no samples at all, hence no stars anywhere
        bounds = np.zeros(size - 1, dtype=np.int64)
    elif splitters is None:
        bounds = _lex_searchsorted(keys, tbs, split_k, split_t)
        if chunk is not None:
            bounds = _exact_cuts(comm, keys, tbs, bounds[:, None],
                                 rank_bounds(n_total, size, chunk)[1:-1], n_total)[0]
    else:  # the columns of one value agreed on with the exact cuts' offers
        names = list(fields)
        bounds, same = _exact_cuts(comm, keys, tbs, cuts,
                                   rank_bounds(n_total, size, chunk)[1:-1], n_total,
                                   counts=counts, uniform=(names, [fields[x].dtype.itemsize
                                                                   for x in names], same))
    edges = np.concatenate(([0], bounds, [n_local])).astype(np.int64)
    lo, hi = int(edges[me]), int(edges[me + 1])
    send_counts = np.diff(edges)
    send_counts[me] = 0
    sent = {name: arr for name, arr in fields.items() if name not in same}
    # packed in sorted order, each destination's run a slice: only the stars that leave
    # (those below this rank's own slice first, then those above it), or all of them
    starts = edges[:-1].copy()
    if n_local <= FIELD_GATHER_MAX:
        own_rec = None
        rec = _pack_rows(sent, np.concatenate((order[:lo], order[hi:])))
        starts[me + 1:] -= hi - lo
    else:  # (a field larger than the cache: every record packed whole, in sorted order)
        rec = pack_records(sent, order)
        own_rec = rec[lo:hi]
    received, run_counts = _exchange(comm, rec, send_counts, starts)

    # Phase 5: merge this rank's own run with the received ones (those of several ranks
    # merged among themselves first), then place every row at its merged position.
    rk = np.ascontiguousarray(received[key])
    rt = (np.zeros(rk.size, dtype=np.int8) if tiebreak is None
          else np.ascontiguousarray(received[tiebreak]))
    src = np.repeat(np.arange(size), run_counts)  # each received record's rank
    if np.count_nonzero(run_counts) > 1:
        rorder = _merge_runs(rk, rt, np.concatenate(([0], np.cumsum(run_counts))))
        rk, rt, src = rk[rorder], rt[rorder], src[rorder]
    else:
        rorder = None
    own_keys = keys[lo:hi]
    own_tbs = np.zeros(hi - lo, dtype=np.int8) if tbs is None else tbs[lo:hi]
    where_own, where_rec = _merge_two(own_keys, own_tbs, rk, rt, src < me)
    if rorder is not None:
        where_rec[rorder] = where_rec.copy()
    placed = _place(sent, order[lo:hi], where_own, received, where_rec, own_rec)
    n_out = where_own.size + where_rec.size
    # (a column of one value shared only where it holds the common value here)
    return {name: _uniform_column(arr, same[name], n_out,
                                  share_uniform and own_same.get(name) == same[name])
            if name in same else placed[name] for name, arr in fields.items()}


def _sampled_splitters(comm: Any, keys: np.ndarray | None, tbs: np.ndarray | None,
                       n_local: int, sample_size: int | None, dtype_descr: Any,
                       err: str | None, same: dict[str, bytes] | None) -> tuple:
    """Regular samples gathered on rank 0, which checks every rank's input, picks the
    splitters and counts the stars; returns ``(message, (split_keys, split_tbs), N, columns
    of one value on every rank)`` on every rank (``message``: the first error, or None)."""
    size = comm.Get_size()
    # regular sampling at the centres of s equal slices
    s = default_sample_size(size, n_local) if sample_size is None else int(sample_size)
    ns = min(s, n_local)
    if ns > 0:
        pos = ((2 * np.arange(ns, dtype=np.int64) + 1) * n_local) // (2 * ns)
        samp_k = keys[pos]
        samp_t = None if tbs is None else tbs[pos]
    else:
        samp_k = samp_t = None
    gathered = comm.gather((n_local, samp_k, samp_t, dtype_descr, err, same), root=0)
    if comm.Get_rank() == 0:
        msg = _root_check(gathered)
        split = None if msg else _choose_splitters(gathered, size, tbs is not None)
        payload = (msg, split, sum(g[0] for g in gathered),
                   _common_values([g[5] for g in gathered]))
    else:
        payload = None
    return comm.bcast(payload, root=0)


def _exact_cuts(comm: Any, keys: np.ndarray, tbs: np.ndarray | None, cuts: np.ndarray,
                targets: np.ndarray, n_total: int, counts: np.ndarray | None = None,
                uniform: tuple[list[str], list[int], dict[str, bytes] | None] | None = None,
                ) -> tuple[np.ndarray, dict[str, bytes] | None]:
    """Move the local cuts at the splitters so that the global cuts fall at ``targets``.

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm
        Communicator (``size > 1``); collective call.
    keys, tbs : numpy.ndarray
        This rank's sorted keys and tiebreaks (``tbs`` may be None).
    cuts : numpy.ndarray of int, shape (P - 1, m)
        Local number of pairs below each of ``m`` splitters (candidates) per cut, the same
        splitters on every rank, non-decreasing along each row.
    targets : numpy.ndarray of int
        Wanted global number of pairs before each cut (the block bounds), non-decreasing.
    n_total : int
        Number of pairs on all ranks.
    counts : numpy.ndarray of int, optional
        The splitters' global counts (``cuts`` summed over ranks), where the caller reduced
        them already (with other numbers, in one message).
    uniform : tuple, optional
        ``(names, itemsizes, same)``: the fields, their item sizes [bytes, at most 8] and
        this rank's columns of one value (:func:`_uniform_fields`; None: no stars here),
        agreed on with the offers (the gather then happens even without a deficit).

    Returns
    -------
    cuts : numpy.ndarray of int
        Local cuts such that, summed over ranks, cut ``j`` is ``targets[j]``: the pairs before
        it are the globally smallest ``targets[j]``.
    common : dict or None
        With ``uniform``, the columns of one value on every rank that holds stars
        (:func:`_common_values`); else None.

    Notes
    -----
    The global counts bracket each target between two splitters of its row (or the ends,
    0 and ``n_total`` pairs): ``c_lo <= target <= c_hi``.  From the nearer one the
    ``d`` pairs still missing above it (or in excess below it) are the globally smallest
    (largest) inside the bracket, so each rank offers its ``d`` nearest pairs there, every
    rank gathers all offers and stable-sorts them the same way (ties in rank order), and
    counts its own among the ``d`` that move.  With unique pairs the cuts are those of the
    globally sorted sequence; with ties (no tiebreak) they still sum to the targets, and they
    are the same whatever the splitters.  A fine bracket keeps the offers near the pairs
    inside it, a few per cut in all, where one splitter per cut has every rank offer about
    ``d``, the deviation of the guess (a hundred or more at N = 1e5): a gather that grows
    as P^2.  One gather (two collectives) besides the reduction instead of a second exchange
    of every record.

    The offers travel as numbers (:func:`_offer_heads`, :func:`_offer_words`): pickled, each
    rank's offers cost about 10 us to unpack on every rank, 10 ms per step at P = 1024
    (bench/gather_cost.py).  Keys or tiebreaks that are not numbers of at most 8 bytes go
    pickled, the counts and one-value columns still as numbers.
    """
    n = keys.shape[0]
    cuts = np.asarray(cuts, dtype=np.int64).reshape(targets.size, -1)
    if counts is None:
        counts = allreduce_sum(comm, cuts.ravel()).reshape(cuts.shape)
    counts = np.asarray(counts, dtype=np.int64).reshape(cuts.shape)
    rows = np.arange(targets.size)
    t = targets[:, None]
    # each target's bracket: the last splitter at or under it, the first at or over it, the
    # ends (no pair below, every pair below) standing in for missing ones
    below = np.count_nonzero(counts <= t, axis=1)  # index of the lower one, with the end
    above = np.count_nonzero(counts < t, axis=1) + 1
    local = np.column_stack((np.zeros(targets.size, dtype=np.int64), cuts,
                             np.full(targets.size, n, dtype=np.int64)))
    total = np.column_stack((np.zeros(targets.size, dtype=np.int64), counts,
                             np.full(targets.size, n_total, dtype=np.int64)))
    lo_cut, hi_cut = local[rows, below], local[rows, above]
    up, down = targets - total[rows, below], total[rows, above] - targets
    deficit = np.where(up <= down, up, -down)
    base = np.where(up <= down, lo_cut, hi_cut)
    if not deficit.any() and uniform is None:  # every rank holds the same totals: all skip
        return base, None
    # this rank's offers for every cut short of its target, as flat arrays (the cut's index
    # in `moving` with each)
    moving = np.flatnonzero(deficit)
    d = deficit[moving]
    lo = np.where(d > 0, base[moving], np.maximum(lo_cut[moving], base[moving] + d))
    hi = np.where(d > 0, np.minimum(hi_cut[moving], base[moving] + d), base[moving])
    sizes = hi - lo
    which = np.repeat(np.arange(moving.size, dtype=np.int32), sizes)
    # the rows lo..hi-1 of each cut, one after the other
    take = np.arange(which.size, dtype=np.int64) + np.repeat(lo - (np.cumsum(sizes) - sizes),
                                                             sizes)
    k, t = keys[take], None if tbs is None else tbs[take]
    n_offers, common = _offer_heads(comm, which.size, uniform)
    if _words_of(keys) is not None and (tbs is None or _words_of(tbs) is not None):
        k, t, cut, owner = _offer_words(comm, k, t, which, n_offers)
    else:
        k, t, cut, owner = _flat_offers(comm.allgather((k, t, which)))
    mine = _own_moves(k, t, cut, owner, d, comm.Get_rank())
    base[moving] += np.where(d > 0, mine, -mine)
    return base, common


def _to_words(a: np.ndarray) -> np.ndarray:
    """Each item's bits in one int64 (zero-extended): :func:`_from_words` gives them back."""
    w = _words_of(a)
    return w.view(np.int64) if w.dtype.itemsize == 8 else w.astype(np.int64)


def _from_words(w: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The items of ``dtype`` held in the words ``w`` (:func:`_to_words`)."""
    return np.ascontiguousarray(w).astype(f"u{dtype.itemsize}").view(dtype)


def _offer_heads(comm: Any, n_offers: int,
                 uniform: tuple[list[str], list[int], dict[str, bytes] | None] | None,
                 ) -> tuple[np.ndarray, dict[str, bytes] | None]:
    """Every rank's offer count and, with ``uniform``, the columns of one value on every rank
    that holds stars (:func:`_common_values`), in one Allgather of int64 words: per rank the
    count, then per field a flag (0 several values, 1 one value, 2 no stars) and the value's
    bits.  Numbers, not one pickled object per rank to unpack on every rank."""
    p = comm.Get_size()
    nf = 0 if uniform is None else len(uniform[0])
    head = np.zeros(1 + 2 * nf, dtype=np.int64)
    head[0] = n_offers
    if uniform is not None:  # (Python ints: a numpy call per field costs more here; a
        # value's bytes as an int64, signed for 8 bytes, zero-extended for fewer)
        names, itemsizes, same = uniform
        head[1:] = [x for name in names for x in (
            (2, 0) if same is None else (1, int.from_bytes(same[name], "little",
                                                           signed=len(same[name]) == 8))
            if name in same else (0, 0))]
    heads = np.empty((p, head.size), dtype=np.int64)
    comm.Allgather(head, heads)
    common = None
    if uniform is not None:
        names, itemsizes, _ = uniform
        f = heads[:, 1:].reshape(p, nf, 2)
        there = f[:, :, 0] != 2
        value = f[np.argmax(there, axis=0), np.arange(nf), 1]
        one = there.any(axis=0) & np.all((f[:, :, 0] == 1) | ~there, axis=0) \
            & np.all((f[:, :, 1] == value) | ~there, axis=0)
        common = {names[j]: int(value[j]).to_bytes(itemsizes[j], "little",
                                                   signed=itemsizes[j] == 8)
                  for j in np.flatnonzero(one)}
    return heads[:, 0], common


def _offer_words(comm: Any, k: np.ndarray, t: np.ndarray | None, which: np.ndarray,
                 n_offers: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray,
                                                np.ndarray]:
    """Every rank's offers of :func:`_exact_cuts` (``n_offers`` per rank) in one Allgatherv
    of int64 rows, (cut, key bits, tiebreak bits) each; returns them in rank order, each
    rank's as offered (keys, tiebreaks, cut, owner)."""
    from mpi4py import MPI

    w = 2 if t is None else 3
    rows = np.empty((which.size, w), dtype=np.int64)
    rows[:, 0] = which
    rows[:, 1] = _to_words(k)
    if t is not None:
        rows[:, 2] = _to_words(t)
    every = np.empty((int(n_offers.sum()), w), dtype=np.int64)
    counts = n_offers * w
    comm.Allgatherv([rows, MPI.INT64_T],
                    [every, (counts, np.cumsum(counts) - counts), MPI.INT64_T])
    return (_from_words(every[:, 1], k.dtype),
            None if t is None else _from_words(every[:, 2], t.dtype), every[:, 0],
            np.repeat(np.arange(comm.Get_size()), n_offers))


def _flat_offers(everyone: list[tuple]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray,
                                                   np.ndarray]:
    """Every rank's offers ``(keys, tiebreaks or None, cut)``, one tuple per rank, as the
    flat arrays of :func:`_own_moves` (keys, tiebreaks, cut, owner)."""
    k = np.concatenate([o[0] for o in everyone])
    t = None if everyone[0][1] is None else np.concatenate([o[1] for o in everyone])
    cut = np.concatenate([o[2] for o in everyone]).astype(np.int64)
    owner = np.repeat(np.arange(len(everyone)), [len(o[2]) for o in everyone])
    return k, t, cut, owner


def _own_moves(k: np.ndarray, t: np.ndarray | None, cut: np.ndarray, owner: np.ndarray,
               deficit: np.ndarray, rank: int) -> np.ndarray:
    """How many of ``rank``'s offers cross each cut (:func:`_exact_cuts`).

    The offers of all ranks, in rank order, each rank's ascending by cut, then by (key,
    tiebreak): keys ``k``, tiebreaks ``t`` (or None), the index ``cut`` of each one's cut in
    ``deficit`` (the cuts short of their targets by ``deficit[i] != 0``) and its ``owner``.
    Per cut, the offers of all ranks in the stable (key, tiebreak) order, ties in rank order;
    the smallest ``deficit[i]`` cross it upwards (``deficit[i] > 0``), or the largest
    ``-deficit[i]`` downwards: one stable sort of all offers by (cut, key, tiebreak) instead
    of one per cut.
    """
    cut = cut.astype(np.int64)
    order = np.lexsort((k, cut)) if t is None else np.lexsort((t, k, cut))
    cut, owner = cut[order], owner[order]
    first = np.searchsorted(cut, np.arange(deficit.size))  # each cut's offers' first slot
    size = np.diff(np.append(first, cut.size))
    slot = np.arange(cut.size) - first[cut]  # position among the cut's offers
    d = deficit[cut]
    crosses = np.where(d > 0, slot < d, slot >= size[cut] + d)
    return np.bincount(cut[crosses & (owner == rank)], minlength=deficit.size)


def _common_values(sames: list[dict[str, bytes] | None]) -> dict[str, bytes]:
    """The fields that hold one value, the same bytes, on every rank that holds stars, with
    that value, from every rank's :func:`_uniform_fields` (None: no stars there)."""
    common = None
    for same in sames:
        if same is None:  # no stars on that rank
            continue
        common = dict(same) if common is None else {
            name: v for name, v in common.items() if same.get(name) == v}
    return common or {}


def _root_check(gathered: list[tuple]) -> str | None:
    """On rank 0: first error message among ranks, or a dtype mismatch."""
    for rank, (_, _, _, _, err, *_) in enumerate(gathered):
        if err:
            return f"rank {rank}: {err}"
    descrs = {repr(g[3]) for g in gathered}
    if len(descrs) > 1:
        return f"record dtypes differ between ranks: {sorted(descrs)}"
    return None


def _choose_splitters(
    gathered: list[tuple], size: int, use_tiebreak: bool
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Pick ``size - 1`` splitter pairs at weighted quantiles of the samples.

    Each sample stands for ``n_k / s_k`` stars of its rank, so ranks that
    hold more stars than others (uneven input) are not under-represented.
    """
    parts = [(n, k, t) for n, k, t, *_ in gathered if k is not None and len(k) > 0]
    if not parts:
        return None, None
    sk = np.ascontiguousarray(np.concatenate([k for _, k, _ in parts]))
    st = np.concatenate([t for _, _, t in parts]) if use_tiebreak else None
    w = np.concatenate([np.full(len(k), n / len(k)) for n, k, _ in parts])
    # every rank's samples come sorted: merge the runs (the order np.lexsort((st, sk)), a
    # stable sort, gives, ties in rank order) instead of sorting them again (16 ranks x 4096
    # samples: 3.0 ms instead of 12.5 with lexsort, on rank 0 while the others wait)
    starts = np.concatenate(([0], np.cumsum([len(k) for _, k, _ in parts]))).astype(np.int64)
    order = _merge_runs(sk, np.ascontiguousarray(st) if use_tiebreak
                        else np.zeros(sk.size, dtype=np.int8), starts)
    sk, w = sk[order], w[order]
    # Estimated global rank of each sample's centre; non-decreasing.
    centre = np.cumsum(w) - 0.5 * w
    targets = np.arange(1, size) * (w.sum() / size)
    idx = np.minimum(np.searchsorted(centre, targets, side="left"), sk.size - 1)
    return sk[idx], (st[order][idx] if use_tiebreak else None)


def _checked_total(comm: Any, who: str, n_local: int, err: str | None, dtype: np.dtype | None,
                   extra: np.ndarray | None = None) -> tuple[int, np.ndarray]:
    """One packed reduction of N, the error count, a dtype-equality check and ``extra``
    (integers summed over ranks); returns ``(N, extra summed)`` or raises ValueError on every
    rank.  All dtype signatures are equal iff P sum(sig^2) == sum(sig)^2 (Cauchy-Schwarz),
    and every rank evaluates the same totals, so all ranks agree."""
    sig = 0 if dtype is None else _dtype_signature(dtype)
    extra = np.zeros(0, dtype=np.int64) if extra is None else extra
    tot = allreduce_sum(comm, np.concatenate((
        [n_local, err is not None, sig, sig * sig], extra)).astype(np.int64))
    n_total, n_err, s1, s2 = (int(x) for x in tot[:4])
    if n_err:
        raise ValueError(err or f"{who}: invalid input on {n_err} other rank(s)")
    if comm.Get_size() * s2 != s1 * s1:
        raise ValueError(f"{who}: record dtypes differ between ranks")
    return n_total, tot[4:]


def _redistribute_records(
    comm: Any, rec: np.ndarray | None, chunk: int, err: str | None = None
) -> np.ndarray:
    """Move globally sorted records to the block layout (``size > 1``)."""
    size = comm.Get_size()
    n_local = 0 if rec is None else rec.size
    n_total, _ = _checked_total(comm, "redistribute_to_blocks", n_local, err,
                                None if rec is None else rec.dtype)

    start = exscan_sum(comm, n_local)
    bounds = rank_bounds(n_total, size, chunk)
    # Overlap of [start, start + n_local) with every target rank's range.
    lo = np.clip(bounds[:-1], start, start + n_local)
    hi = np.clip(bounds[1:], start, start + n_local)
    # Senders hold increasing global ranges, so receiving in rank order keeps
    # global order: no re-sort needed.
    return _exchange(comm, rec, hi - lo)[0]


# ---------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------


def sample_sort(
    comm: Any,
    fields: Mapping[str, np.ndarray],
    key: str = "r",
    tiebreak: str | None = "id",
    sample_size: int | None = None,
) -> Fields:
    """Globally sort star records by ``(key, tiebreak)`` with Sample Sort.

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm or SerialComm
        Communicator; collective call.
    fields : mapping of str to numpy.ndarray
        This rank's stars (any number, possibly zero). Field names, order and
        dtypes must agree on all ranks.
    key : str, optional
        Sort key field (1-D, no NaN). Default ``'r'``.
    tiebreak : str or None, optional
        Secondary key (1-D) ordering equal keys; default ``'id'``. With unique
        ``(key, tiebreak)`` pairs the result does not depend on ``P``. ``None``
        sorts by ``key`` alone (ties then end up in an unspecified order).
    sample_size : int, optional
        Regular samples per rank, default :func:`default_sample_size`.

    Returns
    -------
    dict of str to numpy.ndarray
        This rank's part of the globally sorted data: ranks hold consecutive
        runs, rank 0 the smallest. Local sizes are only approximately balanced;
        see :func:`redistribute_to_blocks`.

    Raises
    ------
    ValueError
        On every rank, if any rank's input is invalid.
    """
    _check_params(sample_size)
    if comm.Get_size() == 1:
        return _sorted_fields(fields, key, tiebreak)
    return _sample_sort_records(comm, fields, key, tiebreak, sample_size)


def redistribute_to_blocks(
    comm: Any, fields: Mapping[str, np.ndarray], chunk: int = MIN_CHUNK
) -> Fields:
    """Move globally ordered stars to the block decomposition.

    Afterwards rank ``k`` holds exactly ``block_counts(N, P, chunk)[k]`` stars,
    in the same global order (concatenating the ranks' data in rank order is
    unchanged).

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm or SerialComm
        Communicator; collective call.
    fields : mapping of str to numpy.ndarray
        This rank's stars, globally ordered across ranks (e.g. the output of
        :func:`sample_sort`); any local sizes, including zero.
    chunk : int, optional
        Block size, default :data:`parallel.decomposition.MIN_CHUNK`.

    Returns
    -------
    dict of str to numpy.ndarray
        This rank's block of stars (new arrays).

    Raises
    ------
    ValueError
        On every rank, if any rank's input is invalid.
    """
    _check_params(chunk=chunk)
    if comm.Get_size() == 1:
        err = _fields_error(fields)
        if err:
            raise ValueError(err)
        return {name: np.array(arr, copy=True, order="C") for name, arr in fields.items()}
    err = _fields_error(fields)
    rec = pack_records(fields) if err is None else None
    return unpack_records(_redistribute_records(comm, rec, chunk, err))


#: where :func:`bracketing_guesses` puts a block bound's guesses, in units of the expected
#: deviation of the middle one (stars): dense near it, sparse out to four deviations
BRACKET_STEPS = np.array([-4.0, -3.0, -2.5, -2.0, -1.5, -1.25, -1.0, -0.75, -0.5, -0.25, 0.0,
                          0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0])
BRACKET_MIDDLE = int(np.flatnonzero(BRACKET_STEPS == 0.0)[0])


def bracketing_guesses(sorted_keys: np.ndarray, bounds: np.ndarray, width: float) -> np.ndarray:
    """Splitter guesses for :func:`parallel_sort`, several per block bound.

    Parameters
    ----------
    sorted_keys : numpy.ndarray
        Keys sorted ascending, the same on every rank (the step's replicated radii of the
        last step), at least one.
    bounds : numpy.ndarray of int
        The ``P - 1`` rows of ``sorted_keys`` at which the new block bounds are expected.
    width : float
        Expected deviation of the new bounds from those rows [stars].

    Returns
    -------
    numpy.ndarray, shape (P - 1, len(BRACKET_STEPS))
        The keys at rows ``bounds + width * BRACKET_STEPS`` (clipped to the array), each row
        non-decreasing; column :data:`BRACKET_MIDDLE` is the keys at ``bounds``.
    """
    n = sorted_keys.shape[0]
    pos = np.rint(np.asarray(bounds, dtype=np.float64)[:, None]
                  + float(width) * BRACKET_STEPS[None, :]).astype(np.int64)
    np.clip(pos, 0, n - 1, out=pos)
    return sorted_keys[pos]


def guess_deviation(report: dict) -> float:
    """Root mean square of the block bounds' deviation from the middle guesses of
    :func:`bracketing_guesses` [stars], from :func:`parallel_sort`'s ``report`` (the same on
    every rank); nan without one (one rank)."""
    if "counts" not in report or report["targets"].size == 0:
        return float("nan")
    column = min(BRACKET_MIDDLE, report["counts"].shape[1] - 1)
    miss = report["targets"] - report["counts"][:, column]
    return float(np.sqrt(np.mean(miss.astype(np.float64) ** 2)))


def _guess_rows(splitters: Any, size: int) -> np.ndarray | None:
    """The splitter guesses of :func:`parallel_sort` as ``(size - 1, m)`` rows, or None if
    they are not valid (NaN, a wrong shape, a row or a 1-D list decreasing)."""
    g = np.ascontiguousarray(splitters, dtype=np.float64)
    if g.ndim == 1:
        g = g[:, None] if np.all(g[1:] >= g[:-1]) else None
    if g is None or g.ndim != 2 or g.shape[0] != size - 1 or g.shape[1] == 0 \
            or _any_nan(g.ravel()) or np.any(g[:, 1:] < g[:, :-1]):
        return None
    return g


def parallel_sort(
    comm: Any,
    fields: Mapping[str, np.ndarray],
    key: str = "r",
    tiebreak: str | None = "id",
    sample_size: int | None = None,
    chunk: int = MIN_CHUNK,
    rows: np.ndarray | None = None,
    share_uniform: bool = False,
    splitters: np.ndarray | None = None,
    report: dict | None = None,
) -> Fields:
    """Sort star records globally and leave them in the block decomposition.

    The result of :func:`sample_sort` followed by :func:`redistribute_to_blocks`, in one
    exchange of the records: the cuts are moved to the block bounds before it
    (:func:`_exact_cuts`). On a one-rank communicator this is a plain local sort by
    ``(key, tiebreak)``.

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm or SerialComm
        Communicator; collective call.
    fields : mapping of str to numpy.ndarray
        This rank's stars (any number, possibly zero); names, order and dtypes
        must agree on all ranks.
    key, tiebreak, sample_size
        See :func:`sample_sort`.
    chunk : int, optional
        Block size, see :func:`redistribute_to_blocks`.
    rows : numpy.ndarray of int, optional
        Increasing indices of the local stars to keep (default all): the others are dropped
        (escapers), without a copy of every field before the sort.
    share_uniform : bool, optional
        A column whose values are all the same (bit for bit; on several ranks, the same value
        on every rank) may come back as a view of this rank's input column (a prefix of it,
        where it is long enough) instead of a new array: for a caller that drops its input
        (the step's sort of the star table), 0.2 ms per step at N = 1e5 saved on one rank,
        0.3 per rank on two.  Writing into such a column writes into the input.
    splitters : numpy.ndarray of float, optional
        On ``P > 1`` ranks, guesses of the keys at the ``P - 1`` block bounds, non-decreasing,
        no NaN, the same on every rank (the step passes the last step's radii there): the
        sampling round (a gather of samples on rank 0, its choice of splitters, a broadcast)
        is skipped.  Any guess gives the same result; a good one keeps the exact cuts'
        messages small.  Shape ``(P - 1, m)``: ``m`` guesses per block bound, each row
        non-decreasing (:func:`bracketing_guesses`): the reduction counts the stars below all
        of them, and only the stars between the two that bracket the bound are offered in
        the exact cuts' gather (a few per bound instead of about the guess's deviation from
        every rank).  Ignored on one rank.
    report : dict, optional
        With ``splitters`` on ``P > 1`` ranks, filled with ``"counts"``, the number of stars
        on all ranks below each guess (the shape of ``splitters``), and ``"targets"``, the
        block bounds (global row numbers) the guesses stood for: a caller's measure of its
        guesses (the same on every rank).  On ``P > 1`` ranks ``"n_total"`` too: the number
        of stars sorted, on all ranks (the caller needs no reduction of its own for it).

    Returns
    -------
    dict of str to numpy.ndarray
        The ``block_counts(N, P, chunk)[rank]`` stars of this rank, sorted by
        ``(key, tiebreak)``; global order runs across ranks in rank order.

    Raises
    ------
    ValueError
        On every rank, if any rank's input is invalid.
    """
    _check_params(sample_size, chunk)
    size = comm.Get_size()
    if size == 1:
        return _sorted_fields(fields, key, tiebreak, rows, share_uniform)
    if splitters is not None:
        guesses = _guess_rows(splitters, size)
        if guesses is None:
            raise ValueError(f"parallel_sort: splitters must be {size - 1} non-decreasing "
                             f"numbers without NaN (or {size - 1} such rows), got {splitters!r}")
        splitters = guesses
    return _sample_sort_records(comm, fields, key, tiebreak, sample_size, rows, chunk,
                                splitters, report, share_uniform)
