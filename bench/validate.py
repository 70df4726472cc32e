"""Validation runs: Plummer models to core collapse, compared with the paper's targets.

``python bench/validate.py [N ...]`` (default 1e4 and 1e5) runs each model with the default
parameters until N_core < 100 (or t = 30 t_rh0), then writes docs/validation_N<N>.json and a
plot, and prints a table.  Targets (Pattabiraman et al. 2013 and the C code on the same initial
conditions): t_cc = 15-18 t_rh0 (paper 17.4 at 1e5); r_c < 0.1 r_c0 at 17.0-17.8 t_rh0
(16.6 at 1e5); N_core <= 100 at 18-19 t_rh0; |dE/E0| < 1e-3 (paper 4e-4); mass lost a few
per cent at most; d ln rho_c / d ln r_c ~ -2.2 near collapse.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def analyse(outdir: Path) -> dict:
    from cmc.io import read_diagnostics

    d, attrs = read_diagnostics(outdir / "diagnostics.h5")
    t, rc, rho, nc = d["time_trh"], d["r_c"], d["rho_c"], d["N_core"]
    rc0 = rc[0]

    def first(mask):
        return float(t[np.argmax(mask)]) if mask.any() else float("nan")

    late = rc < 0.1 * rc0
    slope = float("nan")
    if late.sum() > 20:
        slope = float(np.polyfit(np.log(rc[late]), np.log(rho[late]), 1)[0])
    return {
        "N": int(d["N"][0]), "steps": int(d["step"][-1]),
        "stop_reason": str(attrs.get("stop_reason", "")),
        "t_end_trh": float(t[-1]),
        "t_rc_below_0.1_rc0": first(late),
        "t_ncore_below_100": first(nc <= 100),
        "max_abs_dE_rel": float(np.max(np.abs(d["dE_rel"]))),
        "final_dE_rel": float(d["dE_rel"][-1]),
        "mass_lost_fraction": float(d["M_escaped"][-1]),
        "slope_rho_c_vs_r_c": slope,
        "bound_violations": float(np.sum(d["bound_violations"])),
    }


def _all_results() -> list[dict]:
    """Every docs/validation_*.json written so far (so the report covers earlier runs too)."""
    return [json.loads(p.read_text()) for p in sorted((ROOT / "docs").glob("validation_N*.json"))]


_ROWS = [("t(r_c < 0.1 r_c0) / t_rh0", "C code 17.0-17.8 (1e4-3e4), 16.6 (1e5)",
          "t_rc_below_0.1_rc0"),
         ("t(N_core <= 100) / t_rh0", "C code 18-19; paper t_cc 17.4 (1e5)", "t_ncore_below_100"),
         ("max abs(dE/E0)", "< 1e-3 (paper 4e-4)", "max_abs_dE_rel"),
         ("mass lost", "a few % at most (paper <~1 %)", "mass_lost_fraction"),
         ("d ln rho_c / d ln r_c (r_c < 0.1 r_c0)", "about -2.2", "slope_rho_c_vs_r_c"),
         ("end of run / t_rh0", "", "t_end_trh"), ("steps", "", "steps"),
         ("wall time [s] (one run, threads)", "", "wall_s"),
         ("stop reason", "", "stop_reason"),
         ("rejection-bound violations", "0 ideally", "bound_violations"),
         ("made (date, commit)", "", "made")]
#: Rows of single runs only (no mean over seeds)
_RUN_ONLY = ("stop_reason", "made")


def _cell(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def write_report(results: list[dict]) -> Path:
    """docs/validation.md: the numbers of every validation run against the targets.

    A summary per N (mean and range over seeds), then every run.
    """
    docs = ROOT / "docs"

    def group(r: dict) -> tuple[int, float, int]:
        return r["N"], float(r.get("theta_max", 1.0)), int(r.get("dt_window", 40))

    ns = sorted({group(r) for r in results})
    by_n = {g: [r for r in results if group(r) == g] for g in ns}
    lines = ["# Validation: Plummer models to core collapse", "",
             "Made by `make validate` (bench/validate.py); plots: `validation_N*.png`.", "",
             "Scattering experiments of the few-body engine (exchange cross sections, Heggie's "
             "law, exchange eccentricities, IAS15 comparison): "
             "[validation_fewbody.md](validation_fewbody.md).  Binaries in the cluster (three-body "
             "binaries stop core collapse, primordial binaries burn, energy through collapse): "
             "[validation_binaries.md](validation_binaries.md).  Tidal field and mass spectrum "
             "(dissolution against N, mass segregation and early collapse): "
             "[validation_tidal.md](validation_tidal.md).", "",
             "Runs at the default time-step parameters (theta_max = 1.0, 40-star windows), "
             "at theta_max = 1.412 with 20-star windows (the defaults from issue 16 until "
             "2026-11-25, dropped: no three-body binaries past the collapse) and at "
             "CMC-COSMIC's defaults, 1.412 with 40-star windows: `python "
             "bench/validate.py N --seeds ... [--theta-max X] [--dt-window W]`.  The choice is "
             "discussed in [performance.md](performance.md#time-to-solution).  The last row "
             "of 'Every run' gives the date and commit each run was made with ('-': before "
             "that row existed, older code).  All with the shared step (`run.zones = 1`, "
             "CMC's); the default time-step zones against it and against these figures: "
             "[validation_zones.md](validation_zones.md).", "",
             "## Summary: mean [min, max] over seeds", "",
             "| quantity | target | " + " | ".join(
                 f"N = {n:.0e}, theta_max {th:g}, window {w} ({len(by_n[n, th, w])} "
                 f"seed{'s' if len(by_n[n, th, w]) > 1 else ''})"
                 for n, th, w in ns) + " |",
             "|---|---|" + "---|" * len(ns)]
    for label, target, key in _ROWS:
        if key in _RUN_ONLY:
            continue
        cells = []
        for g in ns:
            v = np.array([float(r.get(key, np.nan)) for r in by_n[g]])
            cells.append(_cell(float(v[0])) if v.size == 1 else
                         f"{v.mean():.4g} [{v.min():.4g}, {v.max():.4g}]")
        lines.append(f"| {label} | {target} | " + " | ".join(cells) + " |")
    lines += ["", "## Every run", "",
              "| quantity | " + " | ".join(f"N = {r['N']:.0e}, seed {r.get('seed', 1)}, "
                                          f"theta_max {r.get('theta_max', 1.0):g}, window "
                                          f"{r.get('dt_window', 40)}"
                                          for r in results) + " |",
              "|---|" + "---|" * len(results)]
    for label, _target, key in _ROWS:
        lines.append(f"| {label} | " + " | ".join(
            _cell(r.get(key, "-" if key == "made" else "")) for r in results) + " |")
    path = docs / "validation.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _made() -> str:
    """Today's date and the checked-out commit (``+`` if the code has changes: docs/, where
    the validations write, does not count, so that a second validation after a first is
    not marked as made by changed code)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD") or "?"
        dirty = "+" if git("status", "--porcelain", "--untracked-files=no", "--", ".",
                           ":(exclude)docs") else ""
    except OSError:  # no git
        commit, dirty = "?", ""
    return f"{time.strftime('%Y-%m-%d')}, {commit}{dirty}"


#: the file in a validation run's directory recording the code that made it (and, for a run
#: made whole in one go, its wall time)
RUN_FILE = "validate_run.json"


def _save_record(out: Path, record: dict) -> None:
    """Write a run's record (:func:`run_record`) into its directory ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / RUN_FILE).write_text(json.dumps(record) + "\n")


def run_record(out: Path, previous_json: Path, made: str, status: str) -> dict:
    """The record of the run in ``out`` for this call, written into ``out`` before the call
    runs anything (so that an interrupted run keeps the stamp of the code that made it).

    ``status`` is what this call does: ``"empty"`` (a new run, made by ``made``; its wall
    time is added when it completes), ``"resumable"`` (an interrupted run continued: its first
    stamp, then ``made``; no wall time, it was not made in one go) or ``"finished"`` (only
    analysed again: the run's own record, not this call's).  A run made before records
    existed falls back on its last result in ``previous_json`` (``made``, ``wall_s``,
    ``threads``), else ``made = "-"`` (unknown).  Returns the record: ``{"made": ...}`` and
    possibly ``wall_s``, ``threads``.
    """
    path = out / RUN_FILE
    if path.exists():
        before = json.loads(path.read_text())
    elif previous_json.exists():
        prev = json.loads(previous_json.read_text())
        before = {k: prev[k] for k in ("made", "wall_s", "threads") if k in prev}
    else:
        before = {}
    before.setdefault("made", "-")
    now = {"empty": {"made": made},
           "resumable": {"made": f"{before['made']}; continued {made}"}}.get(status, before)
    _save_record(out, now)
    return now


def main(ns: list[int], resume: bool = False, threads: int = 0,
         seeds: tuple[int, ...] = (1,), theta_max: float | None = None,
         dt_window: int | None = None) -> None:
    """Run (or resume, or re-analyse) each (N, seed) at ``theta_max`` and ``dt_window`` (default:
    the parameters' defaults, CMC-COSMIC's 1.412 and 20 stars).  Results of other values than the
    first validations' 1.0 and 40 carry a ``_theta<value>`` / ``_w<stars>`` tag and have their
    own summary column."""
    from cmc.config import RunConfig

    theta_max = RunConfig.theta_max if theta_max is None else theta_max
    dt_window = RunConfig.dt_window if dt_window is None else dt_window
    # the code the runs are made with: taken before this call writes its outputs into docs/
    # (which would mark the tree as changed for every run after the first)
    made = _made()
    results = []
    for n, seed in [(n, s) for n in ns for s in seeds]:
        tag = (f"N{n}" + (f"_seed{seed}" if seed != 1 else "")
               + (f"_theta{theta_max:g}" if theta_max != 1.0 else "")
               + (f"_w{dt_window}" if dt_window != 40 else ""))
        out = ROOT / "runs" / f"validate_{tag}"
        from cmc.rundir import run_status

        status = run_status(out).kind if resume else "empty"
        if status == "finished":
            cmd = None  # nothing to continue: analyse it again
        elif status == "resumable":
            # continue an interrupted validation (or one stopped by the wall-clock limit)
            cmd = [sys.executable, "-m", "cmc.cli", "restart", str(out),
                   "--set", f"run.threads={threads}"]
        else:
            cmd = [sys.executable, "-m", "cmc.cli", "run", "--overwrite",
                   str(ROOT / "examples/plummer_small.ini"), "-o", str(out),
                   "--set", f"initial.n={n}", "--set", f"initial.seed={seed}",
                   "--set", "run.t_max=30",
                   "--set", f"run.threads={threads}",
                   "--set", "output.snapshot_every=0", "--set", "output.progress_every=500"]
            cmd += ["--set", f"run.theta_max={theta_max}", "--set", f"run.dt_window={dt_window}",
                    # the shared step (CMC's): this page is the reference that the time-step
                    # zones, the default since 2026-11-29, are validated against
                    # (bench/validate_zones.py)
                    "--set", "run.zones=1"]
        docs = ROOT / "docs"
        # the run's record (which code made it) goes into its directory before it starts:
        # a finished run analysed again keeps the stamp of the code that made it, an
        # interrupted one continued names both
        fresh = status not in ("finished", "resumable")
        record = run_record(out, docs / f"validation_{tag}.json", made,
                            "empty" if fresh else status)
        if cmd is not None:
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True)
            if fresh:  # a whole run in one go: its wall time
                record.update(wall_s=time.perf_counter() - t0, threads=threads)
                _save_record(out, record)
        subprocess.run([sys.executable, "-m", "cmc.cli", "plot", str(out)], check=True)
        res = analyse(out)
        res["seed"] = seed
        res["theta_max"] = theta_max
        res["dt_window"] = dt_window
        res.update(record)
        results.append(res)
        docs.mkdir(exist_ok=True)
        (docs / f"validation_{tag}.json").write_text(json.dumps(res, indent=2) + "\n")
        shutil.copy(out / "evolution.png", docs / f"validation_{tag}.png")
    write_report(sorted(_all_results(), key=lambda r: (r["N"], r.get("theta_max", 1.0),
                                                        r.get("dt_window", 40),
                                                        r.get("seed", 1))))
    keys = list(results[0])
    print(" | ".join(keys))
    for r in results:
        print(" | ".join(f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys))
    print("VALIDATE " + json.dumps(results))


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="*", type=float, help="numbers of stars (default 1e4 1e5)")
    ap.add_argument("--resume", action="store_true",
                    help="continue runs/validate_N*/ from their checkpoints")
    ap.add_argument("--threads", type=int, default=0, help="numba threads (0: all cores)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1], help="seeds to run for each N")
    ap.add_argument("--theta-max", type=float, default=None,
                    help="run.theta_max (default: the parameter's default)")
    ap.add_argument("--dt-window", type=int, default=None,
                    help="run.dt_window (default: the parameter's default)")
    a = ap.parse_args()
    main([int(x) for x in a.n] or [10000, 100000], resume=a.resume, threads=a.threads,
         seeds=tuple(a.seeds), theta_max=a.theta_max, dt_window=a.dt_window)
