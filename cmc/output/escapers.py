"""The escaper table, escapers.h5: one row per object that leaves the cluster.

The processes of the step that remove objects (:mod:`cmc.processes`: unbound removal, orbits
that leave, tidal stripping, binary products ejected) call :meth:`EscaperTable.note` with the
records of their local rows; the step's bookkeeping gathers them on rank 0 once per step
(:meth:`EscaperTable.gather`, collective), in an order that does not depend on the number of
ranks, and the output flushes them with the diagnostics rows.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from cmc import io as cio
from cmc.errors import DamagedFileError, InputError
from cmc.fields import escaper_columns

if TYPE_CHECKING:
    from cmc.simulation import Simulation

log = logging.getLogger("cmc.simulation")


class EscaperTable:
    """The escaper records of a run with an output folder (none without one)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        #: this step's local records, the gathered rows not yet written (rank 0), the writer
        self.local: list[dict[str, np.ndarray]] = []
        self.rows: list[dict[str, np.ndarray]] = []
        self.writer: cio.DiagnosticsWriter | None = None

    def columns(self) -> tuple:
        """The table's columns (:func:`cmc.fields.escaper_columns` for this run's fields)."""
        return escaper_columns(self.sim.stars.has_binary_fields, self.sim.stars.has_se_fields)

    def note(self, rows: dict[str, np.ndarray], r: np.ndarray, e_spec: np.ndarray,
             kind: int | np.ndarray) -> None:
        """Keep the records of objects leaving in this step (local rows, as they left: radius
        ``r`` [r_vir] and specific energy ``e_spec``); gathered at the end of the step."""
        if self.sim.outdir is None or len(r) == 0:
            return
        n = len(r)
        rec = {f.name: np.asarray(rows[f.name], dtype=f.dtype) if f.name in rows
               else np.full(n, f.default, dtype=f.dtype)
               for f in self.columns()}
        rec["r"] = np.asarray(r, dtype=np.float64)
        rec["E"] = np.asarray(e_spec, dtype=np.float64)
        rec["J"] = rec["r"] * rec["vt"]
        rec["kind"] = np.broadcast_to(np.asarray(kind, dtype=np.int8), (n,)).copy()
        self.local.append(rec)

    def template(self) -> dict[str, np.ndarray]:
        """Empty columns of the table (its fields with binaries or without)."""
        return {f.name: np.zeros(0, dtype=f.dtype)
                for f in self.columns()}

    def gather(self, n_left: int) -> None:
        """Gather this step's escaper records on rank 0 (collective; runs with an output
        folder only, and only when ``n_left``, the step's escapers over all ranks, is not 0),
        stamped with the step, time and tidal radius, in a fixed order (kind, then id) that
        does not depend on the number of ranks."""
        if self.sim.outdir is None or n_left == 0:
            self.local = []
            return
        parts = self.local
        self.local = []
        mine = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else None
        everyone = self.sim.comm.gather(mine, root=0)
        if self.sim.rank != 0:
            return
        got = [p for p in everyone if p is not None]
        if not got:
            return
        rows = {k: np.concatenate([p[k] for p in got]) for k in got[0]}
        order = np.lexsort((rows["id"], rows["kind"]))
        rows = {k: v[order] for k, v in rows.items()}
        rows["step"][:] = self.sim.state.step
        rows["time"][:] = self.sim.state.time
        rows["r_tidal"][:] = self.sim.state.r_tidal
        self.rows.append(rows)

    def open(self) -> None:
        """Start escapers.h5 (rank 0): on restart, the rows up to the checkpoint's step read
        back from the old file (later ones are recomputed), then append."""
        path = self.sim.outdir / "escapers.h5"
        rows = self.template()
        if self.sim.state.step > 0:
            try:
                old, _ = cio.read_diagnostics(path, max_step=self.sim.state.step)
                rows = {k: old[k] if k in old else np.full(old["step"].size, v.dtype.type(0))
                        for k, v in rows.items()}
            except InputError:
                log.info("no escaper table to continue in %s: escapers.h5 starts at step %d",
                         self.sim.outdir, self.sim.state.step)
            except DamagedFileError as exc:
                # not replaced silently: its rows are the only record of the escapers so far
                raise DamagedFileError(
                    f"{exc}, or move it aside to continue without the escapers up to step "
                    f"{self.sim.state.step}") from None
        cols = {f.name: f for f in self.columns()}
        self.writer = cio.DiagnosticsWriter(
            path, {"n0": self.sim.state.n0, **self.sim.units.attrs(), **self.sim.provenance()},
            {k: f.unit for k, f in cols.items()}, {k: f.meaning for k, f in cols.items()},
            rows)

    def flush(self) -> None:
        """Append the gathered rows to escapers.h5, opening it first (rank 0)."""
        if self.writer is None:
            self.open()
        if self.rows:
            rows = {k: np.concatenate([p[k] for p in self.rows]) for k in self.rows[0]}
            self.writer.append(rows)
            self.rows = []

    def close(self) -> None:
        """Close escapers.h5 (rank 0)."""
        if self.writer is not None:
            self.writer.close()
