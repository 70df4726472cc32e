"""What every process of the step shares: :class:`StepWork`, which carries what one process
hands to the next, and :class:`Process`, the interface each process module implements (the
order they run in is :mod:`cmc.step`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

if TYPE_CHECKING:
    from cmc.simulation import Simulation


@dataclass
class StepWork:
    """What the processes of one step hand to each other (local rows and blocks)."""

    #: time step [relaxation units] and ln(gamma N) / ln(gamma N0) of the step
    dt: float = 0.0
    coulomb_ratio: float = 1.0
    #: binary-single and binary-binary time scales [N-body time], and whether they set dt
    t_bs: float = np.inf
    t_bb: float = np.inf
    binary_limited: bool = False
    #: time-step zones (run.zones > 1): the global rows of the levels up to each z and the
    #: levels' bound radii and potential there, the step's highest due level, the local rows
    #: due at the step's start (None: every row, as without zones), the objects due (all
    #: ranks), and each row's time since its last relaxation over dt
    zone_rows: np.ndarray | None = None
    zone_bounds: tuple | None = None
    zone_level: int = 0
    due: np.ndarray | None = None
    n_stepped: int = 0
    dt_ratio: np.ndarray | None = None
    #: the local blocks' (stream row, sub-stream) and their generator states (nb, 4)
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.intp))
    subs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.intp))
    states: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), dtype=np.uint32))
    #: bounds of the local blocks of each (emulated) rank this process stands for
    seg_blocks: np.ndarray = field(default_factory=lambda: np.zeros(2, dtype=np.int64))
    #: per block: (sum of beta, capped pairs), (pairs with a binary, P >= 1, -), counters of
    #: the orbit kernel (trials, bound violations); per segment: binary-process counters
    beta_stats: np.ndarray | None = None
    p_stats: np.ndarray | None = None
    counters: np.ndarray | None = None
    counts: np.ndarray | None = None
    #: each row's global slot (its radius in the replicated arrays) and the blocks' first rows
    gidx: np.ndarray | None = None
    block_start: np.ndarray | None = None
    #: relaxation's selection for the binary processes (:func:`enc.apply_events` arguments)
    selection: tuple | None = None
    #: the products' slots and masses, the events' shell changes and the blocks' debts
    slots: np.ndarray | None = None
    slot_mass: np.ndarray | None = None
    changes: np.ndarray | None = None
    debts: list = field(default_factory=list)
    #: every rank's debts (global block, energy), paid after the sort
    event_debts: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    #: the orbit kernel's status per row, and the unbound objects removed before it: per
    #: segment (energy, mass, number, binding energy)
    status: np.ndarray | None = None
    removed: np.ndarray | None = None
    #: new orbits: radius, velocities, old and new potential at the old radius, apocentre
    r_new: np.ndarray | None = None
    vr_new: np.ndarray | None = None
    vt_new: np.ndarray | None = None
    phi_oo: np.ndarray | None = None
    phi_on: np.ndarray | None = None
    r_apo: np.ndarray | None = None
    #: mutual energy of the rows that leave in the orbit step; mass stripped by the tide
    w_mutual: float = 0.0
    dm_tidal: float = 0.0
    #: per segment: (e, m, n, binding) of the escapers and (e, m, n) of the stripped
    esc_parts: np.ndarray | None = None
    #: per segment: stellar evolution's sums (:data:`cmc.processes.stellar_evolution.SE_SUMS`)
    se_parts: np.ndarray | None = None
    #: the rows the sort keeps (None: all)
    keep_rows: np.ndarray | None = None
    #: the radii before the sort (global order) and the ranks' rows of them
    r_old_all: np.ndarray | None = None
    old_bounds: np.ndarray | None = None
    #: the step's diagnostics row
    row: dict = field(default_factory=dict)


class Process:
    """One process of the step.  Subclasses set the class attributes and :meth:`run`.

    The attributes say, for docs/architecture.md and the order test, what the process reads
    and changes, which random numbers it draws (``""``: none), which diagnostics columns its
    energy goes to and which per-step counters it adds; ``timer`` is the part of the run's
    timing (:data:`cmc.state.PARTS`) its time is booked in, and ``wait_after`` asks the bench's
    barrier (``Simulation.measure_wait``) after it.
    """

    name: ClassVar[str] = ""
    timer: ClassVar[str] = ""
    reads: ClassVar[str] = ""
    changes: ClassVar[str] = ""
    draws: ClassVar[str] = ""
    energy: ClassVar[tuple[str, ...]] = ()
    counters: ClassVar[tuple[str, ...]] = ()
    wait_after: ClassVar[bool] = False

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def run(self, work: StepWork) -> None:  # pragma: no cover - the interface
        raise NotImplementedError
