"""``make bench`` (stellar evolution): the step's cost with COSMIC's BSE against the same model
without (issue 48's goal: at most 1.3x, i.e. SE <= 30 % of the step, on one core and on two
ranks).

The model: Plummer, N = 1e5 (``--quick``: 2e4), Kroupa IMF 0.08-150 Msun, seed 1, r_vir 1 pc.
SE's cost depends on the cluster's age (massive main-sequence stars are called often in the
first ~40 Myr, giants every step after), so three measurements:

* ``t = 0``: bench/bench_step.py on the initial model (steps 3-.. of the run) with and without
  ``bse.stellar_evolution``, 1 thread and ``mpiexec -n 2`` (1 thread per rank), in turn
  within each of :data:`ROUNDS` rounds (the machine is shared: each row is the fastest round);
* the trace: one run with SE from t = 0 to :data:`TRACE_MYR` Myr (1 thread, 2 emulated
  streams), every step's wall time, SE's time and the objects evolved, summarised per
  stretch of time (the share a production run sees as it ages); it writes a checkpoint at each
  of :data:`EPOCHS_MYR`.  Made once and kept in runs/ (like the collapse checkpoint of
  bench/run_bench.py: minutes);
* later epochs: bench_step.py continued from those checkpoints with SE (1 thread and 2 ranks);
  a checkpoint cannot switch SE off (it defines the run), so "without" there is the step
  less its SE part (at t = 0 this estimate is set beside the measured ratio).

With SE, each bench_step row also has BSE's own time (``physics.stellar_evolution.evolve`` and
``next_call_times``, timed by wrapping them) apart from the process's bookkeeping, and the
objects evolved per step (diagnostics column ``n_se_evolved``).  Prints a table and writes
docs/performance_se_bench.json (a ``--quick`` sitting writes runs/bench_stellar_evolution.json).

``python bench/bench_stellar_evolution.py trace N T_MYR [EPOCH ...] [--max-minutes=M]`` makes
the trace alone (M: stop it there; the bench then uses the time it reached).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.run_bench import BIN, _bench_line, _commit  # noqa: E402

KROUPA = ["initial.mass_function=kroupa", "initial.m_min=0.08", "initial.m_max=150"]
SE_ON = ["bse.stellar_evolution=true"]
#: The issue's goal: the step with SE at most this many times the step without.
GOAL_RATIO = 1.3
ROUNDS = 2
#: The trace's end and the epochs of its checkpoints [Myr].
TRACE_MYR = 60.0
EPOCHS_MYR = (5.0, 20.0, 50.0)
QUICK_TRACE_MYR = 12.0
QUICK_EPOCHS_MYR = (10.0,)


def trace_dir(n: int) -> Path:
    return ROOT / "runs" / f"bench_se_N{n}"


def make_trace(n: int, t_myr: float, epochs: tuple[float, ...],
               max_minutes: float = 0.0) -> dict:
    """Run the SE model from t = 0 to ``t_myr`` Myr in this process (1 thread, 2 emulated
    streams so that ``mpiexec -n 2`` can continue its checkpoints), recording every step, and
    write a checkpoint at each epoch; kept in :func:`trace_dir` (trace.json, rewritten every
    500 steps).  ``max_minutes`` (0: none) stops it early, at the time it reached."""
    import numba

    numba.set_num_threads(1)
    out = trace_dir(n)
    out.mkdir(parents=True, exist_ok=True)
    here = os.getcwd()
    os.chdir(out)  # evolv2 writes its warnings into fort.99 in the working directory
    try:
        return _trace(n, t_myr, epochs, max_minutes, out)
    finally:
        os.chdir(here)


def _trace(n: int, t_myr: float, epochs: tuple[float, ...], max_minutes: float,
           out: Path) -> dict:
    from cmc.config import load_config
    from cmc.simulation import Simulation
    from cmc.state import PARTS
    from parallel.comm import SerialComm

    cfg = load_config(None, [f"initial.n={n}", "initial.seed=1", *KROUPA, *SE_ON,
                             "run.emulate_ranks=2", "run.max_steps=100000000",
                             "run.t_max=1e9", "run.n_core_stop=0", "run.rc_stop_fraction=0",
                             "output.snapshot_every=0", "output.checkpoint_every=100000000"])
    t0 = time.perf_counter()
    sim = Simulation.create(cfg, SerialComm(), out)
    startup = time.perf_counter() - t0
    rows = []
    todo = sorted(epochs)
    ckpts = {}
    wall0 = time.perf_counter()
    while True:
        t_now = sim.units.rel_to_myr(sim.state.time)
        if todo and t_now >= todo[0]:
            sim.write_checkpoint()
            dest = out / f"checkpoint_{todo[0]:g}Myr.h5"
            shutil.copy(out / "checkpoint.h5", dest)
            ckpts[f"{todo[0]:g}"] = {"path": str(dest), "t_myr": t_now,
                                     "step": int(sim.state.step)}
            todo.pop(0)
        if t_now >= t_myr:
            break
        before = dict(sim.timers)
        t1 = time.perf_counter()
        sim.step()
        wall = time.perf_counter() - t1
        last = sim.last
        rows.append({"step": int(sim.state.step), "t_myr": sim.units.rel_to_myr(sim.state.time),
                     "N": int(sim.n_total), "wall_s": wall,
                     "se_s": sim.timers["stellar_evolution"] - before["stellar_evolution"],
                     "parts_s": {p: sim.timers[p] - before[p] for p in PARTS},
                     "n_se_evolved": float(last.get("n_se_evolved", 0.0)),
                     "n_supernovae": float(last.get("n_supernovae", 0.0))})
        if len(rows) % 500 == 0:  # (kept as it goes: a trace stopped early still counts)
            print(f"trace: step {len(rows)}, t = {rows[-1]['t_myr']:.3f} Myr, "
                  f"{time.perf_counter() - wall0:.0f} s", flush=True)
            _write_trace(out, n, t_myr, startup, wall0, rows, ckpts)
        if max_minutes and time.perf_counter() - wall0 > 60 * max_minutes:
            print(f"trace: stopped at {max_minutes:g} min (t = {rows[-1]['t_myr']:.3f} Myr)")
            break
    return _write_trace(out, n, t_myr, startup, wall0, rows, ckpts)


def _write_trace(out: Path, n: int, t_myr: float, startup: float, wall0: float, rows: list,
                 ckpts: dict) -> dict:
    info = {"N": n, "t_myr": rows[-1]["t_myr"] if rows else 0.0, "t_myr_asked": t_myr,
            "startup_s": startup, "wall_s": time.perf_counter() - wall0, "steps": len(rows),
            "checkpoints": ckpts, "commit": _commit(),
            "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rows": rows}
    (out / "trace.json").write_text(json.dumps(info) + "\n")
    return info


#: Stretches of the trace [Myr] over which SE's share is summarised.
BINS_MYR = (0.0, 0.1, 1.0, 3.0, 5.0, 10.0, 20.0, 40.0, 60.0, 1e9)


def summarise_trace(info: dict) -> list[dict]:
    """The trace per stretch of time: steps, the step's and SE's wall time, SE's share, the
    objects evolved per step, the mean step [Myr]; and the whole run (last row)."""
    rows = info["rows"]
    out = []
    for lo, hi in (*zip(BINS_MYR[:-1], BINS_MYR[1:]), (0.0, 1e9)):
        sel = [r for r in rows if lo <= r["t_myr"] < hi]
        if not sel:
            continue
        wall = sum(r["wall_s"] for r in sel)
        se_s = sum(r["se_s"] for r in sel)
        star_steps = sum(r["N"] for r in sel)
        t_hi = min(hi, sel[-1]["t_myr"])
        out.append({"t_myr": [lo, t_hi] if hi < 1e9 or lo > 0 else [0.0, t_hi],
                    "whole_run": lo == 0.0 and hi == 1e9, "steps": len(sel),
                    "wall_s": wall, "se_s": se_s, "se_share": se_s / wall,
                    "ratio_vs_without": wall / (wall - se_s),
                    "us_per_star_step": wall / star_steps * 1e6,
                    "se_us_per_star_step": se_s / star_steps * 1e6,
                    "n_se_evolved_per_step": sum(r["n_se_evolved"] for r in sel) / len(sel),
                    "supernovae": sum(r["n_supernovae"] for r in sel),
                    "dt_myr": (sel[-1]["t_myr"] - sel[0]["t_myr"]) / max(1, len(sel) - 1)})
    return out


def _run_step(args: list[str], ranks: int, cwd: str) -> dict:
    """One bench_step.py run on 1 thread per rank (``ranks`` > 1: ``mpiexec -n ranks``) in
    ``cwd`` (evolv2 writes fort.99 there); its BENCH line."""
    cmd = [sys.executable, str(ROOT / "bench" / "bench_step.py"), *args]
    if ranks > 1:
        cmd = [str(BIN / "mpiexec"), "-n", str(ranks), *cmd]
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    return _bench_line(p.stdout, p.stderr, " ".join(cmd))


def measure(configs: list[tuple[str, str, int, list[str]]], rounds: int, cwd: str) -> list[dict]:
    """Each configuration (epoch, SE on/off, ranks, bench_step arguments) once per round, in
    turn (with and without SE alternate within a round); per configuration the fastest round,
    with every round's total."""
    seen: list[list[dict]] = [[] for _ in configs]
    for k in range(rounds):
        for i, (epoch, se, ranks, args) in enumerate(configs):
            r = _run_step(args, ranks, cwd)
            print(f"  round {k + 1}: {epoch:>8s} SE {se:3s} {ranks} rank(s): "
                  f"{r['us_per_star_step']:.3f} us per star-step", flush=True)
            seen[i].append(r)
    rows = []
    for (epoch, se, _ranks, _), got in zip(configs, seen):
        best = min(got, key=lambda r: r["us_per_star_step"])
        rows.append(dict(best, epoch=epoch, se=se == "on",
                         rounds_us_per_star_step=[r["us_per_star_step"] for r in got]))
    return rows


def main() -> None:
    quick = "--quick" in sys.argv
    n = 20_000 if quick else 100_000
    steps = 9 if quick else 21
    t_trace, epochs = (QUICK_TRACE_MYR, QUICK_EPOCHS_MYR) if quick else (TRACE_MYR, EPOCHS_MYR)
    cores = os.cpu_count() or 1
    tdir = trace_dir(n)
    if (tdir / "trace.json").exists():
        info = json.loads((tdir / "trace.json").read_text())
    else:
        print(f"trace: N = {n:.0e} with SE to {t_trace:g} Myr (once; kept in {tdir})",
              flush=True)
        info = make_trace(n, t_trace, epochs)
    base = [str(n), str(steps), "1", *KROUPA]
    configs = [("t=0", se, ranks, base + (SE_ON if se == "on" else []))
               for ranks in (1, 2) for se in ("off", "on")]
    for e, ck in info["checkpoints"].items():
        if float(e) not in epochs:
            continue
        for ranks in (1, 2):
            configs.append((f"{e} Myr", "on", ranks, ["collapse", ck["path"], str(steps), "1"]))
    with tempfile.TemporaryDirectory() as cwd:
        rows = measure(configs, 1 if quick else ROUNDS, cwd)
    trace = summarise_trace(info)
    result = report(rows, trace, info, n, cores, quick)
    path = ROOT / ("runs/bench_stellar_evolution.json" if quick
                   else "docs/performance_se_bench.json")
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"JSON: {path}")


def report(rows: list[dict], trace: list[dict], info: dict, n: int, cores: int,
           quick: bool) -> dict:
    """Print the tables and the goal; the JSON's content."""
    import datetime

    print(f"\nStep with stellar evolution, Plummer N = {n:.0e}, Kroupa 0.08-150 Msun, "
          f"microseconds per star-step, fastest of the rounds (machine: {os.uname().nodename}, "
          f"{cores} cores, shared)")
    head = ["epoch", "ranks", "SE", "total", "SE part", "share", "ratio", "BSE", "sched.",
            "bookkeep.", "evolved/step", "us/object", "Myr"]
    print(" | ".join(f"{h:>9s}" for h in head))
    goals = []
    for r in rows:
        off = next((b for b in rows if b["epoch"] == r["epoch"] and not b["se"]
                    and b["ranks"] == r["ranks"]), None)
        se_us = r["parts_us_per_star"]["stellar_evolution"]
        r["se_share"] = se_us / r["us_per_star_step"]
        # the ratio: measured against the run without SE where there is one (t = 0), else
        # the step less its SE part
        r["ratio"] = r["us_per_star_step"] / (off["us_per_star_step"] if off
                                              else r["us_per_star_step"] - se_us)
        r["ratio_measured"] = off is not None
        # the same against the step without SE at t = 0 (same ranks): the SE columns make the
        # table wider (the sort moves them), which the step less its SE part leaves out
        t0 = next((b for b in rows if b["epoch"] == "t=0" and not b["se"]
                   and b["ranks"] == r["ranks"]), None)
        r["ratio_vs_t0_without"] = r["us_per_star_step"] / t0["us_per_star_step"] if t0 else None
        s = r.get("stellar_evolution", {})
        vals = [r["epoch"], r["ranks"], "on" if r["se"] else "off", r["us_per_star_step"],
                se_us, r["se_share"], r["ratio"], s.get("bse_us_per_star", 0.0),
                s.get("schedule_us_per_star", 0.0), s.get("bookkeeping_us_per_star", 0.0),
                s.get("n_se_evolved_per_step", 0.0), s.get("bse_us_per_object", 0.0),
                "-" if not s else f"{s['t_myr'][0]:.3g}-{s['t_myr'][1]:.3g}"]
        print(" | ".join(f"{v:9.3g}" if isinstance(v, float) else f"{v!s:>9s}" for v in vals))
        if r["se"]:
            goals.append({"epoch": r["epoch"], "ranks": r["ranks"], "ratio": r["ratio"],
                          "ratio_vs_t0_without": r["ratio_vs_t0_without"],
                          "ratio_measured": off is not None, "se_share": r["se_share"],
                          "met": r["ratio"] <= GOAL_RATIO})
    print("ratio: against the same run without SE (t = 0), else against the step less its SE "
          "part (a checkpoint cannot switch SE off); BSE = evolv2's calls, sched. = the "
          "scheduler, bookkeep. = the rest of the process (us per star-step)")
    print(f"\nThe trace: one run with SE from t = 0 to {info['t_myr']:g} Myr, 1 thread "
          f"({info['steps']} steps, {info['wall_s']:.0f} s; made at {info['commit']})")
    print(" | ".join(f"{h:>9s}" for h in ("Myr", "steps", "dt [Myr]", "us/star", "SE us/star",
                                           "SE share", "ratio", "evolved", "SNe")))
    for t in trace:
        span = "whole run" if t["whole_run"] else f"{t['t_myr'][0]:g}-{t['t_myr'][1]:.3g}"
        vals = [t["steps"], t["dt_myr"], t["us_per_star_step"], t["se_us_per_star_step"],
                t["se_share"], t["ratio_vs_without"], t["n_se_evolved_per_step"],
                t["supernovae"]]
        print(f"{span:>9s} | " + " | ".join(f"{v:9.3g}" if isinstance(v, float)
                                            else f"{v:>9}" for v in vals))
    print(f"\nGoal (issue 48): the step with SE <= {GOAL_RATIO}x the step without")
    for g in goals:
        print(f"  {'met    ' if g['met'] else 'NOT met'}  {g['epoch']}, {g['ranks']} rank(s): "
              f"{g['ratio']:.2f}x (SE {g['se_share']:.0%} of the step"
              f"{'' if g['ratio_measured'] else '; against the step less SE'}"
              + ("" if g["ratio_measured"] or g["ratio_vs_t0_without"] is None else
                 f"; {g['ratio_vs_t0_without']:.2f}x the step without SE at t = 0") + ")")
    return {"machine": os.uname().nodename, "cores": cores, "quick": quick, "N": n,
            "model": ["Plummer", *KROUPA, "initial.seed=1"], "goal_ratio": GOAL_RATIO,
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "commit": _commit(), "steps": rows, "goals": goals,
            "trace": {k: v for k, v in info.items() if k != "rows"}, "trace_summary": trace}


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "trace":
        args = [a for a in sys.argv[4:] if not a.startswith("--max-minutes=")]
        limit = [float(a.split("=")[1]) for a in sys.argv[4:] if a.startswith("--max-minutes=")]
        make_trace(int(sys.argv[2]), float(sys.argv[3]),
                   tuple(float(x) for x in args) or EPOCHS_MYR, limit[0] if limit else 0.0)
    else:
        main()
