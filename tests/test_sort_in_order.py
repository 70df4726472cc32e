"""The sort's merge path (``parallel_sort(..., in_order=...)``): the rows flagged in order
(the stars a step with time-step zones left at their radius) are merged with the others,
sorted; the order is the full sort's, bit for bit, whatever the flags."""

from __future__ import annotations

import numpy as np
import pytest

from parallel.comm import SerialComm
from parallel.sample_sort import parallel_sort
from parallel.sort_local import _merge_rows, _selected_order, _split_in_order


def _table(n: int, moving_share: float, seed: int, ties: bool = False):
    """A sorted table (ids shuffled) whose rows with ``moving`` got new random keys."""
    rng = np.random.default_rng(seed)
    r = np.sort(rng.random(n))
    if ties:  # runs of equal radii, ordered by id
        r = np.round(r, 2)
    ids = rng.permutation(n).astype(np.int64)
    order = np.lexsort((ids, r))
    r, ids = r[order], ids[order]
    moving = rng.random(n) < moving_share
    r = r.copy()
    r[moving] = np.round(rng.random(moving.sum()), 2) if ties else rng.random(moving.sum())
    return r, ids, ~moving


@pytest.mark.parametrize("share", [0.0, 0.02, 0.3, 0.49])
@pytest.mark.parametrize("ties", [False, True])
def test_merge_equals_full_sort(share: float, ties: bool) -> None:
    r, ids, fixed = _table(5000, share, 7, ties)
    full = _selected_order(r, ids, None)
    assert np.array_equal(full, np.lexsort((ids, r)))  # the reference: (r, id) order
    assert np.array_equal(_selected_order(r, ids, None, fixed), full)
    rows = np.flatnonzero(np.random.default_rng(3).random(r.size) > 0.01)  # escapers dropped
    assert np.array_equal(_selected_order(r, ids, rows, fixed), _selected_order(r, ids, rows))


def test_fields_sorted_the_same() -> None:
    r, ids, fixed = _table(3000, 0.05, 11)
    fields = {"r": r, "id": ids, "m": np.arange(r.size, dtype=np.float64)}
    comm = SerialComm()
    plain = parallel_sort(comm, fields)
    merged = parallel_sort(comm, fields, in_order=fixed)
    for name in fields:
        assert np.array_equal(plain[name], merged[name])


def test_flags_out_of_order_fall_back() -> None:
    """Flags on rows not in order, or a NaN key, are caught: the full sort's order."""
    r, ids, _ = _table(2000, 0.0, 5)
    r = r.copy()
    r[[10, 1500]] = r[[1500, 10]]  # two flagged rows swapped: not in order
    flags = np.ones(r.size, dtype=np.bool_)
    _, _, ok = _split_in_order(r, ids, flags, flags)
    assert not ok
    assert np.array_equal(_selected_order(r, ids, None, flags), np.lexsort((ids, r)))
    r2, ids2, fixed2 = _table(2000, 0.1, 6)
    r2[np.flatnonzero(fixed2)[5]] = np.nan
    _, _, ok = _split_in_order(r2, ids2, fixed2, np.ones(r2.size, dtype=np.bool_))
    assert not ok


def test_merge_rows_ties_by_row() -> None:
    """Equal (key, tiebreak) pairs come in row order, as in a stable sort of every row."""
    key = np.array([1.0, 1.0, 2.0, 1.0])
    tb = np.zeros(4, dtype=np.int64)
    out = _merge_rows(key, tb, np.array([0, 2]), np.array([1, 3]))
    assert list(out) == [0, 1, 3, 2]
