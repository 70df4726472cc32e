"""The GPU orbit kernel, run on the CPU by numba's CUDA simulator (CI has no GPU).

The simulator executes the very functions the device compiles (:mod:`physics.orbits_gpu`),
one Python thread per 20-star block, in IEEE double precision without fused multiply-adds:
its results must equal the numba CPU kernel's bit for bit, stream states included.  The
device's FMA contraction is estimated by compiling the same source for the CPU with
``fastmath={"contract"}``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from physics.orbits import block_rows, new_orbits_rows
from physics.orbits_gpu import (
    DEVICE_FUNCTIONS,
    DEVICE_MAX_ULPS,
    DeviceOrbits,
    compare_orbits,
    run_orbit_kernel,
    ulp_distance,
)
from physics.potential import compute_potential
from tests.conftest import njit_callees, rng_states


@pytest.fixture(scope="module")
def sim_kernel():
    import numba

    cache = numba.config.CACHE_DIR
    kernel = DeviceOrbits("gpu-sim")
    # loading the simulator reloads numba's settings: the kernel cache must stay keyed by
    # the kernel sources (parallel/jit_cache.py)
    assert numba.config.CACHE_DIR == cache and "kernels-" in cache
    return kernel


def _inputs(st, n, vr_scale=1.0):
    r, m, vr, vt = (st[k][:n].copy() for k in ("r", "m", "vr", "vt"))
    phi, mcum = compute_potential(r, m)
    return r, phi, mcum, m, vr * vr_scale, vt


def test_device_functions_reach_no_cpu_kernel():
    """Every numba function that _orbit_block calls, directly or not, is compiled again for
    the device (none is left calling CPU code)."""
    listed = {name for names in DEVICE_FUNCTIONS.values() for name in names}
    calls = njit_callees([("physics.orbits", "_orbit_block")])
    for name, callees in calls.items():
        assert callees <= listed, f"{name} calls {callees - listed}, not compiled for the device"
    assert set(calls) == listed


@pytest.mark.parametrize("r_tidal", [0.0, 3.0])
def test_simulated_gpu_kernel_equals_cpu_kernel(plummer_5k, sim_kernel, r_tidal):
    """Same inputs, same streams: identical new radii, velocities, potentials, statuses,
    trial counts and stream states (bound, unbound and tidally stripped stars)."""
    n = 1500
    r, phi, mcum, m, vr, vt = _inputs(plummer_5k, 5000, vr_scale=1.2)
    sel = np.arange(0, 5000, 5000 // n)[:n]  # stars from the whole cluster, global indices
    gidx = sel.astype(np.int64)
    _, block_start = block_rows(n)
    states = rng_states(block_start.size - 1, seed=9)
    args = (r, phi, mcum, gidx, block_start, m[sel], vr[sel], vt[sel], states, r_tidal)
    cpu = run_orbit_kernel(new_orbits_rows, *args)
    gpu = run_orbit_kernel(sim_kernel, *args)
    assert set(np.unique(cpu["status"])) >= ({0, 1, 2} if r_tidal else {0, 1})
    cmp = compare_orbits(cpu, gpu, max_ulps=0)
    assert cmp["ok"], cmp
    for k in ("r_new", "vr_new", "vt_new", "phi_oo", "phi_on", "r_apo", "counters", "states"):
        np.testing.assert_array_equal(cpu[k], gpu[k])
    assert not np.array_equal(cpu["states"], states)  # the streams did advance
    assert sim_kernel.stats.calls >= 1 and sim_kernel.stats.bytes_to_device > 0


def test_simulated_gpu_kernel_uneven_blocks(plummer_5k, sim_kernel):
    """Blocks of any size (as after strong encounters: rows at other stars' radii, empty
    blocks) give the CPU kernel's answers too."""
    r, phi, mcum, m, vr, vt = _inputs(plummer_5k, 5000)
    gen = np.random.default_rng(4)
    sizes = gen.integers(0, 27, 40)
    n = int(sizes.sum())
    block_start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    gidx = np.sort(gen.choice(5000, n, replace=False)).astype(np.int64)
    states = rng_states(sizes.size, seed=2)
    args = (r, phi, mcum, gidx, block_start, m[gidx], vr[gidx], vt[gidx], states, 0.0)
    cmp = compare_orbits(run_orbit_kernel(new_orbits_rows, *args),
                         run_orbit_kernel(sim_kernel, *args), max_ulps=0)
    assert cmp["ok"], cmp


def test_simulated_gpu_kernel_skips_removed_rows(plummer_5k, sim_kernel):
    """Rows preset to ORBIT_REMOVED (unbound before the orbits) are skipped on the device as
    on the CPU: the same outputs for the other rows, trials and stream states."""
    n = 600
    r, phi, mcum, m, vr, vt = _inputs(plummer_5k, n)
    gidx, block_start = block_rows(n)
    removed = np.zeros(n, dtype=bool)
    removed[[0, 3, 19, 20, 21, 333, n - 1]] = True
    removed[100:120] = True  # a whole block
    args = (r, phi, mcum, gidx, block_start, m, vr, vt, rng_states(block_start.size - 1, 3))
    cpu = run_orbit_kernel(new_orbits_rows, *args, removed=removed)
    gpu = run_orbit_kernel(sim_kernel, *args, removed=removed)
    rows = ("r_new", "vr_new", "vt_new", "phi_oo", "phi_on", "r_apo", "status")
    cmp = compare_orbits(*({k: (v[~removed] if k in rows else v) for k, v in res.items()}
                           for res in (cpu, gpu)), max_ulps=0)
    assert cmp["ok"], cmp
    assert np.all(gpu["status"][removed] == 3) and np.all(gpu["r_new"][~removed] > 0.0)


def test_fma_contraction_stays_within_device_bound(plummer_20k):
    """The device contracts a*b + c into fused multiply-adds; the same source compiled for
    the CPU with contraction allowed stays within DEVICE_MAX_ULPS with identical accept/reject
    decisions (trial counts), statuses and stream states."""
    from numba import njit

    from physics.orbits import search_levels
    from physics.orbits_gpu import device_functions
    from physics.potential import radius_lookup_table

    block = device_functions(njit(fastmath={"contract"}))["_orbit_block"]

    def driver(r_all, phi_all, mcum_all, gidx, block_start, m, vr, vt, states, r_tidal,
               r_new, vr_new, vt_new, phi_oo, phi_on, status, counters, r_apo):
        lut, lut_lo, lut_inv = radius_lookup_table(r_all, 4)
        lev_r, lev_phi, offsets, shifts = search_levels(r_all, phi_all)
        for blk in range(states.shape[0]):
            block(blk, r_all, phi_all, mcum_all, lev_r, lev_phi, offsets, shifts, lut,
                  lut_lo, lut_inv, gidx, block_start, m, vr, vt, states, r_tidal, r_new,
                  vr_new, vt_new, phi_oo, phi_on, status, counters, r_apo)

    contracted = njit(driver)
    n = plummer_20k["r"].size
    r, phi, mcum, m, vr, vt = _inputs(plummer_20k, n)
    gidx, block_start = block_rows(n)
    args = (r, phi, mcum, gidx, block_start, m, vr, vt, rng_states(block_start.size - 1), 0.0)
    cpu = run_orbit_kernel(new_orbits_rows, *args)
    fma = run_orbit_kernel(contracted, *args)
    cmp = compare_orbits(cpu, fma, max_ulps=DEVICE_MAX_ULPS)
    assert cmp["ok"], cmp


def test_ulp_distance():
    a = np.array([1.0, 1.0, -1.0, 0.0, np.inf, np.nan, 2.0])
    b = np.array([1.0, np.nextafter(1.0, 2.0), np.nextafter(-1.0, 0.0), -0.0, np.inf, np.nan,
                  np.nan])
    d = ulp_distance(a, b)
    assert d[:6].tolist() == [0, 1, 1, 0, 0, 0]
    assert d[6] == np.iinfo(np.int64).max
    assert ulp_distance(np.array([-5e-324]), np.array([5e-324]))[0] == 2


def test_gpu_backend_without_cupy_stops_with_one_line(tmp_path, capsys):
    """Without CuPy, --orbit-backend gpu stops before anything is written: exit 2 and one
    line saying CuPy is missing."""
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed here")
    except ImportError:
        pass
    from cmc.cli import main
    from physics.orbits_gpu import BackendUnavailable, check_backend

    with pytest.raises(BackendUnavailable, match="CuPy is not installed"):
        check_backend("gpu")
    out = tmp_path / "o"
    ini = Path(__file__).resolve().parents[1] / "examples" / "plummer_small.ini"
    logger = logging.getLogger("cmc")
    before = list(logger.handlers)
    try:
        assert main(["run", str(ini), "-o", str(out), "--orbit-backend", "gpu"]) == 2
    finally:  # no handler bound to this test's captured stderr may outlive it
        for h in logger.handlers:
            if h not in before:
                logger.removeHandler(h)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("cmc: error: run.orbit_backend = gpu: CuPy is not installed")
    assert not out.exists()


def test_run_with_simulated_gpu_equals_cpu_run():
    """A short run (2 emulated ranks) with new orbits from the simulated GPU kernel: the
    same stars, bit for bit, and the same stream states as the CPU run."""
    from cmc.config import load_config
    from cmc.simulation import Simulation
    from parallel.comm import SerialComm

    runs = {}
    for backend in ("cpu", "gpu-sim"):
        cfg = load_config(None, ["initial.n=600", "initial.seed=5", "run.emulate_ranks=2",
                                 "run.n_core_stop=0", f"run.orbit_backend={backend}"])
        sim = Simulation.create(cfg, SerialComm())
        for _ in range(3):
            sim.step()
        runs[backend] = sim
    a, b = runs["cpu"], runs["gpu-sim"]
    assert type(b.orbits).__name__ == "DeviceOrbits"
    for k, v in a.stars.as_dict().items():
        np.testing.assert_array_equal(v, b.stars.as_dict()[k], err_msg=k)
    np.testing.assert_array_equal(a.streams.states, b.streams.states)
    assert a.state.time == b.state.time
