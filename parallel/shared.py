"""The replicated arrays held once per node, in MPI-3 shared memory (``run.shared_memory``).

Every rank reads the radii, masses, potential and enclosed mass of all N stars (the design's
replicated arrays).  Held privately, a node running ``c`` ranks holds ``c`` copies, 32 bytes
per star each plus the previous step's radii, and every rank receives all N radii and masses
through two Allgathervs per step: at N = 1e6 on 16 ranks of one node that was 6-8x the memory
of 16 threads (docs/performance.md, "Check on 16 cores"), and at N = 1e7 on a 64-core node it
would be some 25 GB.

Here each node holds one copy, in a shared-memory window (``MPI_Win_allocate_shared``): each
rank writes its own stars' radii and masses at their global rows, the nodes' first ranks (the
leaders) complete the rows of the other nodes with one in-place Allgatherv among themselves
(nothing at all on a single node), and the node's ranks compute the potential and the
enclosed mass into the window together (:class:`PotentialStages`: each rank its share of the
blocks of the running sums and of the increments between them; each rank computed all of it
before, at the same time).  The arrays hold the same values as the private ones, so a run gives
the same bits either way, for any placement of ranks on nodes.

Two radius buffers alternate, so that the previous step's radii (the energy correction's old
radii) stay valid while the new ones are written; the masses, potential and enclosed mass are
rewritten in place.  Every :meth:`NodeReplicas.publish` starts with a barrier of the node,
after which no rank still reads what it overwrites (the arrays of the call before, except its
radii, and the radii of the call before that).  Per node 6 x 8 bytes per star (with 12.5 %
room for growth: 54), against 48 per rank with private arrays.  A window too small for a grown
N is replaced by a larger one, the old one freed at the next call (the same barrier), so that
the last radii stay valid.

:meth:`NodeReplicas.gather` puts every rank's rows of one more column (the energy
correction's potential at the previous step's radii, 8 bytes per star) into the window the
same way, in place of an Allgatherv into private arrays (0.2 ms per step at N = 1e5 on two
ranks, against two barriers of the node and the rank's own writes).

Requires that the ranks of each node be consecutive in the communicator (the usual block
placement, ``mpiexec -n P`` on one node, or ``--map-by core``/``-ppn`` placements): their stars
are then one contiguous range of the global order.  Otherwise :meth:`NodeReplicas.create`
returns None and the run keeps private arrays.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from parallel.decomposition import rank_bounds

log = logging.getLogger("cmc.shared")

#: The shared arrays.
FIELDS = ("r", "m", "phi", "mcum")
#: Slices of a window: the radii twice (alternating), then the other fields, then the column
#: of :meth:`NodeReplicas.gather` (the energy correction's potential at the old radii).
SLICES = ("r", "r", "m", "phi", "mcum", "gathered")


@dataclass(frozen=True)
class PotentialStages:
    """The potential of sorted shells in three stages over fixed blocks of rows
    (:mod:`physics.potential`: its running sums are blocked, the blocks the same for any
    number of ranks), each rank of the node taking its share of the blocks: the mass totals
    of its blocks; their enclosed mass, increments and final-sum totals; their final sum.
    Together ``compute_potential_into``'s operations, so its bits."""

    #: rows per block
    block: int
    #: ``mass_totals(m, mass_totals, b0, b1, block)``: blocks ``b0 .. b1 - 1``'s mass sums
    mass_totals: Callable[..., None]
    #: ``blocks(r, m, phi, mcum, mass_totals, phi_totals, bf, b0, b1, block)``: the enclosed
    #: mass, the increments and the final-sum totals of blocks ``b0 .. b1 - 1`` (from ``bf``)
    blocks: Callable[..., None]
    #: ``suffix(phi, phi_totals, b0, b1, nb, block)``: the final sum of blocks ``b0 .. b1 - 1``
    suffix: Callable[..., None]


def block_shares(n_blocks: int, ranks: int) -> np.ndarray:
    """Bounds of each rank's share of ``n_blocks`` blocks of the potential (any block
    boundary: the shares differ by one block at most), shape ``(ranks + 1,)``."""
    return rank_bounds(n_blocks, ranks, 1)


#: Room for growth when a window is (re)allocated: the number of objects grows only when a
#: wide binary is broken, a little at a time.
GROWTH = 1.125


class NodeReplicas:
    """Node-shared replicated arrays of one run (collective methods; see the module text).

    Make one with :meth:`create`; :meth:`publish` each time the arrays are rebuilt (after the
    sort); :meth:`close` at the end of the run (collective; otherwise MPI frees the windows at
    exit).
    """

    def __init__(self, comm: Any, node: Any, leaders: Any, node_first: np.ndarray) -> None:
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = comm
        self.node = node
        #: the communicator of the nodes' first ranks (COMM_NULL on the others)
        self.leaders = leaders
        #: comm rank of each node's first rank, then ``size``
        self.node_first = node_first
        self.is_leader = node.Get_rank() == 0
        self.capacity = 0
        self._win: Any = None
        self._arrays: dict[str, np.ndarray] = {}
        self._radii: list[np.ndarray] = []
        self._next = 0
        self._retired: list[Any] = []
        #: the potential's block totals (mass, final sum) in the window, and its rows per block
        self._totals: tuple[np.ndarray, ...] = ()
        self._block = 0
        #: the last :meth:`publish`'s views (r, m, phi, mcum)
        self._views: tuple[np.ndarray, ...] = ()

    @property
    def n_nodes(self) -> int:
        """Number of nodes (of node communicators)."""
        return self.node_first.size - 1

    @classmethod
    def create(cls, comm: Any, node: Any = None) -> NodeReplicas | None:
        """Node-shared arrays for the ranks of ``comm`` (collective), or None on every rank
        where they cannot be used: a single rank, or a node whose ranks are not consecutive.

        ``node`` is this rank's node communicator (default: ``comm.Split_type`` of the
        processes that can share memory); tests pass a finer split to act several nodes on
        one machine.
        """
        size = comm.Get_size()
        if size == 1:
            return None
        from mpi4py import MPI

        rank = comm.Get_rank()
        if node is None:
            node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        members = node.allgather(rank)
        consecutive = members == list(range(members[0], members[0] + len(members)))
        if not comm.allreduce(int(consecutive), op=MPI.MIN):
            node.Free()
            if rank == 0:
                log.info("shared memory off: the ranks of a node are not consecutive")
            return None
        leaders = comm.Split(0 if node.Get_rank() == 0 else MPI.UNDEFINED, key=rank)
        firsts = leaders.allgather(rank) if leaders != MPI.COMM_NULL else None
        firsts = node.bcast(firsts, root=0)
        return cls(comm, node, leaders, np.array([*firsts, size], dtype=np.int64))

    # ------------------------------------------------------------------ windows
    def _allocate(self, capacity: int, block: int) -> None:
        """A window of ``len(SLICES) * capacity`` float64 on this node, and two rows of the
        potential's block totals (``block`` rows per block) (collective)."""
        MPI = self._mpi
        blocks = capacity // block + 1
        nbytes = (len(SLICES) * capacity + 2 * blocks) * 8 if self.is_leader else 0
        win = MPI.Win.Allocate_shared(nbytes, 8, comm=self.node)
        buf, _ = win.Shared_query(0)
        flat = np.ndarray(buffer=buf, dtype=np.float64,
                          shape=(len(SLICES) * capacity + 2 * blocks,))
        # one passive epoch for the window's life: Sync then orders this rank's stores
        win.Lock_all(MPI.MODE_NOCHECK)
        parts = [flat[k * capacity:(k + 1) * capacity] for k in range(len(SLICES))]
        self._win, self.capacity, self._next = win, capacity, 0
        self._radii = parts[:2]
        self._arrays = dict(zip(SLICES[2:], parts[2:], strict=True))
        tail = flat[len(SLICES) * capacity:]
        self._totals = (tail[:blocks], tail[blocks:])
        self._block = block

    def _free(self, win: Any) -> None:
        win.Unlock_all()
        win.Free()

    def _sync(self, win: Any, failed: bool | None = None) -> bool:
        """Every rank's stores to ``win`` visible to the node's ranks (collective in the node).
        With ``failed`` given, the barrier is a reduction of it: True on every rank of the
        node if it was True on one."""
        win.Sync()
        if failed is None:
            self.node.Barrier()
            anyone = False
        else:
            anyone = bool(self.node.allreduce(int(failed), op=self._mpi.MAX))
        win.Sync()
        return anyone

    def _across_nodes(self, win: Any, bounds: np.ndarray, *columns: np.ndarray) -> None:
        """With several nodes, the leaders complete the other nodes' rows of ``columns`` (each
        node's ranks wrote theirs: one range of ``bounds`` per node) with an in-place
        Allgatherv each, then the node syncs (collective; nothing on a single node)."""
        if self.n_nodes == 1:
            return
        MPI = self._mpi
        if self.leaders != MPI.COMM_NULL:
            starts = bounds[self.node_first]
            counts = np.diff(starts)
            for column in columns:
                self.leaders.Allgatherv(MPI.IN_PLACE,
                                        [column, (counts, starts[:-1]), MPI.DOUBLE])
        self._sync(win)

    # ------------------------------------------------------------------ the arrays
    def publish(self, n_total: int, r_local: np.ndarray, m_local: np.ndarray,
                stages: PotentialStages) -> tuple[np.ndarray, ...]:
        """The replicated ``r, m, phi, mcum`` of all ``n_total`` stars (collective).

        Parameters
        ----------
        n_total : int
            Number of stars (the same on every rank).
        r_local, m_local : numpy.ndarray
            This rank's stars' radii and masses, its rows of the block layout
            (``block_counts(n_total, P)[rank]`` of them) in global order.
        stages : PotentialStages
            Fill ``phi`` and ``mcum`` (the node's ranks together, :meth:`_potential`).

        Returns
        -------
        tuple of numpy.ndarray
            Views of length ``n_total`` into this node's window, never to be written by the
            caller: the radii valid until the call after next (the next step's old radii),
            the others until the next call.
        """
        bounds = rank_bounds(n_total, self.comm.Get_size())
        rank = self.comm.Get_rank()
        lo, hi = int(bounds[rank]), int(bounds[rank + 1])
        # (a broken layout is a bug: this rank raises after the collectives below, as the
        # Allgatherv path does, and writes nothing meanwhile)
        wrong = r_local.shape[0] != hi - lo or m_local.shape[0] != hi - lo
        # nobody reads the set written now any more (published two calls ago), nor the windows
        # retired at the last call
        self.node.Barrier()
        for win in self._retired:
            self._free(win)
        self._retired = []
        if n_total > self.capacity:  # (the same decision on every rank)
            if self._win is not None:
                self._retired = [self._win]
            self._allocate(max(64, int(n_total * GROWTH)), stages.block)
        self._check_block(stages)
        win = self._win
        arrays = dict(self._arrays, r=self._radii[self._next])
        self._next ^= 1
        if not wrong:
            arrays["r"][lo:hi] = r_local
            arrays["m"][lo:hi] = m_local
        self._sync(win)
        self._across_nodes(win, bounds, arrays["r"], arrays["m"])
        views = tuple(arrays[name][:n_total] for name in FIELDS)
        self._potential(views, 0, stages)
        if wrong:
            raise RuntimeError(f"rank {rank} holds {r_local.shape[0]} stars, the block layout "
                               f"needs {hi - lo}")
        self._views = views
        return views

    def _stage(self, fn: Callable[[], None], leader_only: bool) -> None:
        """``fn()`` on the node's first rank (``leader_only``) or on every rank, then a sync
        of the node; an exception on any rank is raised on every rank of the node (none
        waits for the others forever)."""
        failed: BaseException | None = None
        if self.is_leader or not leader_only:
            try:
                fn()
            except Exception as exc:
                failed = exc
        if self._sync(self._win, failed is not None):
            raise failed or RuntimeError("the potential failed on another rank of this node")

    def _check_block(self, stages: PotentialStages) -> None:
        """The window's block totals were laid out for ``stages.block`` (the same stages on
        every rank, so every rank raises alike, before anything is written)."""
        if stages.block != self._block:
            raise ValueError(f"potential blocks of {stages.block} rows in a window made for "
                             f"{self._block}")

    def _potential(self, views: tuple[np.ndarray, ...], first: int,
                   stages: PotentialStages) -> None:
        """``phi`` and ``mcum`` of ``views`` (r, m, phi, mcum) from block ``first // block``
        on, for the masses in the window (collective in the node): each rank of the node its
        share of the blocks (mass totals; enclosed mass, increments and final-sum totals;
        final sum), the totals in the window, a sync after each stage."""
        r, m, phi, mcum = views
        n = r.shape[0]
        block = stages.block
        nb = (n + block - 1) // block
        bf = first // block
        share = bf + block_shares(nb - bf, self.node.Get_size())
        k = self.node.Get_rank()
        b0, b1 = int(share[k]), int(share[k + 1])
        mass_totals, phi_totals = self._totals
        self._stage(lambda: stages.mass_totals(m, mass_totals, b0, b1, block), False)
        self._stage(lambda: stages.blocks(r, m, phi, mcum, mass_totals, phi_totals, bf, b0, b1,
                                          block), False)
        self._stage(lambda: stages.suffix(phi, phi_totals, b0, b1, nb, block), False)

    def update_masses(self, rows: np.ndarray, masses: np.ndarray,
                      stages: PotentialStages) -> tuple[np.ndarray, ...]:
        """New masses at some rows of the last published arrays, and the potential and
        enclosed mass brought up to date, in place (collective in the node; the same
        arguments on every rank of the run).

        Parameters
        ----------
        rows : numpy.ndarray of int
            Global rows whose mass changes (at least one).
        masses : numpy.ndarray of float64
            Their new masses.
        stages : PotentialStages
            The potential's stages (:meth:`_potential`), run from the first row (``first``)
            of the innermost changed row's block on.

        Returns
        -------
        tuple of numpy.ndarray
            The views ``m, phi, mcum`` of :meth:`publish`'s last call, now holding the new
            values: those of :func:`physics.potential.updated_potential`, bit for bit (from
            ``first`` on the full sum's operations; inside, the old potential plus the
            constant change at ``first``, added by the node's ranks each to its share of the
            rows).  ``first`` is the first row of the innermost changed row's block.

        Notes
        -----
        Every rank's reads of the old values must come before the call (the arrays change
        under any view of them).  The unbound stars leave from near the centre as often as
        not (the first changed row within the inner 0.04-13 % of N in a fresh Plummer
        model), so the update is nearly a full potential: before, every rank of the node
        copied the masses and wrote the potential and enclosed mass of all N stars into
        private arrays (12-15 ms per rank and step at N = 1e6 on 16 ranks of one node).
        """
        self._check_block(stages)
        r, m, phi, mcum = self._views
        first = (int(rows.min()) // stages.block) * stages.block
        old = float(phi[first])

        def set_masses() -> None:
            m[rows] = masses

        # after this sync nobody reads the old values any more (and all read phi[first])
        self._stage(set_masses, True)
        self._potential(self._views, first, stages)
        if first > 0:
            shift = phi[first] - old
            share = rank_bounds(first, self.node.Get_size())
            k = self.node.Get_rank()
            inside = phi[share[k]:share[k + 1]]
            inside += shift
            self._sync(self._win)
        return m, phi, mcum

    def gather(self, local: np.ndarray, n_total: int) -> np.ndarray:
        """Every rank's rows of one float64 column in global order (collective).

        Parameters
        ----------
        local : numpy.ndarray of float64
            This rank's rows of the block layout of ``n_total`` rows
            (``block_counts(n_total, P)[rank]`` of them).
        n_total : int
            Number of rows (the same on every rank), at most the window's room (the
            previous step's radii always fit: a window is only replaced by a larger one).

        Returns
        -------
        numpy.ndarray
            A view of length ``n_total`` into this node's window, never to be written by the
            caller, valid until the next call (which starts with a barrier of the node, after
            which no rank still reads it).
        """
        bounds = rank_bounds(n_total, self.comm.Get_size())
        rank = self.comm.Get_rank()
        lo, hi = int(bounds[rank]), int(bounds[rank + 1])
        # (a wrong count or size is a bug: this rank raises after the collectives, as
        # publish does, and writes nothing meanwhile)
        wrong = local.shape[0] != hi - lo or n_total > self.capacity
        self.node.Barrier()
        win = self._win
        column = self._arrays["gathered"]
        if not wrong:
            column[lo:hi] = local
        self._sync(win)
        if n_total <= self.capacity:
            self._across_nodes(win, bounds, column)
        if wrong:
            raise RuntimeError(f"NodeReplicas.gather: rank {rank} holds {local.shape[0]} rows "
                               f"of {n_total} (layout {hi - lo}, room {self.capacity})")
        return column[:n_total]

    def bytes_mapped(self) -> int:
        """Bytes of the node's window this rank maps (the same pages on every rank of the
        node): what a per-process memory figure counts once per rank instead of once."""
        return (len(SLICES) * self.capacity + sum(t.size for t in self._totals)) * 8

    def close(self) -> None:
        """Free the windows and communicators (collective)."""
        self.node.Barrier()
        for win in self._retired + ([self._win] if self._win is not None else []):
            self._free(win)
        self._retired, self._win, self._arrays, self._radii = [], None, {}, []
        self._views = ()
        self._totals = ()
        self.capacity = 0
        if self.leaders != self._mpi.COMM_NULL:
            self.leaders.Free()
        self.node.Free()
