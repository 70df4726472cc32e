"""Communicator abstraction: one code path for serial and MPI runs.

Library code never imports :mod:`mpi4py` itself; it receives a communicator
``comm`` explicitly. That object is either an mpi4py intracommunicator or a
:class:`SerialComm`, a size-1 stand-in with the subset of the mpi4py API the
code uses. The helper functions below (:func:`allreduce_sum`,
:func:`exscan_sum`, :func:`allgatherv_array`, ...) accept both and take a
communication-free fast path when ``comm`` has a single rank, so a serial run
never initialises MPI.

Only the command line interface should call :func:`get_world_comm`.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "SerialComm",
    "get_world_comm",
    "is_root",
    "allreduce_sum",
    "allreduce_min",
    "allreduce_max",
    "ranked_sum",
    "exscan_sum",
    "allgatherv_array",
    "CountingComm",
]


def _parse_buffer_spec(spec: Any) -> tuple[np.ndarray, int | None, int]:
    """Decode an mpi4py-style buffer specification for a size-1 communicator.

    Accepted forms are ``buf``, ``[buf, dtype]``, ``[buf, count]``,
    ``[buf, (counts, displs)]``, ``[buf, (counts, displs), dtype]`` and
    ``[buf, counts, displs, dtype]``. MPI datatypes are ignored: counts and
    displacements are taken in units of the elements of ``buf`` as given
    (so a ``uint8`` view with ``MPI.BYTE`` counts bytes, as with MPI).

    Returns
    -------
    flat : numpy.ndarray
        1-D view of the buffer (never a copy, so writes reach the caller).
    count : int or None
        Element count for the single rank, ``None`` meaning "whole buffer".
    displ : int
        Element displacement for the single rank.
    """
    if isinstance(spec, (list, tuple)):
        buf, rest = spec[0], list(spec[1:])
    else:
        buf, rest = spec, []
    arr = np.asarray(buf)
    if not arr.flags.c_contiguous:
        raise ValueError("communication buffers must be C-contiguous")
    flat = arr.reshape(-1)
    # Drop trailing datatype objects; what remains are counts/displacements.
    nums = [
        x
        for x in rest
        if isinstance(x, (int, np.integer, Sequence, np.ndarray)) and not isinstance(x, str)
    ]
    if len(nums) == 1 and isinstance(nums[0], tuple) and len(nums[0]) == 2:
        nums = list(nums[0])  # the (counts, displs) form
    count = None if not nums else _first_int(nums[0], None)
    displ = 0 if len(nums) < 2 else _first_int(nums[1], 0)
    return flat, count, displ


def _first_int(x: Any, default: int | None) -> int | None:
    """Rank 0's entry of an int or per-rank sequence (``None`` gives ``default``)."""
    if x is None:
        return default
    return int(np.asarray(x).reshape(-1)[0])


def _copy_buffer(sendbuf: Any, recvbuf: Any) -> None:
    """Copy a send buffer spec into a receive buffer spec (size-1 semantics)."""
    send, scount, sdispl = _parse_buffer_spec(sendbuf)
    recv, rcount, rdispl = _parse_buffer_spec(recvbuf)
    n = send.size - sdispl if scount is None else scount
    if rcount is not None and rcount < n:
        raise ValueError(f"receive count {rcount} smaller than send count {n}")
    recv[rdispl : rdispl + n] = send[sdispl : sdispl + n]


class SerialComm:
    """Size-1 stand-in for an mpi4py intracommunicator.

    Implements the methods the code base uses with the semantics MPI gives them
    on a single rank. Uppercase (buffer) methods accept numpy arrays or the
    usual mpi4py buffer specifications (``[buf, (counts, displs), datatype]``);
    datatypes are ignored and counts/displacements are in elements of the numpy
    buffer as passed. ``op`` arguments are accepted and ignored, because a
    reduction over one rank is the identity.

    Notes
    -----
    :meth:`Exscan` leaves ``recvbuf`` untouched and :meth:`exscan` returns
    ``None``: MPI leaves rank 0's result undefined (mpi4py returns ``None``),
    and rank 0 is the only rank here. Use :func:`exscan_sum`, which returns 0.
    """

    def Get_rank(self) -> int:
        """Return the rank of this process (always 0)."""
        return 0

    def Get_size(self) -> int:
        """Return the number of processes (always 1)."""
        return 1

    @property
    def rank(self) -> int:
        """Rank of this process (always 0)."""
        return 0

    @property
    def size(self) -> int:
        """Number of processes (always 1)."""
        return 1

    def Barrier(self) -> None:
        """Synchronise (no-op)."""

    barrier = Barrier

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Broadcast a Python object; returns ``obj`` itself."""
        return obj

    def Bcast(self, buf: Any, root: int = 0) -> None:
        """Broadcast a buffer in place (no-op)."""

    def allreduce(self, sendobj: Any, op: Any = None) -> Any:
        """Reduce a Python object over one rank: a copy of ``sendobj``.

        mpi4py pickles the object, so the result never aliases the input;
        the deep copy keeps that behaviour.
        """
        return copy.deepcopy(sendobj)

    def reduce(self, sendobj: Any, op: Any = None, root: int = 0) -> Any:
        """Reduce a Python object to the root: a copy of ``sendobj``."""
        return copy.deepcopy(sendobj)

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = None) -> None:
        """Copy ``sendbuf`` into ``recvbuf`` (reduction over one rank)."""
        _copy_buffer(sendbuf, recvbuf)

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = None, root: int = 0) -> None:
        """Copy ``sendbuf`` into ``recvbuf`` (reduction over one rank)."""
        _copy_buffer(sendbuf, recvbuf)

    def allgather(self, sendobj: Any) -> list[Any]:
        """Gather a Python object from every rank: ``[sendobj]``."""
        return [sendobj]

    def gather(self, sendobj: Any, root: int = 0) -> list[Any]:
        """Gather a Python object to the root: ``[sendobj]``."""
        return [sendobj]

    def scatter(self, sendobj: Sequence[Any], root: int = 0) -> Any:
        """Scatter a length-1 sequence: its only item."""
        return sendobj[0]

    def alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        """All-to-all exchange of Python objects: ``list(sendobj)``."""
        return list(sendobj)

    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        """Copy ``sendbuf`` into ``recvbuf``."""
        _copy_buffer(sendbuf, recvbuf)

    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        """Copy ``sendbuf`` into ``recvbuf`` at rank 0's displacement."""
        _copy_buffer(sendbuf, recvbuf)

    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Copy ``sendbuf`` into ``recvbuf``."""
        _copy_buffer(sendbuf, recvbuf)

    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Copy ``sendbuf`` into ``recvbuf`` at rank 0's displacement."""
        _copy_buffer(sendbuf, recvbuf)

    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        """Copy ``sendbuf`` into ``recvbuf``."""
        _copy_buffer(sendbuf, recvbuf)

    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        """Copy rank 0's send segment into rank 0's receive segment."""
        _copy_buffer(sendbuf, recvbuf)

    def Exscan(self, sendbuf: Any, recvbuf: Any, op: Any = None) -> None:
        """Exclusive scan: leaves ``recvbuf`` untouched (undefined on rank 0)."""

    def exscan(self, sendobj: Any, op: Any = None) -> None:
        """Exclusive scan of a Python object: ``None`` on rank 0, as in mpi4py."""
        return None

    def Scan(self, sendbuf: Any, recvbuf: Any, op: Any = None) -> None:
        """Inclusive scan: copy ``sendbuf`` into ``recvbuf``."""
        _copy_buffer(sendbuf, recvbuf)

    def scan(self, sendobj: Any, op: Any = None) -> Any:
        """Inclusive scan of a Python object: a copy of ``sendobj``."""
        return copy.deepcopy(sendobj)

    def Split(self, color: int = 0, key: int = 0) -> SerialComm:
        """Split the communicator: returns ``self``."""
        return self

    def Dup(self) -> SerialComm:
        """Duplicate the communicator: returns ``self``."""
        return self

    Clone = Dup

    def Free(self) -> None:
        """Release the communicator (no-op, so ``Split(...).Free()`` is safe)."""

    def Abort(self, errorcode: int = 1) -> None:
        """Terminate the program by raising :class:`SystemExit`."""
        raise SystemExit(errorcode)

    def __repr__(self) -> str:
        return "SerialComm()"


def get_world_comm() -> Any:
    """Return ``MPI.COMM_WORLD`` if mpi4py is importable, else a :class:`SerialComm`.

    Importing :mod:`mpi4py.MPI` initialises MPI, so only the entry point
    (the CLI) should call this.

    Returns
    -------
    comm : mpi4py.MPI.Intracomm or SerialComm
        The world communicator.
    """
    try:
        from mpi4py import MPI
    except ImportError:
        return SerialComm()
    return MPI.COMM_WORLD


def set_numba_threads(cfg_threads: int, n_ranks: int) -> int:
    """Set numba's thread count: ``cfg_threads``, or with 0 the cores this process may use
    (a batch job's allocation, not the whole node) divided among the ``n_ranks`` ranks of
    the node.  Returns the count set."""
    import os

    import numba

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    n = min(cfg_threads or max(1, cores // max(1, n_ranks)), numba.config.NUMBA_NUM_THREADS)
    numba.set_num_threads(n)
    return n


def is_root(comm: Any) -> bool:
    """Return True on rank 0 of ``comm``."""
    return comm.Get_rank() == 0


def _reduction_dtype(arr: np.ndarray) -> np.dtype:
    """Pick the wire dtype: integers/booleans as int64, everything else float64."""
    if arr.dtype == np.bool_ or np.issubdtype(arr.dtype, np.integer):
        return np.dtype(np.int64)
    return np.dtype(np.float64)


def _allreduce(comm: Any, values: Any, opname: str) -> Any:
    arr = np.asarray(values)
    # np.array, not ascontiguousarray: the latter turns 0-d input into 1-d.
    send = np.array(arr, dtype=_reduction_dtype(arr), order="C")
    if comm.Get_size() == 1:
        out = send
    else:
        from mpi4py import MPI

        out = np.empty_like(send)
        comm.Allreduce(send, out, op=getattr(MPI, opname))
    # Scalars in, scalars out; arrays keep their shape.
    return out[()] if out.ndim == 0 else out


def allreduce_sum(comm: Any, values: Any) -> Any:
    """Element-wise global sum of a packed buffer (one collective for many values).

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm or SerialComm
        Communicator; every rank must pass the same shape.
    values : array_like
        Scalar or array. Integer/boolean input is reduced as int64, anything
        else as float64.

    Returns
    -------
    numpy.ndarray or numpy scalar
        Reduced values, same shape as ``values`` (a numpy scalar for scalars).
    """
    return _allreduce(comm, values, "SUM")


def allreduce_min(comm: Any, values: Any) -> Any:
    """Element-wise global minimum of a packed buffer; see :func:`allreduce_sum`."""
    return _allreduce(comm, values, "MIN")


def allreduce_max(comm: Any, values: Any) -> Any:
    """Element-wise global maximum of a packed buffer; see :func:`allreduce_sum`."""
    return _allreduce(comm, values, "MAX")


def ranked_sum(comm: Any, parts: Any) -> np.ndarray:
    """Column sums of the ranks' partial sums, added in rank order (one collective).

    ``MPI_Allreduce`` may associate a sum of three or more ranks' values in any order, and a
    serial run that sums all stars at once associates them differently again.  Here every
    rank contributes one row of partial sums, all rows are gathered, and every rank adds them
    in rank order: row 0, plus row 1, plus row 2 ...  A serial emulation of ``P`` ranks
    passes its ``P`` emulated ranks' partial sums as the rows and gets the bits of the
    ``P``-rank run.

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm or SerialComm
        Communicator.
    parts : array_like, shape (S, k) or (k,)
        Partial sums (converted to float64).  Under MPI one row per rank (``S = 1``, the same
        ``k`` everywhere); in a single process any number of rows.

    Returns
    -------
    numpy.ndarray, shape (k,)
        The sums, the same bits on every rank.
    """
    rows = np.array(parts, dtype=np.float64, ndmin=2, order="C")
    if rows.ndim != 2:
        raise ValueError(f"ranked_sum: parts must be 1-D or 2-D, got shape {rows.shape}")
    size = comm.Get_size()
    if size > 1:
        if rows.shape[0] != 1:
            raise ValueError(f"ranked_sum: one row of partial sums per rank under MPI, got "
                             f"{rows.shape[0]}")
        gathered = np.empty((size, rows.shape[1]))
        comm.Allgather(rows, gathered)
        rows = gathered
    if rows.shape[0] == 0:
        return np.zeros(rows.shape[1])
    total = rows[0].copy()
    for row in rows[1:]:
        total += row
    return total


def exscan_sum(comm: Any, value: int) -> int:
    """Exclusive prefix sum of one integer per rank.

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm or SerialComm
        Communicator.
    value : int
        This rank's contribution.

    Returns
    -------
    int
        Sum of ``value`` over ranks ``0 .. rank-1``; 0 on rank 0 (where MPI
        leaves the Exscan result undefined).
    """
    if comm.Get_size() == 1:
        return 0
    from mpi4py import MPI

    send = np.array([value], dtype=np.int64)
    recv = np.zeros(1, dtype=np.int64)
    comm.Exscan(send, recv, op=MPI.SUM)
    return 0 if comm.Get_rank() == 0 else int(recv[0])


@functools.lru_cache(maxsize=256)
def _layout_signature(layout: str) -> int:
    """A 62-bit checksum of a row layout's description (the same in every process)."""
    return int.from_bytes(hashlib.blake2b(layout.encode(), digest_size=8).digest(), "little") >> 2


def allgatherv_array(comm: Any, local: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Concatenate every rank's array along axis 0, in rank order, on every rank.

    Sizes (and a checksum of the row layout) are exchanged with one ``Allgather`` of
    numbers; the data then travel with one
    ``Allgatherv`` of raw bytes, so any fixed-size dtype works (float64,
    int64, structured records, ...).

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm or SerialComm
        Communicator.
    local : numpy.ndarray
        1-D array, or N-D array whose rows (axis 0) are gathered. Trailing
        shape and dtype must agree on all ranks; the length may differ and may
        be zero.
    rows : array_like of int, shape (P,), optional
        Every rank's number of rows, where every rank knows them (the same on all ranks):
        the sizes' ``Allgather`` is then skipped (one message instead of two).  The caller
        guarantees them: only this rank's own count can be checked without a message, and a
        mismatch there raises ValueError on this rank alone (a caller's bug, not a run's
        condition: the other ranks are not told).

    Returns
    -------
    numpy.ndarray
        New array holding the rows of rank 0, then rank 1, ...

    Raises
    ------
    ValueError
        On every rank, if trailing shapes or dtypes differ between ranks.
    """
    local = np.asarray(local)
    if local.ndim == 0:
        raise ValueError("allgatherv_array needs an array with at least one dimension")
    local = np.ascontiguousarray(local)
    if comm.Get_size() == 1:
        return local.copy()
    from mpi4py import MPI

    if rows is None:  # every rank's rows and a checksum of its row layout, as numbers: no
        # pickled objects to unpack, one per rank on every rank (O(P) per call)
        here = f"{local.shape[1:]} {local.dtype.str} {local.dtype.descr}"
        meta = np.array([local.shape[0], _layout_signature(here)], dtype=np.int64)
        every = np.empty((comm.Get_size(), 2), dtype=np.int64)
        comm.Allgather(meta, every)
        # Every rank sees the same checksums, so they all raise together (no deadlock).
        if np.any(every[:, 1] != every[0, 1]):
            odd = np.flatnonzero(every[:, 1] != every[0, 1]).tolist()
            raise ValueError("allgatherv_array: trailing shape/dtype differ between ranks: "
                             f"ranks {odd} differ from rank 0 (here, rank "
                             f"{comm.Get_rank()}: {local.shape[1:]} {local.dtype.descr})")
        rows = every[:, 0].copy()
    else:
        rows = np.asarray(rows, dtype=np.int64)
        if rows.shape != (comm.Get_size(),) or rows[comm.Get_rank()] != local.shape[0]:
            # the caller's own count is checkable without a message; the others' are not
            raise ValueError(f"allgatherv_array: rows {rows.tolist()} do not fit "
                             f"{comm.Get_size()} ranks with {local.shape[0]} rows here")
    if not rows.any():  # nothing anywhere (every rank knows): no second message
        return np.empty((0,) + local.shape[1:], dtype=local.dtype)
    row_bytes = local.dtype.itemsize * int(np.prod(local.shape[1:], dtype=np.int64))
    counts = rows * row_bytes
    displs = np.zeros_like(counts)
    np.cumsum(counts[:-1], out=displs[1:])
    out = np.empty((int(rows.sum()),) + local.shape[1:], dtype=local.dtype)
    comm.Allgatherv(
        [local.reshape(-1).view(np.uint8), MPI.BYTE],
        [out.reshape(-1).view(np.uint8), (counts, displs), MPI.BYTE],
    )
    return out


def _spec_bytes(spec: Any, own: int | None = None) -> int:
    """Bytes a buffer specification sends: all its per-rank counts but rank ``own``'s (what
    stays in the process), or the whole buffer."""
    if isinstance(spec, (list, tuple)):
        buf, rest = spec[0], list(spec[1:])
    else:
        buf, rest = spec, []
    arr = np.asarray(buf)
    for x in rest:
        counts = x[0] if isinstance(x, tuple) and len(x) == 2 else x
        if isinstance(counts, (np.ndarray, list)):
            counts = np.asarray(counts, dtype=np.int64)
            total = int(counts.sum()) - (int(counts[own]) if own is not None else 0)
            return total * arr.itemsize
    return int(arr.nbytes)


class CountingComm:
    """A communicator that counts what this rank sends: calls and payload bytes per method.

    Wraps an mpi4py intracommunicator (or :class:`SerialComm`) and forwards every call; for
    :mod:`make bench <bench.run_bench>` (measured bytes and messages per step, not estimates).
    Payload is what this rank contributes to a collective or sends to one rank (``Isend``,
    ``Send``): its send buffer (buffer methods;
    for ``Alltoallv``/``Allgatherv`` the counts it sends) or the pickled object (lower-case
    methods).  ``counts`` maps method name to ``[calls, bytes]``; ``seconds`` to the wall
    time this rank spent inside the calls (waiting for the other ranks included).
    """

    _SENDERS = frozenset({"Allreduce", "Reduce", "Allgather", "Allgatherv", "Gather", "Gatherv",
                          "Alltoall", "Alltoallv", "Exscan", "Scan", "Bcast", "bcast",
                          "allreduce", "reduce", "allgather", "gather", "scatter", "alltoall",
                          "exscan", "scan", "Barrier", "Isend", "Send"})

    def __init__(self, comm: Any):
        self._comm = comm
        self.counts: dict[str, list[int]] = {}
        self.seconds: dict[str, float] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._comm, name)
        if name not in self._SENDERS:
            return attr

        def counted(*args, **kwargs):
            import pickle

            if name == "Barrier" or not args:
                size = 0
            elif name == "Alltoallv":
                size = _spec_bytes(args[0], own=self._comm.Get_rank())
            elif name == "Alltoall":  # equal pieces, one stays
                size = _spec_bytes(args[0]) * (self._comm.Get_size() - 1) \
                    // max(self._comm.Get_size(), 1)
            elif name[0].isupper():
                size = _spec_bytes(args[0])
            else:
                size = len(pickle.dumps(args[0], protocol=pickle.HIGHEST_PROTOCOL))
            c = self.counts.setdefault(name, [0, 0])
            c[0] += 1
            c[1] += size
            t0 = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

        return counted

    def reset(self) -> None:
        self.counts = {}
        self.seconds = {}
