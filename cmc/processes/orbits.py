"""New orbits (the paper's sec. 2.1): each object's new radius drawn from its orbit in the potential
of the step's start (turning points by bisection, rejection sampling), by the orbit kernel of
``run.orbit_backend``: numba on the CPU (under MPI with a shared radius lookup table and blocks
balanced between neighbouring ranks, :class:`SharedTableOrbits`) or the same kernel on a GPU."""

from __future__ import annotations

import logging
import time
from typing import Any

import numba
import numpy as np

from cmc.errors import InputError
from cmc.processes.base import Process, StepWork
from parallel.balance import (
    TAG_INPUTS,
    TAG_RESULTS,
    BlockShare,
    pack_arrays,
    recv_bytes,
    send_bytes,
    unpack_arrays,
)
from parallel.comm import allgatherv_array, allreduce_max
from parallel.decomposition import rank_bounds
from physics.orbits import (
    LOOKUP_PER_BUCKET,
    ORBIT_REMOVED,
    new_orbits_rows,
    new_orbits_rows_lut,
)
from physics.potential import radius_lookup_entries, radius_lookup_scale
from physics.sums import copy_rows
from physics.zones import freeze_rows, thaw_rows

log = logging.getLogger("cmc.simulation")


class NewOrbits(Process):
    """Every row's new radius and velocities (the rows removed before keep theirs); the
    stars beyond the tidal radius leave with ``ORBIT_ESCAPED_TIDAL``, those unbound in the
    new potential with ``ORBIT_ESCAPED_UNBOUND``."""

    name = "new orbits"
    timer = "orbits"
    reads = "the replicated r_all, phi_all, mcum_all; masses, speeds; work.gidx, status"
    changes = ("work.r_new, vr_new, vt_new, phi_oo, phi_on, r_apo, status, counters; the "
               "blocks' stream states (written back); with run.zones > 1 the drawn rows' zone")
    draws = ("block sub-stream, after the binary events': per row in block order, the "
             "rejection sampling's pairs of uniforms (new radius) and the sign of v_r (with "
             "run.zones > 1, only the rows whose zone is due)")
    counters = ("trials_per_star", "bound_violations")
    wait_after = True

    def run(self, work: StepWork) -> None:
        sim = self.sim
        stars = sim.stars
        n = stars.n
        work.r_new = r_new = np.empty(n)
        work.vr_new = np.empty(n)
        work.vt_new = np.empty(n)
        copy_rows(stars.vr, work.vr_new)
        copy_rows(stars.vt, work.vt_new)
        work.phi_oo = np.empty(n)
        work.phi_on = np.empty(n)
        work.r_apo = np.empty(n)
        frozen = None
        if work.due is not None:  # time-step zones: the rows whose zone is not due (by the
            # field: events and stellar evolution may have added or removed rows) keep their
            # radius and velocities; the kernel skips them as it skips the removed ones
            frozen = np.empty(n, dtype=np.bool_)
            freeze_rows(stars.zone, work.zone_level, work.status, frozen)
        sim.orbits(sim.r_all, sim.phi_all, sim.mcum_all, work.gidx, work.block_start, stars.m,
                   stars.vr, stars.vt, work.states, float(sim.state.r_tidal), r_new,
                   work.vr_new, work.vt_new, work.phi_oo, work.phi_on, work.status,
                   work.counters, work.r_apo)
        if frozen is not None:
            # (and the drawn rows' zones: their new orbits' pericentre zones, in one pass)
            thaw_rows(frozen, sim.r_all, work.gidx, work.status, r_new, work.vr_new,
                      work.vt_new, work.phi_oo, work.phi_on, work.r_apo, *work.zone_bounds,
                      stars.zone)
        sim.streams.states[work.rows, work.subs] = work.states
        removed = work.status == ORBIT_REMOVED
        if removed.any():  # the kernel left their outputs undefined; r is the sort's key
            r_new[removed] = sim.r_all[work.gidx[removed]]


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
