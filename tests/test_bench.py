"""The benchmark's step driver runs (make bench is not part of the test suite, so this keeps it
from breaking unseen): CPU and the simulated GPU back end."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


@pytest.mark.parametrize("backend", ["cpu", "gpu-sim"])
def test_bench_step_reports_parts(backend):
    from bench_step import bench_step

    from parallel.comm import SerialComm

    out = bench_step(600, 2, 1, comm=SerialComm(), overrides=[f"run.orbit_backend={backend}"])
    assert out["orbit_backend"] == backend and out["us_per_star_step"] > 0
    parts = out["parts_us_per_star"]
    assert parts["orbits"] > 0 and sum(parts.values()) <= out["us_per_star_step"] * 1.01
    assert ("device" in out) == (backend != "cpu")
    if backend != "cpu":  # per step: six float64 per star come back, with statuses, counters
        assert 48 * 600 < out["gpu_bytes_per_step"]["to_host"] < 64 * 600


def test_bench_step_from_checkpoint(tmp_path):
    """The deep-collapse configuration continues a stopped run's checkpoint and reports the
    counted traffic (none on one rank) and memory.  Run as ``make bench`` runs it, in a
    process of its own: the memory figure is the process's peak resident memory over its
    baseline, which an earlier test's peak in a shared process would turn negative."""
    import json
    import os
    import subprocess

    out_dir = tmp_path / "run"
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "cmc.cli", "run",
                    str(root / "examples/plummer_small.ini"), "-o", str(out_dir),
                    "--set", "initial.n=800", "--set", "run.max_steps=4"],
                   check=True, capture_output=True, cwd=root)
    done = subprocess.run([sys.executable, "bench/bench_step.py", "collapse",
                           str(out_dir / "checkpoint.h5"), "3", "1"], check=True,
                          capture_output=True, text=True, cwd=root,
                          env=dict(os.environ, NUMBA_NUM_THREADS="1"))
    out = json.loads(next(line[6:] for line in done.stdout.splitlines()
                          if line.startswith("BENCH ")))
    assert out["N"] > 700 and out["checkpoint"].endswith("checkpoint.h5")
    assert out["steps"] == 1 and out["us_per_star_step"] > 0  # the fastest of 3 runs of 1
    assert out["bytes_sent_per_step_per_rank"] == 0  # serial: nothing travels
    assert out["bytes_per_star"] >= 0 and "wait" in out["parts_us_per_star"]


def test_performance_model_reproduces_two_ranks(monkeypatch):
    """Built from the 2-rank figures, the model gives back their speedup when the network
    costs nothing, and replicated work caps the speedup at T(1) / (replicated + fixed)."""
    import perf_model
    from perf_model import PS

    parts = {"potential": 0.02, "timestep": 0.002, "relaxation": 0.06, "encounters": 0.0,
             "orbits": 0.5, "sort": 0.14, "energy": 0.04, "diagnostics": 0.01, "wait": 0.0}
    two = {k: v / 2 for k, v in parts.items()}
    two["sort"] = 0.12  # the MPI sort does more work per star than the serial one
    two["wait"] = 0.02

    def row(ranks, p, total):
        return {"N": 100_000, "ranks": ranks, "threads": 1, "config": "Plummer",
                "parts_us_per_star": p, "us_per_star_step": total,
                "sent_by_method_rank0": {"Allreduce": [3, 300], "Allgatherv": [5, 8e5],
                                         "Alltoallv": [2, 9e5]}}

    bench = {"steps": [row(1, parts, sum(parts.values())),
                       row(2, two, sum(two.values()))]}
    lookup = f"energy, P >= {perf_model.OLD_POTENTIAL_LOOKUP_MIN_RANKS}"
    rep = {100_000: {"sort": {"copy r, m (allgather)": 0.001, "compute_potential": 0.004},
                     "energy": {"potential_at_sorted_radii": 0.012},
                     lookup: {"potential_at_points (per own star)": 0.2}}}
    monkeypatch.setattr(perf_model, "ALPHA_S", 0.0)
    monkeypatch.setattr(perf_model, "BETA_BPS", float("inf"))
    m = perf_model.model(bench, rep, 0.0)[100_000]
    assert m["today"][1] == pytest.approx(m["measured_speedup_P2"], rel=1e-12)
    # the energy step's merge is made on each rank's segment: only the potential and the
    # gathered copy stay replicated, and they cap the speedup
    cap = sum(parts.values()) / (0.001 + 0.004)
    assert m["today"][-1] < cap and m["segments"][-1] > m["today"][-1]
    assert m["today"][PS.index(16)] > m["today"][PS.index(8)]
    # nodes of 16 ranks: the node's ranks share the potential, r and m land in the window
    t1 = sum(parts.values()) * 1e-6 * 100_000
    for p in (2, 16, 1024):
        k = PS.index(p)
        saved = (0.004 * (1 - 1 / min(p, perf_model.NODE_RANKS)) + 0.001 * (1 - 1 / p)) * 0.1
        assert t1 / m["today"][k] - t1 / m["nodes"][k] == pytest.approx(saved, rel=1e-9)
    # the gathers' reading, per rank and step, adds what it grows by beyond the 2-rank
    # bench's (which the divided work holds): nothing at P = 2
    t_read = {p: 1e-4 * p for p in PS[1:]}
    read = perf_model.model(bench, rep, 0.0, t_read=t_read)[100_000]
    for k, p in enumerate(PS[1:], start=1):
        assert t1 / read["today"][k] - t1 / m["today"][k] == pytest.approx(
            1e-4 * p - 2 * 2e-4 / p, rel=1e-9, abs=1e-15)
    # the same figures with that merge repeated by every rank: a lower speedup from 4 ranks
    # on, until the lookups of own stars replace it
    monkeypatch.setattr(perf_model, "SEGMENTED", frozenset())
    repeated = perf_model.model(bench, rep, 0.0)[100_000]
    assert repeated["today"][1] == pytest.approx(m["today"][1], rel=1e-12)
    k = PS.index(perf_model.OLD_POTENTIAL_LOOKUP_MIN_RANKS)
    assert all(a < b for a, b in zip(repeated["today"][2:k], m["today"][2:k]))


def test_gather_cost_reads_the_same_offers_both_ways():
    """bench/gather_cost.py times two ways of reading P ranks' exact-cut offers: they give the
    same moves and the same columns of one value (it raises otherwise), at P = 2 and 64."""
    import gather_cost

    for p in (2, 64):
        got = gather_cost.measure(p)
        assert got["P"] == p and got["words_us"] > 0 and got["pickled_us"] > 0


def test_targets_say_why_and_what_it_would_take(monkeypatch):
    """A missed efficiency target names the parts over perfect scaling, largest first, and
    the cut that would meet it; a missed modelled speedup splits T(N, P) into its terms (they
    add up to the modelled step) and names the terms whose removal would meet the paper's."""
    import perf_model
    import run_bench

    one = {"us_per_star_step": 0.5, "parts_us_per_star": {"orbits": 0.4, "sort": 0.1}}
    two = {"us_per_star_step": 0.33, "parts_us_per_star": {"orbits": 0.21, "sort": 0.12}}
    got = run_bench.scaling_loss(one, two, 2)
    assert got["loss_us_per_star"] == pytest.approx({"orbits": 0.01, "sort": 0.07})
    assert got["why"].index("sort +0.070") < got["why"].index("orbits +0.010")
    need = 0.5 / (2 * run_bench.TARGET_EFFICIENCY)
    assert f"{0.33 - need:.3f} us per star-step less" in got["would_take"]
    # two one-core runs at once, the slower 10 % slower than one alone: the machine's loss;
    # the code's is each part above half of its
    both = {"us_per_star_step": 0.55, "parts_us_per_star": {"orbits": 0.44, "sort": 0.11}}
    split = run_bench.scaling_loss(one, two, 2, both)
    assert split["machine_efficiency"] == pytest.approx(0.5 / 0.55)
    assert split["code_loss_us_per_star"] == pytest.approx({"orbits": -0.01, "sort": 0.065})
    assert "(91% of one alone" in split["why"] and "sort +0.065" in split["why"]
    assert "orbits -" not in split["why"] and split["would_take"] == got["would_take"]
    # round by round against the same round's one-core run
    one_r = dict(one, rounds_us_per_star_step=[0.5, 0.6])
    two_r = dict(two, rounds_us_per_star_step=[0.3, 0.3])
    assert run_bench.paired_rounds(one_r, two_r, 2) == pytest.approx([0.5 / 0.6, 1.0])

    parts = {"potential": 0.02, "timestep": 0.002, "relaxation": 0.06, "encounters": 0.0,
             "orbits": 0.5, "sort": 0.14, "energy": 0.04, "diagnostics": 0.01, "wait": 0.0}
    half = {k: v / 2 for k, v in parts.items()}

    def row(ranks, p):
        return {"N": 100_000, "ranks": ranks, "threads": 1, "config": "Plummer",
                "parts_us_per_star": p, "us_per_star_step": sum(p.values()),
                "sent_by_method_rank0": {"Allreduce": [3, 300], "Allgatherv": [5, 8e5],
                                         "Alltoallv": [2, 9e5]}}

    lookup = f"energy, P >= {perf_model.OLD_POTENTIAL_LOOKUP_MIN_RANKS}"
    rep = {100_000: {"sort": {"copy r, m (allgather)": 0.001, "compute_potential": 0.004},
                     "energy": {"potential_at_sorted_radii": 0.012},
                     lookup: {"potential_at_points (per own star)": 0.2}}}
    models = perf_model.model({"steps": [row(1, parts), row(2, half)]}, rep, 2e-4)
    m = models[100_000]
    for k, p in enumerate(perf_model.PS[1:], start=1):
        assert m["t1_s"] / sum(m["terms_s"][p].values()) == pytest.approx(m["today"][k])
    lines = perf_model.speedup_targets(models)
    assert len(lines) == 3  # N = 1e5, 1e6 and 1e7 (the last two from the 1e5 figures)
    assert lines[0].startswith("* **not met**: N = 1e+05") and "latency" in lines[0]
    monkeypatch.setitem(perf_model.PAPER_SPEEDUP, 100_000, 1.0)
    assert perf_model.speedup_targets(models)[0].startswith("* met: N = 1e+05")


def test_two_copies_at_once_report_the_slower(tmp_path):
    """The bench's '2 at once' row runs the copies together and keeps the slower one's figures
    (a step that waits for both cores runs at the slower one's pace), with both totals; a copy
    that prints no BENCH line is an error."""
    import sys

    import run_bench

    script = tmp_path / "copy.py"
    # each copy's figure from its own process id: different copies, different figures
    script.write_text("import json, os\n"
                      "print('BENCH ' + json.dumps({'us_per_star_step': os.getpid() % 997 / 1e3,"
                      " 'pid': os.getpid()}))\n")
    got = run_bench._run_together([sys.executable, str(script)])
    assert len(got["copies_us_per_star_step"]) == 2
    assert got["us_per_star_step"] == max(got["copies_us_per_star_step"])
    assert got["pid"] % 997 / 1e3 == got["us_per_star_step"]
    script.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(RuntimeError, match="at once"):
        run_bench._run_together([sys.executable, str(script)])


def test_shared_window_traffic_counts_as_network():
    """The 2-rank bench runs on one node, where r, m and the energy correction's column go
    through the node's shared window: the model (one core per rank and node) adds their bytes
    and calls back, so the gathered bytes per star cover them and the bandwidth term stays
    positive where the energy's column is no longer gathered (P >= 256)."""
    import perf_model

    n = 100_000
    row = {"sent_by_method_rank0": {"Allreduce": [3, 56], "Allgatherv": [3, 2.7e4],
                                    "Alltoallv": [1, 4.4e5]}}
    private = perf_model.traffic_of(row, n)
    shared = perf_model.traffic_of({**row, "shared_memory": True}, n)
    assert shared["ag_b"] == pytest.approx(private["ag_b"] + 24.0)
    assert shared["allgatherv_calls"] == private["allgatherv_calls"] + 3
    for p in (2, 16, perf_model.OLD_POTENTIAL_LOOKUP_MIN_RANKS, 1024):
        latency, bandwidth = perf_model.comm_parts(n, p, shared)
        assert latency > 0.0 and bandwidth > (p - 1) / p * n * 16.0 / perf_model.BETA_BPS


def test_neighbour_messages_cost_one_latency_whatever_p():
    """The orbit blocks shared between neighbouring ranks (two Isends per step, their bytes per
    own star) add one latency per message at any P, not one per doubling, and bytes that
    shrink with the stars of a rank."""
    import perf_model

    n = 100_000
    row = {"sent_by_method_rank0": {"Allreduce": [3, 56], "Allgatherv": [3, 2.7e4],
                                    "Alltoallv": [1, 4.4e5]}}
    near = {"sent_by_method_rank0": {**row["sent_by_method_rank0"], "Isend": [2, 5.0e4]}}
    base, with_near = perf_model.traffic_of(row, n), perf_model.traffic_of(near, n)
    assert with_near["neighbour_calls"] == 2 and with_near["neighbour_b"] == pytest.approx(1.0)
    for p in (2, 1024):
        lat0, bw0 = perf_model.comm_parts(n, p, base)
        lat1, bw1 = perf_model.comm_parts(n, p, with_near)
        assert lat1 - lat0 == pytest.approx(2 * perf_model.ALPHA_S)
        assert bw1 - bw0 == pytest.approx(n / p * 1.0 / perf_model.BETA_BPS)


def test_collapse_target_splits_the_run(capsys):
    """A missed time to collapse says how long the run's steps took and where that time went
    (the run's own timing summary), beside this sitting's step deep in collapse."""
    import run_bench

    one = {"N": 100_000, "ranks": 1, "threads": 1, "config": "Plummer",
           "us_per_star_step": 0.5, "parts_us_per_star": {"orbits": 0.4}}
    deep = {"N": 97_000, "ranks": 1, "threads": 2, "config": "collapse", "ms_per_step": 27.0,
            "us_per_star_step": 0.28, "parts_us_per_star": {"orbits": 0.2}}
    timing = {"steps": 100, "wall_s": 3.0, "step_s": 2.9, "output_s": 0.05,
              "step_other_s": 0.01, "loop_other_s": 0.05, "startup_s": 2.5,
              "parts_s": {"orbits": 2.0, "sort": 0.5, "energy": 0.39, "wait": 0.0}}
    collapse = {"wall_s": 300.0, "steps": 100, "steps_last_0.1_trh": 60, "timing": timing}
    got = run_bench.check_targets([one, deep], collapse, 2)[-1]
    assert not got["met"]
    assert "at 3000.0 ms each (in the run, ms per step: orbits 20.00, sort 5.00, energy 3.90, " \
        "rest of the step 0.10, outputs 0.50, rest of the loop 0.50; start-up 2.5 s)" in got["why"]
    assert "27.0 ms (1 rank(s) x 2 thread(s))" in got["why"]
    assert "wait" not in got["why"]
    collapse["timing"] = None  # a run made before runs kept their timing
    assert "in the run" not in run_bench.check_targets([one, deep], collapse, 2)[-1]["why"]
    capsys.readouterr()


def test_segregation_collapse_reads_a_running_median():
    """The validation's collapse time reads the innermost Lagrange radius through a running
    median: a few single-step dips (one star's position at small N) do not count, a sustained
    fall does, at its start within the median's half width."""
    import numpy as np
    from validate_tidal import crossing, running_median

    assert np.array_equal(running_median(np.array([1.0, 5, 2, 8, 3]), 3), [1, 2, 5, 3, 3])
    assert np.array_equal(running_median(np.arange(4.0), 201), np.arange(4.0))
    t = np.linspace(0.0, 1.0, 2001)
    y = np.ones_like(t)
    y[[100, 400, 700]] = 0.01  # isolated dips
    assert np.isnan(crossing(t, running_median(y), 0.1))
    y[1200:] = 0.05  # a collapse from t = 0.6 on
    assert abs(crossing(t, running_median(y), 0.1) - 0.6) <= 101 * (t[1] - t[0])


def test_scaling_fit_recovers_divided_and_fixed_cost():
    """a / P + b data give back a and b; a cost that does not divide at all gives a = 0; the
    calibrated projection saturates at T(1) / b plus the network's extra latency."""
    import perf_model

    ps = [1, 2, 4, 8, 16]
    assert perf_model.fit_scaling(ps, [0.4 / p + 0.1 for p in ps]) == pytest.approx(
        (0.4, 0.1), rel=1e-10)
    assert perf_model.fit_scaling(ps, [0.3] * 5) == pytest.approx((0.0, 0.3), abs=1e-12)
    a, b = perf_model.fit_scaling(ps, [0.5 / p for p in ps])
    assert b == pytest.approx(0.0, abs=1e-12) and a == pytest.approx(0.5)

    def row(n, p, kind, us):
        return {"N": n, "P": p, "kind": kind, "us_per_star_step": us,
                "sent_by_method_rank0": {"Allreduce": [3, 300], "Allgatherv": [5, 8e5],
                                         "Alltoallv": [1, 9e5]}}

    rows = [row(100_000, 1, "threads", 0.5)]
    rows += [row(100_000, p, "ranks", 0.4 / p + 0.1) for p in ps[1:]]
    rows += [row(100_000, 16, "ranks-repeat", 9.9)]  # other sittings are not fitted
    cal = perf_model.calibrated({"rows": rows})
    c = cal[100_000]
    assert c["a_us"] == pytest.approx(0.4, rel=1e-9) and c["b_us"] == pytest.approx(0.1)
    s = c["speedup"]
    assert s[perf_model.PS.index(16)] == pytest.approx(0.5 / (0.4 / 16 + 0.1))
    assert max(s) < 0.5 / 0.1 and s[-1] < s[perf_model.PS.index(64)]  # latency takes over
    assert cal[10_000_000]["from_N"] == 100_000


@pytest.mark.parametrize("kept", ["performance_scaling.json", "performance_scaling_first.json"])
def test_scaling_report_checks_the_model(tmp_path, kept):
    """bench/scaling.py's report, on the measurements kept in docs/ (the latest, one sitting;
    the first, with repeats): measured and modelled speedups for every P, the calibrated fit
    and the layouts; it leaves the doc alone when asked to."""
    import json

    import scaling

    src = Path(__file__).resolve().parents[1] / "docs" / kept
    data = json.loads(src.read_text())
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    before = scaling.DOC.read_text()
    text = scaling.report(path, write_doc=False)
    assert scaling.DOC.read_text() == before
    assert text.startswith(scaling.BEGIN) and text.rstrip().endswith(scaling.END)
    for n in (100_000, 1_000_000):
        one = next(r for r in data["rows"] if r["N"] == n and r["P"] == 1)
        sixteen = next(r for r in data["rows"] if r["N"] == n and r["P"] == 16
                       and r["kind"] == "ranks")
        speedup = one["us_per_star_step"] / sixteen["us_per_star_step"]
        assert f"| 16 | - | {sixteen['us_per_star_step']:.3f} ({speedup:.1f}x)" not in text
        assert f"{sixteen['us_per_star_step']:.3f} ({speedup:.1f}x)" in text
    assert "calibrated" in text and "4 x 4" in text and "Allreduce" in text
    repeats = any(r["kind"].startswith("ranks-") for r in data["rows"])
    assert repeats == (kept == "performance_scaling_first.json")
    assert ("| ranks, other sittings |" in text) == repeats
    # a measurement cut short before the model's inputs cannot be reported
    del data["replicated_us"]
    path.write_text(json.dumps(data))
    with pytest.raises(SystemExit):
        scaling.report(path, write_doc=False)


def test_orbit_kernels_agree_through_the_bench():
    """``bench_step.py orbits-agree``, the check a GPU machine runs first: the simulated device
    kernel against the CPU kernel, star by star."""
    from bench_step import agree_orbit_kernel

    out = agree_orbit_kernel(300, "gpu-sim")
    assert out["ok"] and out["same_trials"] and max(out["max_ulps"].values()) == 0


def test_scaling_measure_then_report(tmp_path):
    """``make scaling`` end to end at a small N on 1 and 2 cores: every configuration
    measured (threads, ranks, the machine's MPI, the model's inputs) and reported."""
    import json
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "sub" / "s.json"
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    subprocess.run([sys.executable, "bench/scaling.py", "measure", str(out), "--p", "1,2",
                    "--n", "20000", "--mpiexec", str(Path(sys.executable).parent / "mpiexec"),
                    "--timeout", "300"], check=True, cwd=root, env=env, capture_output=True)
    data = json.loads(out.read_text())
    assert not data["errors"], data["errors"]
    kinds = sorted((r["kind"], r["P"]) for r in data["rows"])
    assert kinds == [("ranks", 2), ("threads", 1), ("threads", 2)]
    assert data["comm"]["2"]["allreduce_s"] > 0 and data["t_fixed_s"] >= 0
    assert "comm_ms_per_step_by_method" in next(r for r in data["rows"] if r["kind"] == "ranks")
    text = subprocess.run([sys.executable, "bench/scaling.py", "report", str(out), "--no-doc"],
                          check=True, cwd=root, capture_output=True, text=True).stdout
    assert "N = 2e+04" in text and "| 2 | " in text and "Time inside the collectives" in text
    # no repeats measured: no column for them (it would only hold "-")
    assert "other sittings" not in text
    header = next(line for line in text.splitlines() if line.startswith("| P | threads"))
    assert header.count("|") - 1 == 6


def test_compute_clock_leaves_out_the_time_inside_mpi_calls():
    """bench/compute_scaling.py: CPU time spent inside a wrapped communicator's calls (busy
    waiting, as MPI does) is not compute; CPU time outside them is; other attributes pass."""
    import time

    from bench.compute_scaling import CommClock

    def spin(seconds):
        t0 = time.thread_time()
        while time.thread_time() - t0 < seconds:
            pass

    class Busy:
        def Barrier(self):
            spin(0.05)

        def Get_rank(self):
            return 3

    clock = CommClock()
    comm = clock.wrap(Busy())
    c0 = clock()
    comm.Barrier()
    spin(0.02)
    comm.Barrier()
    took = clock() - c0
    assert 0.02 <= took < 0.04  # the 0.02 s outside, none of the 0.1 s inside
    assert clock.in_comm >= 0.1 and comm.Get_rank() == 3


def test_compute_scaling_report(tmp_path):
    """The report's table takes the slowest rank (its sum of parts) and sets each figure
    beside the one-rank figure over P (the a / P + b fit is perf_model.fit_scaling's)."""
    import json

    from bench.compute_scaling import report
    from bench.scaling_common import slowest
    parts = ("potential", "timestep", "relaxation", "encounters", "orbits", "sort", "energy",
             "diagnostics", "wait")

    def rank(orbits, sort):
        return {"parts_ms": dict(dict.fromkeys(parts, 0.0), orbits=orbits, sort=sort)}

    rows = [{"N": 1000, "P": 1, "ranks": [rank(8.0, 2.0)]},
            {"N": 1000, "P": 2, "ranks": [rank(4.0, 1.5), rank(5.0, 1.0)]}]
    assert slowest(rows[1]) == 6.0 and slowest(rows[1], "orbits") == 5.0
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"machine": {"cpus": 2}, "made": "now", "steps": 3,
                                "rows": rows, "errors": []}))
    text = report(path, write_doc=False)
    assert "| 2 | 5.00 (4.00) | 1.50 (1.00) | 6.00 (5.00) | 1.7x |" in text
    assert "| potential" not in text  # parts that cost nothing are left out


@pytest.mark.timeout(600)
def test_compute_scaling_measures_ranks(tmp_path):
    """bench/compute_scaling.py end to end at a small N on 1 and 2 ranks: every rank's parts,
    and on two ranks some time inside MPI calls that the compute leaves out."""
    import json
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "sub" / "c.json"
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    subprocess.run([sys.executable, "bench/compute_scaling.py", "measure", str(out), "--p",
                    "1,2", "--n", "4000", "--steps", "3", "--mpiexec",
                    str(Path(sys.executable).parent / "mpiexec"), "--timeout", "300"],
                   check=True, cwd=root, env=env, capture_output=True)
    data = json.loads(out.read_text())
    assert not data["errors"], data["errors"]
    assert [(r["P"], len(r["ranks"])) for r in data["rows"]] == [(1, 1), (2, 2)]
    two = data["rows"][1]["ranks"]
    assert all(r["parts_ms"]["orbits"] > 0 and r["comm_ms"] > 0 for r in two)
    # the parts are inside the step: their sum is at most the compute of the whole step
    assert all(sum(r["parts_ms"].values()) <= r["compute_ms"] * 1.001 for r in two)


def test_projection_from_measured_compute():
    """perf_model.compute_measured: the slowest rank's compute at P = 1-16 fitted to a / P + b,
    projected with the network model (none here): speedup (a + b) / (a / P + b); N beyond the
    measured ones takes the largest measured."""
    from bench.perf_model import PS, compute_measured

    def row(n, p, ms):
        return {"N": n, "P": p, "ranks": [{"parts_ms": {"orbits": ms}}]}

    a, b = 0.5, 0.02  # us per star
    cs = {"rows": [row(1000, p, (a / p + b) * 1e-3 * 1000) for p in (1, 2, 4, 8, 16)]}
    quiet = {"small_calls": 0, "allgatherv_calls": 0, "ag_b": 0.0, "neighbour_calls": 0,
             "neighbour_b": 0.0, "alltoallv_calls": 0, "record_bytes": 88, "f2": 0.0}
    got = compute_measured(cs, {1000: {"traffic": quiet}, 10_000: {"traffic": quiet}})
    for n in (1000, 10_000):
        assert got[n]["from_N"] == 1000
        assert got[n]["a_us"] == pytest.approx(a) and got[n]["b_us"] == pytest.approx(b)
        for p, s in zip(PS, got[n]["speedup"]):
            if p < 256:  # (from 256 ranks on the model drops the energy correction's gather)
                assert s == pytest.approx((a + b) / (a / p + b))


def test_validation_keeps_the_stamp_of_the_code_that_made_a_run(tmp_path):
    """bench/validate.py's record of a run: --resume of a finished run analyses it again and
    keeps the code that made it (before, every re-analysis stamped the current commit) and its
    wall time; a continued run names both and has no wall time (not made in one go); a run
    from before the records takes its last result's."""
    import json

    from validate import RUN_FILE, run_record

    out, docs = tmp_path / "run", tmp_path / "validation_N10.json"
    assert run_record(out, docs, "2026-11-27, aaa", "finished") == {"made": "-"}
    (out / RUN_FILE).unlink()
    docs.write_text(json.dumps({"made": "2026-11-26, old", "wall_s": 5.0, "threads": 2}))
    old = {"made": "2026-11-26, old", "wall_s": 5.0, "threads": 2}
    assert run_record(out, docs, "2026-11-27, aaa", "finished") == old
    assert run_record(out, docs, "2026-11-27, bbb", "finished") == old
    assert (run_record(out, docs, "2026-11-27, ccc", "resumable")
            == {"made": "2026-11-26, old; continued 2026-11-27, ccc"})
    assert run_record(out, docs, "2026-11-28, ddd", "empty") == {"made": "2026-11-28, ddd"}
    assert run_record(out, docs, "2026-11-29, eee", "finished") == {"made": "2026-11-28, ddd"}


def test_validation_stamps_an_interrupted_run_before_it_starts(tmp_path, monkeypatch):
    """A new validation run stopped by the wall clock (cmc exits 75), then continued with
    --resume: its result names the code that started it and the one that finished it, and
    has no wall time (``cmc run --overwrite`` keeps unknown files, so a record written only
    after a run completed named the replaced run's code; an independent review found it).
    The subprocesses are stand-ins; the run directory's handling is cmc's own."""
    import json
    import subprocess
    import types

    import validate

    from cmc import rundir

    out = tmp_path / "runs" / "validate_N100"
    (tmp_path / "docs").mkdir()
    state = {"kind": "empty", "fail": False}

    def fake_run(cmd, check=True, **kw):
        if "run" in cmd and "--overwrite" in cmd:
            out.mkdir(parents=True, exist_ok=True)
            rundir.clear_outputs(out)  # what cmc run --overwrite does
            if state["fail"]:
                state["kind"] = "resumable"
                raise subprocess.CalledProcessError(75, cmd)
            state["kind"] = "finished"
        elif "restart" in cmd:
            state["kind"] = "finished"
        elif "plot" in cmd:
            (out / "evolution.png").write_text("png")
        return types.SimpleNamespace(returncode=0)

    monkeypatch.setattr(validate, "ROOT", tmp_path)
    monkeypatch.setattr(validate.subprocess, "run", fake_run)
    monkeypatch.setattr(rundir, "run_status", lambda d: types.SimpleNamespace(kind=state["kind"]))
    monkeypatch.setattr(validate, "analyse", lambda d: {"N": 100})
    monkeypatch.setattr(validate, "write_report", lambda results: None)

    def go(made, resume, fail=False):
        monkeypatch.setattr(validate, "_made", lambda: made)
        state["fail"] = fail
        validate.main([100], resume=resume)
        return json.loads((tmp_path / "docs" / "validation_N100.json").read_text())

    first = go("A", False)
    assert first["made"] == "A" and "wall_s" in first
    with pytest.raises(subprocess.CalledProcessError):
        go("B", False, fail=True)  # a new run over it, stopped
    resumed = go("C", True)
    assert resumed["made"] == "B; continued C" and "wall_s" not in resumed
    assert go("D", True)["made"] == "B; continued C"  # analysed again only
    go("E", False)
    with pytest.raises(subprocess.CalledProcessError):
        go("F", False, fail=True)
    state["kind"] = "finished"  # finished by hand (cmc restart), then analysed
    by_hand = go("G", True)
    assert by_hand["made"] == "F" and "wall_s" not in by_hand  # not E's wall time


def test_bench_step_times_stellar_evolution(tmp_path, monkeypatch):
    """With SE the step's row has BSE's own time apart from the process's bookkeeping, the
    objects evolved per step, and the wrapped BSE functions are put back afterwards; the SE
    bench's trace summary gives each stretch's share and the whole run's."""
    pytest.importorskip("cosmic")
    from bench_step import bench_step

    from bench.bench_stellar_evolution import KROUPA, SE_ON, summarise_trace
    from parallel.comm import SerialComm
    from physics import stellar_evolution as se

    monkeypatch.chdir(tmp_path)  # evolv2's fort.99
    evolve = se.evolve
    out = bench_step(400, 2, 1, comm=SerialComm(), overrides=[*KROUPA, *SE_ON])
    s = out["stellar_evolution"]
    assert se.evolve is evolve
    assert s["bse_us_per_star"] >= 0.0 and s["n_se_evolved_per_step"] >= 0.0
    assert s["bse_us_per_star"] + s["schedule_us_per_star"] <= (
        out["parts_us_per_star"]["stellar_evolution"] * 1.001)
    rows = [{"t_myr": t, "N": 100, "wall_s": 1.0, "se_s": 0.25 if t > 2 else 0.0,
             "n_se_evolved": 3.0, "n_supernovae": 0.0} for t in (0.05, 0.5, 2.5, 4.0)]
    got = summarise_trace({"rows": rows})
    assert [g["steps"] for g in got] == [1, 1, 1, 1, 4] and got[-1]["whole_run"]
    assert got[2]["se_share"] == 0.25 and got[-1]["se_share"] == 0.125
    assert got[-1]["ratio_vs_without"] == 1.0 / 0.875


def test_zone_validation_verdict_is_the_difference_over_its_standard_error():
    """bench/validate_zones.py: the zones' mean against the shared step's is judged by the
    difference of the means over its standard error (two independent sets of seeds)."""
    import numpy as np

    from bench.validate_zones import summarise

    shared = [{"t_ncore_below_100": x, "steps": 1} for x in (18.0, 18.4, 18.2, 18.6)]
    near = [{"t_ncore_below_100": x, "steps": 1} for x in (18.3, 18.5, 18.1, 18.7)]
    far = [{"t_ncore_below_100": x + 2.0, "steps": 1} for x in (18.3, 18.5, 18.1, 18.7)]
    s = summarise({"shared": shared, "zones": near})
    v = s["verdict"]["t_ncore_below_100"]
    sd = np.std([18.0, 18.4, 18.2, 18.6], ddof=1)
    assert v["difference"] == pytest.approx(0.1)
    assert v["sigma"] == pytest.approx(np.hypot(sd / 2, sd / 2))
    assert v["within_2_sigma"] is True
    assert s["verdict"]["t_ncore_below_100"]["difference"] > 0
    assert summarise({"shared": shared, "zones": far})["verdict"][
        "t_ncore_below_100"]["within_2_sigma"] is False
    assert "steps" not in s["verdict"]  # (costs are reported, not judged)
    rounding = [{"max_abs_dE_rel": x} for x in (1e-14, 2e-14)]
    assert "max_abs_dE_rel" not in summarise({"shared": rounding, "zones": rounding})["verdict"]


def test_bench_nbody_quick_parts(tmp_path):
    """bench/bench_nbody.py (make bench) at a small N: the force kernels' rows (orders 4 and 6,
    all active and a block, 1 and 2 threads), the whole integrator's, the collapse ESTIMATE
    (pairs at the measured steps per star and ns per pair, not a run) and its doc section,
    appended once and then replaced in place; the Makefile's bench target runs it."""
    import bench_nbody as bn

    kernels = bn.measure_kernels((200,), threads=(1, 2), repeats=1)
    assert [(r["order"], r["active"], r["threads"] > 0) for r in kernels][::2] == [
        (4, "all", True), (4, "1/16", True), (6, "all", True), (6, "1/16", True)]
    for r in kernels:
        assert r["pairs"] == r["n_active"] * 199 and r["ns_per_pair_per_core"] > 0
        assert r["n_active"] == (200 if r["active"] == "all" else 12)
    integ = bn.measure_integrator(100, 0.125, threads=(1,))
    assert [r["order"] for r in integ] == [4, 6]
    assert all(r["particle_steps"] >= 100 and r["ns_per_pair_wall"] > 0 for r in integ)
    est = bn.collapse_estimate(integ, n=300, t_trh=16.0)
    assert est["t_end_nb"] == pytest.approx(16.0 * est["t_rh0_nb"])
    for order, e in est["by_order"].items():
        r = next(q for q in integ if str(q["order"]) == order)
        assert e["seconds"] == pytest.approx(300 * 299 * r["steps_per_star_per_unit"]
                                             * est["t_end_nb"] * r["ns_per_pair_wall"] * 1e-9)
        assert e["quiet_seconds"] == pytest.approx(
            e["seconds"] * r["ns_per_pair_cpu"] / r["ns_per_pair_wall"] / 2)
    assert "--order 6" in est["command"] and "run.t_max=16" in est["command"]
    # the MEASURED time to collapse of an N-body run: its integration wall time at its first
    # hard binary (here output 2 of a made-up run: E_b below -10 kT = -10 / (6 N))
    import h5py
    import numpy as np

    run = tmp_path / "nb"
    run.mkdir()
    assert bn.collapse_measured(run) is None
    with h5py.File(run / "diagnostics.h5", "w") as fh:
        fh.attrs["mode"], fh.attrs["order"] = "nbody", 6
        cols = {"step": [0, 1, 2, 3], "time_trh": [0.0, 7.0, 14.0, 15.0], "N": [2000] * 4,
                "N_core": [200.0] * 4,
                "r_c": [0.3] * 4, "r_h": [0.8] * 4, "E_binding": [0.0, -1e-4, -1e-3, -1e-3],
                "wall_s": [0.0, 100.0, 900.0, 1000.0], "r_c_3d": [0.2] * 4,
                "dE_rel": [0.0] * 4}
        for name, col in cols.items():
            fh.create_dataset(name, data=np.asarray(col))
    got = bn.collapse_measured(run)
    assert got["t_cc_trh"] == 14.0 and got["wall_seconds"] == 900.0 and got["N"] == 2000
    rec = {"made": "now", "commit": "abc", "machine": "m (2 cores)", "note": "shared",
           "kernels": kernels, "integrator": integ, "gpu": "no kernel yet",
           "collapse_estimate": est, "collapse_measured": got}
    text = bn.tables(rec)
    assert "GPU: no kernel yet" in text and "ESTIMATE" in text
    assert "MEASURED" in text and "14.00 t_rh0 after 15.0 min" in text
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\n## Other\n\nkept\n")
    bn.write_doc(rec, doc)
    bn.write_doc(dict(rec, commit="def"), doc)
    out = doc.read_text()
    assert out.startswith("# Performance\n\n## Other\n\nkept\n\n" + bn.BEGIN)
    assert out.count("## Direct N-body") == 1 and "at def" in out and "at abc" not in out
    make = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    assert "\t$(PY) bench/bench_nbody.py $(BENCH_ARGS)\n" in make
