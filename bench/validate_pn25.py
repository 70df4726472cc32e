"""Issue 49's validation of the 2.5PN term: three black holes scattered with and without it.

Three 1/3-mass black holes (G = 1, total mass 1): a circular binary of a = 1 and a single at
0.1 of the critical speed, sticky radii 5 Schwarzschild radii (CMC's BH_RADIUS_MULTIPLYER), for
speeds of light c = 30, 100, 300 (orbital speeds 0.03, 0.01, 0.003 c).  For each c the same
encounters are integrated Newtonian (c only sets the radii) and with the term: a scan of impact
parameters (b^2 uniform up to the one of pericentre 2 a, fixed orientation and phase, as in
tests/test_pn25.py) and an ensemble drawn from lfsr113 sub-streams.  Counts of mergers (contact
of the sticky radii) in each, the encounters where only the run with the term merges, and the
cost.  Writes docs/validation_pn25.json; docs/validation_collisions.md quotes it.

    python bench/validate_pn25.py [--scan 60] [--ensemble 40]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parallel.streams import Streams  # noqa: E402
from physics import fewbody as fb  # noqa: E402

U_FIXED = (0.31, 0.62, 0.17, 0.44, 0.5, 0.5, 0.5, 0.5)


def objects(c: float):
    m = 1.0 / 3.0
    rs = 5.0 * 2.0 * m / c ** 2
    return (fb.binary((0, 1), (m, m), 1.0, 0.0, (rs, rs), (True, True)),
            fb.single(2, m, rs, True))


def run_one(state: fb.InitialState, clight: float) -> dict:
    t0 = time.perf_counter()
    out = fb.integrate(state, fb.EncounterSettings(clight=clight))
    return {"mergers": out.mergers, "gw_mergers": out.n_gw_mergers, "valid": out.valid,
            "hierarchy": out.hierarchy, "steps": out.n_steps, "de_gw": out.de_gw,
            "seconds": time.perf_counter() - t0}


def scan(c: float, n: int) -> list[dict]:
    bin_, sin = objects(c)
    vinf = 0.1 * fb.critical_velocity(bin_, sin)
    b_max = fb.pericentre_impact_parameter(1.0, vinf, 2.0)
    rows = []
    for k in range(n):
        b = b_max * math.sqrt((k + 0.5) / n)
        row = {"k": k, "b": b}
        for name, cl in (("pn", c), ("newton", 0.0)):
            st = fb.initial_state(bin_, sin, vinf, b, U_FIXED)
            st.recoil_uniforms = np.array([0.3, 0.7, 0.1])
            row[name] = run_one(st, cl)
        rows.append(row)
    return rows


def ensemble(c: float, n: int, seed: int = 5) -> list[dict]:
    bin_, sin = objects(c)
    vinf = 0.1 * fb.critical_velocity(bin_, sin)
    rows = []
    for name, cl in (("pn", c), ("newton", 0.0)):
        states = np.ascontiguousarray(Streams.create(seed, 1, n).states[0])
        for i in range(n):
            st = fb.sample_encounter(bin_, sin, vinf, 2.0, states, i)
            fb.draw_recoil_uniforms(st, fb.EncounterSettings(clight=cl), states, i)
            if len(rows) <= i:
                rows.append({"i": i})
            rows[i][name] = run_one(st, cl)
    return rows


def summary(rows: list[dict]) -> dict:
    def count(name, key):
        return int(sum(1 for r in rows if r[name][key]))

    return {"n": len(rows),
            "mergers_pn": count("pn", "mergers"), "gw_mergers_pn": count("pn", "gw_mergers"),
            "mergers_newton": count("newton", "mergers"),
            "only_pn_merges": [r.get("k", r.get("i")) for r in rows
                               if r["pn"]["mergers"] and not r["newton"]["mergers"]],
            "invalid_pn": len(rows) - count("pn", "valid"),
            "invalid_newton": len(rows) - count("newton", "valid"),
            "seconds_pn": float(sum(r["pn"]["seconds"] for r in rows)),
            "seconds_newton": float(sum(r["newton"]["seconds"] for r in rows))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scan", type=int, default=60)
    ap.add_argument("--ensemble", type=int, default=40)
    ap.add_argument("--c", type=float, nargs="*", default=[30.0, 100.0, 300.0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "validation_pn25.json"))
    args = ap.parse_args()
    result = {}
    for c in args.c:
        s = scan(c, args.scan)
        e = ensemble(c, args.ensemble)
        result[str(c)] = {"scan": summary(s), "ensemble": summary(e)}
        print(c, json.dumps(result[str(c)]), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
