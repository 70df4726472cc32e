"""Stellar evolution through COSMIC's BSE (``cosmic._evolvebin.evolv2``): single stars and
binaries evolved from their last call to a new time, as CMC-COSMIC does.

This module names the per-star BSE state that the star table carries (the table's fields are
declared from these names in :mod:`cmc.fields`).  A star's BSE state is its stellar type
(``startype`` / ``bin_startype{j}``), its mass (``m_msun`` / ``bin_m{j}_msun``) and radius
(``rad`` / ``bin_rad{j}``), which every run has, plus :data:`MEMBER_QUANTITIES`, present only
when stellar evolution is on.  Per object (single star or binary) there are also
``se_tphys`` (time of its last BSE call) and ``se_t_next`` (when it must next be evolved).
"""

from __future__ import annotations

#: Per-star BSE quantities beyond type, mass and radius: name -> (unit, meaning).
MEMBER_QUANTITIES: dict[str, tuple[str, str]] = {
    "mass0": ("Msun", "BSE's initial mass (reset at phase changes and by mass transfer)"),
    "lum": ("Lsun", "luminosity"),
    "massc": ("Msun", "core mass"),
    "radc": ("Rsun", "core radius"),
    "menv": ("Msun", "mass of the convective envelope"),
    "renv": ("Rsun", "radius of the convective envelope"),
    "ospin": ("1/yr", "spin angular frequency"),
    "b0": ("G", "magnetic field (pulsars)"),
    "bacc": ("Msun", "mass accreted by a neutron star"),
    "tacc": ("Myr", "time spent accreting (neutron star)"),
    "epoch": ("Myr", "epoch: the star's age is tphys - epoch"),
    "tms": ("Myr", "main-sequence lifetime"),
    "bhspin": ("", "dimensionless black-hole spin"),
    "zams": ("Msun", "zero-age main-sequence mass"),
}

#: Per-object times: name -> (unit, meaning).
OBJECT_TIMES: dict[str, tuple[str, str]] = {
    "se_tphys": ("Myr", "time of the object's last stellar-evolution call"),
    "se_t_next": ("Myr", "time by which the object must next be evolved"),
}


def single_field(quantity: str) -> str:
    """Star-table field of ``quantity`` for a single star (``se_<quantity>``)."""
    return f"se_{quantity}"


def member_field(quantity: str, j: int) -> str:
    """Star-table field of ``quantity`` for member ``j`` (1 or 2) of a binary
    (``bin_se_<quantity>_<j>``)."""
    return f"bin_se_{quantity}_{j}"
