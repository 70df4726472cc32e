"""The benchmark's step driver runs (make bench is not part of the test suite, so this keeps it
from breaking unseen): CPU and the simulated GPU back end."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


@pytest.mark.parametrize("backend", ["cpu", "gpu-sim"])
def test_bench_step_reports_parts(backend):
    from bench_step import bench_step

    from parallel.comm import SerialComm

    out = bench_step(600, 2, 1, comm=SerialComm(), overrides=[f"run.orbit_backend={backend}"])
    assert out["orbit_backend"] == backend and out["us_per_star_step"] > 0
    parts = out["parts_us_per_star"]
    assert parts["orbits"] > 0 and sum(parts.values()) <= out["us_per_star_step"] * 1.01
    assert ("device" in out) == (backend != "cpu")


def test_bench_step_from_checkpoint(tmp_path):
    """The deep-collapse configuration continues a stopped run's checkpoint and reports the
    counted traffic (none on one rank) and memory."""
    import subprocess

    from bench_step import bench_step

    from parallel.comm import SerialComm

    out_dir = tmp_path / "run"
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "cmc.cli", "run",
                    str(root / "examples/plummer_small.ini"), "-o", str(out_dir),
                    "--set", "initial.n=800", "--set", "run.max_steps=4"],
                   check=True, capture_output=True, cwd=root)
    out = bench_step(0, 3, 1, comm=SerialComm(), checkpoint=str(out_dir / "checkpoint.h5"))
    assert out["N"] > 700 and out["checkpoint"].endswith("checkpoint.h5")
    assert out["steps"] == 1 and out["us_per_star_step"] > 0  # the fastest of 3 runs of 1
    assert out["bytes_sent_per_step_per_rank"] == 0  # serial: nothing travels
    assert out["bytes_per_star"] >= 0 and "wait" in out["parts_us_per_star"]
