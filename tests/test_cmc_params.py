"""cmc convert-ini: CMC-COSMIC parameter files mapped onto ours (cmc/cmc_params.py).

tests/data/cmc_king_params.ini has the keys of the KingProfile example shipped with CMC-COSMIC.
"""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

import pytest

from cmc.cli import main
from cmc.cmc_params import T_MAX_OUT_OF_THE_WAY, convert_cmc_ini
from cmc.config import RunConfig, load_config
from cmc.errors import InputError

DATA = Path(__file__).parent / "data" / "cmc_king_params.ini"


def _keys(path):
    cp = configparser.ConfigParser(interpolation=None, strict=False,
                                   inline_comment_prefixes=(";",))
    cp.optionxform = str
    cp.read(path)
    return {sec: list(cp[sec]) for sec in cp.sections()}


def test_every_parameter_is_mapped_or_listed():
    conv = convert_cmc_ini(DATA)
    accounted = {c for c, _ in conv.mapped} | {p for p, _, _ in conv.ignored} \
        | {p.removeprefix("[bse] ") for p, _, _ in conv.not_honoured}
    keys = _keys(DATA)
    honoured_when_off = {"PERTURB", "SNAPSHOTTING", "TIDAL_CAPTURE", "TC_POLYTROPE",
                         "BHNS_TDE", "USE_TT_FILE", "USE_DF_CUTOFF",
                         "BH_SNAPSHOTTING", "SNAPSHOT_CORE_COLLAPSE", "WRITE_EXTRA_CORE_INFO",
                         "WRITE_PULSAR_INFO", "WRITE_MOREPULSAR_INFO", "WRITE_STELLAR_INFO",
                         "FORCE_RLX_STEP", "DT_HARD_BINARIES", "AVEKERNEL", "BH_AVEKERNEL",
                         "MIN_CHUNK_SIZE", "NUM_CENTRAL_STARS", "BINARY_BREAKING_MIN",
                         "ONLY_FORM_BH_THREEBODYBINARIES"}
    for key in keys["cmc"] + keys["bse"]:
        assert key in accounted or key in honoured_when_off, key
    # ... and those honoured by their value really are at a value that asks for nothing here
    for key in ("TIDAL_CAPTURE", "USE_TT_FILE", "WRITE_STELLAR_INFO", "BINARY_BREAKING_MIN"):
        assert key not in accounted
    listed = {p for p, _, _ in conv.not_honoured}
    for key in ("TIDAL_TREATMENT", "SNAPSHOT_WINDOWS",
                "MASS_BINS", "WRITE_BH_INFO"):
        assert key in listed, key
    # every [bse] key of CMC-COSMIC's example is mapped (issue 48): none is listed
    assert keys["bse"] and not any(p.startswith("[bse]") for p in listed)
    assert {c for c, _ in conv.mapped} >= set(keys["bse"])


def test_mapped_values(tmp_path):
    conv = convert_cmc_ini(DATA)
    cfg = load_config(text=conv.ini())
    assert cfg.run.theta_max == 1.412 and cfg.run.gamma == 0.01
    # CMC-COSMIC's time-step windows: 2 AVEKERNEL = 40 stars (simul_relax_new)
    assert cfg.run.dt_window == 40
    assert ("AVEKERNEL", "run.dt_window = 40") in conv.mapped
    # BH_AVEKERNEL = 3 in the file: honoured (it said 10 neighbours were used whatever it was)
    assert ("BH_AVEKERNEL", "binaries.three_body_neighbours = 3") in conv.mapped
    assert cfg.binaries.three_body_neighbours == 3
    assert cfg.run.t_max_code == 100.0 and cfg.run.t_max_myr == 13800.0
    assert cfg.run.t_max == T_MAX_OUT_OF_THE_WAY
    assert cfg.run.max_steps == 10_000_000 and cfg.run.max_wall_hours == 168.0
    assert cfg.run.n_core_stop == 0.0 and cfg.run.energy_error_max == 10.0
    assert cfg.initial.model == "file"
    assert cfg.initial.file == str(DATA.parent / "king.hdf5")
    assert cfg.initial.seed == 1234
    assert cfg.tidal.mode == "shrinking" and cfg.tidal.r_t0_from == "model"
    assert cfg.binaries.three_body == "bh" and cfg.binaries.eta_min == 5.0
    assert cfg.binaries.wide_factor == 0.1
    assert cfg.output.checkpoint_minutes == 120.0 and cfg.output.checkpoints_to_keep == 2
    assert cfg.output.snapshot_every == 1000
    assert len(cfg.output.lagrange_fractions) == 25
    assert cfg.output.lagrange_fractions[0] == 0.0001


def test_switches_and_refusals(tmp_path):
    ini = tmp_path / "p.ini"
    ini.write_text("[cmc]\nINPUT_FILE = /x/y.hdf5\nTHETASEMAX = 5\nTHREEBODYBINARIES = 1\n"
                   "ONLY_FORM_BH_THREEBODYBINARIES = 0\nBINARY_BREAKING_MIN = 1\n"
                   "MIN_BINARY_HARDNESS = 3\nBINARY_DISTANCE_BREAKING = 0.1\nPERTURB = 0\n"
                   "TIDALLY_STRIP_STARS = 0\nSTOPATCORECOLLAPSE = 1\nAVEKERNEL = 10\n"
                   "FOO = 1\n")
    conv = convert_cmc_ini(ini)
    cfg = load_config(text=conv.ini())
    listed = {p: why for p, _, why in conv.not_honoured}
    assert "THETASEMAX" in listed and "run.theta_max" in listed["THETASEMAX"]
    assert cfg.run.theta_max == RunConfig.theta_max  # left at ours
    assert "AVEKERNEL" in listed and "FOO" in listed
    assert not any(k == "AVEKERNEL" for k, _ in conv.mapped)  # AVEKERNEL = 10: not honoured
    assert "BINARY_DISTANCE_BREAKING" in listed
    assert cfg.binaries.wide_factor == 0.0 and cfg.binaries.wide_hardness_min == 3.0
    assert cfg.run.relaxation is False and cfg.binaries.binary_single is False
    assert cfg.binaries.three_body == "off"  # PERTURB = 0 comes first and wins
    assert cfg.tidal.mode == "isolated" and cfg.run.n_core_stop == 100.0
    # defaults of CMC when absent: T_MAX = 100, T_MAX_PHYS = 13.8 Gyr
    assert cfg.run.t_max_code == 100.0 and cfg.run.t_max_myr == 13800.0


def test_collisions_and_radius_factors_are_mapped(tmp_path):
    """SS_COLLISION, COLL_FACTOR and BH_RADIUS_MULTIPLYER map to [binaries] ss_collision,
    coll_factor, bh_radius_multiplier; single-single collisions need the stars' radii, so
    without stellar evolution SS_COLLISION = 1 is listed as not honoured, with the reason."""
    ini = tmp_path / "p.ini"
    ini.write_text("[cmc]\nSTELLAR_EVOLUTION = 1\nSS_COLLISION = 1\nCOLL_FACTOR = 2.0\n"
                   "BH_RADIUS_MULTIPLYER = 4\n")
    conv = convert_cmc_ini(ini)
    assert conv.not_honoured == []
    cfg = load_config(text=conv.ini())
    assert cfg.binaries.ss_collision and cfg.binaries.coll_factor == 2.0
    assert cfg.binaries.bh_radius_multiplier == 4.0
    assert main(["convert-ini", str(ini)]) == 0
    ini.write_text("[cmc]\nSTELLAR_EVOLUTION = 0\nSS_COLLISION = 1\n")
    listed = {p: why for p, _, why in convert_cmc_ini(ini).not_honoured}
    assert "bse.stellar_evolution" in listed["SS_COLLISION"]
    ini.write_text("[cmc]\nSS_COLLISION = 0\n")
    conv = convert_cmc_ini(ini)
    assert conv.not_honoured == [] and not load_config(text=conv.ini()).binaries.ss_collision
    # a run without stellar evolution gives the few-body engine no radius unit
    from cmc.simulation import Simulation
    from parallel.comm import SerialComm

    cfg = load_config(None, ["initial.n=200", "initial.binary_fraction=0.1"])
    assert Simulation.create(cfg, SerialComm()).phys.radius_unit == 0.0


def test_bh_capture_is_mapped(tmp_path):
    """BH_CAPTURE maps to binaries.bh_capture and binaries.pn25 (CMC-COSMIC turns the 2.5PN
    term in encounters on with it); it evaluates the capture only in its single-single branch
    (SS_COLLISION = 1): with SS_COLLISION = 0 only pn25 is set (nothing is ignored: that is
    CMC-COSMIC's run); without stellar evolution it is not honoured, with the reason."""
    conv = convert_cmc_ini(DATA)  # the King example: SS_COLLISION = 1, BH_CAPTURE = 1
    assert ("BH_CAPTURE", "binaries.bh_capture = true, binaries.pn25 = true") in conv.mapped
    cfg = load_config(text=conv.ini())
    assert cfg.binaries.bh_capture and cfg.binaries.pn25
    ini = tmp_path / "p.ini"
    ini.write_text("[cmc]\nSTELLAR_EVOLUTION = 1\nSS_COLLISION = 0\nBH_CAPTURE = 1\n")
    conv = convert_cmc_ini(ini)
    assert conv.not_honoured == [] and "BH_CAPTURE" not in dict(
        (p, why) for p, _, why in conv.ignored)
    assert ("BH_CAPTURE", "binaries.pn25 = true") in conv.mapped
    cfg = load_config(text=conv.ini())
    assert not cfg.binaries.bh_capture and cfg.binaries.pn25
    ini.write_text("[cmc]\nSTELLAR_EVOLUTION = 0\nSS_COLLISION = 1\nBH_CAPTURE = 1\n")
    listed = {p: why for p, _, why in convert_cmc_ini(ini).not_honoured}
    assert "bse.stellar_evolution" in listed["BH_CAPTURE"]
    ini.write_text("[cmc]\nSTELLAR_EVOLUTION = 1\nSS_COLLISION = 1\nBH_CAPTURE = 0\n")
    conv = convert_cmc_ini(ini)
    assert ("BH_CAPTURE", "binaries.bh_capture = false, binaries.pn25 = false") in conv.mapped
    assert not load_config(text=conv.ini()).binaries.bh_capture


def test_not_a_cmc_file(tmp_path):
    bad = tmp_path / "ours.ini"
    bad.write_text("[run]\ntheta_max = 1\n")
    with pytest.raises(InputError, match=r"no \[cmc\] section"):
        convert_cmc_ini(bad)
    assert main(["convert-ini", str(tmp_path / "missing.ini")]) == 2


@pytest.mark.parametrize("line, key", [
    ("T_MAX = abc", "T_MAX"), ("BINBIN = maybe", "BINBIN"), ("IDUM = x1", "IDUM"),
    ("T_MAX_COUNT = 1e400", "T_MAX_COUNT"), ("AVEKERNEL = twenty", "AVEKERNEL"),
    ("TIDAL_CAPTURE = yes", "TIDAL_CAPTURE"),
])
def test_non_numeric_values_are_one_line_errors(tmp_path, capsys, line, key):
    """A value read as a number or switch that is not one: exit 2, one line naming the file
    and the parameter (issue 46, item 6: exit 1, 'could not convert string to float')."""
    ini = tmp_path / "cmc.ini"
    ini.write_text(f"[cmc]\nTHETASEMAX = 1.412\n{line}\n")
    with pytest.raises(InputError, match=key):
        convert_cmc_ini(ini)
    capsys.readouterr()
    assert main(["convert-ini", str(ini)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0].startswith("cmc: error: ") and str(ini) in lines[0], lines[0]
    assert f"{key} = " in lines[0], lines[0]


def test_cli_two_commands_from_cosmic_and_cmc_files(tmp_path):
    """The README's workflow: a COSMIC file and a CMC parameter file, two commands."""
    table = pytest.importorskip("cosmic.sample.initialcmctable").InitialCMCTable
    s, b = table.sampler("cmc", binfrac_model=0.1, primary_model="kroupa01",
                         ecc_model="thermal", porb_model="log_uniform", qmin=0.1,
                         cluster_profile="king", met=0.001, size=300, w_0=6, seed=2,
                         virial_radius=2.0, tidal_radius=20.0)
    table.write(s, b, filename=str(tmp_path / "king.hdf5"))
    text = DATA.read_text().replace("T_MAX_COUNT = 10000000", "T_MAX_COUNT = 3")
    (tmp_path / "params.ini").write_text(text)
    p = subprocess.run([sys.executable, "-m", "cmc.cli", "convert-ini",
                        str(tmp_path / "params.ini")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "not honoured: TIDAL_TREATMENT = 1" in p.stderr
    assert "BH_CAPTURE" not in p.stderr  # mapped (with SS_COLLISION and stellar evolution)
    assert p.stderr.count("\n") == p.stderr.count("cmc convert-ini:")  # one line each
    (tmp_path / "ours.ini").write_text(p.stdout)
    assert main(["run", str(tmp_path / "ours.ini"), "-o", str(tmp_path / "run")]) == 0
    import h5py

    with h5py.File(tmp_path / "run" / "diagnostics.h5", "r") as fh:
        assert fh["step"][-1] == 3
        assert fh["r_tidal"][0] == 20.0  # RTID of the COSMIC file, in virial radii
        assert float(fh.attrs["unit_length_pc"]) == 2.0


def test_docs_workflow_example(tmp_path):
    """examples/cosmic (docs/cosmic.md): COSMIC's sampler makes king.hdf5, CMC-COSMIC's King
    parameter file converts, runs (a few steps here) and exports."""
    pytest.importorskip("cosmic.sample.initialcmctable")
    import importlib.util
    import shutil

    src = Path(__file__).resolve().parents[1] / "examples" / "cosmic"
    work = tmp_path / "examples" / "cosmic"
    shutil.copytree(src, work)
    spec = importlib.util.spec_from_file_location("make_king_ic", work / "make_king_ic.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(str(tmp_path / "king.hdf5"), 400)  # INPUT_FILE = ../../king.hdf5
    conv = convert_cmc_ini(work / "KingProfile.ini")
    cfg = load_config(text=conv.ini())
    assert cfg.initial.file == str(tmp_path / "king.hdf5") and cfg.run.t_max_myr == 500.0
    (tmp_path / "king.ini").write_text(conv.ini())
    out = tmp_path / "runs" / "king_cosmic"
    assert main(["run", str(tmp_path / "king.ini"), "-o", str(out), "--set",
                 "run.max_steps=5"]) == 0
    assert main(["export", str(out), "--format", "cmc"]) == 0
    assert (out / "cmc" / "initial.dyn.dat").exists()


def test_docs_show_what_convert_ini_prints(capsys):
    """docs/cosmic.md quotes cmc convert-ini on examples/cosmic/KingProfile.ini: its summary
    line (how many parameters are mapped and how many not honoured) is the command's own
    (issue 46, item 11: the docs said 22 mapped, the command printed 23), and no [bse] line
    is listed as not honoured (issue 48 maps them all)."""
    import re

    root = Path(__file__).resolve().parents[1]
    assert main(["convert-ini", str(root / "examples" / "cosmic" / "KingProfile.ini")]) == 0
    err = capsys.readouterr().err.splitlines()
    doc = (root / "docs" / "cosmic.md").read_text()
    summary = next(x for x in err if "parameter(s) mapped" in x)
    assert summary in doc
    # issue 48: every [bse] key of the example is mapped, none listed (nor in the docs)
    assert not any("[bse]" in x or "STELLAR_EVOLUTION" in x for x in err)
    assert not re.search(r"not honoured: (\[bse\]|STELLAR_EVOLUTION)", doc)


#: A [bse] section as CMC-COSMIC writes it (examples/KingProfile.ini's spelling: mixed case,
#: bracketed arrays, scalar alpha1 and acc_lim), with a few values off its defaults.
CMC_BSE = """[cmc]
BSE_IDUM = 7
[bse]
STELLAR_EVOLUTION = 1
pts1 = 0.05
PTS1_HIGHMASS_CUTOFF = 8
windflag = 2
alpha1 = 3.0
acc_lim = 0.5
kickflag = -2
ecsn = 1.0
ecsn_mlow = 0.8
qcrit_array = [0.0,1.5,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0]
natal_kick_array=[[-100.0,-100.0,-100.0,-100.0,0],[50.0,10.0,20.0,30.0,0.0]]
FPRIMC
ST_tide = 1
LBV_flag = 2
nsflag = 3
""".replace("FPRIMC", "fprimc_array = [" + ",".join(["0.0952381"] * 16) + "]")


def test_bse_section_converts_to_our_keys(tmp_path):
    """Issue 48: CMC's [bse] maps onto bse.<flag> (case-insensitively), the scalars alpha1 and
    acc_lim hold for both members, the arrays keep or lose their brackets, BSE_IDUM changes
    nothing, a key COSMIC does not know is not honoured; the converted file validates."""
    ini = tmp_path / "cmc.ini"
    ini.write_text(CMC_BSE)
    conv = convert_cmc_ini(ini)
    cfg = load_config(text=conv.ini())
    b = cfg.bse
    assert b.stellar_evolution is True and b.pts1 == 0.05 and b.pts1_highmass_cutoff == 8.0
    assert b.windflag == 2 and b.alpha1 == [3.0, 3.0] and b.acc_lim == [0.5, 0.5]
    assert b.kickflag == -3  # CMC's -2 (Giacobbo & Mapelli Eq. 2) in COSMIC 4.3.3
    assert (b.ecsn, b.ecsn_mlow) == (1.0, 0.8)  # set together (0.8 <= 1 but 1 < 1.4)
    assert b.qcrit_array[1] == 1.5 and len(b.qcrit_array) == 16
    assert b.natal_kick_array == [-100.0] * 4 + [0.0, 50.0, 10.0, 20.0, 30.0, 0.0]
    assert b.fprimc_array == [0.0952381] * 16
    assert b.st_tide == 1 and b.lbv_flag == 2
    # absent with stellar evolution on: CMC's C defaults where they differ from ours
    assert (b.hewind, b.ussn, b.rejuv_fac, b.rejuvflag) == (1.0, 0, 0.1, 1)
    assert ("PTS1_HIGHMASS_CUTOFF", "bse.pts1_highmass_cutoff = 8.0") in conv.mapped
    assert ("ST_tide", "bse.st_tide = 1") in conv.mapped
    assert ("kickflag", "bse.kickflag = -3") in conv.mapped
    assert {p for p, _, _ in conv.ignored} == {"BSE_IDUM"}
    listed = {p: why for p, _, why in conv.not_honoured}
    assert set(listed) == {"[bse] nsflag"} and "COSMIC" in listed["[bse] nsflag"]
    # our own ini round-trips
    assert load_config(text=cfg.to_ini()) == cfg


@pytest.mark.parametrize("cmc_kick, ours", [(0, -1), (-1, -2), (-2, -3), (-3, -4)])
def test_kickflag_is_renumbered(tmp_path, cmc_kick, ours):
    """CMC-COSMIC's COSMIC predates 3.5.0's renumbering (0 BSE's kicks, -1/-2 Giacobbo &
    Mapelli Eq. 1/2, -3 Bray & Eldridge, all with the Kiel & Hurley orbit update): the same
    prescriptions with that update are -1 ... -4 in COSMIC 4.3.3."""
    ini = tmp_path / "cmc.ini"
    ini.write_text(f"[cmc]\n[bse]\nkickflag = {cmc_kick}\n")
    conv = convert_cmc_ini(ini)
    assert load_config(text=conv.ini()).bse.kickflag == ours
    assert conv.not_honoured == []


def test_bse_refusals(tmp_path):
    """kickflag outside CMC's numbering, and values our validation refuses, are listed (the
    converted file keeps ours); a non-number is a one-line error naming the key."""
    ini = tmp_path / "cmc.ini"
    ini.write_text("[cmc]\n[bse]\nkickflag = 5\nhewind = 2\nalpha1 = 1,2,3\n")
    conv = convert_cmc_ini(ini)
    listed = {p: why for p, _, why in conv.not_honoured}
    assert set(listed) == {"kickflag", "hewind", "alpha1"}
    assert "bse.hewind" in listed["hewind"] and "2 numbers" in listed["alpha1"]
    cfg = load_config(text=conv.ini())
    assert cfg.bse.kickflag == -1 and cfg.bse.hewind == 0.5 and cfg.bse.stellar_evolution is False
    ini.write_text("[cmc]\n[bse]\nsigma = fast\n")
    with pytest.raises(InputError, match="sigma = 'fast'"):
        convert_cmc_ini(ini)
