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

from collections.abc import Sequence
from typing import Any

import numpy as np

#: Largest fraction of a rank's blocks that one boundary's shift may move away from it.
MAX_FRACTION = 0.25
#: Fraction of the measured imbalance corrected per call (the rest waits for further
#: measurements: a single call's time varies by several per cent).
DAMPING = 0.5
#: Shifts smaller than this many blocks move nothing (the messages would cost more).
MIN_BLOCKS = 4
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

    Returns
    -------
    numpy.ndarray, shape (P - 1,)
        Shift of each boundary ``j`` (between ranks ``j`` and ``j + 1``) in blocks: positive,
        rank ``j`` computes the first blocks of rank ``j + 1``; negative, rank ``j + 1`` the
        last blocks of rank ``j``.
    """
    times = np.asarray(times, dtype=np.float64)
    done = np.asarray(done, dtype=np.float64)
    owned = np.asarray(owned, dtype=np.float64)
    shifts = np.array(previous, dtype=np.float64)
    if np.all(times > 0.0) and np.all(done > 0.0):
        per_block = times / done
        # the work left of each boundary over its fair share: positive moves the boundary left
        excess = np.cumsum(times - times.mean())[:-1]
        left, right = per_block[:-1], per_block[1:]
        shifts -= damping * excess / np.where(excess > 0.0, left, right)
    # a rank gives at most max_fraction of its blocks across each boundary
    return np.clip(shifts, -np.floor(max_fraction * owned[:-1]),
                   np.floor(max_fraction * owned[1:]))


def transfers(shifts: np.ndarray, rank: int, min_blocks: int = MIN_BLOCKS) -> tuple[int, ...]:
    """What ``rank`` moves at this call: ``(take_left, give_left, give_right, take_right)``,
    in blocks (its left neighbour's last, its own first, its own last, its right neighbour's
    first)."""
    def moved(j: int) -> int:
        if j < 0 or j >= shifts.shape[0]:
            return 0
        s = int(np.rint(shifts[j]))
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

    Call :meth:`plan` (collective) at the start of each call of the kernel, and
    :meth:`measured` with the kernel's time after it.  ``fixed`` (tests: the same on every
    rank) sets the shifts instead of the measurements.
    """

    def __init__(self, n_ranks: int) -> None:
        self.shifts = np.zeros(max(n_ranks - 1, 0))
        self.fixed: np.ndarray | None = None
        self._seconds = 0.0
        self._done = 0

    def plan(self, comm: Any, owned: int) -> tuple[int, int, int, int]:
        """This call's ``(take_left, give_left, give_right, take_right)`` (:func:`transfers`)
        for a rank of ``comm`` holding ``owned`` blocks (collective: one Allgather of three
        numbers)."""
        if self.fixed is not None:
            self.shifts = np.array(self.fixed, dtype=np.float64)
            return transfers(self.shifts, comm.Get_rank())
        mine = np.array([self._seconds, self._done, owned], dtype=np.float64)
        every = np.empty((comm.Get_size(), 3))
        comm.Allgather(mine, every)
        self.shifts = neighbour_shifts(every[:, 0], every[:, 1], every[:, 2], self.shifts)
        return transfers(self.shifts, comm.Get_rank())

    def measured(self, seconds: float, done: int) -> None:
        """The kernel's compute time at this call [s] and the blocks it computed."""
        self._seconds, self._done = float(seconds), int(done)
