"""The threaded diagnostics sums against numpy and their serial twins, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

SIZES = [*range(0, 140), 255, 256, 257, 1000, 4095, 4096, 4097, 8191, 8192, 8193, 16385,
         50000, 99999, 123457, 1000003]


@pytest.fixture
def threads(request):
    import numba

    numba.set_num_threads(min(request.param, numba.config.NUMBA_NUM_THREADS))
    yield numba.get_num_threads()
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def _spread(rng, n):
    """Values of both signs over ten decades (so that any change of order shows in the
    bits)."""
    return rng.standard_normal(n) * np.exp(rng.standard_normal(n) * 5)


@pytest.mark.parametrize("threads", [1, 2, 3], indirect=True)
def test_pairwise_sum_is_numpys_sum(threads):
    """:func:`pairwise_sum` is ``np.sum`` to the bit for every size and offset (its tree is
    numpy's, cut into subtrees for the threads), and the recursive twin agrees."""
    from physics.sums import pairwise_sum, pairwise_sum_reference

    rng = np.random.default_rng(5)
    for n in SIZES:
        x = _spread(rng, n)
        for lo in {0, min(3, n), n // 3}:
            want = np.sum(x[lo:])
            assert pairwise_sum(x, lo, n) == want, (n, lo)
            if n - lo < 20000:
                assert pairwise_sum_reference(x, lo, n) == want, (n, lo)
    assert pairwise_sum(np.ones(5), 3, 2) == 0.0


@pytest.mark.parametrize("threads", [1, 2, 3], indirect=True)
def test_energy_sums_are_the_numpy_expressions(threads, plummer_5k):
    """The kinetic and potential energies of a segment are the numpy expressions they
    replace, bit for bit, on any thread count."""
    from physics.potential import compute_potential, potential_energy
    from physics.sums import kinetic_energy, potential_energy_sum

    rng = np.random.default_rng(6)
    for n in (0, 1, 7, 5000, 123457):
        m = rng.random(n)
        vr, vt = _spread(rng, n), _spread(rng, n)
        r = np.sort(rng.random(n)) + 1e-3
        phi = -rng.random(n)
        for lo, hi in ((0, n), (n // 4, n - n // 5)):
            s = slice(lo, hi)
            assert kinetic_energy(m, vr, vt, lo, hi) == \
                0.5 * float(np.sum(m[s] * (vr[s] ** 2 + vt[s] ** 2)))
            assert potential_energy_sum(r, m, phi, lo, hi) == \
                potential_energy(r[s], m[s], phi[s])
    st = plummer_5k
    phi, _ = compute_potential(st["r"], st["m"])
    w = potential_energy_sum(st["r"], st["m"], phi)
    assert w == potential_energy(st["r"], st["m"], phi)
    assert -0.55 < w < -0.45  # a Plummer sphere in Hénon units: W = -1/2


@pytest.mark.parametrize("threads", [1, 2, 3], indirect=True)
def test_core_sums_equal_serial_twin(threads, plummer_5k):
    """The two-phase core sums (densities on the threads, then added in order) are the one-
    loop twin's bits: whole arrays and segments, shells of zero volume (equal radii), tiny
    arrays (no interior star), ranges reaching past both ends, radii beyond every star."""
    from physics.structure import core_sums, core_sums_serial

    rng = np.random.default_rng(2)
    cases = [(plummer_5k["r"], plummer_5k["m"])]
    for n in (0, 5, 6, 7, 8, 9, 13, 1000):
        r = np.sort(rng.random(n) ** 2)
        if n > 10:
            r[3] = r[4]
            r[5:9] = r[5]
            r[-4:] = r[-1]
        cases.append((r, rng.random(n)))
    for r, m in cases:
        n = r.size
        v2_all = rng.random(n + 10)
        # r_half below the third star: the range ends before the first interior star
        for rh in (0.0, float(r[1]) if n > 1 else 0.1, float(np.median(r)) if n else 0.3,
                   1e9):
            for i0, i1 in ((0, n), (3, n // 2), (n // 3, n), (n, n), (-5, n + 5), (n - 2, n)):
                for v2 in (np.zeros(0), v2_all[:max(i1 - i0, 0)]):
                    want = core_sums_serial(r, m, rh, i0, i1, v2)
                    np.testing.assert_array_equal(core_sums(r, m, rh, i0, i1, v2), want,
                                                  err_msg=f"{n} {rh} {i0} {i1}")
                    if n <= 1000:  # in Python, where an index past the scratch arrays raises
                        np.testing.assert_array_equal(
                            core_sums.py_func(r, m, rh, i0, i1, v2), want)
    # the zero-volume shells were skipped, not summed as infinities
    r, m = cases[-1]
    assert np.isfinite(core_sums(r, m, 1e9, 0, r.size, np.ones(r.size))).all()
    # the fifth sum is the density-weighted v^2: v^2 = 1 everywhere gives sum rho
    s = core_sums(r, m, 1e9, 0, r.size, np.ones(r.size))
    assert s[4] == s[0] > 0.0


@pytest.mark.parametrize("threads", [1, 2, 3], indirect=True)
def test_threaded_lookup_table_is_the_table(threads):
    """The radius lookup table built by segments on the threads is the one-pass table, for
    any number of segments (more than stars included) and sizes down to one star."""
    from physics.potential import radius_lookup_table, radius_lookup_table_threaded

    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 7, 100, 5000, 100_003):
        r = np.sort(1.0 / np.sqrt(rng.random(n) ** (-2.0 / 3.0) - 1.0))
        lut, lo, inv = radius_lookup_table(r, 4)
        for segments in (1, 2, 3, 5, 16, 200):
            got = radius_lookup_table_threaded(r, 4, segments)
            assert np.array_equal(got[0], lut) and got[1:] == (lo, inv), (n, segments)


@pytest.mark.parametrize("threads", [1, 2, 3], indirect=True)
def test_elementwise_passes_equal_numpy(threads):
    """The step's threaded copy and difference are numpy's copy and subtraction, bit for bit
    (NaN and -0.0 included)."""
    from physics.sums import copy_rows, difference

    rng = np.random.default_rng(8)
    for n in (0, 1, 17, 100_003):
        a, b = _spread(rng, n), _spread(rng, n)
        if n > 10:
            a[3], b[4], a[5] = np.nan, -0.0, -0.0
        out = np.empty(n)
        copy_rows(a, out)
        assert np.array_equal(out.view(np.uint64), a.view(np.uint64))
        difference(a, b, out)
        assert np.array_equal(out.view(np.uint64), (a - b).view(np.uint64))
