"""What each rank computes at P = 1, 2, 4, ... ranks, on any machine: CPU time per part.

``mpiexec -n P python bench/compute_scaling.py one N STEPS`` runs a Plummer model of N stars
on P ranks and prints one line ``COMPUTE {json}`` (rank 0): per rank and part of the step
(:data:`cmc.state.PARTS`), the CPU time of the rank's thread per step with the time
inside MPI calls taken out (the step's communicator, the orbit kernel's and the node
communicator of the shared arrays are wrapped: a collective's waiting, busy or not, and its
copying are not compute).  The ranks may outnumber the cores: a rank waiting for a core is
not charged for it, so a 2-core machine measures what each of 16 ranks computes, the part of
issue 16's scaling check that does not need 16 cores.  What it cannot see: the collectives
themselves (``bench/scaling.py`` on a machine with the cores), and the cores' contention for
memory; ranks sharing a core evict each other's caches at every switch, which makes their
compute look dearer than on cores of their own.  The orbit kernel's block sharing is off
(``run.orbit_balance = off``): it moves blocks by measured wall time, meaningless here.

``python bench/compute_scaling.py measure OUT.json [--p 1,2,4,8,16] [--n 100000]`` runs every
P and writes OUT.json (rewritten after each P); ``python bench/compute_scaling.py report
OUT.json`` writes the section between the ``compute-scaling`` markers of docs/performance.md:
per part, the slowest rank's compute per step against the one-rank compute divided by P, and
the fit ``a / P + b`` of the slowest rank's total (``b``: what every rank computes whatever
P, in microseconds per star of all N).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scaling_common import fit_scaling, machine, slowest  # noqa: E402

DOC = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- compute-scaling:begin -->", "<!-- compute-scaling:end -->"
#: the methods of an mpi4py communicator whose time is not compute (calls of the step and of
#: the shared arrays: collectives, point-to-point and their probes)
COMM_METHODS = frozenset({
    "Allreduce", "Reduce", "Allgather", "Allgatherv", "Gather", "Gatherv", "Alltoall",
    "Alltoallv", "Exscan", "Scan", "Bcast", "bcast", "allreduce", "reduce", "allgather",
    "gather", "scatter", "alltoall", "exscan", "scan", "Barrier", "Isend", "Send", "Recv",
    "Probe", "Iprobe", "recv", "send", "Sendrecv"})


class CommClock:
    """CPU time of this thread, less the time spent inside the wrapped communicators' calls."""

    def __init__(self) -> None:
        self.in_comm = 0.0

    def __call__(self) -> float:
        return time.thread_time() - self.in_comm

    def wrap(self, comm):
        """``comm`` with every call of :data:`COMM_METHODS` timed into ``in_comm``."""
        clock = self

        class Timed:
            def __getattr__(self, name):
                attr = getattr(comm, name)
                if name not in COMM_METHODS:
                    return attr

                def timed(*args, **kwargs):
                    t0 = time.thread_time()
                    try:
                        return attr(*args, **kwargs)
                    finally:
                        clock.in_comm += time.thread_time() - t0
                return timed

        return Timed()


class _TimeWith:
    """The ``time`` module with ``perf_counter`` replaced (the step's part timers read it)."""

    def __init__(self, clock) -> None:
        self.perf_counter = clock

    def __getattr__(self, name):
        return getattr(time, name)


def run_one(n: int, steps: int) -> dict | None:
    """This rank's compute per part and step [ms]; every rank's, on rank 0 (None elsewhere)."""
    import numba

    import cmc.simulation as simulation
    import cmc.step as step_module
    from cmc.config import load_config
    from cmc.state import PARTS
    from parallel.comm import get_world_comm
    from parallel.memory import keep_freed_memory

    numba.set_num_threads(1)
    keep_freed_memory()  # as the CLI does
    comm = get_world_comm()
    cfg = load_config(None, [f"initial.n={n}", "initial.seed=1",
                             f"run.max_steps={steps + 10}", "run.orbit_balance=off"])
    sim = simulation.Simulation.create(cfg, comm)
    for _ in range(2):  # loads every kernel
        sim.step()
    clock = CommClock()
    for holder in (sim, sim.orbits):
        if hasattr(holder, "comm"):
            holder.comm = clock.wrap(holder.comm)
    if getattr(sim, "replicas", None) is not None:
        sim.replicas.node = clock.wrap(sim.replicas.node)
    saved = step_module.time  # (the step's timers read the clock there)
    step_module.time = _TimeWith(clock)
    try:
        sim.timers = dict.fromkeys(PARTS, 0.0)
        c0, m0 = clock(), clock.in_comm
        for _ in range(steps):
            sim.step()
        total, in_comm = clock() - c0, clock.in_comm - m0
    finally:
        step_module.time = saved
    mine = {"parts_ms": {p: sim.timers[p] / steps * 1e3 for p in PARTS},
            "compute_ms": total / steps * 1e3, "comm_ms": in_comm / steps * 1e3}
    everyone = comm.gather(mine, root=0)
    if comm.Get_rank() != 0:
        return None
    return {"N": n, "P": comm.Get_size(), "steps": steps, "ranks": everyone,
            "shared_memory": getattr(sim, "replicas", None) is not None}


def measure(out: Path, ps: list[int], ns: list[int], steps: int, mpiexec: str,
            timeout: float) -> dict:
    """Every (N, P); OUT.json rewritten after each."""
    from cmc.sweep_summary import _atomic_write

    data = {"machine": machine(), "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "steps": steps, "rows": [], "errors": []}
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    out.parent.mkdir(parents=True, exist_ok=True)
    for n in ns:
        for p in ps:
            cmd = [mpiexec, "-n", str(p), sys.executable, str(Path(__file__).resolve()), "one",
                   str(n), str(steps)]
            t0 = time.perf_counter()
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT,
                                 timeout=timeout)
            got = [ln[8:] for ln in res.stdout.splitlines() if ln.startswith("COMPUTE ")]
            if got:
                row = json.loads(got[0])
                row["wall_s"] = time.perf_counter() - t0
                data["rows"].append(row)
                print(f"N={n:.0e} P={p:2d}: slowest rank {slowest(row):.2f} ms compute per "
                      f"step ({row['wall_s']:.0f} s)", flush=True)
            else:
                data["errors"].append(f"N={n} P={p}: {res.stderr[-600:]}")
                print(data["errors"][-1], flush=True)
            _atomic_write(out, json.dumps(data, indent=1) + "\n")
    return data


def report(path: Path, write_doc: bool = True) -> str:
    """The section of docs/performance.md from a measurement; written between the markers."""
    from cmc.state import PARTS

    data = json.loads(path.read_text())
    m = data["machine"]
    cpu = m.get("lscpu", {}).get("Model name", "?")
    out = [f"Machine: {m.get('cpus')} logical CPUs ({cpu}), measured {data['made']} "
           f"(`python bench/compute_scaling.py measure`, {data['steps']} steps from a fresh "
           f"Plummer model; this section: `python bench/compute_scaling.py report`).  "
           "Milliseconds per step of the slowest rank, CPU time with the MPI calls taken out; "
           "in brackets, the one-rank figure divided by P.", ""]
    for n in sorted({r["N"] for r in data["rows"]}):
        rows = sorted((r for r in data["rows"] if r["N"] == n), key=lambda r: r["P"])
        one = next((r for r in rows if r["P"] == 1), None)
        if one is None:
            continue
        parts = [p for p in PARTS if slowest(one, p) > 0.0 or any(slowest(r, p) > 0.01
                                                                  for r in rows)]
        out.append(f"N = {n:.0e}:")
        out.append("")
        out.append("| P | " + " | ".join(parts) + " | step | speedup |")
        out.append("|---|" + "---|" * (len(parts) + 2))
        for r in rows:
            p = r["P"]
            cells = [f"{slowest(r, q):.2f} ({slowest(one, q) / p:.2f})" for q in parts]
            out.append(f"| {p} | " + " | ".join(cells)
                       + f" | {slowest(r):.2f} ({slowest(one) / p:.2f}) | "
                       f"{slowest(one) / slowest(r):.1f}x |")
        a, b = fit_scaling([r["P"] for r in rows], [slowest(r) for r in rows])
        us = 1e3 / n  # ms per step -> us per star
        out.append("")
        out.append(f"Fit of the step's compute: a / P + b with a = {a * us:.3f} and "
                   f"b = {b * us:.4f} us per star of all N (b: computed by every rank whatever "
                   f"P); with it alone the speedup could not pass {(a + b) / max(b, 1e-12):.0f}x.")
        out.append("")
    text = "\n".join(out).rstrip() + "\n"
    if write_doc:
        doc = DOC.read_text()
        if BEGIN in doc and END in doc:
            head, rest = doc.split(BEGIN, 1)
            doc = head + BEGIN + "\n\n" + text + "\n" + END + rest.split(END, 1)[1]
            DOC.write_text(doc)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("one", help="one configuration (under mpiexec)")
    one.add_argument("n", type=int)
    one.add_argument("steps", type=int)
    me = sub.add_parser("measure", help="every P, into OUT.json")
    me.add_argument("out", type=Path)
    me.add_argument("--p", default="1,2,4,8,16")
    me.add_argument("--n", default="100000")
    me.add_argument("--steps", type=int, default=10)
    me.add_argument("--mpiexec", default=str(Path(sys.executable).with_name("mpiexec")))
    me.add_argument("--timeout", type=float, default=1800.0)
    rep = sub.add_parser("report", help="the docs section from OUT.json")
    rep.add_argument("out", type=Path)
    rep.add_argument("--no-doc", action="store_true")
    args = ap.parse_args()
    if args.cmd == "one":
        row = run_one(args.n, args.steps)
        if row is not None:
            print("COMPUTE " + json.dumps(row), flush=True)
    elif args.cmd == "measure":
        measure(args.out, [int(x) for x in args.p.split(",")],
                [int(float(x)) for x in args.n.split(",")], args.steps, args.mpiexec,
                args.timeout)
        print(report(args.out, write_doc=False))
    else:
        print(report(args.out, write_doc=not args.no_doc))


if __name__ == "__main__":
    main()
