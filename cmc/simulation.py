"""A Hénon Monte Carlo run on one communicator (serial and MPI alike).

Each rank owns whole 20-star blocks of the global radial order (see
:mod:`parallel.decomposition`) and holds replicated copies of every star's radius and mass,
from which it computes the potential itself (:mod:`cmc.replicated`).  :class:`Simulation` holds
the run: its configuration, stars, random streams, run state and replicated arrays.  What it
does is elsewhere, one concern per module:

- the step, :mod:`cmc.step`: the processes of :mod:`cmc.processes` in their declared order
  (time step, relaxation, binary events, product masses, unbound removal, new orbits, tidal
  stripping, departures, sort, energy correction, accounting);
- the diagnostics row, :mod:`cmc.diagnostics`;
- the files, :mod:`cmc.output` (diagnostics.h5, escapers.h5, snapshots, checkpoints);
- the run loop, :mod:`cmc.runloop` (signals, wall clock, progress, timing), with the stop
  conditions of :mod:`cmc.stops` and the restart rules of :mod:`cmc.restart`.

Random numbers: block ``j`` of rank ``k`` draws from sub-stream ``j`` of stream ``k``.  A
serial run with ``run.emulate_ranks = P`` maps every global block to the (stream, sub-stream)
that its owner rank would use in a P-rank run, so it reproduces that run bit for bit.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import fields
from pathlib import Path

import numpy as np

from cmc import io as cio
from cmc.config import Config, load_config
from cmc.diagnostics import diagnostics_row, half_mass_relaxation_time
from cmc.errors import RESUMABLE_STOPS, InputError
from cmc.output.escapers import EscaperTable
from cmc.output.files import RunOutput
from cmc.processes.orbits import orbit_kernel
from cmc.processes.stellar_evolution import binary_physics_settings, start_stellar_evolution
from cmc.replicated import sync_replicated
from cmc.restart import check_restart_overrides, legacy_scale, legacy_zones
from cmc.runloop import FAULT_ENV
from cmc.runloop import run as run_loop
from cmc.stars import StarTable
from cmc.state import PARTS, RunState
from cmc.step import Step
from cmc.stops import check_continuable
from cmc.units import Units
from parallel.decomposition import MIN_CHUNK, block_counts, block_layout, rank_bounds
from parallel.shared import NodeReplicas
from parallel.streams import Streams
from physics import encounters as enc
from physics.binaries import C_KMS
from physics.fewbody import EncounterSettings

log = logging.getLogger("cmc.simulation")


class Simulation:
    """One Monte Carlo run on a communicator (an mpi4py communicator or SerialComm)."""

    def __init__(self, cfg: Config, comm, stars: StarTable, state: RunState, streams: Streams,
                 outdir: str | Path | None = None, history: dict[str, list] | None = None):
        self.cfg = cfg
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        #: (with run.zones > 1 the table carries the zones' fields)
        self.stars = stars.with_zone_fields(cfg.run.zones > 1)
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
        self.fractions = np.asarray(cfg.output.lagrange_fractions, dtype=float)
        #: the signal that asked the run to stop (0: none), set by the run loop's handler
        self.signal_received = 0
        self.wall_start = time.monotonic()
        self.wall_at_start = state.wall_seconds
        self.fault = os.environ.get(FAULT_ENV)
        #: where the last :meth:`run` spent its time (:func:`cmc.runloop.timing_summary`)
        self.timing: dict = {}
        #: diagnostics rows recorded over the whole run (the restart's diag_rows onwards)
        self.n_rows = len(self.history.get("step", []))
        #: (density-weighted <m>, <v^2>) inside r_h from the last diagnostics, for T_bs
        self.central_means: tuple[float, float] | None = None
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
            ss_collision=b.ss_collision, coll_factor=b.coll_factor,
            bh_radius_multiplier=b.bh_radius_multiplier, bh_capture=b.bh_capture,
            clight=C_KMS / self.units.velocity_kms if b.bh_capture else 0.0,
            **binary_physics_settings(self),
            settings=EncounterSettings(integrator=b.integrator, energy_tol=b.energy_tol,
                                       max_steps=b.max_steps, t_max_periods=b.t_max_periods,
                                       collapse_tol=b.collapse_tol,
                                       clight=C_KMS / self.units.velocity_kms if b.pn25
                                       else 0.0))
        #: the orbit kernel: numba on the CPU, or the same kernel on a GPU
        self.orbits = orbit_kernel(cfg.run.orbit_backend, comm,
                                   balance=cfg.run.orbit_balance == "auto")
        #: the replicated arrays in the node's shared memory (None: this rank's own copies)
        self.replicas = (NodeReplicas.create(comm) if self.size > 1
                         and cfg.run.shared_memory == "auto" else None)
        self.sync_replicated()
        #: the escaper table and the run's files (:mod:`cmc.output`)
        self.escapers = EscaperTable(self)
        self.output = RunOutput(self)
        #: the step: the processes in their order (:mod:`cmc.step`)
        self.step = Step(self)

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
                if cfg.bse.stellar_evolution:
                    start_stellar_evolution(glob, cfg, info)
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
        state.t_rh0 = half_mass_relaxation_time(d["r_h"], d["M"])
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
        legacy_zones(cfg_text, old, cfg, overrides or [])
        check_restart_overrides(old, cfg, overrides or [])
        state = RunState(**{f.name: st[f.name] for f in fields(RunState) if f.name in st})
        if "r_t0" not in st:
            legacy_scale(state, cfg, glob_scale)
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
            check_continuable(sim, stopped, path)
        return sim

    # ------------------------------------------------------------------ replicated data
    def sync_replicated(self, n_total: int | None = None) -> None:
        """:func:`cmc.replicated.sync_replicated` (collective)."""
        sync_replicated(self, n_total)

    def stream_index(self) -> tuple[np.ndarray, np.ndarray]:
        """(stream row, sub-stream) of each local block."""
        nb = (self.stars.n + MIN_CHUNK - 1) // MIN_CHUNK
        if self.size > 1 or self.n_emul == 1:
            return np.zeros(nb, dtype=np.intp), np.arange(nb, dtype=np.intp)
        lay = block_layout(self.n_total, self.n_emul)
        return lay.owner.astype(np.intp), lay.local_block.astype(np.intp)

    # Sums over stars are reduced as (emulated) ranks' partial sums added in rank order
    # (:func:`parallel.comm.ranked_sum`): a serial emulation of P ranks sums each emulated
    # rank's segment apart, so that its diagnostics are the P-rank run's bits.
    def star_segments(self) -> np.ndarray:
        """Bounds of the local rows (standard block layout, after the sort) of each rank this
        process stands for: ``[0, n]``, or the emulated ranks' star ranges."""
        if self.size == 1 and self.n_emul > 1:
            return rank_bounds(self.stars.n, self.n_emul)
        return np.array([0, self.stars.n], dtype=np.int64)

    def block_segments(self, nb: int) -> np.ndarray:
        """Bounds of the step's ``nb`` local blocks of each rank this process stands for."""
        if self.size == 1 and self.n_emul > 1:
            owner = block_layout(self.n_total, self.n_emul).owner
            return np.searchsorted(owner, np.arange(self.n_emul + 1)).astype(np.int64)
        return np.array([0, nb], dtype=np.int64)

    def segment_offsets(self) -> np.ndarray:
        """Global index of the first star of each segment of :meth:`star_segments`."""
        return self.offset + self.star_segments()[:-1]

    # ------------------------------------------------------------------ what a run does
    def diagnostics(self, record: bool = True, **sums) -> dict:
        """The diagnostics row now (:func:`cmc.diagnostics.diagnostics_row`), appended to the
        history if ``record``."""
        return diagnostics_row(self, record, **sums)

    def run(self) -> str:
        """Step until a stop condition, writing the outputs; return the stop reason
        (:func:`cmc.runloop.run`)."""
        return run_loop(self)

    def gather_stars(self) -> dict[str, np.ndarray] | None:
        """All stars' saved fields in global order on rank 0 (None elsewhere)."""
        return self.output.gather_stars()

    def provenance(self) -> dict:
        """Attributes every output file carries (:meth:`cmc.output.files.RunOutput.provenance`)."""
        return self.output.provenance()

    def open_diagnostics(self) -> None:
        """Start diagnostics.h5 (collective)."""
        self.output.open_diagnostics()

    def write_diagnostics(self) -> None:
        """Append the recorded rows to diagnostics.h5 (collective)."""
        self.output.write_diagnostics()

    def write_snapshot(self) -> None:
        """Write ``snapshots/snap_STEP.h5`` (collective)."""
        self.output.write_snapshot()

    def write_checkpoint(self) -> None:
        """Write ``checkpoint.h5`` (collective)."""
        self.output.write_checkpoint()

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
