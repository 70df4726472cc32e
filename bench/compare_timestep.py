"""Lagrange radii and collapse time at the three time-step settings of the validation runs.

``python bench/compare_timestep.py N [SEED]`` reads runs/validate_N<N>[_seed<S>]{,_theta1.412_w20,
_theta1.412} (made by ``bench/validate.py N --seeds S [--theta-max 1.412 --dt-window 20|40]``),
plots the 1, 10, 50 and 90 % Lagrange radii against t / t_rh0 for theta_max = 1.0 with 40-star
windows (the defaults), 1.412 with 20-star windows (the CMC paper's windows, the defaults from
issue 16 until 2026-11-25) and 1.412 with 40-star windows (CMC-COSMIC's defaults), and prints
(and writes to docs/timestep_N<N>.json) the radii at fixed times with their differences from
the first setting.  Same seed, so the three runs start from the same stars and differ only by
the time step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SETTINGS = [("", "theta_max 1.0, 40-star windows (default)"),
            ("_theta1.412_w20", "theta_max 1.412, 20-star windows"),
            ("_theta1.412", "theta_max 1.412, 40-star windows")]
FRACTIONS = (0.01, 0.1, 0.5, 0.9)
TIMES = (2.0, 5.0, 10.0, 15.0)


def main(n: int, seed: int = 1) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cmc.io import read_diagnostics

    base = f"validate_N{n}" + (f"_seed{seed}" if seed != 1 else "")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    out = {"N": n, "seed": seed, "times_trh": TIMES, "fractions": FRACTIONS, "runs": {}}
    styles = ["-", "--", ":"]
    for (tag, label), ls in zip(SETTINGS, styles, strict=True):
        d_path = ROOT / "runs" / (base + tag) / "diagnostics.h5"
        if not d_path.exists():
            print(f"missing {d_path} (bench/validate.py {n} --seeds {seed} ...)")
            continue
        d, attrs = read_diagnostics(d_path)
        fr = np.asarray(attrs["lagrange_fractions"])
        t = d["time_trh"]
        lr = d["lagrange_radii"]
        at = {}
        for f in FRACTIONS:
            j = int(np.argmin(np.abs(fr - f)))
            line, = ax.semilogy(t, lr[:, j], ls, lw=1, color=f"C{FRACTIONS.index(f)}")
            if f == FRACTIONS[0]:
                line.set_label(label)
            at[f"{f:g}"] = [float(np.interp(x, t, lr[:, j])) if x <= t[-1] else None
                            for x in TIMES]
        out["runs"][label] = {"steps": int(d["step"][-1]), "t_end_trh": float(t[-1]),
                              "lagrange_at_times": at}
    ax.set_xlabel("t / t_rh0")
    ax.set_ylabel("Lagrange radii (1, 10, 50, 90 %) [r_vir]")
    ax.set_title(f"Plummer N = {n:.0e}, seed {seed}: line style = time step")
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = ROOT / "docs" / f"timestep_N{n}.png"
    fig.savefig(png, dpi=110)
    ref = out["runs"].get(SETTINGS[0][1])
    for label, r in out["runs"].items():
        print(f"{label}: {r['steps']} steps to t = {r['t_end_trh']:.2f} t_rh0")
        for f, vals in r["lagrange_at_times"].items():
            cells = []
            for k, v in enumerate(vals):
                rv = ref["lagrange_at_times"][f][k] if ref else None
                dv = f" ({(v / rv - 1) * 100:+.1f} %)" if v and rv and r is not ref else ""
                cells.append("-" if v is None else f"{v:.4g}{dv}")
            print(f"  r_{f}: " + ", ".join(f"t={x:g}: {c}" for x, c in zip(TIMES, cells,
                                                                          strict=True)))
    (ROOT / "docs" / f"timestep_N{n}.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main(int(float(sys.argv[1])), int(sys.argv[2]) if len(sys.argv) > 2 else 1)
