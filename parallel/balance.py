"""Sharing a kernel's independent blocks between neighbouring ranks by their measured cost.

The orbit kernel's work per 20-star block depends only on the block's own rows, its random
sub-stream and the replicated arrays, so any rank can do any block and the results are the same
bits whichever rank does it.  The block layout gives every rank the same number of stars, but
not the same work: on a Plummer model the outer half's stars take 1.49 rejection trials each
against the inner half's 1.34, and cost 5-7 % more (N = 1e5, one core); deep in core collapse
the ranks differ more.  The fastest rank then waits for the slowest at the next collective.

:class:`BlockShare` moves blocks across the boundaries between neighbouring ranks.  Each rank
times its kernel; at the next call the times travel in one small Allgather, and every rank
computes the same shifts from them (:func:`neighbour_shifts`): each boundary moves so that the
ranks on either side would have taken equal time, damped so that the timers' noise does not
make it swing.  A shift is at most a quarter of the donor's blocks, so only neighbours exchange.
The donor sends the blocks' inputs before anyone computes (the ranks have just met in a
collective), computes the rest of its own, and receives the results when the neighbour has
computed them after its own (:func:`send_bytes`, :func:`recv_bytes`).  Which rank computes a
block changes only the time, never the results.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

#: Largest fraction of a rank's blocks that one boundary's shift may move away from it.
MAX_FRACTION = 0.25
#: Fraction of the measured imbalance corrected per call (the rest waits for further
#: measurements: a single call's time varies by several per cent).
DAMPING = 0.3
#: Shifts smaller than this many blocks move nothing (the messages would cost more).
MIN_BLOCKS = 4
#: Factor by which a shift inside that dead band decays at each call (:func:`neighbour_shifts`).
DEAD_BAND_DECAY = 0.5
#: Message tags of the blocks' inputs and results.
TAG_INPUTS = 0x4F42
TAG_RESULTS = 0x4F43


def neighbour_shifts(times: np.ndarray, done: np.ndarray, owned: np.ndarray,
                     previous: np.ndarray, damping: float = DAMPING,
                     max_fraction: float = MAX_FRACTION) -> np.ndarray:
    """The boundaries' new shifts from the ranks' last kernel times (the same on every rank).

    Parameters
    ----------
    times : numpy.ndarray, shape (P,)
        Seconds each rank's kernel took at the last call (0: not measured).
    done : numpy.ndarray, shape (P,)
        Blocks each rank computed at the last call (its own less those given, plus those
        taken).
    owned : numpy.ndarray, shape (P,)
        Blocks each rank holds now.
    previous : numpy.ndarray, shape (P - 1,)
        The shifts of the last call (floats: the rounding is :func:`transfers`'s).
    damping : float
        Fraction of the imbalance corrected at once.
    max_fraction : float
        Largest share of the donor's blocks one shift moves.

    A shift that stays inside the dead band of :func:`transfers` (nothing moves) decays by
    :data:`DEAD_BAND_DECAY` per call, so that small needs and noise do not add up into blocks
    travelling every other call.

    Returns
    -------
    numpy.ndarray, shape (P - 1,)
        Shift of each boundary ``j`` (between ranks ``j`` and ``j + 1``) in blocks: positive,
        rank ``j`` computes the first blocks of rank ``j + 1``; negative, rank ``j + 1`` the
        last blocks of rank ``j``.
    """
    return _shifts(np.asarray(times, dtype=np.float64), np.asarray(done, dtype=np.float64),
                   np.asarray(owned, dtype=np.float64), np.asarray(previous, dtype=np.float64),
                   float(damping), float(max_fraction))


@njit(cache=True)
def _shifts(times, done, owned, previous, damping, max_fraction):
    """:func:`neighbour_shifts` (compiled: numpy's calls on a few numbers cost 0.1 ms per
    step in the step's cold caches)."""
    p = times.shape[0]
    out = previous.copy()
    measured = True
    total = 0.0
    for j in range(p):
        measured = measured and times[j] > 0.0 and done[j] > 0.0
        total += times[j]
    mean = total / p
    excess = 0.0
    for j in range(p - 1):
        if measured:
            # the work left of boundary j over its fair share: positive moves it left, at the
            # cost per block of the rank the blocks leave
            excess += times[j] - mean
            per_block = times[j] / done[j] if excess > 0.0 else times[j + 1] / done[j + 1]
            out[j] -= damping * excess / per_block
        if measured and abs(out[j]) < MIN_BLOCKS - 0.5:
            # inside the dead band (nothing moves) the shift decays: a need of fewer blocks
            # than the messages are worth, or the timers' noise, no longer adds up until it
            # crosses the band and blocks travel every other call
            out[j] *= DEAD_BAND_DECAY
        lo = -math.floor(max_fraction * owned[j])
        hi = math.floor(max_fraction * owned[j + 1])
        out[j] = min(max(out[j], lo), hi)
    return out


def transfers(shifts: np.ndarray, rank: int, min_blocks: int = MIN_BLOCKS) -> tuple[int, ...]:
    """What ``rank`` moves at this call: ``(take_left, give_left, give_right, take_right)``,
    in blocks (its left neighbour's last, its own first, its own last, its right neighbour's
    first)."""
    def moved(j: int) -> int:
        if j < 0 or j >= len(shifts):
            return 0
        s = round(float(shifts[j]))
        return s if abs(s) >= min_blocks else 0

    s_left, s_right = moved(rank - 1), moved(rank)
    return max(-s_left, 0), max(s_left, 0), max(-s_right, 0), max(s_right, 0)


def pack_arrays(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """One byte buffer holding ``arrays`` (each padded to 8 bytes, so that every piece
    unpacked from an aligned buffer is aligned)."""
    raw = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays]
    sizes = np.array([r.size for r in raw], dtype=np.int64)
    padded = (sizes + 7) // 8 * 8
    out = np.zeros(8 * (1 + sizes.size) + int(padded.sum()), dtype=np.uint8)
    head = out[:8 * (1 + sizes.size)].view(np.int64)
    head[0] = sizes.size
    head[1:] = sizes
    at = head.nbytes
    for r, p in zip(raw, padded, strict=True):
        out[at:at + r.size] = r
        at += int(p)
    return out


def unpack_arrays(buf: np.ndarray, specs: Sequence[tuple[Any, tuple[int, ...]]]
                  ) -> list[np.ndarray]:
    """The arrays of :func:`pack_arrays`, as views of ``buf``: ``specs`` gives each one's
    dtype and trailing shape (its length follows from its size)."""
    count = int(buf[:8].view(np.int64)[0])
    if count != len(specs):
        raise ValueError(f"unpack_arrays: {count} arrays in the buffer, {len(specs)} expected")
    sizes = buf[8:8 * (1 + count)].view(np.int64)
    out = []
    at = 8 * (1 + count)
    for (dtype, trailing), size in zip(specs, sizes, strict=True):
        dtype = np.dtype(dtype)
        out.append(buf[at:at + int(size)].view(dtype).reshape((-1,) + tuple(trailing)))
        at += (int(size) + 7) // 8 * 8
    return out


def send_bytes(comm: Any, buf: np.ndarray, dest: int, tag: int) -> Any:
    """Post the send of a byte buffer (:func:`pack_arrays`); returns the request."""
    from mpi4py import MPI

    return comm.Isend([buf, MPI.BYTE], dest=dest, tag=tag)


def recv_bytes(comm: Any, source: int, tag: int) -> np.ndarray:
    """Receive a byte buffer of any length from ``source`` (8-byte aligned)."""
    from mpi4py import MPI

    status = MPI.Status()
    comm.Probe(source=source, tag=tag, status=status)
    buf = np.empty((status.Get_count(MPI.BYTE) + 7) // 8, dtype=np.float64).view(np.uint8)
    buf = buf[:status.Get_count(MPI.BYTE)]
    comm.Recv([buf, MPI.BYTE], source=source, tag=tag)
    return buf


class BlockShare:
    """The shifts of one kernel's blocks between neighbouring ranks (see the module text).

    Before each call of the kernel every rank's :meth:`report` is gathered (the caller's
    collective: the orbit kernel's carries its lookup table's sizes too) and :meth:`decide`
    reads them; :meth:`measured` takes the kernel's time after it.  ``fixed`` (tests: the same
    on every rank) sets the shifts instead of the measurements.
    """

    def __init__(self, n_ranks: int) -> None:
        self.shifts = np.zeros(max(n_ranks - 1, 0))
        self.fixed: np.ndarray | None = None
        self._seconds = 0.0
        self._done = 0

    def report(self, owned: int) -> tuple[float, float, float]:
        """What this rank tells the others before a call (:meth:`decide` reads every rank's):
        its kernel's last time [s], the blocks it computed then, and the blocks it holds."""
        return self._seconds, float(self._done), float(owned)

    def decide(self, reports: np.ndarray, rank: int) -> tuple[int, int, int, int]:
        """This call's ``(take_left, give_left, give_right, take_right)`` of ``rank``
        (:func:`transfers`) from every rank's :meth:`report`, shape (P, 3) (the same on
        every rank, so every rank decides the same)."""
        if self.fixed is not None:  # (clipped to the blocks held, as measured shifts are)
            p = reports.shape[0]
            self.shifts = neighbour_shifts(np.zeros(p), np.zeros(p), reports[:, 2],
                                           np.array(self.fixed, dtype=np.float64))
        else:
            self.shifts = neighbour_shifts(reports[:, 0], reports[:, 1], reports[:, 2],
                                           self.shifts)
        return transfers(self.shifts, rank)

    def measured(self, seconds: float, done: int) -> None:
        """The kernel's compute time at this call [s] and the blocks it computed."""
        self._seconds, self._done = float(seconds), int(done)
