"""Tidal stripping (CMC's iteration): the objects whose apocentre lies beyond
the tidal radius leave, and with a shrinking tidal radius the cut is repeated until none is."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cmc.processes.base import Process, StepWork
from cmc.replicated import gather_rows, shells
from physics.orbits import ORBIT_ESCAPED_TIDAL, ORBIT_OK, ORBIT_REMOVED
from physics.tidal import mutual_energy, shell_potential, tidal_radius

if TYPE_CHECKING:
    from cmc.simulation import Simulation


class TidalStripping(Process):
    """The tidal cut after the orbit kernel's (:func:`strip`); in isolated runs the shells of
    the rows the kernel found unbound leave the others' energy correction the same way."""

    name = "tidal stripping"
    timer = "orbits"
    reads = "work.status, r_apo; masses; the tidal radius"
    changes = ("work.status, r_new, vr_new, vt_new, phi_oo, phi_on, w_mutual, dm_tidal; "
               "state.r_tidal")
    energy = ("E_stripped",)
    counters = ("n_stripped_step",)

    def run(self, work: StepWork) -> None:
        # also in isolated runs: a star the removals above left unbound leaves in the kernel,
        # and the others' energy correction must see its shell gone (collective)
        work.w_mutual, work.dm_tidal = strip(self.sim, work.gidx, work.r_apo, work.status,
                                             work.r_new, work.vr_new, work.vt_new,
                                             work.phi_oo, work.phi_on)


def strip(sim: Simulation, gidx: np.ndarray, r_apo: np.ndarray, status: np.ndarray,
           r_new: np.ndarray, vr_new: np.ndarray, vt_new: np.ndarray, phi_oo: np.ndarray,
           phi_on: np.ndarray) -> tuple[float, float]:
    """Tidal stripping of the step (collective), after the orbit kernel cut at R_t.

    With a shrinking tidal radius the stars cut so far lower the mass, hence R_t; rows
    whose apocentre (``r_apo``, old potential) lies beyond the new R_t are stripped too,
    and so on until none is (CMC's iteration).  Stripped rows get ``ORBIT_ESCAPED_TIDAL``
    and their old radius and velocities back.  The leaving rows' (slot, mass) of all ranks
    are gathered in global row order, so the mass, R_t and the set stripped are the same
    bits on any number of ranks and in the serial emulation.

    Isolated runs come here too, for the stars the kernel finds unbound (the pre-orbit
    removal of unbound objects made the potential shallower): the others' correction is
    made to see their shells gone, as for stripped stars.  Without it such a star's removal
    went through the energy correction's average and lost up to 1.8e-4 of E0 at once
    (Salpeter N = 5000 model).

    Sets ``state.r_tidal``.  Returns the mutual energy of all the rows that leave (the
    double count in their ``m (phi + v^2/2)``) and the mass that left in the kernel and by
    stripping (0 when isolated: it only shortens the tidal step).
    """
    st = sim.state
    m = sim.stars.m
    leaving = (status != ORBIT_OK) & (status != ORBIT_REMOVED)  # removed: already gone
    parts = [gather_rows(sim, gidx[leaving], m[leaving])]
    r_t = st.r_tidal
    if sim.cfg.tidal.mode == "shrinking":
        m_slots = float(sim.mcum_all[-1])
        while True:
            left = np.concatenate(parts)
            r_t = tidal_radius(st.r_t0, m_slots - float(np.sum(left[:, 1])), st.m0)
            new = (status == ORBIT_OK) & (r_apo > r_t)
            got = gather_rows(sim, gidx[new], m[new])
            if got.shape[0] == 0:
                break
            status[new] = ORBIT_ESCAPED_TIDAL
            r_new[new] = sim.r_all[gidx[new]]
            vr_new[new] = sim.stars.vr[new]
            vt_new[new] = sim.stars.vt[new]
            phi_on[new] = phi_oo[new]
            parts.append(got)
        st.r_tidal = r_t
    left = np.concatenate(parts)
    dm_tidal = float(np.sum(left[:, 1])) if sim.cfg.tidal.mode != "isolated" else 0.0
    if left.shape[0] == 0:
        return 0.0, dm_tidal
    r_s, m_s = shells(sim, left)
    # the others' orbits were drawn in a potential that held the leaving stars: the
    # energy correction is made to see them leave at the start of the step (as unbound
    # stars do).  With phi_S their field, v_new^2 = v_old^2 + (U_oo - U_on) - (phi_S(r_o)
    # - phi_S(r_n)) + (U_no - U_nn); the correction reads phi_on - phi_oo, so both get
    # phi_S added.  Otherwise the stars that stay keep half of the kinetic energy they
    # gained or lost in the leaving stars' field, which the budget no longer holds.
    ok = status == ORBIT_OK
    phi_oo[ok] += shell_potential(r_s, m_s, sim.r_all[gidx[ok]])
    phi_on[ok] += shell_potential(r_s, m_s, r_new[ok])
    return float(mutual_energy(r_s, m_s)), dm_tidal

