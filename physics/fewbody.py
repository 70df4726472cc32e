"""Strong encounters: binary-single and binary-binary scattering through a few-body integrator.

The encounter engine the CMC paper runs through Fewbody, built from three parts:

* set-up (:func:`initial_state`, :func:`sample_encounter`): two objects (single stars or
  binaries) approach on their two-body hyperbola, moved in analytically from infinity to the
  distance where the tidal perturbation on each binary falls to ``tidal_tol`` (CMC's 1e-5, about
  74 a (1 + e) for equal masses) or to the pericentre if that is larger; binary orientations are
  isotropic and orbital phases uniform in mean anomaly; the impact parameter is uniform in area
  up to the one whose gravitationally focused pericentre is ``rp_max``.  Random numbers come
  from one lfsr113 sub-stream, in a fixed order (:data:`DRAWS_PER_ENCOUNTER`).
* integration: our own logarithmic-Hamiltonian leapfrog with Bulirsch-Stoer extrapolation
  (:mod:`physics.fewbody_kernels`, ``integrator="ar"``) or REBOUND's IAS15
  (``integrator="ias15"``, the reference; :mod:`physics.fewbody_rebound`); both stop through the
  same classification.
* classification (:func:`physics.fewbody_classify.classify`): hierarchy by most-bound pairing,
  done when top-level objects are unbound and receding, tidally isolated and every hierarchy is
  stable (Mardling & Aarseth 2001).  The outcome names the products with their star ids.

This module holds the set-up, :func:`integrate` and :func:`scatter`, and is the engine's
interface: it re-exports the names of its parts listed in ``__all__``.  The parts:
:mod:`physics.fewbody_objects` (the objects, the settings, the initial state),
:mod:`physics.fewbody_outcome` (the outcome decoded from the hierarchy, shared by both
integrators), the compiled kernels (:mod:`physics.fewbody_kernels`, the driver, with
:mod:`physics.fewbody_integrator`, :mod:`physics.fewbody_classify` and
:mod:`physics.fewbody_kepler`) and :mod:`physics.fewbody_rebound` (IAS15).

Units: G = 1 throughout; masses, lengths and velocities in any units consistent with that (the
cluster's Hénon units, or Msun, AU and sqrt(G Msun / AU) after conversion).  Internally each
encounter is scaled to total mass 1 and the widest binary's a = 1, so tolerances mean the same
at every scale; results are scaled back.

A function of its inputs only: the same objects, speed and stream state give the same outcome
bit for bit on any thread or rank (no wall-clock limits; the caps count steps and time).
"""

from __future__ import annotations

import math

import numpy as np

from parallel.rng import taus_uniform
from physics import fewbody_integrator as fi
from physics import fewbody_kernels as fk
from physics.fewbody_objects import (
    EncounterSettings,
    InitialState,
    StarObject,
    binary,
    critical_velocity,
    single,
)
from physics.fewbody_outcome import Outcome, Product, _empty_tree, _finish, _scales
from physics.fewbody_rebound import integrate_ias15

__all__ = [
    "DRAWS_PER_ENCOUNTER",
    "RECOIL_DRAWS",
    "EncounterSettings",
    "InitialState",
    "Outcome",
    "Product",
    "StarObject",
    "binary",
    "critical_velocity",
    "draw_recoil_uniforms",
    "initial_state",
    "integrate",
    "sample_encounter",
    "scatter",
    "single",
]

#: Uniform draws per encounter: 1 (impact parameter) + 4 per binary (3 orientation, 1 phase),
#: always 9 so that the stream advances the same whatever the objects are.
DRAWS_PER_ENCOUNTER = 9
#: Uniforms drawn (after the encounter's) for the recoil angles of black-hole mergers, in an
#: encounter with the 2.5PN term: one per possible merger of four bodies.
RECOIL_DRAWS = 3


# ---------------------------------------------------------------------------
# set-up
# ---------------------------------------------------------------------------
def _rotation_matrix(u1: float, u2: float, u3: float) -> np.ndarray:
    """Uniformly distributed rotation from three uniforms (Shoemake's quaternion)."""
    s1 = math.sqrt(1.0 - u1)
    s2 = math.sqrt(u1)
    t1 = 2.0 * math.pi * u2
    t2 = 2.0 * math.pi * u3
    w, x, y, z = s2 * math.cos(t2), s1 * math.sin(t1), s1 * math.cos(t1), s2 * math.sin(t2)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


def kepler_relative(mtot: float, a: float, e: float, mean_anomaly: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Relative position and velocity of a bound Kepler orbit in its plane (pericentre on x)."""
    mean_anomaly = math.fmod(mean_anomaly, 2.0 * math.pi)
    ecc_anom = mean_anomaly if e < 0.8 else math.pi
    for _ in range(100):
        f = ecc_anom - e * math.sin(ecc_anom) - mean_anomaly
        d = f / (1.0 - e * math.cos(ecc_anom))
        ecc_anom -= d
        if abs(d) < 1e-15:
            break
    ce, se = math.cos(ecc_anom), math.sin(ecc_anom)
    nmot = math.sqrt(mtot / a ** 3)
    fac = math.sqrt(1.0 - e * e)
    r = np.array([a * (ce - e), a * fac * se, 0.0])
    vfac = nmot * a / (1.0 - e * ce)
    w = np.array([-vfac * se, vfac * fac * ce, 0.0])
    return r, w


def start_distance(obj1: StarObject, obj2: StarObject, tidal_tol: float) -> float:
    """Separation at which the tidal perturbation on each binary equals ``tidal_tol``."""
    r = 0.0
    for b, other in ((obj1, obj2), (obj2, obj1)):
        if b.is_binary:
            apo = b.a * (1.0 + b.e)
            m1, m2 = b.masses
            r = max(r, apo * (2.0 * (m1 + m2) * other.mass / (m1 * m2 * tidal_tol)) ** (1 / 3))
    return r


def _hyperbola(mtot: float, v_inf: float, b: float, r0: float
               ) -> tuple[np.ndarray, np.ndarray, float]:
    """Relative position/velocity at separation r0 on the incoming branch; and the pericentre."""
    ell = b * v_inf
    if ell == 0.0:
        rp = 0.0
        r0 = max(r0, 0.0)
        speed = math.sqrt(v_inf * v_inf + 2.0 * mtot / r0)
        return np.array([r0, 0.0, 0.0]), np.array([-speed, 0.0, 0.0]), rp
    p = ell * ell / mtot
    ecc = math.sqrt(1.0 + (v_inf * ell / mtot) ** 2)
    rp = p / (1.0 + ecc)
    r = max(r0, rp)
    cosf = min(1.0, max(-1.0, (p / r - 1.0) / ecc))
    f = -math.acos(cosf)
    pos = r * np.array([math.cos(f), math.sin(f), 0.0])
    vel = math.sqrt(mtot / p) * np.array([-math.sin(f), ecc + math.cos(f), 0.0])
    return pos, vel, rp


def pericentre_impact_parameter(mtot: float, v_inf: float, r_p: float) -> float:
    """Impact parameter whose focused two-body pericentre is ``r_p``."""
    return r_p * math.sqrt(1.0 + 2.0 * mtot / (r_p * v_inf * v_inf))


def initial_state(obj1: StarObject, obj2: StarObject, v_inf: float, b: float,
                  uniforms: np.ndarray | list[float], tidal_tol: float = 1e-5) -> InitialState:
    """Place two objects at the start of their encounter.

    Parameters
    ----------
    obj1, obj2 : StarObject
        At least one must be a binary.
    v_inf : float
        Relative speed at infinity, > 0.
    b : float
        Impact parameter, >= 0.
    uniforms : sequence of float
        At least 8 numbers in (0, 1): orientation (3) and mean anomaly (1) of each binary, in
        the order obj1, obj2 (a single skips its four).
    tidal_tol : float
        Tidal tolerance that sets the starting separation.

    Returns
    -------
    InitialState
    """
    if not (obj1.is_binary or obj2.is_binary):
        raise ValueError("an encounter needs at least one binary")
    if not (math.isfinite(v_inf) and v_inf > 0):
        raise ValueError(f"v_inf must be positive and finite, got {v_inf}")
    if not (math.isfinite(b) and b >= 0):
        raise ValueError(f"impact parameter must be >= 0 and finite, got {b}")
    m1, m2 = obj1.mass, obj2.mass
    mtot = m1 + m2
    r0 = start_distance(obj1, obj2, tidal_tol)
    rel_x, rel_v, rp = _hyperbola(mtot, v_inf, b, r0)
    r_start = float(np.linalg.norm(rel_x))
    xs, vs, ms, rs, ids, groups, bhs = [], [], [], [], [], [], []
    for k, (obj, sign, mo) in enumerate(((obj1, -1.0, m2), (obj2, 1.0, m1))):
        cx = sign * mo / mtot * rel_x
        cv = sign * mo / mtot * rel_v
        start = len(ms)
        if obj.is_binary:
            u = uniforms[4 * k: 4 * k + 4]
            rot = _rotation_matrix(u[0], u[1], u[2])
            r, w = kepler_relative(obj.mass, obj.a, obj.e, 2.0 * math.pi * u[3])
            r, w = rot @ r, rot @ w
            ma, mb = obj.masses
            xs += [cx - mb / obj.mass * r, cx + ma / obj.mass * r]
            vs += [cv - mb / obj.mass * w, cv + ma / obj.mass * w]
        else:
            xs.append(cx)
            vs.append(cv)
        ms += list(obj.masses)
        rs += list(obj.radii)
        bhs += [int(f) for f in obj.bh_flags]
        ids += list(obj.ids)
        groups.append(tuple(range(start, len(ms))))
    return InitialState(np.array(xs), np.array(vs), np.array(ms), np.array(rs), ids, groups,
                        (obj1, obj2), float(v_inf), float(b), r_start, float(rp),
                        np.array(bhs, dtype=np.int64))


def sample_encounter(obj1: StarObject, obj2: StarObject, v_inf: float, rp_max: float,
                     states: np.ndarray, row: int, tidal_tol: float = 1e-5) -> InitialState:
    """Draw an encounter from one lfsr113 sub-stream (``states[row]``, advanced in place).

    The impact parameter is ``b = sqrt(u) b_max`` with ``b_max`` the one whose focused
    pericentre is ``rp_max`` (CMC: ``rp_max = 2 a`` binary-single, ``2 (a1 + a2)``
    binary-binary); then orientation and phase of each binary.  Always draws
    :data:`DRAWS_PER_ENCOUNTER` numbers.
    """
    if not (math.isfinite(rp_max) and rp_max > 0):
        raise ValueError(f"rp_max must be positive and finite, got {rp_max}")
    u = np.array([taus_uniform(states, row) for _ in range(DRAWS_PER_ENCOUNTER)])
    b = math.sqrt(u[0]) * pericentre_impact_parameter(obj1.mass + obj2.mass, v_inf, rp_max)
    return initial_state(obj1, obj2, v_inf, b, u[1:], tidal_tol)


def draw_recoil_uniforms(state: InitialState, settings: EncounterSettings,
                         states: np.ndarray, row: int) -> None:
    """Draw the recoil angles of an encounter with the 2.5PN term (``settings.clight > 0``
    and two or more black holes): :data:`RECOIL_DRAWS` uniforms from ``states[row]`` into
    ``state.recoil_uniforms``; other encounters draw nothing."""
    if settings.clight > 0.0 and state.post_newtonian:
        state.recoil_uniforms = np.array([taus_uniform(states, row)
                                          for _ in range(RECOIL_DRAWS)])


# ---------------------------------------------------------------------------
# integration
# ---------------------------------------------------------------------------
def _integrate_ar(state: InitialState, settings: EncounterSettings) -> Outcome:
    scales = _scales(state)
    scale_m, scale_l, scale_v, scale_t = scales
    n = state.m.size
    x = np.ascontiguousarray(state.x / scale_l)
    v = np.ascontiguousarray(state.v / scale_v)
    m = state.m / scale_m
    rad = state.radius / scale_l
    members = (1 << np.arange(n)).astype(np.int64)
    tree = _empty_tree(n)
    tx, tv, tm, ta, te, ch, top = tree
    istats = np.zeros(fk.N_ISTATS, dtype=np.int64)
    fstats = np.zeros(8)
    # first step: a small fraction of the tightest binary's orbit in the regularised time
    # (ds = U dt; one orbit is m1 m2 P / a)
    hstep = math.inf
    for obj in state.objects:
        if obj.is_binary:
            m1, m2 = obj.masses[0] / scale_m, obj.masses[1] / scale_m
            a = obj.a / scale_l
            hstep = min(hstep, 0.05 * m1 * m2 * 2 * math.pi * math.sqrt(a / (m1 + m2)))
    period = max(o.period for o in state.objects) / scale_t
    status, n_end = fk.integrate_encounter(
        x, v, m, rad, members, n, hstep, settings.tol, settings.kmax, fi.SEQUENCE,
        settings.tidal_tol, settings.jump_tol,
        settings.t_max_periods * period, settings.max_steps, settings.classify_every,
        settings.merger_radius_factor, tx, tv, tm, ta, te, ch, top, istats, fstats,
        state.is_bh.copy(), settings.clight / scale_v, np.ascontiguousarray(
            state.recoil_uniforms, dtype=np.float64), settings.collapse_tol)
    tree_out = (tx, tv, tm, ta, te, ch, top, int(fstats[2]), int(fstats[3]))
    return _finish(state, status, n_end, x, v, m, rad, members, tree_out, istats,
                   float(fstats[0]), float(fstats[1]), settings, scales, float(fstats[4]),
                   fstats[5:8].copy())


def integrate(state: InitialState, settings: EncounterSettings | None = None) -> Outcome:
    """Integrate a prepared encounter with the chosen integrator and classify the outcome."""
    settings = settings or EncounterSettings()
    if settings.integrator == "ias15":
        if settings.clight > 0.0 and state.post_newtonian:
            raise ValueError("the 2.5PN term (clight > 0) needs integrator 'ar'")
        return integrate_ias15(state, settings)
    return _integrate_ar(state, settings)


def scatter(obj1: StarObject, obj2: StarObject, v_inf: float, rp_max: float,
            states: np.ndarray, row: int, settings: EncounterSettings | None = None) -> Outcome:
    """Draw an encounter from ``states[row]`` and run it (see :func:`sample_encounter`)."""
    settings = settings or EncounterSettings()
    state = sample_encounter(obj1, obj2, v_inf, rp_max, states, row, settings.tidal_tol)
    draw_recoil_uniforms(state, settings, states, row)
    return integrate(state, settings)
