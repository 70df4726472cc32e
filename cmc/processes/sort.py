"""The sort (the paper's sec. 3.4 and 3.5): the new radii in global order over the ranks
(Sample Sort with its cuts moved to the block bounds: one exchange), the escapers dropped in
it, then the replicated radii and masses gathered and the new potential computed."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from cmc.processes.base import Process, StepWork
from cmc.replicated import sync_replicated
from cmc.stars import StarTable
from parallel.decomposition import rank_bounds
from parallel.sample_sort import bracketing_guesses, guess_deviation, parallel_sort

if TYPE_CHECKING:
    from cmc.simulation import Simulation


class Sort(Process):
    """Sort by the new radius (ties by id), redistribute in the block layout, and make the
    replicated arrays and the potential of the new order."""

    name = "sort"
    timer = "sort"
    reads = "the table's new r (work.keep_rows: the rows that stay)"
    changes = "the star table (new order), r_all, m_all, phi_all, mcum_all, n_total, offset; " \
              "work.r_old_all, old_bounds"

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        #: how far the block bounds move from one step to the next [stars], for the sort's
        #: guesses (a speed setting only: any guess gives the same order); a star's new
        #: radius is random, so about the root of the stars per rank to start with
        self._cut_width = float(np.sqrt(max(sim.n_total, 1) / sim.size))

    def run(self, work: StepWork) -> None:
        sim = self.sim
        cfg = sim.cfg.run
        # (the old table is dropped: its one-value columns may be shared by the new one)
        work.old_bounds = old_bounds = rank_bounds(sim.n_total, sim.size)  # the ranks' rows
        # of r_old_all.  The radii at and around the last step's block bounds guess the new
        # ones (any guess gives the same order): the sort needs no sampling round (unless
        # run.sample_size asks for one), and its exact cuts gather only the stars between
        # the two guesses that bracket each bound
        hint = None if sim.size == 1 or sim.n_total == 0 or cfg.sample_size else \
            bracketing_guesses(sim.r_all, old_bounds[1:-1], self._cut_width)
        report: dict = {}
        sorted_fields = parallel_sort(sim.comm, sim.stars.as_dict(), key="r", tiebreak="id",
                                      sample_size=cfg.sample_size or None, rows=work.keep_rows,
                                      share_uniform=True, splitters=hint, report=report,
                                      uniform=sim.stars.idle_binary_columns())
        miss = guess_deviation(report)
        if not math.isnan(miss):  # the bounds' random walk per step, smoothed (the same on
            # every rank: it comes from global counts)
            self._cut_width = 0.5 * self._cut_width + 0.5 * max(miss, 1.0)
        sim.stars = StarTable(sorted_fields)
        work.r_old_all = sim.r_all
        sync_replicated(sim, report.get("n_total"))
