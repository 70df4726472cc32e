"""The shared time step (the paper's sec. 2.1 and 3.1): the smallest relaxation time of the
radial windows, the binaries' encounter time scales, the growth limit and the tidal mass-loss
limit."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from cmc.diagnostics import CENTRAL_STARS, central_means, structure_sums
from cmc.processes.base import Process, StepWork
from cmc.processes.zones import plan_zones
from cmc.state import StopRun
from parallel.comm import allgatherv_array, ranked_sum
from parallel.decomposition import MIN_CHUNK, rank_bounds
from physics import encounters as enc
from physics.binaries import (
    binary_binary_timescale,
    binary_single_timescale,
    collision_timescale,
)
from physics.relaxation import (
    block_moments,
    window_boundary_counts,
    window_boundary_rows,
    window_min_inside,
    window_min_straddling,
    window_relaxation_times,
)
from physics.tidal import tidal_mass_loss_timestep

if TYPE_CHECKING:
    from cmc.simulation import Simulation


class TimeStep(Process):
    """dt = (2 theta_max / pi)^2 min T_rel over ``run.dt_window``-star windows, at most
    ``binaries.dt_fraction_bs`` T_bs and ``dt_fraction_bb`` T_bb (paper eqs 9-10) and, with
    collisions, ``dt_fraction_coll`` T_coll (CMC's), at most
    ``run.dt_growth_max`` times the last, and short enough for the tidal mass loss
    (``tidal.dm_fraction_max``) and for stellar evolution's (``bse.dt_mass_fraction``)."""

    name = "time step"
    timer = "timestep"
    reads = ("radii, masses, speeds; the central binaries; the last step's dt, stripped mass "
             "and mass taken by stellar evolution")
    changes = ("work.dt, coulomb_ratio, t_bs, t_bb, binary_limited; with run.zones > 1 the "
               "zones (work.zone_rows, zone_bounds, zone_level, due, n_stepped, dt_ratio), the "
               "stars' zone (cut to the cap) and the relaxed rows' t_last")
    draws = ""

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        #: ((N, window width in blocks), every rank's row count of the time step's gather)
        self._window_rows: tuple = (None, None)
        #: the last window_min's (moments, first block, blocks in all, gathered boundary rows
        #: or None): what the zones' plan reads
        self._scan: tuple = ()

    def run(self, work: StepWork) -> None:
        sim = self.sim
        cfg = sim.cfg.run
        st = sim.state
        if cfg.coulomb_n == "current":
            lnl = math.log(st.gamma * sim.n_total) if st.gamma * sim.n_total > 1 else 1e-300
            coulomb_ratio = max(lnl, 1e-300) / st.lnl0
        else:  # ln(gamma N0) throughout, as CMC
            coulomb_ratio = 1.0
        tmin = self.window_min(coulomb_ratio)
        dt = (2.0 * cfg.theta_max / math.pi) ** 2 * tmin
        t_bs = t_bb = math.inf
        centre_fixed = False  # binaries or collisions of the central objects limit the step
        binary_limited = False  # the binary time scales, not relaxation, set the step
        if sim.stars.has_binary_fields:
            t_bs, t_bb = self.binary_timescales()
            to_rel = st.lnl0 / st.n0  # N-body time -> relaxation units
            b = sim.cfg.binaries
            dt_bin = min(b.dt_fraction_bs * t_bs * to_rel, b.dt_fraction_bb * t_bb * to_rel)
            binary_limited = dt_bin < dt
            centre_fixed = binary_limited
            dt = min(dt, dt_bin)
        if sim.phys.ss_collision and sim.phys.radius_unit > 0.0:
            # CMC's collision limit: 0.005 of the central single stars' collision time
            t_coll = self.collision_timescale()
            dt_coll = sim.cfg.binaries.dt_fraction_coll * t_coll * st.lnl0 / st.n0
            centre_fixed = centre_fixed or dt_coll < dt
            dt = min(dt, dt_coll)
        if st.dt_prev > 0.0:
            dt = min(dt, cfg.dt_growth_max * st.dt_prev)
        dt = tidal_mass_loss_timestep(dt, st.dt_prev, st.dm_tidal_prev, st.m0,
                                      sim.cfg.tidal.dm_fraction_max)
        if sim.stars.has_se_fields:
            dt = stellar_mass_loss_timestep(dt, st.dt_prev, st.dm_se_prev,
                                            float(sim.mcum_all[-1]),
                                            sim.cfg.bse.dt_mass_fraction)
        if not math.isfinite(dt) or dt <= 0.0:
            raise StopRun("time step is not finite (too few stars?)")
        work.dt, work.coulomb_ratio = dt, coulomb_ratio
        work.t_bs, work.t_bb, work.binary_limited = t_bs, t_bb, binary_limited
        if cfg.zones > 1:
            plan_zones(sim, work, self._scan, centre_fixed)

    def window_min(self, coulomb_ratio: float) -> float:
        """The smallest relaxation time of the time-step windows (``run.dt_window`` stars),
        the same bits on every rank and in the serial emulation (collective).

        The windows are fixed in the global block order.  Under MPI each rank evaluates those
        in its own blocks and sends their minimum with the moments of its blocks in windows
        that straddle a rank boundary (:func:`physics.relaxation.window_boundary_rows`), so
        one gather of O(P) rows replaces gathering every block's moments (1.6 bytes per star)
        and every rank evaluating all N/20 windows.  Each window gets the same operations as
        in :func:`physics.relaxation.window_relaxation_times` and a minimum is exact.
        """
        sim = self.sim
        stars = sim.stars
        n0 = float(sim.state.n0)
        width = sim.cfg.run.dt_window // MIN_CHUNK
        moments = block_moments(stars.m, stars.vr, stars.vt, n0)
        if sim.size == 1:
            self._scan = (moments, 0, moments.shape[0], None)
            tb = window_relaxation_times(sim.r_all, moments, n0, coulomb_ratio, width)
            return float(tb.min()) if tb.size else np.inf
        block0 = sim.offset // MIN_CHUNK
        nb_total = (sim.n_total + MIN_CHUNK - 1) // MIN_CHUNK
        inside = window_min_inside(sim.r_all, moments, block0, nb_total, n0, coulomb_ratio,
                                   width)
        rows = np.vstack((np.array([[-1.0, inside, 0.0, 0.0, 0.0]]),
                          window_boundary_rows(moments, block0, nb_total, width)))
        # every rank's row count follows from the layout: one message, no sizes exchanged
        # (the counts kept while N stays: computing them costs what the message did)
        if self._window_rows[0] != (sim.n_total, width):
            starts = rank_bounds(sim.n_total, sim.size)
            blocks = (np.diff(starts) + MIN_CHUNK - 1) // MIN_CHUNK
            self._window_rows = ((sim.n_total, width), 1 + window_boundary_counts(
                starts[:-1] // MIN_CHUNK, blocks, nb_total, width))
        rows = allgatherv_array(sim.comm, rows, rows=self._window_rows[1])
        mins = rows[rows[:, 0] < 0.0, 1]
        edge = np.ascontiguousarray(rows[rows[:, 0] >= 0.0])
        self._scan = (moments, block0, nb_total, edge)
        return float(np.min(np.append(mins, window_min_straddling(
            sim.r_all, edge, n0, coulomb_ratio, width))))

    def binary_timescales(self) -> tuple[float, float]:
        """T_bs and T_bb (paper eqs 10 and 9, N-body time), as CMC-COSMIC's get_Tbs and
        get_Tbb compute them (collective).

        The densities and ``<a>``, ``<a^2>``, ``<M a>`` are those of the central 300 objects;
        T_bs's dispersion and mean mass are the density-weighted ``v_rms / sqrt(3)`` and
        ``<m>`` of the objects inside r_h (CMC's central.v_rms and central.m_ave, the sums of
        the last diagnostics: the stars have not moved since), T_bb's dispersion the rms
        speed of the central binaries over sqrt(3) (its central.v_bin_rms).  Per-block sums
        of the central blocks are gathered in block order and added in that order, so every
        rank (and the serial emulation) gets the same bits.
        """
        sim = self.sim
        n_central_blocks = (CENTRAL_STARS + MIN_CHUNK - 1) // MIN_CHUNK
        first_block = sim.offset // MIN_CHUNK
        s = sim.stars
        local = enc.central_block_sums(s.m, s.vr, s.vt, s.binind >= 0, s.bin_a,
                                       max(0, min(n_central_blocks - first_block,
                                                  (s.n + MIN_CHUNK - 1) // MIN_CHUNK)))
        sums = allgatherv_array(sim.comm, local)
        tot = np.zeros(sums.shape[1]) if sums.size else np.zeros(8)
        for row in sums:  # block order, whatever the ranks
            tot += row
        n_s, n_b, _, a_sum, a2_sum, mb_sum, ma_sum, v2_bin = tot
        if sim.central_means is None:  # (first step, or after a restart) the same sums as
            # the diagnostics make, so the same bits
            sim.central_means = central_means(ranked_sum(sim.comm, structure_sums(sim)))
        n_c = int(n_s + n_b)
        if n_b == 0 or n_c < 2:
            return math.inf, math.inf
        vol = 4.0 / 3.0 * math.pi * float(sim.r_all[n_c - 1]) ** 3
        m_ave, v2_ave = sim.central_means
        b = sim.cfg.binaries
        t_bs = binary_single_timescale(n_s / vol, math.sqrt(v2_ave / 3.0), a_sum / n_b,
                                       a2_sum / n_b, m_ave, b.x_bs)
        t_bb = binary_binary_timescale(n_b / vol, math.sqrt(v2_bin / (3.0 * n_b)),
                                       a2_sum / n_b, ma_sum / n_b, b.x_bb)
        return t_bs, t_bb


    def collision_timescale(self) -> float:
        """T_coll of the single stars among the central 300 objects (N-body time), as
        CMC-COSMIC's: their number density in the sphere of the central objects, v_rms /
        sqrt(3), <R^2> and <m R> of their radii R (collective; per-block sums gathered and
        added in block order: the same bits on every rank and in the serial emulation)."""
        sim = self.sim
        s = sim.stars
        n_central_blocks = (CENTRAL_STARS + MIN_CHUNK - 1) // MIN_CHUNK
        nb = max(0, min(n_central_blocks - sim.offset // MIN_CHUNK,
                        (s.n + MIN_CHUNK - 1) // MIN_CHUNK))
        rows = min(s.n, nb * MIN_CHUNK)
        single = s.binind[:rows] < 0
        rad = s.rad[:rows] * sim.phys.radius_unit
        m = s.m[:rows]
        v2 = s.vr[:rows] ** 2 + s.vt[:rows] ** 2
        local = np.zeros((nb, 5))
        if nb:
            starts = np.arange(nb) * MIN_CHUNK
            local[:, 0] = np.add.reduceat(single.astype(np.float64), starts)
            local[:, 1] = np.add.reduceat(np.ones(rows), starts)
            local[:, 2] = np.add.reduceat(np.where(single, v2, 0.0), starts)
            local[:, 3] = np.add.reduceat(np.where(single, rad * rad, 0.0), starts)
            local[:, 4] = np.add.reduceat(np.where(single, m * rad, 0.0), starts)
        sums = allgatherv_array(sim.comm, local)
        tot = np.zeros(5)
        for row in sums:  # block order, whatever the ranks
            tot += row
        n_s, n_c, v2_sum, r2_sum, mr_sum = tot
        if n_s < 1 or n_c < 2:
            return math.inf
        vol = 4.0 / 3.0 * math.pi * float(sim.r_all[int(n_c) - 1]) ** 3
        return collision_timescale(n_s / vol, math.sqrt(v2_sum / (3.0 * n_s)), r2_sum / n_s,
                                   mr_sum / n_s, sim.cfg.binaries.coll_factor)


def stellar_mass_loss_timestep(dt: float, dt_prev: float, dm_prev: float, m_total: float,
                               fraction: float) -> float:
    """CMC's stellar-evolution limit (``DMse``, cmc_evolution_thr.c): the step is at most
    ``fraction M dt_prev / dm_prev``, so that stellar evolution takes at most about
    ``fraction`` of the cluster mass ``M`` per step at the last step's rate (``dm_prev`` taken
    in ``dt_prev``).  CMC-COSMIC's factor is 0.1 x 0.01 = 1e-3; it resets DMse before it is
    read (cmc.c), so there the limit never acts; here it does.  Off for ``fraction = 0``, in
    the first step and when nothing was lost.
    """
    if fraction <= 0.0 or dt_prev <= 0.0 or dm_prev <= 0.0:
        return dt
    return min(dt, fraction * m_total * dt_prev / dm_prev)
