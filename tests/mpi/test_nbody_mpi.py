"""The direct N-body mode under MPI (issue 50, "Forces": MPI over i-particles): every rank a
share of each block's forces (:class:`parallel.nbody_forces.SplitForces`), the run the same
bits as one process's, at the 4th and 6th order, with close pairs; and ``cmc nbody`` under
``mpiexec`` writes what the one-process command writes.

Written once for any communicator size; every rank asserts on data it holds after all
communication (the runs are replicated, so every rank holds the whole result).
"""

from __future__ import annotations

import numpy as np
import pytest

from parallel.nbody_forces import SplitForces
from physics.nbody import NBodyState, evolve

pytest.importorskip("mpi4py.MPI")


def _system(n: int, seed: int):
    """A Plummer sphere (tests/test_nbody.py's) with a planted hard binary."""
    from tests.test_nbody import _plummer_3d

    m, pos, vel = _plummer_3d(n, seed)
    mu = m[0] + m[1]
    pos[1] = pos[0] + np.array([2e-3, 0.0, 0.0])
    vel[1] = vel[0] + np.array([0.0, np.sqrt(mu / 2e-3), 0.0])
    return m, pos, vel


_ARRAYS = ("mass", "pos", "vel", "acc", "jerk", "snap", "crackle", "t", "dt", "ids",
           "pair_i", "pair_j", "pair_r", "pair_w", "pair_t0")


@pytest.mark.parametrize("order", [4, 6])
def test_split_forces_give_the_one_process_bits(world, order):
    m, pos, vel = _system(192, 3)
    kw = {"order": order, "dt_max": 1.0 / 16, "pair_gamma": 1e-5}
    one = NBodyState.create(m, pos, vel, **kw)
    split = NBodyState.create(m, pos, vel, **kw)
    # every block split however small, so that the shares and the gather are exercised
    split.force_map = forces = SplitForces(world, min_pairs=0)
    evolve(one, 0.5)
    evolve(split, 0.5)
    for name in _ARRAYS:
        np.testing.assert_array_equal(getattr(split, name), getattr(one, name), err_msg=name)
    assert (split.n_blocks, split.n_steps, split.n_pair_formed) == (
        one.n_blocks, one.n_steps, one.n_pair_formed)
    assert one.n_pair_formed >= 1  # the planted binary taken out
    # every rank took part in the same number of gathers
    assert len(set(world.allgather((forces.n_split, forces.n_whole)))) == 1
    if world.size > 1:
        assert forces.n_split > 0
    # and the ranks hold the same bits
    assert len(set(world.allgather(split.pos.tobytes()))) == 1


def test_cmc_nbody_under_mpi_writes_the_serial_run(world, tmp_path_factory, monkeypatch):
    """``cmc nbody`` on all ranks (every block split) and restarted there, against the same
    command uninterrupted in one process (rank 0): the same diagnostics, bit for bit."""
    from cmc import cli, launch
    from cmc.io import read_diagnostics
    from parallel import nbody_forces

    monkeypatch.setattr(nbody_forces, "SPLIT_MIN_PAIRS", 0)

    base = world.bcast(str(tmp_path_factory.mktemp("nbody")) if world.rank == 0 else None)
    ini = f"{base}/n.ini"
    if world.rank == 0:
        with open(ini, "w") as fh:
            fh.write("[initial]\nmodel = plummer\nn = 160\nseed = 4\n[run]\nthreads = 1\n")
    world.Barrier()
    saved = list(launch._WORLD)
    try:
        launch._WORLD[:] = [world]
        code = cli.main(["nbody", ini, "-o", f"{base}/mpi", "--dt-out", "0.125",
                         "--t-end", "0.5"])
        codes = world.allgather(code)
        launch._WORLD[:] = [world]
        code2 = cli.main(["nbody", "--restart", f"{base}/mpi", "--t-end", "1.5"])
        codes2 = world.allgather(code2)
        ok = True
        if world.rank == 0:
            from parallel.comm import SerialComm

            launch._WORLD[:] = [SerialComm()]
            ok = cli.main(["nbody", ini, "-o", f"{base}/one", "--dt-out", "0.125",
                           "--t-end", "1.5"]) == 0
        ok = world.bcast(ok)
    finally:
        launch._WORLD[:] = saved
    assert codes == [0] * world.size and codes2 == [0] * world.size and ok
    a, _ = read_diagnostics(f"{base}/mpi/diagnostics.h5")
    b, _ = read_diagnostics(f"{base}/one/diagnostics.h5")
    assert sorted(a) == sorted(b) and a["step"][-1] == 12
    for k in a:
        if k == "wall_s" or "wall" in k:
            continue
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
