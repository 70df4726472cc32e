"""The energy correction (Stodolkiewicz 1982; the paper's sec. 2.1): each star's speed is corrected
for the potential's change between its old and new radius, and what a block cannot pay (and
the binary events' debts) is carried outward to the following blocks."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import numpy as np

from cmc.processes.base import Process, StepWork
from cmc.state import StopRun
from parallel.comm import allgatherv_array, allreduce_sum
from parallel.decomposition import MIN_CHUNK, block_counts
from physics.energy import (
    TAKE_FRACTION,
    block_kinetic,
    correct_velocities,
    scale_blocks,
    settle_debts,
)
from physics.potential import potential_at_points, potential_at_sorted_radii

if TYPE_CHECKING:
    from cmc.simulation import Simulation

log = logging.getLogger("cmc.simulation")

#: From this many ranks on, the energy correction finds the new potential at its own stars' old
#: radii by bisection (O(N/P log N) per rank, 130-250 ns per own star at N = 1e5-1e6, one
#: core) instead of merging its segment of the old radii (6 ns per star of the segment) and
#: gathering all N values (8 bytes per star of all N: 0.7 ns at 12 GB/s), which is cheaper up
#: to P ~ 190-370 (bench/perf_model.py).
OLD_POTENTIAL_LOOKUP_MIN_RANKS = 256


class EnergyCorrection(Process):
    """v^2 changes by the potential's change at the star's old radius (the new potential
    there, ``phi_at_old``, from the sorted radii), block by block; deficits and debts are
    settled by :func:`take_deficit`."""

    name = "energy correction"
    timer = "energy"
    reads = "the table's old_index, dphi_old; work.r_old_all, old_bounds, event_debts"
    changes = "vr, vt"
    energy = ("E_deficit", "E_taken")

    def run(self, work: StepWork) -> None:
        sim = self.sim
        stars = sim.stars
        r_old_all, old_bounds = work.r_old_all, work.old_bounds
        deficit = np.zeros((stars.n + MIN_CHUNK - 1) // MIN_CHUNK)
        if sim.size >= OLD_POTENTIAL_LOOKUP_MIN_RANKS:  # the entries of this rank's stars
            phi_at_old = np.empty(r_old_all.shape[0])
            potential_at_points(sim.r_all, sim.phi_all, sim.mcum_all, r_old_all,
                                stars.old_index, phi_at_old)
        elif sim.size > 1:  # each rank merges its segment of the old radii, then one gather
            # (into the node's shared window with run.shared_memory)
            lo, hi = int(old_bounds[sim.rank]), int(old_bounds[sim.rank + 1])
            mine = potential_at_sorted_radii(sim.r_all, sim.phi_all, sim.mcum_all,
                                             r_old_all[lo:hi])
            phi_at_old = (allgatherv_array(sim.comm, mine, rows=np.diff(old_bounds))
                          if sim.replicas is None else
                          sim.replicas.gather(mine, r_old_all.shape[0]))
        else:  # every point gets the same interval and formula: the bits of the gathered ones
            phi_at_old = potential_at_sorted_radii(sim.r_all, sim.phi_all, sim.mcum_all,
                                                   r_old_all)
        correct_velocities(sim.r_all, sim.phi_all, sim.offset, stars.m, r_old_all, phi_at_old,
                           stars.old_index, stars.vr, stars.vt, stars.dphi_old,
                           deficit)
        d_total = float(allreduce_sum(sim.comm, np.array([deficit.sum()]))[0])
        if d_total > 0.0 or work.event_debts.shape[0]:  # (every rank holds the same debts)
            take_deficit(sim, deficit, work.event_debts)


def take_deficit(sim: Simulation, deficit: np.ndarray, event_debts: np.ndarray | None = None
                  ) -> None:
    """Pass what blocks could not pay in the energy correction, and what this step's
    binary events could not take from their own blocks, on to the next blocks.

    Per-block debts and kinetic energies are gathered in global block order; a scan over
    the blocks (the same on every rank) carries each debt outward to the following
    blocks, each paying at most :data:`physics.energy.TAKE_FRACTION` of its kinetic
    energy by a common velocity factor.  Only what is left after the last block is taken
    from all stars.  The result does not depend on the number of ranks.

    ``event_debts`` (rows ``(global block, energy)`` of every rank, in block order; the
    blocks of the step's start, before the sort, which moves stars by a few blocks at
    most) start at the same block of the sorted stars (CMC-COSMIC's
    break_wide_binaries carries its E_excess outward from where the binary broke); they
    are booked as ``E_taken``.
    """
    stars = sim.stars
    # one message: both columns, every rank's block count from the layout (the step's
    # sort left each rank its block_counts share)
    rows = (block_counts(sim.n_total, sim.size) + MIN_CHUNK - 1) // MIN_CHUNK
    both = allgatherv_array(sim.comm, np.column_stack((
        deficit, block_kinetic(stars.m, stars.vr, stars.vt, MIN_CHUNK))), rows=rows)
    debts, kes = np.ascontiguousarray(both[:, 0]), np.ascontiguousarray(both[:, 1])
    owed = np.zeros_like(debts)
    if event_debts is not None and event_debts.shape[0] and owed.size:
        at = np.minimum(event_debts[:, 0].astype(np.int64), owed.size - 1)
        np.add.at(owed, at, event_debts[:, 1])  # in row order: the same bits everywhere
        sim.state.e_taken += float(np.sum(event_debts[:, 1]))
    pay, left = settle_debts(debts + owed, kes, TAKE_FRACTION)
    first = sim.offset // MIN_CHUNK
    mine = pay[first:first + deficit.size]
    kb = kes[first:first + deficit.size]
    factor = np.ones_like(mine)
    ok = kb > 0.0
    factor[ok] = np.sqrt(1.0 - mine[ok] / kb[ok])
    if left > 0.0:
        k_tot = float(np.sum(kes)) - float(np.sum(pay))
        if k_tot <= left:
            raise StopRun("energy deficit exceeds the kinetic energy")
        factor *= math.sqrt(1.0 - left / k_tot)
    scale_blocks(stars.vr, stars.vt, factor, MIN_CHUNK)  # in place, as the correction
    sim.state.e_deficit += float(np.sum(debts))
    log.debug("energy deficit %.3e passed on (%.3e taken from all stars)",
              float(np.sum(debts)), left)

