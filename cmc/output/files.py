"""The run's files: diagnostics.h5, snapshots and checkpoints (collective writes).

Every file carries the run's provenance (:meth:`RunOutput.provenance`); rank 0 writes, through
:func:`cmc.output.collective.on_root`, so that a failure ends every rank.  Writing is atomic
and checkpoints are verified before use (:mod:`cmc.io`).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from typing import TYPE_CHECKING

import numpy as np

from cmc import io as cio
from cmc.diagnostics import DIAG_MEANINGS, DIAG_UNITS
from cmc.errors import DamagedFileError, InputError
from cmc.output.collective import on_root
from parallel.comm import allreduce_max
from parallel.streams import Streams

if TYPE_CHECKING:
    from cmc.simulation import Simulation

log = logging.getLogger("cmc.simulation")


class RunOutput:
    """The files of a run (writes nothing without an output folder, ``sim.outdir``)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        #: diagnostics.h5's writer (rank 0, once opened)
        self.diag: cio.DiagnosticsWriter | None = None
        #: the step of the last snapshot, and when the last checkpoint was written
        self.snap_step = -1
        self.last_checkpoint = time.monotonic()

    def gather_stars(self) -> dict[str, np.ndarray] | None:
        """All stars' saved fields in global order on rank 0 (None elsewhere)."""
        sim = self.sim
        parts = sim.comm.gather(sim.stars.saved_dict(), root=0)
        if sim.rank != 0:
            return None
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def provenance(self) -> dict:
        """Attributes every output file carries: code version, parameters, MPI size, start
        time and the restart overrides."""
        sim = self.sim
        from cmc import __version__

        st = sim.state
        return {"cmc_version": __version__, "config": sim.cfg.to_ini(), "mpi_size": sim.size,
                "emulated_ranks": sim.n_emul, "start_time": st.start_time,
                "overrides": st.overrides}

    def attrs(self) -> dict:
        """Attributes of a snapshot: the run's time, scale, tidal radius and provenance."""
        sim = self.sim
        st = sim.state
        return {"step": st.step, "time": st.time, "time_trh": st.time / st.t_rh0,
                "time_myr": sim.units.rel_to_myr(st.time), "r_tidal": st.r_tidal,
                "r_tidal_model": st.r_tidal_model, "metallicity": st.metallicity,
                "n_ranks": sim.size, "time_unit": DIAG_UNITS["time"], **sim.units.attrs(),
                **self.provenance()}

    def write_snapshot(self) -> None:
        """Write ``snapshots/snap_STEP.h5`` (collective)."""
        sim = self.sim
        glob = self.gather_stars()

        def write() -> None:
            d = sim.outdir / "snapshots"
            d.mkdir(parents=True, exist_ok=True)
            path = d / f"snap_{sim.state.step:07d}.h5"
            cio.check_free_space(path, 8 * len(glob["r"]) * (len(glob) + 2))
            cio.write_snapshot(path, glob, self.attrs())

        if sim.outdir is not None:
            on_root(sim.comm, write)
        self.snap_step = sim.state.step

    def diagnostics_attrs(self) -> dict:
        """Attributes of diagnostics.h5: the initial values the columns are relative to."""
        sim = self.sim
        st = sim.state
        return {"lagrange_fractions": sim.fractions, "stop_reason": st.stop_reason,
                "t_rh0": st.t_rh0, "n0": st.n0, "e0": st.e0, "r_c0": st.r_c0,
                "time_unit": DIAG_UNITS["time"], "m0": st.m0, "r_t0": st.r_t0,
                "tidal_mode": sim.cfg.tidal.mode, **sim.units.attrs(), **self.provenance()}

    def open_diagnostics(self) -> None:
        """Start diagnostics.h5 (collective; rank 0 writes): the rows so far (on restart: the
        rows up to the checkpoint, read back from the old file) in a fresh file, then append
        from there."""
        sim = self.sim
        if sim.outdir is None:
            return
        on_root(sim.comm, self.open_diagnostics_root)
        sim.history = {k: [] for k in sim.last}

    def open_diagnostics_root(self) -> None:
        """Rank 0's part of :meth:`open_diagnostics` (the caller empties the history)."""
        sim = self.sim
        path = sim.outdir / "diagnostics.h5"
        rows = sim.history
        if sim.n_rows > len(sim.history.get("step", [])):
            # a restart: the earlier rows are in the old file (SWMR keeps it readable after a
            # kill); rows written after the checkpoint are dropped, they will be recomputed
            try:
                old, _ = cio.read_diagnostics(path, max_step=sim.state.step)
            except InputError as exc:
                raise InputError(f"{exc}; the checkpoint needs its {sim.n_rows} rows of "
                                 "diagnostics history") from None
            except DamagedFileError as exc:
                # the rows are in this file alone (not in the checkpoint): a whole copy, or
                # the run again from the start (bit for bit the same), brings them back
                raise DamagedFileError(
                    f"{exc} (the checkpoint at step {sim.state.step} needs its first "
                    f"{sim.n_rows} rows); without them the run cannot be continued: start it "
                    "afresh") from None
            if old["step"].size != sim.n_rows:
                raise InputError(f"{path} holds {old['step'].size} rows up to step "
                                 f"{sim.state.step}, the checkpoint expects "
                                 f"{sim.n_rows}: it belongs to another run")
            rows = {k: list(v) for k, v in old.items()}
            missing = [k for k in sim.last if k not in rows]
            if missing:
                # a run begun by an older version: its rows lack the newer columns
                log.info("diagnostics.h5 of an older version: columns %s start at step "
                         "%d (earlier rows hold 0)", ", ".join(missing), sim.state.step)
                for k in missing:
                    rows[k] = [np.zeros_like(np.asarray(sim.last[k]))] * sim.n_rows
        if sim.escapers.writer is None:
            sim.escapers.open()
        self.diag = cio.DiagnosticsWriter(path, self.diagnostics_attrs(), DIAG_UNITS,
                                           DIAG_MEANINGS, rows)

    def write_diagnostics(self) -> None:
        """Append the rows recorded since the last flush to diagnostics.h5 (rank 0) and drop
        them from memory (every rank)."""
        sim = self.sim
        if sim.outdir is None:
            return

        def write() -> None:
            sim.escapers.flush()
            if self.diag is None:  # not opened by run(): opening writes the rows so far
                self.open_diagnostics_root()
            else:
                self.diag.append(sim.history)

        on_root(sim.comm, write)
        sim.history = {k: [] for k in sim.last}

    def write_checkpoint(self) -> None:
        """Write ``checkpoint.h5`` (collective): stars, run state, streams; diagnostics are
        flushed first so that the checkpoint's ``diag_rows`` are on disk."""
        sim = self.sim
        self.write_diagnostics()
        sim.state.wall_seconds = sim.wall_at_start + time.monotonic() - sim.wall_start
        sim.state.diag_rows = sim.n_rows
        glob = self.gather_stars()
        # ranks grow their sub-stream tables as their blocks need (encounters draw from more
        # sub-streams), so they can differ in length; the table written is one array: every
        # rank first grows its own to the longest (the new sub-streams are the ones it would
        # make when it needs them, so nothing drawn changes)
        longest = int(allreduce_max(sim.comm, np.array([float(sim.streams.n_substreams)]))[0])
        sim.streams.ensure_substreams(longest)
        tables = sim.comm.gather(sim.streams.states, root=0)

        def write() -> None:
            full = Streams(sim.streams.seed, 0, np.concatenate(tables, axis=0))
            cio.write_checkpoint(sim.outdir / "checkpoint.h5", glob, asdict(sim.state),
                                 full.write_hdf5, sim.cfg.to_ini(),
                                 keep=sim.cfg.output.checkpoints_to_keep,
                                 extra_attrs=self.provenance())

        if sim.outdir is not None:
            on_root(sim.comm, write)
        self.last_checkpoint = time.monotonic()

    def close(self, reason: str, timing: dict) -> None:
        """Close diagnostics.h5 (with the stop reason, the restart overrides and the run's
        timing as attributes) and escapers.h5 (collective)."""
        sim = self.sim
        def close() -> None:
            if self.diag is not None:
                self.diag.close({"stop_reason": reason, "overrides": sim.state.overrides,
                                 "timing": json.dumps(timing)})
            sim.escapers.close()

        on_root(sim.comm, close)
