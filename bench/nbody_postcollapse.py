"""The post-collapse core of Monte Carlo and N-body runs of one model (issue 50's question).

``python bench/nbody_postcollapse.py RUN [RUN ...]`` prints, per run (a ``cmc run`` or ``cmc
nbody`` output folder), the collapse time and the median r_c/r_h, N_core (and for N-body runs
the 3-D Casertano-Hut r_c_3d/r_h) in windows of t_rh0 after it, with the energy error there,
as a markdown table (docs/validation_nbody.md quotes it).

Collapse: the first output with N_core <= 10 (Monte Carlo) or, for an N-body run whose N_core
(the same estimator about the density centre) stays above that, the first hard binary
(``E_binding`` below -10 kT with kT = 1/(6N) of E0 = -1/4, N-body units).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WINDOWS = ((0.0, 1.0), (1.0, 2.0), (2.0, 4.0), (4.0, 8.0))


def summarise(path: str) -> dict:
    from cmc.io import read_diagnostics

    d, attrs = read_diagnostics(Path(path) / "diagnostics.h5")
    nbody = str(attrs.get("mode", "")) == "nbody"
    t = np.asarray(d["time_trh"])
    rc = np.asarray(d["r_c"]) / np.asarray(d["r_h"])
    nc = np.asarray(d["N_core"])
    n0 = float(np.asarray(d["N"])[0])
    hit = np.flatnonzero(nc <= 10)
    how = "N_core <= 10"
    if nbody and "E_binding" in d:
        hard = np.flatnonzero(np.nan_to_num(np.asarray(d["E_binding"])) < -10.0 / (6.0 * n0))
        if hard.size and (not hit.size or hard[0] < hit[0]):
            hit, how = hard, "hard binary"
    out = {"run": path, "kind": "N-body" if nbody else "Monte Carlo", "t_end": float(t[-1]),
           "t_cc": float(t[hit[0]]) if hit.size else None, "by": how, "windows": []}
    if out["t_cc"] is None:
        return out
    for lo, hi in WINDOWS:
        m = (t >= out["t_cc"] + lo) & (t < out["t_cc"] + hi)
        if not m.any():
            break
        row = {"from": lo, "to": hi, "rc_rh": float(np.median(rc[m])),
               "rc_rh_p10": float(np.percentile(rc[m], 10)),
               "rc_rh_p90": float(np.percentile(rc[m], 90)), "N_core": float(np.median(nc[m])),
               "complete": bool(t[-1] >= out["t_cc"] + hi)}
        if nbody:
            row["rc3d_rh"] = float(np.median(np.asarray(d["r_c_3d"])[m] / np.asarray(d["r_h"])[m]))
            row["dE_rel_max"] = float(np.max(np.abs(np.asarray(d["dE_rel"])[m])))
        out["windows"].append(row)
    return out


def table(rows: list[dict]) -> str:
    lines = ["| run | t_cc / t_rh0 (by) | after collapse [t_rh0] | r_c/r_h median [10-90 %] | "
             "N_core | r_c_3d/r_h | max \\|dE/E0\\| |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        name = f"{r['kind']} {Path(r['run']).name}"
        if r["t_cc"] is None:
            lines.append(f"| {name} | none by {r['t_end']:.1f} | | | | | |")
            continue
        for w in r["windows"]:
            span = f"{w['from']:g}-{w['to']:g}" + ("" if w["complete"] else " (to the end)")
            lines.append(f"| {name} | {r['t_cc']:.2f} ({r['by']}) | {span} | "
                         f"{w['rc_rh']:.2g} [{w['rc_rh_p10']:.2g}, {w['rc_rh_p90']:.2g}] | "
                         f"{w['N_core']:.1f} | {w.get('rc3d_rh', float('nan')):.2g} | "
                         f"{w.get('dE_rel_max', float('nan')):.1e} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table([summarise(p) for p in sys.argv[1:]]))
