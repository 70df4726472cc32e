"""Two-body relaxation of radial-neighbour pairs (the paper's sec. 2.1), and with binaries the
selection of the step's binary processes: strong binary-single and binary-binary encounters
(the pair's encounter probability, paper eq 8), three-body binary formation and wide binaries
to break."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cmc.processes.base import Process, StepWork
from physics import encounters as enc
from physics.relaxation import relax_or_select_pairs, relax_pairs

if TYPE_CHECKING:
    from cmc.simulation import Simulation


class Relaxation(Process):
    """Each pair of radial neighbours (2k, 2k+1) of a block is deflected by the angle of the
    step's relaxation (or, with binaries, meets in a strong encounter with the probability of
    eq 8, and is then left to :class:`cmc.processes.encounters.BinaryEvents`)."""

    name = "relaxation"
    timer = "relaxation"
    reads = "radii, masses, speeds, binaries' a; work.dt, coulomb_ratio"
    changes = "vr, vt of relaxed pairs; work.selection (encounters, three-body, wide binaries)"
    draws = ("block sub-stream: per pair (2k, 2k+1) in row order, the angles phi and psi, "
             "and with a binary in the pair (or, with binaries.ss_collision, two single stars "
             "with radii, or with binaries.bh_capture two single black holes) one uniform for "
             "the encounter test (P, eq 8); then per eligible triplet one uniform for "
             "three-body formation (with run.zones > 1, only the pairs and triplets with a "
             "due row)")
    counters = ("beta_mean", "beta_capped", "n_binary_pairs", "n_p_over_1")

    def run(self, work: StepWork) -> None:
        sim = self.sim
        if not sim.cfg.run.relaxation:
            return
        if sim.stars.has_binary_fields:
            work.selection = relax_and_select(sim, work.states, work.dt, work.coulomb_ratio,
                                              work.beta_stats, work.p_stats, work.due,
                                              work.dt_ratio)
        else:  # (with time-step zones: the pairs with a due row, each for its owed time)
            s = sim.stars
            relax_pairs(sim.r_all, sim.offset, s.m, s.vr, s.vt, work.states, work.dt,
                        float(sim.state.n0), work.coulomb_ratio, work.beta_stats,
                        work.dt_ratio, work.due)


def relax_and_select(sim: Simulation, states: np.ndarray, dt: float, coulomb_ratio: float,
                      beta_stats: np.ndarray, p_stats: np.ndarray, due: np.ndarray | None = None,
                      dt_ratio: np.ndarray | None = None) -> tuple:
    """Relaxation with strong-encounter selection, three-body and wide-binary selection.

    ``due`` (time-step zones): only the pairs and triplets with a due row take part, each for
    ``dt`` times its rows' ``dt_ratio`` (a pair's rows carry the same: its shorter owed time;
    a triplet takes the mean of its three), and only due binaries break.  Returns the
    arguments of :func:`physics.encounters.apply_events` after ``states``: (encounter,
    enc_phi, enc_w, formed, block_stats, wide).
    """
    st = sim.state
    stars = sim.stars
    phys = sim.phys
    n = stars.n
    nb = states.shape[0]
    n0 = float(st.n0)
    dt_nb = dt * st.n0 / st.lnl0
    is_bin = stars.binind >= 0
    # wide binaries first: they are broken this step and meet no one (a wide binary's
    # cross section would make it meet someone in every step, so it would never break)
    wide = np.zeros(n, dtype=np.bool_)
    if phys.wide_factor > 0.0 or phys.wide_hardness_min > 0.0:
        enc.select_wide_binaries(sim.r_all, sim.offset, stars.m, stars.vr, stars.vt, is_bin,
                                 stars.bin_m1, stars.bin_m2, stars.bin_a, stars.bin_e, n0,
                                 phys.wide_factor, phys.wide_hardness_min, wide)
        if due is not None:
            wide &= due
    npairs = n // 2 + 1
    encounter = np.zeros(npairs, dtype=np.bool_)
    enc_phi = np.zeros(npairs)
    enc_w = np.zeros(npairs)
    # sticky spheres: each single star's radius [N-body length] (0: a binary, or no radius)
    coll_rad = np.where(is_bin, 0.0, stars.rad * (phys.radius_unit * phys.coll_factor)) \
        if phys.ss_collision and phys.radius_unit > 0.0 else None
    # gravitational-wave capture: the single black holes (their pairs are tested with or
    # without sticky radii)
    is_bh = None
    if phys.bh_capture and phys.clight > 0.0:
        is_bh = ~is_bin & (stars.startype == enc.BLACK_HOLE)
        if coll_rad is None:
            coll_rad = np.zeros(n)
    relax_or_select_pairs(sim.r_all, sim.offset, stars.m, stars.vr, stars.vt, stars.bin_a,
                          is_bin & ~wide, wide, states, dt, n0, coulomb_ratio, dt_nb,
                          phys.x_bs, phys.x_bb, phys.binary_single, phys.binary_binary,
                          beta_stats, encounter, enc_phi, enc_w, p_stats, coll_rad, is_bh,
                          phys.clight if is_bh is not None else 0.0, dt_ratio, due)
    busy = np.zeros(n, dtype=np.bool_)
    pairs = np.flatnonzero(encounter)
    busy[2 * pairs] = True
    busy[2 * pairs + 1] = True
    formed = np.zeros(nb * enc.TRIPLETS_PER_BLOCK, dtype=np.bool_)
    block_stats = np.zeros((nb, 3))
    if phys.three_body != "off":
        eligible = ~is_bin & ~busy
        if phys.three_body == "bh":
            eligible &= stars.startype == enc.BLACK_HOLE
        if eligible.any():
            enc.select_three_body(sim.r_all, sim.offset, stars.m, stars.vr, stars.vt,
                                  eligible, states, n0, dt_nb, phys.eta_min,
                                  phys.three_body_neighbours, formed, block_stats,
                                  np.zeros((nb, 2)), dt_ratio, due)
    return encounter, enc_phi, enc_w, formed, block_stats, wide
