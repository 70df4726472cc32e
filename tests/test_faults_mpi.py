"""Faults end a ``cmc`` job cleanly: the right exit code, one ``cmc: error`` line, no hang.

Each test launches the real command line (``mpiexec -n P python -m cmc ...``, P = 2 and 3, or
serially) on a tiny model and checks the contract of :mod:`cmc.cli` and :mod:`cmc.errors`:

* an error every rank sees ends all ranks with its code and one line from rank 0;
* an exception on one rank alone prints one line from that rank and aborts the job
  (``MPI_Abort``), so no rank waits in a collective;
* no Python traceback reaches the terminal (it goes to ``OUTDIR/cmc.log``).

A launch that does not end within its timeout fails the test (and its processes are killed).
Lines that do not start with ``cmc:`` (log lines, MPICH's own abort notices) are ignored.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = Path(sys.executable).parent / "mpiexec"

if not MPIEXEC.exists():
    pytest.skip(f"no {MPIEXEC} (the mpich wheel of the virtual environment)",
                allow_module_level=True)

pytestmark = pytest.mark.timeout(300)

RANKS = (2, 3)
TIMEOUT = 90
#: variables of a launcher or batch system around the test run; the launches here must not
#: inherit them (they would make cmc or mpiexec believe they run inside another job)
_FOREIGN_ENV = ("PMI_", "PMIX_", "OMPI_", "MV2_", "HYDRA_", "I_MPI_", "SLURM_",
                "MPI_LOCALNRANKS", "CMC_INJECT_")


# --------------------------------------------------------------------------- helpers
def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_ENV)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]]
                                                       if env.get("PYTHONPATH") else []))
    env.update(extra)
    return env


def _descendants(pid: int) -> list[int]:
    """Process ids below ``pid`` (hydra puts its proxy and every rank in a session of its
    own, so killing mpiexec's process group alone does not reach them)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _kill_tree(proc: subprocess.Popen) -> None:
    """Kill a launch started with ``start_new_session=True`` and everything it started."""
    below = _descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def launch(args: list, ranks: int | None, cwd: Path, env: dict[str, str] | None = None,
           timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """Run ``cmc ARGS`` on ``ranks`` MPI ranks (None: serially, without mpiexec).

    A launch still running after ``timeout`` seconds is killed and fails the test: a rank
    left waiting in a collective is exactly the bug these tests look for."""
    cmd = [str(MPIEXEC), "-n", str(ranks)] if ranks else []
    cmd += [sys.executable, "-m", "cmc", *map(str, args)]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env if env is not None else _env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        out, err = proc.communicate()
        pytest.fail(f"hang: '{' '.join(cmd)}' did not end within {timeout} s; "
                    f"stderr:\n{err[-4000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("cmc: error")]


def _show(res: subprocess.CompletedProcess) -> str:
    return (f"'{' '.join(res.args[-12:])}' exited {res.returncode}; stderr:\n"
            f"{res.stderr[-4000:]}")


def assert_error(res: subprocess.CompletedProcess, code: int, *words: str) -> str:
    """Exit ``code``, exactly one ``cmc: error`` line holding every one of ``words``, no
    traceback; returns the line."""
    lines = error_lines(res.stderr)
    assert res.returncode == code, _show(res)
    assert len(lines) == 1, _show(res)
    for w in words:
        assert w in lines[0], f"{w!r} not in the error line\n{_show(res)}"
    assert "Traceback" not in res.stderr, _show(res)
    return lines[0]


def assert_ok(res: subprocess.CompletedProcess) -> None:
    assert res.returncode == 0, _show(res)
    assert not error_lines(res.stderr), _show(res)
    assert "Traceback" not in res.stderr, _show(res)


def checkpoint_state(path: Path) -> dict:
    with h5py.File(path, "r") as fh:
        return dict(fh["state"].attrs)


def flip_byte(path: Path, dataset: str) -> None:
    """Flip one bit in the middle of the raw data of a contiguous dataset of ``path``."""
    with h5py.File(path, "r") as fh:
        ds = fh[dataset]
        offset, size = ds.id.get_offset(), ds.id.get_storage_size()
    assert offset is not None and size > 0, f"{dataset} of {path} is not contiguous"
    with open(path, "r+b") as fh:
        fh.seek(offset + size // 2)
        byte = fh.read(1)[0]
        fh.seek(offset + size // 2)
        fh.write(bytes([byte ^ 0x01]))


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module", autouse=True)
def compiled_kernels(tmp_path_factory):
    """One serial run first, so that a stale kernel cache is compiled (about a minute) under
    a long timeout rather than inside a test's 90 s."""
    d = tmp_path_factory.mktemp("warm")
    (d / "c.ini").write_text("[initial]\nn = 200\n[run]\nmax_steps = 1\nn_core_stop = 0\n")
    res = launch(["run", "c.ini", "-o", "out"], None, d, timeout=290)
    assert_ok(res)


@pytest.fixture
def config(tmp_path) -> Path:
    """A 500-star Plummer model, 5 steps, no core-collapse stop."""
    path = tmp_path / "tiny.ini"
    path.write_text("[initial]\nn = 500\nseed = 7\n[run]\nmax_steps = 5\nn_core_stop = 0\n")
    return path


@pytest.fixture(scope="module")
def ic_file(tmp_path_factory) -> Path:
    """A valid initial-conditions file of 200 stars, written by ``cmc ic``."""
    d = tmp_path_factory.mktemp("ic")
    res = launch(["ic", "plummer", "--n", "200", "--seed", "3", "-o", "ic.h5"], None, d)
    assert_ok(res)
    return d / "ic.h5"


# --------------------------------------------------------------------------- tests
def test_version(tmp_path):
    res = launch(["--version"], None, tmp_path)
    assert res.returncode == 0, _show(res)
    assert re.fullmatch(r"cmc \(henon-cmc\) \d+\.\d+\S*\s*", res.stdout), res.stdout


@pytest.mark.parametrize("ranks", RANKS)
def test_successful_run_exits_0(tmp_path, config, ranks):
    out = tmp_path / "run"
    assert_ok(launch(["run", config, "-o", out], ranks, tmp_path))
    st = checkpoint_state(out / "checkpoint.h5")
    assert (int(st["step"]), str(st["stop_reason"])) == (5, "max_steps")
    assert int(st["emulated_ranks"]) == ranks


def test_a_warning_is_printed_once_not_once_per_rank(tmp_path):
    """A warning about the run (the initial N_core near run.n_core_stop, in a 300-star model)
    is printed by rank 0 alone: every rank computes it from the same reductions (issue 46,
    item 11: it came once per rank)."""
    ini = tmp_path / "small.ini"
    ini.write_text("[initial]\nn = 300\nseed = 7\n[run]\nmax_steps = 2\n")
    res = launch(["run", ini, "-o", tmp_path / "run"], 3, tmp_path)
    assert_ok(res)
    assert res.stderr.count("WARNING cmc.simulation: the initial N_core") == 1, _show(res)


@pytest.mark.parametrize("ranks", RANKS)
def test_energy_error_exits_3(tmp_path, config, ranks):
    out = tmp_path / "run"
    res = launch(["run", config, "-o", out, "--set", "run.energy_error_max=1e-30"], ranks,
                 tmp_path)
    assert res.returncode == 3, _show(res)
    assert "energy_error" in res.stderr, _show(res)
    assert len(error_lines(res.stderr)) <= 1, _show(res)
    assert "Traceback" not in res.stderr, _show(res)
    assert str(checkpoint_state(out / "checkpoint.h5")["stop_reason"]) == "energy_error"


@pytest.mark.parametrize("ranks", RANKS)
def test_initial_file_not_hdf5(tmp_path, config, ranks):
    bad = tmp_path / "notes.h5"
    bad.write_text("these are notes, not an HDF5 file\n")
    res = launch(["run", config, "-o", tmp_path / "run", "--set", "initial.model=file",
                  "--set", f"initial.file={bad}"], ranks, tmp_path)
    assert_error(res, 2, str(bad))


def _nan_mass(stars):
    stars["m"][17] = np.nan


def _duplicate_ids(stars):
    stars["id"][5] = stars["id"][6]


def _no_stars(stars):
    for k in stars:
        stars[k] = stars[k][:0]


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("damage, words", [
    (_nan_mass, ("invalid m", "nan")),
    (_duplicate_ids, ("ids are not unique",)),
    (_no_stars, ("at least 2 stars", "found 0")),
], ids=["nan_mass", "duplicate_ids", "zero_stars"])
def test_invalid_initial_conditions(tmp_path, config, ic_file, ranks, damage, words):
    from cmc.io import read_snapshot, write_snapshot

    stars, attrs = read_snapshot(ic_file)
    damage(stars)
    bad = tmp_path / "bad_ic.h5"
    write_snapshot(bad, stars, attrs)
    res = launch(["run", config, "-o", tmp_path / "run", "--set", "initial.model=file",
                  "--set", f"initial.file={bad}"], ranks, tmp_path)
    assert_error(res, 2, str(bad), *words)


@pytest.mark.parametrize("ranks", RANKS)
def test_output_path_is_a_file(tmp_path, config, ranks):
    target = tmp_path / "results"
    target.write_text("not a directory\n")
    res = launch(["run", config, "-o", target], ranks, tmp_path)
    assert_error(res, 2, str(target), "not a directory")
    assert target.read_text() == "not a directory\n"


@pytest.mark.parametrize("ranks", RANKS)
def test_damaged_checkpoint_names_the_intact_one(tmp_path, config, ranks):
    out = tmp_path / "run"
    assert_ok(launch(["run", config, "-o", out, "--set", "output.checkpoint_every=2",
                      "--set", "run.max_steps=6"], ranks, tmp_path))
    assert int(checkpoint_state(out / "checkpoint.1.h5")["step"]) == 4
    flip_byte(out / "checkpoint.h5", "streams/states")
    res = launch(["restart", out, "--set", "run.max_steps=8"], ranks, tmp_path)
    line = assert_error(res, 2, "checkpoint.h5", "damaged", "checksum", "checkpoint.1.h5",
                        "intact")
    assert "--checkpoint checkpoint.1.h5" in line
    # the command the message suggests works
    assert_ok(launch(["restart", out, "--checkpoint", "checkpoint.1.h5"], ranks, tmp_path))
    st = checkpoint_state(out / "checkpoint.h5")
    assert (int(st["step"]), str(st["stop_reason"])) == (6, "max_steps")


@pytest.mark.parametrize("ranks", RANKS)
def test_truncated_diagnostics_ends_every_rank_of_a_restart(tmp_path, config, ranks):
    """A diagnostics.h5 cut to half (issue 46, item 1): rank 0 finds it within seconds and
    every rank ends with exit 4 and one line; before, rank 0 slept in HDF5's retries for ever
    and the others waited for it in the next collective."""
    out = tmp_path / "run"
    assert_ok(launch(["run", config, "-o", out], ranks, tmp_path))
    diag = out / "diagnostics.h5"
    os.truncate(diag, diag.stat().st_size // 2)
    res = launch(["restart", out, "--set", "run.max_steps=8"], ranks, tmp_path)
    assert_error(res, 4, str(diag), "is truncated", "start it afresh")


@pytest.mark.parametrize("ranks", RANKS)
def test_restart_on_another_number_of_ranks(tmp_path, config, ranks):
    out = tmp_path / "run"
    assert_ok(launch(["run", config, "-o", out, "--set", "run.max_steps=3"], ranks, tmp_path))
    other = 5 - ranks  # 2 <-> 3
    res = launch(["restart", out, "--set", "run.max_steps=6"], other, tmp_path)
    assert_error(res, 2, f"mpiexec -n {ranks}")
    assert int(checkpoint_state(out / "checkpoint.h5")["step"]) == 3


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("where, kind", [
    ("1", "raise"),
    ("0", "raise"),
    ("last", "exit"),
    ("1", "kill"),
], ids=["rank1-raise", "rank0-raise", "last-exit", "rank1-kill"])
def test_fault_on_one_rank_ends_the_job(tmp_path, config, ranks, where, kind):
    rank = ranks - 1 if where == "last" else int(where)
    out = tmp_path / "run"
    t0 = time.monotonic()
    res = launch(["run", config, "-o", out, "--set", "run.max_steps=8"], ranks, tmp_path,
                 env=_env(CMC_INJECT_FAULT=f"{rank}:3:{kind}"))
    assert time.monotonic() - t0 < TIMEOUT
    if kind == "raise":
        assert_error(res, 1, f"[rank {rank}]", "internal error",
                     f"injected fault on rank {rank} after step 3")
        logs = "".join(p.read_text(errors="replace") for p in out.glob("*.log"))
        assert f"RuntimeError: injected fault on rank {rank}" in logs, \
            "the traceback is in no log file of the run"
        # the terminal's line is kept in the rank's log too (a launcher may drop the output of
        # a rank it kills)
        assert f"cmc: error: [rank {rank}] internal error" in logs, \
            "the error line is in no log file of the run"
    else:
        assert res.returncode not in (0, 75), _show(res)
        assert "Traceback" not in res.stderr, _show(res)
        assert len(error_lines(res.stderr)) <= 1, _show(res)
    # the run did not go on past the fault
    assert int(checkpoint_state(out / "checkpoint.h5")["step"]) < 8


def test_launcher_and_mpi_disagree(tmp_path, config):
    """A launcher started 3 tasks but MPI sees one rank: mpi4py is linked to another MPI."""
    res = launch(["run", config, "-o", tmp_path / "run"], None, tmp_path,
                 env=_env(OMPI_COMM_WORLD_SIZE="3"))
    assert_error(res, 2, "mpi4py", "OMPI_COMM_WORLD_SIZE")
    assert not (tmp_path / "run" / "checkpoint.h5").exists()


#: ``python -m cmc`` whose "compiling kernels" log line is followed by a wait for a line on
#: stdin.  The test's Ctrl-C, sent once it has read that line, thus arrives right after it
#: whatever the machine's load: the moment a user who reads the line would press it, held
#: open until the test lets the run go on.
_CMC_WAITING_AFTER_COMPILING_LINE = """
import sys

import cmc.cli as cli
import cmc.compiling as compiling

logger = compiling.log


class WaitAfterCompilingLine:
    def __getattr__(self, name):
        return getattr(logger, name)

    def info(self, msg, *args, **kwargs):
        logger.info(msg, *args, **kwargs)
        if msg.startswith("compiling kernels"):
            sys.stdin.readline()


compiling.log = WaitAfterCompilingLine()
cli.entry()
"""


def test_ctrl_c_while_compiling_kernels(tmp_path, config):
    """Ctrl-C during set-up (the kernels compile into an empty cache) is noted and the
    compilation goes on; a second Ctrl-C ends the run at once, exit 130.  (The first one
    alone stops it once the function being compiled is done, test_compiling's
    test_one_ctrl_c_while_compiling_stops_after_it, without a minute of compiling.)

    The first Ctrl-C comes right after the "compiling kernels" line, the child holding there
    until the test has seen the note (_CMC_WAITING_AFTER_COMPILING_LINE): the handler must be
    in place before that line is written, not after the imports that follow it.  No sleeps:
    the timeouts below only bound a hang.
    """
    cache = Path(tempfile.mkdtemp(prefix="numba-", dir=tmp_path))
    cmd = [sys.executable, "-c", _CMC_WAITING_AFTER_COMPILING_LINE, "run", str(config), "-o",
           str(tmp_path / "run")]
    # SIGINT may be ignored where pytest runs (a background job); a terminal's Ctrl-C is not
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(NUMBA_CACHE_DIR=str(cache)),
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    events: queue.Queue[str] = queue.Queue()

    def read_stderr():
        for ln in proc.stderr:
            lines.append(ln)
            if "compiling kernels" in ln:
                events.put("compiling")
            if "interrupt noted" in ln:
                events.put("noted")
        events.put("end of stderr")

    def next_event(timeout: float) -> str:
        try:
            return events.get(timeout=timeout)
        except queue.Empty:
            return f"nothing within {timeout:g} s"

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        first = next_event(120)
        assert first == "compiling", f"{first} instead of the 'compiling kernels' line"
        proc.send_signal(signal.SIGINT)
        # the child waits on stdin: it either noted the Ctrl-C or was ended by it
        after_first = next_event(60)
        assert after_first == "noted", f"{after_first} instead of 'interrupt noted'"
        assert proc.poll() is None, "the first Ctrl-C ended the run"
        proc.stdin.write("go on\n")
        proc.stdin.close()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    except (AssertionError, subprocess.TimeoutExpired) as exc:
        if proc.poll() is None:
            _kill_tree(proc)
            proc.wait()
        reader.join(10)
        pytest.fail(f"{exc}; stderr:\n" + "".join(lines)[-4000:])
    finally:
        if proc.poll() is None:
            _kill_tree(proc)
            proc.wait()
    reader.join(10)
    res = subprocess.CompletedProcess(cmd, proc.returncode, "", "".join(lines))
    line = assert_error(res, 130)
    assert line == "cmc: error: interrupted"
    assert not (tmp_path / "run" / "checkpoint.h5").exists()
