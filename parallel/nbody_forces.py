"""The direct N-body mode's forces over MPI ranks (issue 50, "Forces": MPI over i-particles).

Every rank holds the whole system (:class:`physics.nbody.NBodyState`, replicated: the same
initial bodies, the same block steps) and computes the forces on one share of each block's
active bodies from all bodies; one ``Allgatherv`` brings every rank the whole block's.  The
force on a body is the same sum in the same order whichever rank computes it, so a run on
P ranks is bit for bit the one-process run (tested under ``mpiexec -n 2`` and ``-n 3``).  The
rest of the step (prediction, corrector, time steps, close pairs, diagnostics) is repeated on
every rank: O(N) per block against the forces' O(N_block N).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from parallel.comm import allgatherv_array

#: Blocks with fewer body-body pairs than this are computed on every rank (no message): a
#: gather costs tens of microseconds, as much as ~2000 pairs of the force kernel.
SPLIT_MIN_PAIRS = 50_000


class SplitForces:
    """``force_map`` of :class:`physics.nbody.NBodyState` for the ranks of ``comm``
    (collective: every rank calls it with the same block).

    The block's active bodies are cut into ``P`` consecutive shares of sizes differing by
    at most one; rank ``k`` computes share ``k``.  Each rank's results (the kernel's arrays,
    side by side as the columns of one matrix) travel in one ``Allgatherv``.
    """

    def __init__(self, comm: Any, min_pairs: int | None = None) -> None:
        self.comm = comm
        self.min_pairs = SPLIT_MIN_PAIRS if min_pairs is None else int(min_pairs)
        #: blocks split and computed whole (every rank the same counts)
        self.n_split = 0
        self.n_whole = 0

    def __call__(self, kernel, inputs: tuple, active: np.ndarray, eps2: float) -> tuple:
        size = self.comm.Get_size()
        n_all = inputs[0].shape[0]
        if size == 1 or active.size < size or active.size * n_all < self.min_pairs:
            self.n_whole += 1
            return kernel(*inputs, active, eps2)
        self.n_split += 1
        bounds = (np.arange(size + 1, dtype=np.int64) * active.size) // size
        k = self.comm.Get_rank()
        mine = kernel(*inputs, np.ascontiguousarray(active[bounds[k]:bounds[k + 1]]), eps2)
        widths = [1 if a.ndim == 1 else a.shape[1] for a in mine]
        local = np.empty((mine[0].shape[0], sum(widths)))
        col = 0
        for a, w in zip(mine, widths, strict=True):
            local[:, col:col + w] = a.reshape(a.shape[0], w)
            col += w
        every = allgatherv_array(self.comm, local, rows=np.diff(bounds))
        out = []
        col = 0
        for a, w in zip(mine, widths, strict=True):
            part = np.ascontiguousarray(every[:, col:col + w])
            out.append(part.reshape(active.size) if a.ndim == 1 else part)
            col += w
        return tuple(out)
