"""Damaged and unwritable run files (issue 46): checkpoints whose HDF5 metadata is damaged, a
truncated diagnostics.h5, read-only outputs, garbage HDF5 files.  Every case ends in one line
that names the file and what to do, with the exit code of README's table, and never hangs.

Each test failed on the code before its fix (the commit messages say how).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cmc.cli import main
from cmc.errors import EXIT_INPUT

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
