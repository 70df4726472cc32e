"""Perturbed close pairs of the direct N-body integrator: the tide of the nearby bodies on a
pair's relative orbit (issue 50, "Close pairs").

:mod:`physics.nbody_pairs` carries a bound close pair as one body (its centre of mass) in the
Hermite integration and its relative orbit apart.  Here that relative orbit feels the
**tidal acceleration** of the bodies near the pair, so a pair need not be unperturbed to be
taken out of the Hermite integration: a hard binary in a dense core (perturbation ~1e-3) is
carried at a small fraction of what its members' Hermite steps cost (each of those is a sum
over all N bodies; here a kick sums over the pair's few perturbers).

Method
------
The relative motion ``r = x_j - x_i``, ``w = v_j - v_i`` obeys ``r'' = -mu r / |r|^3 + [a(x_j)
- a(x_i)]`` with ``mu = m_i + m_j`` and ``a`` the acceleration of the other bodies.  Over the
centre of mass's block step ``[t0, t1]`` it is advanced by a **Kepler-drift / tidal-kick
leapfrog** (the splitting of Wisdom & Holman 1991 with the two-body problem as the drift):
``n`` substeps of ``h = (t1 - t0) / n``, each a Kepler drift of ``h/2``
(:func:`physics.fewbody_kepler.kepler_propagate`, exact), a kick ``w += h [a(x_j) - a(x_i)]``
at the substep's middle, a drift of ``h/2``.  Second order and symplectic for a fixed
perturber field; its error is of order gamma (h/P)^2 of the binding energy per orbit, with
no secular drift.  ``h`` is at most P / :data:`KICKS_PER_ORBIT` and a
1/:data:`KICKS_PER_PASSAGE` of the shortest ``d_k / |v_k - v_cm|`` of the perturbers.  With
no perturber the step is one exact Kepler drift (the unperturbed pair of before).

The perturbers' and the centre of mass's positions at a kick come from their Hermite
polynomials (position, velocity, acceleration, jerk, snap, crackle at their own time, the
prediction the integrator uses for output); the centre of mass's step is kept at most the
shortest step of its perturbers (:func:`physics.nbody_pairs._limit_steps`), so each
polynomial is used within about one of its own steps.

Perturbers are the bodies whose tidal perturbation ``2 m_k R^3 / (mu d_k^3)`` (``R`` the
apocentre, ``d_k`` the closest approach to the centre of mass on a straight line over the
step) is at least :data:`PERTURBER_GAMMA`; the tide of the others is neglected (at most
that, per body, of the binding energy).

The back-reaction: the centre of mass and the other bodies are integrated with the pair as a
point mass; the rest of the pair's pull on each perturber (its members' less their centre
of mass's, the quadrupole and higher) is summed at the kicks into a velocity change ``dv_k``
and given to the perturber at the end of the step, ``-sum m_k dv_k / mu`` to the centre of
mass, so momentum is exchanged exactly and the energy and angular momentum the tide moves
into the binary are taken from the perturbers' orbits (to first order in the step).
Measured in tests/test_nbody_pairs.py and tests/test_nbody_fewbody.py.

Units: N-body units, G = 1.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from physics.fewbody_kepler import kepler_propagate, kepler_propagate_hyperbolic

__all__ = ["KICKS_PER_ORBIT", "KICKS_PER_PASSAGE", "PERTURBER_GAMMA", "approach_step",
           "max_perturbation", "perturbed_kepler",
           "perturbed_kepler_reference", "select_perturbers", "select_perturbers_reference",
           "substeps"]

#: Bodies perturbing a pair by less than this are left out of its tide (NBODY's GMIN for
#: the perturbers of a KS pair is 1e-6; 1e-7 keeps the neglected tide below the resolving
#: threshold's 1e-4 even with ~100 such bodies).
PERTURBER_GAMMA = 1e-7
#: Kicks per orbital period: the leapfrog's energy error per orbit is ~gamma (2 pi / 64)^2
#: ~ 1e-2 gamma of the binding energy (bounded, not growing).
KICKS_PER_ORBIT = 64
#: Kicks per passage time ``d_k / |v_k - v_cm|`` of the nearest perturber.
KICKS_PER_PASSAGE = 32


@njit(cache=True, inline="always")
def _taylor(coef, k, dt, c):
    """Component ``c`` of the position of polynomial ``coef[k]`` (rows: position, velocity,
    acceleration, jerk, snap, crackle) ``dt`` after its time."""
    return coef[k, 0, c] + dt * (coef[k, 1, c] + dt * (coef[k, 2, c] / 2.0 + dt * (
        coef[k, 3, c] / 6.0 + dt * (coef[k, 4, c] / 24.0 + dt * coef[k, 5, c] / 120.0))))


@njit(cache=True)
def _drift(r, w, mu, h, r1, w1):
    """Exact two-body drift of ``(r, w)`` by ``h`` in place (elliptic or hyperbolic)."""
    rn = np.sqrt(r[0] ** 2 + r[1] ** 2 + r[2] ** 2)
    en = 0.5 * (w[0] ** 2 + w[1] ** 2 + w[2] ** 2) - mu / rn
    if en < 0.0:
        kepler_propagate(r, w, mu, h, r1, w1)
    else:
        kepler_propagate_hyperbolic(r, w, mu, h, r1, w1)
    for c in range(3):
        r[c] = r1[c]
        w[c] = w1[c]


@njit(cache=True)
def perturbed_kepler(r, w, mi, mj, t0, t1, nsub, tc, cm, tk, pk, mk, dv):
    """Advance a pair's relative orbit from ``t0`` to ``t1`` under its perturbers' tide.

    Parameters
    ----------
    r, w : ndarray, shape (3,)
        Relative position ``x_j - x_i`` and velocity at ``t0``; overwritten with those at
        ``t1``.
    mi, mj : float
        The members' masses.
    t0, t1 : float
        Start and end (N-body time units).
    nsub : int
        Number of kick substeps; 0: one Kepler drift (no perturbers).
    tc : float
        Time of the centre of mass's polynomial ``cm``.
    cm : ndarray, shape (1, 6, 3)
        Its position, velocity, acceleration, jerk, snap, crackle at ``tc``.
    tk : ndarray, shape (k,)
        Times of the perturbers' polynomials.
    pk : ndarray, shape (k, 6, 3)
        The perturbers' polynomials, as ``cm``.
    mk : ndarray, shape (k,)
        The perturbers' masses.
    dv : ndarray, shape (k, 3)
        Out: each perturber's velocity change by the pair's quadrupole (its members' pull
        less that of their centre of mass) summed over the kicks (zero when ``nsub`` is 0).
    """
    mu = mi + mj
    dv[:] = 0.0
    fi = mj / mu
    fj = mi / mu
    r1 = np.empty(3)
    w1 = np.empty(3)
    if nsub == 0 or tk.size == 0:
        _drift(r, w, mu, t1 - t0, r1, w1)
        return
    h = (t1 - t0) / nsub
    xc = np.empty(3)
    _drift(r, w, mu, 0.5 * h, r1, w1)
    for s in range(nsub):
        tau = t0 + (s + 0.5) * h
        for c in range(3):
            xc[c] = _taylor(cm, 0, tau - tc, c)
        ax = 0.0
        ay = 0.0
        az = 0.0
        for k in range(tk.size):
            dt = tau - tk[k]
            # from member j and from member i to the perturber
            bx = _taylor(pk, k, dt, 0) - xc[0]
            by = _taylor(pk, k, dt, 1) - xc[1]
            bz = _taylor(pk, k, dt, 2) - xc[2]
            djx = bx - fj * r[0]
            djy = by - fj * r[1]
            djz = bz - fj * r[2]
            dix = bx + fi * r[0]
            diy = by + fi * r[1]
            diz = bz + fi * r[2]
            dj2 = djx * djx + djy * djy + djz * djz
            di2 = dix * dix + diy * diy + diz * diz
            b2 = bx * bx + by * by + bz * bz
            uj = 1.0 / (dj2 * np.sqrt(dj2))
            ui = 1.0 / (di2 * np.sqrt(di2))
            ub = mu / (b2 * np.sqrt(b2))
            ax += mk[k] * (uj * djx - ui * dix)
            ay += mk[k] * (uj * djy - ui * diy)
            az += mk[k] * (uj * djz - ui * diz)
            # the reaction on the perturber beyond the point mass it is integrated with
            dv[k, 0] -= h * (mi * ui * dix + mj * uj * djx - ub * bx)
            dv[k, 1] -= h * (mi * ui * diy + mj * uj * djy - ub * by)
            dv[k, 2] -= h * (mi * ui * diz + mj * uj * djz - ub * bz)
        w[0] += h * ax
        w[1] += h * ay
        w[2] += h * az
        _drift(r, w, mu, h if s < nsub - 1 else 0.5 * h, r1, w1)


def perturbed_kepler_reference(r, w, mi, mj, t0, t1, nsub, tc, cm, tk, pk, mk, dv):
    """Plain twin of :func:`perturbed_kepler` (numpy; the same operations in vector form)."""
    mu = mi + mj
    dv[:] = 0.0
    fi, fj = mj / mu, mi / mu
    r1, w1 = np.empty(3), np.empty(3)

    def drift(h):
        _drift(r, w, mu, h, r1, w1)

    def position(coef, dt):
        return coef[0] + dt * (coef[1] + dt * (coef[2] / 2.0 + dt * (
            coef[3] / 6.0 + dt * (coef[4] / 24.0 + dt * coef[5] / 120.0))))

    if nsub == 0 or len(tk) == 0:
        drift(t1 - t0)
        return
    h = (t1 - t0) / nsub
    drift(0.5 * h)
    for s in range(nsub):
        tau = t0 + (s + 0.5) * h
        xc = position(cm[0], tau - tc)
        acc = np.zeros(3)
        for k in range(len(tk)):
            b = position(pk[k], tau - tk[k]) - xc
            dj, di = b - fj * r, b + fi * r
            acc += mk[k] * (dj / np.linalg.norm(dj) ** 3 - di / np.linalg.norm(di) ** 3)
            dv[k] -= h * (mi * di / np.linalg.norm(di) ** 3 + mj * dj / np.linalg.norm(dj) ** 3
                          - mu * b / np.linalg.norm(b) ** 3)
        w += h * acc
        drift(h if s < nsub - 1 else 0.5 * h)


@njit(cache=True, inline="always", error_model="numpy")
def _closest_approach(pos, vel, row, k, lo, hi):
    """Body ``k`` on a straight line relative to body ``row`` over times ``[lo, hi]``: its
    closest squared distance, its squared distance now and its squared relative speed."""
    dx = pos[k, 0] - pos[row, 0]
    dy = pos[k, 1] - pos[row, 1]
    dz = pos[k, 2] - pos[row, 2]
    ux = vel[k, 0] - vel[row, 0]
    uy = vel[k, 1] - vel[row, 1]
    uz = vel[k, 2] - vel[row, 2]
    u2 = ux * ux + uy * uy + uz * uz
    tau = -(dx * ux + dy * uy + dz * uz) / (u2 if u2 > 0.0 else 1.0)
    tau = min(max(tau, lo), hi)
    mx = dx + tau * ux
    my = dy + tau * uy
    mz = dz + tau * uz
    return mx * mx + my * my + mz * mz, dx * dx + dy * dy + dz * dz, u2


@njit(cache=True, error_model="numpy")
def select_perturbers(pos, vel, mass, row, apo, span):
    """The perturbers of the pair whose centre of mass is body ``row``, and the shortest
    passage time among them (compiled; :func:`select_perturbers_reference` is its twin).

    Parameters
    ----------
    pos, vel, mass : ndarray
        Every body at one time, ``(n, 3)``, ``(n, 3)``, ``(n,)``.
    row : int
        The pair's body.
    apo : float
        The pair's apocentre (``inf`` for an unbound one: every body perturbs it).
    span : float
        The time interval (negative: before) over which each body's closest approach on a
        straight line from ``pos``, ``vel`` counts.

    Returns
    -------
    rows : ndarray of int
        Bodies with ``2 m_k apo^3 / (mu d_k^3) >= PERTURBER_GAMMA``, increasing.
    passage : float
        The smallest ``d_k / |v_k - v_cm|`` among them (``inf`` when none).
    """
    n = pos.shape[0]
    lo, hi = (span, 0.0) if span < 0.0 else (0.0, span)
    apo3 = apo ** 3
    keep = np.zeros(n, dtype=np.bool_)
    passage = np.inf
    for k in range(n):
        if k == row:
            continue
        d2, d02, u2 = _closest_approach(pos, vel, row, k, lo, hi)
        if 2.0 * mass[k] * apo3 / (mass[row] * d2 * np.sqrt(d2)) >= PERTURBER_GAMMA:
            keep[k] = True
            passage = min(passage, np.sqrt(d02) / np.sqrt(u2))
    return np.flatnonzero(keep), passage


def select_perturbers_reference(pos: np.ndarray, vel: np.ndarray, mass: np.ndarray, row: int,
                                apo: float, span: float) -> tuple[np.ndarray, float]:
    """Numpy twin of :func:`select_perturbers`."""
    d = pos - pos[row]
    u = vel - vel[row]
    du = np.einsum("ic,ic->i", d, u)
    u2 = np.einsum("ic,ic->i", u, u)
    lo, hi = (span, 0.0) if span < 0.0 else (0.0, span)
    tau = np.clip(-du / np.where(u2 > 0.0, u2, 1.0), lo, hi)
    dm = d + tau[:, None] * u
    d2 = np.einsum("ic,ic->i", dm, dm)
    d2[row] = math.inf
    mpair = float(mass[row])
    with np.errstate(divide="ignore", invalid="ignore"):
        gamma = 2.0 * mass * apo ** 3 / (mpair * d2 * np.sqrt(d2))
    rows = np.flatnonzero(gamma >= PERTURBER_GAMMA)
    rows = rows[rows != row]
    if rows.size == 0:
        return rows, math.inf
    speed = np.sqrt(u2[rows])
    with np.errstate(divide="ignore"):
        passage = np.sqrt(np.einsum("ic,ic->i", d[rows], d[rows])) / speed
    return rows, float(passage.min())


@njit(cache=True, error_model="numpy")
def max_perturbation(pos, mass, skip1, skip2, xc, mpair, apo):
    """Largest tidal perturbation ``2 m_k apo^3 / (mpair d_k^3)`` of the bodies (rows of
    ``pos``, ``mass`` other than ``skip1``, ``skip2``) on a pair of mass ``mpair`` and apocentre
    ``apo`` centred at ``xc``; infinite when a body is within ``apo``, 0 when there is none
    (compiled twin of :func:`physics.nbody_pairs.perturbation`)."""
    worst = 0.0
    apo2 = apo * apo
    for k in range(pos.shape[0]):
        if k == skip1 or k == skip2:
            continue
        dx = pos[k, 0] - xc[0]
        dy = pos[k, 1] - xc[1]
        dz = pos[k, 2] - xc[2]
        d2 = dx * dx + dy * dy + dz * dz
        if d2 <= apo2:
            return np.inf
        worst = max(worst, 2.0 * mass[k] * apo ** 3 / (mpair * d2 * np.sqrt(d2)))
    return worst


@njit(cache=True, error_model="numpy")
def approach_step(pos, vel, mass, row, apo, h, h_min, limit):
    """The step of the pair's body ``row`` halved (not below ``h_min``) while some body, on a
    straight line from ``pos``, ``vel`` relative to it, would perturb the pair (apocentre
    ``apo``) above ``limit`` within the step."""
    mpair = mass[row]
    apo3 = apo ** 3
    while h > h_min:
        worst = 0.0
        for k in range(pos.shape[0]):
            if k == row:
                continue
            d2, _, _ = _closest_approach(pos, vel, row, k, 0.0, h)
            worst = max(worst, 2.0 * mass[k] * apo3 / (mpair * d2 * np.sqrt(d2)))
        if worst <= limit:
            break
        h *= 0.5
    return h


def substeps(r: np.ndarray, w: np.ndarray, mu: float, span: float, passage: float) -> int:
    """Kick substeps for ``span`` (> 0): ``h <= P / KICKS_PER_ORBIT`` (bound) and ``h <=
    passage / KICKS_PER_PASSAGE``."""
    rn = math.sqrt(float(r @ r))
    inv_a = 2.0 / rn - float(w @ w) / mu
    h = passage / KICKS_PER_PASSAGE
    if inv_a > 0.0:
        period = 2.0 * math.pi * math.sqrt(1.0 / (inv_a ** 3 * mu))
        h = min(h, period / KICKS_PER_ORBIT)
    return max(1, math.ceil(span / h)) if math.isfinite(h) else 1
