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

Units: G = 1 throughout; masses, lengths and velocities in any units consistent with that (the
cluster's Hénon units, or Msun, AU and sqrt(G Msun / AU) after conversion).  Internally each
encounter is scaled to total mass 1 and the widest binary's a = 1, so tolerances mean the same
at every scale; results are scaled back.

A function of its inputs only: the same objects, speed and stream state give the same outcome
bit for bit on any thread or rank (no wall-clock limits; the caps count steps and time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from parallel.rng import taus_uniform
from physics import fewbody_integrator as fi
from physics import fewbody_kernels as fk
from physics.binaries import binding_energy

__all__ = [
    "DRAWS_PER_ENCOUNTER",
    "EncounterSettings",
    "InitialState",
    "Outcome",
    "Product",
    "StarObject",
    "binary",
    "critical_velocity",
    "initial_state",
    "integrate",
    "sample_encounter",
    "scatter",
    "single",
]

#: Uniform draws per encounter: 1 (impact parameter) + 4 per binary (3 orientation, 1 phase),
#: always 9 so that the stream advances the same whatever the objects are.
DRAWS_PER_ENCOUNTER = 9

STATUS_NAMES = {
    fk.STATUS_DONE: "done",
    fk.STATUS_TIME_LIMIT: "time_limit",
    fk.STATUS_STEP_LIMIT: "step_limit",
    fk.STATUS_FAILED: "failed",
}


# ---------------------------------------------------------------------------
# objects and settings
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class StarObject:
    """A single star or a binary entering an encounter.

    Attributes
    ----------
    ids : tuple of int
        Star ids (one for a single, two for a binary); kept through the encounter.
    masses : tuple of float
        Member masses (G = 1 units).
    radii : tuple of float
        Member radii (0: point masses; > 0: sticky spheres that merge on contact).
    a : float
        Semi-major axis of a binary (0 for a single).
    e : float
        Eccentricity of a binary, ``0 <= e < 1``.
    """

    ids: tuple[int, ...]
    masses: tuple[float, ...]
    radii: tuple[float, ...]
    a: float = 0.0
    e: float = 0.0

    def __post_init__(self) -> None:
        k = len(self.ids)
        if k not in (1, 2) or len(self.masses) != k or len(self.radii) != k:
            raise ValueError("an object is one star or a binary of two: ids, masses, radii")
        if not all(math.isfinite(m) and m > 0 for m in self.masses):
            raise ValueError(f"masses must be positive and finite, got {self.masses}")
        if not all(math.isfinite(r) and r >= 0 for r in self.radii):
            raise ValueError(f"radii must be >= 0 and finite, got {self.radii}")
        if k == 2:
            if not (math.isfinite(self.a) and self.a > 0):
                raise ValueError(f"binary semi-major axis must be > 0, got {self.a}")
            if not (0.0 <= self.e < 1.0):
                raise ValueError(f"binary eccentricity must be in [0, 1), got {self.e}")

    @property
    def is_binary(self) -> bool:
        return len(self.ids) == 2

    @property
    def mass(self) -> float:
        return float(sum(self.masses))

    @property
    def binding_energy(self) -> float:
        """Internal energy ``-m1 m2 / (2 a)`` (0 for a single)."""
        if not self.is_binary:
            return 0.0
        return float(binding_energy(self.masses[0], self.masses[1], self.a))

    @property
    def period(self) -> float:
        """Orbital period of a binary (0 for a single)."""
        if not self.is_binary:
            return 0.0
        return 2.0 * math.pi * math.sqrt(self.a ** 3 / self.mass)


def single(star_id: int, m: float, radius: float = 0.0) -> StarObject:
    """A single star."""
    return StarObject((int(star_id),), (float(m),), (float(radius),))


def binary(ids: tuple[int, int], masses: tuple[float, float], a: float, e: float = 0.0,
           radii: tuple[float, float] = (0.0, 0.0)) -> StarObject:
    """A binary of two stars."""
    return StarObject((int(ids[0]), int(ids[1])), (float(masses[0]), float(masses[1])),
                      (float(radii[0]), float(radii[1])), float(a), float(e))


@dataclass(frozen=True)
class EncounterSettings:
    """Tolerances and caps of one encounter.

    Attributes
    ----------
    integrator : {"ar", "ias15"}
        "ar": our logarithmic-Hamiltonian leapfrog with Bulirsch-Stoer extrapolation (numba);
        "ias15": REBOUND's IAS15 (reference, slower).
    tol : float
        Relative tolerance of the Bulirsch-Stoer step on every pair's separation and relative
        velocity ("ar"); IAS15 uses its own ``epsilon`` (``ias15_epsilon``).
    ias15_epsilon : float
        IAS15's precision parameter (REBOUND's default 1e-9).
    tidal_tol : float
        Tidal perturbation below which a bound object counts as isolated (CMC: 1e-5); also sets
        the starting distance.
    jump_tol : float
        Tidal perturbation below which a wide bound excursion of a binary and a single (or two
        binaries) is skipped as two Kepler orbits ("ar" only; see
        :func:`physics.fewbody_kepler.kepler_jump`); 0 integrates every excursion.
    collapse_tol : float
        Tidal perturbation below which an isolated binary is integrated as one body, its
        internal orbit advanced as a Kepler orbit ("ar" only, point masses only; Fewbody
        collapses isolated binaries the same way; see
        :func:`physics.fewbody_kepler.collapse_isolated`); 0 (default) never.  The cluster
        uses 1e-7 (``binaries.collapse_tol``): a tight binary meeting a wide one otherwise
        costs up to 10^6 steps; 1e-6 left energy errors up to 1e-3 of the binding energy.
    t_max_periods : float
        Cap on integration time (physical time, jumps included), in periods of the widest
        initial binary (an encounter that reaches it ends with status "time_limit" and is to be
        discarded).
    max_steps : int
        Cap on accepted integration steps ("step_limit").
    classify_every : int
        Classify every this many accepted steps ("ar"); IAS15 classifies every
        ``ias15_check_periods`` periods.
    ias15_check_periods : float
        Interval between classifications for IAS15, in initial periods.
    kmax : int
        Most Bulirsch-Stoer extrapolation rows per step (3..12).
    merger_radius_factor : float
        Radius of a merger product in units of the sum of the two radii (Fewbody's f_exp = 1).
    energy_tol : float
        An encounter whose relative energy error (to the initial internal binding energy) or
        angular momentum error (to the initial binaries' internal angular momentum) exceeds
        this is marked invalid, as CMC discards it.
    """

    integrator: Literal["ar", "ias15"] = "ar"
    tol: float = 5e-13
    ias15_epsilon: float = 1e-9
    tidal_tol: float = 1e-5
    jump_tol: float = 1e-6
    collapse_tol: float = 0.0
    t_max_periods: float = 1e6
    max_steps: int = 50_000_000
    classify_every: int = 8
    ias15_check_periods: float = 2.0
    kmax: int = 12
    merger_radius_factor: float = 1.0
    energy_tol: float = 1e-3

    def __post_init__(self) -> None:
        if self.integrator not in ("ar", "ias15"):
            raise ValueError(f"integrator must be 'ar' or 'ias15', got {self.integrator!r}")
        if not (math.isfinite(self.jump_tol) and 0 <= self.jump_tol <= self.tidal_tol):
            raise ValueError(f"jump_tol must be in [0, tidal_tol], got {self.jump_tol}")
        if not (math.isfinite(self.collapse_tol) and 0 <= self.collapse_tol <= self.tidal_tol):
            raise ValueError(f"collapse_tol must be in [0, tidal_tol], got {self.collapse_tol}")
        for name in ("tol", "ias15_epsilon", "tidal_tol", "t_max_periods",
                     "ias15_check_periods", "merger_radius_factor", "energy_tol"):
            val = getattr(self, name)
            if not (math.isfinite(val) and val > 0):
                raise ValueError(f"{name} must be positive and finite, got {val}")
        if not (3 <= self.kmax <= fi.KMAX):
            raise ValueError(f"kmax must be in 3..{fi.KMAX}, got {self.kmax}")
        if self.max_steps < 1 or self.classify_every < 1:
            raise ValueError("max_steps and classify_every must be >= 1")


def critical_velocity(obj1: StarObject, obj2: StarObject) -> float:
    """Speed at infinity at which the total energy is zero (Hut & Bahcall 1983).

    ``v_c^2 = (M1 + M2) / (M1 M2) * sum over binaries of m_a m_b / a``; for an equal-mass
    binary and single, ``1.5 m / a``.
    """
    m1, m2 = obj1.mass, obj2.mass
    eb = -2.0 * (obj1.binding_energy + obj2.binding_energy)
    if eb <= 0:
        raise ValueError("critical velocity needs at least one binary")
    return math.sqrt((m1 + m2) / (m1 * m2) * eb)


# ---------------------------------------------------------------------------
# set-up
# ---------------------------------------------------------------------------
@dataclass
class InitialState:
    """Bodies at the start of the integration (centre-of-mass frame, G = 1).

    Attributes
    ----------
    x, v : ndarray, shape (n, 3)
    m, radius : ndarray, shape (n,)
    ids : list of int
        Star id of each body.
    groups : list of tuple of int
        Body indices of each incoming object (binary members together).
    objects : tuple of StarObject
    v_inf, b, r_start, r_peri : float
        Relative speed at infinity, impact parameter, starting separation, two-body pericentre
        of the incoming objects' centres of mass.
    """

    x: np.ndarray
    v: np.ndarray
    m: np.ndarray
    radius: np.ndarray
    ids: list[int]
    groups: list[tuple[int, ...]]
    objects: tuple[StarObject, StarObject]
    v_inf: float
    b: float
    r_start: float
    r_peri: float

    @property
    def energy(self) -> float:
        n = self.m.size
        return float(fi.kinetic_energy(self.v, self.m, n) - fi.potential_energy(self.x, self.m, n))


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
    xs, vs, ms, rs, ids, groups = [], [], [], [], [], []
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
        ids += list(obj.ids)
        groups.append(tuple(range(start, len(ms))))
    return InitialState(np.array(xs), np.array(vs), np.array(ms), np.array(rs), ids, groups,
                        (obj1, obj2), float(v_inf), float(b), r_start, float(rp))


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


# ---------------------------------------------------------------------------
# outcome
# ---------------------------------------------------------------------------
@dataclass
class Product:
    """One object of the outcome (a node of the hierarchy).

    Attributes
    ----------
    ids : tuple of int
        Star ids of all its members (a merger product has several in one body).
    m : float
        Mass.
    x, v : ndarray, shape (3,)
        Centre-of-mass position and velocity in the encounter's centre-of-mass frame at the end.
    v_inf : ndarray, shape (3,)
        Velocity at infinity (top-level objects; velocities scaled by
        ``sqrt(1 + PE_outer / KE_outer)`` as CMC does).
    a, e : float
        Orbit of the two children (0 for a single body).
    children : list of Product
        Empty for a single body; two for a binary or a hierarchy.
    radius : float
        Radius of a single body (merger products: the merged radius).
    """

    ids: tuple[int, ...]
    m: float
    x: np.ndarray
    v: np.ndarray
    a: float = 0.0
    e: float = 0.0
    children: list[Product] = field(default_factory=list)
    radius: float = 0.0
    v_inf: np.ndarray | None = None

    @property
    def n_bodies(self) -> int:
        return 1 if not self.children else sum(c.n_bodies for c in self.children)

    @property
    def is_single(self) -> bool:
        return not self.children

    @property
    def is_binary(self) -> bool:
        return len(self.children) == 2 and all(c.is_single for c in self.children)

    @property
    def internal_energy(self) -> float:
        """Sum of the binding energies ``-m1 m2 / (2 a)`` of this node and every inner node."""
        if not self.children:
            return 0.0
        c1, c2 = self.children
        return (float(binding_energy(c1.m, c2.m, self.a)) + c1.internal_energy
                + c2.internal_energy)

    def notation(self) -> str:
        """Fewbody's notation: ``[0 1]`` a binary, ``[[0 1] 2]`` a triple, ``0:1`` a merger."""
        if not self.children:
            return ":".join(str(i) for i in self.ids)
        return "[" + " ".join(c.notation() for c in self.children) + "]"


@dataclass
class Outcome:
    """What came out of an encounter.

    Attributes
    ----------
    status : str
        "done", "time_limit", "step_limit" or "failed".
    kind : str
        "preservation" (flyby: the incoming objects come out as they went in), "exchange" (a
        bound object pairs stars that came in separately), "ionisation" (fewer binaries out than
        in, none new), "merger", "triple" (a stable hierarchical triple), "quadruple" (a bound
        four-body object) or "unresolved" (status is not "done").
    valid : bool
        False when the caller should discard the encounter (as CMC does): unfinished, a
        quadruple, or an energy / angular momentum error above ``energy_tol``.
    reason : str
        Why it is invalid ("" when valid).
    products : list of Product
        Top-level objects at the end, with their hierarchy.
    hierarchy : str
        Fewbody-style notation of the products, e.g. ``"[0 2] 1"``.
    de_internal : float
        Internal energy (binding energies of all bound objects) out minus in; the kinetic energy
        at infinity of the products changes by ``-de_internal - de_merger`` (energy given to
        the cluster).
    de_merger : float
        Energy change in mergers (total energy just after minus just before; the pair's
        relative kinetic energy is lost and its mutual potential energy removed).
    de_rel, dl_rel : float
        Energy error relative to the initial internal binding energy |E_b|; angular momentum
        error relative to the initial binaries' internal angular momentum.
    t_end : float
        Integration time; ``t_end_periods`` in initial periods of the widest binary.
    n_steps, n_rejected, n_forces, n_jumps : int
        Integrator work (steps of the method; force evaluations and Kepler jumps for "ar").
    exchanges, ionisations, mergers, n_binaries_in, n_binaries_out : int
        Counts.
    """

    status: str
    kind: str
    valid: bool
    reason: str
    products: list[Product]
    hierarchy: str
    de_internal: float
    de_merger: float
    de_rel: float
    dl_rel: float
    t_end: float
    t_end_periods: float
    n_steps: int
    n_rejected: int
    n_forces: int
    n_jumps: int
    exchanges: int
    ionisations: int
    mergers: int
    n_binaries_in: int
    n_binaries_out: int
    initial: InitialState | None = None

    def binaries(self) -> list[Product]:
        """Every binary among the products (including inner binaries of triples)."""
        return [p for p in _walk_all(self.products) if p.is_binary]


def _tree_to_products(node: int, tx, tv, tm, ta, te, ch, members, rad, ids, scale_l, scale_v,
                      scale_m) -> Product:
    if ch[node, 0] < 0:
        mask = int(members[node])
        mids = tuple(ids[i] for i in range(len(ids)) if mask >> i & 1)
        return Product(mids, float(tm[node] * scale_m), tx[node] * scale_l, tv[node] * scale_v,
                       radius=float(rad[node] * scale_l))
    kids = [_tree_to_products(int(ch[node, c]), tx, tv, tm, ta, te, ch, members, rad, ids,
                              scale_l, scale_v, scale_m) for c in range(2)]
    kids.sort(key=lambda p: min(p.ids))
    allids = tuple(sorted(i for k in kids for i in k.ids))
    return Product(allids, float(tm[node] * scale_m), tx[node] * scale_l, tv[node] * scale_v,
                   a=float(ta[node] * scale_l), e=float(te[node]), children=kids)


def _velocities_at_infinity(products: list[Product]) -> None:
    """CMC's rescaling of the top-level velocities to infinity (centre-of-mass frame)."""
    ke = sum(0.5 * p.m * float(p.v @ p.v) for p in products)
    pe = 0.0
    for i, p in enumerate(products):
        for q in products[i + 1:]:
            pe -= p.m * q.m / float(np.linalg.norm(p.x - q.x))
    fac = math.sqrt(max(0.0, 1.0 + pe / ke)) if ke > 0 else 0.0
    for p in products:
        p.v_inf = p.v * fac


def _classify_kind(state: InitialState, products: list[Product], n_mergers: int
                   ) -> tuple[str, int, int, int, int]:
    """Name the outcome and count exchanges and ionisations."""
    in_groups = [tuple(sorted(state.ids[i] for i in g)) for g in state.groups]
    same_origin = {i: k for k, g in enumerate(in_groups) for i in g}
    n_in = sum(1 for g in in_groups if len(g) == 2)
    binaries = [p for p in _walk_all(products) if p.is_binary]
    n_out = len(binaries)
    exchanges = 0
    for bnode in binaries:
        origins = {same_origin[i] for i in bnode.ids}
        if len(origins) > 1 or tuple(sorted(bnode.ids)) not in in_groups:
            exchanges += 1
    ionisations = max(0, n_in - (n_out - exchanges))
    if n_mergers:
        kind = "merger"
    elif any(p.n_bodies >= 4 for p in products):
        kind = "quadruple"
    elif any(p.n_bodies == 3 for p in products):
        kind = "triple"
    elif exchanges:
        kind = "exchange"
    elif n_out < n_in:
        kind = "ionisation"
    else:
        kind = "preservation"
    return kind, exchanges, ionisations, n_in, n_out


def _walk_all(products: list[Product]) -> list[Product]:
    out: list[Product] = []

    def walk(p: Product) -> None:
        out.append(p)
        for c in p.children:
            walk(c)

    for p in products:
        walk(p)
    return out


def _internal_angular_momentum(state: InitialState) -> float:
    """Sum over incoming binaries of the internal angular momentum mu sqrt(M a (1 - e^2))."""
    tot = 0.0
    for obj in state.objects:
        if obj.is_binary:
            m1, m2 = obj.masses
            mu = m1 * m2 / (m1 + m2)
            tot += mu * math.sqrt((m1 + m2) * obj.a * max(1.0 - obj.e ** 2, 1e-12))
    return tot


def _finish(state: InitialState, status: int, n: int, x, v, m, rad, members, tree, istats,
            t_end: float, de_merge: float, settings: EncounterSettings, scales) -> Outcome:
    """Decode the kernels' hierarchy into an :class:`Outcome` (physical units)."""
    scale_m, scale_l, scale_v, scale_t = scales
    tx, tv, tm, ta, te, ch, top, n_nodes, n_top = tree
    ids = state.ids
    products = [_tree_to_products(int(top[k]), tx, tv, tm, ta, te, ch, members, rad, ids,
                                  scale_l, scale_v, scale_m) for k in range(n_top)]
    products.sort(key=lambda p: min(p.ids))
    _velocities_at_infinity(products)
    n_mergers = len(ids) - n
    kind, exchanges, ionisations, n_in, n_out = _classify_kind(state, products, n_mergers)
    # conservation, in scaled units
    e_end = fi.kinetic_energy(v, m, n) - fi.potential_energy(x, m, n)
    e0 = state.energy / (scale_m * scale_v ** 2)
    e_bind = abs(sum(o.binding_energy for o in state.objects)) / (scale_m * scale_v ** 2)
    de_rel = abs(e_end - e0 - de_merge) / e_bind
    l0 = np.empty(3)
    l1 = np.empty(3)
    xs = state.x / scale_l
    vs = state.v / scale_v
    ms = state.m / scale_m
    fi.angular_momentum(xs, vs, ms, ms.size, l0)
    fi.angular_momentum(x, v, m, n, l1)
    l_int = _internal_angular_momentum(state) / (scale_m * scale_l * scale_v)
    dl_rel = float(np.linalg.norm(l1 - l0)) / l_int if n_mergers == 0 else 0.0
    e_int_in = sum(o.binding_energy for o in state.objects)
    e_int_out = sum(p.internal_energy for p in products)
    valid, reason = True, ""
    if status != fk.STATUS_DONE:
        valid, reason, kind = False, STATUS_NAMES[status], "unresolved"
    elif kind == "quadruple":
        valid, reason = False, "quadruple"
    elif not (de_rel <= settings.energy_tol):
        valid, reason = False, f"energy error {de_rel:.3g}"
    elif not (dl_rel <= settings.energy_tol):
        valid, reason = False, f"angular momentum error {dl_rel:.3g}"
    period = max(o.period for o in state.objects)
    t_phys = t_end * scale_t
    return Outcome(
        status=STATUS_NAMES[status], kind=kind, valid=valid, reason=reason, products=products,
        hierarchy=" ".join(p.notation() for p in products),
        de_internal=float(e_int_out - e_int_in), de_merger=float(de_merge * scale_m * scale_v ** 2),
        de_rel=float(de_rel), dl_rel=float(dl_rel), t_end=float(t_phys),
        t_end_periods=float(t_phys / period), n_steps=int(istats[fk.IST_STEPS]),
        n_rejected=int(istats[fk.IST_REJECTED]), n_forces=int(istats[fk.IST_FORCES]),
        n_jumps=int(istats[fk.IST_JUMPS]),
        exchanges=exchanges, ionisations=ionisations, mergers=n_mergers, n_binaries_in=n_in,
        n_binaries_out=n_out, initial=state)


def _scales(state: InitialState) -> tuple[float, float, float, float]:
    """Mass, length, velocity and time units of the scaled problem (M = 1, widest a = 1)."""
    scale_m = float(state.m.sum())
    scale_l = max(o.a for o in state.objects)
    scale_v = math.sqrt(scale_m / scale_l)
    return scale_m, scale_l, scale_v, scale_l / scale_v


def _empty_tree(nmax: int):
    nt = 2 * nmax - 1
    return (np.zeros((nt, 3)), np.zeros((nt, 3)), np.zeros(nt), np.zeros(nt), np.zeros(nt),
            np.full((nt, 2), -1, dtype=np.int64), np.zeros(nmax, dtype=np.int64))


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
    fstats = np.zeros(4)
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
        settings.collapse_tol)
    tree_out = (tx, tv, tm, ta, te, ch, top, int(fstats[2]), int(fstats[3]))
    return _finish(state, status, n_end, x, v, m, rad, members, tree_out, istats,
                   float(fstats[0]), float(fstats[1]), settings, scales)


def integrate(state: InitialState, settings: EncounterSettings | None = None) -> Outcome:
    """Integrate a prepared encounter with the chosen integrator and classify the outcome."""
    settings = settings or EncounterSettings()
    if settings.integrator == "ias15":
        from physics.fewbody_rebound import integrate_ias15

        return integrate_ias15(state, settings)
    return _integrate_ar(state, settings)


def scatter(obj1: StarObject, obj2: StarObject, v_inf: float, rp_max: float,
            states: np.ndarray, row: int, settings: EncounterSettings | None = None) -> Outcome:
    """Draw an encounter from ``states[row]`` and run it (see :func:`sample_encounter`)."""
    settings = settings or EncounterSettings()
    state = sample_encounter(obj1, obj2, v_inf, rp_max, states, row, settings.tidal_tol)
    return integrate(state, settings)
