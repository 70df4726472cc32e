"""Runs that never lose work: run directories, locks, verified checkpoints, restart rules,
exit codes, one-line errors, disk full, diagnostics appended and readable during a run, and
kill -9 at random points followed by restarts that end bit for bit where an unbroken run ends.

Each test here failed on the code before these protections (see the issue's list of defects).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from cmc.cli import main
from cmc.errors import EXIT_INPUT, EXIT_IO, EXIT_OK, EXIT_PHYSICS, EXIT_RESUMABLE

pytestmark = pytest.mark.timeout(300)

SMALL = ("[initial]\nn = 600\nseed = 4\n[run]\nmax_steps = 12\nn_core_stop = 0\n"
         "[output]\ncheckpoint_every = 4\nsnapshot_every = 5\ndiagnostics_every = 3\n")


def _ini(tmp_path: Path, text: str = SMALL, name: str = "m.ini") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _stars(outdir: Path, name: str = "checkpoint.h5") -> dict[str, np.ndarray]:
    with h5py.File(outdir / name, "r") as fh:
        out = {k: fh["stars"][k][...] for k in fh["stars"]}
        out["streams"] = fh["streams/states"][...]
    return out


def _assert_same_final(a: Path, b: Path) -> None:
    sa, sb = _stars(a), _stars(b)
    assert sa.keys() == sb.keys()
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)


def _rewrite_checksum(path: Path) -> None:
    """Make a deliberately altered checkpoint self-consistent again (so that the physical
    checks, not the checksum, must catch the damage)."""
    from cmc.io import content_digest

    with h5py.File(path, "a") as fh:
        fh.attrs["sha256"] = content_digest(fh)


def _capture_cmc_logs(caplog) -> None:
    """The ``cmc`` logger does not propagate (it has its own rank-aware handlers)."""
    import logging

    logger = logging.getLogger("cmc")
    if caplog.handler not in logger.handlers:
        logger.addHandler(caplog.handler)


def _one_error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("cmc: error")]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    return lines[0]


# --------------------------------------------------------------------------- run directories
def test_run_refuses_a_directory_with_a_finished_run_without_checkpoint(tmp_path, capsys):
    ini = _ini(tmp_path)
    out = tmp_path / "o"
    assert main(["run", str(ini), "-o", str(out)]) == EXIT_OK
    for f in out.glob("checkpoint*.h5"):
        f.unlink()
    before = (out / "diagnostics.h5").stat().st_mtime_ns
    assert main(["run", str(ini), "-o", str(out)]) == EXIT_INPUT
    assert "already holds" in _one_error_line(capsys.readouterr().err)
    assert (out / "diagnostics.h5").stat().st_mtime_ns == before


def test_overwrite_removes_the_old_outputs_first(tmp_path):
    ini = _ini(tmp_path)
    out = tmp_path / "o"
    assert main(["run", str(ini), "-o", str(out)]) == EXIT_OK
    stray = out / "snapshots" / "snap_9999999.h5"
    stray.write_bytes(b"old run")
    (out / "notes.txt").write_text("mine")
    assert main(["run", str(ini), "-o", str(out), "--overwrite"]) == EXIT_OK
    assert not stray.exists()
    assert (out / "notes.txt").read_text() == "mine"  # not a run output: left alone


def test_final_state_is_in_a_snapshot(tmp_path):
    ini = _ini(tmp_path, SMALL.replace("max_steps = 12", "max_steps = 13"))
    out = tmp_path / "o"
    assert main(["run", str(ini), "-o", str(out)]) == EXIT_OK
    names = sorted(p.name for p in (out / "snapshots").glob("*.h5"))
    assert names == ["snap_0000000.h5", "snap_0000005.h5", "snap_0000010.h5",
                     "snap_0000013.h5"]


def test_resume_reports_a_finished_run_and_continues_an_unfinished_one(tmp_path, capsys):
    """``make run`` twice: the second says the run is finished and where (exit 0); a run
    stopped early is continued and ends as the unbroken run does."""
    ini = _ini(tmp_path)
    ref, out = tmp_path / "ref", tmp_path / "o"
    assert main(["run", str(ini), "-o", str(ref)]) == EXIT_OK
    assert main(["run", str(ini), "-o", str(ref), "--resume"]) == EXIT_OK
    assert "finished run" in capsys.readouterr().err
    assert main(["run", str(ini), "-o", str(out), "--set", "run.max_wall_hours=1e-9"]) \
        == EXIT_RESUMABLE
    # --resume continues with the parameters the run was started with; the wall-clock
    # limit was one of them, so lift it through the recorded config
    cfg = (out / "config.ini").read_text().replace("max_wall_hours = 1e-09",
                                                   "max_wall_hours = 0.0")
    (out / "config.ini").write_text(cfg)
    assert main(["restart", str(out), "--set", "run.max_wall_hours=0"]) == EXIT_OK
    _assert_same_final(ref, out)
    assert main(["run", str(ini), "-o", str(tmp_path / "fresh"), "--resume"]) == EXIT_OK


def test_one_writer_per_run_directory(tmp_path, capsys):
    from cmc.rundir import RunLock

    ini = _ini(tmp_path)
    out = tmp_path / "o"
    with RunLock(out):
        assert main(["run", str(ini), "-o", str(out)]) == EXIT_INPUT
        line = _one_error_line(capsys.readouterr().err)
        assert f"pid {os.getpid()}" in line and "in use" in line
    # a killed holder's lock is taken over
    root = str(Path(__file__).resolve().parents[1])
    code = (f"import sys, time; sys.path.insert(0, {root!r}); from cmc.rundir import "
            f"RunLock; RunLock({str(out)!r}).acquire(); print('locked', flush=True); "
            "time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    assert main(["run", str(ini), "-o", str(out)]) == EXIT_INPUT
    proc.kill()
    proc.wait()
    assert main(["run", str(ini), "-o", str(out)]) == EXIT_OK


# --------------------------------------------------------------------------- checkpoints
@pytest.fixture
def stopped_run(tmp_path):
    """A run stopped at step 8 (checkpoints at 8 and 4 kept) and the path of its folder."""
    ini = _ini(tmp_path)
    out = tmp_path / "o"
    assert main(["run", str(ini), "-o", str(out), "--set", "run.max_steps=8"]) == EXIT_OK
    return ini, out


def test_checkpoints_kept_and_rotated(stopped_run):
    _, out = stopped_run
    names = sorted(p.name for p in out.glob("checkpoint*.h5"))
    assert names == ["checkpoint.1.h5", "checkpoint.h5"]
    steps = []
    for n in ("checkpoint.h5", "checkpoint.1.h5"):
        with h5py.File(out / n, "r") as fh:
            steps.append(int(fh["state"].attrs["step"]))
            assert "history" not in fh  # the diagnostics history is not copied
    assert steps == [8, 4]


@pytest.mark.parametrize("damage", ["flipped_stream_byte", "negative_mass", "negative_radius",
                                    "duplicate_id", "missing_group", "bad_stream_state",
                                    "unsorted", "truncated"])
def test_damaged_checkpoint_is_refused_and_the_previous_offered(stopped_run, capsys, damage):
    ini, out = stopped_run
    ck = out / "checkpoint.h5"
    if damage == "flipped_stream_byte":
        with h5py.File(ck, "r") as fh:
            off = fh["streams/states"].id.get_offset()
        raw = bytearray(ck.read_bytes())
        raw[off + 5] ^= 0x10
        ck.write_bytes(bytes(raw))
    elif damage == "truncated":
        ck.write_bytes(ck.read_bytes()[:4096])
    else:
        with h5py.File(ck, "a") as fh:
            s = fh["stars"]
            if damage == "negative_mass":
                s["m"][3] = -s["m"][3]
            elif damage == "negative_radius":
                s["r"][0] = -1.0
            elif damage == "duplicate_id":
                s["id"][5] = s["id"][6]
            elif damage == "missing_group":
                del fh["streams"]
            elif damage == "bad_stream_state":
                fh["streams/states"][0, 0, 3] = 5
            elif damage == "unsorted":
                r = s["r"][...]
                assert r[10] < r[11]
                r[10], r[11] = r[11], r[10]
                s["r"][...] = r
        if damage != "missing_group":
            _rewrite_checksum(ck)
    assert main(["restart", str(out), "--set", "run.max_steps=12"]) == EXIT_INPUT
    line = _one_error_line(capsys.readouterr().err)
    assert "checkpoint" in line and "checkpoint.1.h5" in line, line
    # the offered one works and gives the unbroken run's end
    assert main(["restart", str(out), "--checkpoint", "checkpoint.1.h5",
                 "--set", "run.max_steps=12"]) == EXIT_OK
    ref = out.parent / "ref"
    assert main(["run", str(ini), "-o", str(ref)]) == EXIT_OK
    _assert_same_final(ref, out)
    assert list(out.glob("*.damaged"))  # set aside, not deleted


def test_checkpoint_checksum_covers_every_byte_of_content(stopped_run):
    from cmc.io import verify_checkpoint

    _, out = stopped_run
    ck = out / "checkpoint.h5"
    verify_checkpoint(ck)
    with h5py.File(ck, "a") as fh:
        fh["state"].attrs["time"] = np.nextafter(fh["state"].attrs["time"], np.inf)
    with pytest.raises(ValueError, match="checksum"):
        verify_checkpoint(ck)


# --------------------------------------------------------------------------- restart rules
def test_restart_of_a_finished_run_needs_an_extended_stop(stopped_run, capsys):
    _, out = stopped_run
    assert main(["restart", str(out)]) == EXIT_INPUT
    assert "--set run.max_steps" in _one_error_line(capsys.readouterr().err)
    assert main(["restart", str(out), "--set", "run.t_max=100"]) == EXIT_INPUT
    capsys.readouterr()
    assert main(["restart", str(out), "--set", "run.max_steps=10"]) == EXIT_OK


@pytest.mark.parametrize("key", ["initial.n=700", "initial.seed=9", "run.gamma=0.2",
                                 "output.lagrange_fractions=0.1,0.5", "run.emulate_ranks=2"])
def test_restart_refuses_parameters_that_define_the_run(stopped_run, capsys, key):
    _, out = stopped_run
    before = (out / "checkpoint.h5").read_bytes()
    assert main(["restart", str(out), "--set", "run.max_steps=10", "--set", key]) \
        == EXIT_INPUT
    line = _one_error_line(capsys.readouterr().err)
    assert key.split("=")[0] in line and "cannot change on restart" in line
    assert (out / "checkpoint.h5").read_bytes() == before


def test_restart_overrides_recorded_once_in_every_output(stopped_run):
    from cmc.io import read_diagnostics

    _, out = stopped_run
    assert main(["restart", str(out), "--set", "run.max_steps=10"]) == EXIT_OK
    assert main(["restart", str(out), "--set", "run.max_steps=12",
                 "--set", "output.progress_every=7"]) == EXIT_OK
    want = [[8, "run.max_steps=10"], [10, "run.max_steps=12"], [10, "output.progress_every=7"]]
    cfg_text = (out / "config.ini").read_text()
    assert cfg_text.count("# restart at step") == 3
    assert "max_steps = 12" in cfg_text and "progress_every = 7" in cfg_text
    with h5py.File(out / "checkpoint.h5", "r") as fh:
        assert json.loads(fh["state"].attrs["overrides"]) == want
        assert "max_steps = 12" in fh.attrs["config"]
    d, attrs = read_diagnostics(out / "diagnostics.h5")
    assert json.loads(attrs["overrides"]) == want
    with h5py.File(out / "snapshots" / "snap_0000012.h5", "r") as fh:
        assert json.loads(fh.attrs["overrides"]) == want
        assert fh.attrs["mpi_size"] == 1 and fh.attrs["cmc_version"]
    np.testing.assert_array_equal(d["step"], np.arange(13))


# --------------------------------------------------------------------------- exit codes
@pytest.mark.parametrize("setting,code", [("run.max_steps=3", EXIT_OK),
                                          ("run.max_wall_hours=1e-9", EXIT_RESUMABLE),
                                          ("run.energy_error_max=1e-30", EXIT_PHYSICS)])
def test_exit_codes_tell_a_batch_script_what_happened(tmp_path, setting, code):
    assert main(["run", str(_ini(tmp_path)), "-o", str(tmp_path / "o"), "--set", setting]) \
        == code


# --------------------------------------------------------------------------- one-line errors
def _ic_file(tmp_path: Path, edit=None, name: str = "ic.h5") -> Path:
    path = tmp_path / name
    assert main(["ic", "plummer", "--n", "200", "-o", str(path)]) == EXIT_OK
    if edit:
        with h5py.File(path, "a") as fh:
            edit(fh)
    return path


def _far(fh):
    fh["stars/r"][199] = 1e300


def _nan_mass(fh):
    fh["stars/m"][7] = np.nan


def _negative_mass(fh):
    fh["stars/m"][7] = -0.1


def _zero_mass(fh):
    fh["stars/m"][7] = 0.0


def _one_radius(fh):
    fh["stars/r"][...] = 0.5


def _at_rest(fh):
    for v in ("vr", "vt"):
        fh["stars"][v][...] = 0.0


def _duplicate_id(fh):
    fh["stars/id"][3] = fh["stars/id"][4]


def _zero_stars(fh):
    for k in list(fh["stars"]):
        del fh["stars"][k]
    fh["stars"].create_dataset("r", data=np.zeros(0))


@pytest.mark.parametrize("edit,words", [(_far, "not a cluster member"),
                                        (_nan_mass, "invalid m = nan"),
                                        (_negative_mass, "invalid m = -0.1 "),
                                        (_zero_mass, "invalid m = 0.0 "),
                                        (_one_radius, "at one radius"),
                                        (_at_rest, "all velocities are zero"),
                                        (_duplicate_id, "unique"),
                                        (_zero_stars, "at least 2 stars")])
def test_bad_initial_conditions_are_one_line_errors(tmp_path, capsys, edit, words):
    """... with plain numbers (issue 46, item 11: 'invalid m = np.float64(0.0)'); stars all
    at one radius or all at rest too (item 11: exit 3, 'time step is not finite')."""
    f = _ic_file(tmp_path, edit)
    ini = _ini(tmp_path, f"[initial]\nmodel = file\nfile = {f.name}\n[run]\nmax_steps = 2\n")
    assert main(["run", str(ini), "-o", str(tmp_path / "o")]) == EXIT_INPUT
    line = _one_error_line(capsys.readouterr().err)
    assert words in line and "ic.h5" in line and "np." not in line, line


def _tiny_file(tmp_path: Path, kind: str) -> Path:
    """Initial conditions with too few objects for a run: two bound stars, ten objects of
    which three are binaries, a bound 20-star cluster."""
    from cmc.config import load_config
    from cmc.initial import build_initial_stars
    from cmc.io import write_snapshot

    path = tmp_path / "tiny.h5"
    if kind == "2 stars":
        stars = {"id": np.arange(2), "m": np.full(2, 0.5), "r": np.array([0.5, 1.0]),
                 "vr": np.zeros(2), "vt": np.array([0.3, 0.2])}
    else:
        binaries = kind == "10 objects, 3 binaries"
        cfg = load_config(None, ["initial.n=200", "initial.seed=3"]
                          + (["initial.binary_fraction=0.3"] if binaries else []))
        stars, _ = build_initial_stars(cfg)
        if binaries:  # the seven innermost singles and three binaries
            singles = np.flatnonzero(stars["binind"] < 0)[:7]
            rows = np.sort(np.concatenate([singles, np.flatnonzero(stars["binind"] >= 0)[:3]]))
            stars = {k: v[rows] for k, v in stars.items()}
            stars["binind"] = np.where(stars["binind"] >= 0, np.cumsum(stars["binind"] >= 0)
                                       - 1, -1)
        else:
            stars = {k: v[:20] for k, v in stars.items()}
        for k in ("vr", "vt"):  # bound, as a cluster of its own (2K/|W| about 0.3)
            stars[k] = 0.3 * stars[k]
    write_snapshot(path, stars)
    return path


@pytest.mark.parametrize("kind", ["2 stars", "10 objects, 3 binaries", "20 stars"])
def test_tiny_initial_files_are_one_line_errors(tmp_path, capsys, kind):
    """A file with fewer objects than a run needs (40, initial.n's minimum) is bad input:
    exit 2, one line naming the file (issue 46, item 4: exit 1, 'internal error: ValueError:
    units: ln(gamma N0) must be positive'; item 3: a bound 20-star file ran, one step of
    5e4 t_rh0)."""
    f = _tiny_file(tmp_path, kind)
    ini = _ini(tmp_path, f"[initial]\nmodel = file\nfile = {f.name}\n[run]\nmax_steps = 2\n")
    assert main(["run", str(ini), "-o", str(tmp_path / "o")]) == EXIT_INPUT
    line = _one_error_line(capsys.readouterr().err)
    assert "tiny.h5" in line and "at least 40" in line, line


def test_coulomb_logarithm_must_be_positive(tmp_path, capsys):
    """ln(gamma N0) <= 0 (40 stars with gamma = 0.01) is a parameter error naming run.gamma
    (issue 46, item 4: exit 1, 'internal error: ValueError: units: ...')."""
    ini = _ini(tmp_path, "[initial]\nn = 50\n[run]\ngamma = 0.01\nmax_steps = 2\n")
    assert main(["run", str(ini), "-o", str(tmp_path / "o")]) == EXIT_INPUT
    assert "run.gamma" in _one_error_line(capsys.readouterr().err)
    # a file of enough objects, run with that gamma: the file's N0 is checked when it is read
    f = _ic_file(tmp_path)
    ini = _ini(tmp_path, f"[initial]\nmodel = file\nfile = {f.name}\n[run]\ngamma = 0.005\n"
                         "max_steps = 2\n", name="f.ini")
    assert main(["run", str(ini), "-o", str(tmp_path / "o2")]) == EXIT_INPUT
    line = _one_error_line(capsys.readouterr().err)
    assert "ic.h5" in line and "run.gamma" in line, line


def test_huge_n_is_refused_with_the_memory_it_needs_and_leaves_no_folder(tmp_path, capsys):
    """initial.n = 1e12: exit 2 with the memory the run needs, before anything is allocated,
    and no folder left behind, so the next run into it starts without --overwrite (issue 46,
    item 7: exit 1 'out of memory', and the half-made folder then blocked the next run)."""
    ini, out = _ini(tmp_path), tmp_path / "o"
    assert main(["run", str(ini), "-o", str(out), "--set", "initial.n=1e12"]) == EXIT_INPUT
    line = _one_error_line(capsys.readouterr().err)
    assert "initial.n" in line and "400 TB" in line and "available" in line, line
    assert not out.exists()
    assert main(["run", str(ini), "-o", str(out)]) == EXIT_OK


def test_memory_estimate():
    """The estimate: the runtime plus the measured bytes per object (more with binaries; under
    MPI only rank 0's drawing of the whole model)."""
    from cmc.config import load_config
    from cmc.errors import InputError
    from cmc.initial import check_memory

    def cfg(*ov):
        return load_config(None, list(ov))

    check_memory(cfg("initial.n=1e5"), available=1e9)
    with pytest.raises(InputError, match=r"initial.n = 1e\+07: the run needs about 4.24 GB"):
        check_memory(cfg("initial.n=1e7"), available=1e9)
    with pytest.raises(InputError, match="1.24 GB"):
        check_memory(cfg("initial.n=2.5e6"), available=1e9)
    check_memory(cfg("initial.n=2.5e6"), ranks=2, available=1e9)  # 0.99 GB on rank 0
    with pytest.raises(InputError, match="850 bytes per object with binaries"):
        check_memory(cfg("initial.n=2e6", "initial.binary_fraction=0.1"), available=1e9)
    check_memory(cfg("initial.n=1e12", "initial.model=file", "initial.file=x.h5"),
                 available=1e9)  # a file's size bounds its model


def test_a_rejected_initial_file_leaves_no_folder_behind(tmp_path, capsys):
    """Set-up that fails on bad initial conditions removes what it wrote (a new folder
    entirely; in a folder that existed, its outputs): the next run is not blocked (issue 46,
    item 7: 'already holds a run killed before its first checkpoint: continue it with cmc
    restart', and cmc restart then said 'no checkpoint')."""
    bad, good = _ic_file(tmp_path, _nan_mass, "bad.h5"), _ic_file(tmp_path, name="good.h5")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    for out in (tmp_path / "o", mine):
        assert main(["run", str(_ini(tmp_path, "[run]\nmax_steps = 2\n")), "-o", str(out),
                     "--set", "initial.model=file", "--set", f"initial.file={bad}"]) == EXIT_INPUT
        assert "bad.h5" in _one_error_line(capsys.readouterr().err)
        assert not out.exists() or sorted(p.name for p in out.iterdir()) == [".lock",
                                                                            "notes.txt"]
        assert main(["run", str(_ini(tmp_path, "[run]\nmax_steps = 2\nn_core_stop = 0\n")),
                     "-o", str(out), "--set", "initial.model=file",
                     "--set", f"initial.file={good}"]) == EXIT_OK
    # a folder left by a run killed during set-up (no checkpoint) says what to do
    dead = tmp_path / "dead"
    dead.mkdir()
    (dead / "config.ini").write_text("[run]\n")
    assert main(["run", str(_ini(tmp_path)), "-o", str(dead)]) == EXIT_INPUT
    line = _one_error_line(capsys.readouterr().err)
    assert "wrote no checkpoint" in line and "--overwrite" in line and "restart" not in line


def test_initial_file_is_relative_to_the_parameter_file(tmp_path, monkeypatch):
    sub = tmp_path / "models"
    sub.mkdir()
    _ic_file(sub)
    ini = _ini(sub, "[initial]\nmodel = file\nfile = ic.h5\n[run]\nmax_steps = 2\n"
                    "n_core_stop = 0\n")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["run", str(ini), "-o", "o"]) == EXIT_OK


def test_initial_conditions_not_in_henon_units_are_rescaled_with_a_note(tmp_path, caplog):
    from cmc.config import load_config
    from cmc.initial import build_initial_stars
    from physics.henon_units import shell_energies

    def heavy(fh):
        fh["stars/m"][...] = fh["stars/m"][...] * 500.0
        fh["stars/r"][...] = fh["stars/r"][...] * 3.0

    f = _ic_file(tmp_path, heavy)
    _capture_cmc_logs(caplog)
    cfg = load_config(None, ["initial.model=file", f"initial.file={f}"])
    stars, _ = build_initial_stars(cfg)
    assert abs(stars["m"].sum() - 1.0) < 1e-12
    k, w = shell_energies(stars["r"], stars["vr"], stars["vt"], stars["m"])
    assert abs(k + w + 0.25) < 1e-12
    assert any("not in Hénon units" in r.message for r in caplog.records)


@pytest.mark.parametrize("content,words", [
    # an HDF5 file is taken as initial conditions (cmc run IC.h5): a damaged one says so
    (b"\x89HDF\r\n\x1a\n\x00\x00\xff\xfe", "not a readable HDF5 file"),
    (b"PK\x03\x04\x00\x00\xff\xfe\x00", "not a text"),
    (b"[initial]\nfile = 100%.h5\nmodel = file\n[run]\nmax_steps = 1\n", "100%.h5"),
    (b"[DEFAULT]\nseed = 3\n", "[DEFAULT]"),
    (b"[initial]\nn = many\n", "initial.n"),
])
def test_bad_parameter_files_are_one_line_errors(tmp_path, capsys, content, words):
    ini = tmp_path / "m.ini"
    ini.write_bytes(content)
    assert main(["run", str(ini), "-o", str(tmp_path / "o")]) == EXIT_INPUT
    assert words in _one_error_line(capsys.readouterr().err)


def test_output_path_problems_are_one_line_errors(tmp_path, capsys):
    ini = _ini(tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["run", str(ini), "-o", str(afile)]) == EXIT_INPUT
    assert "not a directory" in _one_error_line(capsys.readouterr().err)
    assert main(["ic", "plummer", "--n", "100", "-o", str(tmp_path / "missing" / "x.h5")]) \
        == EXIT_INPUT
    assert "does not exist" in _one_error_line(capsys.readouterr().err)
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            # not writable: exit 4 as in every command (tests/test_damaged_files.py)
            assert main(["run", str(ini), "-o", str(ro / "o")]) == EXIT_IO
            assert "ro" in _one_error_line(capsys.readouterr().err)
        finally:
            ro.chmod(0o700)


def test_plot_of_a_missing_run_is_one_line(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "nothing")]) == EXIT_INPUT
    _one_error_line(capsys.readouterr().err)


def test_early_stop_default_is_warned(tmp_path, capsys):
    ini = _ini(tmp_path, "[initial]\nn = 300\n[run]\nmax_steps = 3\n")
    main(["run", str(ini), "-o", str(tmp_path / "o")])
    assert "WARNING cmc.simulation: the initial N_core" in capsys.readouterr().err


#: examples/king_tidal.ini at 2000 stars (issue 46, item 3): N_core goes below 100 (raw at
#: step 98, 2.49 t_rh0; its 10-step median at 2.85) long before the core collapses (near
#: 5.5 t_rh0); the stop now comes at step 686 (4.85 t_rh0)
KING_2000 = ["--set", "initial.n=2000", "--set", "run.t_max_myr=3000", "--set",
             "output.snapshot_every=0", "--set", "output.progress_every=1000"]


@pytest.fixture(scope="module")
def king_2000_collapse(tmp_path_factory):
    out = tmp_path_factory.mktemp("king2000") / "o"
    ex = Path(__file__).resolve().parents[1] / "examples" / "king_tidal.ini"
    assert main(["run", str(ex), "-o", str(out), *KING_2000]) == EXIT_OK
    return ex, out


def test_core_collapse_stop_waits_for_the_collapse_at_small_n(king_2000_collapse):
    """The core-collapse stop reads the medians of N_core and r_c/r_h over the last 10 steps
    and needs r_c/r_h below a tenth of its initial value (run.rc_rh_drop): a 2000-star King
    model runs on to its collapse instead of stopping on one noisy N_core below 100 at 2.49
    t_rh0 with r_c/r_h at 0.6 of its initial value (issue 46, item 3)."""
    from cmc.io import read_diagnostics

    _, out = king_2000_collapse
    d, attrs = read_diagnostics(out / "diagnostics.h5")
    assert attrs["stop_reason"] == "core_collapse_ncore"
    rc_rh = d["r_c"] / d["r_h"]
    assert np.median(rc_rh[-10:]) < 0.1 * rc_rh[0]
    assert np.median(d["N_core"][-10:]) < 100
    # the raw N_core dipped below 100 more than 2 t_rh0 before the stop
    first = int(np.argmax(d["N_core"] < 100))
    assert d["time_trh"][-1] - d["time_trh"][first] > 2.0


def test_core_collapse_stop_after_a_restart_is_the_unbroken_runs(tmp_path,
                                                                 king_2000_collapse, capsys):
    """The medians' window travels in the checkpoint: a run stopped 6 steps before the
    collapse and restarted stops at the same step with the same bits; a restart of the
    collapsed run is refused (the stop still holds) unless run.n_core_stop is extended."""
    ex, full = king_2000_collapse
    with h5py.File(full / "checkpoint.h5", "r") as fh:
        step = int(fh["state"].attrs["step"])
    out = tmp_path / "b"
    assert main(["run", str(ex), "-o", str(out), *KING_2000, "--set",
                 f"run.max_steps={step - 6}"]) == EXIT_OK
    assert main(["restart", str(out), "--set", "run.max_steps=1000000"]) == EXIT_OK
    with h5py.File(out / "checkpoint.h5", "r") as fh:
        st = fh["state"].attrs
        assert (int(st["step"]), str(st["stop_reason"])) == (step, "core_collapse_ncore")
    _assert_same_final(full, out)
    capsys.readouterr()
    assert main(["restart", str(out)]) == EXIT_INPUT
    assert "run.n_core_stop" in _one_error_line(capsys.readouterr().err)


# --------------------------------------------------------------------------- disk full
@pytest.mark.parametrize("nth", [5, 7, 10])  # escapers.h5 is the first write
def test_disk_full_stops_cleanly_and_keeps_the_last_checkpoint(tmp_path, capsys, monkeypatch,
                                                              nth):
    """An injected ENOSPC on the nth file write: exit 4, one line, the last good checkpoint
    verifies, and a restart from it reaches the unbroken run's end."""
    from cmc import io as cio

    ini = _ini(tmp_path)
    out = tmp_path / "o"
    monkeypatch.setenv(cio.FAULT_ENV, f"enospc:{nth}")
    monkeypatch.setattr(cio, "_writes", [0])
    assert main(["run", str(ini), "-o", str(out)]) == EXIT_IO
    assert "disk full" in _one_error_line(capsys.readouterr().err)
    monkeypatch.delenv(cio.FAULT_ENV)
    cio.verify_checkpoint(out / "checkpoint.h5")
    assert main(["restart", str(out)]) == EXIT_OK
    ref = tmp_path / "ref"
    assert main(["run", str(ini), "-o", str(ref)]) == EXIT_OK
    _assert_same_final(ref, out)


# --------------------------------------------------------------------------- diagnostics
def test_diagnostics_readable_while_the_run_writes_them(tmp_path):
    from cmc.io import read_diagnostics
    from cmc.plot import plot_run

    ini = _ini(tmp_path, "[initial]\nn = 2000\nseed = 2\n[run]\nmax_steps = 400\n"
                         "n_core_stop = 0\n[output]\ndiagnostics_every = 5\n")
    out = tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-m", "cmc", "run", str(ini), "-o", str(out)],
                            stderr=subprocess.DEVNULL)
    seen = []
    try:
        deadline = time.time() + 120
        while proc.poll() is None and time.time() < deadline:
            if (out / "diagnostics.h5").exists():
                try:
                    d, attrs = read_diagnostics(out / "diagnostics.h5")
                except ValueError:  # the file is being created (rename not yet done)
                    continue
                seen.append(d["step"].size)
                assert d["E_tot"].size == d["step"].size
                np.testing.assert_array_equal(d["step"], np.arange(d["step"].size))
                if len(seen) == 3:
                    plot_run(out)
            time.sleep(0.05)
    finally:
        proc.wait(timeout=120)
    assert proc.returncode == 0
    assert len(set(seen)) >= 3, seen  # rows appeared while the run went on
    d, attrs = read_diagnostics(out / "diagnostics.h5")
    assert d["step"].size == 401 and attrs["stop_reason"] == "max_steps"
    with h5py.File(out / "diagnostics.h5", "r") as fh:
        for name in fh:
            assert fh[name].attrs.get("meaning") and fh[name].attrs.get("unit"), name


def test_diagnostics_flush_writes_only_new_rows(tmp_path):
    """The append cost does not grow with the history: a flush after 1e5 rows writes as many
    bytes as after 1e2 (file growth per flush equal within a chunk)."""
    from cmc.io import DiagnosticsWriter

    sizes = []
    for rows in (100, 100_000):
        path = tmp_path / f"d{rows}.h5"
        hist = {"step": list(range(rows)), "x": list(np.ones(rows))}
        w = DiagnosticsWriter(path, {}, {}, {}, hist)
        s0 = path.stat().st_size
        for i in range(20):
            w.append({"step": [rows + i] * 256, "x": [0.0] * 256})
        w.close()
        sizes.append(path.stat().st_size - s0)
    assert sizes[1] <= 1.2 * sizes[0] + 65536, sizes


# --------------------------------------------------------------------------- kill -9
def test_kill_minus_nine_at_random_points_then_restart_equals_unbroken_run(tmp_path):
    """Kill the run with SIGKILL at random moments (start-up, steps, checkpoint writes),
    continue each time with ``cmc run --resume`` until it finishes: the end equals the
    unbroken run's bit for bit."""
    from cmc.rundir import run_status

    ini = _ini(tmp_path, "[initial]\nn = 1500\nseed = 3\n[run]\nmax_steps = 300\n"
                         "n_core_stop = 0\n[output]\ncheckpoint_every = 9\n"
                         "diagnostics_every = 4\nsnapshot_every = 25\n")
    ref, out = tmp_path / "ref", tmp_path / "o"
    cmd = [sys.executable, "-m", "cmc", "run", str(ini), "--resume", "-o"]
    t0 = time.monotonic()
    assert subprocess.run(cmd + [str(ref)], stderr=subprocess.DEVNULL).returncode == 0
    whole = time.monotonic() - t0
    rng = random.Random(12)
    # the first kill falls in start-up, the second mid-run (once a checkpoint past step 40
    # is on disk), then at random moments of a whole run's length
    waits = [0.4, "mid"] + [rng.uniform(0.2, 1.0) * whole for _ in range(40)]
    kills = 0
    for wait in waits:
        proc = subprocess.Popen(cmd + [str(out)], stderr=subprocess.DEVNULL)
        try:
            if wait == "mid":
                deadline = time.monotonic() + 120
                while run_status(out).step < 40 and time.monotonic() < deadline:
                    assert proc.poll() is None
                    time.sleep(0.01)
                raise subprocess.TimeoutExpired(cmd, 0)
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            continue
        assert proc.returncode == 0
        break
    else:
        pytest.fail("the run never finished")
    assert kills >= 2
    _assert_same_final(ref, out)
    from cmc.io import read_diagnostics

    for name in ("diagnostics.h5", "escapers.h5"):
        da, _ = read_diagnostics(ref / name)
        db, _ = read_diagnostics(out / name)
        assert sorted(da) == sorted(db)
        for k in da:
            np.testing.assert_array_equal(da[k], db[k], err_msg=f"{name} {k}")


def test_real_disk_full_on_a_tiny_file_system(tmp_path):
    """HDF5 failing on a full file system (a 1.5 MB tmpfs; the pre-write space check is
    switched off so that the write itself fails): exit 4, one line, no traceback, no crash at
    exit; the last checkpoint verifies and, moved to a larger disk, continues to the unbroken
    run's end."""
    import shutil

    from cmc.io import SKIP_SPACE_CHECK_ENV, verify_checkpoint

    tiny = tmp_path / "tiny"
    tiny.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1500k", "tmpfs", str(tiny)],
                           capture_output=True)
    if mount.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    try:
        ini = _ini(tmp_path, "[initial]\nn = 3000\n[run]\nmax_steps = 300\nn_core_stop = 0\n"
                             "[output]\ncheckpoint_every = 30\nsnapshot_every = 20\n")
        env = dict(os.environ, **{SKIP_SPACE_CHECK_ENV: "1"})
        res = subprocess.run([sys.executable, "-m", "cmc", "run", str(ini), "-o",
                              str(tiny / "o")], capture_output=True, text=True, env=env,
                             timeout=240)
        assert res.returncode == EXIT_IO, res.stderr[-2000:]
        assert "disk full" in _one_error_line(res.stderr)
        verify_checkpoint(tiny / "o" / "checkpoint.h5")
        shutil.copytree(tiny / "o", tmp_path / "o")
    finally:
        subprocess.run(["umount", str(tiny)])
    out = tmp_path / "o"
    (out / ".lock").unlink()
    assert main(["restart", str(out)]) == EXIT_OK
    ref = tmp_path / "ref"
    assert main(["run", str(ini), "-o", str(ref)]) == EXIT_OK
    _assert_same_final(ref, out)


def test_diagnostics_reader_waits_while_the_writer_is_not_swmr(tmp_path):
    """A reader that comes while the run holds diagnostics.h5 open for writing without SWMR
    (opening it, setting the final attributes) waits instead of failing (a `cmc plot` of a
    live run hit this window)."""
    from cmc.io import DiagnosticsWriter, read_diagnostics

    path = tmp_path / "diagnostics.h5"
    DiagnosticsWriter(path, {"n0": 10}, {"step": "1"}, {"step": "step"},
                      {"step": [0, 1, 2]})
    holder = subprocess.Popen([sys.executable, "-c", (
        "import h5py, sys, time\n"
        f"fh = h5py.File({str(path)!r}, 'a', libver='latest', locking=False)\n"
        "print('open', flush=True)\n"
        "time.sleep(1.0)\n"
        "fh.close()\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(OSError, match="already open for write"):
            h5py.File(path, "r", locking=False)  # the window exists
        t0 = time.time()
        d, attrs = read_diagnostics(path)
        assert time.time() - t0 > 0.3  # it waited for the writer
        np.testing.assert_array_equal(d["step"], [0, 1, 2])
        assert attrs["n0"] == 10
    finally:
        holder.wait(timeout=30)
