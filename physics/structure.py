"""Structural diagnostics: Lagrange radii, half-mass radius, core radius and density.

The core follows Casertano & Hut (1985) in the radial ordering: the density at star ``i`` is
the mass of the ``J - 1`` stars strictly inside the shell bounded by its ``J/2``-th inner and
outer radial neighbours (``J = 6``; the ``J - 1`` is their bias correction) divided by the shell
volume.  Over the stars inside ``r_h``: ``rho_c = f sum(rho_i^2) / sum(rho_i)``,
``r_c = sum(rho_i r_i) / sum(rho_i)``, and ``N_core = 4/3 pi r_c^3 (rho_c / m_c) / 2`` with
``m_c = sum(rho_i m_i) / sum(rho_i)`` the density-weighted mean mass of the centre (CMC's
central.m_ave: with a mass spectrum the core's stars are heavier than the average star), with
the C code's normalisation: ``f = 4/5 x 2 = 1.6`` (its bias correction of the estimator, and a
factor 2 that brings the weighted mean up to the central density of Plummer and King models;
for a Plummer sphere rho_c is then 3/(4 pi a^3) = 1.17 within sampling noise) and the 1/2 in
N_core, so that the C code's core-collapse criterion N_core <= 100 means the same here.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

CH_NEIGHBOURS = 6  # (_ch_interior spells out its five masses)
#: The C code's density normalisation (4/5 bias correction times 2).
RHO_FACTOR = 1.6


def lagrange_radii(r: np.ndarray, m: np.ndarray, fractions: np.ndarray,
                   mcum: np.ndarray | None = None) -> np.ndarray:
    """Radii enclosing the given fractions of the total mass.

    Parameters
    ----------
    r, m : ndarray
        Sorted radii and masses [Hénon units].
    fractions : ndarray
        Mass fractions in (0, 1).
    mcum : ndarray, optional
        ``cumsum(m)`` if the caller has it (the potential computes it).

    Returns
    -------
    ndarray
        Radius of the first star at which the enclosed mass reaches each fraction.
    """
    if r.size == 0:
        return np.full(len(fractions), np.nan)
    return r[_lagrange_index(m, fractions, mcum)]


def _lagrange_index(m: np.ndarray, fractions: np.ndarray,
                    mcum: np.ndarray | None) -> np.ndarray:
    """Index of the first star at which the enclosed mass reaches each fraction."""
    mcum = np.cumsum(m) if mcum is None else mcum
    idx = np.searchsorted(mcum, np.asarray(fractions) * mcum[-1], side="left")
    return np.clip(idx, 0, m.size - 1)


def lagrange_mean_masses(m: np.ndarray, fractions: np.ndarray,
                         mcum: np.ndarray | None = None) -> np.ndarray:
    """Mean mass of the stars inside each Lagrange radius (those of :func:`lagrange_radii`).

    Parameters
    ----------
    m : ndarray
        Masses in radial order [Hénon mass].
    fractions : ndarray
        Mass fractions in (0, 1).
    mcum : ndarray, optional
        ``cumsum(m)``.

    Returns
    -------
    ndarray
        ``M(<= r_f) / N(<= r_f)`` [Hénon mass] for each fraction.
    """
    if m.size == 0:
        return np.full(len(fractions), np.nan)
    mcum = np.cumsum(m) if mcum is None else mcum
    idx = _lagrange_index(m, fractions, mcum)
    return mcum[idx] / (idx + 1)


@njit(cache=True, inline="always")
def _ch_density(r, m, i, n, h):
    """Casertano-Hut density at star ``i`` of sorted ``r``, ``m`` (``n`` stars, ``h``
    neighbours each side) and whether its shell has a volume."""
    lo = i - h
    hi = i + h
    if hi > n - 1:
        hi = n - 1
        lo = hi - 2 * h
    r_in = r[lo] if lo >= 0 else 0.0
    mass = 0.0
    for k in range(max(lo + 1, 0), hi):
        mass += m[k]
    vol = 4.0 / 3.0 * np.pi * (r[hi] ** 3 - r_in ** 3)
    if vol > 0.0:
        return mass / vol, True
    return 0.0, False


@njit(cache=True, parallel=True)
def _ch_interior(r_in, r_out, m0, m1, m2, m3, m4, rho, has):
    """:func:`_ch_density` of stars whose shell lies inside the array (``CH_NEIGHBOURS`` = 6):
    the views are the inner and outer radii and the five masses of each star, so the loop
    has no branch and no index that could be negative (it vectorises)."""
    for j in prange(rho.shape[0]):
        mass = 0.0 + m0[j] + m1[j] + m2[j] + m3[j] + m4[j]
        vol = 4.0 / 3.0 * np.pi * (r_out[j] ** 3 - r_in[j] ** 3)
        ok = vol > 0.0
        rho[j] = mass / vol if ok else 0.0
        has[j] = ok


@njit(cache=True)
def core_sums(r, m, r_half, i0, i1, v2):
    """Casertano-Hut partial sums over the stars ``i0 .. i1 - 1`` that lie inside ``r_half``.

    The density of star ``i`` needs its ``CH_NEIGHBOURS / 2`` radial neighbours on each side,
    which the replicated arrays hold whatever the range, so each rank sums its own stars
    (``r``, ``m``: all stars, sorted; ``v2`` the squared speeds of its own rows).
    :func:`core_from_sums` turns the totals into the core.  The densities are computed first
    (on the threads, the interior without branches), then added in star order: the bits of
    :func:`core_sums_serial` (its twin) for any thread count.

    Parameters
    ----------
    v2 : ndarray
        ``vr^2 + vt^2`` of stars ``i0 .. i1 - 1`` (``v2[i - i0]``), or empty (the fifth sum
        is then 0).

    Returns
    -------
    ndarray, shape (5,)
        ``sum rho_i``, ``sum rho_i^2``, ``sum rho_i r_i``, ``sum rho_i m_i``,
        ``sum rho_i v_i^2`` (CMC's central.m_ave and central.v_rms are the fourth and fifth
        over the first); zeros with fewer than ``CH_NEIGHBOURS + 1`` stars.
    """
    n = r.shape[0]
    h = CH_NEIGHBOURS // 2
    if n < CH_NEIGHBOURS + 1:
        return np.zeros(5)
    a = max(i0, 0)
    b = min(i1, n)
    if b <= a:
        return np.zeros(5)
    # the serial loop stops at the first star outside r_half: r is sorted
    b = a + np.searchsorted(r[a:b], r_half, side="right")
    rho = np.empty(max(b - a, 0))
    has = np.empty(max(b - a, 0), dtype=np.bool_)
    # stars with all neighbours on both sides, [c, d): straight-line code over shifted views;
    # the others of [a, b) by the general function
    c = min(max(a, h), b)
    d = max(min(b, n - h), c)
    if d > c:
        _ch_interior(r[c - h:d - h], r[c + h:d + h], m[c - 2:d - 2], m[c - 1:d - 1],
                     m[c:d], m[c + 1:d + 1], m[c + 2:d + 2], rho[c - a:d - a],
                     has[c - a:d - a])
    for i in range(a, c):
        rho[i - a], has[i - a] = _ch_density(r, m, i, n, h)
    for i in range(d, b):
        rho[i - a], has[i - a] = _ch_density(r, m, i, n, h)
    with_v = v2.shape[0] > 0
    s_rho = 0.0
    s_rho2 = 0.0
    s_rhor = 0.0
    s_rhom = 0.0
    s_rhov2 = 0.0
    for j in range(b - a):
        if has[j]:
            x = rho[j]
            s_rho += x
            s_rho2 += x * x
            s_rhor += x * r[a + j]
            s_rhom += x * m[a + j]
            if with_v:
                s_rhov2 += x * v2[a + j - i0]
    return np.array([s_rho, s_rho2, s_rhor, s_rhom, s_rhov2])


@njit(cache=True)
def core_sums_serial(r, m, r_half, i0, i1, v2):
    """Reference twin of :func:`core_sums`: one loop over the stars, summing as it goes, every
    density by the general :func:`_ch_density` (the kernel's interior stars take the
    straight-line :func:`_ch_interior`)."""
    n = r.shape[0]
    h = CH_NEIGHBOURS // 2
    if n < CH_NEIGHBOURS + 1:
        return np.zeros(5)
    s_rho = 0.0
    s_rho2 = 0.0
    s_rhor = 0.0
    s_rhom = 0.0
    s_rhov2 = 0.0
    for i in range(max(i0, 0), min(i1, n)):
        if r[i] > r_half:
            break
        rho, ok = _ch_density(r, m, i, n, h)
        if ok:
            s_rho += rho
            s_rho2 += rho * rho
            s_rhor += rho * r[i]
            s_rhom += rho * m[i]
            if v2.shape[0] > 0:
                s_rhov2 += rho * v2[i - i0]
    return np.array([s_rho, s_rho2, s_rhor, s_rhom, s_rhov2])


@njit(cache=True)
def core_from_sums(sums):
    """(r_c, rho_c, n_core) of :func:`core_properties` from the totals of :func:`core_sums`
    (its first four; compiled: the same float operations as before the split, so the same
    bits)."""
    s_rho, s_rho2, s_rhor, s_rhom = sums[0], sums[1], sums[2], sums[3]
    if s_rho <= 0.0:
        return np.nan, np.nan, np.nan
    rho_c = RHO_FACTOR * s_rho2 / s_rho
    r_c = s_rhor / s_rho
    n_core = 4.0 / 3.0 * np.pi * r_c ** 3 * 0.5 * rho_c / (s_rhom / s_rho)
    return r_c, rho_c, n_core


def core_properties(r, m, r_half):
    """Casertano-Hut core radius, core density and N_core from sorted ``r``, ``m``.

    Returns
    -------
    r_c : float
        Density-weighted mean radius [Hénon length].
    rho_c : float
        Density-weighted mean density times 1.6 [Hénon mass / length^3].
    n_core : float
        ``4/3 pi r_c^3 rho_c / (2 m_c)``, ``m_c`` the density-weighted mean mass (number of
        stars in the core, C-code convention).
    """
    return core_from_sums(core_sums(r, m, float(r_half), 0, r.shape[0], np.zeros(0)))


def core_properties_reference(r: np.ndarray, m: np.ndarray, r_half: float):
    """Plain numpy version of :func:`core_properties`."""
    n = r.size
    h = CH_NEIGHBOURS // 2
    sel = np.nonzero(r <= r_half)[0]
    lo = sel - h
    hi = sel + h
    over = hi > n - 1
    hi[over] = n - 1
    lo[over] = n - 1 - 2 * h
    mc = np.concatenate([[0.0], np.cumsum(m)])
    mass = mc[hi] - mc[np.maximum(lo + 1, 0)]
    r_in = np.where(lo >= 0, r[np.maximum(lo, 0)], 0.0)
    rho = mass / (4.0 / 3.0 * np.pi * (r[hi] ** 3 - r_in ** 3))
    rho_c = RHO_FACTOR * np.sum(rho ** 2) / np.sum(rho)
    r_c = np.sum(rho * r[sel]) / np.sum(rho)
    m_c = np.sum(rho * m[sel]) / np.sum(rho)
    return r_c, rho_c, 4.0 / 3.0 * np.pi * r_c ** 3 * 0.5 * rho_c / m_c
