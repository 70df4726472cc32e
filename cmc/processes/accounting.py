"""The step's books: every sum of the step in one packed reduction, the run's energy columns
and counters advanced, the escaper records gathered, and the step's diagnostics row."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from cmc.diagnostics import (
    DT_TCROSS_WARN,
    EVENT_COUNTS,
    SE_COUNTS,
    SE_SUMS,
    STRUCTURE_SUMS,
    binary_sums,
    central_v2_sums,
    diagnostics_row,
    kinetic_sums,
    structure_sums,
)
from cmc.processes.base import Process, StepWork
from cmc.processes.zones import zone_columns
from parallel.comm import ranked_sum
from physics import encounters as enc

if TYPE_CHECKING:
    from cmc.simulation import Simulation

log = logging.getLogger("cmc.simulation")


class Accounting(Process):
    """One packed reduction for everything summed (each rank's partial sums, added in rank
    order: an emulation's are its emulated ranks', so that its diagnostics are the P-rank
    run's bits); the energy columns of every process of the step are booked here, from the
    reduced sums, in one place."""

    name = "accounting"
    timer = "diagnostics"
    reads = ("work.esc_parts, counts, counters, beta_stats, p_stats, se_parts, w_mutual, "
             "dm_tidal, dt")
    changes = "the run state's energy columns, counters, time and step; the diagnostics row"
    energy = ("E_escaped", "E_binding_escaped", "E_stripped", "E_encounters", "E_three_body",
              "E_taken", "E_oops", "E_slots", "E_ejected", "E_mergers", "E_integrator",
              "E_se_mass", "E_se_kicks", "E_se_binding", "E_gw_capture", "E_gw_encounters")

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        #: pairs with P >= 1 since the last warning; warned once about P >= 1, and about dt
        #: below the central crossing time
        self._n_p1 = 0
        self._p1_warned = False
        self._tcross_warned = False

    def run(self, work: StepWork) -> None:
        sim = self.sim
        st = sim.state
        seg_blocks, esc_parts = work.seg_blocks, work.esc_parts
        counters, beta_stats, p_stats = work.counters, work.beta_stats, work.p_stats

        def block_sums_of(col: np.ndarray) -> np.ndarray:
            return np.array([float(col[a:b].sum())
                             for a, b in zip(seg_blocks[:-1], seg_blocks[1:], strict=True)])

        red = ranked_sum(sim.comm, np.column_stack((
            kinetic_sums(sim), esc_parts[:, :3], block_sums_of(counters[:, 0]),
            block_sums_of(counters[:, 1]), block_sums_of(beta_stats[:, 0]),
            block_sums_of(beta_stats[:, 1]), esc_parts[:, 3], binary_sums(sim), work.counts,
            block_sums_of(p_stats[:, 0]), block_sums_of(p_stats[:, 1]), esc_parts[:, 4:],
            central_v2_sums(sim), structure_sums(sim), work.se_parts)))
        red, se_sums = red[:-len(SE_SUMS)], red[-len(SE_SUMS):]
        red, structure = red[:-STRUCTURE_SUMS], red[-STRUCTURE_SUMS:]
        red, (e_strip, m_strip, n_strip, central_v2) = red[:-4], red[-4:]
        # the set leaving in the orbit step: its mutual energy was counted twice in the
        # stars' m (phi + v^2/2) (every rank holds the same w_mutual); isolated, they are all
        # unbound escapers
        if sim.cfg.tidal.mode == "isolated":
            st.e_escaped -= work.w_mutual
            st.e_stripped += e_strip
        else:
            st.e_stripped += e_strip - work.w_mutual
        st.m_stripped += m_strip
        st.n_stripped += int(round(n_strip))
        st.dm_tidal_prev = work.dm_tidal
        st.e_escaped += red[1]
        st.e_bind_escaped += red[8]
        ev = dict(zip(enc.COUNT_NAMES, red[11:11 + len(enc.COUNT_NAMES)], strict=True))
        st.e_encounters += ev["e_encounters"]
        st.e_three_body += ev["e_three_body"]
        st.e_taken += ev["e_taken"]
        st.e_oops += ev["e_oops"]
        st.e_slots += ev["e_slots"]
        # objects ejected by binary processes left before the orbits: they are escapers
        st.e_escaped += ev["e_ejected"]
        st.e_bind_escaped += ev["e_bind_ejected"]
        st.m_escaped += ev["m_ejected"]
        st.n_escaped += int(round(ev["n_ejected"]))
        st.e_ejected += ev["e_ejected"] + ev["e_bind_ejected"]
        st.e_mergers += ev["e_mergers"]
        st.e_integrator += ev["e_integrator"]
        st.e_gw_capture += ev["e_gw_capture"]
        st.e_gw_encounters += ev["e_gw_encounters"]
        st.m_gw += ev["m_gw"]
        n_p1 = red[-1]
        self._n_p1 += int(n_p1)
        if self._n_p1 and (not self._p1_warned
                           or (st.step + 1) % sim.cfg.output.progress_every == 0):
            # the first time, then summed over progress intervals (CMC warns at every pair)
            log.warning("%d pair(s) with a strong-encounter probability >= 1 (by step %d; the "
                        "binary time step may be too long)", self._n_p1, st.step + 1)
            self._n_p1 = 0
            self._p1_warned = True
        se_step = dict(zip(SE_SUMS, se_sums, strict=True))
        st.e_se_mass += se_step["e_se_kinetic"]  # W's change was booked by the process
        st.e_se_kicks += se_step["e_se_kicks"]
        st.e_se_binding += se_step["e_se_binding"]
        st.m_se += se_step["m_se"]
        st.dm_se_prev = se_step["m_se"]
        st.m_escaped += red[2]
        st.n_escaped += int(round(red[3]))
        st.time += work.dt
        st.dt_prev = work.dt
        st.step += 1
        # every rank knows the step's escapers from the reduction: gather only when some left
        sim.escapers.gather(int(round(red[3] + n_strip + ev["n_ejected"])))
        zones = sim.cfg.run.zones
        stepped = work.n_stepped if zones > 1 else sim.n_total  # (before this step's sort)
        extra = {"dt": work.dt, "trials_per_star": red[4] / max(stepped, 1),
                 "bound_violations": red[5],
                 "beta_mean": red[6] / max(stepped // 2, 1), "beta_capped": red[7],
                 "n_escaped_step": red[3], "n_stripped_step": n_strip,
                 "T_bs": work.t_bs, "T_bb": work.t_bb,
                 "n_binary_pairs": red[-2], "n_p_over_1": n_p1,
                 **{k: ev[k] for k in EVENT_COUNTS}}
        if sim.stars.has_se_fields:
            extra.update({k: se_step[k] for k in SE_COUNTS})
        if zones > 1:
            extra.update(zone_columns(work, zones))
        if sim.phys.ss_collision:
            extra["n_collisions"] = ev["n_collisions"]
        if sim.phys.bh_capture:
            extra["n_bh_captures"] = ev["n_bh_captures"]
        if sim.phys.pn25:
            extra["n_gw_mergers"] = ev["n_gw_mergers"]
        d = diagnostics_row(sim, record=True, extra=extra, kinetic=float(red[0]),
                            binaries=(float(red[9]), float(red[10])),
                            central_v2=float(central_v2), structure=structure)
        if 0.0 < d["dt_tcross"] < DT_TCROSS_WARN and not self._tcross_warned:
            self._tcross_warned = True
            self._warn_short_step(d, work)
        work.row = d

    def _warn_short_step(self, d: dict, work: StepWork) -> None:
        """The step is below :data:`DT_TCROSS_WARN` of the central crossing time (once)."""
        step = self.sim.state.step
        if work.binary_limited:  # not heavy stars: the binaries' encounter time scale
            log.warning("step %d: the time step is %.2g of the central crossing time "
                        "(column dt_tcross), set by the binaries' time scales (at most "
                        "binaries.dt_fraction_bs of T_bs = %.3g and dt_fraction_bb of "
                        "T_bb = %.3g t_NB, as CMC): wide (soft) binaries in the core have "
                        "large cross-sections and make them short (primordial binaries "
                        "reach initial.binary_a_max hard/soft boundaries).  The orbit step "
                        "then redraws the central stars' radii several times per orbit "
                        "(docs/method.md, 'Few stars carrying the central mass')",
                        step, d["dt_tcross"], work.t_bs, work.t_bb)
        else:
            log.warning("step %d: the time step is %.2g of the central crossing time "
                        "(column dt_tcross): a few stars carry the central mass (heavy "
                        "stars of a mass spectrum at small N, or a core of few stars), and "
                        "the orbit step redraws their radii several times per orbit.  The "
                        "potential jumps this causes heat and unbind light stars per step, "
                        "not per unit time (E_deficit, unbound escapers); results at this N "
                        "and mass range are not converged (docs/method.md, 'Few stars "
                        "carrying the central mass')", step, d["dt_tcross"])
