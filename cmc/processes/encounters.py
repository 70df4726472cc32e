"""The step's binary processes (Fregeau & Rasio 2007): strong binary-single and
binary-binary encounters through the few-body integrator, three-body binary formation and the
breaking of wide binaries, as selected by :class:`cmc.processes.relaxation.Relaxation`; then
the products' masses into the potential the orbits are drawn in."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cmc.fields import ESCAPE_EJECTED, FIELD_BY_NAME
from cmc.processes.base import Process, StepWork
from cmc.replicated import update_slot_masses
from cmc.stars import StarTable
from physics import encounters as enc
from physics.fewbody import EncounterSettings

if TYPE_CHECKING:
    from cmc.simulation import Simulation


class BinaryEvents(Process):
    """The selected events of every block, applied in block order (:func:`enc.apply_events`):
    the products replace the objects in the table, ejected products leave at once, and what a
    block's stars cannot pay becomes its debt (paid after the sort)."""

    name = "binary events"
    timer = "encounters"
    reads = "work.selection; the stars and binaries; the replicated potential"
    changes = ("the star table (products), work.gidx, block_start, slots, slot_mass, changes, "
               "debts, counts")
    draws = ("block sub-stream, after relaxation's: per event in block order, an encounter's "
             "10 uniforms (its initial state and the spin of its frame) or a three-body "
             "formation's 7 (two azimuths, hardness, e, direction); a collision of two single "
             "stars none, two single black holes with binaries.bh_capture one (the impact "
             "parameter); an encounter with two or more black holes and binaries.pn25 3 more "
             "after its 10 (the recoil angles of black-hole mergers)")
    energy = ("E_encounters", "E_three_body", "E_taken", "E_oops", "E_slots", "E_ejected",
              "E_mergers", "E_integrator", "E_gw_capture", "E_gw_encounters")
    counters = ("n_binary_single", "n_binary_binary", "n_three_body", "n_exchanges",
                "n_ionisations", "n_mergers", "n_triples", "n_wide_broken",
                "n_encounters_discarded", "n_ejected", "n_collisions", "n_bh_captures",
                "n_gw_mergers")
    wait_after = True

    def run(self, work: StepWork) -> None:
        sim = self.sim
        if work.selection is None:
            return
        stars = sim.stars
        ejected: list = []
        fields, work.gidx, work.block_start, work.counts, work.slots, work.slot_mass, \
            work.changes = enc.apply_events(
                stars.as_dict(), sim.offset, sim.r_all, sim.phi_all, work.states,
                *work.selection, sim.phys, lambda states, settings: integrate_encounters(
                    sim, states, settings), ejected=ejected, block_segments=work.seg_blocks,
                debts=work.debts)
        if ejected:
            ej_rows = {k: np.array([rec[k] for rec, _, _ in ejected],
                                   dtype=FIELD_BY_NAME[k].dtype) for k in stars.as_dict()}
            sim.escapers.note(ej_rows, np.array([x for _, x, _ in ejected]),
                              np.array([e for _, _, e in ejected]), ESCAPE_EJECTED)
        if fields is not stars.as_dict():
            sim.stars = StarTable(fields)


class ProductMasses(Process):
    """The products' masses into the replicated arrays of every rank (one Allgatherv that
    also carries the blocks' debts), and the potential recomputed from the innermost change."""

    name = "product masses"
    timer = "potential"
    reads = "work.slots, slot_mass, changes, debts"
    changes = "m_all, phi_all, mcum_all; work.event_debts (every rank's)"
    energy = ("E_oops",)

    def run(self, work: StepWork) -> None:
        sim = self.sim
        if work.slots is None:
            return
        # the energy the events' blocks could not give travels along, paid after the sort
        _, changes_all, work.event_debts = update_slot_masses(
            sim, work.slots, work.slot_mass, changes=work.changes,
            debts=np.array(work.debts).reshape(-1, 2))
        # the pair energy between different events' shell changes: W has it, no event
        # paid it (each booked its own against the old potential); every rank adds the
        # same number
        sim.state.e_oops += enc.cross_event_energy(changes_all, sim.r_all)


def integrate_encounters(sim: Simulation, states: list, settings: EncounterSettings) -> list:
    """This step's encounters of all ranks, dealt round-robin over the ranks (collective).

    Encounters happen where the binaries meet, in the centre, which rank 0 holds: each
    rank integrates every P-th of all ranks' encounters (each on its threads), and the
    outcomes go back to their owners.  An outcome is a function of its initial state only,
    so the result does not depend on who integrates it.
    """
    if sim.size == 1:
        return enc.integrate_concurrently(states, settings)
    everyone = sim.comm.allgather(states)
    flat = [s for part in everyone for s in part]
    mine = enc.integrate_concurrently(flat[sim.rank::sim.size], settings)
    for out in mine:
        if out is not None:
            out.initial = None  # the owner has it
    done = sim.comm.allgather(mine)
    first = sum(len(part) for part in everyone[:sim.rank])
    outs = []
    for j in range(first, first + len(states)):
        out = done[j % sim.size][j // sim.size]
        if out is not None:
            out.initial = flat[j]
        outs.append(out)
    return outs

