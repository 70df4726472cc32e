"""Tables of lfsr113 sub-stream states: one stream per rank, one sub-stream per block.

A :class:`Streams` object holds the current state of every sub-stream of a set
of consecutive streams (see :mod:`parallel.rng` for the jump distances).  In
an MPI run each rank holds its own stream (``first_stream = rank``,
``n_streams = 1``); a serial run emulating ``P`` ranks holds all of them
(``first_stream = 0``, ``n_streams = P``) and draws, for each star, from the
sub-stream that the owning rank would have used, so that it reproduces the
``P``-rank run exactly.

The engine gathers the states of the blocks it works on with
:meth:`Streams.block_states`, runs an ``@njit`` kernel that draws with
:func:`parallel.rng.taus_uniform` on the rows of that ``(n, 4)`` array, and
writes them back with :meth:`Streams.store_block_states`.
"""

from __future__ import annotations

import ctypes
import warnings
import weakref
from functools import cache
from typing import Any

import numpy as np
from numba import carray, cfunc, njit, types
from randomgen import UserBitGenerator

from parallel.rng import (
    MAX_STREAMS,
    MAX_SUBSTREAMS,
    STREAM_JUMP,
    SUBSTREAM_JUMP,
    apply_jump,
    apply_jump_tables,
    jump_matrices,
    jump_state,
    jump_tables,
    seed_state,
    taus_next_u32,
    taus_uniform,
    validate_state,
)

__all__ = ["GENERATOR_NAME", "LFSR113BitGenerator", "Streams"]

#: Name stored with every saved state, checked on restore.
GENERATOR_NAME = "lfsr113"
_STREAM_JUMP_LOG2 = STREAM_JUMP.bit_length() - 1
_SUBSTREAM_JUMP_LOG2 = SUBSTREAM_JUMP.bit_length() - 1


@njit(cache=True)
def _fill_substreams(table, start, jm):
    """Fill ``table[r, start:]`` by repeated jumps from ``table[r, start - 1]``."""
    jt = jump_tables(jm)
    for r in range(table.shape[0]):
        rows = table[r]
        for j in range(start, rows.shape[0]):
            for c in range(4):
                rows[j, c] = rows[j - 1, c]
            apply_jump_tables(rows, j, jt)


@njit(cache=True)
def _fill_streams(starts, jm):
    """Fill ``starts[1:]`` by repeated jumps from ``starts[0]``."""
    for k in range(1, starts.shape[0]):
        for c in range(4):
            starts[k, c] = starts[k - 1, c]
        apply_jump(starts, k, jm)


# ---------------------------------------------------------------------------
# numpy / randomgen bit generator on one sub-stream
# ---------------------------------------------------------------------------
_PTR = types.CPointer(types.uint32)


@cache
def _cfuncs() -> tuple[Any, Any, Any, Any]:
    """Compile (once, lazily, cached on disk) the C callbacks for randomgen.

    The state pointer points at the 4 words of one sub-stream in the table, so
    draws through numpy advance the table itself.
    """

    @cfunc(types.uint64(_PTR), cache=True)
    def next_raw(st):
        return np.uint64(taus_next_u32(carray(st, (1, 4)), 0))

    @cfunc(types.uint64(_PTR), cache=True)
    def next_64(st):
        s = carray(st, (1, 4))
        # High word first, as numpy does for its 32-bit generators (MT19937).
        hi = np.uint64(taus_next_u32(s, 0))
        lo = np.uint64(taus_next_u32(s, 0))
        return (hi << np.uint64(32)) | lo

    @cfunc(types.uint32(_PTR), cache=True)
    def next_32(st):
        return taus_next_u32(carray(st, (1, 4)), 0)

    @cfunc(types.float64(_PTR), cache=True)
    def next_double(st):
        return taus_uniform(carray(st, (1, 4)), 0)

    return next_raw, next_64, next_32, next_double


class LFSR113BitGenerator(UserBitGenerator):
    """randomgen bit generator drawing from one row of a :class:`Streams` table.

    Create with :meth:`Streams.bit_generator`.  ``random_raw`` gives the raw
    32-bit outputs, ``numpy.random.Generator(bg).random()`` gives the same
    open-(0, 1) doubles as :func:`parallel.rng.taus_uniform`, and 64-bit
    draws take two outputs, high word first.
    """


class Streams:
    """Sub-stream states of ``n_streams`` consecutive lfsr113 streams.

    Parameters
    ----------
    seed : int
        Seed of the whole sequence (:func:`parallel.rng.seed_state`).
    first_stream : int
        Global stream index of row 0 (e.g. the MPI rank).
    states : ndarray of uint32, shape (n_streams, n_substreams, 4)
        Current state of every sub-stream; copied.

    Attributes
    ----------
    seed : int
    first_stream : int
    states : ndarray of uint32, shape (n_streams, n_substreams, 4)
        ``states[r, j]`` is the current state of sub-stream ``j`` of global
        stream ``first_stream + r``; advanced in place by draws.

    Notes
    -----
    Use :meth:`create` to build the table from a seed.
    """

    def __init__(self, seed: int, first_stream: int, states: np.ndarray) -> None:
        states = np.array(states, copy=True, order="C")
        _check_table(states)
        self.seed = int(seed)
        self.first_stream = int(first_stream)
        self.states = states
        self._bitgens: weakref.WeakSet[LFSR113BitGenerator] = weakref.WeakSet()

    # -- construction -----------------------------------------------------
    @classmethod
    def create(cls, seed: int, n_streams: int, n_substreams: int, first_stream: int = 0) -> Streams:
        """Compute the starting states of all sub-streams.

        Parameters
        ----------
        seed : int
            Seed, ``0 <= seed < 2**32``.
        n_streams : int
            Number of consecutive streams held, ``>= 1``.
        n_substreams : int
            Sub-streams per stream, ``1 <= n_substreams <= 2**20``.
        first_stream : int, optional
            Global index of the first stream held (default 0).

        Returns
        -------
        Streams
            Sub-stream ``j`` of row ``r`` starts
            ``(first_stream + r) * 2**80 + j * 2**60`` steps after the seed.
        """
        n_streams = int(n_streams)
        n_substreams = int(n_substreams)
        first_stream = int(first_stream)
        if n_streams < 1:
            raise ValueError(f"n_streams must be >= 1, got {n_streams}")
        if first_stream < 0 or first_stream + n_streams > MAX_STREAMS:
            raise ValueError(
                f"streams {first_stream}..{first_stream + n_streams - 1} outside "
                f"0..{MAX_STREAMS - 1}"
            )
        _check_n_substreams(n_substreams)
        starts = np.empty((n_streams, 4), dtype=np.uint32)
        starts[0] = jump_state(seed_state(seed), first_stream * STREAM_JUMP)
        _fill_streams(starts, jump_matrices(STREAM_JUMP))
        table = np.empty((n_streams, n_substreams, 4), dtype=np.uint32)
        table[:, 0] = starts
        _fill_substreams(table, 1, jump_matrices(SUBSTREAM_JUMP))
        out = cls.__new__(cls)
        out.seed = int(seed)
        out.first_stream = first_stream
        out.states = table
        out._bitgens = weakref.WeakSet()
        return out

    @property
    def n_streams(self) -> int:
        """Number of streams held."""
        return self.states.shape[0]

    @property
    def n_substreams(self) -> int:
        """Number of sub-streams per stream."""
        return self.states.shape[1]

    def __repr__(self) -> str:
        return (
            f"Streams(seed={self.seed}, first_stream={self.first_stream}, "
            f"n_streams={self.n_streams}, n_substreams={self.n_substreams})"
        )

    def ensure_substreams(self, n: int) -> None:
        """Grow the table to at least ``n`` sub-streams per stream.

        New sub-streams continue the ``2**60`` jumps from the stream start (they
        are what :meth:`create` with more sub-streams would have made); the
        states of existing sub-streams, including draws made since, are kept.

        Parameters
        ----------
        n : int
            Required number of sub-streams, ``<= 2**20``.

        Notes
        -----
        Growing reallocates the table: bit generators obtained before keep
        drawing on the old copy, so a ``RuntimeWarning`` is issued if any are
        still alive.
        """
        n = int(n)
        if n <= self.n_substreams:
            return
        _check_n_substreams(n)
        old = self.n_substreams
        table = np.empty((self.n_streams, n, 4), dtype=np.uint32)
        table[:, :old] = self.states
        # Continue from the *starting* state of the last existing sub-stream,
        # not its current (advanced) state: recompute it by jumping from the
        # stream start.
        start_jm = jump_matrices(SUBSTREAM_JUMP * (old - 1))
        base = np.empty((self.n_streams, 4), dtype=np.uint32)
        base[0] = jump_state(seed_state(self.seed), self.first_stream * STREAM_JUMP)
        _fill_streams(base, jump_matrices(STREAM_JUMP))
        for r in range(self.n_streams):
            apply_jump(base, r, start_jm)
        scratch = np.empty((self.n_streams, n - old + 1, 4), dtype=np.uint32)
        scratch[:, 0] = base
        _fill_substreams(scratch, 1, jump_matrices(SUBSTREAM_JUMP))
        table[:, old:] = scratch[:, 1:]
        self._replace_table(table)

    # -- block access for kernels ----------------------------------------
    def block_states(self, stream_row: int, substreams: np.ndarray) -> np.ndarray:
        """Copy the states of the given sub-streams of one stream.

        Parameters
        ----------
        stream_row : int
            Local row (global stream ``first_stream + stream_row``).
        substreams : array_like of int, shape (n,)
            Sub-stream (block) indices.

        Returns
        -------
        ndarray of uint32, shape (n, 4)
            C-contiguous copy, to be advanced by ``@njit`` kernels and written
            back with :meth:`store_block_states`.
        """
        idx = np.asarray(substreams, dtype=np.intp).reshape(-1)
        return np.ascontiguousarray(self.states[int(stream_row), idx])

    def store_block_states(
        self, stream_row: int, substreams: np.ndarray, states: np.ndarray
    ) -> None:
        """Write advanced states back into the table.

        Parameters
        ----------
        stream_row : int
            Local row.
        substreams : array_like of int, shape (n,)
            Sub-stream indices, as given to :meth:`block_states`.
        states : ndarray of uint32, shape (n, 4)
            The advanced states.
        """
        idx = np.asarray(substreams, dtype=np.intp).reshape(-1)
        states = np.asarray(states)
        validate_state(states)
        if states.shape != (idx.size, 4):
            raise ValueError(f"states has shape {states.shape}, expected {(idx.size, 4)}")
        self.states[int(stream_row), idx] = states

    # -- checkpointing ----------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """Return a copy of the full state as plain numpy arrays and ints.

        Returns
        -------
        dict
            ``generator``, ``seed``, ``first_stream``, ``stream_jump_log2``,
            ``substream_jump_log2`` and ``states`` (a copy of the table).
        """
        return {
            "generator": GENERATOR_NAME,
            "seed": self.seed,
            "first_stream": self.first_stream,
            "stream_jump_log2": _STREAM_JUMP_LOG2,
            "substream_jump_log2": _SUBSTREAM_JUMP_LOG2,
            "states": self.states.copy(),
        }

    def set_state(self, d: dict[str, Any]) -> None:
        """Restore a state saved by :meth:`get_state`.

        The table is overwritten in place when its shape is unchanged, so bit
        generators from :meth:`bit_generator` stay attached.

        Parameters
        ----------
        d : dict
            As returned by :meth:`get_state`.

        Raises
        ------
        ValueError
            If ``d`` is from another generator or jump scheme, or its states
            are invalid.
        """
        gen = d.get("generator")
        if isinstance(gen, bytes):
            gen = gen.decode()
        if gen != GENERATOR_NAME:
            raise ValueError(f"state is from generator {gen!r}, expected {GENERATOR_NAME!r}")
        jumps = (int(d.get("stream_jump_log2", -1)), int(d.get("substream_jump_log2", -1)))
        if jumps != (_STREAM_JUMP_LOG2, _SUBSTREAM_JUMP_LOG2):
            raise ValueError(
                f"state uses jumps 2**{jumps[0]}/2**{jumps[1]}, expected "
                f"2**{_STREAM_JUMP_LOG2}/2**{_SUBSTREAM_JUMP_LOG2}"
            )
        states = np.asarray(d["states"])
        _check_table(states)
        self.seed = int(d["seed"])
        self.first_stream = int(d["first_stream"])
        if states.shape == self.states.shape:
            self.states[...] = states
        else:
            self._replace_table(np.array(states, copy=True, order="C"))

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> Streams:
        """Build a :class:`Streams` from a :meth:`get_state` dictionary.

        Parameters
        ----------
        d : dict
            As returned by :meth:`get_state`.

        Returns
        -------
        Streams
        """
        out = cls(int(d["seed"]), int(d["first_stream"]), np.asarray(d["states"]))
        out.set_state(d)
        return out

    def write_hdf5(self, group: Any) -> None:
        """Write the full state into an h5py group (overwriting a previous one).

        Parameters
        ----------
        group : h5py.Group
            Destination; gets attributes ``generator``, ``seed``,
            ``first_stream``, ``stream_jump_log2``, ``substream_jump_log2`` and
            the dataset ``states``.
        """
        d = self.get_state()
        states = d.pop("states")
        if "states" in group:
            del group["states"]
        group.create_dataset("states", data=states)
        for key, value in d.items():
            group.attrs[key] = value

    @classmethod
    def read_hdf5(cls, group: Any) -> Streams:
        """Restore a :class:`Streams` written by :meth:`write_hdf5`.

        Parameters
        ----------
        group : h5py.Group
            Source group.

        Returns
        -------
        Streams
        """
        d = {key: group.attrs[key] for key in group.attrs}
        d["states"] = np.asarray(group["states"][...], dtype=group["states"].dtype)
        return cls.from_state(d)

    # -- numpy interface --------------------------------------------------
    def bit_generator(self, stream_row: int, substream: int) -> LFSR113BitGenerator:
        """A randomgen bit generator drawing from one sub-stream of the table.

        Draws advance ``states[stream_row, substream]`` in place, so they
        interleave consistently with kernel draws on the same sub-stream.

        Parameters
        ----------
        stream_row : int
            Local row.
        substream : int
            Sub-stream index.

        Returns
        -------
        LFSR113BitGenerator
            Use as ``numpy.random.Generator(bg)``; the callbacks are numba
            cfuncs, so there is no Python overhead per draw.

        Notes
        -----
        The generator points into the current table; after a reallocation by
        :meth:`ensure_substreams` (or :meth:`set_state` with another shape) it
        keeps drawing from the old copy -- request a new one.
        """
        r = int(stream_row)
        j = int(substream)
        if not (0 <= r < self.n_streams and 0 <= j < self.n_substreams):
            raise IndexError(
                f"sub-stream ({r}, {j}) outside table of shape "
                f"({self.n_streams}, {self.n_substreams})"
            )
        table = self.states
        row = table[r, j]  # a view: its address is the generator's state

        def getter() -> dict[str, Any]:
            return {"bit_generator": GENERATOR_NAME, "state": row.copy()}

        def setter(value: dict[str, Any]) -> None:
            if value.get("bit_generator") != GENERATOR_NAME:
                raise ValueError(f"state must be from a {GENERATOR_NAME} bit generator")
            new = np.asarray(value["state"])
            validate_state(new)
            if new.shape != (4,):
                raise ValueError(f"state must have shape (4,), got {new.shape}")
            row[...] = new

        next_raw, next_64, next_32, next_double = _cfuncs()
        bg = LFSR113BitGenerator.from_cfunc(
            next_raw,
            next_64,
            next_32,
            next_double,
            ctypes.c_void_p(row.ctypes.data),
            state_getter=getter,
            state_setter=setter,
        )
        # The closures keep the table alive; this makes it explicit.
        bg._table = table
        self._bitgens.add(bg)
        return bg

    # -- internals --------------------------------------------------------
    def _replace_table(self, table: np.ndarray) -> None:
        if len(self._bitgens):
            warnings.warn(
                "the sub-stream table was reallocated; existing bit generators are "
                "detached from it (call bit_generator() again)",
                RuntimeWarning,
                stacklevel=3,
            )
            self._bitgens = weakref.WeakSet()
        self.states = table


def _check_n_substreams(n: int) -> None:
    if not 1 <= n <= MAX_SUBSTREAMS:
        raise ValueError(
            f"n_substreams must be in 1..{MAX_SUBSTREAMS} (2**20 sub-streams of 2**60 "
            f"draws fill one 2**80 stream), got {n}"
        )


def _check_table(states: np.ndarray) -> None:
    if states.ndim != 3:
        raise ValueError(f"states must have shape (n_streams, n_substreams, 4), got {states.shape}")
    _check_n_substreams(states.shape[1])
    validate_state(states)
