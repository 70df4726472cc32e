"""Per-part cost of a Monte Carlo step, in microseconds per star.

``python bench/bench_step.py N STEPS THREADS [section.key=value ...]`` runs one configuration
in this process (``mpiexec -n P python bench/bench_step.py ...`` for P ranks) and prints one JSON
line; the optional overrides change the model (e.g. ``initial.binary_fraction=0.1``).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def bench_step(n: int, steps: int, threads: int, comm=None,
               overrides: list[str] | None = None) -> dict:
    import numba

    from cmc.config import load_config
    from cmc.simulation import PARTS, Simulation
    from parallel.comm import get_world_comm

    comm = comm or get_world_comm()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    cfg = load_config(None, [f"initial.n={n}", "initial.seed=1", f"run.max_steps={steps}",
                             *(overrides or [])])
    sim = Simulation.create(cfg, comm)
    # warm up (compilation is cached, but the first call still loads it)
    for _ in range(2):
        sim.step()
    sim.timers = dict.fromkeys(PARTS, 0.0)
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        sim.step()
    comm.Barrier()
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    parts = comm.allreduce([sim.timers[p] for p in PARTS]) if False else None
    timers = comm.gather(sim.timers, root=0)
    rss_all = comm.gather(rss, root=0)
    if comm.Get_rank() != 0:
        return {}
    per = {p: max(t[p] for t in timers) / (steps * n) * 1e6 for p in PARTS}
    hist = sim.history
    events = {k: float(sum(hist[k][-steps:])) for k in ("n_binary_single", "n_binary_binary",
                                                         "n_three_body", "n_wide_broken")
              if k in hist}
    return {"N": n, "ranks": comm.Get_size(), "threads": threads, "steps": steps,
            "overrides": overrides or [], "events": events,
            "encounters_s_per_rank": [t["encounters"] for t in timers],
            "us_per_star_step": wall / (steps * n) * 1e6, "parts_us_per_star": per,
            "max_rss_bytes_per_star": max(rss_all) / n * comm.Get_size() / comm.Get_size(),
            "parts": parts}


if __name__ == "__main__":
    n, steps, threads = (int(x) for x in sys.argv[1:4])
    out = bench_step(n, steps, threads, overrides=sys.argv[4:])
    if out:
        print("BENCH " + json.dumps(out), flush=True)
