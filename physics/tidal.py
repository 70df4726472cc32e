"""The tidal field: a tidal radius that follows the cluster's mass, and the energy of a set of
stars removed together.

For a cluster on a circular orbit in a point-mass galaxy the Jacobi radius scales as
``R_t = R_t0 (M / M0)^(1/3)`` (CMC's ``Rtidal = orbit_r * Mtotal^(1/3)``).  Each step the stars
whose apocentre lies beyond R_t are stripped; removing them lowers M and so R_t, and the cut is
repeated until no star is beyond it (the iteration itself needs the cluster's mass, so it lives
in the step loop; these are its pieces).

The energy the stripped stars carry away is exact: each leaves with ``m (phi_s + v^2/2)``
(``phi_s`` the potential of the other shells at its slot), less the mutual energy of the set,
which that sum counts twice (:func:`mutual_energy`).
"""

from __future__ import annotations

import numpy as np
from numba import njit


def tidal_radius(r_t0: float, mass: float, mass0: float) -> float:
    """``R_t0 (M / M0)^(1/3)`` [Hénon length]; 0 when the cluster has no mass left."""
    if mass <= 0.0:
        return 0.0
    return r_t0 * (mass / mass0) ** (1.0 / 3.0)


@njit(cache=True)
def mutual_energy(r, m):
    """Gravitational energy of a set of shells among themselves, ``-sum_{i<j} m_i m_j /
    max(r_i, r_j)`` (G = 1), for radii sorted increasingly.

    Parameters
    ----------
    r : ndarray, shape (k,)
        Sorted radii [Hénon length].
    m : ndarray, shape (k,)
        Masses [Hénon mass].
    """
    w = 0.0
    inner = 0.0
    for j in range(r.shape[0]):
        w -= m[j] * inner / r[j]
        inner += m[j]
    return w


def mutual_energy_reference(r: np.ndarray, m: np.ndarray) -> float:
    """Plain double loop over pairs of :func:`mutual_energy` (any order of the radii)."""
    w = 0.0
    for i in range(r.size):
        for j in range(i + 1, r.size):
            w -= m[i] * m[j] / max(r[i], r[j])
    return w


def shell_potential(r_s: np.ndarray, m_s: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Potential of a set of shells (sorted radii ``r_s``, masses ``m_s``) at radii ``x``:
    ``-(mass at r_s <= x) / x - sum_{r_s > x} m / r_s`` (G = 1).

    The step loop takes the stripped stars' field out of the potential the others moved in, so
    that the energy correction treats them as removed at the start of the step (exactly as
    unbound stars are); see :func:`cmc.processes.tidal.strip`.
    """
    x = np.asarray(x, dtype=float)
    if r_s.size == 0:
        return np.zeros_like(x)
    inner = np.concatenate([[0.0], np.cumsum(m_s)])
    outer = np.concatenate([np.cumsum((m_s / r_s)[::-1])[::-1], [0.0]])
    k = np.searchsorted(r_s, x, side="right")
    return -inner[k] / x - outer[k]


def shell_potential_reference(r_s: np.ndarray, m_s: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Direct sum over the shells of :func:`shell_potential` (any order)."""
    out = np.empty(len(x))
    for i, xi in enumerate(x):
        out[i] = -sum(mk / max(xi, rk) for rk, mk in zip(r_s, m_s, strict=True))
    return out


#: CMC's factor on the previous step after heavy tidal mass loss (calc_timestep).
DT_SHRINK = 0.8


def tidal_mass_loss_timestep(dt: float, dt_prev: float, dm_prev: float, mass0: float,
                             fraction: float) -> float:
    """The step after a step of heavy tidal mass loss, as CMC's calc_timestep.

    When the previous step stripped more than ``fraction`` of the initial mass (CMC: 0.01),
    the step is at most ``0.8 dt_prev``; otherwise ``dt``.  (CMC takes ``0.8 dt_prev`` even
    when the relaxation time step ``dt`` is shorter; here the shorter one wins, so the
    deflection cap ``theta_max`` holds.)  Masses in any one unit.
    """
    if fraction > 0.0 and dt_prev > 0.0 and dm_prev > fraction * mass0:
        return min(dt, DT_SHRINK * dt_prev)
    return dt
