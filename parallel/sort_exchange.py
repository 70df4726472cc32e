"""The exchange of the parallel sort: the records that change rank, in one all-to-all.

:func:`_checked_total` is the one reduction before an exchange: the number of stars, the
ranks' input errors and a check that every rank's records have the same dtype (the same
ValueError raised on every rank otherwise), with other counts riding along.
:func:`_exchange` sends slices of the records to every rank (the counts by ``Alltoall``, the
records as bytes by ``Alltoallv``) and receives them in rank order.  The records that leave
are packed from the fields in sorted order (:func:`_pack_rows`), and afterwards this rank's
own stars and the received records are written at their merged positions (:func:`_place`),
one field at a time (:func:`_move_fields`).  :func:`_redistribute_records` moves globally
sorted records to the block layout (an ``Exscan`` and one exchange).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numba import njit, prange

from parallel.comm import allreduce_sum, exscan_sum
from parallel.decomposition import rank_bounds
from parallel.sort_records import (
    Fields,
    _as_words,
    _dtype_signature,
    _record_dtype,
    _records_to_words,
    _word_layout,
)


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
