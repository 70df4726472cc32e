"""The direct N-body force kernel for the GPU, run on the CPU by numba's CUDA simulator (CI has
no GPU): physics.nbody_gpu (issue 50, "Forces").

The simulator executes the very functions the device compiles, one Python thread per active
particle, in IEEE double precision without fused multiply-adds: the forces must equal the
numba CPU kernel's bit for bit, and so must a whole integration that takes them.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_nbody import _plummer_3d  # (pytest puts tests/ on the path)

from physics.nbody import NBodyState, evolve, predicted
from physics.nbody_gpu import NBODY_DEVICE_FUNCTIONS, DeviceForces
from physics.nbody_kernels import acc_jerk_serial, acc_jerk_snap_serial
from tests.conftest import njit_callees


@pytest.fixture(scope="module")
def sim_forces():
    return DeviceForces("gpu-sim")


def test_device_functions_reach_no_cpu_kernel():
    """Every numba function the per-particle force calls is compiled again for the device."""
    listed = {name for names in NBODY_DEVICE_FUNCTIONS.values() for name in names}
    calls = njit_callees([("physics.nbody_kernels", "_acc_jerk_one"),
                          ("physics.nbody_kernels", "_acc_jerk_snap_one")])
    for name, callees in calls.items():
        assert callees <= listed, f"{name} calls {callees - listed}, not compiled for the device"
    assert set(calls) == listed


@pytest.mark.parametrize("eps2", [0.0, 1e-4])
def test_simulated_forces_equal_cpu_kernel(sim_forces, eps2):
    m, pos, vel = _plummer_3d(40, 3)
    acc = np.random.default_rng(1).normal(size=(40, 3))
    active = np.array([0, 3, 7, 39, 20], dtype=np.int64)
    want4 = acc_jerk_serial(pos, vel, m, active, eps2)
    got4 = sim_forces(acc_jerk_serial, (pos, vel, m), active, eps2)
    want6 = acc_jerk_snap_serial(pos, vel, acc, m, active, eps2)
    got6 = sim_forces(acc_jerk_snap_serial, (pos, vel, acc, m), active, eps2)
    assert len(got4) == 3 and len(got6) == 4
    for w, g in zip(want4 + want6, got4 + got6):
        np.testing.assert_array_equal(g, w)
    assert sim_forces.calls >= 2 and sim_forces.bytes_to_device > 0
    empty = sim_forces(acc_jerk_serial, (pos, vel, m), np.zeros(0, dtype=np.int64), eps2)
    assert [x.shape for x in empty] == [(0, 3), (0, 3), (0,)]


@pytest.mark.parametrize("order", [4, 6])
def test_simulated_integration_equals_cpu(sim_forces, order):
    """A Plummer N = 12 system over 1/16 time unit with block steps: the same bits."""
    m, pos, vel = _plummer_3d(12, 2)
    runs = []
    for fmap in (None, sim_forces):
        s = NBodyState.create(m, pos, vel, dt_max=1.0 / 16, order=order)
        s.force_map = fmap
        runs.append(evolve(s, 1.0 / 16))
    assert runs[0].n_blocks > 5
    for a, b in zip(predicted(runs[0]), predicted(runs[1])):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(runs[0].dt, runs[1].dt)


def test_gpu_backend_without_a_device_says_what_is_missing():
    from physics.orbits_gpu import BackendUnavailable

    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(BackendUnavailable, match="CuPy"):
            DeviceForces("gpu")
    with pytest.raises(ValueError, match="gpu or gpu-sim"):
        DeviceForces("cpu")


def test_cmc_nbody_forces_option(tmp_path, capsys):
    """``cmc nbody --forces gpu-sim`` writes the CPU run's diagnostics bit for bit; ``--forces
    gpu`` without a device is one line naming what is missing (exit 2)."""
    from cmc.cli import main
    from cmc.io import read_diagnostics

    ini = tmp_path / "p.ini"
    ini.write_text("[initial]\nmodel = plummer\nn = 40\nseed = 4\n")
    base = ["nbody", str(ini), "--t-end", "0.0625", "--dt-out", "0.03125", "-o"]
    assert main(base + [str(tmp_path / "cpu")]) == 0
    assert main(base + [str(tmp_path / "sim"), "--forces", "gpu-sim"]) == 0
    da, _ = read_diagnostics(tmp_path / "cpu" / "diagnostics.h5")
    db, _ = read_diagnostics(tmp_path / "sim" / "diagnostics.h5")
    assert da["step"].size == 3
    for name in da:
        if name != "wall_s":
            np.testing.assert_array_equal(da[name], db[name], err_msg=name)
    assert "forces on gpu-sim" in (tmp_path / "sim" / "cmc.log").read_text()
    try:
        import cupy  # noqa: F401
    except ImportError:
        capsys.readouterr()
        assert main(base + [str(tmp_path / "gpu"), "--forces", "gpu"]) == 2
        err = [x for x in capsys.readouterr().err.splitlines() if "error" in x.lower()]
        assert len(err) == 1 and "--forces gpu" in err[0] and "CuPy" in err[0], err


def test_gpu_forces_refused_under_mpi():
    from types import SimpleNamespace

    from cmc.errors import InputError
    from cmc.nbody import use_forces

    run = SimpleNamespace(comm=SimpleNamespace(Get_size=lambda: 2), nb=None)
    with pytest.raises(InputError, match="one process"):
        use_forces(run, "gpu-sim")
    assert use_forces(run, "cpu") == "cpu (numba)"
