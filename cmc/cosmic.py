"""COSMIC's CMC initial-condition files (``cosmic.sample.initialcmctable.InitialCMCTable``).

Layout (what COSMIC's ``InitialCMCTable.write`` puts in an ``.hdf5`` file, checked against
files COSMIC wrote): two pandas "fixed" frames,

- ``CLUS_OBJ_DATA``: one row per object, columns ``id, k, m, Reff, r, vr, vt, binind`` (all
  float64), with a sentinel row before the stars (``r`` = DBL_MIN, ``m`` = the central black
  hole's mass) and one after them (``r`` = 1e40).  ``m`` is in N-body units (the objects sum
  to 1; a binary's ``m`` is its members' sum), ``r, vr, vt`` in N-body units (G = M = 1,
  K = 1/4, W = -1/2), ``Reff`` in virial radii, ``binind`` the binary's row (from 1) in the
  binary table or 0 for a single star; ``k`` is the BSE stellar type.
- ``CLUS_BINARY_DATA``: ``index, id1, k1, m1, Reff1, id2, k2, m2, Reff2, a, e`` after one
  sentinel row of zeros; masses in N-body units, radii and ``a`` in virial radii.  A binary's
  object carries the id of its first member (``id == id1``).
- Attributes of ``CLUS_OBJ_DATA/block0_values``: ``NOBJ``, ``NBINARY``, ``MCLUS`` (the
  cluster's mass in Msun), ``RVIR`` (virial radius in pc), ``RTID`` (tidal radius in virial
  radii; COSMIC's default 1e6 means none) and ``Z`` (metallicity).

Reading needs only h5py.  Writing goes through pandas (``DataFrame.to_hdf`` needs PyTables),
as COSMIC's own writer does, so COSMIC's reader (``InitialCMCTable.read``, i.e.
``pandas.read_hdf``) loads the result; both come with the ``cosmic`` extra.

Mapping to the star table of :mod:`cmc.fields`: ids, masses, positions and velocities are
copied unchanged (no conversion, so a round trip keeps every bit); ``Reff`` becomes ``rad`` in
Rsun (``Reff RVIR / PARSEC_PER_RSUN``); a binary's object gets the id
``NEW_BINARY_ID_BASE + min(id1, id2)`` (our convention for binaries: apart from every star id)
and gets ``id1`` back when written.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import h5py
import numpy as np

from cmc.errors import InputError, is_not_writable, not_writable

log = logging.getLogger("cmc.cosmic")

OBJ_KEY = "CLUS_OBJ_DATA"
BIN_KEY = "CLUS_BINARY_DATA"
OBJ_COLUMNS = ("id", "k", "m", "Reff", "r", "vr", "vt", "binind")
BIN_COLUMNS = ("index", "id1", "k1", "m1", "Reff1", "id2", "k2", "m2", "Reff2", "a", "e")
#: COSMIC's conversion of stellar radii and separations (Rsun) to pc, in
#: ``InitialCMCTable.ScaleToNBodyUnits``; used both ways so that radii round-trip closely.
PARSEC_PER_RSUN = 2.2546101516664447e-08
#: COSMIC's default tidal radius (virial radii): no tidal limit.
RTID_NONE = 1e6
#: Sentinel radii of the first and last object rows.
R_FIRST = 2.2250738585072014e-308
R_LAST = 1e40
#: Tolerance on M = 1, K = 1/4 and W = -1/2 within which a file is taken as in N-body units.
NBODY_TOL = 1e-6


def refuse_fits(path: str | os.PathLike) -> None:
    """Raise :class:`InputError` for a COSMIC table written as FITS (not read: say how to
    write it as HDF5)."""
    if str(path).lower().endswith(".fits"):
        raise InputError(f"{path}: COSMIC's FITS files are not read; write the tables as HDF5 "
                         "(InitialCMCTable.write(singles, binaries, filename='x.hdf5'))")


def is_cosmic_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an HDF5 file with COSMIC's CMC tables (false for anything else)."""
    try:
        with h5py.File(path, "r") as fh:
            return OBJ_KEY in fh
    except OSError:
        return False


def _read_frame(fh: h5py.File, key: str, columns: tuple[str, ...], where: str) -> np.ndarray:
    """A pandas fixed-format frame as a (rows, len(columns)) float64 array, columns in the
    given order (each block of the frame holds some of the columns)."""
    if key not in fh:
        raise InputError(f"{where}: no '{key}' table (not a COSMIC CMC file)")
    g = fh[key]
    if g.attrs.get("pandas_type", b"") not in (b"frame", "frame"):
        raise InputError(f"{where}: '{key}' is not a pandas table (pandas_type "
                         f"{g.attrs.get('pandas_type')!r})")
    try:
        nblocks = int(g.attrs["nblocks"])
        nrows = g["axis1"].shape[0]
        out = np.full((nrows, len(columns)), np.nan)
        found = set()
        for b in range(nblocks):
            items = [x.decode() if isinstance(x, bytes) else str(x)
                     for x in g[f"block{b}_items"][...]]
            values = g[f"block{b}_values"][...]
            if values.ndim != 2 or values.shape[0] != nrows:
                raise InputError(f"{where}: '{key}' block {b} has shape {values.shape}, "
                                 f"expected ({nrows}, {len(items)}) (truncated file?)")
            for j, name in enumerate(items):
                if name in columns:
                    out[:, columns.index(name)] = values[:, j].astype(np.float64)
                    found.add(name)
    except (KeyError, OSError, ValueError, TypeError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{where}: '{key}' is damaged or truncated ({exc})") from None
    missing = [c for c in columns if c not in found]
    if missing:
        raise InputError(f"{where}: '{key}' lacks the column(s) {', '.join(missing)}")
    return out


def _as_ids(values: np.ndarray, what: str, where: str) -> np.ndarray:
    """Float ids (as COSMIC stores them) as int64, refusing non-integral or negative ones."""
    if not np.all(np.isfinite(values)) or np.any(values != np.round(values)) \
            or np.any(values < 0) or np.any(values >= 2.0 ** 53):
        raise InputError(f"{where}: {what} must be non-negative whole numbers")
    return values.astype(np.int64)


def read_cosmic(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict]:
    """Stars (fields of :mod:`cmc.fields`, sorted by radius) and scale of a COSMIC file.

    Returns
    -------
    stars : dict of ndarray
        ``id, m, r, vr, vt, startype, rad, m_msun, binind`` and, if the file has binaries, the
        binary columns.
    info : dict
        ``n``, ``m_total_msun`` (``MCLUS``), ``unit_length_pc`` (``RVIR``), ``r_tidal``
        (``RTID``, Hénon lengths), ``metallicity`` (``Z``), ``n_binaries``.

    Raises
    ------
    InputError
        A missing table, column or sentinel row, a truncated table, counts that disagree with
        the attributes, a central black hole, or a binary index that points nowhere.
    """
    where = str(path)
    try:
        fh = h5py.File(path, "r")
    except OSError as exc:
        raise InputError(f"cannot open {where}: {exc}") from None
    with fh:
        obj = _read_frame(fh, OBJ_KEY, OBJ_COLUMNS, where)
        binr = _read_frame(fh, BIN_KEY, BIN_COLUMNS, where) if BIN_KEY in fh \
            else np.zeros((1, len(BIN_COLUMNS)))
        attrs = dict(fh[f"{OBJ_KEY}/block0_values"].attrs)
    for key in ("NOBJ", "NBINARY", "MCLUS", "RVIR"):
        if key not in attrs:
            raise InputError(f"{where}: attribute {key} missing from {OBJ_KEY}")
    n_obj, n_bin = int(attrs["NOBJ"]), int(attrs["NBINARY"])
    if obj.shape[0] < 3 or obj[0, 4] > 1e-300 or obj[-1, 4] < 1e30:
        raise InputError(f"{where}: {OBJ_KEY} lacks its sentinel rows (r = DBL_MIN first, "
                         "r = 1e40 last): truncated or not written by COSMIC")
    if obj.shape[0] - 2 != n_obj:
        raise InputError(f"{where}: {OBJ_KEY} holds {obj.shape[0] - 2} objects but NOBJ = "
                         f"{n_obj} (truncated?)")
    if binr.shape[0] - 1 != n_bin:
        raise InputError(f"{where}: {BIN_KEY} holds {binr.shape[0] - 1} binaries but NBINARY "
                         f"= {n_bin} (truncated?)")
    if obj[0, 2] != 0.0:
        raise InputError(f"{where}: a central black hole of mass {obj[0, 2]:.6g} (N-body units) "
                         "in the first row: not supported")
    mclus, rvir = float(attrs["MCLUS"]), float(attrs["RVIR"])
    if not (np.isfinite(mclus) and mclus > 0 and np.isfinite(rvir) and rvir > 0):
        raise InputError(f"{where}: MCLUS = {mclus} Msun and RVIR = {rvir} pc must be positive")
    rows = obj[1:-1]
    col = {c: rows[:, i] for i, c in enumerate(OBJ_COLUMNS)}
    stars: dict[str, np.ndarray] = {
        "id": _as_ids(col["id"], "object ids", where),
        "m": col["m"].copy(), "r": col["r"].copy(), "vr": col["vr"].copy(),
        "vt": col["vt"].copy(),
        "startype": _as_ids(col["k"], "stellar types k", where).astype(np.int32),
        "rad": col["Reff"] * (rvir / PARSEC_PER_RSUN), "m_msun": col["m"] * mclus,
    }
    binind = _as_ids(col["binind"], "binind", where)
    is_bin = binind > 0
    stars["binind"] = np.where(is_bin, binind - 1, -1)
    if n_bin and not is_bin.any():
        # COSMIC's point-mass sampler writes one placeholder binary that no object uses
        log.info("%s: %d binaries in %s but no object points to them; ignored", where, n_bin,
                 BIN_KEY)
    if is_bin.any():
        from cmc.fields import BINARY_FIELDS
        from physics.encounter_events import NEW_BINARY_ID_BASE

        if binind.max() > n_bin or np.unique(binind[is_bin]).size != binind[is_bin].size:
            raise InputError(f"{where}: binind must point to distinct rows 1..{n_bin} of "
                             f"{BIN_KEY}")
        b = {c: binr[binind[is_bin], i] for i, c in enumerate(BIN_COLUMNS)}
        if np.any(b["index"] != binind[is_bin]):
            raise InputError(f"{where}: {BIN_KEY} rows are not in index order")
        n = rows.shape[0]
        for f in BINARY_FIELDS:
            stars[f.name] = np.full(n, f.default, dtype=f.dtype)
        id1 = _as_ids(b["id1"], "binary member ids", where)
        id2 = _as_ids(b["id2"], "binary member ids", where)
        if np.any(id1 != stars["id"][is_bin]):
            log.warning("%s: binary objects whose id is not their first member's (COSMIC's "
                        "convention); their ids are replaced", where)
        stars["id"][is_bin] = NEW_BINARY_ID_BASE + np.minimum(id1, id2)
        put = {"bin_id1": id1, "bin_id2": id2, "bin_m1": b["m1"], "bin_m2": b["m2"],
               "bin_a": b["a"], "bin_e": b["e"],
               "bin_rad1": b["Reff1"] * (rvir / PARSEC_PER_RSUN),
               "bin_rad2": b["Reff2"] * (rvir / PARSEC_PER_RSUN),
               "bin_startype1": b["k1"], "bin_startype2": b["k2"],
               "bin_m1_msun": b["m1"] * mclus, "bin_m2_msun": b["m2"] * mclus}
        for k, v in put.items():
            stars[k][is_bin] = v
    order = np.lexsort((stars["id"], stars["r"]))
    if np.any(order != np.arange(order.size)):
        stars = {k: v[order] for k, v in stars.items()}
    info = {"n": int(rows.shape[0]), "m_total_msun": float(np.sum(stars["m_msun"])),
            "unit_length_pc": rvir, "r_tidal": float(attrs.get("RTID", RTID_NONE)),
            "metallicity": float(attrs.get("Z", 0.0)), "n_binaries": int(is_bin.sum())}
    return stars, info


def nbody_energies(r: np.ndarray, vr: np.ndarray, vt: np.ndarray,
                   m: np.ndarray) -> tuple[float, float]:
    """Kinetic and potential energy as COSMIC and CMC define them for N-body scaling (sorted
    radii; a star's potential counts the mass inside and at its own radius)."""
    from physics.potential import compute_potential

    phi, _ = compute_potential(r, m)  # at each star, its own shell included (as CMC's)
    return 0.5 * float(np.sum(m * (vr ** 2 + vt ** 2))), 0.5 * float(np.sum(m * phi))


def in_nbody_units(stars: dict[str, np.ndarray]) -> bool:
    """Whether sorted stars have M = 1, K = 1/4 and W = -1/2 (COSMIC's and CMC's scaling)."""
    ke, pe = nbody_energies(stars["r"], stars["vr"], stars["vt"], stars["m"])
    return (abs(float(np.sum(stars["m"])) - 1.0) <= NBODY_TOL and abs(ke - 0.25) <= NBODY_TOL
            and abs(pe + 0.5) <= NBODY_TOL)


#: COSMIC's sampler types main-sequence stars above this mass [Msun] as BSE k = 1, below as 0.
MS_TYPE_MASS = 0.7


def main_sequence_types(stars: dict[str, np.ndarray]) -> None:
    """Stellar types of a model drawn without stellar evolution, as COSMIC's sampler sets them
    (``set_kstar``): BSE k = 0 for main-sequence stars up to 0.7 Msun, 1 above; for binaries
    the object by its total mass and each member by its own."""
    k = np.where(np.asarray(stars["m_msun"]) > MS_TYPE_MASS, 1, 0).astype(np.int32)
    stars["startype"] = k
    if "bin_a" in stars:
        b = np.asarray(stars["binind"]) >= 0
        for mem in ("1", "2"):
            col = np.asarray(stars[f"bin_startype{mem}"]).copy()
            col[b] = np.where(stars[f"bin_m{mem}_msun"][b] > MS_TYPE_MASS, 1, 0)
            stars[f"bin_startype{mem}"] = col.astype(np.int32)


def write_cosmic(path: str | os.PathLike, stars: dict[str, np.ndarray], m_total_msun: float,
                 r_vir_pc: float, r_tidal: float = 0.0, metallicity: float = 0.02) -> None:
    """Write stars in N-body units as COSMIC's ``InitialCMCTable.write`` would (atomically).

    Parameters
    ----------
    stars : dict of ndarray
        Star fields of :mod:`cmc.fields` in N-body units (masses summing to 1), any order.
    m_total_msun : float
        The cluster's mass [Msun] (``MCLUS``).
    r_vir_pc : float
        The virial radius [pc] (``RVIR``; converts stellar radii and ``Reff``).
    r_tidal : float
        Tidal radius [virial radii]; 0 (none) is written as COSMIC's default 1e6.
    metallicity : float
        ``Z``.

    Raises
    ------
    InputError
        pandas or PyTables missing (the ``cosmic`` extra), or an unwritable path.
    """
    try:
        import pandas as pd
        import tables  # noqa: F401  (pandas' HDF5 back end)
    except ImportError as exc:
        raise InputError(f"writing COSMIC files needs pandas and PyTables ({exc.name} is "
                         "missing): pip install 'henon-cmc[cosmic]'") from None
    n = len(stars["r"])
    binind = np.asarray(stars.get("binind", np.full(n, -1)))
    is_bin = binind >= 0 if "bin_a" in stars else np.zeros(n, dtype=bool)
    bin_rows = np.flatnonzero(is_bin)
    ids = np.asarray(stars["id"]).astype(np.float64)
    reff = np.asarray(stars.get("rad", np.zeros(n))) * (PARSEC_PER_RSUN / r_vir_pc)
    cosmic_binind = np.zeros(n)
    cosmic_binind[bin_rows] = np.arange(1, bin_rows.size + 1)
    if bin_rows.size:
        ids[bin_rows] = stars["bin_id1"][bin_rows]
    singles = np.column_stack([ids, np.asarray(stars.get("startype", np.ones(n)), float),
                               stars["m"], reff, stars["r"], stars["vr"], stars["vt"],
                               cosmic_binind])
    first = np.zeros((1, len(OBJ_COLUMNS)))
    first[0, 4] = R_FIRST
    last = np.zeros((1, len(OBJ_COLUMNS)))
    last[0, 4] = R_LAST
    obj = pd.DataFrame(np.vstack([first, singles, last]), columns=list(OBJ_COLUMNS))
    if bin_rows.size:
        f = PARSEC_PER_RSUN / r_vir_pc
        s = {k: np.asarray(stars[k])[bin_rows].astype(np.float64) for k in (
            "bin_id1", "bin_startype1", "bin_m1", "bin_rad1", "bin_id2", "bin_startype2",
            "bin_m2", "bin_rad2", "bin_a", "bin_e")}
        bins = np.column_stack([np.arange(1, bin_rows.size + 1), s["bin_id1"],
                                s["bin_startype1"], s["bin_m1"], s["bin_rad1"] * f,
                                s["bin_id2"], s["bin_startype2"], s["bin_m2"],
                                s["bin_rad2"] * f, s["bin_a"], s["bin_e"]])
    else:
        bins = np.zeros((0, len(BIN_COLUMNS)))
    binary = pd.DataFrame(np.vstack([np.zeros((1, len(BIN_COLUMNS))), bins]),
                          columns=list(BIN_COLUMNS))
    out = Path(path)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        obj.to_hdf(tmp, key=OBJ_KEY, mode="w")
        binary.to_hdf(tmp, key=BIN_KEY)
        with h5py.File(tmp, "a") as fh:
            a = fh[f"{OBJ_KEY}/block0_values"].attrs
            a["EXTNAME"] = OBJ_KEY
            a["NOBJ"] = int(n)
            a["NBINARY"] = int(bin_rows.size)
            a["MCLUS"] = float(m_total_msun)
            a["RVIR"] = float(r_vir_pc)
            a["RTID"] = float(r_tidal) if r_tidal > 0.0 else RTID_NONE
            a["Z"] = float(metallicity)
        os.replace(tmp, out)
    except OSError as exc:
        if is_not_writable(exc):
            raise not_writable(out, exc) from None
        raise InputError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        if tmp.exists():
            tmp.unlink()
