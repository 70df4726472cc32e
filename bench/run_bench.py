"""``make bench``: random-number throughput and per-part step cost, as a table and JSON.

Configurations: N = 1e5 and 1e6; one process with 1 thread and with all cores; MPI P = 2
(1 thread per rank).  Set BENCH_ARGS="--quick" for N = 1e5 only.  On a machine with CuPy and a
CUDA device a GPU section follows (:func:`gpu_section`): the orbit kernel and the whole step at
N = 1e5, 1e6 and 1e7, one CPU core and all cores against the GPU back end, transfers apart;
its JSON names the device.  Figures are microseconds
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
    gpu = gpu_section(quick, cores)
    print("BENCH_JSON " + json.dumps({"rng": rng, "steps": rows, "gpu": gpu}))


def gpu_section(quick: bool, cores: int) -> dict:
    """Orbit kernel and whole step on the GPU back end against the CPU: microseconds per
    star at N = 1e5, 1e6, 1e7 (1e5 with --quick), transfers apart.  Skipped (and says why)
    without CuPy or a CUDA device."""
    from physics.orbits_gpu import BackendUnavailable, check_backend

    try:
        what = check_backend("gpu")
    except BackendUnavailable as exc:
        print(f"\nGPU section skipped: {exc}")
        return {"skipped": str(exc)}
    print(f"\nGPU back end: {what}")
    sizes = [(100_000, 10)] if quick else [(100_000, 10), (1_000_000, 3), (10_000_000, 2)]
    kernel, steps = [], []
    for n, nsteps in sizes:
        reps = max(2, nsteps)
        orb = [sys.executable, "bench/bench_step.py", "orbits", str(n), str(reps)]
        kernel.append(_run(orb + ["cpu"], 1))
        kernel.append(_run(orb + ["gpu"], cores))
        step = [sys.executable, "bench/bench_step.py", str(n), str(nsteps)]
        steps.append(_run(step + ["1"], 1))
        if cores > 1:
            steps.append(_run(step + [str(cores)], cores))
        steps.append(_run(step + [str(cores), "run.orbit_backend=gpu"], cores))
    device = next(k["device"] for k in kernel if k["backend"] == "gpu")
    print(f"Orbit kernel, microseconds per star (device: {device})")
    print(" | ".join(f"{h:>11s}" for h in ("N", "CPU 1 core", "GPU total", "GPU kernel",
                                              "to device", "to host", "prepare", "speed-up")))
    summary = {}
    for n, _ in sizes:
        c = next(k for k in kernel if k["N"] == n and k["backend"] == "cpu")
        g = next(k for k in kernel if k["N"] == n and k["backend"] == "gpu")
        vals = [c["us_per_star"], g["us_per_star"], g["s_kernel"], g["s_to_device"],
                g["s_to_host"], g["s_prepare"], c["us_per_star"] / g["us_per_star"]]
        print(f"{n:11d} | " + " | ".join(f"{v:11.3g}" for v in vals))
        summary[f"orbit_speedup_1core_N{n:.0e}"] = vals[-1]
    print("Whole step, microseconds per star per step")
    for n, _ in sizes:
        one = next(r for r in steps if r["N"] == n and r["threads"] == 1)
        allc = next(r for r in steps if r["N"] == n and r["threads"] == cores
                    and r["orbit_backend"] == "cpu") if cores > 1 else one
        g = next(r for r in steps if r["N"] == n and r["orbit_backend"] == "gpu")
        print(f"N={n:.0e}: CPU 1 core {one['us_per_star_step']:.3g}, CPU {cores} cores "
              f"{allc['us_per_star_step']:.3g}, GPU {g['us_per_star_step']:.3g} (orbits "
              f"{g['parts_us_per_star']['orbits']:.3g}, of which transfers "
              f"{g['gpu_us_per_star']['to_device'] + g['gpu_us_per_star']['to_host']:.3g}); "
              f"speed-up over all cores {allc['us_per_star_step'] / g['us_per_star_step']:.2f}x")
        summary[f"step_speedup_allcores_N{n:.0e}"] = (allc["us_per_star_step"]
                                                      / g["us_per_star_step"])
    goal = {"orbit_kernel_1e6_vs_1core": ">= 100x", "step_vs_all_cores": ">= 10x"}
    print("Goals (issue 14):", json.dumps(goal), "reached:", json.dumps(summary))
    return {"device": device, "cores": cores, "orbit_kernel": kernel, "steps": steps,
            "summary": summary, "goal": goal}


if __name__ == "__main__":
    main()
