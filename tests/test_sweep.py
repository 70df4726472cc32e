"""Sweeps on one rank: summary, reruns that skip or continue, failures, array tasks, CLI."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from cmc.rundir import RunLock, run_status
from cmc.sweep import register, run_sweep
from parallel.comm import SerialComm

pytestmark = pytest.mark.timeout(120)

BASE = ("[initial]\nn = 300\nseed = 1\n[run]\nmax_steps = 4\nn_core_stop = 0\n"
        "[output]\ncheckpoint_every = 2\n")


def _sweep(tmp: Path, values: str, mode: str = "list") -> Path:
    (tmp / "base.ini").write_text(BASE)
    path = tmp / "sweep.ini"
    path.write_text(f"[sweep]\nbase = base.ini\nranks_per_model = 1\nmode = {mode}\n"
                    f"[values]\n{values}")
    return path


def _summary(out: Path) -> list[dict]:
    return json.loads((out / "summary.json").read_text())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cmc")
    register(p.add_subparsers(dest="command", required=True))
    return p


def _cli(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return args.func(args)


def test_sweep_runs_then_rerun_skips_finished(tmp_path):
    sweep, out = _sweep(tmp_path, "initial.seed = 1, 2, 3\n"), tmp_path / "out"
    assert run_sweep(sweep, SerialComm(), out) == 0
    rows = _summary(out)
    assert [r["status"] for r in rows] == ["finished"] * 3
    assert [r["stop_reason"] for r in rows] == ["max_steps"] * 3
    assert [r["params"] for r in rows] == [{"initial.seed": s} for s in "123"]
    assert all(r["steps"] == 4 and r["N"] > 0 and r["wall_s"] > 0 for r in rows)
    assert not any(r["skipped"] or r["resumed"] for r in rows)
    tsv = (out / "summary.tsv").read_text().splitlines()
    assert len(tsv) == 4 and tsv[0].split("\t")[:3] == ["index", "name", "initial.seed"]
    assert all(row.split("\t")[3] == "finished" for row in tsv[1:])
    ckpts = sorted(out.glob("model*/checkpoint.h5"))
    assert len(ckpts) == 3
    mtimes = [p.stat().st_mtime_ns for p in ckpts]

    assert run_sweep(sweep, SerialComm(), out) == 0
    assert [p.stat().st_mtime_ns for p in ckpts] == mtimes
    again = _summary(out)
    assert all(r["skipped"] and r["status"] == "finished" for r in again)
    # the old results are reported again
    for old, new in zip(rows, again):
        assert {k: new[k] for k in ("stop_reason", "steps", "N", "r_c")} == \
               {k: old[k] for k in ("stop_reason", "steps", "N", "r_c")}
    assert json.loads((ckpts[0].parent / "result.json").read_text())["skipped"] is True


def test_sweep_continues_stopped_and_killed_models(tmp_path):
    # model 1 stops on the wall-clock limit after its first step (resumable, exit 75)
    sweep = _sweep(tmp_path, "initial.seed = 1, 2\nrun.max_wall_hours = 0, 1e-9\n")
    out = tmp_path / "out"
    assert run_sweep(sweep, SerialComm(), out) == 75
    rows = _summary(out)
    assert [r["status"] for r in rows] == ["finished", "resumable"]
    assert rows[1]["stop_reason"] == "wall_clock" and rows[1]["steps"] == 1
    # model 0 as if killed after its checkpoint at step 2: the previous checkpoint is the latest
    m0 = out / rows[0]["name"]
    os.replace(m0 / "checkpoint.1.h5", m0 / "checkpoint.h5")
    st = run_status(m0)
    assert st.kind == "resumable" and st.step == 2

    assert run_sweep(sweep, SerialComm(), out) == 75
    rows = _summary(out)
    assert rows[0]["status"] == "finished" and rows[0]["resumed"]
    assert rows[0]["steps"] == 4 and rows[0]["stop_reason"] == "max_steps"
    # the resumed model keeps the parameters of its checkpoint: one more step, stopped again
    assert rows[1]["status"] == "resumable" and rows[1]["resumed"] and rows[1]["steps"] == 2


def test_sweep_records_failed_models_and_finishes_the_others(tmp_path):
    # 1: missing initial conditions (fails in set-up); 2: a physics failure (energy error)
    # recorded in its checkpoint.  (A parameter value that the configuration refuses refuses
    # the whole sweep: test_sweep_refuses_a_bad_value_before_any_model_runs.)
    sweep = _sweep(tmp_path, "initial.model = plummer, file, plummer\n"
                             f"initial.file = x, {tmp_path / 'missing.h5'}, x\n"
                             "run.energy_error_max = 0.05, 0.05, 1e-30\n")
    out = tmp_path / "out"
    assert run_sweep(sweep, SerialComm(), out) == 3
    rows = _summary(out)
    assert [r["status"] for r in rows] == ["finished", "failed", "failed"]
    assert "missing.h5" in rows[1]["stop_reason"]
    assert rows[2]["stop_reason"] == "energy_error" and rows[2]["steps"] == 1
    # a rerun skips the finished model and the one that failed in its run (it would fail the
    # same way); the other has nothing to resume and is tried again
    assert run_sweep(sweep, SerialComm(), out) == 3
    rows = _summary(out)
    assert [r["status"] for r in rows] == ["finished", "failed", "failed"]
    assert [r["skipped"] for r in rows] == [True, False, True]
    assert rows[2]["stop_reason"] == "energy_error" and rows[2]["steps"] == 1


@pytest.mark.parametrize("values, mode, words", [
    ("initial.n = 400, -5\n", "grid", ("model 1", "initial.n = -5", "initial.n: -5")),
    ("initial.seed = 1, 2\nrun.theta_max = 1, 7\n", "grid", ("model 1", "run.theta_max")),
    ("initial.seed = 1, 2\ninitial.w0 = 5, x\n", "list", ("model 1", "initial.w0")),
])
def test_sweep_refuses_a_bad_value_before_any_model_runs(tmp_path, capsys, values, mode,
                                                          words):
    """A value that any model of the grid would refuse refuses the sweep: exit 2, one line
    naming the model and the key, no model run and no folder written (issue 46, item 8: the
    other models ran, the bad one was recorded failed and the sweep exited 3)."""
    sweep, out = _sweep(tmp_path, values, mode), tmp_path / "out"
    assert _cli(["sweep", str(sweep), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("cmc: error")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(sweep) in lines[0] and all(w in lines[0] for w in words), lines[0]
    assert not out.exists()


def test_sweep_starts_a_damaged_model_afresh(tmp_path, capsys):
    sweep, out = _sweep(tmp_path, "initial.seed = 1\n"), tmp_path / "out"
    mdir = out / "model000_seed1"
    mdir.mkdir(parents=True)
    (mdir / "checkpoint.h5").write_bytes(b"not HDF5")
    (mdir / "cmc.log").write_text("an old log\n")
    assert run_status(mdir).kind == "damaged"
    assert run_sweep(sweep, SerialComm(), out) == 0
    assert "without a readable checkpoint" in capsys.readouterr().err
    row = _summary(out)[0]
    assert row["status"] == "finished" and row["steps"] == 4 and not row["resumed"]
    assert run_status(mdir).kind == "finished"
    assert "an old log" not in (mdir / "cmc.log").read_text()


def test_sweep_leaves_a_locked_model_alone(tmp_path):
    sweep, out = _sweep(tmp_path, "initial.seed = 1, 2\n"), tmp_path / "out"
    name = "model001_seed2"
    with RunLock(out / name):
        assert run_sweep(sweep, SerialComm(), out) == 75
    rows = _summary(out)
    assert [r["status"] for r in rows] == ["finished", "busy"]
    assert "in use by another cmc command" in rows[1]["stop_reason"]
    assert not (out / name / "result.json").exists()
    assert run_status(out / name).kind == "empty"


def test_sweep_index_runs_one_model(tmp_path):
    sweep, out = _sweep(tmp_path, "initial.seed = 1, 2, 3\n"), tmp_path / "out"
    assert run_sweep(sweep, SerialComm(), out, index=1) == 0
    assert sorted(p.parent.name for p in out.glob("*/result.json")) == ["model001_seed2"]
    assert [r["status"] for r in _summary(out)] == ["pending", "finished", "pending"]
    # a second array task adds its row to the first's
    assert run_sweep(sweep, SerialComm(), out, index=2) == 0
    assert [r["status"] for r in _summary(out)] == ["pending", "finished", "finished"]
    tsv = (out / "summary.tsv").read_text().splitlines()
    assert [row.split("\t")[3] for row in tsv[1:]] == ["pending", "finished", "finished"]


def test_sweep_takes_index_from_slurm_array_task_id(tmp_path, monkeypatch, capsys):
    sweep, out = _sweep(tmp_path, "initial.seed = 1, 2, 3\n"), tmp_path / "out"
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    assert _cli(["sweep", str(sweep), "-o", str(out)]) == 0
    assert [r["status"] for r in _summary(out)] == ["pending", "pending", "finished"]
    assert "--index 2 from SLURM_ARRAY_TASK_ID" in capsys.readouterr().err


def test_sweep_index_out_of_range_is_one_line_exit_2(tmp_path, capsys):
    sweep, out = _sweep(tmp_path, "initial.seed = 1, 2, 3\n"), tmp_path / "out"
    assert _cli(["sweep", str(sweep), "-o", str(out), "--index", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("cmc: error: sweep --index 3") and "0 to 2" in err[0]
    assert not (out / "summary.json").exists()


def test_summary_prints_the_table(tmp_path, capsys):
    sweep, out = _sweep(tmp_path, "initial.seed = 1, 2\n"), tmp_path / "out"
    assert run_sweep(sweep, SerialComm(), out, index=0) == 0
    capsys.readouterr()
    assert _cli(["summary", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["model", "initial.seed", "status", "stop", "reason", "wall",
                                "[s]"]
    assert lines[2].split()[:4] == ["model000_seed1", "1", "finished", "max_steps"]
    assert lines[3].split() == ["model001_seed2", "2", "pending"]
    assert _cli(["summary", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cmc: error: no sweep summary")
