"""Escape: objects that leave the cluster, and their energy.

:class:`UnboundRemoval` takes the objects with positive energy out before the orbits are drawn
(their shells leave the potential at once); :class:`Departures` books the objects that leave in
the orbit step (unbound in the new potential, or stripped by the tide) and hands the new orbits
of the others to the sort.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cmc.diagnostics import binding
from cmc.fields import ESCAPE_TIDAL, ESCAPE_UNBOUND
from cmc.processes.base import Process, StepWork
from cmc.replicated import shells, update_slot_masses
from physics import encounters as enc
from physics.orbits import ORBIT_ESCAPED_TIDAL, ORBIT_OK, ORBIT_REMOVED, specific_energies
from physics.sums import difference
from physics.tidal import mutual_energy

if TYPE_CHECKING:
    from cmc.simulation import Simulation


class UnboundRemoval(Process):
    """Objects with ``phi_s + v^2/2 >= 0`` leave before the orbits (:func:`remove_unbound`)."""

    name = "unbound removal"
    timer = "potential"
    reads = "radii, masses, speeds, the replicated potential; work.gidx"
    changes = "work.status (ORBIT_REMOVED), work.removed; m_all, phi_all, mcum_all"
    energy = ("E_escaped", "E_binding_escaped")
    counters = ("n_escaped_step",)

    def run(self, work: StepWork) -> None:
        sim = self.sim
        work.status = np.zeros(sim.stars.n, dtype=np.int8)
        work.removed = remove_unbound(sim, work.gidx, work.status,
                                      work.block_start[work.seg_blocks],
                                      own_slots=work.slots is None)


class Departures(Process):
    """The rows that leave in the orbit step (status not ``ORBIT_OK``): their energy, mass and
    number per segment, escaped and stripped apart, and their escaper records; the new orbits
    replace the old in the table the sort reads (the escapers are dropped by the sort)."""

    name = "departures"
    timer = "orbits"
    reads = "work.status, r_new, vr_new, vt_new, phi_oo, phi_on, removed"
    changes = "work.esc_parts, keep_rows; the table's r, vr, vt, old_index, dphi_old"
    energy = ("E_escaped", "E_binding_escaped", "E_stripped")
    counters = ("n_escaped_step", "n_stripped_step")
    wait_after = True

    def run(self, work: StepWork) -> None:
        sim = self.sim
        stars = sim.stars
        n = stars.n
        status, gidx, pre = work.status, work.gidx, work.removed
        esc = status != ORBIT_OK  # every row the sort drops
        # the rows leaving now (few; the removed ones were booked before the orbits):
        # m (phi + v^2/2), tidal ones apart from the others
        leaving = esc & (status != ORBIT_REMOVED)
        leave = np.flatnonzero(leaving)
        m_leave = stars.m[leave]
        e_spec_leave = work.phi_oo[leave] + 0.5 * (stars.vr[leave] ** 2 + stars.vt[leave] ** 2)
        e_leave = m_leave * e_spec_leave
        strip = status[leave] == ORBIT_ESCAPED_TIDAL
        if leave.size:
            sim.escapers.note(stars.take(leave).as_dict(), sim.r_all[gidx[leave]],
                              e_spec_leave, np.where(strip, ESCAPE_TIDAL, ESCAPE_UNBOUND))
        # per segment (rank): (e, m, n, binding) of the escapers, (e, m, n) of the stripped
        row_bounds = work.block_start[work.seg_blocks]
        cut = np.searchsorted(leave, row_bounds)
        esc_parts = np.zeros((row_bounds.size - 1, 7))
        for j in range(row_bounds.size - 1):
            e_j, m_j, tid = e_leave[cut[j]:cut[j + 1]], m_leave[cut[j]:cut[j + 1]], \
                strip[cut[j]:cut[j + 1]]
            eb_esc = 0.0
            if e_j.size:
                mine = np.zeros(n, dtype=bool)
                mine[row_bounds[j]:row_bounds[j + 1]] = True
                eb_esc = binding(stars, leaving & mine)
            esc_parts[j] = (float(np.sum(e_j[~tid])) + pre[j, 0],
                            float(np.sum(m_j[~tid])) + pre[j, 1],
                            np.count_nonzero(~tid) + pre[j, 2], eb_esc + pre[j, 3],
                            float(np.sum(e_j[tid])), float(np.sum(m_j[tid])),
                            np.count_nonzero(tid))
        work.esc_parts = esc_parts
        stars.old_index = gidx
        # the correction reads only the difference: one field travels through the sort
        # instead of two (the same bits: it computed phi_on - phi_oo first)
        dphi = np.empty(n)
        difference(work.phi_on, work.phi_oo, dphi)
        stars.dphi_old = dphi
        stars.r = work.r_new
        stars.vr = work.vr_new
        stars.vt = work.vt_new
        # the escapers are dropped by the sort (it reads every field once anyway)
        work.keep_rows = np.flatnonzero(~esc) if esc.any() else None


def remove_unbound(sim: Simulation, gidx: np.ndarray, status: np.ndarray,
                    row_bounds: np.ndarray, own_slots: bool = False) -> np.ndarray:
    """Remove the objects with ``phi_s + v^2/2 >= 0`` before the orbits are drawn.

    Each takes ``m (phi_s + v^2/2)`` (``phi_s`` the potential of all other shells at its
    slot) and a binary its internal energy; the slots they free lose their mass in the
    replicated arrays before the orbit kernel runs, so the removal of a star that leaves
    from a core of a few stars is exact instead of going through the energy correction's
    average of the potential change (which lost up to 1.6e-3 of E0 for one escaper in deep
    collapse).  Escapers beyond the tidal radius still leave in the orbit step.

    Their rows are not copied out of the table (a copy of every field, 0.02-0.03 us per
    star in a step with escapers): ``status`` gets ``ORBIT_REMOVED`` there, the orbit
    kernel skips them and the sort drops them.

    When several leave in the same step, each one's ``phi_s`` holds the others' shells, so
    the sum of ``m (phi_s + v^2/2)`` counts their mutual energy twice while the potential
    energy loses it once: the set's mutual energy (all ranks' objects, gathered with the
    slot masses) is taken off once, on rank 0.  Two stars leaving together from a core of
    a few dozen lost up to 2.8e-3 of E0 without it.

    Returns (energy, mass, number, binding energy) of the objects removed from the rows of
    each segment (``row_bounds``, :meth:`Simulation.block_segments` in rows), shape (S, 4).
    ``own_slots``: every row is its own slot (``gidx`` is ``offset + row``, no strong
    encounters this step), so a removed row's slot is left empty.
    """
    s = sim.stars
    e_spec = specific_energies(sim.r_all, sim.phi_all, gidx, s.m, s.vr, s.vt)
    # the few rows by index (a mask would cost a pass over all rows per use)
    rows = np.flatnonzero(e_spec >= 0.0)
    out = np.zeros((row_bounds.size - 1, 4))
    slots = np.zeros(0, dtype=np.int64)
    mass = np.zeros(0)
    if rows.size:
        cut = np.searchsorted(rows, row_bounds)
        for j in range(row_bounds.size - 1):
            mine = rows[cut[j]:cut[j + 1]]
            if mine.size:
                sel = np.zeros(s.n, dtype=bool)
                sel[mine] = True
                out[j] = (float(np.sum(s.m[mine] * e_spec[mine])),
                          float(np.sum(s.m[mine])), mine.size, binding(s, sel))
        sim.escapers.note(s.take(rows).as_dict(), sim.r_all[gidx[rows]],
                            e_spec[rows], ESCAPE_UNBOUND)
        status[rows] = ORBIT_REMOVED
        slots = np.unique(gidx[rows])
        if own_slots:  # nothing else at a removed row's slot
            mass = np.zeros(slots.size)
        else:  # the mass left at each freed slot: the other rows there (products share)
            unbound = np.zeros(s.n, dtype=bool)
            unbound[rows] = True
            mass = enc.slot_masses(slots, gidx, s.m, skip=unbound)
    gone, _, _ = update_slot_masses(sim, slots, mass, gidx[rows], s.m[rows])
    if gone.shape[0] > 1 and sim.rank == 0:
        out[0, 0] -= float(mutual_energy(*shells(sim, gone)))
    return out

