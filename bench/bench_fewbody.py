"""Few-body encounter cost: our integrator ("ar") against REBOUND's IAS15, per encounter.

``python bench/bench_fewbody.py [--quick]`` (part of ``make bench``).  Hard equal-mass
binary-single encounters (circular binary, a = 1, m = 1) at v_inf/v_c = 0.1, 0.5 and 2 with
CMC's pericentre cap r_p = 2a, and binary-binary encounters (two such binaries, r_p = 2(a1+a2))
at v/v_c = 0.1.  Each encounter is timed on its own in one process (one core); the ensembles
run in parallel processes.  Prints a table and ``BENCH_JSON {...}``; writes
``runs/bench_fewbody.json``.  The mean is the figure that matters inside a cluster (long
resonances dominate it); median and 99th percentile show the tail.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scattering import cost_summary, run_ensemble  # noqa: E402

#: (objects, v/v_c, r_p cap, encounters with ours, encounters with IAS15)
CONFIGS = [("bs", 0.1, 2.0, 2000, 300), ("bs", 0.5, 2.0, 2000, 300), ("bs", 2.0, 2.0, 2000, 300),
           ("bb", 0.1, 4.0, 1000, 100)]


def main() -> None:
    quick = "--quick" in sys.argv
    div = 10 if quick else 1
    rows = []
    for kind, v, rp, n_ar, n_ias in CONFIGS:
        for integ, n in (("ar", n_ar // div), ("ias15", n_ias // div)):
            res = run_ensemble(kind, v, rp, n, seed=7, settings={"integrator": integ})
            if integ == "ar":
                ar_seconds = res["seconds"]
            row = {"kind": kind, "v_over_vc": v, "rp_max": rp, "integrator": integ,
                   **cost_summary(res),
                   "exchange_fraction": float((res["kind"] == "exchange").mean()),
                   "max_de_rel": float(res["de_rel"].max())}
            if integ == "ias15":
                # encounter i draws from sub-stream i in both: the first n of ours are the
                # same initial states as IAS15's n
                row["ar_mean_s_same_encounters"] = float(ar_seconds[:n].mean())
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\nEncounter cost, seconds per encounter on one core ({os.uname().nodename}, "
          f"{os.cpu_count()} cores)")
    head = ["enc", "v/vc", "integ", "n", "mean", "median", "p99", "enc/s", "t-limit",
            "f_exch"]
    print(" | ".join(f"{h:>8s}" for h in head))
    for r in rows:
        print(" | ".join(f"{x:>8}" for x in (
            r["kind"], r["v_over_vc"], r["integrator"], r["n"], f"{r['mean_s']:.4f}",
            f"{r['median_s']:.4f}", f"{r['p99_s']:.3f}", f"{r['encounters_per_s']:.1f}",
            f"{r['time_limit_fraction']:.3f}", f"{r['exchange_fraction']:.3f}")))
    for kind, v, *_ in CONFIGS:
        a = next(r for r in rows
                 if (r["kind"], r["v_over_vc"], r["integrator"]) == (kind, v, "ar"))
        b = next(r for r in rows
                 if (r["kind"], r["v_over_vc"], r["integrator"]) == (kind, v, "ias15"))
        print(f"{kind} v/vc={v}: IAS15 / ar mean cost {b['mean_s'] / a['mean_s']:.1f}x "
              f"({b['mean_s'] / b['ar_mean_s_same_encounters']:.1f}x on the same "
              f"{b['n']} encounters), median {b['median_s'] / a['median_s']:.1f}x")
    out = ROOT / "runs" / "bench_fewbody.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1) + "\n")
    print("BENCH_JSON " + json.dumps(rows))


if __name__ == "__main__":
    main()
