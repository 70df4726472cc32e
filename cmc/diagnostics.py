"""The diagnostics row: energies, radii and core quantities of the cluster now.

What each column is and in which unit (:data:`DIAG_UNITS`, :data:`DIAG_MEANINGS`), the
per-segment sums the row is made of (reduced as the ranks' partial sums in rank order,
:func:`parallel.comm.ranked_sum`: a serial emulation of P ranks sums each emulated rank's
segment apart, so that its diagnostics are the P-rank run's bits), and :func:`diagnostics_row`.
Writing the rows to diagnostics.h5 is :mod:`cmc.output.files`.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

import numpy as np

from cmc.stars import StarTable
from cmc.state import CORE_STOP_WINDOW
from parallel.comm import allreduce_sum, ranked_sum
from physics import encounters as enc
from physics.binaries import binding_energy
from physics.structure import core_from_sums, core_sums, lagrange_mean_masses, lagrange_radii
from physics.sums import kinetic_energy, potential_energy_sum

if TYPE_CHECKING:
    from cmc.simulation import Simulation

#: Stars of the centre over which the binary time scales are averaged (the paper: 300).
CENTRAL_STARS = 300
#: Columns of :func:`structure_sums`: W and the five Casertano-Hut sums.
STRUCTURE_SUMS = 6
#: Per-step counters of binary processes (the names of :data:`physics.encounters.COUNT_NAMES`
#: that count events).
EVENT_COUNTS = enc.COUNT_NAMES[:9] + ("n_ejected",)

DIAG_UNITS = {
    "time": "t_rel = t_NB N0/ln(gamma N0)", "time_nb": "t_NB", "time_trh": "t_rh0",
    "dt": "t_rel", "M": "M0", "K": "E_NB", "W": "E_NB", "E_bound": "E_NB",
    "E_escaped": "E_NB", "E_tot": "E_NB", "M_escaped": "M0", "r_h": "r_vir",
    "r_c": "r_vir", "rho_c": "M0 r_vir^-3", "lagrange_radii": "r_vir", "m_mean_lagrange": "M0",
    "E_binding": "E_NB", "E_binding_escaped": "E_NB", "E_encounters": "E_NB",
    "E_three_body": "E_NB", "E_taken": "E_NB", "E_oops": "E_NB", "E_slots": "E_NB",
    "E_ejected": "E_NB", "E_mergers": "E_NB", "E_integrator": "E_NB", "time_myr": "Myr",
    "r_tidal": "r_vir",
    "M_stripped": "M0", "N_stripped": "objects", "E_stripped": "E_NB",
    "n_stripped_step": "objects per step",
    "T_bs": "t_NB", "T_bb": "t_NB",
    "step": "1", "N": "objects", "dE_rel": "1", "N_escaped": "objects", "E_deficit": "E_NB",
    "N_core": "objects", "virial_ratio": "1", "N_binaries": "binaries",
    "binary_fraction": "1", "binary_fraction_core": "1", "trials_per_star": "1",
    "bound_violations": "stars per step", "beta_mean": "rad", "beta_capped": "pairs per step",
    "n_escaped_step": "objects per step", "n_binary_pairs": "pairs per step",
    "n_p_over_1": "pairs per step", "r_max": "r_vir", "v0_rms": "v_NB", "rc_spitzer": "r_vir",
    "dt_tcross": "1",
    "E_se_mass": "E_NB", "E_se_kicks": "E_NB", "E_se_binding": "E_NB", "M_se": "M0",
    "n_se_evolved": "objects per step", "n_supernovae": "stars per step",
    "n_se_disrupted": "binaries per step", "n_se_mergers": "binaries per step",
    "n_se_destroyed": "objects per step",
    "n_collisions": "pairs per step", "n_bh_captures": "pairs per step",
    "E_gw_capture": "E_NB", "E_gw_encounters": "E_NB", "n_gw_mergers": "mergers per step",
    "M_gw": "M0",
    "N_bh": "stars", "N_ns": "stars", "N_wd": "stars", "N_bh_binaries": "binaries",
    "N_bbh": "binaries", "M_bh": "Msun",
    "zone_level": "1", "n_stepped": "objects per step",
    **{f"zone_rows_{z}": "objects" for z in range(15)},
}
#: A step shorter than this fraction of the central crossing time is warned about (once): an
#: equal-mass Plummer model keeps dt_tcross > 1.1 up to its core collapse (N_core = 100), a
#: King W0 = 3 model with Salpeter 0.2-120 Msun at N = 5000 starts at 0.25-0.5 (docs/method.md).
DT_TCROSS_WARN = 0.5
#: Per-step counters of binary processes (the names of :data:`physics.encounters.COUNT_NAMES`
#: that count events).
EVENT_COUNTS = enc.COUNT_NAMES[:9] + ("n_ejected",)
#: Per-segment sums of stellar evolution (:mod:`cmc.processes.stellar_evolution`), in this
#: order: the kinetic energy change of the mass lost, of the kicks, the change of the
#: binaries' internal energy, the mass lost, objects evolved, supernovae, binaries disrupted,
#: binaries merged, objects destroyed (no remnant).
SE_SUMS = ("e_se_kinetic", "e_se_kicks", "e_se_binding", "m_se", "n_se_evolved",
           "n_supernovae", "n_se_disrupted", "n_se_mergers", "n_se_destroyed")
#: The per-step counters among them (diagnostics columns in runs with stellar evolution).
SE_COUNTS = SE_SUMS[4:]
#: What each diagnostics column means (its unit is in :data:`DIAG_UNITS`).
DIAG_MEANINGS = {
    "step": "step number", "time": "time", "time_nb": "time in N-body units",
    "time_trh": "time in initial half-mass relaxation times", "N": "objects in the cluster",
    "M": "bound mass", "K": "kinetic energy of the bound objects",
    "W": "potential energy of the bound objects", "E_bound": "K + W",
    "E_escaped": "energy carried away by other escapers (unbound, ejected; kinetic + "
                 "potential at escape)",
    "E_tot": "K + W + E_escaped + E_stripped + E_binding + E_binding_escaped - E_oops "
             "- E_mergers - E_integrator (- E_se_mass - E_se_kicks - E_se_binding with "
             "stellar evolution; - E_gw_capture with binaries.bh_capture; - E_gw_encounters "
             "with binaries.pn25) (conserved)",
    "E_se_mass": "change of K + W from the mass stellar evolution took (the lost mass "
                 "leaves with its star's velocity; W exact)",
    "E_se_kicks": "kinetic energy given by natal kicks (supernovae)",
    "E_se_binding": "change of the binaries' internal energy by stellar evolution (mass "
                    "loss and transfer, tides, kicks, disruptions, mergers)",
    "M_se": "mass taken by stellar evolution (winds, supernovae, mergers)",
    "n_se_evolved": "objects evolved by BSE in the step (the others were not due)",
    "zone_level": "time-step zones (run.zones > 1): the highest zone due in the step (zone "
                  "z's step is 2^z dt)",
    "n_stepped": "time-step zones: objects relaxed and given new orbits in the step (the "
                 "due zones)",
    **{f"zone_rows_{z}": f"time-step zones: objects in zones 0 to {z} (the innermost, by "
                         "radius) at the step's start" for z in range(15)},
    "n_supernovae": "supernovae in the step", "n_se_disrupted": "binaries disrupted by "
    "stellar evolution (supernova kicks) in the step", "n_se_mergers": "binaries whose "
    "members merged in BSE in the step", "n_se_destroyed": "objects that left no remnant "
    "in the step",
    "n_collisions": "single-single collisions (sticky spheres) in the step",
    "n_bh_captures": "binaries formed by gravitational-wave capture of two single black "
                     "holes in the step",
    "E_gw_capture": "change of the mechanical energy (K + internal) by gravitational-wave "
                    "captures: what the waves radiated (negative)",
    "E_gw_encounters": "change of the mechanical energy by the 2.5PN term in few-body "
                       "encounters: what the waves radiated during the integrations "
                       "(negative; the mass a merger radiates and its recoil are in "
                       "E_mergers)",
    "n_gw_mergers": "mergers of two black holes in few-body encounters with the 2.5PN term "
                    "in the step",
    "M_gw": "mass radiated by the black-hole mergers in few-body encounters (binaries.pn25)",
    "N_bh": "black holes in the cluster (single or in binaries)",
    "N_ns": "neutron stars in the cluster (single or in binaries)",
    "N_wd": "white dwarfs in the cluster (single or in binaries)",
    "N_bh_binaries": "binaries with at least one black hole", "N_bbh": "black-hole binaries",
    "M_bh": "mass of the cluster's black holes",
    "time_myr": "time in Myr", "r_tidal": "tidal radius (0: isolated)",
    "M_stripped": "mass stripped by the tidal field (apocentre beyond r_tidal)",
    "N_stripped": "objects stripped by the tidal field",
    "E_stripped": "energy carried away by the stripped objects (exact: less their mutual "
                  "energy when several leave together)",
    "n_stripped_step": "objects stripped in the step",
    "dE_rel": "(E_tot - E0) / |E0|", "M_escaped": "mass of the escapers",
    "N_escaped": "number of escapers", "E_deficit": "energy still owed by the Stodolkiewicz "
    "correction", "r_h": "half-mass radius", "r_c": "core radius (Casertano-Hut)",
    "rho_c": "central density", "N_core": "objects in the core",
    "lagrange_radii": "Lagrange radii at the fractions of the attribute lagrange_fractions",
    "m_mean_lagrange": "mean mass of the objects inside each Lagrange radius (mass "
                       "segregation: compare with M / N)",
    "virial_ratio": "2K/|W|", "N_binaries": "binaries in the cluster",
    "E_binding": "internal energy of the bound binaries (negative)",
    "E_binding_escaped": "internal energy of the escaped binaries",
    "binary_fraction": "binaries / objects", "binary_fraction_core": "binaries / objects "
    "inside r_c", "E_encounters": "energy given to the cluster by strong encounters",
    "E_three_body": "energy given to the cluster by three-body binary formation",
    "E_taken": "energy taken from the stars to pay binary processes (the block's other "
               "stars, then the blocks further out)",
    "E_oops": "energy owed by binary processes that no star could pay, and the pair energy "
              "between different events' shell changes of a step (no event pays it)",
    "E_slots": "energy change of the shells from product masses, compensated in speeds",
    "E_ejected": "energy of products ejected at once (unbound)",
    "E_mergers": "energy dissipated by mergers",
    "E_integrator": "energy the few-body integrations gained (their error, within "
                    "binaries.energy_tol of each encounter)",
    "dt": "time step of the step",
    "trials_per_star": "rejection-sampling trials per star",
    "bound_violations": "stars whose new orbit missed the energy bound",
    "beta_mean": "mean deflection angle of the step", "beta_capped": "pairs with the "
    "deflection capped at pi/2", "n_escaped_step": "escapers of the step",
    "T_bs": "binary-single encounter time scale of the centre",
    "T_bb": "binary-binary encounter time scale of the centre",
    "n_binary_pairs": "pairs with a binary in the relaxation step",
    "n_p_over_1": "pairs with encounter probability >= 1 in the step",
    "r_max": "radius of the outermost object", "v0_rms": "rms speed of the central 300 "
    "objects (CMC's central.v_rms)", "rc_spitzer": "Spitzer core radius sqrt(3 v0_rms^2 / "
    "(4 pi rho_c))",
    "dt_tcross": "time step over the central crossing time r_c / v0_rms (N-body units); "
    "below 1 the orbit step redraws the central orbits several times per crossing",
}
for _name in EVENT_COUNTS:
    DIAG_MEANINGS.setdefault(_name, f"events of the step: {_name[2:].replace('_', ' ')}")
    DIAG_UNITS.setdefault(_name, "events per step")


def central_means(structure: np.ndarray) -> tuple[float, float]:
    """CMC-COSMIC's density-weighted mean mass and mean v^2 of the objects inside r_h
    (central.m_ave, central.v_rms^2) from the reduced :func:`structure_sums`
    (W first); (0, 0) without a core."""
    s_rho = float(structure[1])
    if not s_rho > 0.0:
        return 0.0, 0.0
    return float(structure[4]) / s_rho, float(structure[5]) / s_rho



def binary_sums(sim: Simulation) -> np.ndarray:
    """Internal energy and number of the binaries of each segment
    (:meth:`Simulation.star_segments`), shape (S, 2); zeros without binaries."""
    s = sim.stars
    bounds = sim.star_segments()
    out = np.zeros((bounds.size - 1, 2))
    if not s.has_binary_fields:
        return out
    for j in range(bounds.size - 1):
        mask = np.zeros(s.n, dtype=bool)
        mask[bounds[j]:bounds[j + 1]] = True
        out[j, 0] = binding(s, mask)
        out[j, 1] = float(np.count_nonzero(s.binind[bounds[j]:bounds[j + 1]] >= 0))
    return out



#: The remnant census of runs with stellar evolution: the diagnostics columns, in the order of
#: :func:`remnant_sums`' columns.
REMNANT_COLUMNS = ("N_bh", "N_ns", "N_wd", "N_bh_binaries", "N_bbh", "M_bh")


def remnant_sums(sim: Simulation) -> np.ndarray:
    """The remnants of each segment (:meth:`Simulation.star_segments`), shape (S, 6): black
    holes, neutron stars, white dwarfs (BSE types 14, 13, 10-12; singles and binary members),
    binaries holding a black hole, black-hole binaries, and the black holes' mass [Msun].

    Counted every step: the single stars' types by one ``bincount`` per segment (BSE types are
    0-15), the few binaries' members apart."""
    s = sim.stars
    bounds = sim.star_segments()
    out = np.zeros((bounds.size - 1, len(REMNANT_COLUMNS)))
    for j in range(bounds.size - 1):
        seg = slice(bounds[j], bounds[j + 1])
        kind, mass = s.startype[seg], s.m_msun[seg]
        rows = np.flatnonzero(s.binind[seg] >= 0) if s.has_binary_fields else np.zeros(0, int)
        # the singles: every row's type less the binaries' rows (their own type is no star's)
        counts = np.bincount(kind, minlength=16) - np.bincount(kind[rows], minlength=16)
        out[j, 0] = counts[14]
        out[j, 1] = counts[13]
        out[j, 2] = counts[10] + counts[11] + counts[12]
        if counts[14]:
            bh = kind == 14
            bh[rows] = False
            out[j, 5] = float(np.sum(mass[bh]))
        if rows.size == 0:
            continue
        n_bh_in = np.zeros(rows.size, dtype=np.int64)
        for kind, mass in ((s.bin_startype1[seg][rows], s.bin_m1_msun[seg][rows]),
                           (s.bin_startype2[seg][rows], s.bin_m2_msun[seg][rows])):
            bh = kind == 14
            out[j, 0] += np.count_nonzero(bh)
            out[j, 1] += np.count_nonzero(kind == 13)
            out[j, 2] += np.count_nonzero((kind >= 10) & (kind <= 12))
            out[j, 5] += float(np.sum(mass[bh]))
            n_bh_in += bh
        out[j, 3] = np.count_nonzero(n_bh_in >= 1)
        out[j, 4] = np.count_nonzero(n_bh_in == 2)
    return out


def binding(stars: StarTable, mask: np.ndarray | None = None) -> float:
    """Internal energy of the (selected) local binaries."""
    if not stars.has_binary_fields:
        return 0.0
    b = stars.binind >= 0
    if mask is not None:
        b &= mask
    return float(np.sum(binding_energy(stars.bin_m1[b], stars.bin_m2[b], stars.bin_a[b])))



def central_v2_sums(sim: Simulation) -> np.ndarray:
    """Each segment's (:meth:`Simulation.star_segments`) sum of v^2 over its objects among the
    innermost :data:`CENTRAL_STARS`, shape (S,)."""
    s = sim.stars
    bounds = sim.star_segments()
    out = np.zeros(bounds.size - 1)
    for j, first in enumerate(sim.segment_offsets()):
        a = bounds[j]
        k = min(bounds[j + 1] - a, max(0, CENTRAL_STARS - int(first)))
        out[j] = float(np.sum(s.vr[a:a + k] ** 2 + s.vt[a:a + k] ** 2))
    return out



def half_mass_relaxation_time(r_h: float, mass: float) -> float:
    """t_rh = 0.138 r_h^1.5 / sqrt(M) [t_rel = t_NB N / ln(gamma N)] of a cluster of mass
    ``mass`` [M0] and half-mass radius ``r_h`` [r_vir] (the initial one is the runs' t_rh0,
    Monte Carlo and N-body alike)."""
    return 0.138 * r_h ** 1.5 / math.sqrt(mass)


def half_mass_radius(sim: Simulation) -> float:
    """r_h from the replicated arrays (the same on every rank)."""
    return float(lagrange_radii(sim.r_all, sim.m_all, np.array([0.5]), sim.mcum_all)[0])



def structure_sums(sim: Simulation) -> np.ndarray:
    """Each segment's (:meth:`Simulation.star_segments`) share of the potential energy and of the
    core's Casertano-Hut sums (:func:`physics.structure.core_sums`), shape (S, 6).

    Every rank sums its own stars of the replicated arrays (their neighbours are there
    too), so these passes over all N divide by the number of ranks instead of being
    repeated by every rank; one segment gives the bits of the whole-array functions
    (:func:`physics.potential.potential_energy`,
    :func:`physics.structure.core_properties`), on any number of threads
    (:mod:`physics.sums`).
    """
    bounds = sim.star_segments()
    out = np.zeros((bounds.size - 1, STRUCTURE_SUMS))
    r_h = half_mass_radius(sim) if sim.n_total else 0.0
    s = sim.stars
    for j, first in enumerate(sim.segment_offsets()):
        a, b = int(first), int(first) + int(bounds[j + 1] - bounds[j])
        out[j, 0] = potential_energy_sum(sim.r_all, sim.m_all, sim.phi_all, a, b)
        # the squared speeds of this segment's own rows inside r_h (the sums stop there):
        # CMC's density-weighted v_rms, for T_bs (runs with binaries only)
        k = int(np.searchsorted(sim.r_all[a:b], r_h, side="right"))
        rows = slice(int(bounds[j]), int(bounds[j]) + k)
        v2 = s.vr[rows] ** 2 + s.vt[rows] ** 2 if s.has_binary_fields else np.zeros(0)
        out[j, 1:] = core_sums(sim.r_all, sim.m_all, r_h, a, a + k, v2)
    return out



def kinetic_sums(sim: Simulation) -> np.ndarray:
    """Each segment's (:meth:`Simulation.star_segments`) kinetic energy, shape (S,): the bits of
    ``0.5 * np.sum(m * (vr**2 + vt**2))``, threaded (:func:`physics.sums.kinetic_energy`)."""
    s = sim.stars
    bounds = sim.star_segments()
    return np.array([kinetic_energy(s.m, s.vr, s.vt, int(a), int(b))
                     for a, b in zip(bounds[:-1], bounds[1:], strict=True)])



def diagnostics_row(sim: Simulation, record: bool = True, extra: dict | None = None,
                kinetic: float | None = None,
                binaries: tuple[float, float] | None = None,
                central_v2: float | None = None,
                structure: np.ndarray | None = None) -> dict:
    """Energies, radii and core quantities now; appended to the history if ``record``.

    ``kinetic`` is the global kinetic energy, ``binaries`` the global (internal energy,
    number) of the binaries, ``central_v2`` the sum of v^2 over the central 300 objects
    and ``structure`` the sums of :func:`structure_sums` when the caller already reduced
    them (the step packs them with its other sums); otherwise they are reduced here.
    """
    st = sim.state
    s = sim.stars
    if kinetic is None or binaries is None or central_v2 is None or structure is None:
        red = ranked_sum(sim.comm, np.column_stack((kinetic_sums(sim), binary_sums(sim),
                                                     central_v2_sums(sim),
                                                     structure_sums(sim))))
        kinetic = float(red[0]) if kinetic is None else kinetic
        binaries = (red[1], red[2]) if binaries is None else binaries
        central_v2 = float(red[3]) if central_v2 is None else central_v2
        structure = red[4:] if structure is None else structure
    k = kinetic
    e_bind, n_bin = float(binaries[0]), float(binaries[1])
    # CMC's central velocity dispersion and Spitzer core radius (its dyn.dat columns)
    v0_rms = math.sqrt(central_v2 / max(1, min(CENTRAL_STARS, sim.n_total)))
    w = float(structure[0])
    mtot = float(sim.mcum_all[-1]) if sim.n_total else 0.0
    lr = lagrange_radii(sim.r_all, sim.m_all, sim.fractions, sim.mcum_all)
    m_lr = lagrange_mean_masses(sim.m_all, sim.fractions, sim.mcum_all)
    r_h = half_mass_radius(sim)
    r_c, rho_c, n_core = core_from_sums(np.asarray(structure[1:], dtype=np.float64))
    sim.central_means = central_means(structure)
    # the whole budget: bound, escaped, binaries' internal energy (bound and escaped),
    # less what binary processes owe and could not take from their neighbours, what
    # mergers dissipated and the few-body integrator's energy error
    e_tot = (k + w + st.e_escaped + st.e_stripped + e_bind + st.e_bind_escaped - st.e_oops
             - st.e_mergers - st.e_integrator)
    if s.has_se_fields:
        e_tot -= st.e_se_mass + st.e_se_kicks + st.e_se_binding
    if sim.phys.bh_capture:
        e_tot -= st.e_gw_capture
    if sim.phys.pn25:
        e_tot -= st.e_gw_encounters
    f_bin_core = 0.0
    if s.has_binary_fields:
        n_obj_core = int(np.searchsorted(sim.r_all, r_c, side="right"))
        nbc = allreduce_sum(sim.comm, np.array([
            np.count_nonzero((s.binind >= 0) & (s.r <= r_c))]))[0]
        f_bin_core = float(nbc) / max(n_obj_core, 1)
    unit_nb = st.n0 / st.lnl0
    d = {
        "step": st.step, "time": st.time, "time_nb": st.time * unit_nb,
        "time_myr": sim.units.rel_to_myr(st.time),
        "time_trh": st.time / st.t_rh0 if st.t_rh0 > 0 else 0.0,
        "N": sim.n_total, "M": mtot, "K": k, "W": w, "E_bound": k + w,
        "E_escaped": st.e_escaped, "E_tot": e_tot,
        "dE_rel": (e_tot - st.e0) / abs(st.e0) if st.e0 else 0.0,
        "M_escaped": st.m_escaped, "N_escaped": st.n_escaped,
        "E_deficit": st.e_deficit, "r_h": r_h, "r_c": r_c, "rho_c": rho_c,
        "N_core": n_core, "lagrange_radii": lr, "m_mean_lagrange": m_lr,
        "virial_ratio": 2.0 * k / abs(w) if w else 0.0,
        "N_binaries": n_bin, "E_binding": e_bind, "E_binding_escaped": st.e_bind_escaped,
        "binary_fraction": n_bin / max(sim.n_total, 1),
        "binary_fraction_core": f_bin_core, "E_encounters": st.e_encounters,
        "E_three_body": st.e_three_body, "E_taken": st.e_taken, "E_oops": st.e_oops,
        "E_slots": st.e_slots, "E_ejected": st.e_ejected, "E_mergers": st.e_mergers,
        "E_integrator": st.e_integrator,
        "r_tidal": st.r_tidal, "M_stripped": st.m_stripped, "N_stripped": st.n_stripped,
        "E_stripped": st.e_stripped,
        "r_max": float(sim.r_all[-1]) if sim.n_total else 0.0, "v0_rms": v0_rms,
        "rc_spitzer": math.sqrt(3.0 * v0_rms ** 2 / (4.0 * math.pi * rho_c))
        if rho_c > 0.0 else 0.0,
    }
    base = {"dt": 0.0, "trials_per_star": 0.0, "bound_violations": 0.0, "beta_mean": 0.0,
            "beta_capped": 0.0, "n_escaped_step": 0.0, "T_bs": math.inf, "T_bb": math.inf,
            "n_binary_pairs": 0.0, "n_p_over_1": 0.0, "n_stripped_step": 0.0,
            **dict.fromkeys(EVENT_COUNTS, 0.0)}
    if s.has_se_fields:
        d.update({"E_se_mass": st.e_se_mass, "E_se_kicks": st.e_se_kicks,
                  "E_se_binding": st.e_se_binding, "M_se": st.m_se})
        d.update(zip(REMNANT_COLUMNS, ranked_sum(sim.comm, remnant_sums(sim)).tolist(),
                     strict=True))
        base.update(dict.fromkeys(SE_COUNTS, 0.0))
    if sim.cfg.run.zones > 1:
        base.update({"zone_level": 0.0, "n_stepped": 0.0,
                     **{f"zone_rows_{z}": 0.0 for z in range(sim.cfg.run.zones - 1)}})
    if sim.phys.ss_collision:
        base["n_collisions"] = 0.0
    if sim.phys.bh_capture:
        d["E_gw_capture"] = st.e_gw_capture
        base["n_bh_captures"] = 0.0
    if sim.phys.pn25:
        d["E_gw_encounters"] = st.e_gw_encounters
        d["M_gw"] = st.m_gw
        base["n_gw_mergers"] = 0.0
    base.update(extra or {})
    d.update(base)
    # the step over the central crossing time r_c / v0_rms (both N-body units; 0 before
    # the first step): below 1 the orbit step redraws the central orbits' phases several
    # times per orbit (docs/method.md, "Few stars carrying the central mass")
    t_cross_c = r_c / v0_rms if v0_rms > 0.0 else 0.0
    d["dt_tcross"] = base["dt"] * unit_nb / t_cross_c if t_cross_c > 0.0 else 0.0
    if record:
        for key, v in d.items():
            sim.history.setdefault(key, []).append(v)
        sim.last = d
        sim.n_rows += 1
        window = json.loads(st.core_window)[-(CORE_STOP_WINDOW - 1):]
        window.append([float(d["N_core"]),
                       float(d["r_c"] / d["r_h"]) if d["r_h"] > 0 else 0.0])
        st.core_window = json.dumps(window)  # (repr of floats: every bit round-trips)
    return d

