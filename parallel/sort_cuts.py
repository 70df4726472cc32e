"""Splitters and exact cuts of the parallel sort: where each rank's sorted run is cut.

Sample Sort cuts every rank's sorted keys at ``P - 1`` common splitter pairs
(:func:`_lex_searchsorted` finds the local cuts).  Either rank 0 picks them from regular
samples of every rank (:func:`default_sample_size` per rank; :func:`_sampled_splitters`: one
gather on rank 0, which checks every rank's input, merges the sorted samples and takes
weighted quantiles, :func:`_choose_splitters`, then one broadcast), or the caller passes
guesses of the keys at the block bounds (:func:`bracketing_guesses`: several around each
bound, from the last step's radii; :func:`guess_deviation` measures how far off they were).

:func:`_exact_cuts` then moves the cuts to the block bounds: from the splitters' global
counts, every rank offers its few pairs next to each bound that is short of its target, one
gather of numbers (:func:`_offer_heads`, :func:`_offer_words`) gives every rank every offer,
and each rank counts its own among those that cross (:func:`_own_moves`).  The same gather
agrees on the columns that hold one value on every rank (:func:`_common_values`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from parallel.comm import allreduce_sum
from parallel.sort_local import _merge_runs
from parallel.sort_records import _words_of

__all__ = [
    "default_sample_size",
    "BRACKET_STEPS",
    "BRACKET_MIDDLE",
    "bracketing_guesses",
    "guess_deviation",
]


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
