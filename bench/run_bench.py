"""``make bench``: random-number throughput and per-part step cost, as a table and JSON.

Configurations: N = 1e5 and 1e6; one process with 1 thread and with all cores; MPI P = 2
(1 thread per rank).  Set BENCH_ARGS="--quick" for N = 1e5 only.  Figures are microseconds
per star per step (per-part times are the slowest rank's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BIN = Path(sys.executable).parent


def _run(cmd: list[str], threads: int) -> dict:
    env = dict(os.environ, NUMBA_NUM_THREADS=str(max(threads, 1)))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    for line in p.stdout.splitlines():
        if line.startswith("BENCH "):
            return json.loads(line[6:])
    raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")


def main() -> None:
    quick = "--quick" in sys.argv
    from bench.bench_rng import bench_rng

    rng = bench_rng()
    cores = os.cpu_count() or 1
    rows = []
    for n, steps in ([(100_000, 10)] if quick else [(100_000, 10), (1_000_000, 3)]):
        step = [sys.executable, "bench/bench_step.py", str(n), str(steps)]
        rows.append(_run(step + ["1"], 1))
        if cores > 1:
            rows.append(_run(step + [str(cores)], cores))
        rows.append(_run([str(BIN / "mpiexec"), "-n", "2"] + step + ["1"], 1))
    parts = list(rows[0]["parts_us_per_star"])
    head = ["N", "ranks", "threads", "total"] + parts + ["bytes/star"]
    print("\nStep cost, microseconds per star per step (machine: "
          f"{os.uname().nodename}, {cores} cores)")
    print(" | ".join(f"{h:>11s}" for h in head))
    for r in rows:
        vals = [r["N"], r["ranks"], r["threads"], r["us_per_star_step"]]
        vals += [r["parts_us_per_star"][p] for p in parts] + [r["max_rss_bytes_per_star"]]
        print(" | ".join(f"{v:11.3g}" if isinstance(v, float) else f"{v:11d}" for v in vals))
    for n in sorted({r["N"] for r in rows}):
        base = next(r for r in rows if r["N"] == n and r["ranks"] == 1 and r["threads"] == 1)
        for r in rows:
            if r["N"] == n and r is not base:
                print(f"speed-up N={n:.0e} ranks={r['ranks']} threads={r['threads']}: "
                      f"{base['us_per_star_step'] / r['us_per_star_step']:.2f}x")
    print("\nRandom numbers (one core):", json.dumps(rng))
    print("BENCH_JSON " + json.dumps({"rng": rng, "steps": rows}))


if __name__ == "__main__":
    main()
