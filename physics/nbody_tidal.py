"""The galactic tide of the direct N-body mode (issue 50: "tides as an external field where the
Monte Carlo run has one").

The Monte Carlo run's ``tidal.mode = shrinking`` is a cluster on a circular orbit in a
point-mass galaxy, whose tidal radius shrinks as R_t = R_t0 (M/M0)^(1/3).  Here the same
cluster is integrated in the frame that rotates with its orbit, in Hill's approximation (the
galaxy's field to first order in the distance from the cluster's centre; Heggie & Hut 2003,
NBODY's ``KZ(14) = 1``): with ``x`` away from the galaxy, ``y`` along the orbit, ``z`` out of
its plane and ``Omega`` the orbital frequency, each star feels, besides the cluster,

    a_x = 3 Omega^2 x + 2 Omega v_y,   a_y = -2 Omega v_x,   a_z = -Omega^2 z

(the tide and centrifugal force, and the Coriolis force).  The conserved energy is Jacobi's,
``E_J = K + W + sum_i m_i phi_t(x_i)`` with ``phi_t = -3/2 Omega^2 x^2 + 1/2 Omega^2 z^2``;
the Jacobi radius ``r_J = (G M / (3 Omega^2))^(1/3)`` shrinks as ``M^(1/3)``, the Monte Carlo
run's law, so ``Omega^2 = G M0 / (3 R_t0^3)`` from its initial tidal radius makes the two the
same cluster.

The Hermite integrator needs the field's time derivatives along each star's path: with ``a``
and ``j`` the star's *total* acceleration and jerk (cluster and field),

    j_ext = (3 Omega^2 v_x + 2 Omega a_y, -2 Omega a_x, -Omega^2 v_z)
    s_ext = (3 Omega^2 a_x + 2 Omega j_y, -2 Omega j_x, -Omega^2 a_z)

evaluated at the predicted position and velocity (as NBODY does; the velocity-dependent
Coriolis term makes the corrector's end velocity differ from the predicted one by the
predictor's error).  Units: N-body, G = 1.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["add_hill_field", "add_hill_field_reference", "hill_omega", "jacobi_radius",
           "tidal_energy"]


@njit(cache=True)
def add_hill_field(pos, vel, acc, jerk, snap, omega):
    """Add the field to the cluster's ``acc``, ``jerk`` (and ``snap``, when it has rows) of
    the particles at ``pos``, ``vel`` (all ``(k, 3)``), in place: they become the totals."""
    o2 = omega * omega
    with_snap = snap.shape[0] > 0
    for i in range(pos.shape[0]):
        ax = acc[i, 0] + 3.0 * o2 * pos[i, 0] + 2.0 * omega * vel[i, 1]
        ay = acc[i, 1] - 2.0 * omega * vel[i, 0]
        az = acc[i, 2] - o2 * pos[i, 2]
        jx = jerk[i, 0] + 3.0 * o2 * vel[i, 0] + 2.0 * omega * ay
        jy = jerk[i, 1] - 2.0 * omega * ax
        jz = jerk[i, 2] - o2 * vel[i, 2]
        if with_snap:
            snap[i, 0] += 3.0 * o2 * ax + 2.0 * omega * jy
            snap[i, 1] -= 2.0 * omega * jx
            snap[i, 2] -= o2 * az
        acc[i, 0] = ax
        acc[i, 1] = ay
        acc[i, 2] = az
        jerk[i, 0] = jx
        jerk[i, 1] = jy
        jerk[i, 2] = jz


def add_hill_field_reference(pos, vel, acc, jerk, snap, omega):
    """Numpy twin of :func:`add_hill_field`."""
    o2 = omega * omega
    a = acc + np.stack([3.0 * o2 * pos[:, 0] + 2.0 * omega * vel[:, 1],
                        -2.0 * omega * vel[:, 0], -o2 * pos[:, 2]], axis=1)
    j = jerk + np.stack([3.0 * o2 * vel[:, 0] + 2.0 * omega * a[:, 1],
                         -2.0 * omega * a[:, 0], -o2 * vel[:, 2]], axis=1)
    if snap.shape[0]:
        snap += np.stack([3.0 * o2 * a[:, 0] + 2.0 * omega * j[:, 1],
                          -2.0 * omega * j[:, 0], -o2 * a[:, 2]], axis=1)
    acc[:] = a
    jerk[:] = j


def tidal_energy(pos: np.ndarray, mass: np.ndarray, omega: float) -> float:
    """``sum_i m_i (-3/2 Omega^2 x_i^2 + 1/2 Omega^2 z_i^2)``: the field's part of Jacobi's
    energy."""
    o2 = omega * omega
    return float(mass @ (-1.5 * o2 * pos[:, 0] ** 2 + 0.5 * o2 * pos[:, 2] ** 2))


def hill_omega(r_t0: float, m0: float = 1.0) -> float:
    """The orbital frequency that makes ``r_t0`` the Jacobi radius of mass ``m0``."""
    return float(np.sqrt(m0 / (3.0 * r_t0 ** 3)))


def jacobi_radius(mass: float, omega: float) -> float:
    """``(M / (3 Omega^2))^(1/3)``."""
    return float((mass / (3.0 * omega * omega)) ** (1.0 / 3.0))
