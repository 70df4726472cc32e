"""COSMIC's CMC initial conditions in and out (cmc/cosmic.py), against files COSMIC writes.

The files are made here with cosmic-popsynth (the ``dev`` extra) at small N: a Plummer model
of equal masses, a King model with a Kroupa mass function, and one with primordial binaries.
Round trips compare with COSMIC's own reader (``InitialCMCTable.read``) to the last bit.
"""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest

from cmc.cli import main
from cmc.config import load_config
from cmc.cosmic import PARSEC_PER_RSUN, in_nbody_units, is_cosmic_file, read_cosmic
from cmc.errors import InputError
from cmc.initial import build_initial_stars, physical_scale
from physics.encounter_events import NEW_BINARY_ID_BASE
from physics.henon_units import shell_energies

cosmic_table = pytest.importorskip("cosmic.sample.initialcmctable")
InitialCMCTable = cosmic_table.InitialCMCTable


def _write(singles, binaries, path):
    InitialCMCTable.write(singles, binaries, filename=str(path))
    return path


@pytest.fixture(scope="module")
def cosmic_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cosmic")
    files = {}
    s, b = InitialCMCTable.sampler("cmc_point_mass", cluster_profile="plummer", size=300,
                                   r_max=100, seed=3, virial_radius=1.5)
    files["plummer"] = _write(s, b, d / "plummer.hdf5")
    s, b = InitialCMCTable.sampler("cmc", binfrac_model=0.0, primary_model="kroupa01",
                                   ecc_model="thermal", porb_model="log_uniform", qmin=0.1,
                                   cluster_profile="king", met=0.001, size=300, w_0=6, seed=4,
                                   virial_radius=2.0, tidal_radius=25.0)
    files["king_kroupa"] = _write(s, b, d / "king_kroupa.hdf5")
    s, b = InitialCMCTable.sampler("cmc", binfrac_model=0.2, primary_model="kroupa01",
                                   ecc_model="thermal", porb_model="log_uniform", qmin=0.1,
                                   cluster_profile="king", met=0.014, size=300, w_0=5, seed=5,
                                   virial_radius=2.0, tidal_radius=30.0)
    files["binaries"] = _write(s, b, d / "binaries.hdf5")
    return files


def _by_id(path):
    singles, binaries = InitialCMCTable.read(str(path))
    singles = singles.iloc[1:-1].sort_values("id").reset_index(drop=True)
    binaries = binaries.iloc[1:].sort_values("id1").reset_index(drop=True)
    return singles, binaries


@pytest.mark.parametrize("name", ["plummer", "king_kroupa", "binaries"])
def test_read_matches_cosmic_reader(cosmic_files, name):
    path = cosmic_files[name]
    assert is_cosmic_file(path)
    stars, info = read_cosmic(path)
    singles, binaries = _by_id(path)
    with h5py.File(path, "r") as fh:
        a = fh["CLUS_OBJ_DATA/block0_values"].attrs
        mclus, rvir, rtid, z = (float(a[k]) for k in ("MCLUS", "RVIR", "RTID", "Z"))
    assert info["n"] == len(singles)
    assert np.all(np.diff(stars["r"]) >= 0)
    is_bin = stars["binind"] >= 0
    # objects by their COSMIC id: a binary's object carries its first member's id there
    ids = np.where(is_bin, stars.get("bin_id1", stars["id"]), stars["id"])
    order = np.argsort(ids)
    np.testing.assert_array_equal(ids[order], singles["id"].to_numpy().astype(np.int64))
    for ours, theirs in (("m", "m"), ("r", "r"), ("vr", "vr"), ("vt", "vt")):
        assert np.array_equal(stars[ours][order], singles[theirs].to_numpy()), ours
    np.testing.assert_array_equal(stars["startype"][order], singles["k"].to_numpy())
    np.testing.assert_allclose(stars["rad"][order],
                               singles["Reff"].to_numpy() * rvir / PARSEC_PER_RSUN, rtol=1e-15)
    np.testing.assert_allclose(stars["m_msun"].sum(), mclus, rtol=1e-12)
    assert info["unit_length_pc"] == rvir and info["r_tidal"] == rtid
    assert info["metallicity"] == z
    assert in_nbody_units(stars)  # COSMIC scales to M = 1, K = 1/4, W = -1/2
    if name == "binaries":
        assert is_bin.sum() == len(binaries) > 20
        rows = np.flatnonzero(is_bin)
        rows = rows[np.argsort(stars["bin_id1"][rows])]
        for ours, theirs in (("bin_id1", "id1"), ("bin_id2", "id2"), ("bin_m1", "m1"),
                             ("bin_m2", "m2"), ("bin_a", "a"), ("bin_e", "e"),
                             ("bin_startype1", "k1"), ("bin_startype2", "k2")):
            assert np.array_equal(stars[ours][rows], binaries[theirs].to_numpy()), ours
        np.testing.assert_allclose(stars["bin_m1"][rows] + stars["bin_m2"][rows],
                                   stars["m"][rows], rtol=1e-14)
        # ids unique over objects and members
        allids = np.concatenate([stars["id"], stars["bin_id1"][rows], stars["bin_id2"][rows]])
        assert np.unique(allids).size == allids.size
        assert np.all(stars["id"][rows] >= NEW_BINARY_ID_BASE)
    else:
        assert not is_bin.any()


def test_physical_scale_from_the_file(cosmic_files):
    path = cosmic_files["king_kroupa"]
    cfg = load_config(None, ["initial.model=file", f"initial.file={path}"])
    stars, info = build_initial_stars(cfg)
    m_unit, length_pc, _ = physical_scale(cfg, info, float(np.sum(stars["m"])))
    with h5py.File(path, "r") as fh:
        a = fh["CLUS_OBJ_DATA/block0_values"].attrs
        np.testing.assert_allclose(m_unit, float(a["MCLUS"]), rtol=1e-12)
        assert length_pc == float(a["RVIR"]) == 2.0
    # a Kroupa spectrum from 0.08 Msun: masses in Msun are those COSMIC drew
    assert 0.08 <= stars["m_msun"].min() and stars["m_msun"].max() <= 150.0


@pytest.mark.parametrize("name", ["king_kroupa", "binaries"])
def test_round_trip_through_a_run(cosmic_files, tmp_path, name):
    """COSMIC file -> our run (step 0 snapshot) -> cmc ic --format cosmic -> COSMIC's reader:
    the same objects, bit for bit (ids, masses, positions, velocities, binaries)."""
    src = cosmic_files[name]
    out = tmp_path / "run"
    assert main(["run", str(src), "-o", str(out), "--set", "run.max_steps=1"]) == 0
    snap = sorted((out / "snapshots").glob("snap_*.h5"))[0]
    back = tmp_path / "back.hdf5"
    assert main(["ic", "file", "--input", str(snap), "--format", "cosmic", "-o", str(back)]) == 0
    s0, b0 = _by_id(src)
    s1, b1 = _by_id(back)
    for col in ("id", "k", "m", "r", "vr", "vt"):
        assert np.array_equal(s0[col].to_numpy(), s1[col].to_numpy()), col
    np.testing.assert_allclose(s1["Reff"].to_numpy(), s0["Reff"].to_numpy(), rtol=1e-14)
    assert (s0["binind"] > 0).sum() == (s1["binind"] > 0).sum()
    for col in ("id1", "id2", "k1", "k2", "m1", "m2", "a", "e"):
        assert np.array_equal(b0[col].to_numpy(), b1[col].to_numpy()), col
    # binind points at the right binary in the written file
    s1_all, b1_all = InitialCMCTable.read(str(back))
    rows = s1_all[s1_all["binind"] > 0]
    np.testing.assert_array_equal(b1_all.loc[rows["binind"].astype(int).to_numpy(), "id1"]
                                  .to_numpy(), rows["id"].to_numpy())
    with h5py.File(src, "r") as f0, h5py.File(back, "r") as f1:
        a0 = f0["CLUS_OBJ_DATA/block0_values"].attrs
        a1 = f1["CLUS_OBJ_DATA/block0_values"].attrs
        for k in ("NOBJ", "NBINARY", "RVIR", "RTID", "Z"):
            assert float(a0[k]) == float(a1[k]), k
        np.testing.assert_allclose(float(a1["MCLUS"]), float(a0["MCLUS"]), rtol=1e-12)


def test_our_models_written_for_cosmic(tmp_path):
    """cmc ic king --format cosmic with binaries: COSMIC's reader loads it and our reader gives
    back the same stars."""
    out = tmp_path / "ours.hdf5"
    assert main(["ic", "king", "--n", "400", "--w0", "5", "--seed", "3", "--format", "cosmic",
                 "--set", "initial.mass_function=kroupa", "--set", "initial.m_min=0.08",
                 "--set", "initial.m_max=1", "--set", "initial.binary_fraction=0.1",
                 "--set", "initial.r_vir_pc=3", "-o", str(out)]) == 0
    singles, binaries = InitialCMCTable.read(str(out))
    cfg = load_config(None, ["initial.model=king", "initial.n=400", "initial.w0=5",
                             "initial.seed=3", "initial.mass_function=kroupa",
                             "initial.m_min=0.08", "initial.m_max=1",
                             "initial.binary_fraction=0.1"])
    ref, info = build_initial_stars(cfg)
    assert len(singles) == 400 + 2
    assert len(binaries) - 1 == info["n_binaries"] == np.count_nonzero(ref["binind"] >= 0) > 10
    got, ginfo = read_cosmic(out)
    for k in ("m", "r", "vr", "vt", "m_msun"):
        assert np.array_equal(got[k], ref[k]) or k == "m_msun", k
    np.testing.assert_allclose(got["m_msun"], ref["m_msun"], rtol=1e-12)
    b = ref["binind"] >= 0
    assert np.array_equal(got["bin_a"][b], ref["bin_a"][b])
    # main-sequence types as COSMIC's sampler sets them: k = 0 up to 0.7 Msun, 1 above
    np.testing.assert_array_equal(got["startype"], np.where(got["m_msun"] > 0.7, 1, 0))
    np.testing.assert_array_equal(got["bin_startype1"][b],
                                  np.where(got["bin_m1_msun"][b] > 0.7, 1, 0))
    assert 0 < np.count_nonzero(got["startype"] == 1) < got["startype"].size
    assert ginfo["unit_length_pc"] == 3.0
    np.testing.assert_allclose(ginfo["r_tidal"], info["r_tidal"], rtol=1e-15)


def _copy(src, tmp_path, name="bad.hdf5"):
    dst = tmp_path / name
    shutil.copy(src, dst)
    return dst


def _expect_one_line(path, tmp_path, match):
    with pytest.raises(InputError, match=match) as exc:
        read_cosmic(path)
    assert "\n" not in str(exc.value)
    # and through the CLI: exit 2, one line on stderr
    assert main(["run", str(path), "-o", str(tmp_path / "o"), "--set",
                 "run.max_steps=1"]) == 2


def test_truncated_file_is_one_line(cosmic_files, tmp_path):
    bad = _copy(cosmic_files["binaries"], tmp_path)
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    # a file cut short is not even HDF5 any more: the run says it cannot open it
    with pytest.raises(InputError, match="cannot open|damaged|truncated"):
        read_cosmic(bad)


def test_malformed_files_are_one_line(cosmic_files, tmp_path, capsys):
    src = cosmic_files["binaries"]
    bad = _copy(src, tmp_path, "nobj.hdf5")
    with h5py.File(bad, "a") as fh:
        fh["CLUS_OBJ_DATA/block0_values"].attrs["NOBJ"] = 299
    _expect_one_line(bad, tmp_path, "NOBJ = 299")
    bad = _copy(src, tmp_path, "sentinel.hdf5")
    with h5py.File(bad, "a") as fh:
        v = fh["CLUS_OBJ_DATA/block0_values"]
        v[-1, 4] = 1.0
    _expect_one_line(bad, tmp_path, "sentinel")
    bad = _copy(src, tmp_path, "bh.hdf5")
    with h5py.File(bad, "a") as fh:
        fh["CLUS_OBJ_DATA/block0_values"][0, 2] = 0.01
    _expect_one_line(bad, tmp_path, "central black hole")
    bad = _copy(src, tmp_path, "col.hdf5")
    with h5py.File(bad, "a") as fh:
        items = fh["CLUS_OBJ_DATA/block0_items"]
        names = items[...]
        names[names == b"vt"] = b"vx"
        items[...] = names
    _expect_one_line(bad, tmp_path, "lacks the column")
    bad = _copy(src, tmp_path, "binind.hdf5")
    with h5py.File(bad, "a") as fh:
        v = fh["CLUS_OBJ_DATA/block0_values"]
        col = list(fh["CLUS_OBJ_DATA/block0_items"][...]).index(b"binind")
        vals = v[:, col]
        vals[np.argmax(vals)] = 999
        v[:, col] = vals
    _expect_one_line(bad, tmp_path, "binind")
    bad = _copy(src, tmp_path, "nbin.hdf5")
    with h5py.File(bad, "a") as fh:
        fh["CLUS_OBJ_DATA/block0_values"].attrs["NBINARY"] = 3
    _expect_one_line(bad, tmp_path, "NBINARY")
    err = capsys.readouterr().err
    assert "Traceback" not in err


def _scale_radii(src, tmp_path, factor):
    """A copy of a COSMIC file with every object's radius (column 4, ``r``; the first and last
    rows are COSMIC's sentinels) multiplied by ``factor``, velocities and masses kept."""
    path = _copy(src, tmp_path, f"r_times_{factor:g}.hdf5")
    with h5py.File(path, "a") as fh:
        v = fh["CLUS_OBJ_DATA/block0_values"]
        vals = v[...]
        vals[1:-1, 4] *= factor
        v[...] = vals
    return path


def test_not_nbody_units_is_rescaled(cosmic_files, tmp_path, caplog):
    """A COSMIC-layout file whose positions are not in N-body units is rescaled with a warning,
    as any other initial-conditions file: homologously to M = 1 and E = -1/4, its virial ratio
    kept (physics/henon_units.scale_to_henon_units).

    Radii x 5/4 of a virialised file (K = 1/4, W = -1/2) give W = -2/5, so Q = 2K/|W| = 5/4 and
    E = -3/20: bound and clearly not virial.  (Not x 2: that gives Q = 2, E = 0, the unbound
    limit the rescaling refuses, where the last bit decides between the two outcomes.)
    """
    src = cosmic_files["binaries"]
    bad = _scale_radii(src, tmp_path, 1.25)
    before, _ = read_cosmic(bad)
    k0, w0 = shell_energies(before["r"], before["vr"], before["vt"], before["m"])
    q = 2.0 * k0 / abs(w0)
    assert abs(q - 1.25) < 1e-9 and k0 + w0 < -0.1  # the case this test is about
    cfg = load_config(None, ["initial.model=file", f"initial.file={bad}"])
    with caplog.at_level("WARNING"):
        stars, _ = build_initial_stars(cfg)
    assert "not in Hénon units" in caplog.text
    assert np.all(np.diff(stars["r"]) >= 0)
    k, w = shell_energies(stars["r"], stars["vr"], stars["vt"], stars["m"])
    np.testing.assert_allclose(np.sum(stars["m"]), 1.0, rtol=1e-14)
    np.testing.assert_allclose(k + w, -0.25, rtol=1e-12)
    # Q kept, not forced to 1: E = -1/4 and Q = 5/4 give W = -1/(2(2 - Q)) = -2/3, K = 5/12
    np.testing.assert_allclose(2.0 * k / abs(w), q, rtol=1e-12)
    np.testing.assert_allclose([k, w], [5.0 / 12.0, -2.0 / 3.0], rtol=1e-8)
    # homologous: the same stars, every radius by one factor, W_in / W_out (W ~ 1/length at
    # fixed mass), every velocity by sqrt(K_out / K_in), masses as they were (M was 1)
    order = np.argsort(before["id"])
    after = np.argsort(stars["id"])
    np.testing.assert_array_equal(stars["id"][after], before["id"][order])
    length, speed = w0 / w, np.sqrt(k / k0)
    np.testing.assert_allclose(length, 0.6, rtol=1e-8)
    np.testing.assert_allclose(stars["r"][after], length * before["r"][order], rtol=1e-12)
    for v in ("vr", "vt"):
        np.testing.assert_allclose(stars[v][after], speed * before[v][order], rtol=1e-12,
                                   atol=1e-15)
    np.testing.assert_allclose(stars["m"][after], before["m"][order], rtol=1e-14)
    np.testing.assert_array_equal(stars["m_msun"][after], before["m_msun"][order])
    # binaries' orbits are lengths too: their semi-major axes scale with the radii
    b = before["binind"][order] >= 0
    assert b.sum() > 20
    np.testing.assert_allclose(stars["bin_a"][after][b], length * before["bin_a"][order][b],
                               rtol=1e-12)


def test_unbound_file_is_refused(cosmic_files, tmp_path):
    """Radii x 4 of a virialised file: Q = 2K/|W| = 4, E > 0, no scaling to E = -1/4 exists;
    refused in one line (exit 2 through the CLI)."""
    bad = _scale_radii(cosmic_files["binaries"], tmp_path, 4.0)
    cfg = load_config(None, ["initial.model=file", f"initial.file={bad}"])
    with pytest.raises(InputError, match="cannot be rescaled: input is unbound") as exc:
        build_initial_stars(cfg)
    assert "\n" not in str(exc.value)
    assert main(["run", str(bad), "-o", str(tmp_path / "o"), "--set", "run.max_steps=1"]) == 2


def test_fits_files_are_refused_with_the_way_out(tmp_path, capsys):
    fits = tmp_path / "king.fits"
    fits.write_bytes(b"SIMPLE  =                    T")
    assert main(["run", str(fits), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "FITS" in err[0] and "hdf5" in err[0]
