"""Direct N-body speed (issue 50): force evaluations per second and the whole integrator.

``python bench/bench_nbody.py [--quick] [--repeats K]`` (part of ``make bench``).

* Force kernels alone (:mod:`physics.nbody_kernels`): acceleration and jerk (order 4,
  ``acc_jerk_parallel``) and acceleration, jerk and snap (order 6, ``acc_jerk_snap_parallel``)
  on the Plummer model of ``cmc nbody`` (:class:`cmc.nbody.NBodyRun`'s stars) at N = 1000,
  4000, 16000 (``--quick``: 1000, 4000), with every particle active and with a typical block
  (1/16 of them, random), on 1 and 2 numba threads (``numba.set_num_threads``; the parallel
  kernel both times, so the rows differ only in the threads): the best of ``--repeats``
  evaluations, as pair interactions per second and ns per pair interaction per core.
* The whole integrator: :func:`physics.nbody.evolve` of the Plummer N = 1000 model as ``cmc
  nbody`` builds it (close pairs on) over 1 N-body time unit, orders 4 and 6, 1 and 2
  threads: particle steps per second, particle steps per star per time unit and wall ns
  per pair interaction (``NBodyState.n_pairs``; the prediction and corrector included).
* GPU (:mod:`physics.nbody_gpu`, ``cmc nbody --forces gpu``), where a CUDA device and CuPy are
  present: the same force evaluations through :class:`physics.nbody_gpu.DeviceForces`
  (transfers included), pairs per second and the largest relative difference from the CPU
  kernel's forces; otherwise the line says what is missing.
* Time to collapse of N = 2000 on two cores: an ESTIMATE only (the run takes hours), from the
  measured ns per pair and steps per star per time unit to 16 t_rh0 (t_rh0 in N-body units as
  ``cmc nbody`` computes it), beside :func:`cmc.nbody.estimated_seconds`, and the command
  that would measure it.

Prints a table and ``BENCH_JSON {...}``; writes docs/performance_nbody.json and the section
"Direct N-body" of docs/performance.md (``--quick``: runs/bench_nbody.json, no doc).
Figures from a shared machine scatter: run it on a quiet one for the record.
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

from bench.run_bench import _commit  # noqa: E402

NS_FULL = (1000, 4000, 16000)
NS_QUICK = (1000, 4000)
#: a typical block: this fraction of the particles active
BLOCK_FRACTION = 1.0 / 16.0
#: the collapse estimate: N, and the time in t_rh0 (a Plummer model collapses near 16 t_rh0)
COLLAPSE_N = 2000
COLLAPSE_TRH = 16.0
#: an N-body run of the collapse model (``cmc nbody examples/nbody_compare.ini --set
#: initial.n=2000 --order 6``, two threads) whose measured time to collapse is reported
COLLAPSE_RUN = ROOT / "runs" / "nb2000" / "nb_s1"
DOC = ROOT / "docs" / "performance.md"
BEGIN = "<!-- bench-nbody:begin -->"
END = "<!-- bench-nbody:end -->"


def _config(n: int, seed: int = 1):
    from cmc.config import load_config

    return load_config(None, [f"initial.n={n}", f"initial.seed={seed}"],
                       text="[initial]\nmodel = plummer\n")


def plummer(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masses, positions, velocities of ``cmc nbody``'s Plummer model of ``n`` stars."""
    from cmc.initial import build_initial_stars
    from cmc.nbody import place_stars

    stars, _ = build_initial_stars(_config(n, seed))
    pos, vel = place_stars(stars, seed)
    return np.ascontiguousarray(stars["m"], dtype=np.float64), pos, vel


def _best(fn, repeats: int) -> tuple[float, float]:
    """Wall and process CPU seconds of the fastest of ``repeats`` calls (on a shared machine
    the CPU time is what this process got: near the wall time of a quiet one on one thread)."""
    best = (float("inf"), float("inf"))
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        took = (time.perf_counter() - t0, time.process_time() - c0)
        best = min(best, took)
    return best


def _force_cases(ns, seed: int = 1):
    """The force evaluations measured: per N (the Plummer model of ``cmc nbody``), order 4 and
    6, every particle and a random block of :data:`BLOCK_FRACTION` of them active: yields
    ``(n, order, name, active, inputs, cpu_kernel)`` (``cpu_kernel(*inputs, active, 0.0)``)."""
    from physics.nbody_kernels import acc_jerk_parallel, acc_jerk_snap_parallel

    rng = np.random.default_rng(seed)
    for n in ns:
        m, pos, vel = plummer(n, seed)
        everyone = np.arange(n, dtype=np.int64)
        acc, _, _ = acc_jerk_parallel(pos, vel, m, everyone, 0.0)
        block = np.sort(rng.choice(n, max(1, int(round(n * BLOCK_FRACTION))),
                                   replace=False)).astype(np.int64)
        for order in (4, 6):
            inputs = (pos, vel, m) if order == 4 else (pos, vel, acc, m)
            kernel = acc_jerk_parallel if order == 4 else acc_jerk_snap_parallel
            for name, active in (("all", everyone), ("1/16", block)):
                yield n, order, name, active, inputs, kernel


def measure_kernels(ns=NS_FULL, threads=(1, 2), repeats: int = 3, seed: int = 1) -> list[dict]:
    """Best-of-``repeats`` time of one force evaluation per (N, order, block, threads)."""
    import numba

    rows = []
    keep = numba.get_num_threads()
    try:
        for n, order, name, active, inputs, kernel in _force_cases(ns, seed):
            def call(a=active, i=inputs, k=kernel):
                k(*i, a, 0.0)
            for t in threads:
                numba.set_num_threads(min(t, numba.config.NUMBA_NUM_THREADS))
                call()  # compiled (cache) and warm
                reps = repeats if active.size * n < 1e8 else max(1, repeats - 1)
                s, cpu = _best(call, reps)
                pairs = active.size * (n - 1)
                rows.append({
                    "N": n, "order": order, "active": name, "n_active": int(active.size),
                    "threads": numba.get_num_threads(), "repeats": reps,
                    "best_s": s, "cpu_s": cpu, "pairs": pairs, "pairs_per_s": pairs / s,
                    "ns_per_pair_cpu": 1e9 * cpu / pairs,
                    "pairs_per_s_per_core": pairs / s / numba.get_num_threads(),
                    "ns_per_pair_per_core": 1e9 * s * numba.get_num_threads() / pairs,
                    "ns_per_pair_wall": 1e9 * s / pairs})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        numba.set_num_threads(keep)
    return rows


def measure_gpu_kernels(ns=NS_FULL, repeats: int = 3, seed: int = 1) -> list[dict] | str:
    """The force evaluations of :func:`measure_kernels` on the GPU (``DeviceForces("gpu")``,
    transfers included), or the one line saying why not."""
    from physics.nbody_gpu import DeviceForces
    from physics.orbits_gpu import BackendUnavailable

    try:
        dev = DeviceForces("gpu")
    except BackendUnavailable as exc:
        return f"not measured here: {exc}"
    rows = []
    for n, order, name, active, inputs, kernel in _force_cases(ns, seed):
        want = kernel(*inputs, active, 0.0)
        got = dev(kernel, inputs, active, 0.0)  # compiled and warm
        rel = max(float(np.max(np.abs(g - w)) / np.max(np.abs(w))) for g, w in zip(got, want))
        s, _ = _best(lambda a=active, i=inputs, k=kernel: dev(k, i, a, 0.0), repeats)
        pairs = active.size * (n - 1)
        rows.append({"N": n, "order": order, "active": name, "n_active": int(active.size),
                     "best_s": s, "pairs": pairs, "pairs_per_s": pairs / s,
                     "ns_per_pair_wall": 1e9 * s / pairs, "max_rel_diff_vs_cpu": rel,
                     "device": dev.device})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def measure_integrator(n: int = 1000, t_end: float = 1.0, orders=(4, 6), threads=(1, 2),
                       seed: int = 1) -> list[dict]:
    """:func:`physics.nbody.evolve` of ``cmc nbody``'s model over ``t_end`` N-body units
    (the state built as ``cmc nbody`` builds it; its start-up not timed)."""
    import numba

    from cmc.nbody import NBodyRun
    from physics.nbody import evolve

    rows = []
    keep = numba.get_num_threads()
    cfg = _config(n, seed)
    try:
        for order in orders:
            for t in threads:
                numba.set_num_threads(min(t, numba.config.NUMBA_NUM_THREADS))
                run = NBodyRun(cfg, None, t_end=t_end, order=order)
                st = run.nb
                steps0, pairs0 = st.n_steps, st.n_pairs
                c0, t0 = time.process_time(), time.perf_counter()
                evolve(st, t_end)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                steps, pairs = st.n_steps - steps0, st.n_pairs - pairs0
                nt = numba.get_num_threads()
                rows.append({
                    "N": n, "order": order, "eta": st.eta, "threads": nt, "t_end": t_end,
                    "wall_s": wall, "cpu_s": cpu, "particle_steps": steps, "blocks": st.n_blocks,
                    "pairs": pairs, "steps_per_s": steps / wall,
                    "steps_per_star_per_unit": steps / n / t_end,
                    "ns_per_pair_wall": 1e9 * wall / pairs,
                    "ns_per_pair_per_core": 1e9 * wall * nt / pairs,
                    "ns_per_pair_cpu": 1e9 * cpu / pairs,
                    "close_pairs_now": st.n_pairs_now})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        numba.set_num_threads(keep)
    return rows


def collapse_estimate(integ: list[dict], n: int = COLLAPSE_N, t_trh: float = COLLAPSE_TRH,
                      threads: int = 2) -> dict:
    """An ESTIMATE of the wall time of ``cmc nbody`` of ``n`` stars to ``t_trh`` t_rh0 on
    ``threads`` threads, per order: pairs ``n (n - 1) x steps per star per unit x t_end`` at
    the integrator's measured wall ns per pair (on ``threads`` threads; the most measured if
    not), the steps per star per unit measured at the integrator's N (they grow with N, and
    in core collapse far more: a lower bound).  ``quiet_seconds``: the same pairs at the
    one-thread run's CPU-time ns per pair divided by ``threads`` (two quiet cores, perfect
    scaling: what a machine not shared would at best take)."""
    from cmc.nbody import NBodyRun, estimated_seconds

    run = NBodyRun(_config(n), None, t_end=1.0)
    t_end = t_trh * run.t_rh0_nb
    out = {"N": n, "t_trh": t_trh, "t_rh0_nb": run.t_rh0_nb, "t_end_nb": t_end,
           "cmc_estimated_seconds_one_core": estimated_seconds(n, t_end),
           "by_order": {}}
    for order in sorted({r["order"] for r in integ}):
        rows = [r for r in integ if r["order"] == order]
        row = next((r for r in rows if r["threads"] == threads),
                   max(rows, key=lambda r: r["threads"]))
        one = min(rows, key=lambda r: r["threads"])
        pairs = n * (n - 1) * row["steps_per_star_per_unit"] * t_end
        out["by_order"][str(order)] = {
            "threads": row["threads"], "from_N": row["N"],
            "steps_per_star_per_unit": row["steps_per_star_per_unit"],
            "ns_per_pair_wall": row["ns_per_pair_wall"], "pairs": pairs,
            "seconds": pairs * row["ns_per_pair_wall"] * 1e-9,
            "quiet_seconds": pairs * one["ns_per_pair_cpu"] * 1e-9 / threads}
    out["command"] = (f"cmc nbody examples/plummer_small.ini -o runs/nbody_N{n} --order 6 "
                      f"--set initial.n={n} --set run.t_max={t_trh:g} "
                      f"--set run.threads={threads}")
    return out


def collapse_measured(run_dir: Path = COLLAPSE_RUN) -> dict | None:
    """The MEASURED time to collapse of an N-body run (None when the folder has no run or it
    has not collapsed yet): collapse as :func:`bench.nbody_postcollapse.summarise` takes it
    (the first hard binary, or N_core <= 10), and the run's integration wall time there
    (column ``wall_s``, summed over its restarts; the waits between them not counted)."""
    from bench.nbody_postcollapse import summarise
    from cmc.io import read_diagnostics

    if not (run_dir / "diagnostics.h5").exists():
        return None
    summary = summarise(str(run_dir))
    if summary["t_cc"] is None or summary["kind"] != "N-body":
        return None
    d, attrs = read_diagnostics(run_dir / "diagnostics.h5")
    row = int(np.flatnonzero(np.asarray(d["time_trh"]) == summary["t_cc"])[0])
    return {"run": str(run_dir.relative_to(ROOT) if run_dir.is_relative_to(ROOT) else run_dir),
            "N": int(np.asarray(d["N"])[0]), "t_cc_trh": summary["t_cc"], "by": summary["by"],
            "order": int(attrs.get("order", 0)), "wall_seconds": float(d["wall_s"][row])}


def _hours(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min"


def tables(rec: dict) -> str:
    """The record's tables (markdown)."""
    lines = ["Force kernels alone (best of the repeats), per core: pair interactions per "
             "second and ns per pair interaction (wall time x threads); the CPU-time column is "
             "the process's CPU seconds per pair (what it got of a shared machine).", "",
             "| N | order | active | threads | best (ms) | pairs/s per core | "
             "ns/pair per core | ns/pair (CPU time) | speed-up on 2 |",
             "|---|---|---|---|---|---|---|---|---|"]
    ks = rec["kernels"]
    for r in ks:
        one = next((q for q in ks if (q["N"], q["order"], q["active"], q["threads"])
                    == (r["N"], r["order"], r["active"], 1)), None)
        up = f"{one['best_s'] / r['best_s']:.2f}x" if one and r["threads"] > 1 else "-"
        lines.append(f"| {r['N']} | {r['order']} | {r['active']} ({r['n_active']}) | "
                     f"{r['threads']} | {1e3 * r['best_s']:.2f} | "
                     f"{r['pairs_per_s_per_core']:.3g} | {r['ns_per_pair_per_core']:.2f} | "
                     f"{r['ns_per_pair_cpu']:.2f} | {up} |")
    lines += ["", f"Whole integrator: `physics.nbody.evolve`, Plummer N = "
              f"{rec['integrator'][0]['N']} as `cmc nbody` builds it, over "
              f"{rec['integrator'][0]['t_end']:g} N-body time unit.", "",
              "| order | eta | threads | wall (s) | particle steps/s | steps per star per unit | "
              "ns/pair (wall) | ns/pair per core | ns/pair (CPU time) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rec["integrator"]:
        lines.append(f"| {r['order']} | {r['eta']:g} | {r['threads']} | {r['wall_s']:.2f} | "
                     f"{r['steps_per_s']:.3g} | {r['steps_per_star_per_unit']:.0f} | "
                     f"{r['ns_per_pair_wall']:.1f} | {r['ns_per_pair_per_core']:.1f} | "
                     f"{r['ns_per_pair_cpu']:.1f} |")
    if isinstance(rec["gpu"], str):
        lines += ["", f"GPU: {rec['gpu']}."]
    else:
        lines += ["", f"GPU ({rec['gpu'][0]['device']}; `DeviceForces`, transfers included; "
                  "difference: the largest over the outputs of |GPU - CPU| / max |CPU|):", "",
                  "| N | order | active | best (ms) | pairs/s | ns/pair | difference |",
                  "|---|---|---|---|---|---|---|"]
        for r in rec["gpu"]:
            lines.append(f"| {r['N']} | {r['order']} | {r['active']} ({r['n_active']}) | "
                         f"{1e3 * r['best_s']:.2f} | {r['pairs_per_s']:.3g} | "
                         f"{r['ns_per_pair_wall']:.3f} | {r['max_rel_diff_vs_cpu']:.1e} |")
    c = rec["collapse_estimate"]
    lines += ["", f"Time to collapse of N = {c['N']} on two cores -- an ESTIMATE, not measured: "
              f"{c['t_trh']:g} t_rh0 = {c['t_end_nb']:.0f} N-body units (t_rh0 = "
              f"{c['t_rh0_nb']:.1f}), the pairs at the steps per star per unit of N = "
              f"{next(iter(c['by_order'].values()))['from_N']} and the integrator's measured "
              "ns per pair (more steps at larger N and in core collapse: a lower bound):"]
    for order, e in c["by_order"].items():
        lines.append(f"order {order}: {e['steps_per_star_per_unit']:.0f} steps per star per "
                     f"unit x {e['ns_per_pair_wall']:.1f} ns per pair on {e['threads']} "
                     f"thread(s): about {_hours(e['seconds'])} (on two quiet cores at the "
                     f"one-thread CPU time per pair, perfect scaling: "
                     f"{_hours(e['quiet_seconds'])})")
    lines.append(f"(cmc.nbody.estimated_seconds, its fixed constants, one core: "
                 f"{_hours(c['cmc_estimated_seconds_one_core'])}.)  To measure it: "
                 f"`{c['command']}`")
    m = rec.get("collapse_measured")
    if m:
        lines += ["", f"Time to collapse MEASURED: `{m['run']}` (N = {m['N']}, order "
                  f"{m['order']}, two threads of this kind of machine, shared with other jobs "
                  f"while it ran) collapsed ({m['by']}) at {m['t_cc_trh']:.2f} t_rh0 after "
                  f"{_hours(m['wall_seconds'])} of integration."]
    return "\n".join(lines)


def write_doc(rec: dict, doc: Path = DOC) -> None:
    """Put the section between :data:`BEGIN` and :data:`END` of ``doc`` (appended at the
    end the first time; only that section replaced afterwards)."""
    body = (f"{BEGIN}\n## Direct N-body\n\n`python bench/bench_nbody.py` (part of `make bench`;"
            f" issue 50), {rec['made']} at {rec['commit']} on {rec['machine']} -- "
            f"{rec['note']}\n\n{tables(rec)}\n{END}\n")
    text = doc.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + body + rest.split(END, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + body
    doc.write_text(text)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 1000, 4000; no doc")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--note", default="the machine was shared with other jobs: the figures "
                    "scatter and the two-thread ones are pessimistic")
    args, _ = ap.parse_known_args(argv)  # BENCH_ARGS may hold the other scripts' options
    load0 = os.getloadavg()[0]
    kernels = measure_kernels(NS_QUICK if args.quick else NS_FULL, repeats=args.repeats)
    integ = measure_integrator()
    rec = {"machine": f"{platform.node()} ({os.cpu_count()} cores)", "cores": os.cpu_count(),
           "made": time.strftime("%Y-%m-%d %H:%M %Z"), "commit": _commit(),
           "quick": args.quick,
           "note": f"{args.note} (1-min load average {load0:.1f} at the start, "
                   f"{os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores)",
           "kernels": kernels, "integrator": integ,
           "gpu": measure_gpu_kernels(NS_QUICK if args.quick else NS_FULL, args.repeats),
           "collapse_estimate": collapse_estimate(integ),
           "collapse_measured": collapse_measured()}
    print(f"\nDirect N-body on {rec['machine']}, {rec['made']}, {rec['commit']}: {rec['note']}\n")
    print(tables(rec))
    out = ROOT / ("runs/bench_nbody.json" if args.quick else "docs/performance_nbody.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rec, indent=1) + "\n")
    if not args.quick:
        write_doc(rec)
    print("BENCH_JSON " + json.dumps(rec))
    return rec


if __name__ == "__main__":
    main()
