"""The counting communicator of ``make bench`` counts what ranks really send (any P)."""

from __future__ import annotations

import numpy as np

from parallel.comm import CountingComm, allgatherv_array, allreduce_sum
from parallel.sample_sort import parallel_sort


def test_counts_match_payload(on_subcomms):
    def fn(comm):
        c = CountingComm(comm)
        p, rank = comm.Get_size(), comm.Get_rank()
        allreduce_sum(c, np.arange(5.0))  # 5 float64 = 40 bytes from every rank
        allgatherv_array(c, np.ones(rank + 1))  # (rank + 1) float64, plus the sizes
        # Alltoallv through the sort: bytes sent to other ranks = what they receive from us
        n = 50 + 7 * rank
        rng = np.random.default_rng(rank)
        fields = {"r": rng.random(n), "id": np.arange(n, dtype=np.int64) + 1000 * rank}
        before = {k: list(v) for k, v in c.counts.items()}
        parallel_sort(c, fields)
        sorted_counts = {k: list(v) for k, v in c.counts.items()}
        if p > 1:  # an explicit exchange: j + 1 bytes to rank j; the own piece stays
            from mpi4py import MPI

            cnt = np.arange(1, p + 1, dtype=np.int64)
            dsp = np.concatenate(([0], np.cumsum(cnt)[:-1]))
            rcnt = np.full(p, rank + 1, dtype=np.int64)
            rdsp = np.arange(p, dtype=np.int64) * (rank + 1)
            c.reset()
            c.Alltoallv([np.zeros(int(cnt.sum()), np.uint8), (cnt, dsp), MPI.BYTE],
                        [np.zeros(int(rcnt.sum()), np.uint8), (rcnt, rdsp), MPI.BYTE])
        return (sorted_counts, before, p, rank, dict(c.counts))

    for outcomes in on_subcomms(fn).values():
        assert all(o[0] == "ok" for o in outcomes), outcomes
        for _, (counts, before, size, rank, _) in outcomes:
            if size == 1:  # the serial fast paths send nothing
                assert "Allreduce" not in counts and "Alltoallv" not in counts
                continue
            assert counts["Allreduce"][0] >= 1
            assert before["Allreduce"] == [1, 40]
            assert before["Allgatherv"] == [1, 8 * (rank + 1)]
            assert counts["Alltoallv"][0] == 1  # one exchange: cut at the block bounds
            # 16-byte records (r, id): everything a rank sent went to the other ranks
            assert counts["Alltoallv"][1] % 16 == 0
            expect = sum(j + 1 for j in range(size) if j != rank)
            assert outcomes[rank][1][4]["Alltoallv"] == [1, expect]


def test_time_inside_collectives(on_subcomms):
    """The counting communicator also times each method (what bench_step reports as the time
    inside the collectives): a rank that arrives late makes the others wait inside the call."""
    import time

    def fn(comm):
        c = CountingComm(comm)
        if comm.Get_rank() == 0:
            time.sleep(0.05)
        c.Barrier()
        allreduce_sum(c, np.ones(3))
        return dict(c.seconds), comm.Get_size(), comm.Get_rank()

    for outcomes in on_subcomms(fn).values():
        assert all(o[0] == "ok" for o in outcomes), outcomes
        for _, (seconds, size, rank) in outcomes:
            assert set(seconds) >= {"Barrier"} and all(v >= 0.0 for v in seconds.values())
            if size > 1 and rank > 0:  # waited for rank 0's sleep
                assert seconds["Barrier"] > 0.03


def test_bench_books_the_orbit_kernels_imbalance_as_wait(on_subcomms):
    """With ``measure_wait`` (the bench), a rank whose orbit kernel is slower makes the others
    wait at the barrier after the kernel: that time is "wait", not their "orbits"."""
    import time

    from cmc.config import load_config
    from cmc.simulation import Simulation

    # long beside a time slice: with 3 ranks on 2 cores (CI) a rank can lose its core for
    # tens of ms inside its kernel (a fresh clone's run booked 40 ms of orbits against 50)
    delay = 0.3

    def fn(comm):
        sim = Simulation.create(load_config(None, ["initial.n=400", "initial.seed=2"]), comm)
        sim.step()
        kernel = sim.orbits
        last = comm.Get_size() - 1

        def slow_on_last(*args):
            kernel(*args)
            if comm.Get_rank() == last:
                time.sleep(delay)

        sim.orbits = slow_on_last
        sim.measure_wait = True
        sim.timers = dict.fromkeys(sim.timers, 0.0)
        sim.step()
        return sim.timers["orbits"], sim.timers["wait"], comm.Get_rank(), comm.Get_size()

    for outcomes in on_subcomms(fn).values():
        assert all(o[0] == "ok" for o in outcomes), outcomes
        for _, (orbits, wait, rank, size) in outcomes:
            if size > 1 and rank < size - 1:  # waited for the slow rank, at the barrier
                assert wait > 0.8 * delay and orbits < 0.5 * delay
            elif size > 1:
                assert orbits > delay


#: mpi4py's collectives of Python objects (pickled): each rank unpacks one object per rank.
PICKLED = ("allgather", "gather", "bcast", "allreduce", "reduce", "scatter", "alltoall",
           "exscan", "scan")


def test_step_gathers_no_pickled_objects(on_subcomms):
    """A step without binaries makes no collective of pickled objects: with one object per
    rank to unpack on every rank (about 10 us each, bench/gather_cost.py), such a gather
    would cost 10 ms per step at P = 1024.  The sort's exact cuts, the removal of unbound
    stars and the time step's gathers exchange numbers only."""
    from cmc.config import load_config
    from cmc.simulation import Simulation

    class Spy:
        def __init__(self, comm):
            self._comm, self.calls = comm, []

        def __getattr__(self, name):
            attr = getattr(self._comm, name)
            if name not in PICKLED:
                return attr

            def call(*args, **kwargs):
                self.calls.append(name)
                return attr(*args, **kwargs)
            return call

    def fn(comm):
        # a tidal field: stars stripped and unbound objects removed in most steps
        sim = Simulation.create(load_config(None, [
            "initial.n=2000", "initial.seed=3", "tidal.mode=fixed", "tidal.r_t0_from=value",
            "tidal.r_t0=3.0"]), comm)
        sim.step()
        spy = Spy(sim.comm)
        sim.comm = spy
        if hasattr(sim.orbits, "comm"):  # (the MPI orbit kernel's lookup table and blocks)
            sim.orbits.comm = spy
        n0 = sim.n_total
        for _ in range(4):
            sim.step()
        return spy.calls, n0 - sim.n_total

    for p, outcomes in on_subcomms(fn).items():
        assert all(o[0] == "ok" for o in outcomes), outcomes
        assert all(o[1][0] == [] for o in outcomes), (p, outcomes)
        assert outcomes[0][1][1] > 0  # stars left: the removals' gathers were made
