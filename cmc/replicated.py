"""The replicated arrays: every star's radius, mass, potential and enclosed mass in global order.

Each rank holds copies (or shares the node's copy, :class:`parallel.shared.NodeReplicas`) of
``r_all``, ``m_all``, ``phi_all`` and ``mcum_all`` of the run (attributes of
:class:`cmc.simulation.Simulation`).  Two operations change them: :func:`sync_replicated`
after the sort (a new order: gather and recompute), and :func:`update_slot_masses` within the
step (objects removed or changed by binary processes: new masses at their slots, the potential
recomputed from the innermost one on).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from parallel.comm import allgatherv_array, allreduce_sum
from parallel.decomposition import block_counts, rank_bounds
from parallel.shared import PotentialStages
from physics.potential import (
    POTENTIAL_BLOCK,
    compute_potential,
    enclosed_mass_totals,
    potential_blocks_into,
    potential_suffix_blocks,
    updated_potential,
)

if TYPE_CHECKING:
    from cmc.simulation import Simulation

#: The potential's stages for the node-shared arrays (the node's ranks compute it together)
POTENTIAL_STAGES = PotentialStages(POTENTIAL_BLOCK, enclosed_mass_totals, potential_blocks_into,
                                   potential_suffix_blocks)


def sync_replicated(sim: Simulation, n_total: int | None = None) -> None:
    """Allgather radii and masses (global order) and recompute the potential: into the
    node's shared memory (:class:`parallel.shared.NodeReplicas`, ``run.shared_memory``),
    or into this rank's own arrays (collective).  ``n_total``: the number of stars on all
    ranks, where the caller knows it (the step's sort counted them), else reduced here.
    Sets ``sim.r_all, m_all, phi_all, mcum_all, n_total, offset``."""
    if sim.replicas is not None:  # (publish checks this rank's count against the layout)
        sim.n_total = (int(allreduce_sum(sim.comm, np.array([sim.stars.n]))[0])
                       if n_total is None else int(n_total))
        sim.r_all, sim.m_all, sim.phi_all, sim.mcum_all = sim.replicas.publish(
            sim.n_total, sim.stars.r, sim.stars.m, POTENTIAL_STAGES)
    else:
        if sim.size == 1:  # the radii are never written in place (the step replaces
            # stars.r): no copy (0.1-0.5 ms per step at N = 1e5, the more with two
            # threads, whose sort left half of them in the other core's cache); the
            # masses may be (strong encounters), so they are copied
            sim.r_all = sim.stars.r
            sim.m_all = sim.stars.m.copy()
        else:
            sim.r_all = allgatherv_array(sim.comm, sim.stars.r)
            sim.m_all = allgatherv_array(sim.comm, sim.stars.m)
        sim.n_total = sim.r_all.size
        need = int(block_counts(sim.n_total, sim.size)[sim.rank])
        if need != sim.stars.n:
            raise RuntimeError(f"rank {sim.rank} holds {sim.stars.n} stars, the block "
                               f"layout needs {need}")
        sim.phi_all, sim.mcum_all = compute_potential(sim.r_all, sim.m_all)
    sim.offset = int(rank_bounds(sim.n_total, sim.size)[sim.rank])


def update_slot_masses(sim: Simulation, slots: np.ndarray, slot_mass: np.ndarray,
                       gone_slots: np.ndarray | None = None,
                       gone_mass: np.ndarray | None = None,
                       changes: np.ndarray | None = None,
                       debts: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Put the masses of this step's event products into the replicated arrays (every
    rank's changes, one Allgatherv) and recompute the potential the orbits are drawn in.

    ``gone_slots, gone_mass`` (slot and mass of each object removed), ``changes`` (rows
    ``(event key, slot, mass change)`` of the events, :func:`apply_events`) and ``debts``
    (rows ``(global block, energy)``, its ``debts``) travel in the same message; returns
    those of all ranks in global row order: (slot, mass) of the removed, shape (k, 2), the
    changes, shape (j, 3), and the debts, shape (d, 2).
    """
    if gone_slots is None:
        gone_slots, gone_mass = np.zeros(0), np.zeros(0)
    if changes is None:
        changes = np.zeros((0, 3))
    if debts is None:
        debts = np.zeros((0, 2))
    # (slot, mass, 0, 0) for an update, (slot, mass, 1, 0) for an object gone,
    # (slot, mass change, 2, event key) for an event's change, (block, energy, 3, 0) for
    # a block's debt
    nu, ng, nc, nd = slots.size, gone_slots.size, changes.shape[0], debts.shape[0]
    mine = np.column_stack((
        np.concatenate((slots, gone_slots, changes[:, 1], debts[:, 0])).astype(np.float64),
        np.concatenate((slot_mass, gone_mass, changes[:, 2], debts[:, 1])),
        np.repeat([0.0, 1.0, 2.0, 3.0], [nu, ng, nc, nd]),
        np.concatenate((np.zeros(nu + ng), changes[:, 0], np.zeros(nd)))))
    allc = allgatherv_array(sim.comm, mine)
    gone = allc[allc[:, 2] == 1.0, :2]
    ev = allc[allc[:, 2] == 2.0]
    owed = allc[allc[:, 2] == 3.0, :2]
    upd = allc[allc[:, 2] == 0.0]
    if upd.shape[0]:
        changed = upd[:, 0].astype(np.int64)
        if sim.replicas is not None:  # the node's copy, in place: its ranks share the
            # work (the same bits as below)
            sim.m_all, sim.phi_all, sim.mcum_all = sim.replicas.update_masses(
                changed, upd[:, 1], POTENTIAL_STAGES)
            return gone, ev[:, [3, 0, 1]], owed
        sim.m_all = sim.m_all.copy()
        sim.m_all[changed] = upd[:, 1]
        # only the shells from the innermost changed one on are summed again; inside it
        # the potential moves by a constant (the unbound stars leave from near the centre
        # as often as not, so the saving is small in a run)
        sim.phi_all, sim.mcum_all = updated_potential(
            sim.r_all, sim.m_all, sim.phi_all, sim.mcum_all, int(changed.min()))
    return gone, ev[:, [3, 0, 1]], owed


def shells(sim: Simulation, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Radii and masses of gathered (slot, mass) rows, sorted by slot (stably: the same
    bits on any number of ranks), as :func:`physics.tidal.mutual_energy` takes them."""
    order = np.argsort(rows[:, 0], kind="stable")
    return sim.r_all[rows[order, 0].astype(np.int64)], np.ascontiguousarray(rows[order, 1])


def gather_rows(sim: Simulation, slots: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """(slot, mass) rows of every rank in global row order, shape (k, 2) (collective)."""
    mine = np.empty((slots.size, 2))
    mine[:, 0] = slots
    mine[:, 1] = mass
    return allgatherv_array(sim.comm, mine)
