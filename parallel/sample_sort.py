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

The parts live in their own modules:
:mod:`parallel.sort_records` (the records and the input checks),
:mod:`parallel.sort_local` (step 1 and the merges of step 5),
:mod:`parallel.sort_cuts` (steps 2 and 3, the cuts of step 4 and the exact cuts) and
:mod:`parallel.sort_exchange` (the all-to-all of step 4, the placement of step 5 and the
redistribution).  This module holds the public entry points and the sort proper
(:func:`_sample_sort_records`), which runs the steps in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from parallel.decomposition import MIN_CHUNK, block_counts, rank_bounds
from parallel.sort_cuts import (
    _exact_cuts,
    _lex_searchsorted,
    _sampled_splitters,
    bracketing_guesses,
    guess_deviation,
)
from parallel.sort_exchange import (
    _checked_total,
    _exchange,
    _pack_rows,
    _place,
    _redistribute_records,
)
from parallel.sort_local import _merge_runs, _merge_two, _selected_order, _sorted_fields
from parallel.sort_records import (
    Fields,
    _any_nan,
    _fields_error,
    _record_dtype,
    _uniform_column,
    _uniform_fields,
    gather_rows,
    pack_records,
    unpack_records,
)

__all__ = [
    "sample_sort",
    "redistribute_to_blocks",
    "parallel_sort",
    "bracketing_guesses",
    "guess_deviation",
]


def _check_params(sample_size: int | None = None, chunk: int = MIN_CHUNK) -> None:
    """Validate scalar arguments (identical on all ranks, so raising is collective)."""
    if sample_size is not None and int(sample_size) < 1:
        raise ValueError(f"sample_size must be >= 1, got {sample_size}")
    block_counts(0, 1, chunk)  # raises ValueError for a bad chunk


#: Up to this many stars on a rank, the MPI sort reads its fields one at a time in sorted
#: order (:func:`_move_fields`): 1 MB per 8-byte field, within a core's L2 cache (2 MB on
#: the machines measured).  Above it a field does not fit, and the records are packed whole
#: and permuted (one random access per star instead of one per field): at N = 1e6 on two
#: ranks (5e5 stars each) the sort took 0.066-0.078 us per star-step reading the fields,
#: 0.059-0.063 with whole records.
FIELD_GATHER_MAX = 1 << 17


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
    uniform: Mapping[str, bytes] | None = None,
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
    same = _uniform_fields(fields, key, tiebreak, uniform) if n_local else None
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
    uniform: Mapping[str, bytes] | None = None,
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
    uniform : mapping of str to bytes, optional
        Columns this rank's caller knows to hold one value (name -> the bytes of that value,
        as :func:`parallel.sort_records.uniform_value` gives them): taken as such without the
        scan that proves it (a full pass over each such column: 0.08-0.16 ms per column at
        N = 1e5, memory-bound).  A wrong claim gives a wrong column.

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
        return _sorted_fields(fields, key, tiebreak, rows, share_uniform, uniform)
    if splitters is not None:
        guesses = _guess_rows(splitters, size)
        if guesses is None:
            raise ValueError(f"parallel_sort: splitters must be {size - 1} non-decreasing "
                             f"numbers without NaN (or {size - 1} such rows), got {splitters!r}")
        splitters = guesses
    return _sample_sort_records(comm, fields, key, tiebreak, sample_size, rows, chunk,
                                splitters, report, share_uniform, uniform)
