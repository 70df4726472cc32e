"""Validation of binaries in the cluster: three-body binaries stop core collapse, primordial
binaries burn.

``python bench/validate_binaries.py [--hours H] [--analyse-only]`` runs (two at a time, one
thread each, into runs/validate_binaries/):

* ``single_s1..3``: the 10^4-star equal-mass Plummer model of ``make run`` without primordial
  binaries, ``binaries.three_body = all``, to t = 25 t_rh0: collapse near the time the engine
  finds without binaries (docs/validation.md: N_core <= 100 at 19.45 [17.65, 20.56] t_rh0 over 8
  seeds), then three-body binaries form in the core and it bounces;
* ``binaries10_s1..2``: the same model with 10 % hard primordial binaries (a log-uniform in
  [0.01, 0.3] a_hs), to t = 200 t_rh0 or the wall-clock limit ``--hours``: collapse delayed, then
  binary burning with r_c/r_h of a few per cent (Heggie, Trenti & Hut 2006: r_c/r_h ~ 0.03-0.05
  for 10 % hard binaries in N-body models; Fregeau & Rasio 2007, CMC: similar, larger for
  larger binary fractions), the core binary fraction rising above the overall one, binaries
  destroyed over time (Gao et al. 1991: more than half in ~100 t_rh0).

Then writes docs/validation_binaries.md, .json and .png.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "runs" / "validate_binaries"
COMMON = ["--set", "run.threads=1", "--set", "output.progress_every=1000",
          "--set", "output.snapshot_every=0", "--set", "run.n_core_stop=-1"]
PRIMORDIAL = ["--set", "initial.binary_fraction=0.1", "--set", "initial.binary_a_max=0.3",
              "--set", "run.t_max=200"]


def runs(hours: float) -> dict[str, list[str]]:
    single = {f"single_s{s}": ["--set", f"initial.seed={s}", "--set", "binaries.three_body=all",
                               "--set", "run.t_max=25"] for s in (1, 2, 3)}
    prim = {f"binaries10_s{s}": ["--set", f"initial.seed={s}", *PRIMORDIAL,
                                 "--set", f"run.max_wall_hours={hours}"] for s in (1, 2)}
    return {**single, **prim}


def launch(hours: float) -> None:
    """Run the models, two at a time."""
    OUT.mkdir(parents=True, exist_ok=True)
    todo = list(runs(hours).items())
    active: list[subprocess.Popen] = []
    while todo or active:
        while todo and len(active) < 2:
            name, args = todo.pop(0)
            log = open(OUT / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
            cmd = [str(ROOT / ".venv" / "bin" / "cmc"), "run",
                   str(ROOT / "examples" / "plummer_small.ini"), "-o", str(OUT / name),
                   "--overwrite", *COMMON, *args]
            print(" ".join(cmd), flush=True)
            active.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        active[0].wait()
        active = [p for p in active if p.poll() is None]


def _diag(name: str):
    from cmc.io import read_diagnostics

    return read_diagnostics(OUT / name / "diagnostics.h5")


def analyse_single(name: str) -> dict:
    d, attrs = _diag(name)
    t = d["time_trh"]
    ratio = d["r_c"] / d["r_h"]
    n3 = np.cumsum(d["n_three_body"])
    first3 = int(np.argmax(n3 > 0)) if n3[-1] > 0 else len(t) - 1
    k_min = int(np.argmin(ratio[: first3 + 1])) if n3[-1] > 0 else int(np.argmin(ratio))
    after = slice(k_min, None)
    k_bounce = k_min + int(np.argmax(ratio[after]))
    # the 1 % Lagrange radius (the default fractions 0.001, 0.01, ...): with N_core ~ 3 the
    # Casertano-Hut r_c follows the two or three heavy binaries at the very centre, and stays
    # small until they are ejected while the core around them re-expands
    r1 = np.asarray(d["lagrange_radii"])[:, 1] / d["r_h"]
    j_min = int(np.argmin(r1[: first3 + 1])) if n3[-1] > 0 else int(np.argmin(r1))
    j_bounce = j_min + int(np.argmax(r1[j_min:]))
    return {
        "name": name, "t_end": float(t[-1]), "steps": int(d["step"][-1]),
        "stop_reason": str(attrs.get("stop_reason", "")),
        "t_ncore_below_100": float(t[np.argmax(d["N_core"] <= 100)]),
        "t_first_three_body": float(t[first3]) if n3[-1] > 0 else float("nan"),
        "N_core_at_first_binary": float(d["N_core"][first3]),
        "rc_rh_min": float(ratio[k_min]), "t_rc_min": float(t[k_min]),
        "rc_rh_max_after": float(ratio[k_bounce]), "t_rc_max_after": float(t[k_bounce]),
        "bounce_factor": float(ratio[k_bounce] / ratio[k_min]),
        "r1pct_rh_min": float(r1[j_min]), "r1pct_rh_max_after": float(r1[j_bounce]),
        "t_r1pct_max_after": float(t[j_bounce]),
        "r1pct_bounce_factor": float(r1[j_bounce] / r1[j_min]),
        "three_body_binaries": int(n3[-1]),
        "encounters": int(np.sum(d["n_binary_single"]) + np.sum(d["n_binary_binary"])),
        "max_binaries": int(np.max(d["N_binaries"])),
        "max_abs_dE_rel": float(np.max(np.abs(d["dE_rel"]))),
        "max_abs_dE_rel_before_first_binary": float(np.max(np.abs(d["dE_rel"][:first3 + 1]))),
        "E_three_body": float(d["E_three_body"][-1]),
        "E_encounters": float(d["E_encounters"][-1]),
    }


def analyse_primordial(name: str) -> dict:
    d, attrs = _diag(name)
    t = d["time_trh"]
    ratio = d["r_c"] / d["r_h"]
    nb0 = float(d["N_binaries"][0])
    # core collapse: r_c below a tenth of its initial value (as for the models without binaries)
    cc = int(np.argmax(d["r_c"] < 0.1 * d["r_c"][0]))
    t_cc = float(t[cc])

    def window(lo, hi, x):
        k = (t >= lo) & (t < hi)
        return float(np.median(x[k])) if k.any() else float("nan")

    destroyed = np.cumsum(d["n_ionisations"] + d["n_wide_broken"])
    at100 = int(np.searchsorted(t, 100.0)) - 1
    reached100 = t[-1] >= 100.0  # (a run cut short by its wall clock has no value there)

    def at_100(x: float) -> float:
        return float(x) if reached100 else float("nan")
    n_enc = float(np.sum(d["n_binary_single"]) + np.sum(d["n_binary_binary"]))
    late = t >= t_cc
    return {
        "name": name, "t_end": float(t[-1]), "steps": int(d["step"][-1]),
        "stop_reason": str(attrs.get("stop_reason", "")),
        "t_rc_below_0.1_rc0": t_cc,
        "rc_rh_median_tcc_to_50": window(t_cc, 50.0, ratio),
        "rc_rh_median_50_to_100": window(50.0, 100.0, ratio),
        "rc_rh_median_100_to_200": window(100.0, 200.0, ratio),
        "r_h_at_100_over_r_h0": at_100(d["r_h"][at100] / d["r_h"][0]),
        "binary_fraction_core_median_after_tcc": float(np.median(
            d["binary_fraction_core"][late])),
        "binary_fraction_median_after_tcc": float(np.median(d["binary_fraction"][late])),
        "binaries_destroyed_by_100": at_100(destroyed[at100] / nb0),
        "binaries_left_at_100": at_100(d["N_binaries"][at100] / nb0),
        "binaries_destroyed_by_end": float(destroyed[-1] / nb0),
        "binaries_left_at_end": float(d["N_binaries"][-1] / nb0),
        "encounters": n_enc,
        "binary_binary": float(np.sum(d["n_binary_binary"])),
        "exchanges": float(np.sum(d["n_exchanges"])),
        "triples_split": float(np.sum(d["n_triples"])),
        "objects_ejected": float(np.sum(d["n_ejected"])),
        "discarded_fraction": float(np.sum(d["n_encounters_discarded"])) / max(n_enc, 1.0),
        "max_abs_dE_rel": float(np.max(np.abs(d["dE_rel"]))),
        "E_binding_start_over_E0": float(d["E_binding"][0] / abs(attrs["e0"])),
        "E_encounters_over_E0": float(d["E_encounters"][-1] / abs(attrs["e0"])),
        "E_taken_over_E0": float(d["E_taken"][-1] / abs(attrs["e0"])),
        "E_oops_over_E0": float(d["E_oops"][-1] / abs(attrs["e0"])),
        "mass_lost_fraction": float(d["M_escaped"][-1]),
    }


def plot(names: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(3, 2, figsize=(12, 12))
    for name in names:
        d, _ = _diag(name)
        t = d["time_trh"]
        col = 0 if name.startswith("single") else 1
        ax[0, col].semilogy(t, d["r_c"] / d["r_h"], lw=0.8, label=name)
        if col == 0:
            ax[1, 0].plot(t, d["N_binaries"], lw=0.8, label=name)
            k = d["n_three_body"] > 0
            ax[0, 0].plot(t[k], (d["r_c"] / d["r_h"])[k], "k.", ms=4)
        else:
            ax[1, 1].plot(t, d["binary_fraction"], lw=0.8, label=f"{name} all")
            # the core holds a few hundred objects: a running mean over 500 steps
            k = min(500, t.size)
            core = np.convolve(d["binary_fraction_core"], np.ones(k) / k, mode="valid")
            ax[1, 1].plot(t[k - 1:], core, lw=0.8, label=f"{name} core (500-step mean)")
        ax[2, col].plot(t, d["dE_rel"], lw=0.8, label=name)
    ax[0, 0].set_title("equal masses, no primordial binaries, three-body binaries on\n"
                       "(dots: a three-body binary forms)")
    ax[0, 1].set_title("10 % hard primordial binaries (isolated cluster)")
    ax[0, 1].axhspan(0.03, 0.05, color="0.85", label="HTH06 N-body, f_b = 0.1")
    for a in ax[0]:
        a.set_ylabel("r_c / r_h")
        a.legend(fontsize=7)
    ax[1, 0].set_ylabel("number of binaries")
    ax[1, 1].set_ylabel("binary fraction")
    ax[2, 0].set_ylabel("(E - E0) / |E0|")
    ax[2, 1].set_ylabel("(E - E0) / |E0|")
    for a in ax.ravel():
        a.set_xlabel("t / t_rh0")
    for a in ax[1:].ravel():
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / "validation_binaries.png", dpi=90)
    plt.close(fig)


def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, list):
        return "[" + ", ".join(_fmt(v) for v in x) + "]"
    return str(x)


def report(single: list[dict], prim: list[dict]) -> str:
    lines = ["# Validation: binaries in the cluster", "",
             "Made by `python bench/validate_binaries.py` (part of `make validate`); runs in "
             "runs/validate_binaries/, numbers in validation_binaries.json, plot "
             "validation_binaries.png.  2-core VM, one thread per run, two runs at a time.", "",
             "![binaries](validation_binaries.png)", ""]
    for title, rows, note in (
            ("Equal masses, no primordial binaries, three-body binaries from any stars",
             single,
             "Target: collapse near the engine's time without binaries (N_core <= 100 at "
             "19.45 [17.65, 20.56] t_rh0 over 8 seeds, docs/validation.md), then three-body "
             "binaries form in the core and it bounces (r_c rises again) instead of collapsing "
             "to a handful of stars."),
            ("10 % hard primordial binaries", prim,
             "Targets: collapse delayed; binary burning with r_c/r_h of a few per cent "
             "(Heggie, Trenti & Hut 2006, N-body, f_b = 0.1: about 0.03-0.05; tolerance a "
             "factor 2); the core binary fraction above the overall one; binaries destroyed "
             "over time (Gao et al. 1991: more than half in about 100 t_rh0).")):
        if not rows:
            continue
        lines += [f"## {title}", "", note, ""]
        keys = [k for k in rows[0] if k != "name"]
        lines.append("| quantity | " + " | ".join(r["name"] for r in rows) + " |")
        lines.append("|---" * (len(rows) + 1) + "|")
        for k in keys:
            lines.append(f"| {k} | " + " | ".join(_fmt(r[k]) for r in rows) + " |")
        lines.append("")
    lines += [
        "## Reading", "",
        "* Made again on 2026-11-28 after issue 45's physics fixes (three-body rate of the two "
        "heaviest stars with 20/18 for the block's untried stars, BH_AVEKERNEL, T_bs and T_bb "
        "as CMC-COSMIC's, a wide binary never meets a hard one, energy a block cannot pay "
        "carried outward).  The primordial runs stopped at their wall clock (--hours 1.0 on a "
        "loaded machine) and were continued with `cmc restart` to 200 t_rh0 (a restart is bit "
        "for bit).  They were made at 8299048; f7fec49 then made initial.binary_fraction exact "
        "(it was a draw per object), which changes the primordial runs' initial binaries: "
        "their numbers are those of the draw.",
        "* Without primordial binaries the core collapses at the engine's usual time; the "
        "first three-body binary forms when N_core is down to a few stars (the rate goes as "
        "n^2 v^-9 with hardness >= 5), then a handful of binaries and their encounters stop "
        "the collapse: the 1 % Lagrange radius grows 20-24 fold within 1-2 t_rh0 of the first "
        "binary (r1pct rows).  The Casertano-Hut r_c/r_h rose by three to four decades in all "
        "three runs of the 2026-11-25 page; here it does so in one (s2, at 23.5 t_rh0), while "
        "in s1 and s3 it stays at ~1e-4 to 25 t_rh0: with N_core ~ 3 the density-weighted r_c "
        "follows the two or three binaries (twice the stars' mass) at the very centre, which "
        "are not ejected by then, while the core around them re-expands.  This is not issue "
        "45's doing: the code before it (21d45c4) run today from the same seed gives the same "
        "r_c/r_h to 25 t_rh0 (bounce factor 3.9) and a 1 % radius bounce of 20x (22x now); the "
        "same code with the block debts booked as E_oops gives this page's bits (E_oops stays "
        "0 in these runs).  The page of 2026-11-25 was made with earlier code and packages: "
        "its collapse times (t_ncore_below_100 19.96, 19.28, 18.54) differ from today's "
        "before any binary exists.  At N = 1e4 the core then contracts again (the start of "
        "gravothermal oscillations, as expected above N ~ 7000; Goodman 1987, Breen & Heggie "
        "2012); the runs stop at 25 t_rh0.",
        "* With 10 % hard binaries the core reaches r_c < 0.1 r_c0 at 17.6 and 21.4 t_rh0 (17.4 "
        "and 18.2 on the 2026-11-25 page; without binaries 17.96 [16.63, 19.33] over 8 seeds, "
        "docs/validation.md), and stops at r_c/r_h ~ 0.02 to 50 t_rh0 (binary burning), inside "
        "a factor 2 of HTH06's 0.03-0.05.  The cluster is isolated: the energy the binaries "
        "give (more than |E0|; their initial binding energy is about half of E0, a log-uniform "
        "in [0.01, 0.3] a_hs) drives it to r_h ~ 10-13 r_h0 by 100 t_rh0 and 40-47 % of the "
        "mass out, so r_c/r_h falls to ~0.006-0.009 over 50-100 t_rh0 and ~0.004 later in s2; "
        "s1's core contracts again after ~90 t_rh0 to a few binaries (median r_c/r_h 3e-5 over "
        "100-200 t_rh0, the Casertano-Hut r_c of a core of N_core ~ 5, its binary fraction "
        "0.3-0.6).  Neither run of the 2026-11-25 page did this; whether issue 45's T_bs, "
        "which lets the step grow (s1 took 87,095 steps against 102,938 then), plays a part "
        "is not investigated.  HTH06 and Fregeau & "
        "Rasio (2007) model tidally limited clusters.",
        "* The core binary fraction stays 1.7-2.0x the overall one.  By 100 t_rh0, 40-42 % of "
        "the binaries were destroyed (ionised or broken as wide) and about 30 % ejected: more "
        "than half are gone, as Gao et al. (1991) found, though destruction alone is below "
        "half.",
        "* Energy: |dE/E0| stays below 1.1e-13 through collapse and 200 t_rh0 of binary "
        "burning (2.0e-13 in the runs without primordial binaries), with the binaries' internal "
        "energy, the few-body integrator's error (E_integrator) and the other processes' "
        "columns in the budget.  The energy that breaking wide binaries and splitting stable "
        "triples needs is now taken from the stars: from the block's others, and what they "
        "cannot give from the blocks further out, across ranks, as CMC-COSMIC's "
        "break_wide_binaries carries its E_excess (E_taken: 4.4-6.3 % of |E0| over the run).  "
        "The 2026-11-25 page booked what the block could not give as E_oops, energy no star "
        "paid (1.5-2.2 % of |E0|), and wrongly said CMC does the same; E_oops now holds only "
        "the pair energy of different events' mass changes in one step (-2e-6 to -4e-6 of "
        "|E0|).  About 1.3 % of encounters were discarded (unresolved within 200 000 steps).",
        ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=0.4,
                    help="wall-clock limit of each primordial-binary run (default 0.4)")
    ap.add_argument("--analyse-only", action="store_true")
    args = ap.parse_args(argv)
    if not args.analyse_only:
        launch(args.hours)
    names = sorted(runs(args.hours))
    names = [n for n in names if (OUT / n / "diagnostics.h5").exists()]
    single = [analyse_single(n) for n in names if n.startswith("single")]
    prim = [analyse_primordial(n) for n in names if n.startswith("binaries")]
    plot(names)
    (ROOT / "docs" / "validation_binaries.json").write_text(
        json.dumps({"single": single, "primordial": prim}, indent=1))
    (ROOT / "docs" / "validation_binaries.md").write_text(report(single, prim))
    print(report(single, prim))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
