"""Node-shared replicated arrays (``parallel/shared.py``) against the private ones.

Written once for any communicator size (``mpiexec -n P python -m pytest tests/mpi``); every
rank asserts on data it holds after the last collective.  Several "nodes" on one machine are
acted by splitting the node communicator further (each node's window is then shared by its
ranks only, and the leaders' Allgatherv completes the rows of the others).
"""

from __future__ import annotations

import numpy as np
import pytest

from cmc.config import load_config
from cmc.replicated import POTENTIAL_STAGES
from cmc.simulation import Simulation
from parallel.comm import allgatherv_array
from parallel.decomposition import rank_bounds
from parallel.shared import NodeReplicas, PotentialStages
from physics.potential import POTENTIAL_BLOCK, compute_potential_into, updated_potential

MPI = pytest.importorskip("mpi4py.MPI")


def _stages(block: int) -> PotentialStages:
    """The run's potential stages over blocks of ``block`` rows (small ones: many blocks per
    rank in a small model)."""
    return PotentialStages(block, POTENTIAL_STAGES.mass_totals, POTENTIAL_STAGES.blocks,
                           POTENTIAL_STAGES.suffix)


def _potential(r: np.ndarray, m: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """The one-process potential over blocks of ``block`` rows."""
    phi, mcum = np.empty(r.size), np.empty(r.size)
    compute_potential_into(r, m, phi, mcum, 0, block)
    return phi, mcum


def _local_rows(n_total: int, comm, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's rows of a sorted model of ``n_total`` stars (the same model on all ranks)."""
    rng = np.random.default_rng(seed)
    r = np.sort(rng.random(n_total) + 0.01)
    m = rng.random(n_total) / n_total
    b = rank_bounds(n_total, comm.Get_size())
    lo, hi = b[comm.Get_rank()], b[comm.Get_rank() + 1]
    return r[lo:hi].copy(), m[lo:hi].copy()


def _replicas(world, ranks_per_node: int) -> NodeReplicas | None:
    """Node-shared arrays on the real node (``ranks_per_node`` 0) or on "nodes" of that many
    consecutive ranks (the node communicator split further)."""
    node = None
    if ranks_per_node:
        node = world.Split(world.Get_rank() // ranks_per_node, key=world.Get_rank())
    return NodeReplicas.create(world, node)


@pytest.mark.parametrize("block", [POTENTIAL_BLOCK, 13])
@pytest.mark.parametrize("ranks_per_node", [0, 1, 2])
def test_publish_equals_private_arrays(world, ranks_per_node, block):
    """The shared r, m, phi, mcum are the private arrays' bits on one node (0: the real node
    communicator), one node per rank (1) and two ranks per node (2), while N grows past the
    window's room (a new window) and shrinks; the radii of a call stay valid through the
    next call (the energy correction reads them as the old radii).  The potential's blocks
    of the run, and small ones (each rank of a node summing many)."""
    stages = _stages(block)
    if world.Get_size() == 1:
        assert NodeReplicas.create(world) is None
        return
    rep = _replicas(world, ranks_per_node)
    assert rep is not None
    results = []
    prev = None
    for k, n_total in enumerate((1000, 1100, 1500, 900, 3001)):
        r, m = _local_rows(n_total, world, k)
        got = rep.publish(n_total, r, m, stages)
        old_radii_kept = prev is None or np.array_equal(prev[0], prev[1])
        r_all = allgatherv_array(world, r)
        m_all = allgatherv_array(world, m)
        phi, mcum = _potential(r_all, m_all, block)
        results.append((all(np.array_equal(a, b) for a, b in zip(got, (r_all, m_all, phi, mcum),
                                                                 strict=True)),
                        old_radii_kept, rep.n_nodes))
        prev = (got[0], r_all)
    rep.close()
    everyone = world.allgather(results)
    expect_nodes = {0: None, 1: world.Get_size(), 2: (world.Get_size() + 1) // 2}[ranks_per_node]
    for res in everyone:
        assert all(same and kept for same, kept, _ in res)
        if expect_nodes is not None:
            assert all(nodes == expect_nodes for _, _, nodes in res)


@pytest.mark.parametrize("ranks_per_node", [0, 1, 2])
def test_gather_equals_allgatherv(world, ranks_per_node):
    """A column gathered into the node's window (the energy correction's potential at the
    old radii) is the Allgatherv's bits, for the previous step's number of rows after each
    publish (N growing past the window's room, then shrinking); a count that does not fit
    the layout raises."""
    if world.Get_size() == 1:
        return
    rep = _replicas(world, ranks_per_node)
    results = []
    n_old = None
    for k, n_total in enumerate((1000, 1500, 900, 3001)):
        r, m = _local_rows(n_total, world, k)
        rep.publish(n_total, r, m, POTENTIAL_STAGES)
        for n in (n_total,) if n_old is None else (n_old, n_total):
            col = _local_rows(n, world, 100 + k)[1] - 0.5
            got = rep.gather(col, n)
            results.append(np.array_equal(got, allgatherv_array(world, col)))
        n_old = n_total
    try:
        rep.gather(np.zeros(1 if world.Get_rank() == 0 else 0), 1000)
        raised = False
    except RuntimeError as exc:
        raised = "holds" in str(exc)
    rep.close()
    everyone = world.allgather((all(results), raised))
    assert all(ok and bad for ok, bad in everyone)


@pytest.mark.parametrize("block", [POTENTIAL_BLOCK, 13])
@pytest.mark.parametrize("ranks_per_node", [0, 1, 2])
def test_update_masses_equals_updated_potential(world, ranks_per_node, block):
    """New masses at some rows of the node's window (objects gone, products' masses) give
    updated_potential's bits in m, phi and mcum, the node's ranks each shifting its share of
    the inside: the innermost changed row at the centre, inside, in the halo and the last
    one (the run's blocks, and small ones), and a second update after each; a later publish
    starts afresh; a stage failing
    on one rank raises on every rank of the node, in an update and in a publish, none
    hangs."""
    if world.Get_size() == 1:
        return
    stages = _stages(block)
    rep = _replicas(world, ranks_per_node)
    n_total = 2003
    rng = np.random.default_rng(11)  # the same changes on every rank
    results = []
    for k, first in enumerate((0, 1, 700, 1990, n_total - 1)):
        r, m = _local_rows(n_total, world, 20 + k)
        rows = np.unique(np.concatenate(([first], rng.integers(first, n_total, 5))))
        masses = np.where(rng.random(rows.size) < 0.5, 0.0, rng.random(rows.size) / n_total)
        r_all, m_all, phi, mcum = (np.array(a) for a in rep.publish(n_total, r, m, stages))
        m_new = m_all.copy()
        m_new[rows] = masses
        phi_new, mcum_new = updated_potential(r_all, m_new, phi, mcum, first, block)
        got = rep.update_masses(rows, masses, stages)
        results.append(all(np.array_equal(a, b) for a, b in zip(got, (m_new, phi_new, mcum_new),
                                                                 strict=True)))
        # the outermost rows moved the potential: a shift inside, not a copy
        results.append(first == 0 or not np.array_equal(got[1][:first], phi[:first])
                       or np.all(masses == m_all[rows]))
        # a second update of the same arrays (no publish between): from the first's values;
        # as in a step, every rank has read the arrays before any rank changes them again
        world.Barrier()
        rows2 = np.unique(rng.integers(max(0, first - 300), n_total, 4))
        masses2 = rng.random(rows2.size) / n_total
        m_new2 = m_new.copy()
        m_new2[rows2] = masses2
        phi_new2, mcum_new2 = updated_potential(r_all, m_new2, phi_new, mcum_new,
                                                int(rows2.min()), block)
        got2 = rep.update_masses(rows2, masses2, stages)
        results.append(all(np.array_equal(a, b) for a, b in
                           zip(got2, (m_new2, phi_new2, mcum_new2), strict=True)))

    def broken(*args):  # on the node's last rank only: the others must not wait for it
        if rep.node.Get_rank() == rep.node.Get_size() - 1:
            raise ValueError("planted")
        stages.blocks(*args)

    r, m = _local_rows(n_total, world, 99)
    rep.publish(n_total, r, m, stages)
    raised = []
    for call in (lambda st: rep.update_masses(np.array([5]), np.array([0.0]), st),
                 lambda st: rep.publish(n_total, r, m, st)):
        try:
            call(PotentialStages(block, stages.mass_totals, broken, stages.suffix))
            raised.append("")
        except (ValueError, RuntimeError) as exc:
            raised.append(str(exc))
    rep.close()
    everyone = world.allgather((all(results), raised))
    for ok, why in everyone:
        assert ok
        assert all(w in ("planted", "the potential failed on another rank of this node")
                   for w in why)


def test_nodes_of_scattered_ranks_keep_private_arrays(world):
    """A node whose ranks are not consecutive (round-robin placement) holds stars that are not
    one range of the global order: every rank then gets None (private arrays)."""
    if world.Get_size() < 3:
        return
    node = world.Split(world.Get_rank() % 2, key=world.Get_rank())
    assert NodeReplicas.create(world, node) is None


def test_run_with_shared_memory_equals_private(world):
    """A run with binaries (strong encounters, wide binaries broken: N changes) gives the same
    bits with the node-shared arrays as with private ones, and gives the windows back at the
    end of the run."""
    if world.Get_size() == 1:
        return

    def run(mode: str):
        cfg = load_config(None, ["initial.n=1500", "initial.seed=5", "run.max_steps=40",
                                 "run.n_core_stop=0", "initial.binary_fraction=0.2",
                                 f"run.shared_memory={mode}"])
        sim = Simulation.create(cfg, world)
        shared = sim.replicas is not None
        sim.run()
        return sim.gather_stars(), {k: np.asarray(v) for k, v in sim.history.items()}, \
            shared, sim.replicas is None

    a_stars, a_diag, a_shared, a_released = run("auto")
    b_stars, b_diag, b_shared, _ = run("off")
    same = None
    if world.Get_rank() == 0:  # (the stars are gathered there)
        same = (all(np.array_equal(a_stars[k], b_stars[k]) for k in a_stars)
                and all(np.array_equal(a_diag[k], b_diag[k]) for k in a_diag))
    same = world.bcast(same, root=0)
    flags = world.allgather((same, a_shared, a_released, b_shared))
    assert all(f == (True, True, True, False) for f in flags), flags
