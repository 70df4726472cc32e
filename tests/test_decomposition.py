"""Serial tests of the block decomposition, the SerialComm stand-in and the serial sort path."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from parallel.comm import (
    SerialComm,
    allgatherv_array,
    allreduce_max,
    allreduce_min,
    allreduce_sum,
    exscan_sum,
    get_world_comm,
    is_root,
)
from parallel.decomposition import (
    MIN_CHUNK,
    block_counts,
    block_layout,
    global_index,
    owner_of_global_index,
    rank_bounds,
    rank_offsets,
)
from parallel.sample_sort import parallel_sort, redistribute_to_blocks, sample_sort
from parallel.sort_records import pack_records, unpack_records

# (N, P) pairs: multiples of 20 and not, N < 20, N = 0, P larger than the number of blocks.
NS = [0, 1, 19, 20, 21, 39, 40, 45, 59, 100, 119, 450, 1000, 1003, 12345]
PS = [1, 2, 3, 4, 5, 7, 8, 16, 64]
GRID = [(n, p) for n in NS for p in PS]


# ---------------------------------------------------------------------------
# block_counts, offsets
# ---------------------------------------------------------------------------


def test_min_chunk():
    assert MIN_CHUNK == 20


def test_paper_example():
    # Section 3.5: 450 stars on 4 processors -> 120, 120, 100, 110.
    np.testing.assert_array_equal(block_counts(450, 4), [120, 120, 100, 110])
    np.testing.assert_array_equal(rank_offsets(450, 4), [0, 120, 240, 340])


@pytest.mark.parametrize("n,p", GRID)
def test_block_counts(n, p):
    counts = block_counts(n, p)
    assert counts.dtype == np.int64 and counts.shape == (p,)
    assert counts.sum() == n
    assert np.all(counts >= 0)
    # All ranks but the last hold whole blocks; the last also the remainder.
    assert np.all(counts[:-1] % MIN_CHUNK == 0)
    assert counts[-1] % MIN_CHUNK == n % MIN_CHUNK
    blocks = counts // MIN_CHUNK
    nblocks = n // MIN_CHUNK
    extra = nblocks % p
    assert blocks.sum() == nblocks
    assert np.all(blocks[:extra] == nblocks // p + 1)
    assert np.all(blocks[extra:] == nblocks // p)
    # Load balance: at most one block plus the remainder apart.
    assert counts.max() - counts.min() <= 2 * MIN_CHUNK - 1


@pytest.mark.parametrize("n,p", GRID)
def test_offsets(n, p):
    counts = block_counts(n, p)
    offsets = rank_offsets(n, p)
    bounds = rank_bounds(n, p)
    assert offsets.dtype == np.int64
    np.testing.assert_array_equal(offsets, np.concatenate(([0], np.cumsum(counts)[:-1])))
    np.testing.assert_array_equal(bounds, np.concatenate(([0], np.cumsum(counts))))
    assert np.all(offsets % MIN_CHUNK == 0)


def test_empty_ranks():
    # More ranks than blocks: middle ranks are empty, the last holds the remainder.
    np.testing.assert_array_equal(block_counts(45, 4), [20, 20, 0, 5])
    np.testing.assert_array_equal(block_counts(40, 4), [20, 20, 0, 0])
    np.testing.assert_array_equal(block_counts(7, 3), [0, 0, 7])
    np.testing.assert_array_equal(block_counts(0, 3), [0, 0, 0])


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_block_counts_other_chunk(chunk):
    for n in (0, 5, 64, 100, 1000):
        for p in (1, 3, 8):
            counts = block_counts(n, p, chunk)
            assert counts.sum() == n
            assert np.all(counts[:-1] % chunk == 0)


# ---------------------------------------------------------------------------
# eq 17 and owners
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n,p", GRID)
def test_eq17_matches_offsets(n, p):
    counts = block_counts(n, p)
    offsets = rank_offsets(n, p)
    for rank in range(p):
        local = np.arange(counts[rank])
        np.testing.assert_array_equal(global_index(local, rank, n, p), offsets[rank] + local)
        if counts[rank]:
            assert int(global_index(0, rank, n, p)) == offsets[rank]
    # Vectorised over ranks as well: every star exactly once.
    ranks = np.repeat(np.arange(p), counts)
    local = np.arange(n) - np.repeat(offsets, counts)
    np.testing.assert_array_equal(global_index(local, ranks, n, p), np.arange(n))


@pytest.mark.parametrize("n,p", GRID)
def test_owner_of_global_index(n, p):
    g = np.arange(n)
    owner = owner_of_global_index(g, n, p)
    bounds = rank_bounds(n, p)
    assert owner.dtype == np.int64
    assert np.all((bounds[owner] <= g) & (g < bounds[owner + 1]))
    np.testing.assert_array_equal(np.bincount(owner, minlength=p), block_counts(n, p))
    if n:
        assert int(owner_of_global_index(n - 1, n, p)) == p - 1 or block_counts(n, p)[-1] == 0


# ---------------------------------------------------------------------------
# block_layout
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n,p", GRID)
def test_block_layout(n, p):
    owner, local_block = block_layout(n, p)
    nblk = -(-n // MIN_CHUNK)
    assert owner.shape == local_block.shape == (nblk,)
    assert owner.dtype == local_block.dtype == np.int64
    counts = block_counts(n, p)
    offsets = rank_offsets(n, p)
    starts = np.arange(nblk) * MIN_CHUNK
    stops = np.minimum(starts + MIN_CHUNK, n)
    # Local block j of rank k covers local stars [20j, 20j + 20) ∩ [0, n_k).
    loc_start = local_block * MIN_CHUNK
    loc_stop = np.minimum(loc_start + MIN_CHUNK, counts[owner])
    np.testing.assert_array_equal(offsets[owner] + loc_start, starts)
    np.testing.assert_array_equal(offsets[owner] + loc_stop, stops)
    for k in range(p):
        mine = local_block[owner == k]
        np.testing.assert_array_equal(mine, np.arange(-(-counts[k] // MIN_CHUNK)))
    if n % MIN_CHUNK:
        assert owner[-1] == p - 1


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [(-1, 2), (10, 0), (10, -3), (10.0, 2), (10, 2.5), (True, 2), (10, 2, 0)],
)
def test_bad_decomposition_input(args):
    with pytest.raises(ValueError):
        block_counts(*args)
    with pytest.raises(ValueError):
        rank_offsets(*args)
    with pytest.raises(ValueError):
        block_layout(*args)


def test_bad_index_input():
    with pytest.raises(ValueError):
        global_index(0, 4, 100, 4)
    with pytest.raises(ValueError):
        global_index(0, -1, 100, 4)
    with pytest.raises(ValueError):
        owner_of_global_index(100, 100, 4)
    with pytest.raises(ValueError):
        owner_of_global_index(-1, 100, 4)
    with pytest.raises(ValueError):
        owner_of_global_index(0, 0, 1)


def test_numpy_integers_accepted():
    np.testing.assert_array_equal(block_counts(np.int64(45), np.int32(2)), [20, 25])


# ---------------------------------------------------------------------------
# SerialComm and helpers
# ---------------------------------------------------------------------------


def test_serial_comm_basics():
    comm = SerialComm()
    assert comm.Get_rank() == comm.rank == 0
    assert comm.Get_size() == comm.size == 1
    assert is_root(comm)
    assert comm.Split(3, 0) is comm
    comm.Barrier()
    comm.Free()
    assert comm.bcast({"a": 1}) == {"a": 1}
    obj = [np.arange(3)]
    red = comm.allreduce(obj)
    assert red is not obj and np.array_equal(red[0], obj[0])
    assert comm.allgather(5) == [5] and comm.gather(5) == [5]
    assert comm.exscan(5) is None
    with pytest.raises(SystemExit):
        comm.Abort(3)


def test_serial_comm_buffers():
    comm = SerialComm()
    send = np.arange(4.0)
    recv = np.zeros(4)
    comm.Allreduce(send, recv)
    np.testing.assert_array_equal(recv, send)
    recv = np.full(1, -7, dtype=np.int64)
    comm.Exscan(np.array([5], dtype=np.int64), recv)
    assert recv[0] == -7  # untouched: undefined on rank 0 in MPI
    recv = np.zeros(6)
    comm.Allgatherv(send, [recv, ([4], [2])])
    np.testing.assert_array_equal(recv, [0, 0, 0, 1, 2, 3])
    rec = pack_records({"a": np.arange(3.0), "b": np.arange(3, dtype=np.int32)})
    out = np.empty(3, dtype=rec.dtype)
    nb = rec.nbytes
    comm.Alltoallv([rec.view(np.uint8), ([nb], [0]), None], [out.view(np.uint8), ([nb], [0]), None])
    np.testing.assert_array_equal(out, rec)
    counts = np.array([3], dtype=np.int64)
    rcounts = np.zeros(1, dtype=np.int64)
    comm.Alltoall(counts, rcounts)
    assert rcounts[0] == 3


def test_helpers_serial():
    comm = SerialComm()
    s = allreduce_sum(comm, np.array([1.0, 2.0]))
    np.testing.assert_array_equal(s, [1.0, 2.0])
    assert allreduce_sum(comm, 3) == 3 and np.ndim(allreduce_sum(comm, 3)) == 0
    assert allreduce_sum(comm, np.array([1, 2], dtype=np.int32)).dtype == np.int64
    np.testing.assert_array_equal(allreduce_min(comm, [3.0, -1.0]), [3.0, -1.0])
    np.testing.assert_array_equal(allreduce_max(comm, [3, -1]), [3, -1])
    assert exscan_sum(comm, 17) == 0
    a = np.arange(6.0).reshape(3, 2)
    g = allgatherv_array(comm, a)
    np.testing.assert_array_equal(g, a)
    assert g is not a
    with pytest.raises(ValueError):
        allgatherv_array(comm, np.float64(1.0))


def test_get_world_comm_without_mpi4py(monkeypatch):
    # A None entry in sys.modules makes "import mpi4py" raise ImportError.
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    assert isinstance(get_world_comm(), SerialComm)


# ---------------------------------------------------------------------------
# records and the serial sort path
# ---------------------------------------------------------------------------


def _stars(n, seed=0, ndistinct=None):
    rng = np.random.default_rng(seed)
    r = rng.random(n) if ndistinct is None else rng.integers(0, ndistinct, n) * 0.5
    return {
        "r": r,
        "id": rng.permutation(n).astype(np.int64) + 1000,
        "m": rng.random(n),
        "k": rng.integers(0, 10, n).astype(np.int32),
    }


def test_pack_unpack_roundtrip():
    stars = _stars(50)
    stars["v"] = np.arange(150.0).reshape(50, 3)
    rec = pack_records(stars)
    assert rec.dtype.names == tuple(stars)
    back = unpack_records(rec)
    assert list(back) == list(stars)
    for k, v in stars.items():
        np.testing.assert_array_equal(back[k], v)
        assert back[k].dtype == v.dtype and back[k].flags.c_contiguous
        assert not np.shares_memory(back[k], rec)
    assert list(unpack_records(rec, ["m", "r"])) == ["m", "r"]
    # with a permutation (whole-record gather), and a layout that is not word-aligned
    order = np.random.default_rng(2).permutation(50)
    for extra in ({}, {"flag": np.arange(50, dtype=np.int8)}):
        fields = {**stars, **extra}
        back = unpack_records(pack_records(fields, order))
        for k, v in fields.items():
            np.testing.assert_array_equal(back[k], v[order])
    # unpacking in an order (the MPI sort's merge): the same as permuting first
    for extra in ({}, {"flag": np.arange(50, dtype=np.int8)}):
        fields = {**stars, **extra}
        back = unpack_records(pack_records(fields), order=order)
        for k, v in fields.items():
            np.testing.assert_array_equal(back[k], v[order])
            assert back[k].flags.c_contiguous
    with pytest.raises(ValueError):
        pack_records({"a": np.zeros(3), "b": np.zeros(4)})
    with pytest.raises(ValueError):
        pack_records({})


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("extra", ["", "vector", "int8", "complex64", "int32"])
def test_pack_rows_and_place_equal_numpy(threads, extra):
    """The MPI sort's two field kernels against numpy: :func:`_pack_rows` (the records of
    some stars in a given order, read from the fields) is ``pack_records`` of the fields
    indexed so, and :func:`_place` (own stars from the fields, received records, at their
    merged positions) is numpy's scatter of both; with a sub-array member, an 8-byte member
    at an odd 32-bit word (after an int32: not aligned for the 64-bit kernel), records of
    4-byte members only, a layout that is not word-aligned (numpy's path), any number of
    threads, and no rows at all."""
    import numba

    from parallel.sort_exchange import _pack_rows, _place

    rng = np.random.default_rng(8)
    n, m = 3000, 700
    fields = _stars(n)
    if extra == "vector":
        fields["v"] = rng.random((n, 3))
    elif extra == "int8":
        fields["flag"] = rng.integers(0, 9, n).astype(np.int8)
    elif extra == "complex64":  # after "k" (int32): at an odd word of the record
        fields["z"] = (rng.random(n) + 1j * rng.random(n)).astype(np.complex64)
    elif extra == "int32":
        fields = {"k": fields["k"], "q": rng.integers(0, 99, n).astype(np.int32)}
    old = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        for k in (0, 1, m):
            rows = rng.choice(n, k, replace=False)
            rec = _pack_rows(fields, rows)
            want = pack_records({name: a[rows] for name, a in fields.items()})
            assert rec.dtype == want.dtype and rec.shape == want.shape
            for name in fields:  # (member by member: the padding bytes are not set)
                np.testing.assert_array_equal(rec[name], want[name], err_msg=name)
            own = rng.choice(n, n - k, replace=False)  # own stars' rows, a merged layout
            pos = rng.permutation(n)
            own_pos, rec_pos = np.sort(pos[:n - k]), np.sort(pos[n - k:])
            ref = {}
            for name, a in fields.items():
                ref[name] = np.empty_like(a)
                ref[name][own_pos] = a[own]
                ref[name][rec_pos] = a[rows]
            # the own stars from the fields, or from their records (larger ranks)
            for own_rec in (None, pack_records(fields, own)):
                out = _place(fields, own, own_pos, rec, rec_pos, own_rec)
                for name, a in fields.items():
                    assert out[name].dtype == a.dtype and out[name].flags.c_contiguous
                    np.testing.assert_array_equal(out[name], ref[name], err_msg=name)
    finally:
        numba.set_num_threads(old)


@pytest.mark.parametrize("runs", [[0], [7], [5, 0, 9], [1, 1, 1, 1, 1], [300, 0, 0, 41, 77, 2]])
@pytest.mark.parametrize("ndistinct", [None, 3])
def test_merge_runs_is_a_stable_sort(runs, ndistinct):
    """The MPI sort's merge of the received runs equals a stable lexsort by (key, tiebreak),
    with and without a tiebreak (ties then by position), for any number of runs."""
    from parallel.sort_local import _merge_runs

    rng = np.random.default_rng(len(runs) + sum(runs))
    keys, tbs = [], []
    for n in runs:
        k = rng.random(n) if ndistinct is None else rng.integers(0, ndistinct, n) * 0.5
        t = rng.integers(0, 4, n)  # ties in (key, tiebreak) too: position decides
        o = np.lexsort((t, k))
        keys.append(k[o])
        tbs.append(t[o])
    k, t = np.concatenate(keys), np.concatenate(tbs)
    starts = np.concatenate(([0], np.cumsum(runs))).astype(np.int64)
    np.testing.assert_array_equal(_merge_runs(k, t, starts), np.lexsort((t, k)))
    none = np.zeros(k.size, dtype=np.int8)
    np.testing.assert_array_equal(_merge_runs(k, none, starts), np.argsort(k, kind="stable"))


@pytest.mark.parametrize("runs", [[0, 0], [7, 0], [0, 5], [40, 9, 13], [300, 41, 77, 2]])
@pytest.mark.parametrize("ndistinct", [None, 3])
@pytest.mark.parametrize("me", [0, 1, 2])
def test_merge_two_places_runs_as_a_stable_sort(runs, ndistinct, me):
    """The MPI sort's merge of its own run (rank ``me``) with the received ones (merged among
    themselves, ranks in order) puts every element where a stable lexsort of all the runs in
    rank order puts it, ties (equal pairs too) going to the lower rank."""
    from parallel.sort_local import _merge_runs, _merge_two

    me = min(me, len(runs) - 1)
    rng = np.random.default_rng(len(runs) + sum(runs) + 10 * me)
    keys, tbs = [], []
    for n in runs:
        k = rng.random(n) if ndistinct is None else rng.integers(0, ndistinct, n) * 0.5
        t = rng.integers(0, 4, n)
        o = np.lexsort((t, k))
        keys.append(k[o])
        tbs.append(t[o])
    k, t = np.concatenate(keys), np.concatenate(tbs)
    starts = np.concatenate(([0], np.cumsum(runs))).astype(np.int64)
    where = np.empty(k.size, dtype=np.int64)
    where[np.lexsort((t, k))] = np.arange(k.size)  # stable: ties in rank order
    # as the sort does it: the others' runs merged among themselves, then with this rank's
    others = [q for q in range(len(runs)) if q != me]
    rk = np.concatenate([keys[q] for q in others])
    rt = np.concatenate([tbs[q] for q in others])
    src = np.repeat(others, [runs[q] for q in others])
    idx = np.concatenate([np.arange(starts[q], starts[q + 1]) for q in others])
    ostarts = np.concatenate(([0], np.cumsum([runs[q] for q in others]))).astype(np.int64)
    order = _merge_runs(rk, rt, ostarts)
    where_own, where_rec = _merge_two(keys[me], tbs[me], rk[order], rt[order], src[order] < me)
    np.testing.assert_array_equal(where_own, where[starts[me]:starts[me + 1]])
    np.testing.assert_array_equal(where_rec, where[idx[order]])


@pytest.mark.parametrize("n", [0, 1, 19, 20, 1003])
@pytest.mark.parametrize("ndistinct", [None, 5])
def test_parallel_sort_serial(n, ndistinct):
    stars = _stars(n, seed=n, ndistinct=ndistinct)
    out = parallel_sort(SerialComm(), stars)
    order = np.lexsort((stars["id"], stars["r"]))
    assert list(out) == list(stars)
    for k, v in stars.items():
        np.testing.assert_array_equal(out[k], v[order])
        assert out[k].dtype == v.dtype
    r, ids = out["r"], out["id"]
    assert np.all((r[1:] > r[:-1]) | ((r[1:] == r[:-1]) & (ids[1:] > ids[:-1])))
    # Same result from the two phases separately.
    two = redistribute_to_blocks(SerialComm(), sample_sort(SerialComm(), stars))
    for k in stars:
        np.testing.assert_array_equal(two[k], out[k])
    # Inputs untouched, outputs are new arrays.
    assert not any(np.shares_memory(out[k], stars[k]) for k in stars if n)


@pytest.mark.parametrize("n", [0, 19, 1003])
def test_parallel_sort_serial_selected_rows(n):
    """``rows``: the kept stars sorted, the others dropped, inputs untouched; bad rows are a
    ValueError."""
    stars = _stars(n, seed=n + 1)
    keep = np.flatnonzero(np.random.default_rng(n).random(n) < 0.8)
    out = parallel_sort(SerialComm(), stars, rows=keep)
    sub = {k: v[keep] for k, v in stars.items()}
    order = np.lexsort((sub["id"], sub["r"]))
    for k, v in sub.items():
        np.testing.assert_array_equal(out[k], v[order])
    for bad in (keep[::-1] if keep.size > 1 else np.array([n]), np.array([n + 5]),
                np.array([[0]]), np.array([0.5])):
        with pytest.raises(ValueError, match="rows"):
            parallel_sort(SerialComm(), stars, rows=bad)
    # a dropped row's key may be anything (the step's removed rows are never drawn), a kept
    # row's may not be NaN
    if n > keep.size:
        dropped = np.setdiff1d(np.arange(n), keep)[0]
        stars["r"][dropped] = np.nan
        again = parallel_sort(SerialComm(), stars, rows=keep)
        for k, v in sub.items():
            np.testing.assert_array_equal(again[k], v[order])
    if keep.size:
        stars["r"][keep[0]] = np.nan
        with pytest.raises(ValueError, match="NaN"):
            parallel_sort(SerialComm(), stars, rows=keep)


def test_uniform_value_is_bitwise():
    """One value bit for bit, or None: -0.0 beside 0.0 and two NaN payloads differ; empty,
    2-d and object arrays are never uniform."""
    from parallel.sort_records import uniform_value

    assert uniform_value(np.full(1000, 0.25)) == np.float64(0.25).tobytes()
    assert uniform_value(np.full(7, -1, dtype=np.int64)) == np.int64(-1).tobytes()
    assert uniform_value(np.ones(3, dtype=np.int32)) == np.int32(1).tobytes()
    assert uniform_value(np.zeros(5, dtype=bool)) == b"\x00"
    assert uniform_value(np.full(100_003, 7, dtype=np.int8)) == b"\x07"
    for n, at in ((1000, 999), (1000, 256), (1000, 1), (300, 255), (512, 511), (100, 99),
                  (2, 1),  # last, chunk edges, the remainder
                  # the threads' shares (16384 words each) and their edges
                  (100_003, 16_383), (100_003, 16_384), (100_003, 50_000), (100_003, 99_999),
                  (100_003, 100_002)):
        a = np.full(n, 0.5)
        a[at] = 0.5000000000000001
        assert uniform_value(a) is None, (n, at)
    assert uniform_value(np.array([0.0, -0.0])) is None
    nans = np.array([0x7FF8_0000_0000_0001, 0x7FF8_0000_0000_0002], dtype=np.uint64)
    assert uniform_value(nans.view(np.float64)) is None
    assert uniform_value(np.array([], dtype=np.float64)) is None
    assert uniform_value(np.ones((3, 2))) is None
    assert uniform_value(np.array(["a", "a"])) is None


@pytest.mark.parametrize("n", [1, 19, 1003])
def test_parallel_sort_serial_uniform_columns(n):
    """Columns of one value are filled instead of permuted: the same bits as the
    permutation (a NaN payload, -0.0 stays -0.0), with and without dropped rows."""
    stars = _stars(n, seed=n + 2)
    stars["one"] = np.full(n, -0.0)
    stars["nan"] = np.full(n, np.uint64(0x7FF8_0000_0000_0ABC)).view(np.float64)
    stars["type"] = np.ones(n, dtype=np.int32)
    keep = np.flatnonzero(np.random.default_rng(n).random(n) < 0.8)
    for rows in (None, keep):
        sub = stars if rows is None else {k: v[rows] for k, v in stars.items()}
        out = parallel_sort(SerialComm(), stars, rows=rows)
        order = np.lexsort((sub["id"], sub["r"]))
        assert list(out) == list(stars)
        for k, v in sub.items():
            assert out[k].dtype == v.dtype
            np.testing.assert_array_equal(out[k].view(f"u{v.dtype.itemsize}"),
                                          v[order].view(f"u{v.dtype.itemsize}"), err_msg=k)
        assert not any(np.shares_memory(out[k], stars[k]) for k in stars)


def test_parallel_sort_serial_errors():
    stars = _stars(10)
    with pytest.raises(ValueError):
        parallel_sort(SerialComm(), stars, key="nope")
    with pytest.raises(ValueError):
        parallel_sort(SerialComm(), {**stars, "m": stars["m"][:5]})
    bad = dict(stars)
    bad["r"] = bad["r"].copy()
    bad["r"][3] = np.nan
    with pytest.raises(ValueError):
        parallel_sort(SerialComm(), bad)
    with pytest.raises(ValueError):
        parallel_sort(SerialComm(), stars, chunk=0)
    with pytest.raises(ValueError):
        parallel_sort(SerialComm(), stars, sample_size=0)
    with pytest.raises(ValueError):
        redistribute_to_blocks(SerialComm(), stars, chunk=-1)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("case", ["unique", "ties", "constant", "no_tiebreak", "int_keys"])
def test_local_order_threads(threads, case):
    """The threaded local sort gives exactly lexsort's permutation for any thread count."""
    import numba

    from parallel.sort_local import THREADED_SORT_MIN, _local_order

    rng = np.random.default_rng(5)
    n = THREADED_SORT_MIN + 12345
    key = rng.pareto(2.0, n)
    if case == "ties":
        key = np.round(key, 2)
    elif case == "constant":
        key = np.full(n, 0.5)
    elif case == "int_keys":
        key = rng.integers(0, 100, n)
    tb = None if case == "no_tiebreak" else rng.permutation(n).astype(np.int64)
    if case == "no_tiebreak":
        key = np.round(key, 1)
    expect = np.lexsort((np.arange(n) if tb is None else tb, key))
    old = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        got = _local_order(key, tb)
    finally:
        numba.set_num_threads(old)
    assert np.array_equal(got, expect)


def test_share_uniform_returns_views_with_the_same_values():
    """``share_uniform``: one process's sort returns a one-value column as a prefix of the
    input's (no new array), with the values of the copying path; other columns, and the
    default, are new arrays."""
    from parallel.comm import SerialComm
    from parallel.sample_sort import parallel_sort

    rng = np.random.default_rng(4)
    n = 5000
    fields = {"r": rng.random(n), "id": rng.permutation(n).astype(np.int64),
              "m": np.full(n, 0.25), "kind": np.full(n, 3, dtype=np.int32)}
    rows = np.flatnonzero(rng.random(n) > 0.01)
    plain = parallel_sort(SerialComm(), fields, rows=rows)
    shared = parallel_sort(SerialComm(), fields, rows=rows, share_uniform=True)
    for name in fields:
        assert np.array_equal(plain[name], shared[name]) and plain[name].size == rows.size
        assert not np.shares_memory(plain[name], fields[name])
    assert np.shares_memory(shared["m"], fields["m"])
    assert np.shares_memory(shared["kind"], fields["kind"])
    assert not np.shares_memory(shared["r"], fields["r"])


def test_uniform_columns_the_caller_names_are_taken_without_a_scan(monkeypatch):
    """``uniform``: a column the caller names as holding one value comes back as that value
    (the same bits as the scanning path where the claim is true) and is not scanned; the
    other columns are sorted as without it."""
    from parallel import sort_records
    from parallel.comm import SerialComm
    from parallel.sample_sort import parallel_sort

    rng = np.random.default_rng(5)
    n = 3000
    fields = {"r": rng.random(n), "id": rng.permutation(n).astype(np.int64),
              "m": rng.random(n), "bin_a": np.zeros(n), "bin_k": np.ones(n, dtype=np.int32)}
    claim = {"bin_a": np.zeros(1).tobytes(), "bin_k": np.ones(1, dtype=np.int32).tobytes()}
    plain = parallel_sort(SerialComm(), fields, share_uniform=True)
    scanned = []
    real = sort_records.uniform_value
    monkeypatch.setattr(sort_records, "uniform_value",
                        lambda arr: scanned.append(arr) or real(arr))
    told = parallel_sort(SerialComm(), fields, share_uniform=True, uniform=claim)
    for name in fields:
        assert told[name].tobytes() == plain[name].tobytes(), name
    assert not any(a is fields["bin_a"] or a is fields["bin_k"] for a in scanned)
    assert any(a is fields["m"] for a in scanned)
    # the caller's word is taken: a false claim gives the claimed column
    fields["bin_a"][7] = 1.0
    told = parallel_sort(SerialComm(), fields, uniform=claim)
    assert not np.any(told["bin_a"])


def test_sort_scans_equal_numpy():
    """The sort's compiled scans are the numpy expressions they replace, with the hit first,
    in the middle and last: strictly increasing rows, NaN keys, equal neighbours in sorted
    order (the test for ties)."""
    from parallel.sort_local import _any_adjacent_equal
    from parallel.sort_records import _any_nan, _increasing

    rng = np.random.default_rng(9)
    for n in (0, 1, 2, 1000, 50_001):
        key = rng.random(n)
        assert _increasing(np.arange(n)) and _increasing(np.sort(key)) == (n < 2 or bool(
            np.all(np.diff(np.sort(key)) > 0)))
        assert not _any_nan(key)
        srt = np.argsort(key)
        assert not _any_adjacent_equal(key, srt)
        for at in {0, n // 2, n - 1} if n >= 2 else ():
            a = np.arange(n)
            a[at] = a[at - 1] if at else a[1]
            assert not _increasing(a)
            k = key.copy()
            k[at] = np.nan
            assert _any_nan(k)
            k = key.copy()
            k[srt[at]] = k[srt[at - 1]] if at else k[srt[1]]
            assert _any_adjacent_equal(k, srt)


@pytest.mark.parametrize("ranges", [1, 2, 3, 8, 9, 17])
def test_partition_matches_searchsorted(ranges):
    """The threaded sort's stable partition (branch-free up to 8 ranges, counted above) equals
    numpy's searchsorted(side="right") followed by a stable argsort, NaN keys and ties
    included (two ranges, the select path; up to 8, branch-free passes; more, counted)."""
    from parallel.sort_local import _BRANCH_FREE_RANGES, _partition

    assert 8 == _BRANCH_FREE_RANGES  # the cases cover every path
    rng = np.random.default_rng(ranges)
    for n in (0, 1, 997, 5000, 16384, 40_000):
        key = np.round(rng.random(n) * 20) / 2
        key[rng.random(n) < 0.01] = np.nan
        finite = key[~np.isnan(key)]
        split = np.sort(rng.choice(finite, ranges - 1)) if finite.size else np.zeros(ranges - 1)
        perm, starts = _partition(key, split)
        grp = np.searchsorted(split, key, side="right")
        assert np.array_equal(perm, np.argsort(grp, kind="stable"))
        assert np.array_equal(starts, np.concatenate(
            ([0], np.cumsum(np.bincount(grp, minlength=ranges)))))


@pytest.mark.parametrize("case", ["radii", "normal", "ties", "outliers", "special"])
def test_bucket_argsort_equals_numpy_stable(case):
    """The local sort's bucket sort gives numpy's stable argsort exactly: negative keys, ties
    (in input order; many equal keys fill buckets past the insertion limit, which are
    merge-sorted), +-0.0 (equal), +-inf, NaN (last, in input order), denormals, keys spread
    over 60 decades (the ordinary keys in a few coarse bins, each cut into many buckets),
    and sizes from empty to many buckets."""
    from parallel.sort_local import bucket_argsort

    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 3, 17, 1000, 40_000):
        if case == "radii":
            x = 1.0 / np.sqrt(rng.random(n) ** (-2.0 / 3.0) - 1.0)
        elif case == "normal":
            x = rng.standard_normal(n)
        elif case == "ties":
            x = np.round(rng.random(n) * 50) / 7 - 3
        elif case == "outliers":
            x = rng.random(n)
            x[: min(n, 2)] = [1e-30, 1e30][: min(n, 2)]
        else:
            pool = np.array([3.0, np.nan, -0.0, 0.0, np.inf, -np.inf, -2.0, 1e-300, 5e-324,
                             -5e-324, -np.nan, 1.0])
            x = rng.choice(pool, n)
        got = bucket_argsort(x)
        assert np.array_equal(got, np.argsort(x, kind="stable")), (case, n)


def test_keep_freed_memory_on_glibc():
    """glibc accepts the malloc settings (once per process; the answer is remembered)."""
    import platform

    from parallel.memory import keep_freed_memory

    ok = keep_freed_memory()
    assert keep_freed_memory() is ok  # idempotent
    if platform.libc_ver()[0] == "glibc":
        assert ok is True


def _splitters_by_lexsort(gathered, size, use_tiebreak):
    """Reference twin of ``_choose_splitters``: the samples sorted again with np.lexsort."""
    parts = [(n, k, t) for n, k, t, _, _ in gathered if k is not None and len(k) > 0]
    sk = np.concatenate([k for _, k, _ in parts])
    st = np.concatenate([t for _, _, t in parts]) if use_tiebreak else None
    w = np.concatenate([np.full(len(k), n / len(k)) for n, k, _ in parts])
    order = np.lexsort((st, sk)) if use_tiebreak else np.argsort(sk, kind="stable")
    sk, w = sk[order], w[order]
    centre = np.cumsum(w) - 0.5 * w
    targets = np.arange(1, size) * (w.sum() / size)
    idx = np.minimum(np.searchsorted(centre, targets, side="left"), sk.size - 1)
    return sk[idx], (st[order][idx] if use_tiebreak else None)


@pytest.mark.parametrize("use_tiebreak", [True, False])
@pytest.mark.parametrize("ndistinct", [3, 50, None])
def test_splitters_merge_equals_lexsort(use_tiebreak, ndistinct):
    """Rank 0 merges the ranks' sorted samples instead of sorting them: the same splitters
    as a stable lexsort, with ties (equal keys, equal pairs), uneven and empty ranks."""
    from parallel.sort_cuts import _choose_splitters

    rng = np.random.default_rng(ndistinct or 7)
    for size in (2, 3, 16):
        gathered = []
        for rank in range(size):
            s = 0 if rank == 1 else int(rng.integers(1, 40))
            k = rng.integers(0, ndistinct, s).astype(float) if ndistinct else rng.random(s)
            t = rng.integers(0, 4, s)
            o = np.lexsort((t, k))
            gathered.append((int(rng.integers(s, 500)), k[o] if s else None,
                             t[o] if (s and use_tiebreak) else None, None, None))
        got = _choose_splitters(gathered, size, use_tiebreak)
        ref = _splitters_by_lexsort(gathered, size, use_tiebreak)
        np.testing.assert_array_equal(got[0], ref[0])
        if use_tiebreak:
            np.testing.assert_array_equal(got[1], ref[1])
        else:
            assert got[1] is None


def test_default_sample_size_follows_local_stars():
    """One sample per 64 local stars, at least max(4 P, 64) and at most 4096."""
    from parallel.sort_cuts import default_sample_size

    assert default_sample_size(2) == 64 and default_sample_size(64) == 256
    assert default_sample_size(16, 62_500) == 976  # N = 1e6 on 16 ranks
    assert default_sample_size(16, 6_250) == 97
    assert default_sample_size(2, 10**7) == 4096 and default_sample_size(2048, 10) == 4096


class _ThreadComm:
    """One rank of P threads that meet in ``allgather``, ``Allgather`` and ``Allgatherv``
    (enough for :func:`_exact_cuts` with the counts given)."""

    def __init__(self, rank: int, slots: list, barrier) -> None:
        self.rank, self.slots, self.barrier = rank, slots, barrier

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return len(self.slots)

    def allgather(self, obj):
        self.slots[self.rank] = obj
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out

    def Allgather(self, sendbuf, recvbuf):  # noqa: N802 (mpi4py's name)
        recvbuf[...] = np.stack(self.allgather(np.array(sendbuf, copy=True)))

    def Allgatherv(self, sendbuf, recvbuf):  # noqa: N802 (rank order, no gaps)
        send = sendbuf[0] if isinstance(sendbuf, (list, tuple)) else sendbuf
        buf = recvbuf[0]
        buf[...] = np.concatenate(self.allgather(np.array(send, copy=True))).reshape(
            buf.shape)


def _exact_cuts_per_cut(keys, tbs, cuts, deficit):
    """Reference twin of :func:`parallel.sort_cuts._exact_cuts` after its reduction (the
    per-cut loop it had until 2026-11-26): every rank's new cuts, given all ranks' sorted keys
    and tiebreaks (tbs None: none) and local cuts at the splitters."""
    size = len(keys)
    out = [c.copy() for c in cuts]
    for j in np.flatnonzero(deficit):
        d = int(deficit[j])
        k, t, owner = [], [], []
        for q in range(size):
            lo, hi = ((cuts[q][j], min(keys[q].size, cuts[q][j] + d)) if d > 0
                      else (max(0, cuts[q][j] + d), cuts[q][j]))
            k.append(keys[q][lo:hi])
            t.append(None if tbs is None else tbs[q][lo:hi])
            owner.append(np.full(hi - lo, q))
        k, owner = np.concatenate(k), np.concatenate(owner)
        order = (np.argsort(k, kind="stable") if tbs is None
                 else np.lexsort((np.concatenate(t), k)))
        moved = order[:d] if d > 0 else order[order.size + d:]
        for q in range(size):
            mine = int(np.count_nonzero(owner[moved] == q))
            out[q][j] += mine if d > 0 else -mine
    return out


@pytest.mark.parametrize("size", [2, 3, 7])
@pytest.mark.parametrize("ndistinct", [None, 4])
@pytest.mark.parametrize("tiebreak", [True, False])
@pytest.mark.parametrize("per_cut", [1, 5])
@pytest.mark.parametrize("key_dtype", [np.float64, np.float32, np.longdouble])
def test_exact_cuts_equal_per_cut_twin(size, ndistinct, tiebreak, per_cut, key_dtype):
    """The exact cuts (all cuts' offers in one stable sort; with several guesses per cut,
    only the pairs between the two that bracket it offered) are the per-cut loop's with one
    guess, ties included (then in rank order), and with unique (key, tiebreak) pairs they cut
    the global order at the targets; poor guesses (deficits both ways, empty ranks, targets
    outside the guesses) included.  Keys of 8 and 4 bytes travel as words, wider ones
    (long double, 16 bytes here) pickled."""
    import threading

    from parallel.sort_cuts import _exact_cuts

    rng = np.random.default_rng(size * 10 + (ndistinct or 0) + tiebreak)
    ns = rng.integers(0, 60, size)
    ns[rng.integers(size)] = 0
    keys, tbs = [], []
    ids = rng.permutation(int(ns.sum()))
    for q, n in enumerate(ns):
        k = rng.random(n) if ndistinct is None else rng.integers(0, ndistinct, n) * 0.25
        k = k.astype(key_dtype)
        t = ids[ns[:q].sum():ns[:q].sum() + n]
        o = np.lexsort((t, k))
        keys.append(k[o])
        tbs.append(t[o])
    n_total = int(ns.sum())
    scale = (ndistinct or 1) * 0.25
    split = np.sort(rng.random(size - 1) * scale)  # guesses, poor ones
    # more guesses per cut: the first one, then some on either side (a row non-decreasing)
    extra = np.sort(split[:, None] + rng.normal(0, 0.2 * scale, (size - 1, per_cut - 1)), axis=1)
    guesses = np.column_stack((split, extra))
    guesses.sort(axis=1)

    def below(k, t, s):  # the local cuts at guesses s: pairs below (s, -inf)
        return np.searchsorted(k, s.ravel()).reshape(s.shape).astype(np.int64)

    cuts = [below(k, t, split) for k, t in zip(keys, tbs)]
    targets = rank_bounds(n_total, size, 1)[1:-1]
    want = _exact_cuts_per_cut(keys, tbs if tiebreak else None, cuts,
                               targets - np.sum(cuts, axis=0))
    many = [below(k, t, guesses) for k, t in zip(keys, tbs)]
    counts = np.sum(many, axis=0)
    slots, barrier, got = [None] * size, threading.Barrier(size), [None] * size

    def rank(q):
        got[q] = _exact_cuts(_ThreadComm(q, slots, barrier), keys[q],
                             tbs[q] if tiebreak else None, many[q], targets, n_total,
                             counts=counts)[0]

    threads = [threading.Thread(target=rank, args=(q,)) for q in range(size)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
    for q in range(size):
        np.testing.assert_array_equal(got[q], want[q])
    np.testing.assert_array_equal(np.sum(got, axis=0), targets)
    if tiebreak or ndistinct is None:  # unique pairs: below cut j are the smallest targets[j]
        allk = np.concatenate(keys)
        allt = np.concatenate(tbs)
        rank_of = np.empty(n_total, dtype=np.int64)
        rank_of[np.lexsort((allt, allk))] = np.arange(n_total)
        starts = np.concatenate(([0], np.cumsum(ns)))
        for j, target in enumerate(targets):
            below_j = np.concatenate([rank_of[starts[q]:starts[q] + got[q][j]]
                                      for q in range(size)])
            np.testing.assert_array_equal(np.sort(below_j), np.arange(target))


@pytest.mark.parametrize("blocks, ranks", [(0, 4), (3, 16), (98, 16), (977, 16), (20, 3),
                                           (1, 1)])
def test_potential_block_shares_are_even(blocks, ranks):
    """The node's ranks share the potential's blocks evenly (at most one block apart, at
    any block boundary), in order and covering every block once."""
    from parallel.shared import block_shares

    b = block_shares(blocks, ranks)
    sizes = np.diff(b)
    assert b[0] == 0 and b[-1] == blocks and b.size == ranks + 1
    assert sizes.min() >= 0 and sizes.max() - sizes.min() <= 1
