"""Per-part cost of a Monte Carlo step, in microseconds per star.

``python bench/bench_step.py N STEPS THREADS [section.key=value ...]`` runs one configuration
in this process (``mpiexec -n P python bench/bench_step.py ...`` for P ranks) and prints one JSON
line; the optional overrides change the model (e.g. ``initial.binary_fraction=0.1``, or
``run.orbit_backend=gpu`` for new orbits on a CUDA device).  With the GPU back end the line
also holds the device's name and the orbit kernel's host<->device transfer time and bytes.

``python bench/bench_step.py orbits-agree N gpu`` compares the GPU orbit kernel with the CPU
kernel star by star on one Plummer model (``orbits N REPS cpu|gpu`` times the kernel alone).

``python bench/bench_step.py collapse CHECKPOINT STEPS THREADS`` times steps continued from a
checkpoint (deep in core collapse: :func:`bench.run_bench.collapse_checkpoint` makes one).

The STEPS are timed as 3 runs of STEPS/3 and the fastest is reported.  Besides the per-part
times (the slowest rank's; "wait" is the time ranks wait for each other
at barriers put before the step's two large collectives and after the orbit kernel, i.e. load
imbalance), the line holds
what each rank sends per step, counted by :class:`parallel.comm.CountingComm` over a few
further steps (messages = collective calls; bytes = payload this rank contributes), and the
memory per star: the peak resident memory less the memory of the process with every kernel
loaded (a small warm-up run first), summed over ranks (the node-shared window of
``run.shared_memory`` counted once per node), over N.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _max_op():
    """MPI.MAX where mpi4py is installed (SerialComm ignores the op)."""
    try:
        from mpi4py import MPI

        return MPI.MAX
    except ImportError:
        return None


def _rss_now() -> int:
    """Current resident memory of this process [bytes]."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _warm(comm, overrides: list[str], n: int) -> int:
    """Run a small model (loads every kernel) and return the resident memory after it."""
    from cmc.config import load_config
    from cmc.simulation import Simulation

    cfg = load_config(None, [f"initial.n={n}", "initial.seed=1", *overrides])
    sim = Simulation.create(cfg, comm)
    for _ in range(2):
        sim.step()
    del sim
    import gc

    gc.collect()
    return _rss_now()


class _BseClock:
    """Times ``physics.stellar_evolution.evolve`` and ``next_call_times`` (BSE's calls and the
    scheduler's) inside the stellar-evolution process by wrapping them, and counts the objects
    evolved (the module's functions are looked up at each call)."""

    def __init__(self) -> None:
        from physics import stellar_evolution as se

        self.se = se
        self.orig = {k: getattr(se, k) for k in ("evolve", "next_call_times")}
        for k, fn in self.orig.items():
            setattr(se, k, self._timed(k, fn))
        self.reset()

    def _timed(self, key, fn):
        def call(batch, *args, **kw):
            t0 = time.perf_counter()
            try:
                return fn(batch, *args, **kw)
            finally:
                self.s[key] += time.perf_counter() - t0
                if key == "evolve":
                    self.objects += batch.tphys.size
        return call

    def reset(self) -> None:
        self.s = dict.fromkeys(self.orig, 0.0)
        self.objects = 0

    def read(self, sim, steps: int, t_start: float) -> dict:
        """This rank's figures over the last ``steps`` steps (started at code time
        ``t_start``)."""
        hist = sim.history.get("n_se_evolved", [])
        return {"bse_s": self.s["evolve"], "schedule_s": self.s["next_call_times"],
                "objects_called": self.objects,
                "n_se_evolved_per_step": float(sum(hist[-steps:])) / steps,
                "n_supernovae": float(sum(sim.history.get("n_supernovae", [])[-steps:])),
                "t_myr": [sim.units.rel_to_myr(t_start), sim.units.rel_to_myr(sim.state.time)]}

    def restore(self) -> None:
        for k, fn in self.orig.items():
            setattr(self.se, k, fn)


def _se_summary(rows: list[dict], steps: int, n: int, se_us: float) -> dict:
    """The stellar-evolution figures of a bench_step run (rows: each rank's
    :meth:`_BseClock.read`): objects per step, BSE's time per call and per star-step (the
    slowest rank's), the rest of the process (our bookkeeping: on several ranks it holds the
    wait for the rank with the most BSE calls, at the allgather of errors), and per rank."""
    bse = max(r["bse_s"] for r in rows)
    sched = max(r["schedule_s"] for r in rows)
    called = sum(r["objects_called"] for r in rows)
    return {"n_se_evolved_per_step": rows[0]["n_se_evolved_per_step"],  # (a global sum)
            "objects_called_per_step": called / steps,
            "n_supernovae": rows[0]["n_supernovae"], "t_myr": rows[0]["t_myr"],
            "bse_us_per_star": bse / (steps * n) * 1e6,
            "schedule_us_per_star": sched / (steps * n) * 1e6,
            "bookkeeping_us_per_star": se_us - (bse + sched) / (steps * n) * 1e6,
            "bse_us_per_object": (sum(r["bse_s"] for r in rows) / called * 1e6
                                  if called else float("nan")),
            # the objects due live where the heavy stars are (the centre: rank 0)
            "objects_called_per_step_by_rank": [r["objects_called"] / steps for r in rows],
            "bse_us_per_star_by_rank": [r["bse_s"] / (steps * n) * 1e6 for r in rows]}


def bench_step(n: int, steps: int, threads: int, comm=None,
               overrides: list[str] | None = None, checkpoint: str | None = None,
               counted_steps: int = 3, repeats: int = 3) -> dict:
    import numba

    from cmc.config import load_config
    from cmc.simulation import Simulation
    from cmc.state import PARTS
    from parallel.comm import CountingComm, get_world_comm
    from parallel.memory import keep_freed_memory

    comm = comm or get_world_comm()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    keep_freed_memory()  # as the CLI does
    if checkpoint is None:
        rss0 = _warm(comm, overrides or [], min(n, 2000))
        cfg = load_config(None, [f"initial.n={n}", "initial.seed=1",
                                 f"run.max_steps={steps}", *(overrides or [])])
        sim = Simulation.create(cfg, comm)
    else:  # go on from a checkpoint, whatever stopped it
        rss0 = _rss_now()
        sim = Simulation.from_checkpoint(checkpoint, comm, overrides=[
            "run.n_core_stop=0", "run.rc_stop_fraction=0", "run.t_max=1e9",
            "run.max_steps=1000000000", *(overrides or [])])
        cfg = sim.cfg
        n = sim.n_total
    sim.measure_wait = True
    # warm up (compilation is cached, but the first call still loads it; a GPU kernel
    # compiles at its first launch)
    for _ in range(2):
        sim.step()
    dt0 = sim.last.get("dt", float("nan"))
    sim.timers = dict.fromkeys(PARTS, 0.0)
    gpu = None
    if cfg.run.orbit_backend != "cpu":  # (numba's CPU dispatcher has a 'stats' of its own)
        from physics.orbits_gpu import TransferStats

        sim.orbits.stats = gpu = TransferStats()
    # the steps in `repeats` runs; the fastest run is reported (the machines this runs on are
    # shared: a run that another process disturbed is slower, never faster)
    chunk = max(1, steps // max(1, repeats))
    best = None
    bse = _BseClock() if cfg.bse.stellar_evolution else None
    for _ in range(max(1, steps // chunk)):
        sim.timers = dict.fromkeys(PARTS, 0.0)
        if bse is not None:
            bse.reset()
        t_start = sim.state.time
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(chunk):
            sim.step()
        comm.Barrier()
        wall = comm.allreduce(time.perf_counter() - t0, op=_max_op())
        if best is None or wall < best[0]:
            best = (wall, dict(sim.timers), bse and bse.read(sim, chunk, t_start))
    wall, mine, se_row = best
    if bse is not None:
        bse.restore()
    steps = chunk
    if gpu is not None:  # the transfers of every timed step (not the counted ones below)
        import dataclasses

        gpu = dataclasses.replace(gpu)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    timers = comm.gather(mine, root=0)
    # the node's shared window (run.shared_memory) is in every rank's resident memory: count
    # it once per node (on its first rank)
    rep = getattr(sim, "replicas", None)
    shared = rep.bytes_mapped() if rep is not None and not rep.is_leader else 0
    rss_all = comm.gather((rss, rss0 + shared), root=0)
    # what travels: a few more steps through a counting communicator
    counter = CountingComm(sim.comm)
    # (the MPI orbit kernel holds the communicator too: its lookup table's Allgatherv and the
    # blocks shared between neighbours)
    holders = [x for x in (sim, sim.orbits) if hasattr(x, "comm")]
    for x in holders:
        x.comm = counter
    for _ in range(counted_steps):
        sim.step()
    for x in holders:
        x.comm = counter._comm
    sent = comm.gather(counter.counts, root=0)
    inside = comm.gather(counter.seconds, root=0)
    se_rows = comm.gather(se_row, root=0)
    if comm.Get_rank() != 0:
        return {}
    per = {p: max(t[p] for t in timers) / (steps * n) * 1e6 for p in PARTS}
    hist = sim.history
    events = {k: float(sum(hist[k][-steps:])) for k in ("n_binary_single", "n_binary_binary",
                                                         "n_three_body", "n_wide_broken")
              if k in hist}
    msgs = [sum(c[0] for c in r.values()) / counted_steps for r in sent]
    nbytes = [sum(c[1] for c in r.values()) / counted_steps for r in sent]
    out = {"N": n, "ranks": comm.Get_size(), "threads": threads, "steps": steps,
           "overrides": overrides or [], "events": events,
           "checkpoint": checkpoint, "dt": dt0,
           "orbit_backend": cfg.run.orbit_backend,
           "encounters_s_per_rank": [t["encounters"] for t in timers],
           "us_per_star_step": wall / (steps * n) * 1e6, "parts_us_per_star": per,
           "parts_us_per_star_by_rank": [{p: t[p] / (steps * n) * 1e6 for p in PARTS}
                                         for t in timers],
           "ms_per_step": wall / steps * 1e3,
           "shared_memory": getattr(sim, "replicas", None) is not None,
           "max_rss_bytes_per_star": max(r for r, _ in rss_all) / n,
           "bytes_per_star": sum(r - r0 for r, r0 in rss_all) / n,
           "messages_per_step_per_rank": max(msgs),
           "bytes_sent_per_step_per_rank": max(nbytes),
           "sent_by_method_rank0": {k: [v[0] / counted_steps, v[1] / counted_steps]
                                    for k, v in sent[0].items()},
           # wall time inside each collective per step [ms], mean and max over the ranks
           # (waiting for the slower ranks included)
           "comm_ms_per_step_by_method": {
               k: [sum(s.get(k, 0.0) for s in inside) / len(inside) / counted_steps * 1e3,
                   max(s.get(k, 0.0) for s in inside) / counted_steps * 1e3]
               for k in sorted({k for s in inside for k in s})}}
    if se_rows[0] is not None:  # BSE's own time: the slowest rank's; objects: all ranks'
        out["stellar_evolution"] = _se_summary(se_rows, steps, n, per["stellar_evolution"])
    if gpu is not None:
        out["device"] = sim.orbits.device
        calls = max(gpu.calls, 1)  # one kernel call per timed step, all timed runs
        out["gpu_us_per_star"] = {
            "prepare": gpu.s_prepare / (calls * n) * 1e6,
            "to_device": gpu.s_to_device / (calls * n) * 1e6,
            "kernel": gpu.s_kernel / (calls * n) * 1e6,
            "to_host": gpu.s_to_host / (calls * n) * 1e6}
        out["gpu_bytes_per_step"] = {"to_device": gpu.bytes_to_device / calls,
                                     "to_host": gpu.bytes_to_host / calls}
    return out


def _orbit_inputs(n: int, model_seed: int, stream_seed: int) -> tuple:
    """The orbit kernel's arguments for a Plummer model of ``n`` stars (one rank's streams)."""
    from cmc.initial import initial_generator
    from parallel.streams import Streams
    from physics.initial_conditions import plummer
    from physics.orbits import block_rows
    from physics.potential import compute_potential

    st = plummer(n, initial_generator(model_seed))
    r, m, vr, vt = (st[k] for k in ("r", "m", "vr", "vt"))
    phi, mcum = compute_potential(r, m)
    gidx, block_start = block_rows(n)
    states = Streams.create(stream_seed, 1, block_start.size - 1).states[0].copy()
    return (r, phi, mcum, gidx, block_start, m, vr, vt, states, 0.0)


def bench_orbit_kernel(n: int, reps: int, backend: str) -> dict:
    """Microseconds per star of the orbit kernel alone (one process) on a Plummer model: the
    numba kernel on the threads numba has, or a :class:`physics.orbits_gpu.DeviceOrbits`
    (its kernel time and its transfers apart)."""
    import numba

    from physics.orbits import new_orbits_rows
    from physics.orbits_gpu import run_orbit_kernel

    args = _orbit_inputs(n, 7, 3)
    if backend == "cpu":
        fn = new_orbits_rows
        device = f"CPU, {numba.get_num_threads()} thread(s)"
    else:
        from physics.orbits_gpu import DeviceOrbits

        fn = DeviceOrbits(backend)
        device = fn.device
    run_orbit_kernel(fn, *args)  # compile / load
    best = float("inf")
    for _ in range(reps):
        if backend != "cpu":
            from physics.orbits_gpu import TransferStats

            fn.stats = TransferStats()
        t0 = time.perf_counter()
        run_orbit_kernel(fn, *args)
        t = time.perf_counter() - t0
        if t < best:
            best = t
            stats = getattr(fn, "stats", None)
    out = {"N": n, "backend": backend, "device": device, "us_per_star": best / n * 1e6}
    if backend != "cpu":
        out.update({k: getattr(stats, k) / n * 1e6 for k in
                    ("s_prepare", "s_to_device", "s_kernel", "s_to_host")})
    return out


def agree_orbit_kernel(n: int, backend: str) -> dict:
    """The orbit kernel of ``backend`` (gpu, gpu-sim) against the CPU kernel on the same
    Plummer model of ``n`` stars: :func:`physics.orbits_gpu.compare_orbits` within
    :data:`physics.orbits_gpu.DEVICE_MAX_ULPS` (FMA contraction on a device)."""
    from physics.orbits import new_orbits_rows
    from physics.orbits_gpu import DEVICE_MAX_ULPS, DeviceOrbits, compare_orbits, run_orbit_kernel

    args = _orbit_inputs(n, 11, 5)
    dev = DeviceOrbits(backend)
    cmp = compare_orbits(run_orbit_kernel(new_orbits_rows, *args), run_orbit_kernel(dev, *args),
                         max_ulps=DEVICE_MAX_ULPS)
    return {"N": n, "backend": backend, "device": dev.device, "max_ulps_allowed": DEVICE_MAX_ULPS,
            **cmp}


if __name__ == "__main__":
    if sys.argv[1] == "orbits-agree":
        out = agree_orbit_kernel(int(sys.argv[2]), sys.argv[3])
    elif sys.argv[1] == "orbits":
        n, reps = int(sys.argv[2]), int(sys.argv[3])
        out = bench_orbit_kernel(n, reps, sys.argv[4])
    elif sys.argv[1] == "collapse":
        steps, threads = int(sys.argv[3]), int(sys.argv[4])
        out = bench_step(0, steps, threads, overrides=sys.argv[5:], checkpoint=sys.argv[2])
    else:
        n, steps, threads = (int(x) for x in sys.argv[1:4])
        out = bench_step(n, steps, threads, overrides=sys.argv[4:])
    if out:
        print("BENCH " + json.dumps(out), flush=True)
