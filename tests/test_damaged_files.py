"""Damaged and unwritable run files (issue 46): checkpoints whose HDF5 metadata is damaged, a
truncated diagnostics.h5, read-only outputs, garbage HDF5 files.  Every case ends in one line
that names the file and what to do, with the exit code of README's table, and never hangs.

Each test failed on the code before its fix (the commit messages say how).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from cmc.cli import main
from cmc.errors import EXIT_INPUT, EXIT_IO

pytestmark = pytest.mark.timeout(300)

SMALL = ("[initial]\nn = 600\nseed = 4\n[run]\nmax_steps = 8\nn_core_stop = 0\n"
         "[output]\ncheckpoint_every = 4\nsnapshot_every = 5\ndiagnostics_every = 3\n")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A run stopped at step 8 (checkpoints at 8 and 4): made once, copied by each test."""
    base = tmp_path_factory.mktemp("run")
    ini = base / "m.ini"
    ini.write_text(SMALL)
    assert main(["run", str(ini), "-o", str(base / "o")]) == 0
    return base / "o"


@pytest.fixture
def run_copy(finished_run, tmp_path) -> Path:
    out = tmp_path / "o"
    shutil.copytree(finished_run, out)
    return out


def _one_error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("cmc: error")]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    return lines[0]


def _flip(path: Path, offset: int, n: int = 8) -> None:
    raw = bytearray(path.read_bytes())
    for k in range(n):
        raw[offset + k] ^= 0xFF
    path.write_bytes(bytes(raw))


# --------------------------------------------------------------------------- item 5
@pytest.mark.parametrize("name,shift", [
    (b"stop_reason", 0),    # the name is no longer UTF-8: h5py gives bytes (was TypeError)
    (b"stop_reason", -8),   # its attribute message: "bad version number" (was RuntimeError)
    (b"sha256", -8),        # the checksum's own attribute (RuntimeError in attrs lookup)
])
def test_checkpoint_with_damaged_metadata_is_refused_naming_the_intact_one(run_copy, capsys,
                                                                           name, shift):
    """Bytes flipped in a checkpoint's HDF5 metadata (an attribute's name or message header)
    are damage like any other: exit 2 and the name of the intact checkpoint, not exit 1 with
    "TypeError: '<' not supported between instances of 'bytes' and 'str'" from the checksum's
    sorting of the names or a RuntimeError from HDF5."""
    ck = run_copy / "checkpoint.h5"
    _flip(ck, ck.read_bytes().index(name) + shift)
    assert main(["restart", str(run_copy), "--set", "run.max_steps=12"]) == EXIT_INPUT
    line = _one_error_line(capsys.readouterr().err)
    assert "checkpoint.h5 is damaged" in line and "--checkpoint checkpoint.1.h5" in line, line


# --------------------------------------------------------------------------- item 1
def _cmc_bounded(args: list[str], cwd: Path, limit: float = 60.0) -> tuple[int, str]:
    """Run ``python -m cmc ARGS``; (exit code, stderr).  A command still running after
    ``limit`` seconds fails the test, saying whether SIGTERM then ended it."""
    proc = subprocess.Popen([sys.executable, "-m", "cmc", *args], cwd=cwd, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=10)
            after = "SIGTERM then ended it"
        except subprocess.TimeoutExpired:
            after = "SIGTERM did not end it either (killed)"
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        pytest.fail(f"cmc {' '.join(args)} still ran after {limit:g} s; {after}")
    return proc.returncode, err


def _truncate_half(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _flip_root_header(path: Path) -> None:
    """Damage the root group's object header (a checksummed HDF5 structure): a SWMR reader
    retries its read, by HDF5's default 100 times with sleeps that double each time."""
    _flip(path, path.read_bytes().index(b"OHDR") + 8)


@pytest.mark.parametrize("damage,command,words", [
    ("cut diagnostics", "plot", ["diagnostics.h5 is truncated", "of", "bytes", "copy"]),
    ("cut diagnostics", "export", ["diagnostics.h5 is truncated", "copy"]),
    ("cut diagnostics", "restart", ["diagnostics.h5 is truncated", "first", "rows",
                                    "start it afresh"]),
    ("damaged diagnostics", "plot", ["diagnostics.h5 cannot be read (damaged", "copy"]),
    ("cut escapers", "restart", ["escapers.h5", "move it aside"]),
])
def test_truncated_or_damaged_run_files_end_at_once(run_copy, damage, command, words):
    """A truncated diagnostics.h5 (or escapers.h5, or damaged HDF5 metadata in it) ends
    ``cmc plot``, ``export`` and ``restart`` within seconds with exit 4 (I/O) and one line
    naming the file and what to do.  Before, the SWMR open succeeded and HDF5 retried the
    reads for ever inside one call (sleeps doubling from 1 ns), signal handlers never ran:
    plot and export hung until killed, and restart ignored SIGTERM."""
    kind, name = damage.split()
    path = run_copy / f"{name}.h5"
    (_truncate_half if kind == "cut" else _flip_root_header)(path)
    args = {"plot": ["plot", str(run_copy)], "export": ["export", str(run_copy)],
            "restart": ["restart", str(run_copy), "--set", "run.max_steps=12"]}[command]
    code, err = _cmc_bounded(args, run_copy.parent)
    line = _one_error_line(err)
    assert code == EXIT_IO, err
    assert str(path) in line and all(w in line for w in words), line


# --------------------------------------------------------------------------- item 10
@contextmanager
def _read_only(folder: Path):
    """``folder`` made read-only for this process: mode 0o500, or for root (whom modes do
    not stop) the immutable attribute; skips where neither works."""
    if os.geteuid() != 0:
        folder.chmod(0o500)
        try:
            yield
        finally:
            folder.chmod(0o700)
        return
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("running as root without chattr +i: no way to make a folder read-only")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


@pytest.mark.parametrize("command", ["run into it", "run below it", "restart", "ic", "ic cosmic",
                                    "plot", "export", "export -o", "sweep"])
def test_a_read_only_output_is_exit_4_in_every_command(run_copy, tmp_path, capsys, command):
    """An output folder that cannot be written ends every command with exit 4 (I/O failure,
    README's table: "not writable") and one line naming it.  Before, cmc export and a restart
    said 4 (a raw HDF5 or OS message), cmc run, ic, plot and sweep said 2."""
    ini = tmp_path / "m.ini"
    ini.write_text(SMALL)
    sweep = tmp_path / "sweep.ini"
    sweep.write_text(f"[sweep]\nbase = {ini}\n[values]\ninitial.seed = 1, 2\n")
    ro = tmp_path / "ro"
    ro.mkdir()
    target = run_copy if command in ("restart", "plot", "export") else ro
    args = {"run into it": ["run", str(ini), "-o", str(ro)],
            "run below it": ["run", str(ini), "-o", str(ro / "new")],
            "restart": ["restart", str(run_copy), "--set", "run.max_steps=12"],
            "ic": ["ic", "plummer", "--n", "100", "-o", str(ro / "ic.h5")],
            "ic cosmic": ["ic", "plummer", "--n", "100", "--format", "cosmic",
                          "-o", str(ro / "ic.h5")],
            "plot": ["plot", str(run_copy)],
            "export": ["export", str(run_copy)],
            "export -o": ["export", str(run_copy), "-o", str(ro / "cmc")],
            "sweep": ["sweep", str(sweep), "-o", str(ro / "sw")]}[command]
    if command == "ic cosmic":
        pytest.importorskip("tables")
    with _read_only(target):
        code = main(args)
    line = _one_error_line(capsys.readouterr().err)
    assert code == EXIT_IO, line
    assert f"cannot write {target}" in line and "make it writable" in line, line


# --------------------------------------------------------------------------- item 11
@pytest.mark.parametrize("name,content,words", [
    ("garbage.h5", bytes(range(256)) * 8, "not an HDF5 file"),
    ("hello.hdf5", b"hello\n", "not an HDF5 file"),
    ("missing.h5", None, "no such file"),
])
def test_cmc_run_of_an_hdf5_name_that_is_not_hdf5(tmp_path, capsys, name, content, words):
    """``cmc run FILE.h5`` takes FILE.h5 as initial conditions: garbage (or a missing file)
    there is called so, not "parameter file garbage.h5: not a text (INI) file"."""
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    assert main(["run", str(path), "-o", str(tmp_path / "o")]) == EXIT_INPUT
    line = _one_error_line(capsys.readouterr().err)
    assert words in line and str(path) in line, line
    assert f"parameter file {path}" not in line and "not a text" not in line, line
    assert not (tmp_path / "o").exists()


def test_plot_physical_leaves_evolution_png_alone(run_copy):
    """``cmc plot --physical`` draws evolution_physical.png; before, it replaced the plot in
    code units (evolution.png)."""
    assert main(["plot", str(run_copy)]) == 0
    png = run_copy / "evolution.png"
    before = png.read_bytes()
    assert main(["plot", str(run_copy), "--physical"]) == 0
    assert png.read_bytes() == before
    assert (run_copy / "evolution_physical.png").stat().st_size > 1000
