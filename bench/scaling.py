"""Strong scaling on one machine: P = 1, 2, 4, ... threads and MPI ranks, and the model's check.

``python bench/scaling.py measure OUT.json [--p 1,2,4,8,16] [--n 100000,1000000]`` runs
``bench/bench_step.py`` for every N on P threads (one process) and on P ranks of one thread
each, and measures on the same machine the inputs of the performance model that are not step
timings (the passes over the replicated arrays and T_fixed, :mod:`bench.perf_model`).
OUT.json is rewritten after every configuration, so a run stopped early keeps what it
measured.  Meant for a machine with more cores than the CI kind (issue 16: "measure P = 1-16
there and check the model against it").

``python bench/scaling.py report OUT.json`` puts the model, fed with that machine's own
one-rank and two-rank rows, beside the measured speedups at every P, and writes the section
between the ``scaling`` markers of docs/performance.md.  Ranks on one machine share memory,
so the model is shown with the network terms (InfiniBand, as for the projection) and without
them (compute only); the gap between the two and the measurement is the check.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from run_bench import _run  # noqa: E402

from bench.scaling_common import machine  # noqa: E402
from cmc.sweep_summary import _atomic_write  # noqa: E402

DOC = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- scaling:begin -->", "<!-- scaling:end -->"
#: Steps per configuration (bench_step times 3 runs of STEPS/3 and keeps the fastest); 2e4 for
#: a quick look (and the test).
STEPS = {20_000: 6, 100_000: 15, 1_000_000: 6}


def _save(path: Path, data: dict) -> None:
    _atomic_write(path, json.dumps(data, indent=1) + "\n")


def measure(out: Path, ps: list[int], ns: list[int], mpiexec: str, timeout: float) -> None:
    """Every (N, P, threads|ranks|hybrid) configuration, then the model's other inputs."""
    from bench.perf_model import fixed_step_seconds, replicated_costs

    os.environ["OMP_NUM_THREADS"] = "1"  # numba's threads only, in every configuration
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {"machine": machine(), "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "mpiexec": mpiexec, "rows": [], "errors": []}
    _save(out, data)
    step = [sys.executable, str(ROOT / "bench" / "bench_step.py")]

    def one(n: int, p: int, kind: str, threads: int) -> None:
        """One configuration: P threads, P ranks, or P ranks x ``threads`` (hybrid)."""
        cmd = step + [str(n), str(STEPS[n]), str(threads)]
        if kind != "threads":
            cmd = [mpiexec, "-n", str(p)] + cmd
        label = f"N={n:.0e} P={p:2d} {kind:7s}" + (f" x {threads}" if kind == "hybrid" else "")
        t0 = time.perf_counter()
        try:
            row = _run(cmd, threads, timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            data["errors"].append(f"{label}: {str(exc)[-600:]}")
            print(data["errors"][-1], flush=True)
        else:
            row.update(kind=kind, P=p, wall_s=time.perf_counter() - t0)
            data["rows"].append(row)
            print(f"{label}: {row['us_per_star_step']:.4f} us per star-step "
                  f"({row['wall_s']:.0f} s)", flush=True)
        _save(out, data)

    for n in ns:
        for p in ps:
            one(n, p, "threads", p)
            if p > 1:
                one(n, p, "ranks", 1)
    # ranks x threads filling the machine, e.g. 2 x 8, 4 x 4, 8 x 2 on 16 cores
    top = max(ps)
    for n in ns:
        for p in ps:
            if p not in (1, top) and top % p == 0:
                one(n, p, "hybrid", top // p)
    # the machine's own MPI: latency and bandwidth of the step's kinds of collective
    data["comm"] = {}
    for p in ps:
        if p == 1:
            continue
        res = subprocess.run([mpiexec, "-n", str(p), sys.executable,
                              str(ROOT / "bench" / "comm_bench.py"), *map(str, ns)],
                             capture_output=True, text=True, cwd=ROOT, timeout=timeout)
        got = [ln[5:] for ln in res.stdout.splitlines() if ln.startswith("COMM ")]
        if got:
            data["comm"][str(p)] = json.loads(got[0])
        else:
            data["errors"].append(f"comm_bench P={p}: {res.stderr[-600:]}")
    _save(out, data)
    t0 = time.perf_counter()
    data["replicated_us"] = {n: replicated_costs(n) for n in ns}
    data["t_fixed_s"], data["t_small_s"] = fixed_step_seconds()
    print(f"model inputs measured in {time.perf_counter() - t0:.0f} s", flush=True)
    _save(out, data)


def _cell(row: dict | None, base: float) -> str:
    """'us per star-step (speedup against ``base``)', or '-' where not measured."""
    if row is None:
        return "-"
    return f"{row['us_per_star_step']:.3f} ({base / row['us_per_star_step']:.1f}x)"


def _find(rows: list[dict], n: int, p: int, kind: str) -> dict | None:
    return next((r for r in rows if r["N"] == n and r["P"] == p and r["kind"] == kind), None)


def _machine_line(data: dict) -> str:
    mach = data["machine"]
    cpu = mach.get("lscpu", {})
    return (f"Machine: {mach.get('lent_as', '?')}: {cpu.get('Model name', '?')}, "
            f"{mach['cpus']} logical CPUs ({cpu.get('Thread(s) per core', '?')} thread(s) per "
            f"core, L2 {cpu.get('L2 cache', '?')}, L3 {cpu.get('L3 cache', '?')}), Python "
            f"{mach.get('python', '?')}, numba {mach['numba']}, numpy {mach['numpy']}, MPICH "
            f"from its PyPI wheel; measured {data['made']} (`python bench/scaling.py measure`; "
            f"this section: `python bench/scaling.py report docs/performance_scaling.json`).")


def _model_rows(data: dict, n: int) -> list[str]:
    """Measured speedups against the model fed with the machine's own P = 1, 2 rows."""
    import bench.perf_model as pm

    rows = data["rows"]
    rep = {int(k): v for k, v in data["replicated_us"].items()}
    one, two = _find(rows, n, 1, "threads"), _find(rows, n, 2, "ranks")
    ps = sorted({r["P"] for r in rows if r["N"] == n and r["kind"] == "ranks"} | {1})
    res = pm.model({"steps": [dict(one, ranks=1, threads=1), dict(two, ranks=2)]}, rep,
                   data["t_fixed_s"], ns=(n,), ps=ps)[n]
    t1, base = res["t1_s"], one["us_per_star_step"]
    comm = data.get("comm", {})
    # the repeats' column only where the JSON holds repeats (a new `measure` writes none)
    repeats = any(r["N"] == n and r["kind"] in ("ranks-repeat", "ranks-bound") for r in rows)
    out = [f"N = {n:.0e}, microseconds per star-step (speedup against one core).  Ranks: "
           + ("the first sitting; 'other sittings': repeats kept in the JSON (kind "
              "ranks-repeat, and ranks-bound: with `-bind-to core`).  " if repeats else
              "one sitting.  ")
           + "Model: the 2-rank model of the section "
           "above fed with this machine's P = 1 and 2 rows and its own passes over the "
           "replicated arrays; its network terms with InfiniBand's figures, or with this "
           "machine's MPI (latency and bandwidth per rank measured by bench/comm_bench.py at "
           "that P).", "",
           "| P | threads | ranks | " + ("ranks, other sittings | " if repeats else "")
           + "model, compute only | model, InfiniBand | model, this machine's MPI |",
           "|---|---|---|" + ("---|" if repeats else "") + "---|---|---|"]
    for p in ps:
        th = _find(rows, n, p, "threads")
        rk = one if p == 1 else _find(rows, n, p, "ranks")
        others = [r["us_per_star_step"] for r in rows if r["N"] == n and r["P"] == p
                  and r["kind"] in ("ranks-repeat", "ranks-bound")]
        if p == 1:
            mod = [t1] * 3
        else:
            terms = res["terms_s"][p]
            comp = terms["divided work"] + terms["repeated passes"] + terms["T_fixed"]
            mod = [comp, comp + terms["latency"] + terms["bandwidth"], comp]
            c = comm.get(str(p))
            if c and str(n) in c:
                alpha = c["allreduce_s"] / max(1, math.ceil(math.log2(p)))
                beta = c[str(n)]["allgatherv_GBps_per_rank"] * 1e9
                mod[2] = comp + sum(pm.comm_parts(n, p, res["traffic"], alpha, beta))
        out.append(f"| {p} | {_cell(th, base)} | {_cell(rk, base)} | "
                   + ((", ".join(f"{u:.3f}" for u in others) or "-") + " | " if repeats
                      else "")
                   + " | ".join(f"{m / n * 1e6:.3f} ({t1 / m:.1f}x)" for m in mod) + " |")
    p = max(ps)
    rk = _find(rows, n, p, "ranks")
    par, rp, w = res["parallel_us"], res["replicated_us"], res["imbalance"]
    parts = [k for k in par if k != "encounters"]
    out += ["", f"The parts at P = {p} ranks, microseconds per star, measured (the slowest "
            "rank's) / model (the 2-rank parallel work divided by P, plus the passes every "
            "rank repeats):", "",
            "| " + " | ".join(parts) + " |", "|" + "---|" * len(parts),
            "| " + " | ".join(f"{rk['parts_us_per_star'][k]:.3f} / "
                              f"{par[k] / p * (1 + w) + rp[k]:.3f}" for k in parts) + " |", ""]
    return out


def report(path: Path, write_doc: bool = True) -> str:
    """The check of the performance model on a many-core machine, as markdown (written between
    the ``scaling`` markers of docs/performance.md unless ``write_doc`` is false)."""
    import bench.perf_model as pm

    data = json.loads(path.read_text())
    rows = data["rows"]
    if not data.get("replicated_us"):
        raise SystemExit(f"{path}: no model inputs (the measurement stopped before them)")
    ns = sorted({r["N"] for r in rows})
    lines = [BEGIN, "", _machine_line(data) + f"  T_fixed there {data['t_fixed_s'] * 1e3:.2f} "
             "ms.", ""]
    for n in ns:
        if _find(rows, n, 1, "threads") and _find(rows, n, 2, "ranks"):
            lines += _model_rows(data, n)
    cal = pm.calibrated(data)
    fit_ps = next(iter(cal.values()))["P_fit"]
    lines += [f"The model calibrated on these P = 1-{fit_ps[-1]} ranks instead "
              "(`perf_model.calibrated`): the step cost per star fitted to a / P + b, b being "
              "what every rank pays whatever P (the repeated passes, the shared-memory "
              "collectives and the waits inside them), projected beyond "
              f"{fit_ps[-1]} with InfiniBand's latency for the further doublings:", "",
              "| N | a [us] | b [us] | fit at P = " + ", ".join(map(str, fit_ps))
              + " | measured | speedup at P = "
              + ", ".join(str(q) for q in pm.PS) + " |", "|---|---|---|---|---|---|"]
    for n, c in cal.items():
        lines.append(f"| {n:.0e} | {c['a_us']:.3f} | {c['b_us']:.3f} | "
                     + ", ".join(f"{u:.3f}" for u in c["us_fit"]) + " | "
                     + ", ".join(f"{u:.3f}" for u in c["us_measured"]) + " | "
                     + ", ".join(f"{x:.1f}" for x in c["speedup"]) + " |")
    hyb = [r for r in rows if r["kind"] == "hybrid"]
    if hyb:
        top = max(r["P"] for r in rows if r["kind"] == "ranks")
        lines += ["", f"Ranks x threads on the {top} cores (one sitting; microseconds per "
                  "star-step, memory per star summed over the ranks):", "",
                  "| N | layout | total | orbits | sort | memory B/star |",
                  "|---|---|---|---|---|---|"]
        for n in ns:
            lay = [(1, _find(rows, n, top, "threads"))]
            lay += [(r["P"], r) for r in sorted(hyb, key=lambda r: r["P"]) if r["N"] == n]
            lay.append((top, _find(rows, n, top, "ranks")))
            for p, r in lay:
                if r is None:
                    continue
                lines.append(f"| {n:.0e} | {p} x {top // p} | {r['us_per_star_step']:.3f} | "
                             f"{r['parts_us_per_star']['orbits']:.3f} | "
                             f"{r['parts_us_per_star']['sort']:.3f} | "
                             f"{r['bytes_per_star']:.0f} |")
    comm = data.get("comm", {})
    if comm:
        lines += ["", "This machine's MPI (bench/comm_bench.py, the slowest rank, median): a small "
                  "Allreduce; the Allgatherv of 16 bytes per star of all N (r and m) and the "
                  f"sort's Alltoallv of {88} bytes per own star, as bandwidth per rank; the "
                  "model's network: 1.5 us per message and doubling, 12 GB/s per rank.", "",
                  "| P | Allreduce [us] | Allgatherv N = 1e5 / 1e6 [GB/s] | Alltoallv N = 1e5 / "
                  "1e6 [GB/s] |", "|---|---|---|---|"]
        for p, c in sorted(comm.items(), key=lambda kv: int(kv[0])):
            ag = " / ".join(f"{c[str(n)]['allgatherv_GBps_per_rank']:.1f}" for n in ns
                            if str(n) in c)
            a2 = " / ".join(f"{c[str(n)]['alltoallv_GBps_per_rank']:.1f}" for n in ns
                            if str(n) in c)
            lines.append(f"| {p} | {c['allreduce_s'] * 1e6:.1f} | {ag} | {a2} |")
    timed = [r for r in rows if r["kind"] in ("ranks", "ranks-repeat")
             and "comm_ms_per_step_by_method" in r and r["P"] == max(r2["P"] for r2 in rows)]
    if timed:
        lines += ["", "Time inside the collectives per step at the most ranks (mean over ranks; "
                  "waiting for the slower ranks included), against the step:", ""]
        for r in timed:
            cm = r["comm_ms_per_step_by_method"]
            lines.append(f"* N = {r['N']:.0e}, {r['P']} ranks, step {r['ms_per_step']:.1f} ms: "
                         + ", ".join(f"{k} {v[0]:.1f}" for k, v in
                                     sorted(cm.items(), key=lambda kv: -kv[1][0])
                                     if v[0] >= 0.1)
                         + f" ms (together {sum(v[0] for v in cm.values()):.1f} ms)")
    for e in data.get("errors", []):
        lines.append(f"* not measured: {e.splitlines()[0]}")
    section = "\n".join(lines).rstrip() + "\n\n" + END
    if write_doc:
        text = DOC.read_text()
        if BEGIN not in text:
            raise SystemExit(f"{DOC}: no {BEGIN} marker")
        DOC.write_text(pm._replace(text, BEGIN, END, section))
    return section


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("measure", "report"))
    ap.add_argument("json", type=Path)
    ap.add_argument("--p", default="1,2,4,8,16", help="process/thread counts")
    ap.add_argument("--n", default="100000,1000000", help="star counts (1e5 and/or 1e6)")
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec")
                    or str(Path(sys.executable).parent / "mpiexec"))
    ap.add_argument("--timeout", type=float, default=240.0, help="per configuration [s]")
    ap.add_argument("--no-doc", action="store_true", help="report: print only")
    a = ap.parse_args()
    if a.what == "measure":
        ns = [int(float(x)) for x in a.n.split(",")]
        bad = [n for n in ns if n not in STEPS]
        if bad:
            raise SystemExit(f"--n: {bad} not among {sorted(STEPS)}")
        measure(a.json, [int(x) for x in a.p.split(",")], ns, a.mpiexec, a.timeout)
    else:
        print(report(a.json, write_doc=not a.no_doc))


if __name__ == "__main__":
    main()
