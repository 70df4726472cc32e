"""Parallel sort, redistribution and communication helpers under MPI.

Run with any number of ranks (``mpiexec -n P python -m pytest tests/mpi``, or
plain pytest for P = 1). Every test runs on the sub-communicators of sizes
1..P (fixture ``on_subcomms``), gathers the outcome on all world ranks and
only then asserts, identically on every rank, so a failure cannot deadlock.
"""

from __future__ import annotations

import numpy as np
import pytest

from parallel.comm import (
    SerialComm,
    allgatherv_array,
    allreduce_max,
    allreduce_min,
    allreduce_sum,
    exscan_sum,
    ranked_sum,
)
from parallel.decomposition import block_counts
from parallel.sample_sort import parallel_sort, redistribute_to_blocks, sample_sort

MPI = pytest.importorskip("mpi4py.MPI")

pytestmark = pytest.mark.mpi

CASES = ("random", "sorted", "reversed", "clustered", "duplicates")
LAYOUTS = ("even", "uneven", "first", "last", "interleaved")
SIZES = (0, 1, 7, 19, 20, 45, 333, 1003, 4000)


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------


def global_stars(case: str, n: int, seed: int = 2024) -> dict[str, np.ndarray]:
    """The same global star set on every rank (fixed seed)."""
    rng = np.random.default_rng([seed, CASES.index(case), n])
    if case == "clustered":
        # Dense core: 90% of the keys in [0, 1e-3]; sparse halo out to 1e3.
        core = rng.random(n) < 0.9
        r = np.where(core, rng.uniform(0.0, 1e-3, n), 10.0 ** rng.uniform(-3.0, 3.0, n))
    elif case == "duplicates":
        r = rng.choice(np.array([0.1, 0.5, 1.0, 2.0, 7.5]), n)
    else:
        r = rng.exponential(1.0, n)
    ids = (rng.permutation(n) * 7 + 3).astype(np.int64)
    stars = {
        "r": r,
        "id": ids,
        "m": rng.random(n),
        "kind": rng.integers(0, 15, n).astype(np.int32),
        "flag": (ids % 3).astype(np.int8),
    }
    if case in ("sorted", "reversed"):
        order = np.lexsort((ids, r))
        if case == "reversed":
            order = order[::-1]
        stars = {k: v[order] for k, v in stars.items()}
    return stars


def reference_sort(stars: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    order = np.lexsort((stars["id"], stars["r"]))
    return {k: v[order] for k, v in stars.items()}


def local_indices(layout: str, n: int, p: int, rank: int) -> np.ndarray:
    """Indices of the global stars rank ``rank`` of ``p`` starts with."""
    if layout == "even":
        return np.array_split(np.arange(n), p)[rank]
    if layout == "uneven":
        rng = np.random.default_rng([7, n, p])
        cuts = np.sort(rng.integers(0, n + 1, p - 1))
        edges = np.concatenate(([0], cuts, [n]))
        return np.arange(edges[rank], edges[rank + 1])
    if layout == "first":
        return np.arange(n) if rank == 0 else np.arange(0)
    if layout == "last":
        return np.arange(n) if rank == p - 1 else np.arange(0)
    if layout == "interleaved":
        return np.arange(rank, n, p)
    raise AssertionError(layout)


def take(stars: dict[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[idx] for k, v in stars.items()}


# ---------------------------------------------------------------------------
# checks (on gathered data, identical on every rank)
# ---------------------------------------------------------------------------


def values(outcomes: list) -> list:
    errors = [o[1] for o in outcomes if o[0] != "ok"]
    assert not errors, errors
    return [o[1] for o in outcomes]


def check_global_order(parts: list[dict], expected: dict[str, np.ndarray]) -> None:
    """Concatenated parts are sorted by (r, id) and equal the reference, field by field."""
    for part in parts:
        assert list(part) == list(expected)
        assert len({len(v) for v in part.values()}) == 1
    got = {k: np.concatenate([part[k] for part in parts]) for k in expected}
    r, ids = got["r"], got["id"]
    assert np.all((r[1:] > r[:-1]) | ((r[1:] == r[:-1]) & (ids[1:] > ids[:-1])))
    # Nothing lost or duplicated.
    np.testing.assert_array_equal(np.sort(ids), np.sort(expected["id"]))
    # Every record intact (the reference order is unique since ids are).
    for k, v in expected.items():
        assert got[k].dtype == v.dtype, k
        np.testing.assert_array_equal(got[k], v, err_msg=k)


def check_blocks(parts: list[dict], expected: dict[str, np.ndarray], p: int, chunk: int = 20):
    n = len(expected["id"])
    assert [len(part["id"]) for part in parts] == block_counts(n, p, chunk).tolist()
    check_global_order(parts, expected)


# ---------------------------------------------------------------------------
# parallel_sort
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("n", SIZES)
def test_parallel_sort(on_subcomms, n, case, layout):
    stars = global_stars(case, n)
    expected = reference_sort(stars)

    def run(comm):
        return parallel_sort(comm, take(stars, local_indices(layout, n, comm.size, comm.rank)))

    for p, outcomes in on_subcomms(run).items():
        check_blocks(values(outcomes), expected, p)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("n", [45, 1003])
def test_parallel_sort_word_records(on_subcomms, n, case, layout):
    """Fields of whole 32-bit words only (as the step's): the stars that change rank travel as
    records packed and placed by the compiled kernels, the others go straight from the fields
    to their places (the int8 field of the other tests takes numpy's path); with the step's
    dropped rows, and a 3-vector field (rows of six words)."""
    stars = global_stars(case, n)
    del stars["flag"]
    stars["pos"] = np.stack([stars["r"], -stars["m"], stars["m"]], axis=1)
    dropped = np.random.default_rng(12).random(n) < 0.05
    expected = reference_sort(take(stars, np.flatnonzero(~dropped)))

    def run(comm):
        idx = local_indices(layout, n, comm.size, comm.rank)
        return parallel_sort(comm, take(stars, idx), rows=np.flatnonzero(~dropped[idx]))

    for p, outcomes in on_subcomms(run).items():
        check_blocks(values(outcomes), expected, p)


def check_uniform_bits(parts: list[dict], expected: dict[str, np.ndarray], p: int) -> None:
    """:func:`check_blocks`, and the one-value columns' bits (a NaN's payload, -0.0 beside
    0.0), not only their values."""
    check_blocks(parts, expected, p)
    for k in ("nan", "zero"):
        got = np.concatenate([part[k] for part in parts])
        np.testing.assert_array_equal(got.view(np.uint64), expected[k].view(np.uint64),
                                      err_msg=k)


def _with_uniform_columns(stars: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``stars`` plus columns of one value (as ``startype`` or a single-mass model's ``m``),
    values equal as floats but not as bits, and one uniform on each third of the stars."""
    n = len(stars["r"])
    nan = np.frombuffer(np.uint64(0x7FF8_0000_0000_0ABC).tobytes(), dtype=np.float64)[0]
    # 0.0 == -0.0 but the bits differ: one on each half (uniform on each rank at P = 2)
    signs = np.where(np.arange(n) < -(-n // 2), 0.0, -0.0)
    return {**stars, "one": np.full(n, 0.25), "type": np.ones(n, dtype=np.int32),
            "nan": np.full(n, nan), "zero": signs, "third": (np.arange(n) * 3 // max(n, 1))
            .astype(np.int32), "none": np.full(n, -1, dtype=np.int64)}


def _splitter_guesses(kind: str, r_sorted: np.ndarray, p: int) -> np.ndarray:
    """``p - 1`` splitter guesses for ``parallel_sort(splitters=...)``: the sorted keys at the
    block bounds (``exact``, what the step's last radii approximate), those a tenth of the
    stars off, all below or above every key, or all the median key; or rows of guesses
    around each bound (``bracket``), or a fifth of the stars off it, a whole row on one side
    of the bound (``bracket-off``)."""
    n = r_sorted.size
    bounds = np.cumsum(block_counts(n, p))[:-1]
    at = lambda i: r_sorted[np.clip(i, 0, max(n - 1, 0))] if n else np.zeros(len(i))  # noqa: E731
    if kind == "exact":
        return at(bounds)
    if kind.startswith("bracket"):  # rows of guesses (the step's), around the bounds or off
        from parallel.sort_cuts import bracketing_guesses

        if not n:
            return np.zeros((p - 1, 3))
        off = 0 if kind == "bracket" else (n // 5) * (-1) ** np.arange(p - 1)
        return bracketing_guesses(r_sorted, bounds + off, max(n // 40, 1))
    if kind == "shifted":
        return at(bounds + (n // 10) * (-1) ** np.arange(p - 1))
    if kind == "median":
        return np.full(p - 1, at(np.array([n // 2]))[0])
    return np.full(p - 1, -np.inf if kind == "low" else np.inf)


@pytest.mark.parametrize("guess", ["exact", "shifted", "low", "high", "median", "bracket",
                                   "bracket-off"])
@pytest.mark.parametrize("case", ["random", "clustered", "duplicates"])
@pytest.mark.parametrize("n", [0, 45, 1003])
def test_parallel_sort_splitter_guesses(on_subcomms, n, case, guess):
    """The step's sort takes splitter guesses (the last step's radii at the block bounds)
    instead of sampling: any guess, however poor, gives the reference bit for bit, with rows
    dropped and columns of one value (agreed on with the exact cuts' gather: ``zero`` is
    uniform on each rank at P = 2 but not across them, ``third`` at P = 3).  Sorted
    ``(key, id)`` pairs ``shifted`` off the ``exact`` guesses make the exact cuts move by a
    tenth of the stars, in both directions."""
    stars = _with_uniform_columns(global_stars(case, n))
    dropped = np.random.default_rng(17).random(n) < 0.05
    expected = reference_sort(take(stars, np.flatnonzero(~dropped)))

    def run(comm):
        idx = local_indices("uneven", n, comm.size, comm.rank)
        split = _splitter_guesses(guess, expected["r"], comm.size)
        return parallel_sort(comm, take(stars, idx), rows=np.flatnonzero(~dropped[idx]),
                             splitters=split)

    for p, outcomes in on_subcomms(run).items():
        check_uniform_bits(values(outcomes), expected, p)


def test_parallel_sort_reports_its_guesses(on_subcomms):
    """``report``: the number of stars on all ranks below each guess and the block bounds, the
    same on every rank; :func:`guess_deviation` their deviation from the middle guesses."""
    from parallel.sort_cuts import BRACKET_MIDDLE, bracketing_guesses, guess_deviation

    n = 1003
    stars = global_stars("random", n)
    r_sorted = np.sort(stars["r"])

    def run(comm):
        p = comm.size
        bounds = np.cumsum(block_counts(n, p))[:-1]
        guesses = bracketing_guesses(r_sorted, bounds + 7, 10.0)
        report: dict = {}
        parallel_sort(comm, take(stars, local_indices("uneven", n, p, comm.rank)),
                      splitters=guesses if p > 1 else None, report=report)
        # with rows dropped, the number kept on all ranks (what the step reduced itself)
        dropped: dict = {}
        mine = take(stars, local_indices("uneven", n, p, comm.rank))
        parallel_sort(comm, mine, rows=np.arange(0, mine["r"].size, 3),
                      splitters=guesses if p > 1 else None, report=dropped)
        return guesses, report, dropped

    for p, outcomes in on_subcomms(run).items():
        kept = sum(-(-local_indices("uneven", n, p, q).size // 3) for q in range(p))
        for guesses, report, dropped in values(outcomes):
            if p == 1:
                assert report == {} and dropped == {}
                assert np.isnan(guess_deviation(report))
                continue
            np.testing.assert_array_equal(report["counts"],
                                          np.searchsorted(r_sorted, guesses))
            np.testing.assert_array_equal(report["targets"], np.cumsum(block_counts(n, p))[:-1])
            # the middle guesses are the keys at bounds + 7 (distinct keys): 7 stars off
            assert guesses.shape[1] > BRACKET_MIDDLE
            assert guess_deviation(report) == 7.0
            assert report["n_total"] == n
            assert dropped["n_total"] == kept


@pytest.mark.parametrize("bad", ["nan", "length", "decreasing"])
def test_bad_splitter_guesses_raise_on_all_ranks(on_subcomms, bad):
    """Splitter guesses that are not ``P - 1`` non-decreasing numbers: ValueError on every
    rank (ignored on one rank, which does not cut)."""
    n = 200
    stars = global_stars("random", n)

    def run(comm):
        split = np.linspace(0.5, 1.5, comm.size - 1)
        if bad == "nan" and split.size:
            split[-1] = np.nan
        elif bad == "length":
            split = np.append(split, 2.0)
        elif bad == "decreasing" and split.size:
            split = np.append(split, -1.0)[1:] if split.size > 1 else np.array([np.nan])
        return parallel_sort(comm, take(stars, local_indices("even", n, comm.size, comm.rank)),
                             splitters=split)

    for p, outcomes in on_subcomms(run).items():
        if p == 1:
            values(outcomes)
        else:
            assert all(o[0] == "err" and "splitters" in o[1] for o in outcomes), outcomes


@pytest.mark.parametrize("words", [True, False])
@pytest.mark.parametrize("layout", ["uneven", "interleaved"])
@pytest.mark.parametrize("case", ["random", "duplicates"])
def test_parallel_sort_whole_records(on_subcomms, monkeypatch, case, layout, words):
    """Above ``FIELD_GATHER_MAX`` stars on a rank every record is packed whole and permuted
    (a field larger than the cache): the same result, with dropped rows, one-value columns
    and a sub-array member; through the compiled kernels (``words``: no 1-byte field) and
    through numpy's path."""
    import parallel.sample_sort as ss

    monkeypatch.setattr(ss, "FIELD_GATHER_MAX", 0)
    n = 1003
    stars = _with_uniform_columns(global_stars(case, n))
    stars["v"] = np.arange(3.0 * n).reshape(n, 3)
    if words:
        del stars["flag"]
    dropped = np.random.default_rng(23).random(n) < 0.05
    expected = reference_sort(take(stars, np.flatnonzero(~dropped)))

    def run(comm):
        idx = local_indices(layout, n, comm.size, comm.rank)
        return parallel_sort(comm, take(stars, idx), rows=np.flatnonzero(~dropped[idx]),
                             share_uniform=True)

    for p, outcomes in on_subcomms(run).items():
        check_uniform_bits(values(outcomes), expected, p)


@pytest.mark.parametrize("layout", ["even", "first", "interleaved"])
@pytest.mark.parametrize("n", [0, 1, 45, 1003])
def test_parallel_sort_uniform_columns(on_subcomms, n, layout):
    """Columns of one value on every rank stay out of the records and are filled on arrival
    (``uniform_value``): the result is the reference bit for bit (a NaN's payload, -0.0
    beside 0.0), also with dropped rows, ranks without stars, and columns uniform on each
    rank but not across them (even layout: ``zero`` at P = 2, ``third`` at P = 3)."""
    stars = _with_uniform_columns(global_stars("random", n))
    dropped = np.random.default_rng(13).random(n) < 0.05
    expected = reference_sort(take(stars, np.flatnonzero(~dropped)))

    def run(comm):
        idx = local_indices(layout, n, comm.size, comm.rank)
        return parallel_sort(comm, take(stars, idx), rows=np.flatnonzero(~dropped[idx]))

    for p, outcomes in on_subcomms(run).items():
        check_uniform_bits(values(outcomes), expected, p)


@pytest.mark.parametrize("layout", ["even", "first", "interleaved"])
@pytest.mark.parametrize("n", [45, 1003])
def test_parallel_sort_shares_uniform_columns(on_subcomms, n, layout):
    """``share_uniform`` on any number of ranks: the same bits as the copying path (a NaN's
    payload, -0.0 beside 0.0); a one-value column comes back as a prefix of this rank's input
    column only where that column held the common value and is long enough (``zero`` holds
    -0.0 on some ranks, 0.0 on others: never shared there), and every other column is new.
    """
    stars = _with_uniform_columns(global_stars("random", n))
    dropped = np.random.default_rng(19).random(n) < 0.05
    expected = reference_sort(take(stars, np.flatnonzero(~dropped)))
    common = {"one", "type", "nan", "none"}  # one value, one bit pattern, on every rank

    def run(comm):
        idx = local_indices(layout, n, comm.size, comm.rank)
        mine = take(stars, idx)
        out = parallel_sort(comm, mine, rows=np.flatnonzero(~dropped[idx]), share_uniform=True)
        n_out = len(out["r"])
        shared = {k for k in out if np.shares_memory(out[k], mine[k])}
        may = {k for k in common if len(idx) >= n_out > 0}
        return out, shared, may

    for p, outcomes in on_subcomms(run).items():
        got = values(outcomes)
        check_uniform_bits([g[0] for g in got], expected, p)
        for _, shared, may in got:
            assert shared == may, (p, shared, may)
        # (a fault that never shares would pass the equality above only where nothing may)
        assert any(g[2] for g in got) or layout == "first", p


def test_parallel_sort_shares_only_the_common_value(on_subcomms):
    """A rank whose stars are all dropped holds another one-value column than the others
    (``type`` 7 there, 1 elsewhere): the common value is the kept stars' (1), and that rank's
    output, which holds stars of the others, is filled with it, not a prefix of its 7s."""
    n = 400
    stars = global_stars("random", n)

    def run(comm):
        idx = local_indices("even", n, comm.size, comm.rank)
        mine = take(stars, idx)
        gone = comm.size > 1 and comm.rank == comm.size - 1
        mine["type"] = np.full(len(idx), 7 if gone else 1, dtype=np.int32)
        keep = np.arange(0 if gone else len(idx))
        out = parallel_sort(comm, mine, rows=keep, share_uniform=True)
        return out, len(out["r"])

    for p, outcomes in on_subcomms(run).items():
        got = values(outcomes)
        kept = np.concatenate([local_indices("even", n, p, q) for q in range(max(p - 1, 1))])
        expected = reference_sort({**take(stars, kept), "type": np.ones(kept.size, np.int32)})
        check_blocks([g[0] for g in got], expected, p)
        assert p == 1 or got[-1][1] > 0, p  # the rank without kept stars receives some


@pytest.mark.parametrize("layout", ["uneven", "first"])
@pytest.mark.parametrize("case", CASES)
def test_parallel_sort_selected_rows(on_subcomms, case, layout):
    """``rows`` drops the other local stars (the step's escapers) in the sort itself: the
    result is the sort of the kept stars, in the block layout of their number."""
    n = 1003
    stars = global_stars(case, n)
    dropped = np.random.default_rng(11).random(n) < 0.1
    expected = reference_sort(take(stars, np.flatnonzero(~dropped)))

    def run(comm):
        idx = local_indices(layout, n, comm.size, comm.rank)
        local = take(stars, idx)
        local["r"][dropped[idx]] = np.nan  # a dropped row's key is never read
        return parallel_sort(comm, local, rows=np.flatnonzero(~dropped[idx]))

    for p, outcomes in on_subcomms(run).items():
        check_blocks(values(outcomes), expected, p)


@pytest.mark.parametrize("sample_size", [1, 2, 5, None, 100000])
@pytest.mark.parametrize("case", ["clustered", "duplicates"])
def test_parallel_sort_sample_sizes(on_subcomms, case, sample_size):
    n = 2017
    stars = global_stars(case, n)
    expected = reference_sort(stars)

    def run(comm):
        local = take(stars, local_indices("uneven", n, comm.size, comm.rank))
        return parallel_sort(comm, local, sample_size=sample_size)

    for p, outcomes in on_subcomms(run).items():
        check_blocks(values(outcomes), expected, p)


@pytest.mark.parametrize("chunk", [1, 7, 20, 64])
def test_parallel_sort_chunk(on_subcomms, chunk):
    n = 531
    stars = global_stars("random", n)
    expected = reference_sort(stars)

    def run(comm):
        local = take(stars, local_indices("interleaved", n, comm.size, comm.rank))
        return parallel_sort(comm, local, chunk=chunk)

    for p, outcomes in on_subcomms(run).items():
        check_blocks(values(outcomes), expected, p, chunk)


def test_repeated_sorts(on_subcomms):
    """Several 'time steps': perturb r on the owning rank, sort again."""
    n = 1500
    stars = global_stars("clustered", n)

    def run(comm):
        local = take(stars, local_indices("even", n, comm.size, comm.rank))
        history = []
        for step in range(4):
            local = parallel_sort(comm, local)
            history.append(local)
            # Deterministic per-star perturbation (depends on id only, not on P).
            local = dict(local)
            local["r"] = local["r"] * (1.0 + 0.1 * np.sin(local["id"] * (step + 1.0)))
        return history

    outcomes = on_subcomms(run)
    ref = dict(stars)
    expected_steps = []
    for step in range(4):
        ref = reference_sort(ref)
        expected_steps.append(ref)
        ref = dict(ref)
        ref["r"] = ref["r"] * (1.0 + 0.1 * np.sin(ref["id"] * (step + 1.0)))
    for p, outs in outcomes.items():
        histories = values(outs)
        for step in range(4):
            check_blocks([h[step] for h in histories], expected_steps[step], p)


def test_parallel_sort_vector_field(on_subcomms):
    n = 250
    stars = global_stars("random", n)
    stars["pos"] = np.stack([stars["r"], -stars["r"], stars["m"]], axis=1)
    expected = reference_sort(stars)

    def run(comm):
        return parallel_sort(comm, take(stars, local_indices("uneven", n, comm.size, comm.rank)))

    for p, outcomes in on_subcomms(run).items():
        parts = values(outcomes)
        assert [len(x["id"]) for x in parts] == block_counts(n, p).tolist()
        got = np.concatenate([x["pos"] for x in parts])
        assert got.shape == (n, 3)
        np.testing.assert_array_equal(got, expected["pos"])


def test_parallel_sort_no_tiebreak(on_subcomms):
    n = 777
    stars = global_stars("random", n)  # continuous keys: unique
    expected = reference_sort(stars)

    def run(comm):
        local = take(stars, local_indices("interleaved", n, comm.size, comm.rank))
        return parallel_sort(comm, local, tiebreak=None)

    for p, outcomes in on_subcomms(run).items():
        check_blocks(values(outcomes), expected, p)


@pytest.mark.parametrize("sample_size, guess", [(1, None), (None, None), (None, "exact"),
                                                (None, "low"), (None, "median")])
@pytest.mark.parametrize("layout", ["uneven", "interleaved"])
def test_parallel_sort_no_tiebreak_ties(on_subcomms, layout, sample_size, guess):
    """Equal keys and no tiebreak: the cuts moved to the block bounds among ties still give
    every rank its block count, keys in order across ranks and every star once, from
    sampled splitters or guessed ones."""
    n = 1403
    stars = global_stars("duplicates", n)

    def run(comm):
        local = take(stars, local_indices(layout, n, comm.size, comm.rank))
        split = None if guess is None else _splitter_guesses(guess, np.sort(stars["r"]),
                                                             comm.size)
        return parallel_sort(comm, local, tiebreak=None, sample_size=sample_size,
                             splitters=split)

    for p, outcomes in on_subcomms(run).items():
        parts = values(outcomes)
        assert [len(x["id"]) for x in parts] == block_counts(n, p).tolist()
        r = np.concatenate([x["r"] for x in parts])
        assert np.all(r[1:] >= r[:-1])
        got = {k: np.concatenate([x[k] for x in parts]) for k in stars}
        order = np.argsort(got["id"])
        ref = np.argsort(stars["id"])
        for k in stars:  # every record intact, whatever the order of ties
            np.testing.assert_array_equal(got[k][order], stars[k][ref], err_msg=k)


# ---------------------------------------------------------------------------
# the two phases separately
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["even", "first", "interleaved"])
@pytest.mark.parametrize("case", CASES)
def test_sample_sort_alone(on_subcomms, case, layout):
    n = 1203
    stars = global_stars(case, n)
    expected = reference_sort(stars)

    def run(comm):
        return sample_sort(comm, take(stars, local_indices(layout, n, comm.size, comm.rank)))

    for _, outcomes in on_subcomms(run).items():
        check_global_order(values(outcomes), expected)


@pytest.mark.parametrize("n", [0, 5, 20, 61, 999])
@pytest.mark.parametrize("layout", LAYOUTS[:4])
def test_redistribute_alone(on_subcomms, n, layout):
    # Globally ordered input with arbitrary (also empty) local sizes.
    expected = reference_sort(global_stars("random", n))

    def run(comm):
        idx = local_indices(layout, n, comm.size, comm.rank)
        return redistribute_to_blocks(comm, take(expected, idx))

    for p, outcomes in on_subcomms(run).items():
        check_blocks(values(outcomes), expected, p)


# ---------------------------------------------------------------------------
# errors are raised collectively
# ---------------------------------------------------------------------------


def _bad_on_last_rank(kind: str, guessed: bool = False):
    n = 100
    stars = global_stars("random", n)

    def run(comm):
        split = np.linspace(0.5, 1.5, comm.size - 1) if guessed else None
        local = take(stars, local_indices("even", n, comm.size, comm.rank))
        if comm.rank == comm.size - 1:
            if kind == "nan":
                local["r"][:1] = np.nan
            elif kind == "missing":
                del local["id"]
            elif kind == "dtype":
                local["kind"] = local["kind"].astype(np.int64)
            elif kind == "length":
                local["m"] = local["m"][:-1] if len(local["m"]) else np.zeros(1)
        return parallel_sort(comm, local, splitters=split)

    return run


@pytest.mark.parametrize("guessed", [False, True])
@pytest.mark.parametrize("kind", ["nan", "missing", "length"])
def test_invalid_input_raises_on_all_ranks(on_subcomms, kind, guessed):
    """Also with splitter guesses, where the errors travel in the cuts' reduction."""
    for _, outcomes in on_subcomms(_bad_on_last_rank(kind, guessed)).items():
        assert all(o[0] == "err" and o[1].startswith("ValueError") for o in outcomes), outcomes


@pytest.mark.parametrize("guessed", [False, True])
def test_dtype_mismatch_raises_on_all_ranks(on_subcomms, guessed):
    for p, outcomes in on_subcomms(_bad_on_last_rank("dtype", guessed)).items():
        if p == 1:
            values(outcomes)  # a single rank cannot disagree with itself
        else:
            assert all(o[0] == "err" and "dtype" in o[1] for o in outcomes), outcomes


def test_redistribute_dtype_mismatch_raises_on_all_ranks(on_subcomms):
    expected = reference_sort(global_stars("random", 60))

    def run(comm):
        local = take(expected, local_indices("even", 60, comm.size, comm.rank))
        if comm.rank == 0 and comm.size > 1:
            local["id"] = local["id"].astype(np.float64)
        return redistribute_to_blocks(comm, local)

    for p, outcomes in on_subcomms(run).items():
        if p == 1:
            values(outcomes)
        else:
            assert all(o[0] == "err" and "dtype" in o[1] for o in outcomes), outcomes


# ---------------------------------------------------------------------------
# parallel.comm helpers
# ---------------------------------------------------------------------------


def test_reduction_helpers(on_subcomms):
    def run(comm):
        k = comm.rank
        return (
            allreduce_sum(comm, np.array([1.0, k, 2 * k])),
            allreduce_sum(comm, np.array([1, k], dtype=np.int32)),
            allreduce_min(comm, np.array([k, -k, 0.5])),
            allreduce_max(comm, np.array([k, -k])),
            allreduce_sum(comm, 2.5),
            exscan_sum(comm, k + 1),
        )

    for p, outcomes in on_subcomms(run).items():
        ranks = np.arange(p)
        for k, res in enumerate(values(outcomes)):
            s_f, s_i, mn, mx, scalar, ex = res
            np.testing.assert_array_equal(s_f, [p, ranks.sum(), 2 * ranks.sum()])
            assert s_f.dtype == np.float64
            np.testing.assert_array_equal(s_i, [p, ranks.sum()])
            assert s_i.dtype == np.int64
            np.testing.assert_array_equal(mn, [0, -(p - 1), 0.5])
            np.testing.assert_array_equal(mx, [p - 1, 0])
            assert scalar == 2.5 * p and np.ndim(scalar) == 0
            assert ex == int((ranks[:k] + 1).sum()) and isinstance(ex, int)


def test_ranked_sum_adds_in_rank_order(on_subcomms):
    """Rank 0 holds 2**53, the others 1.0 each: adding in rank order loses every 1.0 (ties
    round to even), any other association keeps some; the result is the serial sum of the
    same rows, the same bits on every rank."""
    big = float(2 ** 53)

    def run(comm):
        k = comm.rank
        return ranked_sum(comm, np.array([[big if k == 0 else 1.0, 0.1 * (k + 1)]]))

    for p, outcomes in on_subcomms(run).items():
        rows = np.array([[big if k == 0 else 1.0, 0.1 * (k + 1)] for k in range(p)])
        serial = ranked_sum(SerialComm(), rows)
        assert serial[0] == big
        want = rows[0].copy()
        for row in rows[1:]:
            want += row
        for res in values(outcomes):
            assert res.tobytes() == serial.tobytes() == want.tobytes()


@pytest.mark.parametrize("kind", ["float", "int", "rows", "records"])
def test_allgatherv_array(on_subcomms, kind):
    def local_part(k):
        n = (3 * k + 1) % 4  # sizes 1, 0, 3, 2, ...: includes an empty rank
        base = np.arange(n) + 100 * k
        if kind == "float":
            return base * 0.5
        if kind == "int":
            return base.astype(np.int64)
        if kind == "rows":
            return np.stack([base, -base], axis=1).astype(np.float64)
        rec = np.empty(n, dtype=[("a", np.float64), ("b", np.int32)])
        rec["a"], rec["b"] = base * 0.25, base
        return rec

    def run(comm):
        # with the sizes gathered, and with the sizes given (no first message)
        rows = [local_part(k).shape[0] for k in range(comm.size)]
        return (allgatherv_array(comm, local_part(comm.rank)),
                allgatherv_array(comm, local_part(comm.rank), rows=rows))

    for p, outcomes in on_subcomms(run).items():
        expected = np.concatenate([local_part(k) for k in range(p)])
        for pair in values(outcomes):
            for got in pair:
                assert got.dtype == expected.dtype and got.shape == expected.shape
                np.testing.assert_array_equal(got, expected)


def test_allgatherv_array_mismatch_raises_on_all_ranks(on_subcomms):
    def run(comm):
        dtype = np.int32 if comm.rank == comm.size - 1 and comm.size > 1 else np.float64
        return allgatherv_array(comm, np.zeros(3, dtype=dtype))

    for p, outcomes in on_subcomms(run).items():
        if p == 1:
            values(outcomes)
        else:
            assert all(o[0] == "err" and o[1].startswith("ValueError") for o in outcomes)


@pytest.mark.parametrize("kwargs", [{"chunk": 0}, {"sample_size": 0}])
def test_bad_parameters_raise_on_all_ranks(on_subcomms, kwargs):
    stars = global_stars("random", 50)

    def run(comm):
        return parallel_sort(
            comm, take(stars, local_indices("even", 50, comm.size, comm.rank)), **kwargs
        )

    for _, outcomes in on_subcomms(run).items():
        assert all(o[0] == "err" and o[1].startswith("ValueError") for o in outcomes), outcomes
