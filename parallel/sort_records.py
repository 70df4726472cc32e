"""Star records of the parallel sort: the fields packed one record per star (the wire format).

Star data are a structure of arrays, ``dict[str, numpy.ndarray]`` whose values share their
length along axis 0.  For communication the arrays are packed into one structured array, one
record per star with aligned members (:func:`_record_dtype`), so that a star always travels
whole, and the records are sent as raw bytes.  This module holds that format and the local
work on it, no communication:

* the input checks (:func:`_fields_error`, :func:`_rows_error`): messages rather than
  exceptions, so that parallel callers first agree collectively that something is wrong;
* packing and unpacking (:func:`pack_records`, :func:`unpack_records`): compiled kernels that
  fill or empty a chunk of records at a time, optionally permuting on the way;
* permutations by compiled gathers, of a field (:func:`gather_rows`) or of whole records
  (:func:`_take`);
* the columns that hold one value bit for bit (:func:`uniform_value`,
  :func:`_uniform_fields`, :func:`_uniform_column`), which a sort need not permute;
* the records' dtype checksum the ranks compare (:func:`_dtype_signature`).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
from numba import njit, prange

__all__ = ["Fields", "pack_records", "unpack_records", "gather_rows", "uniform_value"]


Fields = dict[str, np.ndarray]


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
                    tiebreak: str | None, known: Mapping[str, bytes] | None = None
                    ) -> dict[str, bytes]:
    """The fields of ``fields`` (not the keys) whose values are all the same, with that
    value's bytes (:func:`uniform_value`); those of ``known`` (the caller's word: name ->
    the value's bytes) are taken as given, not scanned."""
    out = {}
    for name, arr in fields.items():
        if name in (key, tiebreak):
            continue
        if known is not None and name in known and arr.size:
            out[name] = known[name]
            continue
        v = uniform_value(arr)
        if v is not None:
            out[name] = v
    return out


def _uniform_column(arr: np.ndarray, value: bytes, n: int, share: bool) -> np.ndarray:
    """A column of ``n`` elements ``value`` (the bytes every element of ``arr`` holds): with
    ``share`` a prefix of ``arr`` where it is long enough (every element is the value, so any
    prefix is the column), else a new array."""
    if share and arr.ndim == 1 and arr.flags.c_contiguous and arr.shape[0] >= n:
        return arr[:n]
    return _filled(arr.dtype, n, value)
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
