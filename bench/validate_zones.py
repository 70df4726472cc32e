"""Validation of radial time-step zones (issue 51): Plummer models to core collapse with the
shared step and with ``run.zones``, the same seeds, in one sitting.

``python bench/validate_zones.py [--n 10000] [--seeds 1-8] [--zones 8] [--jobs 2]
[--theta-max 1.412] [--dt-window 20]`` runs each seed with the shared step and with zones
(runs/zones/N<N>_s<seed>_z<Z>; a finished run is reused), then writes docs/validation_zones.md,
.json and .png: per seed the collapse times (N_core <= 100 and r_c < 0.1 r_c0), the Lagrange
radii and r_c/r_h at fixed times, the energy error, the mass lost, the steps, the stars
stepped per step and the wall time; the means and scatter over seeds; and whether the zones'
mean is within the seed scatter of the shared step's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BIN = Path(sys.executable).parent

#: times [t_rh0] at which the Lagrange radii and r_c/r_h are compared by default (``--marks``:
#: before the earliest collapse of the model, so that every run is still going)
MARKS = (5.0, 10.0, 15.0)
#: the medians compared past the collapse (``--late T``: over t >= T [t_rh0])
LATE_KEYS = (("rc_rh_median_late", "r_c / r_h"), ("binary_fraction_median_late", "binary fraction"),
             ("binary_fraction_core_median_late", "core binary fraction"))


def _seeds(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(x) for x in text.split(",")]


def run_one(n: int, seed: int, zones: int, theta: float, window: int, threads: int,
            extra: tuple[str, ...] = ()) -> Path:
    """One run to core collapse (reused when its diagnostics hold a stop reason); ``extra``:
    more ``section.key=value`` settings (a mass spectrum, a tidal field, binaries), which
    name the run's directory too."""
    from cmc.io import read_diagnostics

    tag = "".join(f"_{x.replace('=', '-').replace('.', '-')}" for x in extra)
    out = ROOT / "runs" / "zones" / f"N{n}_s{seed}_z{zones}_t{theta:g}_w{window}{tag}"
    diag = out / "diagnostics.h5"
    if diag.exists():
        try:
            _, attrs = read_diagnostics(diag)
            if str(attrs.get("stop_reason", "")) and (out / "wall_s.txt").exists():
                return out
        except Exception:  # noqa: BLE001 - a torn file: run again
            pass
    t0 = time.perf_counter()
    subprocess.run([str(BIN / "cmc"), "run", str(ROOT / "examples/plummer_small.ini"), "-o",
                    str(out), "--overwrite", "--set", f"initial.n={n}", "--set",
                    f"initial.seed={seed}", "--set", f"run.zones={zones}", "--set",
                    f"run.theta_max={theta}", "--set", f"run.dt_window={window}", "--set",
                    f"run.threads={threads}", "--set", "output.snapshot_every=0", "--set",
                    "output.checkpoint_every=100000", "--set", "output.progress_every=1000",
                    *(a for x in extra for a in ("--set", x))],
                   check=True, capture_output=True, cwd=ROOT)
    (out / "wall_s.txt").write_text(f"{time.perf_counter() - t0:.3f}\n")
    return out


def analyse(out: Path, marks: tuple[float, ...] = MARKS, late: float | None = None) -> dict:
    """The run's figures (bench/validate.py's, and the zones' own) at the times ``marks``
    [t_rh0], and with ``late`` the medians of :data:`LATE_KEYS` over t >= ``late``."""
    from bench.validate import analyse as base
    from cmc.io import read_diagnostics

    d, _ = read_diagnostics(out / "diagnostics.h5")
    rec = base(out)
    t = d["time_trh"]
    lag = np.asarray(d["lagrange_radii"])
    for mark in marks:
        k = int(np.searchsorted(t, mark))
        if k < t.size:
            rec[f"lagrange_at_{mark:g}"] = lag[k].tolist()
            rec[f"rc_rh_at_{mark:g}"] = float(d["r_c"][k] / d["r_h"][k])
    after = t >= late if late is not None else np.zeros(t.size, dtype=bool)
    if after.any():  # past the collapse (binaries)
        rec["rc_rh_median_late"] = float(np.median(d["r_c"][after] / d["r_h"][after]))
        for col in ("binary_fraction", "binary_fraction_core"):
            if col in d:
                rec[f"{col}_median_late"] = float(np.median(d[col][after]))
    rec["lagrange_fractions"] = [0.001, 0.01, 0.1, 0.5, 0.9]
    rec["wall_s"] = float((out / "wall_s.txt").read_text())
    if "n_stepped" in d:
        rec["stepped_fraction_mean"] = float(np.mean(d["n_stepped"][1:] / d["N"][1:]))
    rec["series"] = {"t": t.tolist()[::max(1, t.size // 400)],
                     "lagrange": lag[::max(1, t.size // 400)].tolist()}
    return rec


def _stats(values: list[float]) -> dict:
    a = np.asarray(values, dtype=float)
    return {"mean": float(np.mean(a)), "std": float(np.std(a, ddof=1)) if a.size > 1 else 0.0,
            "min": float(np.min(a)), "max": float(np.max(a))}


def summarise(runs: dict, marks: tuple[float, ...] = MARKS) -> dict:
    """Means and scatter per setting, and the zones' mean against the shared step's scatter
    (the standard error of the difference of two means of independent seeds)."""
    keys = ["t_ncore_below_100", "t_rc_below_0.1_rc0", "max_abs_dE_rel", "mass_lost_fraction",
            "steps", "wall_s"] + [f"rc_rh_at_{m:g}" for m in marks] + [k for k, _ in LATE_KEYS]
    out: dict = {}
    for name, recs in runs.items():
        out[name] = {k: _stats([r[k] for r in recs if k in r]) for k in keys
                     if any(k in r for r in recs)}
        for m in marks:
            lag = [r[f"lagrange_at_{m:g}"] for r in recs if f"lagrange_at_{m:g}" in r]
            if lag:
                out[name][f"lagrange_at_{m:g}"] = {
                    "mean": np.mean(lag, axis=0).tolist(),
                    "std": (np.std(lag, axis=0, ddof=1) if len(lag) > 1
                            else np.zeros(len(lag[0]))).tolist()}
    verdict = {}
    shared, zoned = out.get("shared", {}), out.get("zones", {})
    for k in keys:
        # (costs, and the energy error, which is rounding on both sides, are reported only)
        if k in shared and k in zoned and k not in ("steps", "wall_s", "max_abs_dE_rel"):
            n_a = len(runs["shared"])
            n_b = len(runs["zones"])
            se = np.hypot(shared[k]["std"] / np.sqrt(n_a), zoned[k]["std"] / np.sqrt(n_b))
            diff = zoned[k]["mean"] - shared[k]["mean"]
            verdict[k] = {"difference": float(diff), "sigma": float(se),
                          "within_2_sigma": bool(abs(diff) <= 2.0 * se) if se > 0 else None}
    out["verdict"] = verdict
    return out


def write_page(args: argparse.Namespace, runs: dict, summary: dict) -> None:
    """docs/validation_zones.md, .json and .png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    docs = ROOT / "docs"
    tag = f"N{args.n}" + "".join(f"_{x.split('=')[0].split('.')[-1]}{x.split('=')[1]}"
                                 for x in args.extra)
    fig, ax = plt.subplots(figsize=(7, 5))
    for name, colour in (("shared", "k"), ("zones", "C3")):
        for i, r in enumerate(runs[name]):
            lag = np.asarray(r["series"]["lagrange"])
            t = np.asarray(r["series"]["t"])
            for j in range(lag.shape[1]):
                ax.plot(t, lag[:, j], color=colour, lw=0.6, alpha=0.6,
                        label=(f"{name}" if i == 0 and j == 0 else None))
    ax.set_yscale("log")
    ax.set_xlabel("t / t_rh0")
    ax.set_ylabel("Lagrange radii (0.1, 1, 10, 50, 90 %) [r_vir]")
    ax.set_title(f"Plummer N = {args.n}: shared step vs {args.zones} zones "
                 f"({len(runs['shared'])} seeds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(docs / f"validation_zones_{tag}.png", dpi=110)
    plt.close(fig)
    slim = {k: [{kk: vv for kk, vv in r.items() if kk != "series"} for r in v]
            for k, v in runs.items()}
    record = {"N": args.n, "seeds": args.seeds, "zones": args.zones,
              "theta_max": args.theta_max, "dt_window": args.dt_window, "settings": args.extra,
              "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "runs": slim, "summary": summary}
    (docs / f"validation_zones_{tag}.json").write_text(json.dumps(record, indent=1) + "\n")
    s, z, v = summary["shared"], summary["zones"], summary["verdict"]

    def cell(d: dict, k: str, fmt: str = "{:.3g}") -> str:
        if k not in d:
            return "-"
        x = d[k]
        return f"{fmt.format(x['mean'])} ± {fmt.format(x['std'])} [{fmt.format(x['min'])}, " \
               f"{fmt.format(x['max'])}]"

    setting = "".join(f", {x}" for x in args.extra)
    lines = [f"## Plummer N = {args.n}, theta_max {args.theta_max:g}, {args.dt_window}-star "
             f"windows{setting}: shared step vs run.zones = {args.zones} "
             f"({len(runs['shared'])} seeds)",
             "", f"`python bench/validate_zones.py --n {args.n} --seeds "
             f"{args.seeds_text} --zones {args.zones} --theta-max {args.theta_max:g} "
             f"--dt-window {args.dt_window}"
             + (f" --marks {args.marks}" if args.marks != "5,10,15" else "")
             + (f" --late {args.late:g}" if args.late is not None else "")
             + "".join(f" --set {x}" for x in args.extra)
             + f"` ({record['made']}; per run {args.threads} thread(s), "
             f"{args.jobs} runs at once).  Mean ± standard deviation [min, max] over seeds; "
             "'difference' is zones - shared in units of the standard error of that difference.",
             "", "| quantity | shared step | zones | difference / sigma |", "|---|---|---|---|"]
    for k, label in (("t_ncore_below_100", "t(N_core <= 100) / t_rh0"),
                     ("t_rc_below_0.1_rc0", "t(r_c < 0.1 r_c0) / t_rh0"),
                     *((f"rc_rh_at_{m:g}", f"r_c / r_h at {m:g} t_rh0") for m in args.mark_times),
                     *((k, f"{label} (median, t >= {args.late:g} t_rh0)") for k, label in LATE_KEYS
                       if args.late is not None),
                     ("max_abs_dE_rel", "max |dE/E0|"),
                     ("mass_lost_fraction", "mass lost / M0"), ("steps", "steps"),
                     ("wall_s", "wall time [s]")):
        ver = v.get(k)
        lines.append(f"| {label} | {cell(s, k)} | {cell(z, k)} | "
                     + (f"{ver['difference'] / ver['sigma']:+.2f}" if ver and ver["sigma"] > 0
                        else "-") + " |")
    for m in args.mark_times:
        key = f"lagrange_at_{m:g}"
        if key in s and key in z:
            sm, ss = np.asarray(s[key]["mean"]), np.asarray(s[key]["std"])
            zm, zs = np.asarray(z[key]["mean"]), np.asarray(z[key]["std"])
            # the difference of the means over its standard error
            se = np.hypot(ss / np.sqrt(len(runs["shared"])), zs / np.sqrt(len(runs["zones"])))
            lines.append(f"| Lagrange radii at {m:g} t_rh0 (0.1 .. 90 %) | "
                         + ", ".join(f"{x:.3g}" for x in sm) + " (std "
                         + ", ".join(f"{x:.2g}" for x in ss) + ") | "
                         + ", ".join(f"{x:.3g}" for x in zm) + " | "
                         + ", ".join(f"{d:+.1f}" for d in (zm - sm) / np.maximum(se, 1e-300))
                         + " |")
    if "stepped_fraction_mean" in runs["zones"][0]:
        frac = np.mean([r["stepped_fraction_mean"] for r in runs["zones"]])
        lines += ["", f"Stars stepped per step with zones: {frac:.3f} of N on average."]
    lines += ["", f"![Lagrange radii](validation_zones_{tag}.png)", ""]
    page = docs / "validation_zones.md"
    head = ("# Radial time-step zones: validation\n\nIssue 51: each model with the shared "
            "step and with `run.zones`, same seeds, same machine, one sitting.  How the zones "
            "work: docs/method.md, 'Time-step zones'.\n\n")
    text = page.read_text() if page.exists() else head
    marker = lines[0].split(": shared step")[0]
    if marker in text:  # replace this setting's section
        start = text.index(marker)
        nxt = text.find("\n## ", start + 1)
        text = text[:start] + "\n".join(lines) + ("\n" + text[nxt + 1:] if nxt >= 0 else "\n")
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    page.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--seeds", default="1-8")
    ap.add_argument("--zones", type=int, default=8)
    ap.add_argument("--theta-max", type=float, default=1.412)
    ap.add_argument("--dt-window", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--late", type=float, default=None,
                    help="also compare the medians of r_c/r_h and the binary fractions over "
                         "t >= LATE [t_rh0] (past the collapse)")
    ap.add_argument("--marks", default="5,10,15",
                    help="times [t_rh0] of the Lagrange radii and r_c/r_h compared (before "
                         "the earliest collapse)")
    ap.add_argument("--set", action="append", default=[], dest="extra",
                    help="another setting of both runs, section.key=value (repeatable)")
    args = ap.parse_args()
    args.seeds_text = args.seeds
    args.seeds = _seeds(args.seeds)
    args.mark_times = tuple(float(x) for x in args.marks.split(","))
    jobs = [(s, z) for s in args.seeds for z in (1, args.zones)]
    with ThreadPoolExecutor(args.jobs) as pool:
        outs = list(pool.map(lambda sz: run_one(args.n, sz[0], sz[1], args.theta_max,
                                                args.dt_window, args.threads,
                                                tuple(args.extra)), jobs))
    runs: dict = {"shared": [], "zones": []}
    for (seed, z), out in zip(jobs, outs, strict=True):
        rec = analyse(out, args.mark_times, args.late)
        rec["seed"] = seed
        runs["shared" if z == 1 else "zones"].append(rec)
    summary = summarise(runs, args.mark_times)
    write_page(args, runs, summary)
    print(json.dumps({k: v for k, v in summary.items() if k != "verdict"}, indent=1)[:3000])
    print(json.dumps(summary["verdict"], indent=1))


if __name__ == "__main__":
    main()
