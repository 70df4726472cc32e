"""cmc export --format cmc: CMC-COSMIC's output files, checked against their documented
layouts (CMC-COSMIC's "Analyzing CMC Output" page, the C code's headers, and what cmctoolkit
reads: conv.sh by line number, snapshots as pandas tables keyed "K(t=T)" with its columns)."""

from __future__ import annotations

import re

import h5py
import numpy as np
import pytest

from cmc.cli import main
from cmc.io import read_diagnostics
from cmc.units import Units

pd = pytest.importorskip("pandas")
pytest.importorskip("tables")

#: cmctoolkit's names of CMC's snapshot columns (its "dat.gz" mapping; the h5 snapshots hold
#: the same names), in order.
CMCTOOLKIT_COLUMNS = [
    "id", "m[MSUN]", "r", "vr", "vt", "E", "J", "binflag", "m0[MSUN]", "m1[MSUN]", "id0",
    "id1", "a[AU]", "e", "startype", "luminosity[LSUN]", "radius[RSUN]", "bin_startype0",
    "bin_startype1", "bin_star_lum0[LSUN]", "bin_star_lum1[LSUN]", "bin_star_radius0[RSUN]",
    "bin_star_radius1[RSUN]", "bin.Eb", "eta", "star.phi", "rad0", "rad1", "tb", "lum0",
    "lum1", "massc0", "massc1", "radc0", "radc1", "menv0", "menv1", "renv0", "renv1", "tms0",
    "tms1", "dmdt0", "dmdt1", "radrol0", "radrol1", "ospin0", "ospin1", "B0", "B1",
    "formation0", "formation1", "bacc0", "bacc1", "tacc0", "tacc1", "mass0_0", "mass0_1",
    "epoch0", "epoch1", "ospin", "B", "formation"]

#: CMC's dyn.dat header (cmc_io.c).
DYN_HEADER = ("#1:t #2:Dt #3:tcount #4:N #5:M #6:VR #7:N_c #8:r_c #9:r_max #10:Etot #11:KE "
              "#12:PE #13:Etot_int #14:Etot_bin #15:E_cenma #16:Eesc #17:Ebesc #18:Eintesc "
              "#19:Eoops #20:Etot+Eoops #21:r_h #22:rho_0 #23:rc_spitzer #24:v0_rms #25:rc_nb "
              "#26.DMse(MSUN) #27.DMrejuv(MSUN) #28.N_c_nb")


def unitdict(lines: list[str]) -> dict[str, float]:
    """cmctoolkit's make_unitdict: the factors read at fixed lines and columns of conv.sh."""
    return {"g": float(lines[5][12:]), "msun": float(lines[7][13:]),
            "cm": float(lines[13][14:]), "pc": float(lines[15][17:]),
            "s": float(lines[17][12:]), "myr": float(lines[19][13:]),
            "s_g": float(lines[9][13:]), "s_msun": float(lines[11][14:]),
            "nb_s": float(lines[21][14:]), "nb_myr": float(lines[23][15:])}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tidally limited King model with binaries, 30 steps, snapshots every 10, exported."""
    d = tmp_path_factory.mktemp("export")
    ini = d / "m.ini"
    ini.write_text("[initial]\nn = 1500\nseed = 4\nbinary_fraction = 0.2\nmodel = king\n"
                   "w0 = 3\nr_vir_pc = 2.5\nmass_function = kroupa\nm_min = 0.08\nm_max = 1\n"
                   "[tidal]\nmode = shrinking\n[run]\nmax_steps = 30\n[output]\n"
                   "snapshot_every = 10\n")
    assert main(["run", str(ini), "-o", str(d / "run")]) == 0
    assert main(["export", str(d / "run"), "--format", "cmc", "-o", str(d / "cmc"),
                 "--prefix", "king"]) == 0
    return d


def test_conv_sh_reads_as_cmctoolkit_reads_it(exported):
    lines = (exported / "cmc" / "king.conv.sh").read_text().split("\n")
    u = unitdict(lines)
    _, attrs = read_diagnostics(exported / "run" / "diagnostics.h5")
    units = Units.from_attrs(attrs)
    np.testing.assert_allclose(u["msun"], units.mass_msun, rtol=1e-5)
    np.testing.assert_allclose(u["pc"], 2.5, rtol=1e-12)
    np.testing.assert_allclose(u["myr"], units.time_rel_myr, rtol=1e-5)
    np.testing.assert_allclose(u["nb_myr"], units.time_nb_myr, rtol=1e-5)
    np.testing.assert_allclose(u["s_msun"], units.mass_msun / units.n0, rtol=1e-5)
    # cgs factors consistent with the solar ones
    np.testing.assert_allclose(u["g"] / u["msun"], 1.98841e33, rtol=1e-4)
    np.testing.assert_allclose(u["cm"] / u["pc"], 3.0857e18, rtol=1e-4)
    np.testing.assert_allclose(u["s"] / u["myr"], 3.15576e13, rtol=1e-4)
    assert lines[3] == "outprefix=king" and lines[0] == "#!/bin/bash"


def test_dyn_dat_columns_and_energy(exported):
    text = (exported / "cmc" / "king.dyn.dat").read_text().splitlines()
    assert text[0] == "# Dynamical information [code units]"
    assert text[1] == DYN_HEADER
    dyn = np.loadtxt(exported / "cmc" / "king.dyn.dat")
    d, _ = read_diagnostics(exported / "run" / "diagnostics.h5")
    assert dyn.shape == (d["step"].size, 28)
    np.testing.assert_array_equal(dyn[:, 2], d["step"])
    np.testing.assert_allclose(dyn[:, 0], d["time"], rtol=1e-7)
    np.testing.assert_array_equal(dyn[:, 3], d["N"])
    np.testing.assert_allclose(dyn[:, 4], d["M"], rtol=1e-7)
    np.testing.assert_allclose(dyn[:, 20], d["r_h"], rtol=1e-7)
    # CMC's Etot sums the bound cluster and what escapers carried off (its ComputeEnergy):
    # KE + PE + Etot_int + Etot_bin + E_cenma + Eesc + Ebesc + Eintesc; Etot + Eoops is the
    # conserved total E_tot
    np.testing.assert_allclose(dyn[:, 9], dyn[:, 10:18].sum(axis=1), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(dyn[:, 19], d["E_tot"], rtol=1e-6)
    np.testing.assert_allclose(dyn[:, 9] + dyn[:, 18], dyn[:, 19], rtol=1e-6, atol=1e-9)
    assert dyn[-1, 15] < 0.0 or dyn[-1, 15] > 0.0  # escapers carried energy away
    # the columns this code adds for CMC: r_max, v0_rms, rc_spitzer
    assert np.all(dyn[:, 8] >= dyn[:, 20]) and np.all(dyn[:, 23] > 0)
    np.testing.assert_allclose(dyn[:, 22], np.sqrt(3 * dyn[:, 23] ** 2
                                                   / (4 * np.pi * dyn[:, 21])), rtol=1e-6)


def test_dyn_dat_ebesc_is_the_escaped_binaries_binding_energy(exported):
    """Ebesc (#17) holds what CMC puts there: the escaped binaries' binding energy, summed as
    CMC sums it at each escape, -m1 m2 / (2 a) in code units (cmc_evolution_thr.c), so
    negative; Eintesc (#18) is the stars' internal energy (collisions), none here."""
    dyn = np.loadtxt(exported / "cmc" / "king.dyn.dat")
    d, _ = read_diagnostics(exported / "run" / "diagnostics.h5")
    esc, _ = read_diagnostics(exported / "run" / "escapers.h5")
    b = esc["binind"] >= 0
    assert b.sum() > 0  # binaries left the cluster in this run
    cmc_ebesc = -np.sum(esc["bin_m1"][b] * esc["bin_m2"][b] / (2.0 * esc["bin_a"][b]))
    np.testing.assert_allclose(dyn[-1, 16], cmc_ebesc, rtol=1e-7)
    np.testing.assert_allclose(dyn[:, 16], d["E_binding_escaped"], rtol=1e-7, atol=1e-12)
    np.testing.assert_array_equal(dyn[:, 17], 0.0)
    np.testing.assert_allclose(dyn[:, 13], d["E_binding"], rtol=1e-7)


def test_dyn_dat_energy_columns_of_a_history():
    """Each energy of a diagnostics history goes to the column where CMC puts it."""
    from cmc.export import DYN_COLUMNS, dyn_dat

    d = {"step": np.array([0.0, 1.0]), "time": np.array([0.0, 0.1]), "K": np.array([0.25, 0.3]),
         "W": np.array([-0.5, -0.55]), "E_binding": np.array([-0.1, -0.08]),
         "E_binding_escaped": np.array([0.0, -0.02]), "E_escaped": np.array([0.0, 0.004]),
         "E_stripped": np.array([0.0, -0.001]), "E_oops": np.array([0.0, 1e-4]),
         "E_mergers": np.zeros(2), "E_integrator": np.array([0.0, -2e-5])}
    lines = dyn_dat(d).splitlines()
    col = {name: i for i, (name, _, _) in enumerate(DYN_COLUMNS)}
    row = np.array([float(x) for x in lines[-1].split()])
    assert row[col["Ebesc"]] == pytest.approx(-0.02)
    assert row[col["Eintesc"]] == 0.0 and row[col["Etot_int"]] == 0.0
    assert row[col["Etot_bin"]] == pytest.approx(-0.08)
    assert row[col["Eesc"]] == pytest.approx(0.003)
    etot = 0.3 - 0.55 - 0.08 + 0.003 - 0.02
    assert row[col["Etot"]] == pytest.approx(etot)
    assert row[col["Eoops"]] == pytest.approx(-(1e-4 - 2e-5))
    assert row[col["Etot+Eoops"]] == pytest.approx(etot - 1e-4 + 2e-5)


def test_lagrad_dat(exported):
    lines = (exported / "cmc" / "king.lagrad.dat").read_text().splitlines()
    assert lines[1].split() == ["#1:t", "#2:r(0.001)", "#3:r(0.01)", "#4:r(0.1)",
                                "#5:r(0.5)", "#6:r(0.9)"]
    lag = np.loadtxt(exported / "cmc" / "king.lagrad.dat")
    d, _ = read_diagnostics(exported / "run" / "diagnostics.h5")
    np.testing.assert_allclose(lag[:, 4], d["r_h"], rtol=1e-7)


def test_esc_dat_is_the_escaper_table(exported):
    esc, _ = read_diagnostics(exported / "run" / "escapers.h5")
    lines = (exported / "cmc" / "king.esc.dat").read_text().splitlines()
    names = [re.sub(r"^#\d+:", "", x) for x in lines[1].split()]
    assert names[:6] == ["tcount", "t", "m", "r", "vr", "vt"] and "binflag" in names
    tab = np.loadtxt(exported / "cmc" / "king.esc.dat", ndmin=2)
    assert tab.shape[0] == esc["step"].size > 20
    col = {n: tab[:, i] for i, n in enumerate(names)}
    np.testing.assert_allclose(col["m"], esc["m_msun"], rtol=1e-7)
    np.testing.assert_allclose(col["E"], esc["E"], rtol=1e-7)
    b = col["binflag"] == 1
    np.testing.assert_allclose(col["m0"][b] + col["m1"][b], col["m"][b], rtol=1e-6)
    assert np.all(col["id"][b] == -100) and np.all(col["id"][~b] >= 0)
    assert np.all(col["tb"][b] > 0)


def test_snapshots_open_as_cmctoolkit_opens_them(exported):
    fname = exported / "cmc" / "king.snapshots.h5"
    with h5py.File(fname, "r") as fh:
        keys = list(fh.keys())
    snaps = sorted((exported / "run" / "snapshots").glob("snap_*.h5"))
    assert len(keys) == len(snaps) == 4  # steps 0, 10, 20, 30
    times = []
    for key in keys:
        m = re.match(r"^(\d+)\(t=([-+0-9.eE]+)\)$", key)
        assert m, key
        times.append(float(m.group(2)))
    assert times == sorted(times) and times[0] == 0.0
    last = pd.read_hdf(fname, key=keys[-1])  # cmctoolkit's default: the last key
    assert list(last.columns) == CMCTOOLKIT_COLUMNS
    with h5py.File(snaps[-1], "r") as fh:
        n = fh["stars/r"].shape[0]
        m_msun = fh["stars/m_msun"][...]
        t_snap = float(fh.attrs["time"])
    assert len(last) == n
    np.testing.assert_allclose(times[-1], t_snap, rtol=1e-7)
    single = last["binflag"] != 1
    binary = last["binflag"] == 1
    assert binary.sum() > 100
    np.testing.assert_allclose(np.sort(last["m[MSUN]"]), np.sort(m_msun), rtol=1e-15)
    np.testing.assert_allclose(last.loc[binary, "m0[MSUN]"] + last.loc[binary, "m1[MSUN]"],
                               last.loc[binary, "m[MSUN]"], rtol=1e-12)
    # cmctoolkit's mass cut (make_cuts): singles by m[MSUN], binaries by m0 + m1
    good = ((last["m[MSUN]"] > 0.5) & single) | \
        ((last["m0[MSUN]"] + last["m1[MSUN]"] > 0.5) & binary)
    assert 0 < good.sum() < len(last)
    # radially sorted, E = phi + v^2/2 with phi the potential of all stars at r
    assert np.all(np.diff(last["r"]) >= 0)
    np.testing.assert_allclose(last["E"], last["star.phi"] + 0.5 * (last["vr"] ** 2
                                                                    + last["vt"] ** 2))
    assert np.all(last["star.phi"] < 0)
    assert np.all(last.loc[single, "startype"] >= 0)
    assert np.all(last["luminosity[LSUN]"] == -100)
    # a in AU from r_vir units: a King model of r_vir = 2.5 pc; hard binaries are < 1e4 AU
    assert np.all(last.loc[binary, "a[AU]"] > 0)


def test_export_of_a_folder_without_a_run_is_one_line(tmp_path, capsys):
    assert main(["export", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no diagnostics.h5" in err and "Traceback" not in err


def test_formats_doc_is_current():
    """docs/cmc_formats.md lists every exported column as declared (no drift)."""
    from pathlib import Path

    from cmc.export import formats_markdown

    doc = (Path(__file__).resolve().parents[1] / "docs" / "cmc_formats.md").read_text()
    assert formats_markdown() in doc


def test_dyn_dat_books_stellar_evolution_and_gw_capture_in_eoops():
    """With stellar evolution and GW capture the run's E_tot also takes off E_se_* and
    E_gw_capture: Etot + Eoops is still the diagnostics' E_tot."""
    from cmc.export import DYN_COLUMNS, dyn_dat

    d = {"step": np.array([0.0, 1.0]), "time": np.array([0.0, 0.1]), "K": np.array([0.25, 0.3]),
         "W": np.array([-0.5, -0.55]), "E_binding": np.array([0.0, -0.01]),
         "E_binding_escaped": np.zeros(2), "E_escaped": np.zeros(2), "E_stripped": np.zeros(2),
         "E_oops": np.zeros(2), "E_mergers": np.array([0.0, -1e-3]),
         "E_integrator": np.zeros(2), "E_se_mass": np.array([0.0, 2e-3]),
         "E_se_kicks": np.array([0.0, 3e-4]), "E_se_binding": np.array([0.0, -4e-4]),
         "E_gw_capture": np.array([0.0, -5e-5])}
    e_tot = (d["K"] + d["W"] + d["E_binding"] - d["E_mergers"] - d["E_se_mass"]
             - d["E_se_kicks"] - d["E_se_binding"] - d["E_gw_capture"])
    row = np.array([float(x) for x in dyn_dat(d).splitlines()[-1].split()])
    col = {name: i for i, (name, _, _) in enumerate(DYN_COLUMNS)}
    assert row[col["Etot+Eoops"]] == pytest.approx(e_tot[-1], rel=1e-12)
