"""The one definition of a star's fields.

Every star field is declared here once, with its dtype, unit and meaning.  This table drives
the in-memory container (:class:`cmc.stars.StarTable`), the HDF5 snapshot and checkpoint
columns, and the records exchanged by the MPI sort.  ``saved`` fields are written to snapshots
and checkpoints; the others are scratch values a star carries through one step (through the
parallel sort), so a checkpoint taken between steps does not need them.

Units are Hénon (N-body) units: G = 1, initial total mass M0 = 1, initial energy -1/4.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from physics.stellar_evolution import MEMBER_QUANTITIES, OBJECT_TIMES, member_field, single_field


@dataclass(frozen=True)
class Field:
    """One column of the star table."""

    name: str
    dtype: str
    unit: str
    meaning: str
    saved: bool = True
    default: float = 0


STAR_FIELDS: tuple[Field, ...] = (
    Field("id", "int64", "", "unique star identifier, kept for the star's whole life", default=-1),
    Field("m", "float64", "M0", "mass (Hénon units: initial cluster mass = 1)"),
    Field("r", "float64", "r_vir", "radial position (Hénon length unit = virial radius)"),
    Field("vr", "float64", "v_NB", "radial velocity (Hénon velocity unit)"),
    Field("vt", "float64", "v_NB", "transverse speed, >= 0 (Hénon velocity unit)"),
    Field("binind", "int64", "", "row in the binary table, -1 for a single star", default=-1),
    Field("startype", "int32", "", "stellar type (BSE k-type; 1 = main sequence)", default=1),
    Field("rad", "float64", "Rsun", "stellar radius (0 until stellar evolution sets it)"),
    Field("m_msun", "float64", "Msun", "mass in solar masses (from the mass function)"),
    Field("old_index", "int64", "", "global index (radial rank) before this step's orbit "
          "sampling", saved=False, default=-1),
    Field("dphi_old", "float64", "v_NB^2", "old potential at the new radius less the old "
          "potential at the old radius, own shell removed (the energy correction's first term)",
          saved=False),
)

#: The binary table.  A binary is one object of the star table (its centre of mass: ``m`` is
#: the sum of the members' masses, ``r``, ``vr``, ``vt`` its orbit in the cluster) with
#: ``binind >= 0``; its internals are these fields.  In memory and in the MPI records they are
#: columns of the star table, present only in runs with binaries, so a binary moves with its
#: centre of mass through the sort and redistribution with no separate path.  Snapshots and
#: checkpoints write them as a ``binaries`` group holding the binary rows only, each with
#: ``star_row``, the row of its centre of mass in the ``stars`` group.
BINARY_FIELDS: tuple[Field, ...] = (
    Field("bin_id1", "int64", "", "id of the first member", default=-1),
    Field("bin_id2", "int64", "", "id of the second member", default=-1),
    Field("bin_m1", "float64", "M0", "mass of the first member"),
    Field("bin_m2", "float64", "M0", "mass of the second member"),
    Field("bin_a", "float64", "r_vir", "semi-major axis"),
    Field("bin_e", "float64", "", "eccentricity"),
    Field("bin_rad1", "float64", "Rsun", "radius of the first member"),
    Field("bin_rad2", "float64", "Rsun", "radius of the second member"),
    Field("bin_startype1", "int32", "", "stellar type of the first member", default=1),
    Field("bin_startype2", "int32", "", "stellar type of the second member", default=1),
    Field("bin_m1_msun", "float64", "Msun", "mass of the first member in solar masses"),
    Field("bin_m2_msun", "float64", "Msun", "mass of the second member in solar masses"),
)

#: The BSE state of stellar evolution (:mod:`physics.stellar_evolution`), present exactly in
#: runs with ``bse.stellar_evolution`` on.  A star's type, mass in Msun and radius are the
#: fields above (``startype``, ``m_msun``, ``rad``; ``bin_startype{j}``, ``bin_m{j}_msun``,
#: ``bin_rad{j}``); these add the rest of its BSE state (``se_<q>`` for a single star) and the
#: object's clock (``se_tphys``, ``se_t_next``, for a single star or a binary alike).  Like the
#: binary fields they are columns of the star table, so they travel through the sort with no
#: separate path; snapshots and checkpoints write them in the ``stars`` group.
SE_FIELDS: tuple[Field, ...] = tuple(
    Field(single_field(q), "float64", unit, meaning) for q, (unit, meaning)
    in MEMBER_QUANTITIES.items()) + tuple(
    Field(name, "float64", unit, meaning) for name, (unit, meaning) in OBJECT_TIMES.items())

#: The BSE state of binary members (runs with binaries and stellar evolution): written with
#: the binary fields in the ``binaries`` group.
SE_BINARY_FIELDS: tuple[Field, ...] = tuple(
    Field(member_field(q, j), "float64", unit, f"{meaning} of the {('first', 'second')[j - 1]} "
          "member") for j in (1, 2) for q, (unit, meaning) in MEMBER_QUANTITIES.items())

#: Radial time-step zones (``run.zones`` > 1; :mod:`cmc.processes.zones`), present exactly in
#: runs with them: each star's zone (set from its orbit's pericentre at each of its steps, so
#: that when it is due does not depend on where on its orbit it was drawn) and its clock (its
#: relaxation covers the time since its own last step, so a star that changes zones is
#: relaxed for the time that passed, neither twice nor never).  New objects (products) have
#: zone 0 (due at once) and a NaN clock (started at the end of the step that made them).
ZONE_FIELDS: tuple[Field, ...] = (
    Field("zone", "int32", "", "time-step zone: the star is stepped in the steps whose number "
          "is a multiple of 2^zone (runs with time-step zones)"),
    Field("t_last", "float64", "t_rel", "time to which the star's relaxation has been applied "
          "(runs with time-step zones)", default=float("nan")),
)

FIELD_BY_NAME: dict[str, Field] = {f.name: f for f in STAR_FIELDS + BINARY_FIELDS + SE_FIELDS
                                   + SE_BINARY_FIELDS + ZONE_FIELDS}
SAVED_FIELDS: tuple[str, ...] = tuple(f.name for f in STAR_FIELDS if f.saved)
BINARY_NAMES: tuple[str, ...] = tuple(f.name for f in BINARY_FIELDS)
SE_NAMES: tuple[str, ...] = tuple(f.name for f in SE_FIELDS)
SE_BINARY_NAMES: tuple[str, ...] = tuple(f.name for f in SE_BINARY_FIELDS)
ZONE_NAMES: tuple[str, ...] = tuple(f.name for f in ZONE_FIELDS)


def table_fields(binaries: bool, stellar_evolution: bool = False, zones: bool = False
                 ) -> tuple[Field, ...]:
    """Every column of a star table: the star fields, and the binary, stellar-evolution and
    time-step-zone fields in runs that have them."""
    return (STAR_FIELDS + (BINARY_FIELDS if binaries else ())
            + (SE_FIELDS if stellar_evolution else ())
            + (SE_BINARY_FIELDS if binaries and stellar_evolution else ())
            + (ZONE_FIELDS if zones else ()))


def saved_names(binaries: bool, stellar_evolution: bool = False, zones: bool = False
                ) -> tuple[str, ...]:
    """The columns written to snapshots and checkpoints."""
    return tuple(f.name for f in table_fields(binaries, stellar_evolution, zones) if f.saved)


def record_dtype() -> np.dtype:
    """Packed record dtype of one star (all fields), used for MPI exchange."""
    return np.dtype([(f.name, f.dtype) for f in STAR_FIELDS])


#: The escaper table (``escapers.h5``): one row per object that left the cluster, with the
#: saved star fields (and the binary columns in runs with binaries) as they were when it left,
#: plus these.  Rows of a step are in a fixed order (kind, then id), so the table is the same
#: bits for any number of ranks and across restarts.
ESCAPER_FIELDS: tuple[Field, ...] = (
    Field("step", "int64", "", "step in which the object left"),
    Field("time", "float64", "t_rel", "time at the end of that step (t_NB N0 / ln(gamma N0))"),
    Field("kind", "int8", "", "how it left: 1 unbound (phi + v^2/2 >= 0), 2 stripped by the "
          "tidal field (apocentre beyond r_tidal), 3 ejected by a binary process"),
    Field("E", "float64", "v_NB^2", "specific energy phi + v^2/2 when it left (phi: the "
          "potential of the other stars at r)"),
    Field("J", "float64", "r_vir v_NB", "specific angular momentum r vt"),
    Field("r_tidal", "float64", "r_vir", "tidal radius of the step (0: isolated)"),
)
ESCAPE_UNBOUND = 1
ESCAPE_TIDAL = 2
ESCAPE_EJECTED = 3


def escaper_columns(binaries: bool, stellar_evolution: bool = False) -> tuple[Field, ...]:
    """Columns of the escaper table: :data:`ESCAPER_FIELDS`, the saved star fields and, in
    runs with binaries or stellar evolution, their fields."""
    return ESCAPER_FIELDS + tuple(f for f in table_fields(binaries, stellar_evolution)
                                  if f.saved)
