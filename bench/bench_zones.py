"""Time to core collapse with and without radial time-step zones (issue 51), in one sitting.

``python bench/bench_zones.py [--n 100000] [--seed 1] [--zones 8] [--theta-max 1.412]
[--dt-window 20] [--threads 2]`` runs the Plummer model to N_core <= 100 with the shared step
and with ``run.zones`` (the runs of bench/validate_zones.py: an existing finished run of the
same settings is reused, so run it on a quiet machine or remove runs/zones/ first), and writes
docs/performance_zones.json and docs/performance_zones.png: wall time, steps, time per step
and per part, the collapse time, the steps per due zone, and the stars stepped per step
against time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.validate_zones import run_one  # noqa: E402

#: issue 51's goal: N = 1e5 to core collapse on two cores at CMC-COSMIC's settings
TARGET_MINUTES = 3.5


def describe(out: Path) -> dict:
    """Wall time, steps, per-part timing, collapse time and the zones' work of one run."""
    from cmc.io import read_diagnostics

    d, attrs = read_diagnostics(out / "diagnostics.h5")
    timing = json.loads(attrs["timing"]) if "timing" in attrs else {}
    rec = {"dir": str(out.relative_to(ROOT)), "wall_s": float((out / "wall_s.txt").read_text()),
           "steps": int(d["step"][-1]), "t_cc_trh": float(d["time_trh"][-1]),
           "stop_reason": str(attrs.get("stop_reason", "")),
           "max_abs_dE_rel": float(np.max(np.abs(d["dE_rel"]))), "timing": timing}
    if "n_stepped" in d:
        n, lvl = d["n_stepped"][1:], d["zone_level"][1:].astype(int)
        rec["stepped_per_step_mean"] = float(np.mean(n))
        rec["stepped_fraction_mean"] = float(np.mean(n / d["N"][1:]))
        rec["steps_per_due_zone"] = np.bincount(lvl).tolist()
        t = d["time_trh"][1:]
        every = max(1, t.size // 500)
        rec["stepped_series"] = {"step": d["step"][1:][::every].tolist(),
                                 "t_trh": t[::every].tolist(),
                                 "fraction": (n / d["N"][1:])[::every].tolist()}
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--zones", type=int, default=8)
    ap.add_argument("--theta-max", type=float, default=1.412)
    ap.add_argument("--dt-window", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    runs = {}
    for name, z in (("shared", 1), ("zones", args.zones)):
        out = run_one(args.n, args.seed, z, args.theta_max, args.dt_window, args.threads)
        runs[name] = describe(out)
    ratio = runs["shared"]["wall_s"] / runs["zones"]["wall_s"]
    record = {"machine": f"{platform.node()} ({os.cpu_count()} cores)",
              "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "N": args.n, "seed": args.seed,
              "zones": args.zones, "theta_max": args.theta_max, "dt_window": args.dt_window,
              "threads": args.threads, "speedup": ratio,
              "target_minutes": TARGET_MINUTES,
              "target_met": runs["zones"]["wall_s"] / 60.0 <= TARGET_MINUTES, "runs": runs}
    docs = ROOT / "docs"
    (docs / "performance_zones.json").write_text(json.dumps(record, indent=1) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ser = runs["zones"].get("stepped_series")
    if ser:
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
        ax.plot(ser["step"], ser["fraction"], lw=0.5)
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("stars stepped per step / N")
        t_cc = runs["zones"]["t_cc_trh"]
        late = np.asarray(ser["t_trh"]) < t_cc
        bx.plot(t_cc - np.asarray(ser["t_trh"])[late], np.asarray(ser["fraction"])[late],
                lw=0.5)
        bx.set_xscale("log")
        bx.set_yscale("log")
        bx.invert_xaxis()
        bx.set_xlabel("t_cc - t [t_rh0]")
        fig.suptitle(f"Plummer N = {args.n}, run.zones = {args.zones}: the work per step")
        fig.tight_layout()
        fig.savefig(docs / "performance_zones.png", dpi=110)
        plt.close(fig)
    for name, r in runs.items():
        print(f"{name:7s} wall {r['wall_s'] / 60:6.2f} min  steps {r['steps']:6d}  "
              f"t_cc {r['t_cc_trh']:.3f} t_rh0  |dE/E0| {r['max_abs_dE_rel']:.1e}  "
              f"ms/step {1e3 * r['wall_s'] / max(r['steps'], 1):.1f}")
    print(f"speed-up {ratio:.2f}x; target <= {TARGET_MINUTES} min with zones: "
          f"{'met' if record['target_met'] else 'not met'}")


if __name__ == "__main__":
    main()
