"""One Monte Carlo step: the processes of :mod:`cmc.processes`, run in a declared order.

The order is the paper's (Pattabiraman et al. 2013, sec. 2.1 and 3.3), each entry a
:class:`Process` with one small interface: what it reads, what it changes, which random
numbers it draws (from which sub-stream, in which order), which energy columns it books and
which counters it adds.  A process works on the run (:class:`cmc.simulation.Simulation`: the
stars, the replicated arrays, the run state) and on the step's :class:`StepWork`, which carries
what one process hands to the next.  A new process is a new module in :mod:`cmc.processes`
plus one line in :data:`STEP_ORDER`; tests/test_step_order.py checks the order and the draws
against docs/architecture.md.

Random numbers: block ``j`` of rank ``k`` draws from sub-stream ``j`` of stream ``k``; a
serial run with ``run.emulate_ranks = P`` maps every global block to the (stream, sub-stream)
that its owner rank would use in a P-rank run, so it reproduces that run bit for bit.  The
block's generator state (:attr:`StepWork.states`) is taken once at the start of the step and
passed from process to process, so the draws of a block come in the order of
:data:`STEP_ORDER`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from cmc.processes.accounting import Accounting
from cmc.processes.base import Process, StepWork
from cmc.processes.encounters import BinaryEvents, ProductMasses
from cmc.processes.energy import EnergyCorrection
from cmc.processes.escape import Departures, UnboundRemoval
from cmc.processes.orbits import NewOrbits
from cmc.processes.relaxation import Relaxation
from cmc.processes.sort import Sort
from cmc.processes.stellar_evolution import StellarEvolution
from cmc.processes.tidal import TidalStripping
from cmc.processes.timestep import TimeStep
from physics import encounters as enc
from physics.orbits import block_rows

if TYPE_CHECKING:
    from cmc.simulation import Simulation


#: The processes of a step, in the order they run (docs/architecture.md, "The step").
STEP_ORDER: tuple[type[Process], ...] = (
    TimeStep, Relaxation, BinaryEvents, ProductMasses, StellarEvolution, UnboundRemoval,
    NewOrbits, TidalStripping, Departures, Sort, EnergyCorrection, Accounting)


class Step:
    """The step of a run: its processes (one instance each, which may keep state between
    steps, never between runs: none of it is in a checkpoint) in :data:`STEP_ORDER`."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.processes = [p(sim) for p in STEP_ORDER]

    def __call__(self) -> dict:
        """Advance the run by one shared time step; returns the step's diagnostics row."""
        sim = self.sim
        work = self._start()
        timers = sim.timers
        for process in self.processes:
            t0 = time.perf_counter()
            process.run(work)
            t1 = time.perf_counter()
            timers[process.timer] += t1 - t0
            if process.wait_after and sim.measure_wait:
                sim.comm.Barrier()
                timers["wait"] += time.perf_counter() - t1
        return work.row

    def _start(self) -> StepWork:
        """The step's work: the local blocks' generator states (for every draw of the step),
        their segments, the rows' slots and the step's per-block and per-segment counters."""
        sim = self.sim
        work = StepWork()
        rows, subs = sim.stream_index()
        need = int(subs.max()) + 1 if subs.size else 0
        if need > sim.streams.n_substreams:
            sim.streams.ensure_substreams(need)
        work.rows, work.subs = rows, subs
        work.states = np.ascontiguousarray(sim.streams.states[rows, subs])
        nb = work.states.shape[0]
        work.seg_blocks = sim.block_segments(nb)
        work.beta_stats = np.zeros((nb, 2))
        work.counts = np.zeros((work.seg_blocks.size - 1, len(enc.COUNT_NAMES)))
        work.p_stats = np.zeros((nb, 3))
        work.counters = np.zeros((nb, 2))
        work.gidx, work.block_start = block_rows(sim.stars.n, sim.offset)
        return work
