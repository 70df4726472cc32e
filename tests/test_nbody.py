"""Direct N-body core (issue 50, first slice): physics.nbody and physics.nbody_kernels.

Measured when written (one core, this machine):

* kernel vs numpy twin, N = 200: max per-particle relative difference <= 3e-15 (acc, jerk,
  pot); 1 and 2 threads, serial and parallel kernels: the same bits.
* Kepler, 100 orbits from apocentre, eta = 0.001: |dE/E| = |da/a| = 1.1e-7 (e = 0.5) and
  5.1e-7 (e = 0.9); the period from the orbital phase at t = 100 P agrees with 2 pi sqrt(a^3/M)
  to 7.8e-8 and 3.8e-7.  eta = 0.02 / 0.01 / 0.002 give 2.7e-4 / 3.1e-5 / 6.8e-7 (e = 0.5) and
  1.3e-3 / ~1e-4 / 1.8e-6 (e = 0.9) over 100 orbits: the 4th-order scheme without iteration
  drifts secularly in energy, so the test uses eta = 0.001.
* Figure-eight (Chenciner & Montgomery 2000, Simó's initial conditions to 8 digits), one
  period, eta = 0.005: back to the start to 4.8e-7 in position, 8.0e-7 in velocity.
* Plummer N = 256, eps = 0, eta = 0.02, 2 N-body time units: |dE/E| = 3.6e-7; angular
  momentum changes by 3.0e-8 of sum_i m_i |r_i x v_i| (the individual steps break the
  action-reaction symmetry in time, so it is conserved to the truncation error, not to
  rounding); 8 step levels.

6th order (Nitadori & Makino 2008), measured when written:

* snap kernel vs numpy twin, N = 200: <= 3e-15 per particle; acceleration, jerk and potential
  the bits of the 4th-order kernel; snap against a central difference of the jerk (h = 1e-5):
  1.4e-7 (eps = 0) and 3.5e-8.
* Kepler e = 0.5, P = 1, 10 orbits, shared steps P/512 and P/1024: the position error falls by
  91 (order 6) and 20.7 (order 4), the energy error by 128 and 32 (after whole orbits the
  energy error's leading term, of order h^p, has cancelled: its drift is h^(p+1)).
* Kepler e = 0.9, 100 orbits, block steps: order 6 at eta = 0.1 gives |dE/E| = 6.1e-10 in
  49401 blocks, order 4 needs eta = 1.5e-4 for 4.8e-9: 288397 blocks (5.8x).
* Plummer N = 256, 2 units, default eta (0.4): |dE/E| = 1.2e-8 in 42048 particle steps
  (order 4 at eta 0.02: 3.6e-7 in 66952); angular momentum 1.6e-8 of sum m |r x v|.
* Figure-eight, eta = 0.2: back to the start to 4.6e-8 in position, 6.2e-8 in velocity, in
  284 blocks (order 4 at eta 0.005: 4.8e-7 in 673).
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest

import physics.nbody as nb
from physics.initial_conditions import plummer
from physics.nbody import (
    NBodyState,
    acc_jerk,
    acc_jerk_reference,
    angular_momentum,
    energy,
    energy_reference,
    evolve,
    momentum,
    predicted,
)
from physics.nbody_kernels import (
    acc_jerk_parallel,
    acc_jerk_serial,
    acc_jerk_snap_parallel,
    acc_jerk_snap_reference,
    acc_jerk_snap_serial,
    correct_block6,
    energy_kernel,
)


def _threads(k):
    """Run with ``k`` numba threads where the machine has them."""
    numba.set_num_threads(min(k, numba.config.NUMBA_NUM_THREADS))


@pytest.fixture
def restore_threads():
    n = numba.get_num_threads()
    yield
    numba.set_num_threads(n)


def _random_system(n, seed):
    rng = np.random.default_rng(seed)
    mass = rng.uniform(0.5, 1.5, n) / n
    pos = rng.normal(size=(n, 3))
    vel = rng.normal(size=(n, 3)) * 0.5
    return mass, pos, vel


def _plummer_3d(n, seed):
    """A Plummer sphere in N-body units (the project's sampler for r, vr, vt; isotropic
    directions drawn here), in its centre-of-mass frame."""
    rng = np.random.default_rng(seed)
    st = plummer(n, rng)
    r, vr, vt, m = st["r"], st["vr"], st["vt"], st["m"]
    mu = 2.0 * rng.random(n) - 1.0
    phi = 2.0 * np.pi * rng.random(n)
    psi = 2.0 * np.pi * rng.random(n)
    s = np.sqrt(1.0 - mu * mu)
    rhat = np.stack([s * np.cos(phi), s * np.sin(phi), mu], axis=1)
    e1 = np.stack([mu * np.cos(phi), mu * np.sin(phi), -s], axis=1)  # orthonormal to rhat
    e2 = np.stack([-np.sin(phi), np.cos(phi), np.zeros(n)], axis=1)
    pos = r[:, None] * rhat
    vel = vr[:, None] * rhat + vt[:, None] * (np.cos(psi)[:, None] * e1
                                              + np.sin(psi)[:, None] * e2)
    pos -= m @ pos / m.sum()
    vel -= m @ vel / m.sum()
    return m, pos, vel


def _rel_rows(x, ref):
    """Largest per-particle relative difference (vector norm for rows of 3)."""
    if x.ndim == 1:
        return float(np.max(np.abs(x - ref) / np.abs(ref)))
    return float(np.max(np.linalg.norm(x - ref, axis=1) / np.linalg.norm(ref, axis=1)))


# --------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eps2", [0.0, 1e-2])
def test_acc_jerk_matches_numpy_twin_and_threads(eps2, restore_threads):
    mass, pos, vel = _random_system(200, 4)
    rng = np.random.default_rng(5)
    for active in (np.arange(200), np.sort(rng.choice(200, 37, replace=False))):
        ref = acc_jerk_reference(pos, vel, mass, active, eps2)
        outs = []
        for k in (1, 2):
            _threads(k)
            outs.append(acc_jerk_parallel(pos, vel, mass, active, eps2))
        outs.append(acc_jerk_serial(pos, vel, mass, active, eps2))
        outs.append(acc_jerk(pos, vel, mass, active, eps2))
        for got in outs:  # every form and thread count: the same bits
            for x, y in zip(got, outs[0]):
                assert np.array_equal(x, y)
        for x, y in zip(outs[0], ref):
            assert _rel_rows(x, y) < 1e-12


@pytest.mark.parametrize("eps2", [0.0, 1e-2])
def test_acc_jerk_snap_matches_numpy_twin_and_threads(eps2, restore_threads):
    mass, pos, vel = _random_system(200, 4)
    rng = np.random.default_rng(5)
    acc = acc_jerk_serial(pos, vel, mass, np.arange(200), eps2)[0]
    for active in (np.arange(200), np.sort(rng.choice(200, 37, replace=False))):
        ref = acc_jerk_snap_reference(pos, vel, acc, mass, active, eps2)
        outs = []
        for k in (1, 2):
            _threads(k)
            outs.append(acc_jerk_snap_parallel(pos, vel, acc, mass, active, eps2))
        outs.append(acc_jerk_snap_serial(pos, vel, acc, mass, active, eps2))
        outs.append(nb.acc_jerk_snap(pos, vel, acc, mass, active, eps2))
        for got in outs:  # every form and thread count: the same bits
            for x, y in zip(got, outs[0]):
                assert np.array_equal(x, y)
        for x, y in zip(outs[0], ref):  # measured <= 3e-15
            assert _rel_rows(x, y) < 1e-12
        # acceleration, jerk and potential: the bits of the 4th-order kernel
        a4, j4, p4 = acc_jerk_serial(pos, vel, mass, active, eps2)
        a6, j6, _, p6 = outs[0]
        assert np.array_equal(a4, a6) and np.array_equal(j4, j6) and np.array_equal(p4, p6)


@pytest.mark.parametrize("eps2", [0.0, 1e-2])
def test_snap_is_the_derivative_of_the_jerk(eps2):
    """The snap against a central difference of the jerk along the Taylor trajectory."""
    mass, pos, vel = _random_system(200, 4)
    act = np.arange(200)
    acc, jerk, _ = acc_jerk_serial(pos, vel, mass, act, eps2)
    snap = acc_jerk_snap_serial(pos, vel, acc, mass, act, eps2)[2]
    h = 1e-5

    def jerk_at(t):
        p = pos + t * (vel + t * (acc / 2.0 + t * (jerk / 6.0 + t * snap / 24.0)))
        v = vel + t * (acc + t * (jerk / 2.0 + t * snap / 6.0))
        return acc_jerk_serial(p, v, mass, act, eps2)[1]

    fd = (jerk_at(h) - jerk_at(-h)) / (2.0 * h)
    assert _rel_rows(snap, fd) < 1e-6  # measured 1.4e-7 / 3.5e-8 (O(h^2))


@pytest.mark.parametrize("degree", [4, 5])
def test_hermite6_corrector_exact_for_polynomials(degree):
    """An acceleration that is a polynomial in time of degree 5: the 6th-order corrector's
    velocity and the interpolated crackle are exact (the position too at degree 4)."""
    rng = np.random.default_rng(11)
    coef = rng.normal(size=(6, 3))  # a(t) = sum_k coef[k] t^k / k!
    if degree == 4:
        coef[5] = 0.0
    x0, v0 = rng.normal(size=3), rng.normal(size=3)
    big_t = 0.25

    def deriv(n, t):  # n-th derivative of the position (n >= 2: of the acceleration)
        out = np.zeros(3)
        if n == 0:
            out += x0 + v0 * t
        if n == 1:
            out += v0
        for k in range(6):
            p = k + 2 - n
            if p >= 0:
                out += coef[k] * t ** p / math.factorial(p)
        return out

    def col(n, t):
        return np.array([deriv(n, t), np.zeros(3)])

    pos, vel, acc, jerk, snap = (col(n, 0.0) for n in range(5))
    crackle, t, dt = np.zeros((2, 3)), np.zeros(2), np.full(2, big_t)
    new = [deriv(n, big_t)[None, :] for n in (2, 3, 4)]
    bad = correct_block6(np.array([0]), big_t, *new, pos, vel, acc, jerk, snap, crackle, t,
                         dt, 0.4, 1.0, 2.0 ** -30)
    assert bad == 0 and t[0] == big_t
    np.testing.assert_allclose(vel[0], deriv(1, big_t), rtol=0, atol=1e-14)
    np.testing.assert_allclose(crackle[0], deriv(5, big_t), rtol=0, atol=1e-10)
    for n, x in ((2, acc), (3, jerk), (4, snap)):
        assert np.array_equal(x[0], deriv(n, big_t))
    if degree == 4:
        np.testing.assert_allclose(pos[0], deriv(0, big_t), rtol=0, atol=1e-14)
    else:  # the position's error is the 2-point Hermite quadrature's: T^7 v^(6) / 100800
        err = pos[0] - deriv(0, big_t)
        np.testing.assert_allclose(err, big_t ** 7 * coef[5] / 100800.0, rtol=1e-4)


def test_energy_kernel_matches_twin_and_potential(restore_threads):
    mass, pos, vel = _random_system(200, 6)
    for eps2 in (0.0, 1e-2):
        _threads(1)
        k1, w1 = energy_kernel(pos, vel, mass, eps2)
        _threads(2)
        k2, w2 = energy_kernel(pos, vel, mass, eps2)
        assert (k1, w1) == (k2, w2)
        kr, wr = energy_reference(pos, vel, mass, eps2)
        assert abs(k1 / kr - 1.0) < 1e-13 and abs(w1 / wr - 1.0) < 1e-13
        _, _, pot = acc_jerk_reference(pos, vel, mass, np.arange(200), eps2)
        assert abs(w1 / (0.5 * mass @ pot) - 1.0) < 1e-13


def test_create_checks_steps():
    mass, pos, vel = _random_system(8, 1)
    with pytest.raises(ValueError):
        NBodyState.create(mass, pos, vel, dt_max=0.1)
    s = NBodyState.create(mass, pos, vel, dt_max=0.25)
    assert np.all(s.dt <= 0.25) and np.all(np.frexp(s.dt)[0] == 0.5)
    assert s.order == 4 and s.eta == nb.ETA4
    with pytest.raises(ValueError, match="order"):
        NBodyState.create(mass, pos, vel, order=5)
    s6 = NBodyState.create(mass, pos, vel, order=6)
    assert s6.order == 6 and s6.eta == nb.ETA6
    assert np.array_equal(s6.acc, s.acc) and np.array_equal(s6.jerk, s.jerk)
    acc_all = acc_jerk(pos, vel, mass)[0]
    assert np.array_equal(s6.snap, nb.acc_jerk_snap(pos, vel, acc_all, mass)[2])


# --------------------------------------------------------------------------------------------
# two and three bodies
# --------------------------------------------------------------------------------------------


def _kepler(e, m1=0.4, m2=0.6, a=1.0):
    """A binary at apocentre in its centre-of-mass frame, total mass 1, so P = 2 pi a^1.5."""
    mt = m1 + m2
    rel = np.array([a * (1.0 + e), 0.0, 0.0])
    vrel = np.array([0.0, math.sqrt(mt / a * (1.0 - e) / (1.0 + e)), 0.0])
    pos = np.array([-m2 / mt * rel, m1 / mt * rel])
    vel = np.array([-m2 / mt * vrel, m1 / mt * vrel])
    return np.array([m1, m2]), pos, vel


def _elements(state):
    """Semi-major axis, eccentricity and mean anomaly of a two-body state (total mass 1)."""
    p, v = predicted(state)
    rel, vr = p[1] - p[0], v[1] - v[0]
    r = np.linalg.norm(rel)
    a = -1.0 / (2.0 * (0.5 * vr @ vr - 1.0 / r))
    e = np.linalg.norm(np.cross(vr, np.cross(rel, vr)) - rel / r)
    ecc_anom = math.atan2((rel @ vr) / (e * math.sqrt(a)), (1.0 - r / a) / e)
    return a, e, ecc_anom - e * math.sin(ecc_anom)


@pytest.mark.parametrize("e, tol_e, tol_p", [(0.5, 3e-7, 3e-7), (0.9, 1e-6, 1e-6)])
def test_kepler_100_orbits(e, tol_e, tol_p):
    mass, pos, vel = _kepler(e)
    s = NBodyState.create(mass, pos, vel, eta=0.001, dt_max=0.25)
    e0 = sum(energy(s))
    a0, ecc0, m0 = _elements(s)
    period = 2.0 * math.pi  # a = 1, M = 1
    evolve(s, 100.0 * period)
    a1, ecc1, m1 = _elements(s)
    assert abs(sum(energy(s)) / e0 - 1.0) < tol_e  # measured 1.1e-7 / 5.1e-7
    assert abs(a1 / a0 - 1.0) < tol_e
    assert abs(ecc1 - ecc0) < tol_e
    # back at apocentre after 100 analytic periods: the phase gives the period's error
    dm = (m1 - m0 + math.pi) % (2.0 * math.pi) - math.pi
    assert abs(dm / (2.0 * math.pi * 100.0)) < tol_p  # measured 7.8e-8 / 3.8e-7
    assert np.all(s.dt > s.dt.max() / 2.0 ** 10)  # apocentre steps are long again
    assert np.all(np.frexp(s.dt)[0] == 0.5)


def _kepler_p1(e):
    """:func:`_kepler` with total mass 4 pi^2: a = 1, period 1 (whole orbits end on block
    times, so every particle is synchronised there)."""
    mt = 4.0 * math.pi ** 2
    return _kepler(e, m1=0.4 * mt, m2=0.6 * mt)


@pytest.mark.parametrize("order, pos_ratio, energy_ratio", [
    (4, (12.0, 40.0), (20.0, 50.0)),  # measured 20.7, 32.0
    (6, (40.0, 160.0), (80.0, 200.0)),  # measured 91, 128
])
def test_kepler_convergence_order(order, pos_ratio, energy_ratio):
    """e = 0.5, 10 orbits with a shared fixed step h = P/512 and h/2: the position error
    after whole orbits falls by ~2^p, the energy error by ~2^(p+1) (its h^p term is periodic
    and cancels over whole orbits; the secular drift is one order higher)."""
    mass, pos, vel = _kepler_p1(0.5)
    errs = []
    for nsteps in (512, 1024):
        h = 1.0 / nsteps  # eta huge: every step is dt_max = dt_min = h
        s = NBodyState.create(mass, pos, vel, eta=1e30, eta_s=1e30, dt_max=h, dt_min=h,
                              order=order)
        e0 = sum(energy(s))
        evolve(s, 10.0)
        assert np.all(s.t == 10.0) and s.n_blocks == 10 * nsteps
        errs.append((np.max(np.abs(s.pos - pos)), abs(sum(energy(s)) / e0 - 1.0)))
    rx = errs[0][0] / errs[1][0]
    re = errs[0][1] / errs[1][1]
    assert pos_ratio[0] < rx < pos_ratio[1], rx
    assert energy_ratio[0] < re < energy_ratio[1], re


def test_sixth_order_needs_fewer_steps_at_equal_accuracy():
    """Kepler e = 0.9, 100 orbits, block steps, |dE/E| < 1e-8: the 4th order needs eta =
    1.5e-4, the 6th order 0.1, and far fewer steps."""
    mass, pos, vel = _kepler_p1(0.9)
    blocks = {}
    for order, eta in ((4, 1.5e-4), (6, 0.1)):
        s = NBodyState.create(mass, pos, vel, eta=eta, dt_max=2.0 ** -4, order=order)
        e0 = sum(energy(s))
        evolve(s, 100.0)
        assert np.all(s.t == 100.0)
        assert abs(sum(energy(s)) / e0 - 1.0) < 1e-8  # measured 4.8e-9 / 6.1e-10
        assert np.max(np.abs(s.pos - pos)) < 1e-4  # back at apocentre (orbit ~2)
        blocks[order] = s.n_blocks
    assert blocks[4] > 4 * blocks[6]  # measured 288397 and 49401 (5.8x)


def test_figure_eight_returns_after_one_period():
    x1 = np.array([0.97000436, -0.24308753, 0.0])
    v3 = np.array([-0.93240737, -0.86473146, 0.0])
    pos = np.array([x1, -x1, np.zeros(3)])
    vel = np.array([-v3 / 2.0, -v3 / 2.0, v3])
    period = 6.32591398
    s = NBodyState.create(np.ones(3), pos, vel, eta=0.005, dt_max=2.0 ** -4)
    e0 = sum(energy(s))
    evolve(s, period)
    p, v = predicted(s)
    assert np.max(np.abs(p - pos)) < 1e-6  # measured 4.8e-7
    assert np.max(np.abs(v - vel)) < 2e-6  # measured 8.0e-7
    assert abs(sum(energy(s)) / e0 - 1.0) < 1e-6
    # half a period: the mirror image of the start in the y axis (x -> -x)
    s2 = NBodyState.create(np.ones(3), pos, vel, eta=0.005, dt_max=2.0 ** -4)
    evolve(s2, period / 2.0)
    p2, _ = predicted(s2)
    assert np.max(np.abs(p2 * [-1.0, 1.0, 1.0] - pos)) < 1e-6


def test_figure_eight_sixth_order():
    x1 = np.array([0.97000436, -0.24308753, 0.0])
    v3 = np.array([-0.93240737, -0.86473146, 0.0])
    pos = np.array([x1, -x1, np.zeros(3)])
    vel = np.array([-v3 / 2.0, -v3 / 2.0, v3])
    period = 6.32591398
    s = NBodyState.create(np.ones(3), pos, vel, eta=0.2, dt_max=2.0 ** -4, order=6)
    e0 = sum(energy(s))
    evolve(s, period)
    p, v = predicted(s)
    assert np.max(np.abs(p - pos)) < 2e-7  # measured 4.6e-8 (the 4th order: 4.8e-7)
    assert np.max(np.abs(v - vel)) < 2e-7  # measured 6.2e-8
    assert abs(sum(energy(s)) / e0 - 1.0) < 2e-8  # measured 3.7e-9
    assert s.n_blocks < 400  # measured 284 (the 4th order at eta 0.005: 673)


# --------------------------------------------------------------------------------------------
# a Plummer cluster
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plummer_run():
    mass, pos, vel = _plummer_3d(256, 1)
    s = NBodyState.create(mass, pos, vel, eta=0.02, dt_max=0.125)
    k0, w0 = energy(s)
    l0 = angular_momentum(s)
    p0 = momentum(s)
    lscale = float(np.sum(mass * np.linalg.norm(np.cross(pos, vel), axis=1)))
    evolve(s, 2.0)
    return s, k0 + w0, l0, p0, lscale, k0 / -w0


def test_plummer_conserves(plummer_run):
    s, e0, l0, p0, lscale, q0 = plummer_run
    assert abs(e0 + 0.25) < 0.01 and abs(q0 - 0.5) < 0.05  # N-body units, near virial
    assert s.time == 2.0 and np.all(s.t == 2.0)  # 2 is a multiple of dt_max: synchronised
    k, w = energy(s)
    assert abs((k + w) / e0 - 1.0) < 1e-5  # measured 3.6e-7
    assert np.linalg.norm(angular_momentum(s) - l0) / lscale < 1e-6  # measured 3.0e-8
    assert np.linalg.norm(momentum(s) - p0) < 1e-6  # measured 2e-8 (|v| ~ 0.5)


@pytest.fixture(scope="module")
def plummer_run6():
    mass, pos, vel = _plummer_3d(256, 1)
    s = NBodyState.create(mass, pos, vel, dt_max=0.125, order=6)  # eta = ETA6 = 0.4
    e0 = sum(energy(s))
    l0 = angular_momentum(s)
    p0 = momentum(s)
    evolve(s, 2.0)
    return s, e0, l0, p0


def test_plummer_sixth_order(plummer_run, plummer_run6):
    s4, e4, _, _, lscale, _ = plummer_run
    s, e0, l0, p0 = plummer_run6
    assert s.eta == nb.ETA6 == 0.4 and e0 == e4
    assert s.time == 2.0 and np.all(s.t == 2.0)
    de = abs(sum(energy(s)) / e0 - 1.0)
    assert de < 1e-7  # measured 1.2e-8
    assert np.linalg.norm(angular_momentum(s) - l0) / lscale < 2e-7  # measured 1.6e-8
    assert np.linalg.norm(momentum(s) - p0) < 1e-7  # measured 1.2e-8
    # at the defaults: fewer particle steps than the 4th order and a smaller energy error
    assert s.n_steps < 0.8 * s4.n_steps  # measured 42048 against 66952
    assert de < 0.1 * abs(sum(energy(s4)) / e4 - 1.0)  # measured 1.2e-8 against 3.6e-7
    levels = s.levels()
    assert np.unique(levels).size > 3  # measured 7
    assert np.all(np.floor(s.t / s.dt) == s.t / s.dt)


def test_plummer_block_steps(plummer_run):
    s = plummer_run[0]
    levels = s.levels()
    assert np.unique(levels).size > 3  # measured 8 levels (0..7)
    assert np.all(s.dt_max / 2.0 ** levels == s.dt)
    assert np.all(np.floor(s.t / s.dt) == s.t / s.dt)  # every time a multiple of its step
    assert s.n_steps > 5 * s.n_blocks  # blocks hold many particles (measured 17 on average)


@pytest.mark.parametrize("order", [4, 6])
def test_bit_identical_threads_and_kernels(order, monkeypatch, restore_threads):
    """1 or 2 threads, serial or parallel force kernels: the same run, bit for bit."""
    mass, pos, vel = _plummer_3d(128, 2)
    runs = []
    for k, min_pairs in ((1, nb.PARALLEL_MIN_PAIRS), (2, 0), (1, 0), (2, 10 ** 12)):
        _threads(k)
        monkeypatch.setattr(nb, "PARALLEL_MIN_PAIRS", min_pairs)
        s = evolve(NBodyState.create(mass, pos, vel, order=order), 0.5)
        runs.append(s)
    for s in runs[1:]:
        for name in ("pos", "vel", "acc", "jerk", "snap", "crackle", "t", "dt"):
            assert np.array_equal(getattr(s, name), getattr(runs[0], name)), name
        assert s.n_blocks == runs[0].n_blocks
