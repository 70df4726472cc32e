"""The run's state and the names every part of the run shares.

:class:`RunState` holds the scalars of a run that checkpoints save (its energy columns'
running totals among them); :class:`StopRun` is how a process of the step stops the run.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Stream index reserved for sampling initial conditions (far from any rank's stream).
IC_STREAM = 2**30
#: A cluster with fewer objects has dissolved (the step needs a few 20-star blocks).
MIN_OBJECTS = 40
#: The parts of the step whose time a run reports (each process books its time in one).
PARTS = ("potential", "timestep", "relaxation", "encounters", "stellar_evolution", "orbits",
         "sort", "energy", "diagnostics", "wait")
#: Recorded steps over which N_core and r_c/r_h are median-smoothed for the core-collapse stop
#: (``core_collapse_ncore``): N_core of a core of ~100 stars fluctuates by 10-20 % from one
#: step to the next (144, 120, 96 in three steps of a 2000-star run), and one low value stopped
#: the run.  Deep in the collapse the steps are short: at N = 1e4 the median crosses 100
#: about 0.03 t_rh0 (a few hundred steps) after the first raw value does.
CORE_STOP_WINDOW = 10


@dataclass
class RunState:
    """Scalars of a run, saved in every checkpoint."""

    n0: int
    e0: float
    t_rh0: float
    r_c0: float
    lnl0: float
    gamma: float
    step: int = 0
    time: float = 0.0
    dt_prev: float = 0.0
    e_escaped: float = 0.0
    m_escaped: float = 0.0
    n_escaped: int = 0
    e_deficit: float = 0.0
    e_bind_escaped: float = 0.0
    e_encounters: float = 0.0
    e_three_body: float = 0.0
    e_taken: float = 0.0
    e_oops: float = 0.0
    e_slots: float = 0.0
    e_ejected: float = 0.0
    e_mergers: float = 0.0
    e_integrator: float = 0.0
    #: mechanical energy that gravitational-wave captures of black holes radiated (negative)
    e_gw_capture: float = 0.0
    #: mechanical energy the 2.5PN term radiated in few-body encounters (negative)
    e_gw_encounters: float = 0.0
    #: mass black-hole mergers in few-body encounters radiated [Hénon mass]
    m_gw: float = 0.0
    wall_seconds: float = 0.0
    emulated_ranks: int = 1
    stop_reason: str = ""
    #: rows of diagnostics.h5 that this state covers (one per recorded step)
    diag_rows: int = 0
    #: JSON list of [step, "section.key=value"]: every override given on a restart
    overrides: str = "[]"
    #: when the run was first started (UTC, ISO 8601)
    start_time: str = ""
    #: physical scale (:class:`cmc.units.Units`): mass unit [Msun], length unit [pc]
    unit_mass_msun: float = 1.0
    unit_length_pc: float = 1.0
    #: initial mass [Hénon mass] and tidal radius (initial, now) [Hénon length]; 0: none
    m0: float = 1.0
    r_t0: float = 0.0
    r_tidal: float = 0.0
    #: the initial model's own tidal radius [Hénon length] (a King model's truncation, a
    #: COSMIC file's RTID; 0: none) and metallicity Z (0: not given), carried into snapshots
    #: so that a run's state can be written back as initial conditions (cmc ic --format cosmic)
    r_tidal_model: float = 0.0
    metallicity: float = 0.0
    #: initial half-mass radius [Hénon length] (0 in checkpoints of older versions: derived
    #: from t_rh0 and m0 on restart), for the core-collapse stop's r_c/r_h
    r_h0: float = 0.0
    #: JSON list of [N_core, r_c/r_h] of the last :data:`CORE_STOP_WINDOW` recorded steps
    #: (the core-collapse stop's medians; kept here so that a restart stops where an unbroken
    #: run does)
    core_window: str = "[]"
    #: tidal stripping: energy, mass and number carried away; mass stripped last step
    e_stripped: float = 0.0
    m_stripped: float = 0.0
    n_stripped: int = 0
    dm_tidal_prev: float = 0.0
    #: stellar evolution: the change of K + W from the mass it took, the kinetic energy of
    #: natal kicks, the change of the binaries' internal energy [Hénon energy]; the mass it
    #: took [Hénon mass] in all and in the last step (the time step's DMse limit)
    e_se_mass: float = 0.0
    e_se_kicks: float = 0.0
    e_se_binding: float = 0.0
    m_se: float = 0.0
    dm_se_prev: float = 0.0


class StopRun(Exception):
    """Raised by the step loop when a stop condition holds.

    ``torn``: raised part-way through a step whose processes have already changed the stars
    (a stellar-evolution failure): the run then ends without writing its state, so the last
    checkpoint stays the one to restart from.
    """

    def __init__(self, message: str, torn: bool = False) -> None:
        super().__init__(message)
        self.torn = torn
