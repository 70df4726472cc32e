"""BSE's calls of a step spread evenly over the ranks.

The objects due for stellar evolution are not spread evenly: the heavy stars (short-lived,
called often) and the giants sit in the cluster's centre, i.e. on the first ranks (at 50 Myr
of a N = 1e5 Kroupa cluster on two ranks, rank 0 holds 670 of the 921 objects due per step),
so one rank would make most of the step's BSE calls while the others wait.  An object's call
depends on nothing but its own state and seed (:func:`physics.stellar_evolution.evolve`
resets COSMIC's common blocks per call), so any rank can make it and give the same bits:
here the objects of all ranks, numbered in rank order, go round-robin to the ranks (object
``k`` to rank ``k mod P``: neighbours in radius, which cost alike, land on different ranks),
each rank evolves what it got, and the states and results go back to their owners.  Two
``alltoall`` exchanges of one float64 matrix per rank pair (~100 numbers per object); a
single rank calls BSE directly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import sys
from typing import Any

import numpy as np

from physics import stellar_evolution as se

__all__ = ["evolve_spread", "batch_matrix", "batch_from_matrix", "result_matrix",
           "result_from_matrix"]

#: The Batch arrays in the matrix's column order (``q`` in MEMBER_QUANTITIES' order after
#: them): name, dtype, shape of one object's entry.
_BATCH_ARRAYS = (("kstar", np.int32, (2,)), ("mass", np.float64, (2,)),
                 ("rad", np.float64, (2,)), ("tphys", np.float64, ()),
                 ("sep", np.float64, ()), ("ecc", np.float64, ()), ("seed", np.int64, ()))


def _width(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def batch_matrix(batch: se.Batch, ids: np.ndarray | None = None) -> np.ndarray:
    """The batch as one float64 matrix, a row per object (every entry is exact in float64:
    types, seeds and ids are integers below 2^53); ``ids`` (the objects' ids, for error
    messages) as the last column, or -1."""
    n = len(batch)
    parts = [np.asarray(getattr(batch, name), dtype=np.float64).reshape(n, _width(shape))
             for name, _, shape in _BATCH_ARRAYS]
    parts += [batch.q[k].reshape(n, 2) for k in se.MEMBER_QUANTITIES]
    parts.append(np.full((n, 1), -1.0) if ids is None
                 else np.asarray(ids, dtype=np.float64).reshape(n, 1))
    return np.ascontiguousarray(np.concatenate(parts, axis=1))


def _batch_width() -> int:
    return sum(_width(s) for _, _, s in _BATCH_ARRAYS) + 2 * len(se.MEMBER_QUANTITIES) + 1


def batch_from_matrix(mat: np.ndarray) -> tuple[se.Batch, np.ndarray]:
    """:func:`batch_matrix` undone: (the batch, the ids column as int64)."""
    n = mat.shape[0]
    col = 0
    arrays: dict[str, Any] = {}
    for name, dtype, shape in _BATCH_ARRAYS:
        w = _width(shape)
        arrays[name] = mat[:, col:col + w].astype(dtype).reshape((n, *shape))
        col += w
    q = {}
    for k in se.MEMBER_QUANTITIES:
        q[k] = np.ascontiguousarray(mat[:, col:col + 2])
        col += 2
    ids = mat[:, col].astype(np.int64)
    batch = se.Batch(arrays["kstar"], arrays["mass"], arrays["rad"], q, arrays["tphys"],
                     arrays["sep"], arrays["ecc"], arrays["seed"])
    return batch, ids


#: Each Result array's dtype and the shape of one object's entry (as
#: :func:`physics.stellar_evolution.evolve` makes them).
_RESULT_ARRAYS = {"outcome": (np.int8, ()), "dv": (np.float64, (2, 3)),
                  "supernova": (np.bool_, (2,)), "rrlo": (np.float64, (2,)),
                  "kstar_before": (np.int32, (2,)), "mass_before": (np.float64, (2,)),
                  "rad_before": (np.float64, (2,)),
                  "tphys_before": (np.float64, ()), "sep_before": (np.float64, ()),
                  "bin_state": (np.int32, ()), "merger_type": (np.int32, ()),
                  "kick_info": (np.float64, (2, 19))}


def _result_layout() -> list[tuple[str, type, tuple[int, ...]]]:
    """Each Result array's name, dtype and entry shape, in the dataclass's order."""
    names = [f.name for f in dataclasses.fields(se.Result)]
    if set(names) != set(_RESULT_ARRAYS):  # a new Result field must be declared here
        raise RuntimeError(f"se_spread knows Result fields {sorted(_RESULT_ARRAYS)}, the "
                           f"kernel has {sorted(names)}")
    return [(name, *_RESULT_ARRAYS[name]) for name in names]


def _result_width() -> int:
    return _batch_width() + sum(_width(s) for _, _, s in _result_layout())


def result_matrix(batch: se.Batch, result: se.Result) -> np.ndarray:
    """An evolved batch and its result as one float64 matrix, a row per object (the batch's
    columns first, as :func:`batch_matrix`, ids -1)."""
    n = len(batch)
    parts = [batch_matrix(batch)]
    parts += [np.asarray(getattr(result, name), dtype=np.float64).reshape(n, _width(shape))
              for name, _, shape in _result_layout()]
    return np.ascontiguousarray(np.concatenate(parts, axis=1))


def result_from_matrix(mat: np.ndarray) -> tuple[se.Batch, se.Result]:
    """:func:`result_matrix` undone."""
    n = mat.shape[0]
    wb = _batch_width()
    batch, _ = batch_from_matrix(mat[:, :wb])
    col = wb
    arrays = {}
    for name, dtype, shape in _result_layout():
        w = _width(shape)
        arrays[name] = np.ascontiguousarray(
            mat[:, col:col + w].astype(dtype).reshape((n, *shape)))
        col += w
    return batch, se.Result(**arrays)


def _evolve_here(batch: se.Batch, ids: np.ndarray, t_end: float, z: float,
                 cutoff: float) -> tuple[se.Result | None, tuple[int, str] | None]:
    """:func:`physics.stellar_evolution.evolve` on this rank: (result, None), or (None,
    (the failing object's id, BSE's message))."""
    # no watchdog for an empty batch (its thread's start and join: 0.1 ms on a quiet core,
    # ~1 ms measured with the other core busy)
    watch = bse_watchdog() if len(batch) else contextlib.nullcontext()
    try:
        with watch:
            return se.evolve(batch, t_end, z, cutoff), None
    except se.StellarEvolutionError as exc:
        return None, (int(ids[exc.index]), str(exc))


def evolve_spread(comm: Any, batch: se.Batch, ids: np.ndarray, t_end: float, z: float,
                  pts1_highmass_cutoff: float) -> tuple[se.Result | None, tuple[int, str] | None]:
    """Evolve this rank's ``batch`` to ``t_end`` [Myr] with the calls spread over ``comm``'s
    ranks (collective); the states are written into ``batch`` as
    :func:`physics.stellar_evolution.evolve` does, with the same bits.

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm or SerialComm
    batch : physics.stellar_evolution.Batch
        This rank's objects (any number, possibly none).
    ids : ndarray of int
        The objects' ids (for the error message).
    t_end : float
        The time to evolve to [Myr].
    z, pts1_highmass_cutoff : float
        Metallicity, and CMC's pts1 rule's mass [Msun].

    Returns
    -------
    result : physics.stellar_evolution.Result or None
        This rank's objects' results; None if a call on any rank failed (then ``batch`` is
        not to be used).
    error : (int, str) or None
        The id of the object whose call failed on this rank, with BSE's message; each rank
        reports its own (the caller gathers them).
    """
    size = comm.Get_size()
    if size == 1:
        return _evolve_here(batch, ids, t_end, z, pts1_highmass_cutoff)
    rank = comm.Get_rank()
    n = len(batch)
    counts = comm.allgather(n)
    first = int(sum(counts[:rank]))
    dest = (first + np.arange(n)) % size
    mat = batch_matrix(batch, ids)
    got = comm.alltoall([mat[dest == r] for r in range(size)])
    mine, mine_ids = batch_from_matrix(np.concatenate(got, axis=0))
    result, error = _evolve_here(mine, mine_ids, t_end, z, pts1_highmass_cutoff)
    if not all(comm.allgather(error is None)):  # a call failed somewhere: the run stops,
        return None, error  # nothing comes back
    sizes = [g.shape[0] for g in got]
    returned = comm.alltoall(np.split(result_matrix(mine, result), np.cumsum(sizes)[:-1]))
    out = np.empty((n, _result_width()))
    for r in range(size):
        out[dest == r] = returned[r]
    new, res = result_from_matrix(out)
    batch.put(slice(None), new)
    return res, None


#: Seconds one batch of BSE calls may take before the process is ended (a call costs 20-500 us;
#: a whole model's zero-age start at N = 1e6 takes under a minute).
BSE_WATCHDOG_SECONDS = 900


@contextlib.contextmanager
def bse_watchdog(seconds: float = BSE_WATCHDOG_SECONDS):
    """End the process if BSE does not return (evolv2 has looped for ever on some systems):
    a run that hangs holds its allocation and never finishes, while one that ends leaves its
    last checkpoint to restart from (with other flags, or after the system is looked at).
    faulthandler's watchdog thread runs while the main thread is inside the Fortran; it
    prints every thread's traceback to stderr and exits with status 1 (under MPI the launcher
    then ends the other ranks)."""
    try:  # the process's own stderr (a captured sys.stderr has no file descriptor)
        faulthandler.dump_traceback_later(seconds, exit=True, file=sys.__stderr__)
    except (AttributeError, OSError, ValueError):  # no stderr at all: no watchdog
        yield
        return
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
