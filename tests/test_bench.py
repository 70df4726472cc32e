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
