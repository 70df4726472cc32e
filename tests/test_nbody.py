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
from physics.nbody_kernels import acc_jerk_parallel, acc_jerk_serial, energy_kernel


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


def test_plummer_block_steps(plummer_run):
    s = plummer_run[0]
    levels = s.levels()
    assert np.unique(levels).size > 3  # measured 8 levels (0..7)
    assert np.all(s.dt_max / 2.0 ** levels == s.dt)
    assert np.all(np.floor(s.t / s.dt) == s.t / s.dt)  # every time a multiple of its step
    assert s.n_steps > 5 * s.n_blocks  # blocks hold many particles (measured 17 on average)


def test_bit_identical_threads_and_kernels(monkeypatch, restore_threads):
    """1 or 2 threads, serial or parallel force kernels: the same run, bit for bit."""
    mass, pos, vel = _plummer_3d(128, 2)
    runs = []
    for k, min_pairs in ((1, nb.PARALLEL_MIN_PAIRS), (2, 0), (1, 0), (2, 10 ** 12)):
        _threads(k)
        monkeypatch.setattr(nb, "PARALLEL_MIN_PAIRS", min_pairs)
        s = evolve(NBodyState.create(mass, pos, vel, eta=0.02), 0.5)
        runs.append(s)
    for s in runs[1:]:
        for name in ("pos", "vel", "acc", "jerk", "t", "dt"):
            assert np.array_equal(getattr(s, name), getattr(runs[0], name)), name
        assert s.n_blocks == runs[0].n_blocks
