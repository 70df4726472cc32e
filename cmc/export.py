"""A run's outputs in CMC-COSMIC's formats (``cmc export OUTDIR --format cmc``).

Writes, for analysis scripts written for CMC (cmc_parser, cmctoolkit, one-line ``loadtxt``):

- ``PREFIX.conv.sh``: the unit conversion factors, line for line as CMC writes them (cmctoolkit
  reads them by line number);
- ``PREFIX.dyn.dat``: the cluster evolution, CMC's 28 columns (``#1:t #2:Dt ... #28.N_c_nb``);
- ``PREFIX.lagrad.dat``: the Lagrange radii, ``#1:t #2:r(f1) ...``;
- ``PREFIX.esc.dat``: one line per escaper (from escapers.h5);
- ``PREFIX.snapshots.h5``: each snapshot as a pandas table keyed ``"K(t=T)"`` (T in code time
  units), with CMC's snapshot columns.

Code units are CMC's: G = M0 = 1, E0 = -1/4, lengths in virial radii, time in
``t_NB N0 / ln(gamma N0)``.  Every column, with its unit and what it holds here, is declared
below (:data:`DYN_COLUMNS`, :data:`ESC_COLUMNS`, :data:`SNAPSHOT_COLUMNS`) and listed in
docs/cmc_formats.md.  Quantities this code does not follow (stellar evolution: luminosities,
core masses, spins...) are written as CMC writes "not available": -100.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from pathlib import Path

import numpy as np

from cmc.errors import InputError
from cmc.units import Units

log = logging.getLogger("cmc.export")

#: CMC's value for "not available" in its snapshot and escape files.
NA = -100.0

#: dyn.dat: (name in CMC's header, unit, meaning here).
DYN_COLUMNS = (
    ("t", "t_rel", "time (code units: t_NB N0 / ln(gamma N0))"),
    ("Dt", "t_rel", "time step of the step that ended here (0 in the first row)"),
    ("tcount", "", "step number"),
    ("N", "", "objects in the cluster (singles + binaries)"),
    ("M", "M0", "bound mass"),
    ("VR", "", "virial ratio -2 K / W"),
    ("N_c", "", "objects in the core (Casertano-Hut, density-weighted mean mass)"),
    ("r_c", "r_vir", "core radius (Casertano & Hut)"),
    ("r_max", "r_vir", "radius of the outermost object"),
    ("Etot", "E_NB", "total energy, summed as CMC sums it: KE + PE + Etot_int + Etot_bin "
     "+ E_cenma + Eesc + Ebesc + Eintesc"),
    ("KE", "E_NB", "kinetic energy"),
    ("PE", "E_NB", "potential energy"),
    ("Etot_int", "E_NB", "internal energy of the bound stars (CMC: energy that collisions and "
     "mergers put into stars): 0, stars hold none here"),
    ("Etot_bin", "E_NB", "internal (binding) energy of the bound binaries, -sum m0 m1 / (2 a) "
     "(negative)"),
    ("E_cenma", "E_NB", "central black hole: 0 (none)"),
    ("Eesc", "E_NB", "energy carried away by all escapers (unbound, ejected and tidally "
     "stripped objects; singles and binaries' centres of mass)"),
    ("Ebesc", "E_NB", "internal (binding) energy carried away by the escaped binaries, "
     "-sum m0 m1 / (2 a) (negative)"),
    ("Eintesc", "E_NB", "internal energy of the escaped stars (as Etot_int): 0, stars hold "
     "none here"),
    ("Eoops", "E_NB", "energy that binary processes could not take from their neighbours, "
     "dissipated by mergers, radiated in GW captures and moved by stellar evolution, as an "
     "energy gain (so that Etot + Eoops is the conserved total)"),
    ("Etot+Eoops", "E_NB", "Etot + Eoops: the conserved total (the diagnostics' E_tot)"),
    ("r_h", "r_vir", "half-mass radius"),
    ("rho_0", "M0 r_vir^-3", "central density (Casertano & Hut)"),
    ("rc_spitzer", "r_vir", "Spitzer core radius sqrt(3 v0_rms^2 / (4 pi rho_0))"),
    ("v0_rms", "v_NB", "rms speed of the central 300 objects"),
    ("rc_nb", "r_vir", "core radius (Casertano & Hut): the same as r_c here"),
    ("DMse", "Msun", "mass lost to stellar evolution in the step: 0 (not implemented)"),
    ("DMrejuv", "Msun", "mass lost to rejuvenation in the step: 0"),
    ("N_c_nb", "", "objects in the core: the same as N_c here"),
)

#: esc.dat: (name, unit, meaning here).
ESC_COLUMNS = (
    ("tcount", "", "step in which the object left"),
    ("t", "t_rel", "time at the end of that step"),
    ("m", "Msun", "mass (a binary: both members)"),
    ("r", "r_vir", "radius where it left"),
    ("vr", "v_NB", "radial velocity when it left"),
    ("vt", "v_NB", "transverse speed when it left"),
    ("r_peri", "r_vir", "-100: not recorded"),
    ("r_apo", "r_vir", "-100: not recorded"),
    ("Rtidal", "r_vir", "tidal radius of the step (0: isolated)"),
    ("phi_rtidal", "v_NB^2", "-100: not recorded"),
    ("phi_zero", "v_NB^2", "-100: not recorded"),
    ("E", "v_NB^2", "specific energy phi + v^2/2 when it left"),
    ("J", "r_vir v_NB", "specific angular momentum r vt"),
    ("id", "", "id of a single star; -100 for a binary"),
    ("binflag", "", "1 for a binary, 0 for a single star"),
    ("m0", "Msun", "first member's mass (-100 for a single star)"),
    ("m1", "Msun", "second member's mass"),
    ("id0", "", "first member's id"),
    ("id1", "", "second member's id"),
    ("a", "AU", "semi-major axis"),
    ("e", "", "eccentricity"),
    ("startype", "", "stellar type of a single star (BSE k)"),
    ("bin_startype0", "", "stellar type of the first member"),
    ("bin_startype1", "", "stellar type of the second member"),
    ("rad0", "Rsun", "radius of the first member (a single star: its radius)"),
    ("rad1", "Rsun", "radius of the second member"),
    ("tb", "days", "orbital period of a binary"),
    ("kind", "", "how it left (this code): 1 unbound, 2 tidally stripped, 3 ejected by a "
     "binary process"),
)

#: Snapshot columns (CMC's names); stellar-evolution columns are written as -100.
SNAPSHOT_COLUMNS = (
    ("id", "", "id of a single star; -100 for a binary"),
    ("m[MSUN]", "Msun", "mass (a binary: both members)"),
    ("r", "r_vir", "radius"),
    ("vr", "v_NB", "radial velocity"),
    ("vt", "v_NB", "transverse speed"),
    ("E", "v_NB^2", "specific energy phi(r) + v^2/2"),
    ("J", "r_vir v_NB", "specific angular momentum r vt"),
    ("binflag", "", "1 for a binary, 0 for a single star"),
    ("m0[MSUN]", "Msun", "first member's mass (-100 for a single star)"),
    ("m1[MSUN]", "Msun", "second member's mass"),
    ("id0", "", "first member's id"),
    ("id1", "", "second member's id"),
    ("a[AU]", "AU", "semi-major axis"),
    ("e", "", "eccentricity"),
    ("startype", "", "stellar type of a single star (BSE k; -100 for a binary)"),
    ("luminosity[LSUN]", "Lsun", "-100: no stellar evolution"),
    ("radius[RSUN]", "Rsun", "radius of a single star"),
    ("bin_startype0", "", "stellar type of the first member"),
    ("bin_startype1", "", "stellar type of the second member"),
    ("bin_star_lum0[LSUN]", "Lsun", "-100: no stellar evolution"),
    ("bin_star_lum1[LSUN]", "Lsun", "-100: no stellar evolution"),
    ("bin_star_radius0[RSUN]", "Rsun", "radius of the first member"),
    ("bin_star_radius1[RSUN]", "Rsun", "radius of the second member"),
    ("bin.Eb", "E_NB", "binding energy m0 m1 / (2 a) (code units)"),
    ("eta", "", "-100: not recorded"),
    ("star.phi", "v_NB^2", "potential at r"),
    ("rad0", "Rsun", "radius of the first member (a single star: its radius)"),
    ("rad1", "Rsun", "radius of the second member"),
    ("tb", "days", "orbital period of a binary"),
) + tuple((name, "", "-100: stellar evolution is not implemented") for name in (
    "lum0", "lum1", "massc0", "massc1", "radc0", "radc1", "menv0", "menv1", "renv0", "renv1",
    "tms0", "tms1", "dmdt0", "dmdt1", "radrol0", "radrol1", "ospin0", "ospin1", "B0", "B1",
    "formation0", "formation1", "bacc0", "bacc1", "tacc0", "tacc1", "mass0_0", "mass0_1",
    "epoch0", "epoch1", "ospin", "B", "formation"))


def _cgs() -> dict[str, float]:
    """Msun [g], pc [cm], AU [pc], Myr [s] and days per year, from astropy (set-up only)."""
    import astropy.constants as const
    import astropy.units as u

    return {"msun_g": const.M_sun.cgs.value, "pc_cm": const.pc.cgs.value,
            "au_per_pc": (1.0 * u.pc).to(u.AU).value, "myr_s": (1.0 * u.Myr).to(u.s).value,
            "day_per_yr": (1.0 * u.yr).to(u.day).value}


def conv_sh(units: Units, prefix: str) -> str:
    """CMC's ``PREFIX.conv.sh``: the conversion factors on the lines where CMC puts them."""
    c = _cgs()
    n0 = units.n0
    lines = [
        "#!/bin/bash", "", "# outfile prefix", f"outprefix={prefix}",
        "# code unit of mass (cgs)", f"massunitcgs={units.mass_msun * c['msun_g']:g}",
        "# code unit of mass (M_sun)", f"massunitmsun={units.mass_msun:g}",
        "# code unit of stellar mass (cgs)", f"mstarunitcgs={units.mass_msun / n0 * c['msun_g']:g}",
        "# code unit of stellar mass (M_Sun)", f"mstarunitmsun={units.mass_msun / n0:g}",
        "# code unit of length (cgs)", f"lengthunitcgs={units.length_pc * c['pc_cm']:g}",
        "# code unit of length (parsecs)", f"lengthunitparsec={units.length_pc:g}",
        "# code unit of time (cgs)", f"timeunitcgs={units.time_rel_myr * c['myr_s']:g}",
        "# code unit of time (Myr)", f"timeunitsmyr={units.time_rel_myr:g}",
        "# N-body  unit of time (cgs)", f"nbtimeunitcgs={units.time_nb_myr * c['myr_s']:g}",
        "# N-body unit of time (Myr)", f"nbtimeunitsmyr={units.time_nb_myr:g}",
        "",
    ]
    return "\n".join(lines) + "\n"


def _table(header: str, names: list[str], columns: list[np.ndarray],
           heads: list[str] | None = None) -> str:
    """CMC's text table: a comment line, the numbered column names (``heads``, default
    ``#1:name``), one row per line."""
    heads = heads or [f"#{i + 1}:{name}" for i, name in enumerate(names)]
    body = np.column_stack(columns) if columns and len(columns[0]) else np.zeros((0, len(names)))
    rows = "\n".join(" ".join(f"{v:.8g}" for v in row) for row in body)
    return f"# {header}\n{' '.join(heads)}\n" + (rows + "\n" if rows else "")


def _or_zero(a: np.ndarray) -> np.ndarray:
    """A column of an older run without it (NA) read as 0."""
    return np.where(a == NA, 0.0, a)


def dyn_dat(d: dict[str, np.ndarray]) -> str:
    """CMC's dyn.dat from diagnostics.h5 columns."""
    n = d["step"].size
    zero = np.zeros(n)

    def col(name: str) -> np.ndarray:
        return np.asarray(d[name], dtype=float) if name in d else np.full(n, NA)

    # CMC's split of the energy (cmc_utils.c ComputeEnergy, cmc_evolution_thr.c): Eesc holds
    # the escapers' centre-of-mass energies, Ebesc the escaped binaries' binding energies
    # -m1 m2 / (2 a), Etot_int and Eintesc the stars' internal energies (collisions: none
    # here), and Etot all of them, so that Etot + Eoops is the conserved total.
    e_bin = col("E_binding")
    e_esc = col("E_escaped") + col("E_stripped")
    e_besc = col("E_binding_escaped")
    etot = col("K") + col("W") + e_bin + e_esc + e_besc
    # every energy the run books apart from K, W, binaries and escapers (E_tot takes them off):
    # the columns a run has only with stellar evolution or GW capture read as 0 without them
    booked = col("E_oops") + col("E_mergers") + sum(
        _or_zero(col(k)) for k in ("E_integrator", "E_se_mass", "E_se_kicks", "E_se_binding",
                                   "E_gw_capture", "E_gw_encounters"))
    eoops = 0.0 - booked  # (no "-0")
    vr = np.where(col("W") != 0, -2.0 * col("K") / np.where(col("W") != 0, col("W"), 1.0), 0.0)
    values = {
        "t": col("time"), "Dt": col("dt"), "tcount": col("step"), "N": col("N"), "M": col("M"),
        "VR": vr, "N_c": col("N_core"), "r_c": col("r_c"), "r_max": col("r_max"),
        "Etot": etot, "KE": col("K"), "PE": col("W"), "Etot_int": zero, "Etot_bin": e_bin,
        "E_cenma": zero, "Eesc": e_esc, "Ebesc": e_besc, "Eintesc": zero, "Eoops": eoops,
        "Etot+Eoops": etot + eoops,
        "r_h": col("r_h"), "rho_0": col("rho_c"), "rc_spitzer": col("rc_spitzer"),
        "v0_rms": col("v0_rms"), "rc_nb": col("r_c"), "DMse": zero, "DMrejuv": zero,
        "N_c_nb": col("N_core"),
    }
    names = [c[0] for c in DYN_COLUMNS]
    # CMC numbers the last three columns with a dot (#26.DMse(MSUN)); scripts split on '#'
    heads = [f"#{i + 1}:{nm}" if i < 25 else f"#{i + 1}.{nm}" + ("(MSUN)" if i < 27 else "")
             for i, nm in enumerate(names)]
    return _table("Dynamical information [code units]", names, [values[nm] for nm in names],
                  heads)


def lagrad_dat(d: dict[str, np.ndarray], fractions) -> str:
    """CMC's lagrad.dat: time and the Lagrange radii."""
    lr = np.asarray(d["lagrange_radii"], dtype=float).reshape(d["step"].size, -1)
    names = ["t"] + [f"r({f:g})" for f in fractions]
    return _table("Lagrange radii [code units]", names,
                  [np.asarray(d["time"], float)] + [lr[:, i] for i in range(lr.shape[1])])


def _binary_view(s: dict[str, np.ndarray], units: Units) -> dict[str, np.ndarray]:
    """The columns that CMC's snapshot and escape files share, from star-table fields."""
    c = _cgs()
    n = s["m"].size
    has = "bin_a" in s
    b = (np.asarray(s["binind"]) >= 0) if has else np.zeros(n, dtype=bool)
    na = np.full(n, NA)

    def pick(name: str, single=None) -> np.ndarray:
        out = na.copy() if single is None else np.asarray(single, dtype=float).copy()
        if has:
            out[b] = np.asarray(s[name], dtype=float)[b]
        return out

    a_au = pick("bin_a")
    a_au[b] *= units.length_pc * c["au_per_pc"]
    m0, m1 = pick("bin_m1_msun"), pick("bin_m2_msun")
    tb = na.copy()
    if b.any():
        tb[b] = np.sqrt(a_au[b] ** 3 / (m0[b] + m1[b])) * c["day_per_yr"]
    eb = na.copy()
    if b.any():
        eb[b] = s["bin_m1"][b] * s["bin_m2"][b] / (2.0 * s["bin_a"][b])
    rad = np.asarray(s["rad"], dtype=float)
    return {
        "id": np.where(b, NA, np.asarray(s["id"], dtype=float)),
        "binflag": b.astype(float), "m0": m0, "m1": m1, "id0": pick("bin_id1"),
        "id1": pick("bin_id2"), "a": a_au, "e": pick("bin_e"),
        "startype": np.where(b, NA, np.asarray(s["startype"], dtype=float)),
        "bin_startype0": pick("bin_startype1"), "bin_startype1": pick("bin_startype2"),
        "rad0": pick("bin_rad1", rad), "rad1": pick("bin_rad2"), "radius": np.where(b, NA, rad),
        "bin_star_radius0": pick("bin_rad1"), "bin_star_radius1": pick("bin_rad2"),
        "tb": tb, "bin.Eb": eb,
    }


def esc_dat(esc: dict[str, np.ndarray], units: Units) -> str:
    """CMC's esc.dat from escapers.h5."""
    n = esc["step"].size
    v = _binary_view(esc, units)
    na = np.full(n, NA)
    values = {
        "tcount": esc["step"], "t": esc["time"], "m": esc["m_msun"], "r": esc["r"],
        "vr": esc["vr"], "vt": esc["vt"], "r_peri": na, "r_apo": na, "Rtidal": esc["r_tidal"],
        "phi_rtidal": na, "phi_zero": na, "E": esc["E"], "J": esc["J"], "kind": esc["kind"],
        **{k: v[k] for k in ("id", "binflag", "m0", "m1", "id0", "id1", "a", "e", "startype",
                             "bin_startype0", "bin_startype1", "rad0", "rad1", "tb")},
    }
    names = [c[0] for c in ESC_COLUMNS]
    return _table("Escaping stars [code units unless noted]", names,
                  [np.asarray(values[k], dtype=float) for k in names])


def snapshot_table(stars: dict[str, np.ndarray], units: Units):
    """One snapshot as a pandas DataFrame with CMC's columns (radially sorted)."""
    import pandas as pd

    from physics.potential import compute_potential

    order = np.argsort(stars["r"], kind="stable")
    s = {k: np.asarray(v)[order] for k, v in stars.items()}
    phi, _ = compute_potential(s["r"], s["m"])
    v = _binary_view(s, units)
    n = s["r"].size
    cols = {
        "id": v["id"], "m[MSUN]": s["m_msun"], "r": s["r"], "vr": s["vr"], "vt": s["vt"],
        "E": phi + 0.5 * (s["vr"] ** 2 + s["vt"] ** 2), "J": s["r"] * s["vt"],
        "binflag": v["binflag"], "m0[MSUN]": v["m0"], "m1[MSUN]": v["m1"], "id0": v["id0"],
        "id1": v["id1"], "a[AU]": v["a"], "e": v["e"], "startype": v["startype"],
        "radius[RSUN]": v["radius"], "bin_startype0": v["bin_startype0"],
        "bin_startype1": v["bin_startype1"], "bin_star_radius0[RSUN]": v["bin_star_radius0"],
        "bin_star_radius1[RSUN]": v["bin_star_radius1"], "bin.Eb": v["bin.Eb"],
        "star.phi": phi, "rad0": v["rad0"], "rad1": v["rad1"], "tb": v["tb"],
    }
    return pd.DataFrame({name: np.asarray(cols[name], dtype=float) if name in cols
                         else np.full(n, NA) for name, _, _ in SNAPSHOT_COLUMNS})


def snapshot_key(k: int, time: float) -> str:
    """Key of snapshot ``k`` at ``time`` (code units), CMC's ``"K(t=T)"``."""
    return f"{k}(t={time:.8g})"


SNAPSHOT_KEY = re.compile(r"^(\d+)\(t=([-+0-9.eE]+)\)$")


def export_cmc(outdir: str | os.PathLike, dest: str | os.PathLike | None = None,
               prefix: str = "initial") -> list[Path]:
    """Write the CMC-format files of the run in ``outdir`` (see the module docstring).

    Returns
    -------
    list of Path
        The files written.

    Raises
    ------
    InputError
        No run in ``outdir`` (diagnostics.h5 missing or unreadable), or pandas/PyTables
        missing for the snapshots.
    """
    from cmc.io import read_diagnostics, read_snapshot

    outdir = Path(outdir)
    dest = Path(dest) if dest is not None else outdir / "cmc"
    if not (outdir / "diagnostics.h5").exists():
        raise InputError(f"{outdir}: no diagnostics.h5 (not a run folder)")
    d, attrs = read_diagnostics(outdir / "diagnostics.h5")
    try:
        units = Units.from_attrs(attrs)
    except ValueError as exc:
        raise InputError(f"{outdir}/diagnostics.h5: {exc}") from None
    try:
        import pandas as pd  # noqa: F401
        import tables  # noqa: F401
    except ImportError as exc:
        raise InputError(f"cmc export --format cmc writes pandas tables: {exc.name} is missing "
                         "(pip install 'henon-cmc[cosmic]')") from None
    dest.mkdir(parents=True, exist_ok=True)
    written = []

    def put(name: str, text: str) -> None:
        path = dest / f"{prefix}.{name}"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        written.append(path)

    put("conv.sh", conv_sh(units, prefix))
    put("dyn.dat", dyn_dat(d))
    put("lagrad.dat", lagrad_dat(d, np.atleast_1d(attrs["lagrange_fractions"])))
    esc_path = outdir / "escapers.h5"
    if esc_path.exists():
        esc, _ = read_diagnostics(esc_path)
        put("esc.dat", esc_dat(esc, units))
    else:
        log.warning("%s: no escapers.h5 (a run from an older version): no esc.dat", outdir)
    snaps = sorted((outdir / "snapshots").glob("snap_*.h5"))
    if snaps:
        path = dest / f"{prefix}.snapshots.h5"
        tmp = path.with_name(f".{path.name}.tmp")
        if tmp.exists():
            tmp.unlink()
        for k, snap in enumerate(snaps):
            stars, sattrs = read_snapshot(snap)
            table = snapshot_table(stars, Units.from_attrs(sattrs) if "unit_n0" in sattrs
                                   else units)
            with warnings.catch_warnings():
                # CMC's keys "K(t=T)" are not Python identifiers; PyTables says so
                warnings.simplefilter("ignore", category=Warning)
                table.to_hdf(tmp, key=snapshot_key(k, float(sattrs.get("time", 0.0))),
                             format="table", mode="a")
        os.replace(tmp, path)
        written.append(path)
    log.info("wrote %s", ", ".join(p.name for p in written))
    return written


def time_of_key(key: str) -> float:
    """The time (code units) in a snapshot key ``"K(t=T)"``."""
    m = SNAPSHOT_KEY.match(key.lstrip("/"))
    if not m:
        raise ValueError(f"not a CMC snapshot key: {key!r}")
    return float(m.group(2))


__all__ = ["DYN_COLUMNS", "ESC_COLUMNS", "SNAPSHOT_COLUMNS", "conv_sh", "dyn_dat", "esc_dat",
           "export_cmc", "lagrad_dat", "snapshot_key", "snapshot_table", "time_of_key"]


def formats_markdown() -> str:
    """The column tables of docs/cmc_formats.md, generated from the declarations above."""
    out = []
    for title, cols in (("PREFIX.dyn.dat", DYN_COLUMNS), ("PREFIX.esc.dat", ESC_COLUMNS),
                        ("PREFIX.snapshots.h5 (each table)", SNAPSHOT_COLUMNS)):
        out.append(f"### {title}\n\n| # | column | unit | holds |\n|---|---|---|---|")
        out += [f"| {i + 1} | `{name}` | {unit} | {meaning} |"
                for i, (name, unit, meaning) in enumerate(cols)]
        out.append("")
    return "\n".join(out)
