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
    Field("phi_oo", "float64", "v_NB^2", "old potential at old radius, own shell removed",
          saved=False),
    Field("phi_on", "float64", "v_NB^2", "old potential at new radius, own shell removed",
          saved=False),
)

FIELD_BY_NAME: dict[str, Field] = {f.name: f for f in STAR_FIELDS}
SAVED_FIELDS: tuple[str, ...] = tuple(f.name for f in STAR_FIELDS if f.saved)


def record_dtype() -> np.dtype:
    """Packed record dtype of one star (all fields), used for MPI exchange."""
    return np.dtype([(f.name, f.dtype) for f in STAR_FIELDS])
