"""The tide on the direct N-body integrator's close pairs (physics.nbody_perturbed, issue 50).

Measured when written (one core of a loaded 2-core machine):

* The kernel against its plain twin: the relative orbit and the reaction equal to 1e-13
  (a few perturbers on moving polynomials, 500 kicks).
* No perturbers: one Kepler drift, the same bits as :func:`kepler_propagate`.
* A circular binary (masses 0.6, 0.4, a = 1) in the field of a fixed perturber of mass 1 at
  (10, 0, 3) (gamma = 1.8e-3), the centre of mass held fixed: the leapfrog conserves the
  relative motion's Jacobi-like energy ``w^2/2 - M/r - m_k M (1/(m_j d_i) + 1/(m_i d_j))`` to
  1.7e-6 of ``M/2a`` over 100 orbits at 64 kicks per orbit (about 1e-3 gamma), and its error
  falls 4x per doubling of the kicks (second order: 4.02 and 4.00 measured); the
  eccentricity the tide pumps (0.0201 by then) agrees between 64 and 256 kicks per orbit to
  1.0e-5.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from physics.fewbody_kepler import kepler_propagate
from physics.nbody_perturbed import (
    perturbed_kepler,
    perturbed_kepler_reference,
    select_perturbers,
    substeps,
)

MI, MJ = 0.6, 0.4


def _circular(a=1.0):
    mu = MI + MJ
    return np.array([a, 0.0, 0.0]), np.array([0.0, math.sqrt(mu / a), 0.0])


def _fixed(points, masses):
    """Polynomials of bodies at rest at ``points`` (time 0)."""
    pk = np.zeros((len(points), 6, 3))
    pk[:, 0] = points
    return np.zeros(len(points)), pk, np.array(masses, dtype=float)


def _jacobi(r, w, mk, xk):
    mu = MI + MJ
    fi, fj = MJ / mu, MI / mu
    di = np.linalg.norm(xk + fi * r)
    dj = np.linalg.norm(xk - fj * r)
    return 0.5 * w @ w - mu / np.linalg.norm(r) - mk * mu * (1.0 / (MJ * di) + 1.0 / (MI * dj))


def test_kernel_equals_reference():
    rng = np.random.default_rng(5)
    r, w = _circular(0.01)
    w[2] = 0.3  # inclined, eccentric
    cm = rng.normal(size=(1, 6, 3)) * [[[1.0], [0.5], [0.2], [0.1], [0.05], [0.01]]]
    tk = rng.uniform(-0.01, 0.0, 4)
    pk = cm + rng.normal(size=(4, 6, 3)) * 0.05
    pk[:, 0] += rng.normal(size=(4, 3)) * 0.2
    mk = rng.uniform(0.1, 1.0, 4)
    out = []
    for f in (perturbed_kepler, perturbed_kepler_reference):
        rr, ww, dv = r.copy(), w.copy(), np.zeros((4, 3))
        f(rr, ww, MI, MJ, 0.0, 0.02, 500, -0.003, cm, tk, pk, mk, dv)
        out.append((rr, ww, dv))
    assert np.all(np.isfinite(out[0][2])) and np.any(out[0][2] != 0.0)
    for x, y in zip(out[0], out[1]):
        np.testing.assert_allclose(x, y, rtol=1e-13, atol=1e-13 * np.abs(y).max())


def test_no_perturbers_is_one_kepler_drift():
    r, w = _circular()
    w[0] = 0.2
    want_r, want_w = np.empty(3), np.empty(3)
    kepler_propagate(r, w, MI + MJ, 7.3, want_r, want_w)
    tk, pk, mk = _fixed(np.zeros((0, 3)), [])
    for nsub in (0, 10):
        rr, ww = r.copy(), w.copy()
        perturbed_kepler(rr, ww, MI, MJ, 0.0, 7.3, nsub, 0.0, np.zeros((1, 6, 3)), tk, pk,
                         mk, np.zeros((0, 3)))
        assert np.array_equal(rr, want_r) and np.array_equal(ww, want_w)


def _tidal_run(kicks_per_orbit, orbits=100):
    r, w = _circular()
    period = 2.0 * math.pi  # a = 1, M = 1
    xk = np.array([10.0, 0.0, 3.0])
    tk, pk, mk = _fixed(xk[None, :], [1.0])
    j0 = _jacobi(r, w, 1.0, xk)
    worst = 0.0
    dv = np.zeros((1, 3))
    for _ in range(orbits):
        perturbed_kepler(r, w, MI, MJ, 0.0, period, kicks_per_orbit, 0.0,
                         np.zeros((1, 6, 3)), tk, pk, mk, dv)
        worst = max(worst, abs(_jacobi(r, w, 1.0, xk) - j0))
    h = np.cross(r, w)
    en = 0.5 * w @ w - 1.0 / np.linalg.norm(r)
    ecc = math.sqrt(max(0.0, 1.0 + 2.0 * en * (h @ h)))
    return worst / 0.5, ecc


def test_tidal_field_second_order_and_conservative():
    err64, e64 = _tidal_run(64)
    err128, _ = _tidal_run(128)
    err256, e256 = _tidal_run(256)
    assert err64 < 3e-6, err64
    assert 3.5 < err64 / err128 < 4.5 and 3.5 < err128 / err256 < 4.5
    assert e64 > 1e-2  # the tide pumps the eccentricity, far above the error below
    assert abs(e64 - e256) < 3e-5


def test_select_perturbers_straight_line():
    pos = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 50.0, 0.0]])
    vel = np.array([[0.0, 0.0, 0.0], [-10.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mass = np.array([1.0, 1.0, 1.0])
    apo = 1e-3  # gamma = 2e-9 / d^3: 1e-7 at d = 0.27
    rows, passage = select_perturbers(pos, vel, mass, 0, apo, 0.05)
    assert rows.size == 0 and passage == math.inf  # d >= 0.5 within the step
    rows, passage = select_perturbers(pos, vel, mass, 0, apo, 0.1)
    assert list(rows) == [1] and passage == pytest.approx(0.1)  # passes the centre
    rows, _ = select_perturbers(pos, vel, mass, 0, apo, -0.1)
    assert rows.size == 0  # receding in the past
    rows, _ = select_perturbers(pos, vel, mass, 0, math.inf, 0.05)
    assert list(rows) == [1, 2]  # an unbound pair: everything perturbs it


def test_substeps():
    r, w = _circular()
    period = 2.0 * math.pi
    assert substeps(r, w, 1.0, period, math.inf) == 64
    assert substeps(r, w, 1.0, 10 * period, math.inf) == 640
    assert substeps(r, w, 1.0, period, 0.5 * period) == 64
    assert substeps(r, w, 1.0, period, 0.1 * period) == 320


def test_compiled_selections_equal_their_twins():
    from physics.nbody_pairs import perturbation
    from physics.nbody_perturbed import (
        approach_step,
        max_perturbation,
        select_perturbers_reference,
    )

    rng = np.random.default_rng(11)
    pos = rng.normal(size=(300, 3))
    vel = rng.normal(size=(300, 3))
    mass = rng.uniform(0.5, 1.5, 300) / 300
    vel[7] = vel[3]  # a body at rest relative to the pair
    sizes = []
    for apo, span in ((1e-3, 0.05), (1e-2, -0.2), (3e-1, 0.5), (math.inf, 0.1)):
        rows, passage = select_perturbers(pos, vel, mass, 3, apo, span)
        want_rows, want_passage = select_perturbers_reference(pos, vel, mass, 3, apo, span)
        assert np.array_equal(rows, want_rows)
        assert passage == pytest.approx(want_passage, rel=1e-14)
        sizes.append(rows.size)
        for skip in ((3,), (3, 9)):
            got = max_perturbation(pos, mass, skip[0], skip[-1], pos[3], 2 * mass[3], apo)
            want = perturbation(pos, mass, skip, pos[3], 2 * mass[3], apo)
            assert got == pytest.approx(want, rel=1e-14)
    assert sizes == [0, 103, 299, 299]  # none, some, all (the last: unbound)
    # the approach limit: halved while a body would come within reach of the limit
    h = approach_step(pos, vel, mass, 3, 1e-2, 0.125, 2.0 ** -15, 1.2e-5)
    assert h == 2.0 ** -7  # the nearest body (gamma 1.16e-5 now) within reach of 1.2e-5
    assert approach_step(pos, vel, mass, 3, 1e-2, h, 2.0 ** -15, 1.2e-5) == h
    assert approach_step(pos, vel, mass, 3, 1e-2, 2 * h, 2.0 ** -15, 1.2e-5) == h
    assert approach_step(pos, vel, mass, 3, 1e-2, 0.125, 0.125, 1.2e-5) == 0.125  # floor
