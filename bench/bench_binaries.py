"""``make bench`` (binaries): step cost with 10 % primordial binaries against the same model
without, at N = 1e5 (goal of the binaries issue: at most 1.5x).

Runs bench/bench_step.py on the initial Plummer model (steps 3-22 of the run): without binaries,
with 10 % hard binaries (a in [0.01, 0.3] a_hs) on 1 thread, on all cores, and on 2 MPI ranks
(1 thread each; the encounter time per rank shows the load balance: the centre, where
encounters happen, lives on rank 0).  Prints a table and writes runs/bench_binaries.json.
``--quick``: N = 2e4.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run_bench import BIN, _run  # noqa: E402

BINARIES = ["initial.binary_fraction=0.1", "initial.binary_a_max=0.3"]


def main() -> None:
    n = 20_000 if "--quick" in sys.argv else 100_000
    steps = 20
    cores = os.cpu_count() or 1
    step = [sys.executable, "bench/bench_step.py", str(n), str(steps)]
    rows = [("no binaries, 1 thread", _run(step + ["1"], 1)),
            ("10 % binaries, 1 thread", _run(step + ["1"] + BINARIES, 1))]
    if cores > 1:
        rows.append((f"10 % binaries, {cores} threads",
                     _run(step + [str(cores)] + BINARIES, cores)))
    rows.append(("10 % binaries, 2 ranks", _run([str(BIN / "mpiexec"), "-n", "2"] + step
                                                + ["1"] + BINARIES, 1)))
    base = rows[0][1]["us_per_star_step"]
    print(f"\nStep cost with binaries, N = {n:.0e}, {steps} steps from the start, "
          f"microseconds per star-step (machine: {os.uname().nodename}, {cores} cores)")
    print(f"{'configuration':>28s} | {'total':>8s} | {'vs none':>7s} | {'encounters':>10s} | "
          f"{'share':>6s} | {'events':>30s} | encounter s per rank")
    out = []
    for label, r in rows:
        enc = r["parts_us_per_star"]["encounters"]
        ev = r.get("events", {})
        evs = ", ".join(f"{k.removeprefix('n_')}={v:g}" for k, v in ev.items() if v)
        print(f"{label:>28s} | {r['us_per_star_step']:8.3g} | "
              f"{r['us_per_star_step'] / base:7.2f} | {enc:10.3g} | "
              f"{enc / r['us_per_star_step']:6.1%} | {evs:>30s} | "
              + ", ".join(f"{x:.2f}" for x in r["encounters_s_per_rank"]))
        out.append({"label": label, **r})
    path = ROOT / "runs" / "bench_binaries.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(f"JSON: {path}")


if __name__ == "__main__":
    main()
