"""Rates and kinematics of binary processes in the cluster (groundwork for the binaries issue).

Pure functions of arrays and scalars, G = 1 (Hénon units), no MPI, no files:

* :func:`binary_single_timescale`, :func:`binary_binary_timescale`: the paper's time scales of
  strong binary-single and binary-binary encounters (Pattabiraman et al. 2013, eqs 10 and 9);
* :func:`strong_encounter_cross_section`, :func:`strong_encounter_probability`: CMC's
  per-pair probability of a strong encounter in one step, ``P = n W S dt N / ln(gamma N)``;
* :func:`three_body_rate`, :func:`sample_three_body_hardness`,
  :func:`three_body_binary_kinematics`: three-body binary formation as Morscher et al. (2013,
  2015) and CMC-COSMIC do it.

Called from the step through :mod:`physics.encounters`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from parallel.rng import taus_uniform

__all__ = [
    "binary_binary_timescale",
    "binding_energy",
    "primordial_binaries",
    "binary_single_timescale",
    "sample_three_body_hardness",
    "strong_encounter_cross_section",
    "strong_encounter_probability",
    "three_body_binary_kinematics",
    "three_body_hardness",
    "three_body_rate",
]

SQRT_PI = math.sqrt(math.pi)


def binding_energy(m1, m2, a):
    """Internal energy ``-G m1 m2 / (2 a)`` of binaries (G = 1; scalars or arrays)."""
    return -0.5 * m1 * m2 / a


def collision_timescale(n_s: float, sigma: float, r2_mean: float, mr_mean: float,
                        x_coll: float = 1.0) -> float:
    """Time scale of single-single sticky-sphere collisions (CMC's Tcoll, from Freitag & Benz
    2002, paper II).

    ``1/T_coll = 16 sqrt(pi) n_s X^2 sigma <R^2> (1 + <m R> / (2 X sigma^2 <R^2>))``.

    Parameters
    ----------
    n_s : float
        Number density of single stars (r_vir^-3).
    sigma : float
        One-dimensional velocity dispersion of the single stars, ``v_rms / sqrt(3)`` (v_NB).
    r2_mean, mr_mean : float
        ``<R^2>`` (r_vir^2) and ``<m R>`` (M0 r_vir) of the single stars' radii R.
    x_coll : float
        Collision pericentre in units of R1 + R2 (CMC's COLL_FACTOR).

    Returns
    -------
    float
        ``T_coll`` in N-body time units (``inf`` without singles or radii).
    """
    if n_s <= 0.0 or r2_mean <= 0.0 or sigma <= 0.0:
        return np.inf
    rate = 16.0 * SQRT_PI * n_s * x_coll ** 2 * sigma * r2_mean * (
        1.0 + mr_mean / (2.0 * x_coll * sigma ** 2 * r2_mean))
    return 1.0 / rate if rate > 0.0 else np.inf


def binary_single_timescale(n_s: float, sigma: float, a_mean: float, a2_mean: float,
                            m_bin_mean: float, x_bs: float = 2.0) -> float:
    """Time scale of strong binary-single encounters, paper eq. (10).

    ``1/T_bs = 4 sqrt(pi) n_s X^2 <a^2> sigma (1 + G <M><a> / (sigma^2 X <a^2>))``.

    Parameters
    ----------
    n_s : float
        Number density of single stars (r_vir^-3).
    sigma : float
        One-dimensional velocity dispersion (v_NB).
    a_mean, a2_mean : float
        ``<a>`` and ``<a^2>`` of the binaries (r_vir, r_vir^2).
    m_bin_mean : float
        ``<M>``, mean binary mass (M0).
    x_bs : float
        Pericentre cap of a strong encounter in units of a (CMC: 2).

    Returns
    -------
    float
        ``T_bs`` in N-body time units (``inf`` without singles or binaries).
    """
    rate = 4.0 * SQRT_PI * n_s * x_bs ** 2 * a2_mean * sigma * (
        1.0 + m_bin_mean * a_mean / (sigma ** 2 * x_bs * a2_mean)) if a2_mean > 0 else 0.0
    return math.inf if rate <= 0 else 1.0 / rate


def binary_binary_timescale(n_b: float, sigma: float, a2_mean: float, ma_mean: float,
                            x_bb: float = 2.0) -> float:
    """Time scale of strong binary-binary encounters, paper eq. (9).

    ``1/T_bb = 16 sqrt(pi) n_b X^2 <a^2> sigma (1 + G <M a> / (2 sigma^2 X <a^2>))``.

    For binaries of one mass M and one a this is exactly the Maxwellian average of
    ``n_b S W`` with ``S`` from :func:`strong_encounter_cross_section` (``r_p = X (a1 + a2)``,
    pair mass 2M, relative speeds of dispersion sqrt(2) sigma); tested.

    Parameters
    ----------
    n_b : float
        Number density of binaries (r_vir^-3).
    sigma : float
        One-dimensional velocity dispersion (v_NB).
    a2_mean : float
        ``<a^2>`` (r_vir^2).
    ma_mean : float
        ``<M a>``, mean of binary mass times semi-major axis (M0 r_vir).
    x_bb : float
        Pericentre cap in units of ``a1 + a2`` (CMC: 2).
    """
    rate = 16.0 * SQRT_PI * n_b * x_bb ** 2 * a2_mean * sigma * (
        1.0 + ma_mean / (2.0 * sigma ** 2 * x_bb * a2_mean)) if a2_mean > 0 else 0.0
    return math.inf if rate <= 0 else 1.0 / rate


#: The speed of light [km/s] (the recoil fit below is in km/s).
C_KMS = 299792.458


@njit(cache=True)
def bh_merger_remnant(m1, m2):
    """Mass, spin and recoil of the black hole two non-spinning black holes merge into.

    The fits CMC-COSMIC's Fewbody uses (``fb_bh_merger``) with both spins zero (COSMIC's
    default ``bhspinflag = 0, bhspinmag = 0`` gives black holes no spin): the radiated mass
    interpolates between the equal-mass and test-mass limits (Barausse et al. 2012:
    ``M_f / M = 1 - nu (1 - 4 nu) (1 - E_isco) - 16 nu^2 0.04827``, ``E_isco = sqrt(8/9)``),
    the spin is Barausse & Rezzolla (2009)'s ``q L / (1 + q)^2``, ``L = 2 sqrt 3 - 3.51712 nu
    + 2.5763 nu^2``, and the recoil the mass-asymmetry kick of Gonzalez et al. (2007),
    ``1.2e4 km/s nu^2 (1 - q) / (1 + q) (1 - 0.93 nu)``, in the orbital plane.

    Parameters
    ----------
    m1, m2 : float
        Masses (any unit).

    Returns
    -------
    mass_fraction : float
        ``M_final / (m1 + m2)`` (0.9517 for equal masses).
    spin : float
        Dimensionless spin of the remnant (0.686 for equal masses).
    kick_over_c : float
        Recoil speed in units of the speed of light (0 for equal masses; at most 175 km/s,
        at q = 0.36).
    """
    q = min(m1, m2) / max(m1, m2)
    nu = m1 * m2 / ((m1 + m2) * (m1 + m2))
    e_isco = math.sqrt(8.0 / 9.0)
    frac = 1.0 - nu * (1.0 - 4.0 * nu) * (1.0 - e_isco) - 16.0 * nu * nu * 0.04827
    ell = 3.464102 - 3.51712 * nu + 2.5763 * nu * nu
    spin = min(1.0, q * ell / ((1.0 + q) * (1.0 + q)))
    kick = 1.2e4 * nu * nu * (1.0 - q) / (1.0 + q) * (1.0 - 0.93 * nu)
    return frac, spin, kick / C_KMS


@njit(cache=True)
def strong_encounter_cross_section(r_p, m_pair, w):
    """Gravitationally focused cross section ``pi r_p^2 (1 + 2 G m_pair / (r_p w^2))``."""
    return np.pi * r_p * r_p * (1.0 + 2.0 * m_pair / (r_p * w * w))


@njit(cache=True)
def strong_encounter_probability(n, w, r_p, m_pair, dt_rel, n_stars, ln_lambda):
    """Probability of a strong encounter of one pair in one step (CMC's rule).

    ``P = n W S dt N / ln(gamma N)``: ``n W S`` is a rate in N-body time units and the step
    ``dt_rel`` is in relaxation units ``t_NB N / ln(gamma N)``, so ``dt_rel N / ln(gamma N)``
    is the step in N-body units.

    Parameters
    ----------
    n : float
        Local number density (r_vir^-3).
    w : float
        Relative speed of the pair (v_NB).
    r_p : float
        Pericentre cap (``X a`` or ``X (a1 + a2)``).
    m_pair : float
        Total mass of the pair (M0).
    dt_rel : float
        Time step (relaxation units).
    n_stars : float
        ``N`` of the Coulomb logarithm's time unit.
    ln_lambda : float
        ``ln(gamma N)``.

    Returns
    -------
    float
        The expected number of encounters in the step; a probability while < 1 (the caller
        warns when it is not).
    """
    return n * w * strong_encounter_cross_section(r_p, m_pair, w) * dt_rel * n_stars / ln_lambda


@njit(cache=True)
def three_body_rate(n, v_mean, m1, m2, m3, eta_min):
    """Rate per triplet of forming a binary of hardness >= eta_min (Morscher et al. 2013).

    ``Gamma = (1/2) sqrt(2) pi^2 n^2 <v>^-9 (G M12)^5 eta_min^-5.5 (1 + 2 eta_min)
    (1 + 2 (M123 / M12) eta_min)``; the factor 1/2 corrects for sampling each star in one
    triplet (CMC-COSMIC).  ``<v>`` is the local mean relative speed (CMC-COSMIC averages it
    over 20 neighbours).  N-body units (``n`` in r_vir^-3, ``<v>`` in v_NB, masses in M0).
    """
    m12 = m1 + m2
    m123 = m12 + m3
    return (0.5 * math.sqrt(2.0) * math.pi ** 2 * n * n * v_mean ** -9 * m12 ** 5
            * eta_min ** -5.5 * (1.0 + 2.0 * eta_min) * (1.0 + 2.0 * (m123 / m12) * eta_min))


@njit(cache=True)
def sample_three_body_hardness(k, eta_min, eta_max, states, row):
    """Draw the hardness eta of a new three-body binary from the stream ``states[row]``.

    Density ``d Gamma / d eta ∝ 5.5 eta^-6.5 + (4.5 k + 9) eta^-5.5 + 7 k eta^-4.5`` on
    ``[eta_min, eta_max]`` with ``k = 2 (M123 / M12) (v12 / v3)^2`` (Morscher et al. 2015).
    Each term is a power law: pick a term by its weight, then invert its CDF; two uniforms per
    draw, always.
    """
    u = taus_uniform(states, row)
    v = taus_uniform(states, row)
    return three_body_hardness(k, eta_min, eta_max, u, v)


@njit(cache=True)
def three_body_hardness(k, eta_min, eta_max, u, v):
    """:func:`sample_three_body_hardness` from two given uniforms ``u`` (term) and ``v``."""
    w1 = 5.5 * _pl_integral(-6.5, eta_min, eta_max)
    w2 = (4.5 * k + 9.0) * _pl_integral(-5.5, eta_min, eta_max)
    w3 = 7.0 * k * _pl_integral(-4.5, eta_min, eta_max)
    u = u * (w1 + w2 + w3)
    p = -6.5 if u < w1 else (-5.5 if u < w1 + w2 else -4.5)
    # inverse CDF of eta^p on [eta_min, eta_max]
    q = p + 1.0
    lo = eta_min ** q
    hi = eta_max ** q
    return (lo + v * (hi - lo)) ** (1.0 / q)


@njit(cache=True)
def _pl_integral(p, lo, hi):
    return (hi ** (p + 1.0) - lo ** (p + 1.0)) / (p + 1.0)


@njit(cache=True)
def three_body_binary_kinematics(m, v, e_bind, u1, u2, out_v):
    """Velocities after stars 0 and 1 of a triplet bind with energy ``e_bind`` (< 0).

    The binary (0 + 1) and star 2 leave back to back along a random direction in the
    triplet's centre-of-mass frame, with momentum and total energy conserved: the kinetic
    energy of the triplet about its centre of mass rises by ``-e_bind``.

    Parameters
    ----------
    m : ndarray, shape (3,)
    v : ndarray, shape (3, 3)
        3-D velocities of the three stars.
    e_bind : float
        Binding energy of the new binary, ``-G m0 m1 / (2 a)`` (< 0).
    u1, u2 : float
        Uniforms in (0, 1) for the direction.
    out_v : ndarray, shape (2, 3)
        Out: velocity of the binary's centre of mass and of star 2.

    Returns
    -------
    float
        The relative speed of binary and star 2 after formation.
    """
    mt = m[0] + m[1] + m[2]
    m12 = m[0] + m[1]
    vcm = np.zeros(3)
    for i in range(3):
        for c in range(3):
            vcm[c] += m[i] * v[i, c] / mt
    ke = 0.0
    for i in range(3):
        for c in range(3):
            ke += 0.5 * m[i] * (v[i, c] - vcm[c]) ** 2
    mu = m12 * m[2] / mt
    w = math.sqrt(2.0 * (ke - e_bind) / mu)
    cz = 2.0 * u1 - 1.0
    sz = math.sqrt(max(0.0, 1.0 - cz * cz))
    ph = 2.0 * math.pi * u2
    nx, ny, nz = sz * math.cos(ph), sz * math.sin(ph), cz
    out_v[0, 0] = vcm[0] - m[2] / mt * w * nx
    out_v[0, 1] = vcm[1] - m[2] / mt * w * ny
    out_v[0, 2] = vcm[2] - m[2] / mt * w * nz
    out_v[1, 0] = vcm[0] + m12 / mt * w * nx
    out_v[1, 1] = vcm[1] + m12 / mt * w * ny
    out_v[1, 2] = vcm[2] + m12 / mt * w * nz
    return w


def primordial_binaries(m: np.ndarray, rng: np.random.Generator, fraction: float,
                        q_min: float, a_min_hs: float, a_max_hs: float, sigma2: float
                        ) -> dict[str, np.ndarray]:
    """Turn a fraction of the objects into binaries (their masses split between two members).

    Parameters
    ----------
    m : ndarray
        Object masses (Hénon units); a binary keeps its object's mass as the sum of its members'.
    rng : numpy.random.Generator
        Draws, in this order: which objects are binaries (one uniform per object), then per
        binary the mass ratio, log a, and e (three uniforms per binary).
    fraction : float
        Fraction of the objects that are binaries: exactly ``round(fraction * n)`` of them
        (halves rounded up), those whose uniform is among the smallest (a random subset of
        that size, fixed by the stream).
    q_min : float
        Mass ratios ``q = m2 / m1`` uniform in ``[q_min, 1]``.
    a_min_hs, a_max_hs : float
        Semi-major axes log-uniform between these multiples of the binary's hard/soft boundary
        ``a_hs = G m1 m2 / (<m> sigma^2)`` (``<m>`` the mean object mass, ``sigma^2`` the
        cluster's one-dimensional velocity dispersion squared).
    sigma2 : float
        ``sigma^2`` (v_NB^2).

    Returns
    -------
    dict
        ``index`` (objects that are binaries), ``m1``, ``m2``, ``a``, ``e`` (thermal: f(e) = 2e).
    """
    if not (0.0 <= fraction <= 1.0):
        raise ValueError(f"binary fraction must be in [0, 1], got {fraction}")
    if not (0.0 < a_min_hs <= a_max_hs):
        raise ValueError(f"need 0 < binary_a_min <= binary_a_max, got {a_min_hs}, {a_max_hs}")
    n = m.size
    # the k objects with the smallest of n uniforms: the fraction exactly, not a binomial
    # draw around it (0.1 of 2000 objects gave 211 binaries), from the same draws
    k = int(math.floor(fraction * n + 0.5))
    u_pick = rng.random(n)
    index = np.sort(np.argsort(u_pick, kind="stable")[:k])
    u = rng.random((index.size, 3))
    q = q_min + (1.0 - q_min) * u[:, 0]
    m1 = m[index] / (1.0 + q)
    m2 = m[index] - m1
    a_hs = m1 * m2 / (float(np.mean(m)) * sigma2)
    log_a = np.log(a_min_hs) + (np.log(a_max_hs) - np.log(a_min_hs)) * u[:, 1]
    a = a_hs * np.exp(log_a)
    e = np.sqrt(u[:, 2])
    return {"index": index, "m1": m1, "m2": m2, "a": a, "e": e}
