"""Few-body encounters: the objects that meet, the settings, and the initial state.

Part of the few-body encounter engine (:mod:`physics.fewbody` is its interface and re-exports
these names).  Holds :class:`StarObject` (a single star or a binary entering an encounter) with
:func:`single` and :func:`binary`, :class:`EncounterSettings` (tolerances and caps),
:func:`critical_velocity`, and :class:`InitialState` (the bodies at the start of the
integration, as :func:`physics.fewbody.initial_state` places them).  Both integrators,
:mod:`physics.fewbody` ("ar") and :mod:`physics.fewbody_rebound` ("ias15"), take these.

Units: G = 1 (see :mod:`physics.fewbody`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from physics import fewbody_integrator as fi
from physics.binaries import binding_energy


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
    black_holes : tuple of bool
        Which members are black holes (the 2.5PN term acts between them when
        :attr:`EncounterSettings.clight` is set); empty: none.
    """

    ids: tuple[int, ...]
    masses: tuple[float, ...]
    radii: tuple[float, ...]
    a: float = 0.0
    e: float = 0.0
    black_holes: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        k = len(self.ids)
        if k not in (1, 2) or len(self.masses) != k or len(self.radii) != k:
            raise ValueError("an object is one star or a binary of two: ids, masses, radii")
        if not all(math.isfinite(m) and m > 0 for m in self.masses):
            raise ValueError(f"masses must be positive and finite, got {self.masses}")
        if not all(math.isfinite(r) and r >= 0 for r in self.radii):
            raise ValueError(f"radii must be >= 0 and finite, got {self.radii}")
        if self.black_holes and len(self.black_holes) != k:
            raise ValueError("black_holes: one flag per member, or none")
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
    def bh_flags(self) -> tuple[bool, ...]:
        """One flag per member: a black hole."""
        return self.black_holes or (False,) * len(self.ids)

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


def single(star_id: int, m: float, radius: float = 0.0, black_hole: bool = False
           ) -> StarObject:
    """A single star."""
    return StarObject((int(star_id),), (float(m),), (float(radius),),
                      black_holes=(bool(black_hole),))


def binary(ids: tuple[int, int], masses: tuple[float, float], a: float, e: float = 0.0,
           radii: tuple[float, float] = (0.0, 0.0),
           black_holes: tuple[bool, bool] = (False, False)) -> StarObject:
    """A binary of two stars."""
    return StarObject((int(ids[0]), int(ids[1])), (float(masses[0]), float(masses[1])),
                      (float(radii[0]), float(radii[1])), float(a), float(e),
                      (bool(black_holes[0]), bool(black_holes[1])))


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
    clight : float
        The speed of light in the encounter's velocity unit (G = 1); > 0 switches on the
        2.5PN term between black holes and general-relativistic black-hole mergers in
        encounters with two or more black holes ("ar" only; CMC-COSMIC's PN25 with
        BH_CAPTURE); 0 (default): Newtonian.
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
    clight: float = 0.0

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
        if not (math.isfinite(self.clight) and self.clight >= 0):
            raise ValueError(f"clight must be >= 0 and finite, got {self.clight}")


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
# initial state
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
    is_bh : ndarray of int64, shape (n,)
        1 for a black hole.
    recoil_uniforms : ndarray
        Uniforms in (0, 1) for the recoil angles of black-hole mergers, in order (drawn only
        for encounters with the 2.5PN term; see :data:`physics.fewbody.RECOIL_DRAWS`).
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
    is_bh: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    recoil_uniforms: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        if self.is_bh.size == 0:
            self.is_bh = np.zeros(self.m.size, dtype=np.int64)

    @property
    def post_newtonian(self) -> bool:
        """Whether the encounter has two or more black holes (the 2.5PN term then acts,
        with :attr:`EncounterSettings.clight`)."""
        return int(np.count_nonzero(self.is_bh)) >= 2

    @property
    def energy(self) -> float:
        n = self.m.size
        return float(fi.kinetic_energy(self.v, self.m, n) - fi.potential_energy(self.x, self.m, n))
