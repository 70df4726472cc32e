"""The Hénon Monte Carlo step loop (serial and MPI through one communicator).

Each rank owns whole 20-star blocks of the global radial order (see
:mod:`parallel.decomposition`) and holds replicated copies of every star's radius and mass,
from which it computes the potential itself.  One step:

1. potential from the replicated sorted radii and masses;
2. shared time step: minimum over 20-star bins (one Allreduce);
3. relaxation of radial-neighbour pairs;
4. new orbits (turning points, rejection sampling), escapers removed;
5. parallel sort (Sample Sort with its cuts moved to the block bounds: one exchange), the
   escapers dropped in it, Allgatherv of radii and masses, new potential;
6. energy correction (Stodolkiewicz) with any deficit taken from the other stars;
7. diagnostics (one packed Allreduce).

Random numbers: block ``j`` of rank ``k`` draws from sub-stream ``j`` of stream ``k``.  A
serial run with ``run.emulate_ranks = P`` maps every global block to the (stream, sub-stream)
that its owner rank would use in a P-rank run, so it reproduces that run bit for bit.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numba
import numpy as np

from cmc import io as cio
from cmc.compiling import WATCH as COMPILE_WATCH
from cmc.config import Config, load_config
from cmc.errors import (
    EXIT_INTERNAL,
    EXIT_IO,
    PLANNED_STOPS,
    RESUMABLE_STOPS,
    CmcError,
    DamagedFileError,
    InputError,
    is_disk_full,
)
from cmc.fields import (
    ESCAPE_EJECTED,
    ESCAPE_TIDAL,
    ESCAPE_UNBOUND,
    FIELD_BY_NAME,
    escaper_columns,
)
from cmc.stars import StarTable
from cmc.units import Units
from parallel.balance import (
    TAG_INPUTS,
    TAG_RESULTS,
    BlockShare,
    pack_arrays,
    recv_bytes,
    send_bytes,
    unpack_arrays,
)
from parallel.comm import allgatherv_array, allreduce_max, allreduce_sum, ranked_sum
from parallel.decomposition import MIN_CHUNK, block_counts, block_layout, rank_bounds
from parallel.sample_sort import bracketing_guesses, guess_deviation, parallel_sort
from parallel.shared import NodeReplicas, PotentialStages
from parallel.streams import Streams
from physics import encounters as enc
from physics.binaries import binary_binary_timescale, binary_single_timescale, binding_energy
from physics.energy import (
    TAKE_FRACTION,
    block_kinetic,
    correct_velocities,
    scale_blocks,
    settle_debts,
)
from physics.fewbody import EncounterSettings
from physics.orbits import (
    LOOKUP_PER_BUCKET,
    ORBIT_ESCAPED_TIDAL,
    ORBIT_OK,
    ORBIT_REMOVED,
    block_rows,
    new_orbits_rows,
    new_orbits_rows_lut,
    specific_energies,
)
from physics.potential import (
    POTENTIAL_BLOCK,
    compute_potential,
    enclosed_mass_totals,
    potential_at_points,
    potential_at_sorted_radii,
    potential_blocks_into,
    potential_suffix_blocks,
    radius_lookup_entries,
    radius_lookup_scale,
    updated_potential,
)
from physics.relaxation import (
    block_moments,
    relax_or_select_pairs,
    relax_pairs,
    window_boundary_counts,
    window_boundary_rows,
    window_min_inside,
    window_min_straddling,
    window_relaxation_times,
)
from physics.structure import core_from_sums, core_sums, lagrange_mean_masses, lagrange_radii
from physics.sums import copy_rows, difference, kinetic_energy, potential_energy_sum
from physics.tidal import (
    mutual_energy,
    shell_potential,
    tidal_mass_loss_timestep,
    tidal_radius,
)

log = logging.getLogger("cmc.simulation")

#: Stream index reserved for sampling initial conditions (far from any rank's stream).
IC_STREAM = 2**30
#: The potential's stages for the node-shared arrays (the node's ranks compute it together)
POTENTIAL_STAGES = PotentialStages(POTENTIAL_BLOCK, enclosed_mass_totals, potential_blocks_into,
                                   potential_suffix_blocks)
PARTS = ("potential", "timestep", "relaxation", "encounters", "orbits", "sort", "energy",
         "diagnostics", "wait")
#: From this many ranks on, the energy correction finds the new potential at its own stars' old
#: radii by bisection (O(N/P log N) per rank, 130-250 ns per own star at N = 1e5-1e6, one
#: core) instead of merging its segment of the old radii (6 ns per star of the segment) and
#: gathering all N values (8 bytes per star of all N: 0.7 ns at 12 GB/s), which is cheaper up
#: to P ~ 190-370 (bench/perf_model.py).
OLD_POTENTIAL_LOOKUP_MIN_RANKS = 256
#: Columns of :meth:`Simulation._structure_sums`: W and the five core sums.
STRUCTURE_SUMS = 6
#: A cluster with fewer objects has dissolved (the step needs a few 20-star blocks).
MIN_OBJECTS = 40
#: Stars of the centre over which the binary time scales are averaged (the paper: 300).
CENTRAL_STARS = 300

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
}
#: A step shorter than this fraction of the central crossing time is warned about (once): an
#: equal-mass Plummer model keeps dt_tcross > 1.1 up to its core collapse (N_core = 100), a
#: King W0 = 3 model with Salpeter 0.2-120 Msun at N = 5000 starts at 0.25-0.5 (docs/method.md).
DT_TCROSS_WARN = 0.5
#: Per-step counters of binary processes (the names of :data:`physics.encounters.COUNT_NAMES`
#: that count events).
EVENT_COUNTS = enc.COUNT_NAMES[:9] + ("n_ejected",)
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


class StopRun(Exception):
    """Raised by the step loop when a stop condition holds."""


class Simulation:
    """One Monte Carlo run on a communicator (an mpi4py communicator or SerialComm)."""

    def __init__(self, cfg: Config, comm, stars: StarTable, state: RunState, streams: Streams,
                 outdir: str | Path | None = None, history: dict[str, list] | None = None):
        self.cfg = cfg
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.stars = stars
        self.state = state
        self.streams = streams
        self.outdir = Path(outdir) if outdir is not None else None
        self.history: dict[str, list] = history if history is not None else {}
        #: the latest recorded diagnostics row (``history`` may hold only unflushed rows)
        self.last: dict = {k: v[-1] for k, v in self.history.items()}
        self.timers = dict.fromkeys(PARTS, 0.0)
        #: (bench) barriers before the step's two large collectives and after the orbit
        #: kernel, their time booked as "wait": the ranks' load imbalance, apart from the
        #: parts' own cost
        self.measure_wait = False
        #: ((N, window width in blocks), every rank's row count of the time step's gather)
        self._window_rows: tuple = (None, None)
        self.fractions = np.asarray(cfg.output.lagrange_fractions, dtype=float)
        self._signal = 0
        self._n_p1 = 0
        self._p1_warned = False
        self._tcross_warned = False
        self._wall_start = time.monotonic()
        self._wall_at_start = state.wall_seconds
        self._last_checkpoint = time.monotonic()
        self._diag: cio.DiagnosticsWriter | None = None
        #: escaper table (escapers.h5): this step's local records, the gathered rows not yet
        #: written (rank 0) and the writer; kept only for runs with an output folder
        self._esc_local: list[dict[str, np.ndarray]] = []
        self._esc_rows: list[dict[str, np.ndarray]] = []
        self._esc: cio.DiagnosticsWriter | None = None
        self._fault = os.environ.get(FAULT_ENV)
        self._snap_step = -1
        self._dm_tidal = 0.0
        #: where the last :meth:`run` spent its time (:meth:`_timing_summary`)
        self.timing: dict = {}
        #: diagnostics rows recorded over the whole run (the restart's diag_rows onwards)
        self.n_rows = len(self.history.get("step", []))
        #: (density-weighted <m>, <v^2>) inside r_h from the last diagnostics, for T_bs
        self._central_means: tuple[float, float] | None = None
        if self.size > 1 and cfg.run.emulate_ranks not in (0, self.size):
            raise ValueError("run.emulate_ranks: only for serial runs (or equal to the number "
                             f"of MPI ranks, {self.size})")
        self.n_emul = self.size if self.size > 1 else max(1, cfg.run.emulate_ranks)
        self.units = Units(state.unit_mass_msun, state.unit_length_pc, state.n0, state.gamma)
        b = cfg.binaries
        self.phys = enc.BinaryPhysics(
            binary_single=b.binary_single, binary_binary=b.binary_binary, x_bs=b.x_bs,
            x_bb=b.x_bb, three_body=b.three_body, eta_min=b.eta_min, eta_max=b.eta_max,
            three_body_neighbours=b.three_body_neighbours,
            wide_factor=b.wide_factor, wide_hardness_min=b.wide_hardness_min,
            settings=EncounterSettings(integrator=b.integrator, energy_tol=b.energy_tol,
                                       max_steps=b.max_steps, t_max_periods=b.t_max_periods,
                                       collapse_tol=b.collapse_tol))
        #: the orbit kernel: numba on the CPU, or the same kernel on a GPU
        self.orbits = orbit_kernel(cfg.run.orbit_backend, comm,
                                   balance=cfg.run.orbit_balance == "auto")
        #: the replicated arrays in the node's shared memory (None: this rank's own copies)
        self.replicas = (NodeReplicas.create(comm) if self.size > 1
                         and cfg.run.shared_memory == "auto" else None)
        self.sync_replicated()
        #: how far the block bounds move from one step to the next [stars], for the sort's
        #: guesses (a speed setting only: any guess gives the same order); a star's new radius
        #: is random, so about the root of the stars per rank to start with
        self._cut_width = float(np.sqrt(max(self.n_total, 1) / self.size))

    # ------------------------------------------------------------------ construction
    @classmethod
    def create(cls, cfg: Config, comm, outdir: str | Path | None = None) -> Simulation:
        """New run from the initial model of ``cfg`` (built on rank 0, then distributed)."""
        from cmc.initial import build_initial_stars, check_memory, physical_scale

        n_emul = comm.Get_size() if comm.Get_size() > 1 else max(1, cfg.run.emulate_ranks)
        glob = None
        info: object = {}
        if comm.Get_rank() == 0:
            try:
                check_memory(cfg, comm.Get_size())  # before anything of the model exists
                glob, info = build_initial_stars(cfg)
                info["scale"] = physical_scale(cfg, info, float(np.sum(glob["m"])))
            except (ValueError, ZeroDivisionError, FloatingPointError) as exc:
                # bad initial conditions (read on rank 0): every rank raises, none waits
                where = f"initial.file {cfg.initial.file}" if cfg.initial.model == "file" \
                    else f"initial model {cfg.initial.model}"
                info = InputError(str(exc) if isinstance(exc, InputError)
                                  else f"{where}: {exc}")
        info = comm.bcast(info, root=0)
        if isinstance(info, InputError):
            info.collective = True
            raise info
        local = scatter_global(comm, glob)
        n0 = int(info["n"])
        counts = block_counts(n0, n_emul)
        nsub = max(1, int(math.ceil(counts.max() / MIN_CHUNK)))
        if comm.Get_size() > 1:
            streams = Streams.create(cfg.initial.seed, 1, nsub, first_stream=comm.Get_rank())
        else:
            streams = Streams.create(cfg.initial.seed, n_emul, nsub, first_stream=0)
        lnl0 = math.log(cfg.run.gamma * n0)
        state = RunState(n0=n0, e0=0.0, t_rh0=0.0, r_c0=0.0, lnl0=lnl0, gamma=cfg.run.gamma,
                         emulated_ranks=n_emul)
        state.unit_mass_msun, state.unit_length_pc, state.r_t0 = info["scale"]
        state.r_tidal = state.r_t0
        state.r_tidal_model = float(info.get("r_tidal", 0.0))
        state.metallicity = float(info.get("metallicity", 0.0))
        sim = cls(cfg, comm, StarTable(local), state, streams, outdir)
        d = sim.diagnostics(record=False)
        state.m0 = d["M"]
        n_out = int(np.count_nonzero(sim.r_all > state.r_t0)) if state.r_t0 > 0.0 else 0
        if n_out:
            log.warning("%d star(s) start beyond the tidal radius %.4g r_vir: they are "
                        "stripped in the first step", n_out, state.r_t0)
        state.e0 = d["E_tot"]
        state.t_rh0 = 0.138 * d["r_h"] ** 1.5 / math.sqrt(d["M"])
        state.r_c0 = d["r_c"]
        state.r_h0 = d["r_h"]
        sim.diagnostics(record=True)
        return sim

    @classmethod
    def from_checkpoint(cls, path: str | Path, comm, overrides: list[str] | None = None,
                        outdir: str | Path | None = None) -> Simulation:
        """Continue a run from its checkpoint (same number of ranks, or same emulation).

        The checkpoint is verified first (:func:`cmc.io.verify_checkpoint`).  ``overrides``
        may change how the run goes on (stop conditions, output cadence, binary physics) but
        not what it is: keys of :data:`FIXED_ON_RESTART` are refused by name.  A run that
        stopped as planned continues only when an override extends the condition that stopped
        it.  The overrides are recorded once, with the step, in the run state (and so in every
        output).  Raises :class:`cmc.errors.InputError` (on every rank) for a bad checkpoint or
        override.
        """
        import h5py

        glob = None
        meta: object = None
        if comm.Get_rank() == 0:
            try:
                stars, st, cfg_text, _ = cio.read_checkpoint(path)
                with h5py.File(path, "r") as fh:
                    table = Streams.read_hdf5(fh["streams"])
                glob = stars
                scale = float(np.sum(stars["m_msun"]) / np.sum(stars["m"])) \
                    if "m_msun" in stars and stars["m"].size else 1.0
                meta = (st, cfg_text, table.seed, table.states, scale)
            except InputError as exc:
                meta = exc
        meta = comm.bcast(meta, root=0)
        if isinstance(meta, InputError):
            raise meta
        st, cfg_text, seed, table, glob_scale = meta
        old = load_config(text=cfg_text)
        cfg = load_config(text=cfg_text, overrides=overrides)
        check_restart_overrides(old, cfg, overrides or [])
        state = RunState(**{f.name: st[f.name] for f in fields(RunState) if f.name in st})
        if "r_t0" not in st:
            _legacy_scale(state, cfg, glob_scale)
        if "r_h0" not in st:  # t_rh0 = 0.138 r_h0^1.5 / sqrt(M0) (Simulation.create)
            state.r_h0 = (state.t_rh0 * math.sqrt(state.m0) / 0.138) ** (2.0 / 3.0)
        stopped = state.stop_reason
        state.stop_reason = ""
        if overrides:
            hist = json.loads(state.overrides or "[]")
            hist += [[state.step, ov] for ov in overrides]
            state.overrides = json.dumps(hist)
        size = comm.Get_size()
        if size > 1 and state.emulated_ranks != size:
            raise InputError(f"checkpoint {path} was written with {state.emulated_ranks} "
                             f"stream(s); restart it with mpiexec -n {state.emulated_ranks}")
        if size == 1 and state.emulated_ranks > 1 and table.shape[0] != state.emulated_ranks:
            raise InputError(f"checkpoint {path} holds {table.shape[0]} stream(s) for "
                             f"{state.emulated_ranks} emulated ranks")
        if size == 1:
            cfg.run.emulate_ranks = state.emulated_ranks if state.emulated_ranks > 1 else 0
            streams = Streams(seed, 0, table)
        else:
            streams = Streams(seed, comm.Get_rank(), table[comm.Get_rank():comm.Get_rank() + 1])
        local = scatter_global(comm, glob)
        sim = cls(cfg, comm, StarTable(local), state, streams, outdir, {})
        sim.n_rows = state.diag_rows
        sim.last = sim.diagnostics(record=False)
        if stopped and stopped not in RESUMABLE_STOPS:
            sim._check_continuable(stopped, path)
        return sim

    def _check_continuable(self, stopped: str, path: str | Path) -> None:
        """Refuse to continue a run that ended, unless the overrides lift its stop."""
        if stopped not in PLANNED_STOPS and stopped != "energy_error":
            raise InputError(f"the run in {path} stopped with a failure ({stopped}) at step "
                             f"{self.state.step}; it cannot go on from this checkpoint (an "
                             "older one: cmc restart OUTDIR --checkpoint checkpoint.1.h5)")
        still = self._stop_reason(self.last)
        if still:
            key = {"max_time": "run.t_max (or run.t_max_myr, run.t_max_code)",
                   "max_steps": "run.max_steps",
                   "dissolved": "run.n_min_fraction",
                   "core_collapse_ncore": "run.n_core_stop", "core_collapse_rc":
                   "run.rc_stop_fraction", "energy_error": "run.energy_error_max"}[still]
            raise InputError(f"the run in {path} is finished ({still} at step "
                             f"{self.state.step}); to continue it, extend the stop with "
                             f"--set {key}=...")

    # ------------------------------------------------------------------ replicated data
    def sync_replicated(self, n_total: int | None = None) -> None:
        """Allgather radii and masses (global order) and recompute the potential: into the
        node's shared memory (:class:`parallel.shared.NodeReplicas`, ``run.shared_memory``),
        or into this rank's own arrays.  ``n_total``: the number of stars on all ranks, where
        the caller knows it (the step's sort counted them), else reduced here."""
        if self.replicas is not None:  # (publish checks this rank's count against the layout)
            self.n_total = (int(allreduce_sum(self.comm, np.array([self.stars.n]))[0])
                            if n_total is None else int(n_total))
            self.r_all, self.m_all, self.phi_all, self.mcum_all = self.replicas.publish(
                self.n_total, self.stars.r, self.stars.m, POTENTIAL_STAGES)
        else:
            if self.size == 1:  # the radii are never written in place (the step replaces
                # stars.r): no copy (0.1-0.5 ms per step at N = 1e5, the more with two
                # threads, whose sort left half of them in the other core's cache); the
                # masses may be (strong encounters), so they are copied
                self.r_all = self.stars.r
                self.m_all = self.stars.m.copy()
            else:
                self.r_all = allgatherv_array(self.comm, self.stars.r)
                self.m_all = allgatherv_array(self.comm, self.stars.m)
            self.n_total = self.r_all.size
            need = int(block_counts(self.n_total, self.size)[self.rank])
            if need != self.stars.n:
                raise RuntimeError(f"rank {self.rank} holds {self.stars.n} stars, the block "
                                   f"layout needs {need}")
            self.phi_all, self.mcum_all = compute_potential(self.r_all, self.m_all)
        self.offset = int(rank_bounds(self.n_total, self.size)[self.rank])

    def _stream_index(self) -> tuple[np.ndarray, np.ndarray]:
        """(stream row, sub-stream) of each local block."""
        nb = (self.stars.n + MIN_CHUNK - 1) // MIN_CHUNK
        if self.size > 1 or self.n_emul == 1:
            return np.zeros(nb, dtype=np.intp), np.arange(nb, dtype=np.intp)
        lay = block_layout(self.n_total, self.n_emul)
        return lay.owner.astype(np.intp), lay.local_block.astype(np.intp)

    # Sums over stars are reduced as (emulated) ranks' partial sums added in rank order
    # (:func:`parallel.comm.ranked_sum`): a serial emulation of P ranks sums each emulated
    # rank's segment apart, so that its diagnostics are the P-rank run's bits.
    def _star_segments(self) -> np.ndarray:
        """Bounds of the local rows (standard block layout, after the sort) of each rank this
        process stands for: ``[0, n]``, or the emulated ranks' star ranges."""
        if self.size == 1 and self.n_emul > 1:
            return rank_bounds(self.stars.n, self.n_emul)
        return np.array([0, self.stars.n], dtype=np.int64)

    def _block_segments(self, nb: int) -> np.ndarray:
        """Bounds of the step's ``nb`` local blocks of each rank this process stands for."""
        if self.size == 1 and self.n_emul > 1:
            owner = block_layout(self.n_total, self.n_emul).owner
            return np.searchsorted(owner, np.arange(self.n_emul + 1)).astype(np.int64)
        return np.array([0, nb], dtype=np.int64)

    def _segment_offsets(self) -> np.ndarray:
        """Global index of the first star of each segment of :meth:`_star_segments`."""
        return self.offset + self._star_segments()[:-1]

    # ------------------------------------------------------------------ one step
    def step(self) -> dict:
        """Advance the cluster by one shared time step; returns the step's diagnostics."""
        cfg = self.cfg.run
        st = self.state
        stars = self.stars
        t0 = time.perf_counter()
        n = stars.n
        # 1. the potential is current (computed after the last sort)
        t1 = time.perf_counter()
        self.timers["potential"] += t1 - t0
        # 2. shared time step
        if self.cfg.run.coulomb_n == "current":
            lnl = math.log(st.gamma * self.n_total) if st.gamma * self.n_total > 1 else 1e-300
            coulomb_ratio = max(lnl, 1e-300) / st.lnl0
        else:  # ln(gamma N0) throughout, as CMC
            coulomb_ratio = 1.0
        tmin = self._window_min(coulomb_ratio)
        dt = (2.0 * cfg.theta_max / math.pi) ** 2 * tmin
        t_bs = t_bb = math.inf
        binary_limited = False  # the binary time scales, not relaxation, set the step
        if stars.has_binary_fields:
            t_bs, t_bb = self._binary_timescales()
            to_rel = st.lnl0 / st.n0  # N-body time -> relaxation units
            b = self.cfg.binaries
            dt_bin = min(b.dt_fraction_bs * t_bs * to_rel, b.dt_fraction_bb * t_bb * to_rel)
            binary_limited = dt_bin < dt
            dt = min(dt, dt_bin)
        if st.dt_prev > 0.0:
            dt = min(dt, cfg.dt_growth_max * st.dt_prev)
        dt = tidal_mass_loss_timestep(dt, st.dt_prev, st.dm_tidal_prev, st.m0,
                                      self.cfg.tidal.dm_fraction_max)
        if not math.isfinite(dt) or dt <= 0.0:
            raise StopRun("time step is not finite (too few stars?)")
        t2 = time.perf_counter()
        self.timers["timestep"] += t2 - t1
        # 3. relaxation
        rows, subs = self._stream_index()
        need = int(subs.max()) + 1 if subs.size else 0
        if need > self.streams.n_substreams:
            self.streams.ensure_substreams(need)
        states = np.ascontiguousarray(self.streams.states[rows, subs])
        nb = states.shape[0]
        seg_blocks = self._block_segments(nb)
        beta_stats = np.zeros((nb, 2))
        counts = np.zeros((seg_blocks.size - 1, len(enc.COUNT_NAMES)))
        p_stats = np.zeros((nb, 3))
        gidx, block_start = block_rows(n, self.offset)
        slots = slot_mass = None
        if cfg.relaxation and stars.has_binary_fields:
            sel = self._relax_and_select(states, dt, coulomb_ratio, beta_stats, p_stats)
            t3 = time.perf_counter()
            self.timers["relaxation"] += t3 - t2
            ejected: list = []
            debts: list = []
            fields, gidx, block_start, counts, slots, slot_mass, changes = enc.apply_events(
                stars.as_dict(), self.offset, self.r_all, self.phi_all, states, *sel,
                self.phys, self._integrate_encounters, ejected=ejected,
                block_segments=seg_blocks, debts=debts)
            if ejected:
                ej_rows = {k: np.array([rec[k] for rec, _, _ in ejected],
                                       dtype=FIELD_BY_NAME[k].dtype) for k in stars.as_dict()}
                self._note_escapers(ej_rows, np.array([x for _, x, _ in ejected]),
                                    np.array([e for _, _, e in ejected]), ESCAPE_EJECTED)
            if fields is not stars.as_dict():
                self.stars = stars = StarTable(fields)
                n = stars.n
            t2 = time.perf_counter()
            self.timers["encounters"] += t2 - t3
        elif cfg.relaxation:
            relax_pairs(self.r_all, self.offset, stars.m, stars.vr, stars.vt, states, dt,
                        float(st.n0), coulomb_ratio, beta_stats)
        t3 = time.perf_counter()
        self.timers["relaxation"] += t3 - t2
        t3 = self._wait_for_ranks(t3)
        event_debts = np.zeros((0, 2))
        if slots is not None:  # the products' masses into the potential (collective); the
            # energy the events' blocks could not give travels along, paid after the sort
            _, changes_all, event_debts = self._update_slot_masses(
                slots, slot_mass, changes=changes, debts=np.array(debts).reshape(-1, 2))
            # the pair energy between different events' shell changes: W has it, no event
            # paid it (each booked its own against the old potential); every rank adds the
            # same number
            st.e_oops += enc.cross_event_energy(changes_all, self.r_all)
        # unbound objects leave before the orbits are drawn (collective); their rows stay,
        # marked ORBIT_REMOVED: the orbit kernel skips them and the sort drops them
        status = np.zeros(n, dtype=np.int8)
        pre = self._remove_unbound(gidx, status, block_start[seg_blocks],
                                   own_slots=slots is None)
        t3, t2 = time.perf_counter(), t3
        self.timers["potential"] += t3 - t2
        # 4. new orbits
        r_new = np.empty(n)
        vr_new = np.empty(n)
        vt_new = np.empty(n)
        copy_rows(stars.vr, vr_new)
        copy_rows(stars.vt, vt_new)
        phi_oo = np.empty(n)
        phi_on = np.empty(n)
        counters = np.zeros((nb, 2))
        r_apo = np.empty(n)
        self.orbits(self.r_all, self.phi_all, self.mcum_all, gidx, block_start, stars.m,
                    stars.vr, stars.vt, states, float(st.r_tidal), r_new, vr_new, vt_new,
                    phi_oo, phi_on, status, counters, r_apo)
        self.streams.states[rows, subs] = states
        removed = status == ORBIT_REMOVED
        if removed.any():  # the kernel left their outputs undefined; r is the sort's key
            r_new[removed] = self.r_all[gidx[removed]]
        if self.measure_wait:  # (bench) the kernel's imbalance between ranks is "wait" too:
            # the next collective (_strip) would otherwise book it as orbits
            tk = time.perf_counter()
            self.timers["orbits"] += tk - t3
            t3 = self._wait_for_ranks(tk)
        # also in isolated runs: a star the removals above left unbound leaves in the kernel,
        # and the others' energy correction must see its shell gone (collective)
        w_mutual = self._strip(gidx, r_apo, status, r_new, vr_new, vt_new, phi_oo, phi_on)
        esc = status != ORBIT_OK  # every row the sort drops
        # the rows leaving now (few; the removed ones were booked before the orbits):
        # m (phi + v^2/2), tidal ones apart from the others
        leaving = esc & (status != ORBIT_REMOVED)
        leave = np.flatnonzero(leaving)
        m_leave = stars.m[leave]
        e_spec_leave = phi_oo[leave] + 0.5 * (stars.vr[leave] ** 2 + stars.vt[leave] ** 2)
        e_leave = m_leave * e_spec_leave
        strip = status[leave] == ORBIT_ESCAPED_TIDAL
        if leave.size:
            self._note_escapers(stars.take(leave).as_dict(), self.r_all[gidx[leave]],
                                e_spec_leave, np.where(strip, ESCAPE_TIDAL, ESCAPE_UNBOUND))
        # per segment (rank): (e, m, n, binding) of the escapers, (e, m, n) of the stripped
        row_bounds = block_start[seg_blocks]
        cut = np.searchsorted(leave, row_bounds)
        esc_parts = np.zeros((row_bounds.size - 1, 7))
        for j in range(row_bounds.size - 1):
            e_j, m_j, tid = e_leave[cut[j]:cut[j + 1]], m_leave[cut[j]:cut[j + 1]], \
                strip[cut[j]:cut[j + 1]]
            eb_esc = 0.0
            if e_j.size:
                mine = np.zeros(n, dtype=bool)
                mine[row_bounds[j]:row_bounds[j + 1]] = True
                eb_esc = self._binding(stars, leaving & mine)
            esc_parts[j] = (float(np.sum(e_j[~tid])) + pre[j, 0],
                            float(np.sum(m_j[~tid])) + pre[j, 1],
                            np.count_nonzero(~tid) + pre[j, 2], eb_esc + pre[j, 3],
                            float(np.sum(e_j[tid])), float(np.sum(m_j[tid])),
                            np.count_nonzero(tid))
        stars.old_index = gidx
        # the correction reads only the difference: one field travels through the sort
        # instead of two (the same bits: it computed phi_on - phi_oo first)
        dphi = np.empty(n)
        difference(phi_on, phi_oo, dphi)
        stars.dphi_old = dphi
        stars.r = r_new
        stars.vr = vr_new
        stars.vt = vt_new
        # the escapers are dropped by the sort (it reads every field once anyway)
        keep_rows = np.flatnonzero(~esc) if esc.any() else None
        t4 = time.perf_counter()
        self.timers["orbits"] += t4 - t3
        t4 = self._wait_for_ranks(t4)
        # 5. sort, redistribute, synchronise replicated arrays, new potential
        # (the old table is dropped: its one-value columns may be shared by the new one)
        old_bounds = rank_bounds(self.n_total, self.size)  # the ranks' rows of r_old_all
        # the radii at and around the last step's block bounds guess the new ones (any guess
        # gives the same order): the sort needs no sampling round (unless run.sample_size
        # asks for one), and its exact cuts gather only the stars between the two guesses
        # that bracket each bound
        hint = None if self.size == 1 or self.n_total == 0 or cfg.sample_size else \
            bracketing_guesses(self.r_all, old_bounds[1:-1], self._cut_width)
        report: dict = {}
        sorted_fields = parallel_sort(self.comm, stars.as_dict(), key="r", tiebreak="id",
                                      sample_size=cfg.sample_size or None, rows=keep_rows,
                                      share_uniform=True, splitters=hint, report=report)
        miss = guess_deviation(report)
        if not math.isnan(miss):  # the bounds' random walk per step, smoothed (the same on
            # every rank: it comes from global counts)
            self._cut_width = 0.5 * self._cut_width + 0.5 * max(miss, 1.0)
        self.stars = stars = StarTable(sorted_fields)
        r_old_all = self.r_all
        self.sync_replicated(report.get("n_total"))
        t5 = time.perf_counter()
        self.timers["sort"] += t5 - t4
        # 6. energy correction
        deficit = np.zeros((stars.n + MIN_CHUNK - 1) // MIN_CHUNK)
        if self.size >= OLD_POTENTIAL_LOOKUP_MIN_RANKS:  # the entries of this rank's stars
            phi_at_old = np.empty(r_old_all.shape[0])
            potential_at_points(self.r_all, self.phi_all, self.mcum_all, r_old_all,
                                stars.old_index, phi_at_old)
        elif self.size > 1:  # each rank merges its segment of the old radii, then one gather
            # (into the node's shared window with run.shared_memory)
            lo, hi = int(old_bounds[self.rank]), int(old_bounds[self.rank + 1])
            mine = potential_at_sorted_radii(self.r_all, self.phi_all, self.mcum_all,
                                             r_old_all[lo:hi])
            phi_at_old = (allgatherv_array(self.comm, mine, rows=np.diff(old_bounds))
                          if self.replicas is None else
                          self.replicas.gather(mine, r_old_all.shape[0]))
        else:  # every point gets the same interval and formula: the bits of the gathered ones
            phi_at_old = potential_at_sorted_radii(self.r_all, self.phi_all, self.mcum_all,
                                                   r_old_all)
        correct_velocities(self.r_all, self.phi_all, self.offset, stars.m, r_old_all, phi_at_old,
                           stars.old_index, stars.vr, stars.vt, stars.dphi_old,
                           deficit)
        d_total = float(allreduce_sum(self.comm, np.array([deficit.sum()]))[0])
        if d_total > 0.0 or event_debts.shape[0]:  # (every rank holds the same event_debts)
            self._take_deficit(deficit, event_debts)
        t6 = time.perf_counter()
        self.timers["energy"] += t6 - t5
        # 7. bookkeeping and diagnostics: one packed reduction for everything summed
        # (each rank's partial sums, added in rank order: an emulation's are its emulated
        # ranks', so that its diagnostics are the P-rank run's bits)
        def block_sums_of(col: np.ndarray) -> np.ndarray:
            return np.array([float(col[a:b].sum())
                             for a, b in zip(seg_blocks[:-1], seg_blocks[1:], strict=True)])

        red = ranked_sum(self.comm, np.column_stack((
            self._kinetic(), esc_parts[:, :3], block_sums_of(counters[:, 0]),
            block_sums_of(counters[:, 1]), block_sums_of(beta_stats[:, 0]),
            block_sums_of(beta_stats[:, 1]), esc_parts[:, 3], self._binary_sums(), counts,
            block_sums_of(p_stats[:, 0]), block_sums_of(p_stats[:, 1]), esc_parts[:, 4:],
            self._central_v2(), self._structure_sums())))
        red, structure = red[:-STRUCTURE_SUMS], red[-STRUCTURE_SUMS:]
        red, (e_strip, m_strip, n_strip, central_v2) = red[:-4], red[-4:]
        # the set leaving in the orbit step: its mutual energy was counted twice in the
        # stars' m (phi + v^2/2) (every rank holds the same w_mutual); isolated, they are all
        # unbound escapers
        if self.cfg.tidal.mode == "isolated":
            st.e_escaped -= w_mutual
            st.e_stripped += e_strip
        else:
            st.e_stripped += e_strip - w_mutual
        st.m_stripped += m_strip
        st.n_stripped += int(round(n_strip))
        st.dm_tidal_prev = self._dm_tidal
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
        n_p1 = red[-1]
        self._n_p1 += int(n_p1)
        if self._n_p1 and (not self._p1_warned
                           or (st.step + 1) % self.cfg.output.progress_every == 0):
            # the first time, then summed over progress intervals (CMC warns at every pair)
            log.warning("%d pair(s) with a strong-encounter probability >= 1 (by step %d; the "
                        "binary time step may be too long)", self._n_p1, st.step + 1)
            self._n_p1 = 0
            self._p1_warned = True
        st.m_escaped += red[2]
        st.n_escaped += int(round(red[3]))
        st.time += dt
        st.dt_prev = dt
        st.step += 1
        # every rank knows the step's escapers from the reduction: gather only when some left
        self._gather_escapers(int(round(red[3] + n_strip + ev["n_ejected"])))
        extra = {"dt": dt, "trials_per_star": red[4] / max(self.n_total, 1),
                 "bound_violations": red[5],
                 "beta_mean": red[6] / max(self.n_total // 2, 1), "beta_capped": red[7],
                 "n_escaped_step": red[3], "n_stripped_step": n_strip,
                 "T_bs": t_bs, "T_bb": t_bb,
                 "n_binary_pairs": red[-2], "n_p_over_1": n_p1,
                 **{k: ev[k] for k in EVENT_COUNTS}}
        d = self.diagnostics(record=True, extra=extra, kinetic=float(red[0]),
                             binaries=(float(red[9]), float(red[10])),
                             central_v2=float(central_v2), structure=structure)
        self.timers["diagnostics"] += time.perf_counter() - t6
        if 0.0 < d["dt_tcross"] < DT_TCROSS_WARN and not self._tcross_warned:
            self._tcross_warned = True
            if binary_limited:  # not heavy stars: the binaries' encounter time scale
                log.warning("step %d: the time step is %.2g of the central crossing time "
                            "(column dt_tcross), set by the binaries' time scales (at most "
                            "binaries.dt_fraction_bs of T_bs = %.3g and dt_fraction_bb of "
                            "T_bb = %.3g t_NB, as CMC): wide (soft) binaries in the core have "
                            "large cross-sections and make them short (primordial binaries "
                            "reach initial.binary_a_max hard/soft boundaries).  The orbit step "
                            "then redraws the central stars' radii several times per orbit "
                            "(docs/method.md, 'Few stars carrying the central mass')",
                            st.step, d["dt_tcross"], t_bs, t_bb)
            else:
                log.warning("step %d: the time step is %.2g of the central crossing time "
                            "(column dt_tcross): a few stars carry the central mass (heavy "
                            "stars of a mass spectrum at small N, or a core of few stars), and "
                            "the orbit step redraws their radii several times per orbit.  The "
                            "potential jumps this causes heat and unbind light stars per step, "
                            "not per unit time (E_deficit, unbound escapers); results at this N "
                            "and mass range are not converged (docs/method.md, 'Few stars "
                            "carrying the central mass')", st.step, d["dt_tcross"])
        return d

    def _wait_for_ranks(self, t: float) -> float:
        """(bench, ``measure_wait``) Barrier, its time booked as "wait"; the time after it."""
        if not self.measure_wait:
            return t
        self.comm.Barrier()
        now = time.perf_counter()
        self.timers["wait"] += now - t
        return now

    # ------------------------------------------------------------------ escaper table
    def _note_escapers(self, rows: dict[str, np.ndarray], r: np.ndarray, e_spec: np.ndarray,
                       kind) -> None:
        """Keep the records of objects leaving in this step (local rows, as they left: radius
        ``r`` [r_vir] and specific energy ``e_spec``); gathered at the end of the step."""
        if self.outdir is None or len(r) == 0:
            return
        n = len(r)
        rec = {f.name: np.asarray(rows[f.name], dtype=f.dtype) if f.name in rows
               else np.full(n, f.default, dtype=f.dtype)
               for f in escaper_columns(self.stars.has_binary_fields)}
        rec["r"] = np.asarray(r, dtype=np.float64)
        rec["E"] = np.asarray(e_spec, dtype=np.float64)
        rec["J"] = rec["r"] * rec["vt"]
        rec["kind"] = np.broadcast_to(np.asarray(kind, dtype=np.int8), (n,)).copy()
        self._esc_local.append(rec)

    def _escaper_template(self) -> dict[str, np.ndarray]:
        return {f.name: np.zeros(0, dtype=f.dtype)
                for f in escaper_columns(self.stars.has_binary_fields)}

    def _gather_escapers(self, n_left: int) -> None:
        """Gather this step's escaper records on rank 0 (collective; runs with an output
        folder only, and only when ``n_left``, the step's escapers over all ranks, is not 0),
        stamped with the step, time and tidal radius, in a fixed order (kind, then id) that
        does not depend on the number of ranks."""
        if self.outdir is None or n_left == 0:
            self._esc_local = []
            return
        parts = self._esc_local
        self._esc_local = []
        mine = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else None
        everyone = self.comm.gather(mine, root=0)
        if self.rank != 0:
            return
        got = [p for p in everyone if p is not None]
        if not got:
            return
        rows = {k: np.concatenate([p[k] for p in got]) for k in got[0]}
        order = np.lexsort((rows["id"], rows["kind"]))
        rows = {k: v[order] for k, v in rows.items()}
        rows["step"][:] = self.state.step
        rows["time"][:] = self.state.time
        rows["r_tidal"][:] = self.state.r_tidal
        self._esc_rows.append(rows)

    def _open_escapers(self) -> None:
        """Start escapers.h5 (rank 0): on restart, the rows up to the checkpoint's step read
        back from the old file (later ones are recomputed), then append."""
        path = self.outdir / "escapers.h5"
        rows = self._escaper_template()
        if self.state.step > 0:
            try:
                old, _ = cio.read_diagnostics(path, max_step=self.state.step)
                rows = {k: old[k] if k in old else np.full(old["step"].size, v.dtype.type(0))
                        for k, v in rows.items()}
            except InputError:
                log.info("no escaper table to continue in %s: escapers.h5 starts at step %d",
                         self.outdir, self.state.step)
            except DamagedFileError as exc:
                # not replaced silently: its rows are the only record of the escapers so far
                raise DamagedFileError(
                    f"{exc}, or move it aside to continue without the escapers up to step "
                    f"{self.state.step}") from None
        cols = {f.name: f for f in escaper_columns(self.stars.has_binary_fields)}
        self._esc = cio.DiagnosticsWriter(
            path, {"n0": self.state.n0, **self.units.attrs(), **self.provenance()},
            {k: f.unit for k, f in cols.items()}, {k: f.meaning for k, f in cols.items()},
            rows)

    def _flush_escapers(self) -> None:
        if self._esc is None:
            self._open_escapers()
        if self._esc_rows:
            rows = {k: np.concatenate([p[k] for p in self._esc_rows]) for k in self._esc_rows[0]}
            self._esc.append(rows)
            self._esc_rows = []

    def _relax_and_select(self, states: np.ndarray, dt: float, coulomb_ratio: float,
                          beta_stats: np.ndarray, p_stats: np.ndarray) -> tuple:
        """Relaxation with strong-encounter selection, three-body and wide-binary selection.

        Returns the arguments of :func:`physics.encounters.apply_events` after ``states``:
        (encounter, enc_phi, enc_w, formed, block_stats, wide).
        """
        st = self.state
        stars = self.stars
        phys = self.phys
        n = stars.n
        nb = states.shape[0]
        n0 = float(st.n0)
        dt_nb = dt * st.n0 / st.lnl0
        is_bin = stars.binind >= 0
        # wide binaries first: they are broken this step and meet no one (a wide binary's
        # cross section would make it meet someone in every step, so it would never break)
        wide = np.zeros(n, dtype=np.bool_)
        if phys.wide_factor > 0.0 or phys.wide_hardness_min > 0.0:
            enc.select_wide_binaries(self.r_all, self.offset, stars.m, stars.vr, stars.vt, is_bin,
                                     stars.bin_m1, stars.bin_m2, stars.bin_a, stars.bin_e, n0,
                                     phys.wide_factor, phys.wide_hardness_min, wide)
        npairs = n // 2 + 1
        encounter = np.zeros(npairs, dtype=np.bool_)
        enc_phi = np.zeros(npairs)
        enc_w = np.zeros(npairs)
        relax_or_select_pairs(self.r_all, self.offset, stars.m, stars.vr, stars.vt, stars.bin_a,
                              is_bin & ~wide, wide, states, dt, n0, coulomb_ratio, dt_nb,
                              phys.x_bs, phys.x_bb, phys.binary_single, phys.binary_binary,
                              beta_stats, encounter, enc_phi, enc_w, p_stats)
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
                enc.select_three_body(self.r_all, self.offset, stars.m, stars.vr, stars.vt,
                                      eligible, states, n0, dt_nb, phys.eta_min,
                                      phys.three_body_neighbours, formed, block_stats,
                                      np.zeros((nb, 2)))
        return encounter, enc_phi, enc_w, formed, block_stats, wide

    def _integrate_encounters(self, states: list, settings: EncounterSettings) -> list:
        """This step's encounters of all ranks, dealt round-robin over the ranks (collective).

        Encounters happen where the binaries meet, in the centre, which rank 0 holds: each
        rank integrates every P-th of all ranks' encounters (each on its threads), and the
        outcomes go back to their owners.  An outcome is a function of its initial state only,
        so the result does not depend on who integrates it.
        """
        if self.size == 1:
            return enc.integrate_concurrently(states, settings)
        everyone = self.comm.allgather(states)
        flat = [s for part in everyone for s in part]
        mine = enc.integrate_concurrently(flat[self.rank::self.size], settings)
        for out in mine:
            if out is not None:
                out.initial = None  # the owner has it
        done = self.comm.allgather(mine)
        first = sum(len(part) for part in everyone[:self.rank])
        outs = []
        for j in range(first, first + len(states)):
            out = done[j % self.size][j // self.size]
            if out is not None:
                out.initial = flat[j]
            outs.append(out)
        return outs

    def _strip(self, gidx: np.ndarray, r_apo: np.ndarray, status: np.ndarray,
               r_new: np.ndarray, vr_new: np.ndarray, vt_new: np.ndarray, phi_oo: np.ndarray,
               phi_on: np.ndarray) -> float:
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

        Sets ``state.r_tidal`` and ``self._dm_tidal`` (the mass that left in the kernel and
        by stripping; 0 when isolated: it only shortens the tidal step).  Returns the mutual
        energy of all the rows that leave (the double count in their ``m (phi + v^2/2)``).
        """
        st = self.state
        m = self.stars.m
        leaving = (status != ORBIT_OK) & (status != ORBIT_REMOVED)  # removed: already gone
        parts = [self._gather_rows(gidx[leaving], m[leaving])]
        r_t = st.r_tidal
        if self.cfg.tidal.mode == "shrinking":
            m_slots = float(self.mcum_all[-1])
            while True:
                left = np.concatenate(parts)
                r_t = tidal_radius(st.r_t0, m_slots - float(np.sum(left[:, 1])), st.m0)
                new = (status == ORBIT_OK) & (r_apo > r_t)
                got = self._gather_rows(gidx[new], m[new])
                if got.shape[0] == 0:
                    break
                status[new] = ORBIT_ESCAPED_TIDAL
                r_new[new] = self.r_all[gidx[new]]
                vr_new[new] = self.stars.vr[new]
                vt_new[new] = self.stars.vt[new]
                phi_on[new] = phi_oo[new]
                parts.append(got)
            st.r_tidal = r_t
        left = np.concatenate(parts)
        self._dm_tidal = float(np.sum(left[:, 1])) if self.cfg.tidal.mode != "isolated" else 0.0
        if left.shape[0] == 0:
            return 0.0
        r_s, m_s = self._shells(left)
        # the others' orbits were drawn in a potential that held the leaving stars: the
        # energy correction is made to see them leave at the start of the step (as unbound
        # stars do).  With phi_S their field, v_new^2 = v_old^2 + (U_oo - U_on) - (phi_S(r_o)
        # - phi_S(r_n)) + (U_no - U_nn); the correction reads phi_on - phi_oo, so both get
        # phi_S added.  Otherwise the stars that stay keep half of the kinetic energy they
        # gained or lost in the leaving stars' field, which the budget no longer holds.
        ok = status == ORBIT_OK
        phi_oo[ok] += shell_potential(r_s, m_s, self.r_all[gidx[ok]])
        phi_on[ok] += shell_potential(r_s, m_s, r_new[ok])
        return float(mutual_energy(r_s, m_s))

    def _shells(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Radii and masses of gathered (slot, mass) rows, sorted by slot (stably: the same
        bits on any number of ranks), as :func:`physics.tidal.mutual_energy` takes them."""
        order = np.argsort(rows[:, 0], kind="stable")
        return self.r_all[rows[order, 0].astype(np.int64)], np.ascontiguousarray(rows[order, 1])

    def _gather_rows(self, slots: np.ndarray, mass: np.ndarray) -> np.ndarray:
        """(slot, mass) rows of every rank in global row order, shape (k, 2) (collective)."""
        mine = np.empty((slots.size, 2))
        mine[:, 0] = slots
        mine[:, 1] = mass
        return allgatherv_array(self.comm, mine)

    def _remove_unbound(self, gidx: np.ndarray, status: np.ndarray,
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
        each segment (``row_bounds``, :meth:`_block_segments` in rows), shape (S, 4).
        ``own_slots``: every row is its own slot (``gidx`` is ``offset + row``, no strong
        encounters this step), so a removed row's slot is left empty.
        """
        s = self.stars
        e_spec = specific_energies(self.r_all, self.phi_all, gidx, s.m, s.vr, s.vt)
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
                              float(np.sum(s.m[mine])), mine.size, self._binding(s, sel))
            self._note_escapers(s.take(rows).as_dict(), self.r_all[gidx[rows]],
                                e_spec[rows], ESCAPE_UNBOUND)
            status[rows] = ORBIT_REMOVED
            slots = np.unique(gidx[rows])
            if own_slots:  # nothing else at a removed row's slot
                mass = np.zeros(slots.size)
            else:  # the mass left at each freed slot: the other rows there (products share)
                unbound = np.zeros(s.n, dtype=bool)
                unbound[rows] = True
                mass = enc.slot_masses(slots, gidx, s.m, skip=unbound)
        gone, _, _ = self._update_slot_masses(slots, mass, gidx[rows], s.m[rows])
        if gone.shape[0] > 1 and self.rank == 0:
            out[0, 0] -= float(mutual_energy(*self._shells(gone)))
        return out

    def _update_slot_masses(self, slots: np.ndarray, slot_mass: np.ndarray,
                            gone_slots: np.ndarray | None = None,
                            gone_mass: np.ndarray | None = None,
                            changes: np.ndarray | None = None,
                            debts: np.ndarray | None = None
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Put the masses of this step's event products into the replicated arrays (every
        rank's changes, one Allgatherv) and recompute the potential the orbits are drawn in.

        ``gone_slots, gone_mass`` (slot and mass of each object removed), ``changes`` (rows
        ``(event key, slot, mass change)`` of the events, :func:`apply_events`) and ``debts``
        (rows ``(global block, energy)``, its ``debts``) travel in the same message; returns
        those of all ranks in global row order: (slot, mass) of the removed, shape (k, 2), the
        changes, shape (j, 3), and the debts, shape (d, 2).
        """
        if gone_slots is None:
            gone_slots, gone_mass = np.zeros(0), np.zeros(0)
        if changes is None:
            changes = np.zeros((0, 3))
        if debts is None:
            debts = np.zeros((0, 2))
        # (slot, mass, 0, 0) for an update, (slot, mass, 1, 0) for an object gone,
        # (slot, mass change, 2, event key) for an event's change, (block, energy, 3, 0) for
        # a block's debt
        nu, ng, nc, nd = slots.size, gone_slots.size, changes.shape[0], debts.shape[0]
        mine = np.column_stack((
            np.concatenate((slots, gone_slots, changes[:, 1], debts[:, 0])).astype(np.float64),
            np.concatenate((slot_mass, gone_mass, changes[:, 2], debts[:, 1])),
            np.repeat([0.0, 1.0, 2.0, 3.0], [nu, ng, nc, nd]),
            np.concatenate((np.zeros(nu + ng), changes[:, 0], np.zeros(nd)))))
        allc = allgatherv_array(self.comm, mine)
        gone = allc[allc[:, 2] == 1.0, :2]
        ev = allc[allc[:, 2] == 2.0]
        owed = allc[allc[:, 2] == 3.0, :2]
        upd = allc[allc[:, 2] == 0.0]
        if upd.shape[0]:
            changed = upd[:, 0].astype(np.int64)
            if self.replicas is not None:  # the node's copy, in place: its ranks share the
                # work (the same bits as below)
                self.m_all, self.phi_all, self.mcum_all = self.replicas.update_masses(
                    changed, upd[:, 1], POTENTIAL_STAGES)
                return gone, ev[:, [3, 0, 1]], owed
            self.m_all = self.m_all.copy()
            self.m_all[changed] = upd[:, 1]
            # only the shells from the innermost changed one on are summed again; inside it
            # the potential moves by a constant (the unbound stars leave from near the centre
            # as often as not, so the saving is small in a run)
            self.phi_all, self.mcum_all = updated_potential(
                self.r_all, self.m_all, self.phi_all, self.mcum_all, int(changed.min()))
        return gone, ev[:, [3, 0, 1]], owed

    def _binary_timescales(self) -> tuple[float, float]:
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
        n_central_blocks = (CENTRAL_STARS + MIN_CHUNK - 1) // MIN_CHUNK
        first_block = self.offset // MIN_CHUNK
        s = self.stars
        local = enc.central_block_sums(s.m, s.vr, s.vt, s.binind >= 0, s.bin_a,
                                       max(0, min(n_central_blocks - first_block,
                                                  (s.n + MIN_CHUNK - 1) // MIN_CHUNK)))
        sums = allgatherv_array(self.comm, local)
        tot = np.zeros(sums.shape[1]) if sums.size else np.zeros(8)
        for row in sums:  # block order, whatever the ranks
            tot += row
        n_s, n_b, _, a_sum, a2_sum, mb_sum, ma_sum, v2_bin = tot
        if self._central_means is None:  # (first step, or after a restart) the same sums as
            # the diagnostics make, so the same bits
            self._central_means = _central_means(ranked_sum(self.comm, self._structure_sums()))
        n_c = int(n_s + n_b)
        if n_b == 0 or n_c < 2:
            return math.inf, math.inf
        vol = 4.0 / 3.0 * math.pi * float(self.r_all[n_c - 1]) ** 3
        m_ave, v2_ave = self._central_means
        b = self.cfg.binaries
        t_bs = binary_single_timescale(n_s / vol, math.sqrt(v2_ave / 3.0), a_sum / n_b,
                                       a2_sum / n_b, m_ave, b.x_bs)
        t_bb = binary_binary_timescale(n_b / vol, math.sqrt(v2_bin / (3.0 * n_b)),
                                       a2_sum / n_b, ma_sum / n_b, b.x_bb)
        return t_bs, t_bb

    def _take_deficit(self, deficit: np.ndarray, event_debts: np.ndarray | None = None
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
        stars = self.stars
        # one message: both columns, every rank's block count from the layout (the step's
        # sort left each rank its block_counts share)
        rows = (block_counts(self.n_total, self.size) + MIN_CHUNK - 1) // MIN_CHUNK
        both = allgatherv_array(self.comm, np.column_stack((
            deficit, block_kinetic(stars.m, stars.vr, stars.vt, MIN_CHUNK))), rows=rows)
        debts, kes = np.ascontiguousarray(both[:, 0]), np.ascontiguousarray(both[:, 1])
        owed = np.zeros_like(debts)
        if event_debts is not None and event_debts.shape[0] and owed.size:
            at = np.minimum(event_debts[:, 0].astype(np.int64), owed.size - 1)
            np.add.at(owed, at, event_debts[:, 1])  # in row order: the same bits everywhere
            self.state.e_taken += float(np.sum(event_debts[:, 1]))
        pay, left = settle_debts(debts + owed, kes, TAKE_FRACTION)
        first = self.offset // MIN_CHUNK
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
        self.state.e_deficit += float(np.sum(debts))
        log.debug("energy deficit %.3e passed on (%.3e taken from all stars)",
                  float(np.sum(debts)), left)

    # ------------------------------------------------------------------ diagnostics
    def _binary_sums(self) -> np.ndarray:
        """Internal energy and number of the binaries of each segment (:meth:`_star_segments`),
        shape (S, 2); zeros without binaries."""
        s = self.stars
        bounds = self._star_segments()
        out = np.zeros((bounds.size - 1, 2))
        if not s.has_binary_fields:
            return out
        for j in range(bounds.size - 1):
            mask = np.zeros(s.n, dtype=bool)
            mask[bounds[j]:bounds[j + 1]] = True
            out[j, 0] = self._binding(s, mask)
            out[j, 1] = float(np.count_nonzero(s.binind[bounds[j]:bounds[j + 1]] >= 0))
        return out

    @staticmethod
    def _binding(stars: StarTable, mask: np.ndarray | None = None) -> float:
        """Internal energy of the (selected) local binaries."""
        if not stars.has_binary_fields:
            return 0.0
        b = stars.binind >= 0
        if mask is not None:
            b &= mask
        return float(np.sum(binding_energy(stars.bin_m1[b], stars.bin_m2[b], stars.bin_a[b])))

    def _central_v2(self) -> np.ndarray:
        """Each segment's (:meth:`_star_segments`) sum of v^2 over its objects among the
        innermost :data:`CENTRAL_STARS`, shape (S,)."""
        s = self.stars
        bounds = self._star_segments()
        out = np.zeros(bounds.size - 1)
        for j, first in enumerate(self._segment_offsets()):
            a = bounds[j]
            k = min(bounds[j + 1] - a, max(0, CENTRAL_STARS - int(first)))
            out[j] = float(np.sum(s.vr[a:a + k] ** 2 + s.vt[a:a + k] ** 2))
        return out

    def _window_min(self, coulomb_ratio: float) -> float:
        """The smallest relaxation time of the time-step windows (``run.dt_window`` stars),
        the same bits on every rank and in the serial emulation (collective).

        The windows are fixed in the global block order.  Under MPI each rank evaluates those
        in its own blocks and sends their minimum with the moments of its blocks in windows
        that straddle a rank boundary (:func:`physics.relaxation.window_boundary_rows`), so
        one gather of O(P) rows replaces gathering every block's moments (1.6 bytes per star)
        and every rank evaluating all N/20 windows.  Each window gets the same operations as
        in :func:`physics.relaxation.window_relaxation_times` and a minimum is exact.
        """
        stars = self.stars
        n0 = float(self.state.n0)
        width = self.cfg.run.dt_window // MIN_CHUNK
        moments = block_moments(stars.m, stars.vr, stars.vt, n0)
        if self.size == 1:
            tb = window_relaxation_times(self.r_all, moments, n0, coulomb_ratio, width)
            return float(tb.min()) if tb.size else np.inf
        block0 = self.offset // MIN_CHUNK
        nb_total = (self.n_total + MIN_CHUNK - 1) // MIN_CHUNK
        inside = window_min_inside(self.r_all, moments, block0, nb_total, n0, coulomb_ratio,
                                   width)
        rows = np.vstack((np.array([[-1.0, inside, 0.0, 0.0, 0.0]]),
                          window_boundary_rows(moments, block0, nb_total, width)))
        # every rank's row count follows from the layout: one message, no sizes exchanged
        # (the counts kept while N stays: computing them costs what the message did)
        if self._window_rows[0] != (self.n_total, width):
            starts = rank_bounds(self.n_total, self.size)
            blocks = (np.diff(starts) + MIN_CHUNK - 1) // MIN_CHUNK
            self._window_rows = ((self.n_total, width), 1 + window_boundary_counts(
                starts[:-1] // MIN_CHUNK, blocks, nb_total, width))
        rows = allgatherv_array(self.comm, rows, rows=self._window_rows[1])
        mins = rows[rows[:, 0] < 0.0, 1]
        edge = np.ascontiguousarray(rows[rows[:, 0] >= 0.0])
        return float(np.min(np.append(mins, window_min_straddling(
            self.r_all, edge, n0, coulomb_ratio, width))))

    def _half_mass_radius(self) -> float:
        """r_h from the replicated arrays (the same on every rank)."""
        return float(lagrange_radii(self.r_all, self.m_all, np.array([0.5]), self.mcum_all)[0])

    def _structure_sums(self) -> np.ndarray:
        """Each segment's (:meth:`_star_segments`) share of the potential energy and of the
        core's Casertano-Hut sums (:func:`physics.structure.core_sums`), shape (S, 6).

        Every rank sums its own stars of the replicated arrays (their neighbours are there
        too), so these passes over all N divide by the number of ranks instead of being
        repeated by every rank; one segment gives the bits of the whole-array functions
        (:func:`physics.potential.potential_energy`,
        :func:`physics.structure.core_properties`), on any number of threads
        (:mod:`physics.sums`).
        """
        bounds = self._star_segments()
        out = np.zeros((bounds.size - 1, STRUCTURE_SUMS))
        r_h = self._half_mass_radius() if self.n_total else 0.0
        s = self.stars
        for j, first in enumerate(self._segment_offsets()):
            a, b = int(first), int(first) + int(bounds[j + 1] - bounds[j])
            out[j, 0] = potential_energy_sum(self.r_all, self.m_all, self.phi_all, a, b)
            # the squared speeds of this segment's own rows inside r_h (the sums stop there):
            # CMC's density-weighted v_rms, for T_bs (runs with binaries only)
            k = int(np.searchsorted(self.r_all[a:b], r_h, side="right"))
            rows = slice(int(bounds[j]), int(bounds[j]) + k)
            v2 = s.vr[rows] ** 2 + s.vt[rows] ** 2 if s.has_binary_fields else np.zeros(0)
            out[j, 1:] = core_sums(self.r_all, self.m_all, r_h, a, a + k, v2)
        return out

    def _kinetic(self) -> np.ndarray:
        """Each segment's (:meth:`_star_segments`) kinetic energy, shape (S,): the bits of
        ``0.5 * np.sum(m * (vr**2 + vt**2))``, threaded (:func:`physics.sums.kinetic_energy`)."""
        s = self.stars
        bounds = self._star_segments()
        return np.array([kinetic_energy(s.m, s.vr, s.vt, int(a), int(b))
                         for a, b in zip(bounds[:-1], bounds[1:], strict=True)])

    def diagnostics(self, record: bool = True, extra: dict | None = None,
                    kinetic: float | None = None,
                    binaries: tuple[float, float] | None = None,
                    central_v2: float | None = None,
                    structure: np.ndarray | None = None) -> dict:
        """Energies, radii and core quantities now; appended to the history if ``record``.

        ``kinetic`` is the global kinetic energy, ``binaries`` the global (internal energy,
        number) of the binaries, ``central_v2`` the sum of v^2 over the central 300 objects
        and ``structure`` the sums of :meth:`_structure_sums` when the caller already reduced
        them (the step packs them with its other sums); otherwise they are reduced here.
        """
        st = self.state
        s = self.stars
        if kinetic is None or binaries is None or central_v2 is None or structure is None:
            red = ranked_sum(self.comm, np.column_stack((self._kinetic(), self._binary_sums(),
                                                         self._central_v2(),
                                                         self._structure_sums())))
            kinetic = float(red[0]) if kinetic is None else kinetic
            binaries = (red[1], red[2]) if binaries is None else binaries
            central_v2 = float(red[3]) if central_v2 is None else central_v2
            structure = red[4:] if structure is None else structure
        k = kinetic
        e_bind, n_bin = float(binaries[0]), float(binaries[1])
        # CMC's central velocity dispersion and Spitzer core radius (its dyn.dat columns)
        v0_rms = math.sqrt(central_v2 / max(1, min(CENTRAL_STARS, self.n_total)))
        w = float(structure[0])
        mtot = float(self.mcum_all[-1]) if self.n_total else 0.0
        lr = lagrange_radii(self.r_all, self.m_all, self.fractions, self.mcum_all)
        m_lr = lagrange_mean_masses(self.m_all, self.fractions, self.mcum_all)
        r_h = self._half_mass_radius()
        r_c, rho_c, n_core = core_from_sums(np.asarray(structure[1:], dtype=np.float64))
        self._central_means = _central_means(structure)
        # the whole budget: bound, escaped, binaries' internal energy (bound and escaped),
        # less what binary processes owe and could not take from their neighbours, what
        # mergers dissipated and the few-body integrator's energy error
        e_tot = (k + w + st.e_escaped + st.e_stripped + e_bind + st.e_bind_escaped - st.e_oops
                 - st.e_mergers - st.e_integrator)
        f_bin_core = 0.0
        if s.has_binary_fields:
            n_obj_core = int(np.searchsorted(self.r_all, r_c, side="right"))
            nbc = allreduce_sum(self.comm, np.array([
                np.count_nonzero((s.binind >= 0) & (s.r <= r_c))]))[0]
            f_bin_core = float(nbc) / max(n_obj_core, 1)
        unit_nb = st.n0 / st.lnl0
        d = {
            "step": st.step, "time": st.time, "time_nb": st.time * unit_nb,
            "time_myr": self.units.rel_to_myr(st.time),
            "time_trh": st.time / st.t_rh0 if st.t_rh0 > 0 else 0.0,
            "N": self.n_total, "M": mtot, "K": k, "W": w, "E_bound": k + w,
            "E_escaped": st.e_escaped, "E_tot": e_tot,
            "dE_rel": (e_tot - st.e0) / abs(st.e0) if st.e0 else 0.0,
            "M_escaped": st.m_escaped, "N_escaped": st.n_escaped,
            "E_deficit": st.e_deficit, "r_h": r_h, "r_c": r_c, "rho_c": rho_c,
            "N_core": n_core, "lagrange_radii": lr, "m_mean_lagrange": m_lr,
            "virial_ratio": 2.0 * k / abs(w) if w else 0.0,
            "N_binaries": n_bin, "E_binding": e_bind, "E_binding_escaped": st.e_bind_escaped,
            "binary_fraction": n_bin / max(self.n_total, 1),
            "binary_fraction_core": f_bin_core, "E_encounters": st.e_encounters,
            "E_three_body": st.e_three_body, "E_taken": st.e_taken, "E_oops": st.e_oops,
            "E_slots": st.e_slots, "E_ejected": st.e_ejected, "E_mergers": st.e_mergers,
            "E_integrator": st.e_integrator,
            "r_tidal": st.r_tidal, "M_stripped": st.m_stripped, "N_stripped": st.n_stripped,
            "E_stripped": st.e_stripped,
            "r_max": float(self.r_all[-1]) if self.n_total else 0.0, "v0_rms": v0_rms,
            "rc_spitzer": math.sqrt(3.0 * v0_rms ** 2 / (4.0 * math.pi * rho_c))
            if rho_c > 0.0 else 0.0,
        }
        base = {"dt": 0.0, "trials_per_star": 0.0, "bound_violations": 0.0, "beta_mean": 0.0,
                "beta_capped": 0.0, "n_escaped_step": 0.0, "T_bs": math.inf, "T_bb": math.inf,
                "n_binary_pairs": 0.0, "n_p_over_1": 0.0, "n_stripped_step": 0.0,
                **dict.fromkeys(EVENT_COUNTS, 0.0)}
        base.update(extra or {})
        d.update(base)
        # the step over the central crossing time r_c / v0_rms (both N-body units; 0 before
        # the first step): below 1 the orbit step redraws the central orbits' phases several
        # times per orbit (docs/method.md, "Few stars carrying the central mass")
        t_cross_c = r_c / v0_rms if v0_rms > 0.0 else 0.0
        d["dt_tcross"] = base["dt"] * unit_nb / t_cross_c if t_cross_c > 0.0 else 0.0
        if record:
            for key, v in d.items():
                self.history.setdefault(key, []).append(v)
            self.last = d
            self.n_rows += 1
            window = json.loads(st.core_window)[-(CORE_STOP_WINDOW - 1):]
            window.append([float(d["N_core"]),
                           float(d["r_c"] / d["r_h"]) if d["r_h"] > 0 else 0.0])
            st.core_window = json.dumps(window)  # (repr of floats: every bit round-trips)
        return d

    # ------------------------------------------------------------------ output
    def gather_stars(self) -> dict[str, np.ndarray] | None:
        """All stars' saved fields in global order on rank 0 (None elsewhere)."""
        parts = self.comm.gather(self.stars.saved_dict(), root=0)
        if self.rank != 0:
            return None
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def provenance(self) -> dict:
        """Attributes every output file carries: code version, parameters, MPI size, start
        time and the restart overrides."""
        from cmc import __version__

        st = self.state
        return {"cmc_version": __version__, "config": self.cfg.to_ini(), "mpi_size": self.size,
                "emulated_ranks": self.n_emul, "start_time": st.start_time,
                "overrides": st.overrides}

    def _attrs(self) -> dict:
        st = self.state
        return {"step": st.step, "time": st.time, "time_trh": st.time / st.t_rh0,
                "time_myr": self.units.rel_to_myr(st.time), "r_tidal": st.r_tidal,
                "r_tidal_model": st.r_tidal_model, "metallicity": st.metallicity,
                "n_ranks": self.size, "time_unit": DIAG_UNITS["time"], **self.units.attrs(),
                **self.provenance()}

    def write_snapshot(self) -> None:
        """Write ``snapshots/snap_STEP.h5`` (collective)."""
        glob = self.gather_stars()

        def write() -> None:
            d = self.outdir / "snapshots"
            d.mkdir(parents=True, exist_ok=True)
            path = d / f"snap_{self.state.step:07d}.h5"
            cio.check_free_space(path, 8 * len(glob["r"]) * (len(glob) + 2))
            cio.write_snapshot(path, glob, self._attrs())

        if self.outdir is not None:
            self._on_root(write)
        self._snap_step = self.state.step

    def _on_root(self, fn) -> None:
        """Run rank 0's share of a collective write, ``fn()``; if it fails, every rank raises
        (rank 0 the error itself, the others a :class:`CmcError` with its message and exit
        code), marked collective: no rank is left waiting in the next collective, and the
        command line ends every rank without aborting the job."""
        failure = None
        if self.rank == 0:
            try:
                fn()
            except Exception as exc:
                if self.size == 1:
                    raise
                failure = exc
        if self.size == 1:
            return
        note = None
        if failure is not None:
            if isinstance(failure, CmcError):
                code = failure.exit_code
            elif isinstance(failure, OSError) or is_disk_full(failure):
                code = EXIT_IO
            else:
                code = EXIT_INTERNAL
            note = (code, f"on rank 0: {type(failure).__name__}: {failure}")
        note = self.comm.bcast(note, root=0)
        if note is None:
            return
        if failure is None:
            failure = CmcError(note[1])
            failure.exit_code = note[0]
        failure.collective = True
        raise failure

    def _diagnostics_attrs(self) -> dict:
        st = self.state
        return {"lagrange_fractions": self.fractions, "stop_reason": st.stop_reason,
                "t_rh0": st.t_rh0, "n0": st.n0, "e0": st.e0, "r_c0": st.r_c0,
                "time_unit": DIAG_UNITS["time"], "m0": st.m0, "r_t0": st.r_t0,
                "tidal_mode": self.cfg.tidal.mode, **self.units.attrs(), **self.provenance()}

    def open_diagnostics(self) -> None:
        """Start diagnostics.h5 (collective; rank 0 writes): the rows so far (on restart: the
        rows up to the checkpoint, read back from the old file) in a fresh file, then append
        from there."""
        if self.outdir is None:
            return
        self._on_root(self._open_diagnostics_root)
        self.history = {k: [] for k in self.last}

    def _open_diagnostics_root(self) -> None:
        """Rank 0's part of :meth:`open_diagnostics` (the caller empties the history)."""
        path = self.outdir / "diagnostics.h5"
        rows = self.history
        if self.n_rows > len(self.history.get("step", [])):
            # a restart: the earlier rows are in the old file (SWMR keeps it readable after a
            # kill); rows written after the checkpoint are dropped, they will be recomputed
            try:
                old, _ = cio.read_diagnostics(path, max_step=self.state.step)
            except InputError as exc:
                raise InputError(f"{exc}; the checkpoint needs its {self.n_rows} rows of "
                                 "diagnostics history") from None
            except DamagedFileError as exc:
                # the rows are in this file alone (not in the checkpoint): a whole copy, or
                # the run again from the start (bit for bit the same), brings them back
                raise DamagedFileError(
                    f"{exc} (the checkpoint at step {self.state.step} needs its first "
                    f"{self.n_rows} rows); without them the run cannot be continued: start it "
                    "afresh") from None
            if old["step"].size != self.n_rows:
                raise InputError(f"{path} holds {old['step'].size} rows up to step "
                                 f"{self.state.step}, the checkpoint expects "
                                 f"{self.n_rows}: it belongs to another run")
            rows = {k: list(v) for k, v in old.items()}
            missing = [k for k in self.last if k not in rows]
            if missing:
                # a run begun by an older version: its rows lack the newer columns
                log.info("diagnostics.h5 of an older version: columns %s start at step "
                         "%d (earlier rows hold 0)", ", ".join(missing), self.state.step)
                for k in missing:
                    rows[k] = [np.zeros_like(np.asarray(self.last[k]))] * self.n_rows
        if self._esc is None:
            self._open_escapers()
        self._diag = cio.DiagnosticsWriter(path, self._diagnostics_attrs(), DIAG_UNITS,
                                           DIAG_MEANINGS, rows)

    def write_diagnostics(self) -> None:
        """Append the rows recorded since the last flush to diagnostics.h5 (rank 0) and drop
        them from memory (every rank)."""
        if self.outdir is None:
            return

        def write() -> None:
            self._flush_escapers()
            if self._diag is None:  # not opened by run(): opening writes the rows so far
                self._open_diagnostics_root()
            else:
                self._diag.append(self.history)

        self._on_root(write)
        self.history = {k: [] for k in self.last}

    def write_checkpoint(self) -> None:
        """Write ``checkpoint.h5`` (collective): stars, run state, streams; diagnostics are
        flushed first so that the checkpoint's ``diag_rows`` are on disk."""
        self.write_diagnostics()
        self.state.wall_seconds = self._wall_at_start + time.monotonic() - self._wall_start
        self.state.diag_rows = self.n_rows
        glob = self.gather_stars()
        # ranks grow their sub-stream tables as their blocks need (encounters draw from more
        # sub-streams), so they can differ in length; the table written is one array: every
        # rank first grows its own to the longest (the new sub-streams are the ones it would
        # make when it needs them, so nothing drawn changes)
        longest = int(allreduce_max(self.comm, np.array([float(self.streams.n_substreams)]))[0])
        self.streams.ensure_substreams(longest)
        tables = self.comm.gather(self.streams.states, root=0)

        def write() -> None:
            full = Streams(self.streams.seed, 0, np.concatenate(tables, axis=0))
            cio.write_checkpoint(self.outdir / "checkpoint.h5", glob, asdict(self.state),
                                 full.write_hdf5, self.cfg.to_ini(),
                                 keep=self.cfg.output.checkpoints_to_keep,
                                 extra_attrs=self.provenance())

        if self.outdir is not None:
            self._on_root(write)
        self._last_checkpoint = time.monotonic()

    # ------------------------------------------------------------------ the loop
    def _install_signal_handlers(self):
        def handler(signum, frame):
            self._signal = signum

        old = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                old[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread
                pass
        return old

    def core_stop(self) -> float:
        """N_core below which the run stops: ``run.n_core_stop``, or with -1 (auto) 100 for a
        run that cannot form binaries and 0 (off: runs go on through collapse) for one that
        can (binaries in the table, or ``binaries.three_body = all``)."""
        c = self.cfg.run
        if c.n_core_stop >= 0:
            return c.n_core_stop
        # the binary columns are there exactly when the run has or can form binaries
        # (:func:`cmc.initial.build_initial_stars`)
        return 0.0 if self.stars.has_binary_fields else 100.0

    def core_collapsed(self, d: dict) -> bool:
        """Whether the core-collapse stop holds (``core_collapse_ncore``).

        The median of N_core over the last :data:`CORE_STOP_WINDOW` recorded steps is below
        :meth:`core_stop`, and the median of r_c/r_h over the same steps is below its initial
        value over ``run.rc_rh_drop`` (docs/method.md, "Core collapse").  The medians keep one
        low N_core of a noisy core from stopping the run; the fall of r_c/r_h keeps a small
        cluster, whose N_core is below 100 long before its core collapses (a 2000-star King
        model at 2.5 t_rh0: r_c/r_h 0.24, initially 0.40, its collapse near 5.5), running
        to the collapse.  ``d`` is the latest recorded row (the window's last; a checkpoint of
        an older version has no window: ``d`` alone).
        """
        n_core_stop = self.core_stop()
        if n_core_stop <= 0:
            return False
        window = json.loads(self.state.core_window)
        if not window:
            window = [[d["N_core"], d["r_c"] / d["r_h"] if d["r_h"] > 0 else 0.0]]
        n_core, rc_rh = np.median(np.asarray(window, dtype=np.float64), axis=0)
        if not n_core < n_core_stop:
            return False
        drop = self.cfg.run.rc_rh_drop
        st = self.state
        return bool(drop <= 1.0 or st.r_h0 <= 0.0 or rc_rh * drop < st.r_c0 / st.r_h0)

    def _stop_reason(self, d: dict) -> str:
        c = self.cfg.run
        if self.core_collapsed(d):
            return "core_collapse_ncore"
        if c.rc_stop_fraction > 0 and d["r_c"] < c.rc_stop_fraction * self.state.r_c0:
            return "core_collapse_rc"
        if d["time_trh"] >= c.t_max:
            return "max_time"
        if c.t_max_myr > 0 and d["time_myr"] >= c.t_max_myr:
            return "max_time"
        if c.t_max_code > 0 and d["time"] >= c.t_max_code:
            return "max_time"
        if d["N"] < c.n_min_fraction * self.state.n0 or d["N"] < MIN_OBJECTS:
            return "dissolved"
        if self.state.step >= c.max_steps:
            return "max_steps"
        if abs(d["dE_rel"]) > c.energy_error_max:
            return "energy_error"
        return ""

    def warn_early_stop(self) -> None:
        """Warn when N_core starts near ``n_core_stop``: the run would stop within a few
        steps on N_core alone (``run.rc_rh_drop = 1``), or its stop rests on the fall of
        r_c/r_h alone."""
        stop = self.core_stop()
        n_core = self.last.get("N_core", math.inf)
        if stop > 0 and n_core < 2.0 * stop:
            drop = self.cfg.run.rc_rh_drop
            then = ("the run will stop within a few steps (core_collapse_ncore); set "
                    "run.n_core_stop lower (0: off) for a model this small" if drop <= 1.0
                    else f"the core-collapse stop rests on r_c/r_h falling by run.rc_rh_drop "
                    f"= {drop:g} alone (run.n_core_stop = 0: no such stop)")
            log.warning("the initial N_core = %.1f is within a factor 2 of run.n_core_stop = "
                        "%g: %s", n_core, stop, then)

    def run(self) -> str:
        """Step until a stop condition; write outputs; return the stop reason.

        Outputs of a run with ``outdir``: diagnostics.h5 (appended), checkpoints (written
        at step 0, every ``output.checkpoint_every`` steps or ``checkpoint_minutes``, and at
        the end), snapshots (start, every ``snapshot_every`` steps, and the final state).
        """
        out = self.cfg.output
        old = self._install_signal_handlers()
        if not self.state.start_time:
            self.state.start_time = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if self.state.step == 0:
            self.warn_early_stop()
        if self.outdir is not None:
            self.open_diagnostics()
            if self.state.step == 0:
                self.write_snapshot()
                self.write_checkpoint()
        reason = ""
        # this invocation's time: in the step's parts, in writing outputs, and the rest
        loop_start = time.perf_counter()
        step0 = self.state.step
        parts0 = dict(self.timers)
        star_steps = 0.0
        in_step = in_output = 0.0
        # steps in which any rank compiled kernels (cmc.compiling: a kernel's first use, or
        # all of them in a new checkout) are left out of the timing whole, parts, outputs and
        # loop, so that it times steady steps (a compile took 297 ms per step where steps
        # took 40)
        compiled = {"steps": 0, "star_steps": 0.0, "wall": 0.0, "step": 0.0, "output": 0.0,
                    "compile": 0.0, "parts": dict.fromkeys(PARTS, 0.0)}
        try:
            while not reason:
                t_step = time.perf_counter()
                compile0, parts_before = COMPILE_WATCH.seconds, dict(self.timers)
                step_before, output_before, n_step = in_step, in_output, self.n_total
                try:
                    star_steps += n_step
                    d = self.step()
                    reason = self._stop_reason(d)
                except StopRun as exc:
                    reason = f"error: {exc}"
                    d = self.last
                in_step += time.perf_counter() - t_step
                if self._fault is not None:
                    _inject_fault(self._fault, self.rank, self.state.step)
                wall = time.monotonic() - self._wall_start
                flags = allreduce_max(self.comm, np.array([
                    float(self._signal),
                    # per invocation: a batch job's limit (restarts get their own allowance)
                    float(self.cfg.run.max_wall_hours > 0
                          and wall > 3600 * self.cfg.run.max_wall_hours),
                    float(time.monotonic() - self._last_checkpoint
                          > 60 * out.checkpoint_minutes > 0),
                    float(COMPILE_WATCH.seconds > compile0)]))
                if not reason and flags[0]:
                    reason = "signal"
                if not reason and flags[1]:
                    reason = "wall_clock"
                step = self.state.step
                if step % out.progress_every == 0 or reason:
                    tidal = ""
                    if self.state.r_t0 > 0.0:
                        tidal = (f" M={d.get('M', 0):.4f} stripped={d.get('M_stripped', 0):.4f}"
                                 f" r_t={d.get('r_tidal', 0):.4g}")
                    log.info("step %d t=%.4f t_rh0 (%.4g Myr) dt=%.3e N=%d r_c=%.4g r_h=%.4g "
                             "N_core=%.1f dE/E0=%.2e%s", step, d.get("time_trh", 0),
                             d.get("time_myr", 0), d.get("dt", 0), d.get("N", 0),
                             d.get("r_c", 0), d.get("r_h", 0), d.get("N_core", 0),
                             d.get("dE_rel", 0), tidal)
                t_out = time.perf_counter()
                if out.snapshot_every and step % out.snapshot_every == 0 and not reason:
                    self.write_snapshot()
                if step % out.diagnostics_every == 0 and not reason:
                    self.write_diagnostics()
                if (step % out.checkpoint_every == 0 or flags[2]) and not reason:
                    self.write_checkpoint()
                in_output += time.perf_counter() - t_out
                if flags[3]:
                    log.info("step %d compiled kernels (%.1f s on rank 0): left out of the "
                             "timing", step, COMPILE_WATCH.seconds - compile0)
                    compiled["steps"] += 1
                    compiled["star_steps"] += n_step
                    compiled["wall"] += time.perf_counter() - t_step
                    compiled["step"] += in_step - step_before
                    compiled["output"] += in_output - output_before
                    compiled["compile"] += COMPILE_WATCH.seconds - compile0
                    for p in PARTS:
                        compiled["parts"][p] += self.timers[p] - parts_before[p]
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)
        self.state.stop_reason = reason
        log.info("stopped after step %d: %s", self.state.step, reason)
        t_out = time.perf_counter()
        self.write_checkpoint()
        if self._snap_step != self.state.step:
            self.write_snapshot()
        in_output += time.perf_counter() - t_out
        self.timing = self._timing_summary(self.state.step - step0, star_steps,
                                           time.perf_counter() - loop_start, in_step, in_output,
                                           parts0, compiled)

        def close() -> None:
            if self._diag is not None:
                self._diag.close({"stop_reason": reason, "overrides": self.state.overrides,
                                  "timing": json.dumps(self.timing)})
            if self._esc is not None:
                self._esc.close()

        self._on_root(close)
        self.release_shared_memory()
        return reason

    def release_shared_memory(self) -> None:
        """Give the node's shared windows back (collective; the end of :meth:`run`): the
        replicated arrays become this rank's own copies, later steps gather them as without
        shared memory (the same bits)."""
        if self.replicas is None:
            return
        self.r_all, self.m_all, self.phi_all, self.mcum_all = (
            np.array(a) for a in (self.r_all, self.m_all, self.phi_all, self.mcum_all))
        self.replicas.close()
        self.replicas = None

    def _timing_summary(self, steps: int, star_steps: float, wall: float, in_step: float,
                        in_output: float, parts0: dict[str, float],
                        compiled: dict | None = None) -> dict:
        """Where this invocation of :meth:`run` spent its time (collective: each figure the
        slowest rank's); logged and kept as the ``timing`` attribute of diagnostics.h5.

        Seconds in all: ``wall`` (the step loop, from the first step to the final outputs),
        each part of the step (:data:`PARTS`; their sum is less than the time in
        :meth:`step`, whose untimed remainder is ``step_other``), ``output`` (snapshots,
        diagnostics rows, checkpoints) and ``loop_other`` (stop checks, progress lines,
        signal and wall-clock reductions).  ``star_steps`` is the sum over the steps of the
        number of objects.

        ``compiled`` (from :meth:`run`): the steps in which kernels compiled, with their
        share of each figure, which is taken out; ``steps`` are then the steps timed,
        ``steps_compiling`` those left out and ``compile_s`` the compilation in them.
        """
        c = compiled or {"steps": 0, "star_steps": 0.0, "wall": 0.0, "step": 0.0,
                         "output": 0.0, "compile": 0.0, "parts": {}}
        steps -= c["steps"]
        star_steps -= c["star_steps"]
        wall, in_step, in_output = wall - c["wall"], in_step - c["step"], in_output - c["output"]
        parts = {p: self.timers[p] - parts0.get(p, 0.0) - c["parts"].get(p, 0.0) for p in PARTS}
        step_other = in_step - sum(parts.values())
        mine = np.array([wall, in_step, in_output, step_other, c["compile"], *parts.values()])
        worst = allreduce_max(self.comm, mine)
        wall, in_step, in_output, step_other, compile_s = (float(x) for x in worst[:5])
        parts = dict(zip(PARTS, (float(x) for x in worst[5:]), strict=True))
        out = {"steps": int(steps), "star_steps": float(star_steps), "wall_s": wall,
               "step_s": in_step, "parts_s": parts, "step_other_s": step_other,
               "output_s": in_output, "loop_other_s": wall - in_step - in_output,
               "steps_compiling": int(c["steps"]), "compile_s": compile_s,
               "ranks": self.size, "threads": int(numba.get_num_threads())}
        left_out = (f"; {c['steps']} step(s) that compiled kernels ({compile_s:.1f} s of "
                    "compilation) left out" if c["steps"] else "")
        if steps:
            log.info("timing: %d steps in %.1f s, %.2f ms per step (%.3f us per star-step): %s "
                     "ms per step%s", steps, wall, wall / steps * 1e3,
                     wall / max(star_steps, 1.0) * 1e6, timing_split(out), left_out)
        elif c["steps"]:
            log.info("timing: none: every step compiled kernels (%.1f s of compilation)",
                     compile_s)
        return out


def timing_split(timing: dict) -> str:
    """A run's timing summary (:meth:`Simulation._timing_summary`) as ms per step: the parts
    that took time, largest first, then the rest of the step, outputs and the rest of the
    loop, e.g. ``"orbits 21.06, sort 4.48, rest of the step 0.03, outputs 0.24, rest of the
    loop 0.02"``."""
    ms = 1e3 / timing["steps"]
    parts = sorted(((v, k) for k, v in timing["parts_s"].items() if v > 0.0), reverse=True)
    rest = (("rest of the step", timing["step_other_s"]), ("outputs", timing["output_s"]),
            ("rest of the loop", timing["loop_other_s"]))
    return ", ".join([f"{k} {v * ms:.2f}" for v, k in parts]
                     + [f"{k} {v * ms:.2f}" for k, v in rest])


#: What each diagnostics column means (its unit is in :data:`DIAG_UNITS`).
DIAG_MEANINGS = {
    "step": "step number", "time": "time", "time_nb": "time in N-body units",
    "time_trh": "time in initial half-mass relaxation times", "N": "objects in the cluster",
    "M": "bound mass", "K": "kinetic energy of the bound objects",
    "W": "potential energy of the bound objects", "E_bound": "K + W",
    "E_escaped": "energy carried away by other escapers (unbound, ejected; kinetic + "
                 "potential at escape)",
    "E_tot": "K + W + E_escaped + E_stripped + E_binding + E_binding_escaped - E_oops "
             "- E_mergers - E_integrator (conserved)",
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

#: Test hook: ``CMC_INJECT_FAULT=RANK:STEP[:kind]`` makes that rank fail after that step
#: (kind ``raise``: an exception, ``exit``: os._exit(9), ``kill``: SIGKILL).  Never set in
#: production; it lets the tests show that a failure on one rank ends every rank.
FAULT_ENV = "CMC_INJECT_FAULT"


def _central_means(structure: np.ndarray) -> tuple[float, float]:
    """CMC-COSMIC's density-weighted mean mass and mean v^2 of the objects inside r_h
    (central.m_ave, central.v_rms^2) from the reduced :meth:`Simulation._structure_sums`
    (W first); (0, 0) without a core."""
    s_rho = float(structure[1])
    if not s_rho > 0.0:
        return 0.0, 0.0
    return float(structure[4]) / s_rho, float(structure[5]) / s_rho


def _inject_fault(spec: str, rank: int, step: int) -> None:
    parts = spec.split(":")
    if int(parts[0]) != rank or int(parts[1]) != step:
        return
    kind = parts[2] if len(parts) > 2 else "raise"
    if kind == "exit":
        os._exit(9)
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError(f"injected fault on rank {rank} after step {step}")


#: Parameters that define what a run is; a restart cannot change them.
FIXED_ON_RESTART = ("initial.*", "run.gamma", "run.coulomb_n", "run.emulate_ranks", "tidal.*",
                    "output.lagrange_fractions")


def check_restart_overrides(old: Config, new: Config, overrides: list[str]) -> None:
    """Raise :class:`InputError` naming the first override of a parameter that a restart
    cannot change (:data:`FIXED_ON_RESTART`) to a different value."""
    for ov in overrides:
        key = ov.split("=", 1)[0].strip()
        sec, _, name = key.partition(".")
        if f"{sec}.*" in FIXED_ON_RESTART or key in FIXED_ON_RESTART:
            if getattr(getattr(old, sec), name) != getattr(getattr(new, sec), name):
                raise InputError(f"{key}: cannot change on restart (it defines the run); "
                                 "start a new run instead")


def _legacy_scale(state: RunState, cfg: Config, unit_mass_msun: float) -> None:
    """Scale and tidal radius for a checkpoint written before physical units and [tidal]:
    the mass unit from the stars' masses, lengths in pc as the default (1 pc per r_vir), and
    the fixed tidal radius its parameters gave (``run.r_tidal`` there, now ``tidal.r_t0``)."""
    state.unit_mass_msun = unit_mass_msun
    state.m0 = 1.0
    if cfg.tidal.mode == "fixed" and cfg.tidal.r_t0_from == "value":
        state.r_t0 = state.r_tidal = cfg.tidal.r_t0


def check_orbit_backend(backend: str, comm) -> None:
    """Raise :class:`InputError` on every rank (one line naming what is missing: CuPy, a CUDA
    device) if orbit back end ``backend`` cannot run on some rank (collective)."""
    if backend == "cpu":
        return
    from physics.orbits_gpu import BackendUnavailable, check_backend

    msg = ""
    try:
        check_backend(backend)
    except BackendUnavailable as exc:
        msg = str(exc)
    if allreduce_max(comm, np.array([float(bool(msg))]))[0]:
        err = InputError(f"run.orbit_backend = {backend}: "
                         f"{msg or 'unavailable on another rank'}")
        err.collective = True
        raise err


def orbit_kernel(backend: str, comm, balance: bool = True):
    """The orbit kernel of ``run.orbit_backend``: :func:`physics.orbits.new_orbits_rows`
    (``cpu``), or a :class:`physics.orbits_gpu.DeviceOrbits` with the same signature.

    Collective (:func:`check_orbit_backend`).  With several ranks on a node, rank ``k`` uses
    device ``k`` modulo the device count.  ``balance``: on the CPU under MPI, neighbouring
    ranks share blocks by their measured cost (:class:`SharedTableOrbits`).
    """
    if backend == "cpu":
        if comm.Get_size() == 1:
            return new_orbits_rows
        return SharedTableOrbits(comm, balance)
    check_orbit_backend(backend, comm)
    from physics.orbits_gpu import DeviceOrbits, device_count

    device = comm.Get_rank() % device_count() if backend == "gpu" else None
    kernel = DeviceOrbits(backend, device)
    log.info("new orbits on %s", kernel.device)
    return kernel


#: The orbit kernel's per-block inputs and results that travel when blocks are shared between
#: neighbouring ranks (:class:`SharedTableOrbits`): (dtype, trailing shape) of each.
_ORBIT_INPUTS = ((np.int64, ()), (np.int64, ()), (np.float64, ()), (np.float64, ()),
                 (np.float64, ()), (np.int8, ()), (np.uint32, (4,)))
_ORBIT_RESULTS = ((np.float64, ()),) * 6 + ((np.int8, ()), (np.uint32, (4,)),
                                             (np.float64, (2,)))


class SharedTableOrbits:
    """:func:`physics.orbits.new_orbits_rows` under MPI (collective).

    The ranks build the radius lookup table together, each the entries of its own segment of
    ``r_all`` (:func:`physics.potential.radius_lookup_entries`), one Allgather of the segments'
    sizes and one Allgatherv of about 2 bytes per star, instead of every rank walking all N
    radii; the table's values, and so the orbits, are the same bits as a single process's.

    With ``balance`` (``run.orbit_balance = auto``) neighbouring ranks share blocks by their
    measured cost (:mod:`parallel.balance`): a block's orbits depend only on its rows, its
    sub-stream and the replicated arrays, so the results are the same bits whichever rank
    computes it.  ``share.fixed`` (tests) sets the shifts instead of the measurements.
    """

    def __init__(self, comm: Any, balance: bool) -> None:
        #: the communicator (the bench swaps in a counting one)
        self.comm = comm
        self.share = BlockShare(comm.Get_size()) if balance else None

    def __call__(self, r_all: np.ndarray, phi_all: np.ndarray, mcum_all: np.ndarray,
                 gidx: np.ndarray, block_start: np.ndarray, m: np.ndarray, vr: np.ndarray,
                 vt: np.ndarray, states: np.ndarray, r_tidal: float, r_new: np.ndarray,
                 vr_new: np.ndarray, vt_new: np.ndarray, phi_oo: np.ndarray,
                 phi_on: np.ndarray, status: np.ndarray, counters: np.ndarray,
                 r_apo: np.ndarray) -> None:
        comm = self.comm
        n = r_all.shape[0]
        if n == 0:
            new_orbits_rows(r_all, phi_all, mcum_all, gidx, block_start, m, vr, vt, states,
                            r_tidal, r_new, vr_new, vt_new, phi_oo, phi_on, status, counters,
                            r_apo)
            return
        size = comm.Get_size()
        bounds = rank_bounds(n, size)
        k = comm.Get_rank()
        nb = states.shape[0]
        entries = radius_lookup_entries(r_all, LOOKUP_PER_BUCKET, int(bounds[k]),
                                        int(bounds[k + 1]))
        # one Allgather: the table's sizes, and what the ranks share blocks by
        head = np.array([entries.shape[0], *(self.share.report(nb) if self.share else ())],
                        dtype=np.float64)
        every = np.empty((size, head.shape[0]))
        comm.Allgather(head, every)
        lut = allgatherv_array(comm, entries, rows=every[:, 0].astype(np.int64))
        lut_lo, lut_inv = radius_lookup_scale(r_all, LOOKUP_PER_BUCKET)
        threads = numba.get_num_threads()

        def kernel(bs, g, mm, vvr, vvt, st, rn, vrn, vtn, poo, pon, stat, cnt, ra) -> None:
            """The kernel on one set of blocks (``bs``: their first rows, then the end)."""
            new_orbits_rows_lut(r_all, phi_all, mcum_all, g, bs, mm, vvr, vvt, st, r_tidal, rn,
                                vrn, vtn, poo, pon, stat, cnt, ra, lut, lut_lo, lut_inv,
                                threads)

        def own(b0: int, b1: int) -> None:
            """The kernel on this rank's blocks ``b0 .. b1 - 1`` (views: results in place)."""
            rs, re = int(block_start[b0]), int(block_start[b1])
            g, mm, vvr, vvt, rn, vrn, vtn, poo, pon, stat, ra = (a[rs:re] for a in (
                gidx, m, vr, vt, r_new, vr_new, vt_new, phi_oo, phi_on, status, r_apo))
            kernel(block_start[b0:b1 + 1] - rs, g, mm, vvr, vvt, states[b0:b1], rn, vrn, vtn,
                   poo, pon, stat, counters[b0:b1], ra)

        if self.share is None:
            own(0, nb)
            return
        take_left, give_left, give_right, take_right = self.share.decide(every[:, 1:], k)
        given = [(nbr, b0, b1) for nbr, b0, b1 in ((k - 1, 0, give_left),
                                                   (k + 1, nb - give_right, nb)) if b1 > b0]
        # the given blocks' inputs go out before anyone computes (the ranks have just met in
        # the table's Allgatherv): a neighbour computes them after its own
        requests = []
        for nbr, b0, b1 in given:
            rs, re = int(block_start[b0]), int(block_start[b1])
            requests.append(send_bytes(comm, pack_arrays((
                block_start[b0:b1 + 1] - rs, gidx[rs:re], m[rs:re], vr[rs:re], vt[rs:re],
                status[rs:re], states[b0:b1])), nbr, TAG_INPUTS))
        taken = [(nbr, unpack_arrays(recv_bytes(comm, nbr, TAG_INPUTS), _ORBIT_INPUTS))
                 for nbr, count in ((k - 1, take_left), (k + 1, take_right)) if count]
        _wait_all(requests)
        t0 = time.perf_counter()
        own(give_left, nb - give_right)
        done = nb - give_left - give_right
        requests = []
        for nbr, (bs, g, mm, vvr, vvt, stat, st) in taken:
            rn, poo, pon, ra = (np.empty(g.shape[0]) for _ in range(4))
            vrn, vtn = vvr.copy(), vvt.copy()  # (escapers keep their velocities, as here)
            cnt = np.zeros((st.shape[0], 2))
            kernel(bs, g, mm, vvr, vvt, st, rn, vrn, vtn, poo, pon, stat, cnt, ra)
            requests.append(send_bytes(comm, pack_arrays((rn, vrn, vtn, poo, pon, ra, stat, st,
                                                          cnt)), nbr, TAG_RESULTS))
            done += st.shape[0]
        self.share.measured(time.perf_counter() - t0, done)
        for nbr, b0, b1 in given:
            rs, re = int(block_start[b0]), int(block_start[b1])
            rn, vrn, vtn, poo, pon, ra, stat, st, cnt = unpack_arrays(
                recv_bytes(comm, nbr, TAG_RESULTS), _ORBIT_RESULTS)
            for out, got in zip((r_new, vr_new, vt_new, phi_oo, phi_on, r_apo, status),
                                (rn, vrn, vtn, poo, pon, ra, stat), strict=True):
                out[rs:re] = got
            states[b0:b1] = st
            counters[b0:b1] = cnt
        _wait_all(requests)


def _wait_all(requests: list) -> None:
    """Complete posted sends (mpi4py requests)."""
    if requests:
        from mpi4py import MPI

        MPI.Request.Waitall(requests)


def scatter_global(comm, glob: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """Split global-order star arrays held by rank 0 into the block layout of ``comm``."""
    size = comm.Get_size()
    if size == 1:
        return glob
    parts = None
    if comm.Get_rank() == 0:
        counts = block_counts(len(glob["r"]), size)
        edges = np.concatenate([[0], np.cumsum(counts)])
        parts = [{k: v[edges[i]:edges[i + 1]] for k, v in glob.items()} for i in range(size)]
    return comm.scatter(parts, root=0)
