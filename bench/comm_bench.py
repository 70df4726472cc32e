"""Latency and bandwidth of the collectives a step makes, on this machine's MPI.

``mpiexec -n P python bench/comm_bench.py [N ...]`` times, on P ranks, the three kinds of
collective of a Monte Carlo step at N stars: a small Allreduce (latency), the Allgatherv of
the replicated arrays (16 bytes per star of all N: r and m) and the sort's Alltoallv (each
rank sends its N/P records of ``RECORD_BYTES`` evenly to all ranks, as at large P where a
star's new radius almost never falls in its old rank's range).  Prints one JSON line (rank 0):
seconds per call (median of repeats, the slowest rank's) and the bandwidth per rank they
imply, for the performance model's network terms (:mod:`bench.perf_model`).
"""

from __future__ import annotations

import json
import sys
import time
from functools import partial

import numpy as np
from mpi4py import MPI

#: Bytes per star record sent by the sort (parallel.sort_records._record_dtype of the star table).
RECORD_BYTES = 88


def _time(fn, comm, repeats: int) -> float:
    """Median over ``repeats`` of the slowest rank's time of ``fn()`` [s]."""
    out = []
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        out.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    return float(np.median(out))


def main() -> None:
    comm = MPI.COMM_WORLD
    p, rank = comm.Get_size(), comm.Get_rank()
    ns = [int(float(x)) for x in sys.argv[1:]] or [100_000, 1_000_000]
    one = np.ones(4)
    res = {"P": p, "allreduce_s": _time(lambda: comm.Allreduce(MPI.IN_PLACE, one), comm, 200)}
    for n in ns:
        share = [n // p + (k < n % p) for k in range(p)]
        mine = np.ones(2 * share[rank])
        full = np.empty(2 * n)
        counts = [2 * s for s in share]
        ag = _time(partial(comm.Allgatherv, mine, [full, counts]), comm, 20)
        per = RECORD_BYTES * share[rank] // p  # bytes to each rank
        send = np.ones(per * p, dtype=np.uint8)
        recv = np.empty(per * p, dtype=np.uint8)
        cnt = [per] * p
        a2a = _time(partial(comm.Alltoallv, [send, cnt], [recv, cnt]), comm, 20)
        res[str(n)] = {"allgatherv_s": ag, "allgatherv_GBps_per_rank": 16 * n * (p - 1) / p
                       / ag / 1e9 if p > 1 else None,
                       "alltoallv_s": a2a, "alltoallv_GBps_per_rank": per * (p - 1) / a2a / 1e9
                       if p > 1 else None}
    if rank == 0:
        print("COMM " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
