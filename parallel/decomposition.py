"""Block domain decomposition of the radially sorted star list (paper section 3.2).

Stars, in global radial order, are cut into blocks of ``MIN_CHUNK`` (the
paper's :math:`n_m = 20`). With ``nblocks = N // n_m`` and ``P`` ranks, every
rank holds ``nblocks // P`` whole blocks, the first ``nblocks % P`` ranks one
block more, and the last rank additionally the remainder ``N % n_m``. Hence
20-star bins and neighbour pairs never straddle ranks, and the load differs by
at most ``n_m - 1`` stars plus one block.

Empty ranks are allowed. When ``P`` exceeds the number of whole blocks some
ranks hold no block: ranks ``nblocks .. P-2`` hold nothing and the last rank
holds only the remainder (possibly nothing, e.g. ``N = 40, P = 4`` gives
``[20, 20, 0, 0]``). This is exactly what the paper's eq 17 implies; every
routine of the package must therefore cope with ranks that hold zero stars.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "MIN_CHUNK",
    "BlockLayout",
    "block_counts",
    "rank_bounds",
    "rank_offsets",
    "global_index",
    "owner_of_global_index",
    "block_layout",
]

#: Stars per block, the paper's :math:`n_m`.
MIN_CHUNK = 20


def _validate(n_total: int, n_ranks: int, chunk: int) -> tuple[int, int, int]:
    """Check the decomposition parameters and return them as Python ints."""
    for name, val in (("n_total", n_total), ("n_ranks", n_ranks), ("chunk", chunk)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)):
            raise ValueError(f"{name} must be an integer, got {val!r}")
    n_total, n_ranks, chunk = int(n_total), int(n_ranks), int(chunk)
    if n_total < 0:
        raise ValueError(f"n_total must be >= 0, got {n_total}")
    if n_ranks < 1:
        raise ValueError(f"n_ranks must be >= 1, got {n_ranks}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    return n_total, n_ranks, chunk


def block_counts(n_total: int, n_ranks: int, chunk: int = MIN_CHUNK) -> np.ndarray:
    """Number of stars each rank holds.

    Parameters
    ----------
    n_total : int
        Total number of stars, ``>= 0``.
    n_ranks : int
        Number of ranks ``P``, ``>= 1``.
    chunk : int, optional
        Block size :math:`n_m` (default 20).

    Returns
    -------
    numpy.ndarray of int64, shape (P,)
        Stars per rank; sums to ``n_total``. All entries but the last are
        multiples of ``chunk``; entries may be zero.

    Raises
    ------
    ValueError
        If ``n_total < 0``, ``n_ranks < 1``, ``chunk < 1`` or a non-integer is given.
    """
    n_total, n_ranks, chunk = _validate(n_total, n_ranks, chunk)
    nblocks = n_total // chunk
    counts = np.full(n_ranks, (nblocks // n_ranks) * chunk, dtype=np.int64)
    counts[: nblocks % n_ranks] += chunk
    counts[-1] += n_total % chunk
    return counts


def rank_bounds(n_total: int, n_ranks: int, chunk: int = MIN_CHUNK) -> np.ndarray:
    """Global index boundaries of the ranks' star ranges.

    Returns
    -------
    numpy.ndarray of int64, shape (P + 1,)
        Rank ``k`` holds global stars ``[bounds[k], bounds[k + 1])``;
        ``bounds[0] == 0`` and ``bounds[P] == n_total``.
    """
    counts = block_counts(n_total, n_ranks, chunk)
    bounds = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    return bounds


def rank_offsets(n_total: int, n_ranks: int, chunk: int = MIN_CHUNK) -> np.ndarray:
    """Global index of each rank's first star (exclusive prefix sum of :func:`block_counts`).

    Returns
    -------
    numpy.ndarray of int64, shape (P,)
        Offsets; an empty rank gets the offset of the next star.
    """
    return rank_bounds(n_total, n_ranks, chunk)[:-1]


def global_index(
    local_i: int | np.ndarray,
    rank: int | np.ndarray,
    n_total: int,
    n_ranks: int,
    chunk: int = MIN_CHUNK,
) -> np.ndarray:
    """Global index of a local star, the paper's eq 17 written out literally.

    .. math::

        g_i = i + id \\lfloor \\lfloor N/n_m \\rfloor / p \\rfloor n_m
              + \\begin{cases} id\\, n_m & id < \\lfloor N/n_m \\rfloor \\bmod p \\\\
              (\\lfloor N/n_m \\rfloor \\bmod p)\\, n_m & \\text{otherwise} \\end{cases}

    Parameters
    ----------
    local_i : int or array_like of int
        Local star index ``i`` on its rank (not range-checked).
    rank : int or array_like of int
        Rank ``id`` holding the star, in ``[0, n_ranks)``; broadcasts with ``local_i``.
    n_total, n_ranks, chunk : int
        Decomposition parameters, see :func:`block_counts`.

    Returns
    -------
    numpy.ndarray of int64
        Global indices (0-d for scalar input).

    Raises
    ------
    ValueError
        On invalid decomposition parameters or a rank outside ``[0, n_ranks)``.
    """
    n_total, n_ranks, chunk = _validate(n_total, n_ranks, chunk)
    i = np.asarray(local_i, dtype=np.int64)
    rid = np.asarray(rank, dtype=np.int64)
    if np.any(rid < 0) or np.any(rid >= n_ranks):
        raise ValueError(f"rank must lie in [0, {n_ranks}), got {rank!r}")
    nblocks = n_total // chunk
    per_rank = nblocks // n_ranks
    extra = nblocks % n_ranks
    base = i + rid * per_rank * chunk
    return np.where(rid < extra, base + rid * chunk, base + extra * chunk)


def owner_of_global_index(
    g: int | np.ndarray, n_total: int, n_ranks: int, chunk: int = MIN_CHUNK
) -> np.ndarray:
    """Rank that holds global star index ``g`` (vectorised).

    Parameters
    ----------
    g : int or array_like of int
        Global indices in ``[0, n_total)``.
    n_total, n_ranks, chunk : int
        Decomposition parameters, see :func:`block_counts`.

    Returns
    -------
    numpy.ndarray of int64
        Owning ranks (0-d for scalar input). Empty ranks never own a star.

    Raises
    ------
    ValueError
        If any ``g`` lies outside ``[0, n_total)``.
    """
    offsets = rank_offsets(n_total, n_ranks, chunk)
    g = np.asarray(g, dtype=np.int64)
    if np.any(g < 0) or np.any(g >= n_total):
        raise ValueError(f"global index must lie in [0, {n_total})")
    # side='right' skips empty ranks, which share their offset with the next rank.
    return np.searchsorted(offsets, g, side="right").astype(np.int64) - 1


class BlockLayout(NamedTuple):
    """Owner and local position of every global block, see :func:`block_layout`."""

    owner: np.ndarray
    """Owning rank of each global block, int64, shape (nblocks_total,)."""
    local_block: np.ndarray
    """Index of the block among its owner's blocks, int64, shape (nblocks_total,)."""


def block_layout(n_total: int, n_ranks: int, chunk: int = MIN_CHUNK) -> BlockLayout:
    """Owner rank and local block index of every global block.

    Global block ``b`` covers global stars ``[b*chunk, min((b+1)*chunk, n_total))``;
    there are ``ceil(n_total / chunk)`` blocks, the last one partial when
    ``n_total % chunk != 0`` (it always belongs to the last rank). Local block
    ``j`` of rank ``k`` covers that rank's local stars
    ``[j*chunk, min((j+1)*chunk, n_k))``, consistent with :func:`block_counts`.
    Used to emulate P ranks' per-block random streams in a serial run.

    Parameters
    ----------
    n_total, n_ranks, chunk : int
        Decomposition parameters, see :func:`block_counts`.

    Returns
    -------
    BlockLayout
        Named tuple ``(owner, local_block)`` of int64 arrays.
    """
    n_total, n_ranks, chunk = _validate(n_total, n_ranks, chunk)
    offsets = rank_offsets(n_total, n_ranks, chunk)
    starts = np.arange(0, n_total, chunk, dtype=np.int64)
    owner = np.searchsorted(offsets, starts, side="right").astype(np.int64) - 1
    # Every rank's offset is a multiple of chunk, so blocks align with ranks.
    local_block = (starts - offsets[owner]) // chunk
    return BlockLayout(owner, local_block)
