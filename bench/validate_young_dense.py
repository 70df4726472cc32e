"""Issue 49's young-dense-cluster validation: collisions in examples/young_dense.ini's run.

Reads a run folder of ``cmc run examples/young_dense.ini`` (diagnostics.h5, the checkpoint, the
first snapshot) -- while it runs too -- and writes docs/validation_young_dense.json and .png:
cumulative single-single collisions, r_c, N_core, E_deficit and M_se against time [Myr]; the
core-collapse time (the first minimum of r_c / r_h, in t_rh0); the heaviest stars at the last
checkpoint (mass, type, BSE's zams: a merger product's effective initial mass) against the
heaviest initial star.  docs/validation_collisions.md quotes the numbers.

    python bench/validate_young_dense.py runs/ydc/n1e5
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _open(path: Path) -> h5py.File:
    return h5py.File(path, "r", locking=False)


def analyse(run: Path) -> dict:
    with _open(run / "diagnostics.h5") as f:
        d = {k: f[k][...] for k in ("time_myr", "time_trh", "n_collisions", "r_c", "r_h",
                                     "N_core", "E_deficit", "M_se", "N", "dE_rel")}
        census = {k: float(f[k][-1]) for k in ("N_bh", "N_ns", "M_bh") if k in f}
    with _open(run / "checkpoint.h5") as f:
        s = f["stars"]
        m = s["m_msun"][...]
        k = s["startype"][...]
        zams = s["se_zams"][...]
        ids = s["id"][...]
        step = int(f["state"].attrs["step"])
    snaps = sorted((run / "snapshots").glob("*.h5"))
    with _open(snaps[0]) as f:
        m0 = f["stars"]["m_msun"][...]
    t = d["time_myr"]
    cum = np.cumsum(d["n_collisions"])
    ratio = d["r_c"] / d["r_h"]
    i_min = int(np.argmin(ratio))
    top = np.argsort(-m)[:5]
    out = {
        "run": str(run), "steps": int(t.size - 1), "t_end_myr": float(t[-1]),
        "t_rh0_myr": float(t[-1] / d["time_trh"][-1]) if d["time_trh"][-1] > 0 else 0.0,
        "n_collisions": int(cum[-1]),
        "collisions_by_myr": {f"{x:g}": int(cum[np.searchsorted(t, x) - 1])
                              for x in (1, 2, 2.8, 3, 3.5, 4, 5, 6, 8, 10) if x <= t[-1]},
        "core_collapse": {"t_myr": float(t[i_min]), "t_trh0": float(d["time_trh"][i_min]),
                          "r_c_over_r_h": float(ratio[i_min]),
                          "N_core": float(d["N_core"][i_min])},
        "E_deficit_end": float(d["E_deficit"][-1]), "M_se_end": float(d["M_se"][-1]),
        "max_abs_dE_rel": float(np.max(np.abs(d["dE_rel"]))),
        "checkpoint_step": step,
        "heaviest_now": [{"id": int(ids[i]), "m_msun": float(m[i]), "startype": int(k[i]),
                          "zams_msun": float(zams[i])} for i in top],
        "heaviest_bh_msun": float(m[k == 14].max()) if np.any(k == 14) else 0.0,
        "census_end": census,
        "heaviest_initial_msun": float(m0.max()), "M_cluster0_msun": float(m0.sum()),
        "N0": int(m0.size),
    }
    _plot(d, cum, out, ROOT / "docs" / "validation_young_dense.png")
    return out


def _plot(d: dict, cum: np.ndarray, out: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = d["time_myr"]
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.8))
    ax[0].plot(t, cum)
    ax[0].set(xlabel="t [Myr]", ylabel="single-single collisions (cumulative)")
    ax[1].semilogy(t, d["r_c"] / d["r_h"], label="r_c / r_h")
    ax[1].semilogy(t, np.maximum(d["N_core"], 1) / d["N"], label="N_core / N")
    ax[1].axvline(out["core_collapse"]["t_myr"], ls=":", c="k")
    ax[1].set(xlabel="t [Myr]")
    ax[1].legend()
    ax[2].plot(t, d["E_deficit"], label="E_deficit [E_NB]")
    ax[2].plot(t, d["M_se"], label="M_se [M0]")
    ax[2].set(xlabel="t [Myr]")
    ax[2].legend()
    fig.suptitle(f"examples/young_dense.ini (N = {out['N0']}, King W0 = 7, r_v = 0.5 pc)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "validation_young_dense.json")
    args = ap.parse_args()
    if not (args.run / "diagnostics.h5").exists():
        sys.exit(f"{args.run}: no diagnostics.h5")
    res = analyse(args.run)
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
