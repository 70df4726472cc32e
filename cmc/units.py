"""Physical scale of a run: Hénon units to Msun, pc, km/s and Myr.

A run evolves in Hénon units (G = M = 1, E0 = -1/4, so the virial radius is 1).  Its physical
scale is set by two numbers chosen at set-up: the cluster's initial mass ``M0`` in Msun and its
virial radius ``r_vir`` in pc.  Then

- length unit: ``r_vir`` [pc];
- mass unit: ``M0`` [Msun];
- velocity unit: ``sqrt(G M0 / r_vir)`` [km/s];
- N-body time unit: ``t_NB = sqrt(r_vir^3 / (G M0))`` [Myr];
- relaxation time unit (the unit of the step loop's clock): ``t_rel = t_NB N0 / ln(gamma N0)``.

The constants (G, pc, Myr) come from astropy and are evaluated here, once, at set-up; kernels
never see them.  A :class:`Units` round-trips through HDF5 attributes (:meth:`Units.attrs`,
:meth:`Units.from_attrs`) so that every output carries its conversion factors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache


@lru_cache(maxsize=1)
def constants() -> dict[str, float]:
    """G [pc (km/s)^2 / Msun], the Myr per pc/(km/s) and the Rsun per pc, from astropy
    (set-up only)."""
    import astropy.constants as const
    import astropy.units as u

    g = const.G.to(u.pc * u.km ** 2 / u.s ** 2 / u.Msun).value
    myr_per_pc_kms = (1.0 * u.pc / (u.km / u.s)).to(u.Myr).value
    rsun_per_pc = (1.0 * u.pc).to(u.Rsun).value
    return {"G": float(g), "myr_per_pc_kms": float(myr_per_pc_kms),
            "rsun_per_pc": float(rsun_per_pc)}


#: HDF5 attribute names of the conversion factors, with their units.
ATTRS = {"unit_mass_msun": "Msun", "unit_length_pc": "pc", "unit_velocity_kms": "km/s",
         "unit_time_nb_myr": "Myr", "unit_time_rel_myr": "Myr"}


@dataclass(frozen=True)
class Units:
    """Conversion factors from Hénon units to physical ones.

    Parameters
    ----------
    mass_msun : float
        Mass unit: the cluster's initial mass [Msun].
    length_pc : float
        Length unit: the initial virial radius [pc].
    n0 : int
        Initial number of objects (sets the relaxation time unit).
    gamma : float
        Coulomb logarithm factor, ``ln(gamma N0)``.
    """

    mass_msun: float
    length_pc: float
    n0: int
    gamma: float

    def __post_init__(self):
        for name in ("mass_msun", "length_pc", "gamma"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0.0):
                raise ValueError(f"units: {name} must be positive and finite, not {float(v)!r}")
        if self.n0 < 1 or self.gamma * self.n0 <= 1.0:
            raise ValueError(f"units: ln(gamma N0) must be positive (gamma = {self.gamma}, "
                             f"N0 = {self.n0})")

    @property
    def velocity_kms(self) -> float:
        """Velocity unit ``sqrt(G M0 / r_vir)`` [km/s]."""
        return math.sqrt(constants()["G"] * self.mass_msun / self.length_pc)

    @property
    def length_rsun(self) -> float:
        """Length unit ``r_vir`` [Rsun] (stellar radii and binary separations of stellar
        evolution)."""
        return self.length_pc * constants()["rsun_per_pc"]

    @property
    def time_nb_myr(self) -> float:
        """N-body time unit ``r_vir / v_unit`` [Myr]."""
        return self.length_pc / self.velocity_kms * constants()["myr_per_pc_kms"]

    @property
    def time_rel_myr(self) -> float:
        """Relaxation time unit ``t_NB N0 / ln(gamma N0)`` [Myr] (the step loop's clock)."""
        return self.time_nb_myr * self.n0 / math.log(self.gamma * self.n0)

    def attrs(self) -> dict[str, float]:
        """The conversion factors as HDF5 attributes (see :data:`ATTRS`)."""
        return {"unit_mass_msun": self.mass_msun, "unit_length_pc": self.length_pc,
                "unit_velocity_kms": self.velocity_kms, "unit_time_nb_myr": self.time_nb_myr,
                "unit_time_rel_myr": self.time_rel_myr, "unit_n0": self.n0,
                "unit_gamma": self.gamma}

    @classmethod
    def from_attrs(cls, attrs) -> Units:
        """The units an output file was written with (its ``unit_*`` attributes)."""
        try:
            return cls(float(attrs["unit_mass_msun"]), float(attrs["unit_length_pc"]),
                       int(attrs["unit_n0"]), float(attrs["unit_gamma"]))
        except KeyError as exc:
            raise ValueError(f"no physical units in the file (attribute {exc} missing)") \
                from None

    def myr_to_rel(self, t_myr: float) -> float:
        """A time in Myr in relaxation units."""
        return t_myr / self.time_rel_myr

    def rel_to_myr(self, t_rel: float) -> float:
        """A time in relaxation units in Myr."""
        return t_rel * self.time_rel_myr


def jacobi_radius_pc(mass_msun: float, r_gc_kpc: float, v_c_kms: float) -> float:
    """Jacobi (tidal) radius of a cluster on a circular orbit in a point-mass galaxy [pc].

    ``r_J = (G M / (3 Omega^2))^(1/3)`` with ``Omega = v_c / R_gc``: the galaxy's mass inside
    the orbit, ``v_c^2 R_gc / G``, taken as a point (as CMC does;
    ``r_J = R_gc (M / (3 M_gal))^(1/3)``).

    Parameters
    ----------
    mass_msun : float
        Cluster mass [Msun].
    r_gc_kpc : float
        Galactocentric radius of the orbit [kpc].
    v_c_kms : float
        Circular speed at that radius [km/s].
    """
    if mass_msun <= 0.0 or r_gc_kpc <= 0.0 or v_c_kms <= 0.0:
        raise ValueError("jacobi radius: mass, R_gc and v_c must be positive")
    r_gc_pc = 1e3 * r_gc_kpc
    omega2 = (v_c_kms / r_gc_pc) ** 2  # (km/s/pc)^2
    return (constants()["G"] * mass_msun / (3.0 * omega2)) ** (1.0 / 3.0)
