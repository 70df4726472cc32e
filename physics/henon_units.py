"""Hénon units for a star set: the shells' potential and energy, and the scaling to E = -1/4.

Part of the initial conditions (:mod:`physics.initial_conditions` samples the models and
re-exports these names).  Holds :func:`shell_potential`, :func:`shell_energies` and
:func:`scale_to_henon_units` with the factors it applied (:class:`HenonScaling`).

Units
-----
Hénon (N-body) units: G = 1, total mass M = 1, total energy E0 = -1/4, so the virial radius
``r_v = G M^2 / (2 |W|)`` is 1 for a system in virial equilibrium.  Star sets are dicts of
float64 arrays ``{'r', 'vr', 'vt', 'm'}`` sorted by increasing ``r``: ``vr`` is the radial
velocity, ``vt >= 0`` the transverse speed.

Energy convention
-----------------
The potential energy is that of the spherical shells the stars stand for (CMC paper, eqs 1-5).
With stars sorted by radius, the potential at star ``k`` is

    phi_k = -M(<=k) / r_k - sum_{i>k} m_i / r_i,

where ``M(<=k)`` *includes* star ``k`` itself, and ``W = sum_k m_k phi_k / 2``.  Expanding,
``W = -sum_i m_i M(<i) / r_i - sum_i m_i^2 / (2 r_i)``: the mutual energy of all pairs of shells
plus the self energy ``-m^2/(2r)`` of each thin shell, i.e. the exact potential energy of the
sphericalised sample (the star's own mass is "half counted").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

# --------------------------------------------------------------------------------------------
# shell potential, energies and scaling
# --------------------------------------------------------------------------------------------


@njit(cache=True)
def _compensated_cumsum(x: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """Prefix sums with Neumaier compensation (error ~ eps, independent of length)."""
    out = np.empty_like(x)
    total = 0.0
    comp = 0.0
    for i in range(x.size):
        xi = x[i]
        t = total + xi
        if abs(total) >= abs(xi):
            comp += (total - t) + xi
        else:
            comp += (xi - t) + total
        total = t
        out[i] = total + comp
    return out


def shell_potential(r: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Potential at each star from spherical shells (CMC paper eqs 1-5).

    Parameters
    ----------
    r : numpy.ndarray
        Radii, sorted increasing, all > 0 (any consistent length unit).
    m : numpy.ndarray
        Masses in the same order (any consistent mass unit; G = 1).

    Returns
    -------
    numpy.ndarray
        ``phi_k = -M(<=k)/r_k - sum_{i>k} m_i/r_i`` (units of G M / r).  ``M(<=k)`` includes
        star ``k``; see the module docstring for why.

    Raises
    ------
    ValueError
        If the arrays differ in length or ``r`` is not sorted.
    """
    r = np.asarray(r, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64)
    if r.shape != m.shape or r.ndim != 1:
        raise ValueError("r and m must be 1-D arrays of the same length")
    if r.size > 1 and np.any(np.diff(r) < 0.0):
        raise ValueError("r must be sorted in increasing order")
    # Compensated prefix sums: a plain cumsum over 1e5-1e6 stars drifts by ~1e-12, which
    # would show up directly in the total energy that the scaling is meant to fix exactly.
    m_enc = _compensated_cumsum(m)
    # Outer sum accumulated from the outside in, so small outer terms are not swamped.
    m_over_r = m / r
    outer = np.empty_like(r)
    outer[:-1] = _compensated_cumsum(m_over_r[::-1])[::-1][1:]
    outer[-1] = 0.0
    return -m_enc / r - outer


def shell_energies(
    r: np.ndarray, vr: np.ndarray, vt: np.ndarray, m: np.ndarray
) -> tuple[float, float]:
    """Kinetic and shell potential energy of a star set.

    Parameters
    ----------
    r, vr, vt, m : numpy.ndarray
        Radii (sorted increasing), radial and transverse velocities, masses, in any units with
        G = 1 (Hénon units for the outputs of this module).

    Returns
    -------
    kinetic : float
        ``K = sum m (vr^2 + vt^2) / 2``.
    potential : float
        ``W = sum m phi / 2`` with ``phi`` from :func:`shell_potential`.
    """
    m = np.asarray(m, dtype=np.float64)
    vr = np.asarray(vr, dtype=np.float64)
    vt = np.asarray(vt, dtype=np.float64)
    kinetic = 0.5 * float(np.sum(m * (vr * vr + vt * vt)))
    potential = 0.5 * float(np.sum(m * shell_potential(r, m)))
    return kinetic, potential


@dataclass(frozen=True)
class HenonScaling:
    """Factors that took a star set to Hénon units (new = factor * old).

    Attributes
    ----------
    mass : float
        Mass factor, ``1 / M_input``.
    length : float
        Length factor.
    velocity : float
        Velocity factor.
    virial_ratio : float
        ``2K/|W|`` of the input, kept by the scaling.
    order : numpy.ndarray
        Permutation that sorted the input by radius (``r_out = length * r_in[order]``), so the
        caller can reorder any per-star data it keeps elsewhere.
    """

    mass: float
    length: float
    velocity: float
    virial_ratio: float
    order: np.ndarray


def scale_to_henon_units(
    r: np.ndarray, vr: np.ndarray, vt: np.ndarray, m: np.ndarray
) -> tuple[dict[str, np.ndarray], HenonScaling]:
    """Sort by radius and rescale a star set to Hénon units (G = M = 1, E = -1/4).

    The input is taken to be in *some* self-consistent units with G = 1.  Masses are divided
    by their total; lengths and velocities are then scaled so that the exact total energy of
    the sample, ``K + W`` with the shell potential energy ``W`` (module docstring), is -1/4,
    while the virial ratio ``Q = 2K/|W|`` of the input is kept (so a sample drawn from an
    equilibrium model keeps its small statistical departure from virial equilibrium rather
    than having it forced to exactly 1).  With ``Q`` kept, ``W = -1/(2(2-Q))`` and
    ``K = Q|W|/2``; for ``Q = 1`` this is the usual ``W = -1/2``, ``K = 1/4``.

    Parameters
    ----------
    r : numpy.ndarray
        Radii (> 0), any order, input length unit.
    vr : numpy.ndarray
        Radial velocities, input velocity unit.
    vt : numpy.ndarray
        Transverse speeds (>= 0), input velocity unit.
    m : numpy.ndarray
        Masses (> 0), input mass unit.

    Returns
    -------
    stars : dict of numpy.ndarray
        ``{'r', 'vr', 'vt', 'm'}`` in Hénon units, sorted by increasing ``r``.
    scaling : HenonScaling
        The factors applied and the sorting permutation.

    Raises
    ------
    ValueError
        On mismatched lengths, fewer than 2 stars, non-finite values, ``r <= 0``, ``m <= 0``,
        ``vt < 0``, or an unbound input (``Q >= 2``, no negative-energy scaling exists).
    """
    arrays = {}
    for name, a in (("r", r), ("vr", vr), ("vt", vt), ("m", m)):
        arr = np.asarray(a, dtype=np.float64)
        if arr.ndim != 1:
            raise ValueError(f"{name} must be a 1-D array")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be finite")
        arrays[name] = arr
    n = arrays["r"].size
    if any(a.size != n for a in arrays.values()):
        raise ValueError("r, vr, vt and m must have the same length")
    if n < 2:
        raise ValueError(f"need at least 2 stars (n >= 2), got {n}")
    if np.any(arrays["r"] <= 0.0):
        raise ValueError("r must be > 0 (the shell potential diverges at r = 0)")
    if np.any(arrays["m"] <= 0.0):
        raise ValueError("m must be > 0")
    if np.any(arrays["vt"] < 0.0):
        raise ValueError("vt must be >= 0 (it is a speed)")

    order = np.argsort(arrays["r"], kind="stable")
    r_s = arrays["r"][order]
    vr_s = arrays["vr"][order]
    vt_s = arrays["vt"][order]
    m_s = arrays["m"][order]

    kinetic, potential = shell_energies(r_s, vr_s, vt_s, m_s)
    q = 2.0 * kinetic / abs(potential)
    if not q < 2.0:
        raise ValueError(f"input is unbound (virial ratio 2K/|W| = {q:.6g} >= 2); cannot scale")

    m_tot = float(np.sum(m_s))
    m_new = m_s / m_tot
    # Energies with normalised masses but unscaled positions/velocities.
    kin_m = kinetic / m_tot
    pot_m = potential / m_tot**2
    pot_target = -1.0 / (2.0 * (2.0 - q))
    kin_target = 0.5 * q * abs(pot_target)
    length = pot_m / pot_target
    velocity = math.sqrt(kin_target / kin_m) if kin_m > 0.0 else 1.0

    stars = {
        "r": r_s * length,
        "vr": vr_s * velocity,
        "vt": vt_s * velocity,
        "m": m_new,
    }
    scaling = HenonScaling(
        mass=1.0 / m_tot, length=length, velocity=velocity, virial_ratio=q, order=order
    )
    return stars, scaling
