"""Sharing blocks between neighbouring ranks (parallel/balance.py): the shifts' controller,
the transfers it implies, and the byte buffers the blocks travel in.  The MPI runs with shared
blocks are checked against the serial emulation in tests/mpi/test_engine_mpi.py."""

from __future__ import annotations

import numpy as np
import pytest

from parallel.balance import (
    DAMPING,
    DEAD_BAND_DECAY,
    MIN_BLOCKS,
    neighbour_shifts,
    pack_arrays,
    transfers,
    unpack_arrays,
)


def _computed_ranges(shifts: np.ndarray, owned: int, p: int) -> np.ndarray:
    """Global block bounds each rank computes under ``shifts`` (every rank owning ``owned``
    blocks), built from :func:`transfers` of every rank (so that it checks their agreement)."""
    bounds = np.arange(p + 1) * owned
    for rank in range(p):
        take_left, give_left, give_right, take_right = transfers(shifts, rank)
        if rank > 0:  # this rank's first computed block, as its left neighbour sees it too
            assert transfers(shifts, rank - 1)[3] == give_left
            assert transfers(shifts, rank - 1)[2] == take_left
            bounds[rank] = rank * owned + give_left - take_left
    return bounds


def _run_controller(costs: np.ndarray, p: int, calls: int) -> tuple[list, np.ndarray]:
    """Times per call of ``p`` ranks owning equal shares of blocks of the given costs, the
    shifts set by :func:`neighbour_shifts` from the previous call's times."""
    owned = costs.size // p
    shifts = np.zeros(p - 1)
    history = []
    times = np.zeros(p)
    done = np.zeros(p)
    for _ in range(calls):
        shifts = neighbour_shifts(times, done, np.full(p, owned), shifts)
        b = _computed_ranges(shifts, owned, p)
        times = np.array([costs[b[j]:b[j + 1]].sum() for j in range(p)])
        done = np.diff(b).astype(float)
        history.append(times)
    return history, shifts


@pytest.mark.parametrize("p", [2, 3, 5])
def test_controller_balances_work_that_grows_outward(p):
    """Outer blocks cost more (as outer stars do: 1.49 rejection trials against 1.34 on a
    Plummer model): within a few calls the slowest rank is within MIN_BLOCKS blocks' cost of
    the mean, from a start where it was 9-20 % over; and it stays there without swinging (to within
    the rounding to whole blocks)."""
    owned = 400
    costs = np.linspace(1.0, 1.4, p * owned)
    history, _ = _run_controller(costs, p, 12)
    first = history[0]
    assert first.max() / first.mean() > 1.08
    slack = MIN_BLOCKS * costs.max() + 1e-9
    for times in history[8:]:
        assert times.max() - times.mean() <= slack, times
    # the step's time (the slowest rank's) never grows from one call to the next by more than
    # the rounding of the shifts to whole blocks
    slowest = [t.max() for t in history]
    assert all(b <= a + 2 * costs.max() for a, b in zip(slowest, slowest[1:], strict=False)), \
        slowest


def test_controller_leaves_even_work_alone():
    """Equal costs: no shift at all (no messages), also with times not yet measured."""
    history, shifts = _run_controller(np.ones(3 * 100), 3, 5)
    assert np.array_equal(shifts, np.zeros(2))
    assert np.array_equal(neighbour_shifts(np.zeros(3), np.zeros(3), np.full(3, 100),
                                           np.array([5.0, -3.0])), [5.0, -3.0])


def test_shift_is_at_most_a_quarter_of_the_donor():
    """A rank three times slower than its neighbour gives at most a quarter of its blocks."""
    shifts = neighbour_shifts(np.array([1.0, 3.0]), np.array([100.0, 100.0]),
                              np.array([100, 80]), np.zeros(1), damping=1.0)
    assert shifts[0] == 20.0  # floor(0.25 * 80); unclipped it would be 33
    shifts = neighbour_shifts(np.array([3.0, 1.0]), np.array([100.0, 100.0]),
                              np.array([100, 80]), np.zeros(1), damping=1.0)
    assert shifts[0] == -25.0


def test_shift_size_follows_the_measured_imbalance():
    """Rank 1 takes 50 % longer: the fraction DAMPING of the excess over the mean (0.25) moved
    at rank 1's cost per block, i.e. DAMPING * 0.25 / (1.5 / 100) blocks to rank 0; a shift
    inside the dead band (here from a 10 % difference) decays instead."""
    times, done, owned = np.array([1.0, 1.5]), np.array([100.0, 100.0]), np.array([100, 100])
    shifts = neighbour_shifts(times, done, owned, np.zeros(1))
    assert shifts[0] == pytest.approx(DAMPING * 0.25 / 0.015)
    shifts = neighbour_shifts(times, done, owned, np.zeros(1), damping=0.5)
    assert shifts[0] == pytest.approx(0.5 * 0.25 / 0.015)
    assert transfers(shifts, 0) == (0, 0, 0, 8)
    assert transfers(shifts, 1) == (0, 8, 0, 0)
    shifts = neighbour_shifts(np.array([1.0, 1.1]), done, owned, np.zeros(1))
    assert shifts[0] == pytest.approx(DEAD_BAND_DECAY * DAMPING * 0.05 / 0.011)


def test_transfers_sides_and_dead_band():
    """A rank may give on one side and take on the other; shifts under MIN_BLOCKS move
    nothing."""
    shifts = np.array([7.4, -9.6, MIN_BLOCKS - 0.6])
    assert transfers(shifts, 0) == (0, 0, 0, 7)
    assert transfers(shifts, 1) == (0, 7, 10, 0)
    assert transfers(shifts, 2) == (10, 0, 0, 0)   # the last boundary's 3.4 rounds to 3
    assert transfers(shifts, 3) == (0, 0, 0, 0)


def test_pack_unpack_round_trip_keeps_values_and_alignment():
    rng = np.random.default_rng(3)
    arrays = [np.arange(21, dtype=np.int64), rng.random(20), np.array([1, -2, 3], np.int8),
              rng.integers(0, 2**32, size=(5, 4), dtype=np.uint32), np.zeros(0),
              rng.random((3, 2))]
    buf = pack_arrays(arrays)
    # (a received buffer: a fresh copy, 8-byte aligned as recv_bytes makes it)
    got = unpack_arrays(np.frombuffer(buf.tobytes(), np.uint8).copy(),
                        [(a.dtype, a.shape[1:]) for a in arrays])
    for a, b in zip(arrays, got, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
        assert b.ctypes.data % 8 == 0
    with pytest.raises(ValueError, match="2 arrays"):
        unpack_arrays(pack_arrays(arrays[:2]), [(np.int64, ())])


def _shifts_reference(times, done, owned, previous, damping, max_fraction):
    """Plain numpy twin of the compiled controller."""
    shifts = np.array(previous, dtype=float)
    if np.all(times > 0.0) and np.all(done > 0.0):
        per_block = times / done
        excess = np.cumsum(times - times.mean())[:-1]
        shifts -= damping * excess / np.where(excess > 0.0, per_block[:-1], per_block[1:])
        shifts = np.where(np.abs(shifts) < MIN_BLOCKS - 0.5, shifts * DEAD_BAND_DECAY, shifts)
    return np.clip(shifts, -np.floor(max_fraction * owned[:-1]),
                   np.floor(max_fraction * owned[1:]))


@pytest.mark.parametrize("p", [2, 3, 7, 64])
def test_compiled_controller_equals_numpy_twin(p):
    rng = np.random.default_rng(p)
    for _ in range(20):
        times = rng.uniform(0.5, 1.5, p)
        done = rng.integers(1, 300, p).astype(float)
        owned = rng.integers(0, 300, p).astype(float)
        previous = rng.normal(0.0, 30.0, p - 1)
        got = neighbour_shifts(times, done, owned, previous, 0.3, 0.25)
        want = _shifts_reference(times, done, owned, previous, 0.3, 0.25)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)


def test_fixed_shifts_are_clipped_to_the_blocks_held():
    """Shifts set by hand (tests) obey the same limit as measured ones."""
    from parallel.balance import BlockShare

    share = BlockShare(3)
    share.fixed = np.array([500.0, -500.0])
    reports = np.array([[0.0, 0.0, 40.0], [0.0, 0.0, 80.0], [0.0, 0.0, 20.0]])
    assert share.decide(reports, 1) == (0, 20, 20, 0)
    assert np.array_equal(share.shifts, [20.0, -20.0])


def test_small_imbalance_moves_nothing_instead_of_every_other_call():
    """A need below the dead band (4 % between two ranks of 100 blocks: about one block) once
    made the shift add up, cross the band, move 4 blocks, fall back, and so on; the shift now
    decays inside the band and no block moves in 60 calls."""
    owned = 100
    costs = np.concatenate((np.full(owned, 1.0), np.full(owned, 1.04)))
    shifts = np.zeros(1)
    times = done = np.zeros(2)
    moved = 0
    for _ in range(60):
        shifts = neighbour_shifts(times, done, np.full(2, owned), shifts)
        b = _computed_ranges(shifts, owned, 2)
        moved += int(b[1] != owned)
        times = np.array([costs[:b[1]].sum(), costs[b[1]:].sum()])
        done = np.diff(b).astype(float)
    assert moved == 0
