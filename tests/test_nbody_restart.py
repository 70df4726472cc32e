"""``cmc nbody`` checkpoints and ``cmc nbody --restart OUTDIR``: a restarted run is the
uninterrupted run bit for bit; damaged checkpoints and changed settings are refused."""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest

from cmc.cli import main
from cmc.io import read_diagnostics
from cmc.nbody_checkpoint import STATE_ARRAYS

INI = "[initial]\nmodel = plummer\nn = 64\nseed = 5\nmass_function = kroupa\n"
#: columns that depend on the wall clock
WALL = ("wall_s",)


def _nbody(ini, out, t_end, order):
    return main(["nbody", str(ini), "-o", str(out), "--t-end", str(t_end), "--dt-out",
                 "0.125", "--order", str(order)])


def _assert_same_run(a, b):
    da, _ = read_diagnostics(a / "diagnostics.h5")
    db, attrs = read_diagnostics(b / "diagnostics.h5")
    assert attrs["stop_reason"] == "max_time"
    assert sorted(da) == sorted(db)
    assert da["step"].size == db["step"].size
    for name in da:
        if name not in WALL:
            np.testing.assert_array_equal(da[name], db[name], err_msg=name)
    with h5py.File(a / "checkpoint.h5", "r") as fa, h5py.File(b / "checkpoint.h5", "r") as fb:
        for name in STATE_ARRAYS:
            np.testing.assert_array_equal(fa["nbody"][name][...], fb["nbody"][name][...],
                                          err_msg=name)
        for name in ("time", "n_steps", "n_blocks", "n_pairs"):
            assert fa["nbody"].attrs[name] == fb["nbody"].attrs[name], name


@pytest.fixture(scope="module", params=[4, 6])
def whole(request, tmp_path_factory):
    """The run to t = 1 in one go, at order 4 and 6."""
    d = tmp_path_factory.mktemp(f"nbr{request.param}")
    ini = d / "p.ini"
    ini.write_text(INI)
    assert _nbody(ini, d / "whole", 1.0, request.param) == 0
    return ini, d, request.param


def test_restart_is_the_uninterrupted_run(whole):
    ini, d, order = whole
    out = d / "split"
    assert _nbody(ini, out, 0.5, order) == 0
    with h5py.File(out / "checkpoint.h5", "r") as fh:
        assert fh["nbody"].attrs["time"] == 0.5 and fh["run"].attrs["step"] == 4
    assert read_diagnostics(out / "diagnostics.h5")[0]["step"].size == 5
    assert main(["nbody", "--restart", str(out), "--t-end", "1"]) == 0
    _assert_same_run(d / "whole", out)


def test_restart_drops_rows_after_the_checkpoint(whole):
    """Killed after rows past the checkpoint were written: they are rewritten alike."""
    ini, d, order = whole
    out = d / "killed"
    assert _nbody(ini, out, 0.5, order) == 0
    shutil.copy2(out / "checkpoint.h5", d / "ck_half.h5")
    assert main(["nbody", "--restart", str(out), "--t-end", "0.75"]) == 0
    assert read_diagnostics(out / "diagnostics.h5")[0]["step"].size == 7
    shutil.copy2(d / "ck_half.h5", out / "checkpoint.h5")  # the newer checkpoint "lost"
    assert main(["nbody", "--restart", str(out), "--t-end", "1"]) == 0
    _assert_same_run(d / "whole", out)


def _one_error_line(capsys, path):
    err = [x for x in capsys.readouterr().err.splitlines() if "error" in x]
    assert len(err) == 1, err
    assert str(path) in err[0]
    return err[0]


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_checkpoint_is_refused(whole, capsys, damage):
    ini, d, order = whole
    out = d / f"damaged_{damage}"
    shutil.copytree(d / "whole", out)
    ck = out / "checkpoint.h5"
    if damage == "flip":
        with h5py.File(ck, "r") as fh:
            at = fh["nbody"]["pos"].id.get_offset() + 8 * 10
        raw = bytearray(ck.read_bytes())
        raw[at:at + 4] = bytes(b ^ 0xFF for b in raw[at:at + 4])
        ck.write_bytes(bytes(raw))
    else:
        raw = ck.read_bytes()
        ck.write_bytes(raw[: len(raw) // 2])
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    assert main(["nbody", "--restart", str(out), "--t-end", "2"]) == 2
    line = _one_error_line(capsys, ck)
    assert ("checksum" in line) if damage == "flip" else ("cannot be opened" in line)
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert after == before


def test_restart_refuses_changing_the_run(whole, capsys):
    ini, d, order = whole
    out = d / "whole"
    other = 6 if order == 4 else 4
    before = (out / "diagnostics.h5").read_bytes()
    capsys.readouterr()
    assert main(["nbody", "--restart", str(out), "--t-end", "2", "--order", str(other)]) == 2
    assert "--order" in _one_error_line(capsys, out)
    assert main(["nbody", "--restart", str(out), "--t-end", "2", "--dt-out", "0.25"]) == 2
    assert "--dt-out" in _one_error_line(capsys, out)
    assert main(["nbody", "--restart", str(out), "--t-end", "2", "--set",
                 "run.energy_error_max=1"]) == 2
    capsys.readouterr()
    # finished, and no later end given; an end not after the checkpoint
    assert main(["nbody", "--restart", str(out)]) == 2
    assert "finished" in _one_error_line(capsys, out)
    assert main(["nbody", "--restart", str(out), "--t-end", "0.5"]) == 2
    assert "--t-end" in _one_error_line(capsys, out)
    assert (out / "diagnostics.h5").read_bytes() == before
    # not an N-body checkpoint folder
    assert main(["nbody", "--restart", str(d / "nowhere")]) == 2


def test_clean_stop_checkpoints_and_continues(whole):
    """A signal stops the run at the next output with a checkpoint (exit 75's reason);
    the restart to its own t_end is the uninterrupted run."""
    import signal

    from cmc.config import load_config
    from cmc.nbody import NBodyRun

    ini, d, order = whole
    out = d / "signal"
    out.mkdir()
    run = NBodyRun(load_config(str(ini)), out, t_end=1.0, dt_out=0.125, order=order)
    run.signal_received = signal.SIGTERM
    assert run.run() == "signal"
    with h5py.File(out / "checkpoint.h5", "r") as fh:
        assert fh["run"].attrs["step"] == 1 and fh["run"].attrs["t_end"] == 1.0
    assert main(["nbody", "--restart", str(out)]) == 0
    _assert_same_run(d / "whole", out)


def test_checkpoint_every(whole, monkeypatch):
    """At t = 0, every output.checkpoint_every outputs, and at the end."""
    from cmc.nbody import NBodyRun

    ini, d, order = whole
    steps = []
    orig = NBodyRun.write_checkpoint

    def spy(self):
        steps.append(self.step)
        orig(self)

    monkeypatch.setattr(NBodyRun, "write_checkpoint", spy)
    assert main(["nbody", str(ini), "-o", str(d / "every"), "--t-end", "1", "--order",
                 str(order), "--set", "output.checkpoint_every=3", "--set",
                 "output.checkpoint_minutes=0"]) == 0
    assert steps == [0, 3, 6, 8]
