"""Tests of the lfsr113 generator, its jump-ahead and the stream tables."""

from __future__ import annotations

import warnings

import h5py
import numpy as np
import pytest
from numba import njit
from numpy.random import Generator

from parallel.rng import (
    COMPONENT_PARAMS,
    MAX_SUBSTREAMS,
    STREAM_JUMP,
    SUBSTREAM_JUMP,
    apply_jump,
    apply_jump_ref,
    apply_jump_tables,
    berlekamp_massey,
    component_polynomials,
    fill_u32,
    fill_uniform,
    jump_matrices,
    jump_state,
    jump_state_poly,
    jump_tables,
    raw_outputs,
    reference_outputs,
    reference_uniforms,
    seed_state,
    state_from_components,
    taus_next_u32,
    taus_uniform,
    validate_state,
)
from parallel.streams import Streams

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _random_states(n: int, seed: int = 0) -> np.ndarray:
    """Valid raw states drawn with numpy (independent of the code under test)."""
    rs = np.random.default_rng(seed)
    out = rs.integers(0, 2**32, size=(n, 4), dtype=np.uint64)
    lo = np.array([2, 8, 16, 128], dtype=np.uint64)
    return np.maximum(out, lo).astype(np.uint32)


def _advance(state: np.ndarray, n: int) -> np.ndarray:
    """State after ``n`` single steps, via the njit kernel."""
    st = np.array(state, dtype=np.uint32).reshape(1, 4).copy()
    fill_u32(st, 0, np.empty(n, dtype=np.uint32))
    return st[0]


def _uniforms(state: np.ndarray, n: int) -> np.ndarray:
    st = np.array(state, dtype=np.uint32).reshape(1, 4).copy()
    out = np.empty(n)
    fill_uniform(st, 0, out)
    return out


def _corr_ok(a: np.ndarray, b: np.ndarray) -> bool:
    """Independence check used below: |Pearson r| < 5 / sqrt(n)."""
    r = np.corrcoef(a, b)[0, 1]
    return bool(abs(r) < 5.0 / np.sqrt(a.size))


@njit
def _per_call_uniforms(states, i, n):
    out = np.empty(n)
    for k in range(n):
        out[k] = taus_uniform(states, i)
    return out


@njit
def _per_call_u32(states, i, n):
    out = np.empty(n, dtype=np.uint32)
    for k in range(n):
        out[k] = taus_next_u32(states, i)
    return out


def _poly_mod(a: int, m: int) -> int:
    d = m.bit_length() - 1
    for i in range(a.bit_length() - 1, d - 1, -1):
        if (a >> i) & 1:
            a ^= m << (i - d)
    return a


def _x_pow_mod(n: int, m: int) -> int:
    """x**n mod m over GF(2), independent of parallel.rng's implementation."""
    result, base = 1, _poly_mod(2, m)
    while n:
        if n & 1:
            result = _poly_mod(_clmul(result, base), m)
        base = _poly_mod(_clmul(base, base), m)
        n >>= 1
    return result


def _clmul(a: int, b: int) -> int:
    out = 0
    while b:
        if b & 1:
            out ^= a
        a <<= 1
        b >>= 1
    return out


# ---------------------------------------------------------------------------
# published reference outputs
# ---------------------------------------------------------------------------


def test_gsl_taus113_seed1_1000th_output():
    state = seed_state(1)
    out = np.empty(1000, dtype=np.uint32)
    fill_u32(state.reshape(1, 4).copy(), 0, out)
    assert int(out[-1]) == 1925420673
    assert reference_outputs(state, 1000)[0][-1] == 1925420673


def test_lecuyer_lfsr113_seeds12345_millionth_output():
    state = state_from_components(12345, 12345, 12345, 12345)
    out = np.empty(1_000_000, dtype=np.uint32)
    fill_u32(state.reshape(1, 4).copy(), 0, out)
    assert int(out[-1]) == 1205173390


def test_seed_zero_is_seed_one():
    np.testing.assert_array_equal(seed_state(0), seed_state(1))


# ---------------------------------------------------------------------------
# kernels against the plain-Python reference
# ---------------------------------------------------------------------------


def test_kernels_match_reference():
    states = _random_states(5, seed=1)
    for i in range(states.shape[0]):
        ref_u, ref_final = reference_outputs(states[i], 200)
        ref_d = reference_uniforms(states[i], 200)

        s = states.copy()
        got = [int(taus_next_u32(s, i)) for _ in range(200)]
        assert got == ref_u
        assert s[i].tolist() == ref_final
        # Other rows untouched.
        np.testing.assert_array_equal(np.delete(s, i, 0), np.delete(states, i, 0))

        s = states.copy()
        np.testing.assert_array_equal(_per_call_u32(s, i, 200), ref_u)
        s = states.copy()
        np.testing.assert_array_equal(_per_call_uniforms(s, i, 200), ref_d)
        assert s[i].tolist() == ref_final

        s = states.copy()
        out = np.empty(200)
        fill_uniform(s, i, out)
        np.testing.assert_array_equal(out, ref_d)
        assert s[i].tolist() == ref_final

        s = states.copy()
        assert float(taus_uniform(s, i)) == ref_d[0]


def test_apply_jump_matches_reference():
    states = _random_states(8, seed=2)
    for n in (1, 77, 2**60 + 12345):
        jm = jump_matrices(n)
        jt = jump_tables(jm)
        a = states.copy()
        b = states.copy()
        for i in range(states.shape[0]):
            apply_jump(a, i, jm)
            apply_jump_tables(b, i, jt)
            assert a[i].tolist() == apply_jump_ref(states[i], jm)
        np.testing.assert_array_equal(a, b)


def test_uniform_formula_open_interval():
    # The extreme raw outputs still map strictly inside (0, 1).
    assert (np.float64(0) + 0.5) * 2.0**-32 > 0.0
    assert (np.float64(2**32 - 1) + 0.5) * 2.0**-32 < 1.0
    u, _ = reference_outputs(seed_state(3), 50)
    np.testing.assert_array_equal(_uniforms(seed_state(3), 50), (np.array(u) + 0.5) * 2.0**-32)


# ---------------------------------------------------------------------------
# jump-ahead
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 2, 31, 32, 1000, 99_991])
def test_jump_equals_single_steps(n):
    for state in (seed_state(12345), _random_states(1, seed=n)[0]):
        expected = _advance(state, n)
        np.testing.assert_array_equal(jump_state(state, n), expected)
        np.testing.assert_array_equal(jump_state(state, n, method="poly"), expected)


def test_jump_composition():
    rs = np.random.default_rng(4)
    state = seed_state(99)
    for _ in range(3):
        a = int(rs.integers(0, 2**62)) * 2**40 + int(rs.integers(0, 2**40))
        b = int(rs.integers(0, 2**62)) * 2**45 + int(rs.integers(0, 2**45))
        ab = jump_state(jump_state(state, a), b)
        np.testing.assert_array_equal(ab, jump_state(state, a + b))
        np.testing.assert_array_equal(ab, jump_state_poly(jump_state_poly(state, a), b))
    # 2**20 sub-stream jumps are exactly one stream jump.
    np.testing.assert_array_equal(
        jump_state(state, MAX_SUBSTREAMS * SUBSTREAM_JUMP), jump_state(state, STREAM_JUMP)
    )


def test_matrix_and_polynomial_methods_agree():
    rs = np.random.default_rng(5)
    distances = [2**80, 2**60, 2**113 - 1, 3 * 2**80 + 17 * 2**60]
    distances += [int.from_bytes(rs.bytes(15), "little") for _ in range(4)]
    for state in (seed_state(1), _random_states(1, seed=6)[0]):
        for n in distances:
            np.testing.assert_array_equal(jump_state(state, n), jump_state_poly(state, n))


def test_jump_matrices_format():
    jm = jump_matrices(2**80)
    assert jm.shape == (4, 32) and jm.dtype == np.uint32
    ident = jump_matrices(0)
    np.testing.assert_array_equal(
        ident, np.tile(np.uint32(1) << np.arange(32, dtype=np.uint32), (4, 1))
    )
    # Column b of the one-step matrix is the one-step image of bit b.
    one = jump_matrices(1)
    for c in range(4):
        for b in range(32):
            z = [0, 0, 0, 0]
            z[c] = 1 << b
            img = apply_jump_ref(z, one)
            assert img[c] == int(one[c, b])


def test_component_polynomials_are_decimated_trinomials_with_full_period():
    # Prime factors of 2**k - 1 for k = 31, 29, 28, 25.
    factors = {
        31: [2**31 - 1],
        29: [233, 1103, 2089],
        28: [3, 5, 29, 43, 113, 127],
        25: [31, 601, 1801],
    }
    for (k, q, s, _mask), p in zip(COMPONENT_PARAMS, component_polynomials()):
        assert p.bit_length() - 1 == k
        # The root of P is alpha**s with alpha a root of x**k + x**q + 1.
        p_of_xs = sum(1 << (s * i) for i in range(k + 1) if (p >> i) & 1)
        assert _poly_mod(p_of_xs, (1 << k) | (1 << q) | 1) == 0
        # Primitive: order of x is exactly 2**k - 1.
        assert _x_pow_mod(2**k - 1, p) == 1
        for f in factors[k]:
            assert _x_pow_mod((2**k - 1) // f, p) != 1


def test_full_period_returns_to_start():
    period = (2**31 - 1) * (2**29 - 1) * (2**28 - 1) * (2**25 - 1)
    state = seed_state(2024)  # past the nilpotent transient (10 steps discarded)
    np.testing.assert_array_equal(jump_state(state, period), state)
    assert not np.array_equal(jump_state(state, period // (2**31 - 1)), state)


def test_berlekamp_massey_small():
    # Fibonacci-like s_t = s_{t-1} ^ s_{t-3}: connection 1 + x + x**3.
    seq = [1, 0, 0]
    for t in range(3, 30):
        seq.append(seq[t - 1] ^ seq[t - 3])
    assert berlekamp_massey(seq) == (0b1011, 3)


# ---------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------


def test_uniformity_and_open_interval():
    n = 1_000_000
    x = _uniforms(seed_state(7), n)
    assert x.min() > 0.0 and x.max() < 1.0
    assert abs(x.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
    counts = np.bincount((x * 100).astype(np.int64), minlength=100)
    expected = n / 100
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # 99 degrees of freedom: mean 99, sd 14; 170 is beyond the 1e-5 tail.
    assert chi2 < 170.0


def test_streams_and_substreams_uncorrelated():
    n = 200_000
    streams = Streams.create(11, n_streams=2, n_substreams=3)
    s00 = _uniforms(streams.states[0, 0], n)
    s10 = _uniforms(streams.states[1, 0], n)
    s01 = _uniforms(streams.states[0, 1], n)
    s02 = _uniforms(streams.states[0, 2], n)
    for a, b in ((s00, s10), (s00, s01), (s01, s02), (s10, s01)):
        assert _corr_ok(a, b)
        # Also with a lag of one draw.
        assert _corr_ok(a[1:], b[:-1])
    # The check has teeth: identical or merely shifted-by-zero streams fail.
    assert not _corr_ok(s00, s00.copy())
    assert not _corr_ok(s00, 0.9 * s00 + 0.1 * s10)


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, "3", None, True])
def test_invalid_seed_rejected(seed):
    with pytest.raises(ValueError):
        seed_state(seed)


@pytest.mark.parametrize(
    "words",
    [(1, 8, 16, 128), (2, 7, 16, 128), (2, 8, 15, 128), (2, 8, 16, 127), (2**32, 8, 16, 128)],
)
def test_invalid_components_rejected(words):
    with pytest.raises(ValueError):
        state_from_components(*words)
    state_from_components(2, 8, 16, 128)  # the minimum is valid


def test_validate_state_shape_and_dtype():
    good = seed_state(5)
    validate_state(good)
    validate_state(np.stack([good, good]))
    with pytest.raises(ValueError, match="uint32"):
        validate_state(good.astype(np.int64))
    with pytest.raises(ValueError, match="shape"):
        validate_state(good[:3])
    with pytest.raises(ValueError, match="z4"):
        validate_state(np.array([[5, 9, 17, 200], [5, 9, 17, 3]], dtype=np.uint32))
    with pytest.raises(ValueError):
        jump_state(good, -1)
    with pytest.raises(ValueError):
        jump_state(good, 1, method="bogus")
    with pytest.raises(ValueError):
        raw_outputs(1, 0, MAX_SUBSTREAMS, 3)


def test_streams_argument_checks():
    with pytest.raises(ValueError):
        Streams.create(1, 0, 4)
    with pytest.raises(ValueError):
        Streams.create(1, 2, 0)
    with pytest.raises(ValueError):
        Streams.create(1, 2, MAX_SUBSTREAMS + 1)
    with pytest.raises(ValueError):
        Streams.create(-3, 1, 1)
    streams = Streams.create(1, 1, 4)
    with pytest.raises(ValueError):
        streams.store_block_states(0, [0, 1], np.zeros((2, 4), dtype=np.uint32))
    with pytest.raises(ValueError):
        streams.store_block_states(0, [0, 1], streams.block_states(0, [0]))
    bad = streams.get_state()
    bad["generator"] = "mt19937"
    with pytest.raises(ValueError):
        streams.set_state(bad)


# ---------------------------------------------------------------------------
# streams, checkpoints, numpy interface
# ---------------------------------------------------------------------------


def test_streams_table_definition():
    streams = Streams.create(42, n_streams=3, n_substreams=5, first_stream=2)
    for r in range(3):
        for j in (0, 1, 4):
            expected = jump_state(seed_state(42), (2 + r) * STREAM_JUMP + j * SUBSTREAM_JUMP)
            np.testing.assert_array_equal(streams.states[r, j], expected)
    assert raw_outputs(42, 3, 4, 5).tolist() == reference_outputs(streams.states[1, 4], 5)[0]
    # A rank's table is the matching slice of the serial emulation's table.
    serial = Streams.create(42, n_streams=5, n_substreams=5)
    np.testing.assert_array_equal(serial.states[2:], streams.states)


def test_create_is_fast():
    import time

    Streams.create(3, 1, 10)  # compile
    t0 = time.perf_counter()
    streams = Streams.create(3, 4, 50_000)
    assert time.perf_counter() - t0 < 1.0
    np.testing.assert_array_equal(
        streams.states[3, 49_999],
        jump_state(seed_state(3), 3 * STREAM_JUMP + 49_999 * SUBSTREAM_JUMP),
    )


def _draw_blocks(streams: Streams, row: int, blocks: np.ndarray, k: int) -> np.ndarray:
    st = streams.block_states(row, blocks)
    out = np.empty((blocks.size, k))
    for i in range(blocks.size):
        fill_uniform(st, i, out[i])
    streams.store_block_states(row, blocks, st)
    return out


def test_state_round_trip_dict_and_hdf5(tmp_path):
    streams = Streams.create(8, n_streams=2, n_substreams=6)
    blocks = np.array([0, 3, 5])
    _draw_blocks(streams, 1, blocks, 10)  # not at the start any more
    saved = streams.get_state()
    first = _draw_blocks(streams, 1, blocks, 25)
    streams.set_state(saved)
    np.testing.assert_array_equal(_draw_blocks(streams, 1, blocks, 25), first)

    streams.set_state(saved)
    with h5py.File(tmp_path / "ckpt.h5", "w") as f:
        streams.write_hdf5(f.create_group("rng"))
        streams.write_hdf5(f["rng"])  # overwriting a checkpoint works
    with h5py.File(tmp_path / "ckpt.h5", "r") as f:
        restored = Streams.read_hdf5(f["rng"])
    assert (restored.seed, restored.first_stream) == (8, 0)
    np.testing.assert_array_equal(restored.states, saved["states"])
    np.testing.assert_array_equal(_draw_blocks(restored, 1, blocks, 25), first)
    clone = Streams.from_state(saved)
    np.testing.assert_array_equal(_draw_blocks(clone, 1, blocks, 25), first)


def test_ensure_substreams_keeps_existing_and_matches_create():
    streams = Streams.create(21, n_streams=2, n_substreams=10, first_stream=1)
    _draw_blocks(streams, 0, np.array([9, 2]), 7)
    before = streams.states.copy()
    streams.ensure_substreams(8)  # no-op
    np.testing.assert_array_equal(streams.states, before)
    streams.ensure_substreams(25)
    assert streams.states.shape == (2, 25, 4)
    np.testing.assert_array_equal(streams.states[:, :10], before)
    fresh = Streams.create(21, n_streams=2, n_substreams=25, first_stream=1)
    np.testing.assert_array_equal(streams.states[:, 10:], fresh.states[:, 10:])


def test_bit_generator_matches_kernel_draws():
    streams = Streams.create(5, n_streams=2, n_substreams=4)
    start = streams.states[1, 2].copy()
    bg = streams.bit_generator(1, 2)
    gen = Generator(bg)
    np.testing.assert_array_equal(gen.random(1000), _uniforms(start, 1000))
    # The table row itself was advanced by the numpy draws.
    np.testing.assert_array_equal(streams.states[1, 2], _advance(start, 1000))
    np.testing.assert_array_equal(bg.state["state"], streams.states[1, 2])

    bg2 = Streams.create(5, 2, 4).bit_generator(1, 2)
    np.testing.assert_array_equal(
        bg2.random_raw(6), np.array(raw_outputs(5, 1, 2, 6), dtype=np.uint64)
    )

    # Normal draws are reproducible from a restored state.
    saved = bg.state
    z1 = gen.standard_normal(500)
    bg.state = saved
    np.testing.assert_array_equal(gen.standard_normal(500), z1)
    assert abs(z1.mean()) < 5 / np.sqrt(500)
    with pytest.raises(ValueError):
        bg.state = {"bit_generator": "lfsr113", "state": np.zeros(4, dtype=np.uint32)}


def test_bit_generator_detached_warning():
    streams = Streams.create(5, 1, 2)
    bg = streams.bit_generator(0, 1)
    with pytest.warns(RuntimeWarning, match="detached"):
        streams.ensure_substreams(4)
    del bg
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        streams.ensure_substreams(6)
