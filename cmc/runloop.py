"""The run loop: steps until a stop condition, with signals, the wall clock, progress lines,
output cadence and the timing of where the time went.  The step itself is :mod:`cmc.step`;
the stop conditions are :mod:`cmc.stops`; the files are :mod:`cmc.output`."""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import TYPE_CHECKING

import numba
import numpy as np

from cmc.compiling import WATCH as COMPILE_WATCH
from cmc.state import PARTS, StopRun
from cmc.stops import stop_reason, warn_early_stop
from parallel.comm import allreduce_max

if TYPE_CHECKING:
    from cmc.simulation import Simulation

log = logging.getLogger("cmc.simulation")

#: Test hook: ``CMC_INJECT_FAULT=RANK:STEP[:kind]`` makes that rank fail after that step
#: (kind ``raise``: an exception, ``exit``: os._exit(9), ``kill``: SIGKILL).  Never set in
#: production; it lets the tests show that a failure on one rank ends every rank.
FAULT_ENV = "CMC_INJECT_FAULT"


def _inject_fault(spec: str, rank: int, step: int) -> None:
    parts = spec.split(":")
    if int(parts[0]) != rank or int(parts[1]) != step:
        return
    kind = parts[2] if len(parts) > 2 else "raise"
    if kind == "exit":
        os._exit(9)
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError(f"injected fault on rank {rank} after step {step}")


def install_signal_handlers(sim: Simulation) -> dict:
    """SIGTERM and SIGINT set ``sim.signal_received`` (the loop then stops with a checkpoint);
    returns the handlers they replace, for the loop to put back."""

    def handler(signum: int, frame: object) -> None:
        sim.signal_received = signum

    old = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            old[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread
            pass
    return old


def run(sim: Simulation) -> str:
    """Step until a stop condition; write outputs; return the stop reason.

    Outputs of a run with ``outdir``: diagnostics.h5 (appended), checkpoints (written
    at step 0, every ``output.checkpoint_every`` steps or ``checkpoint_minutes``, and at
    the end), snapshots (start, every ``snapshot_every`` steps, and the final state).
    """
    out = sim.cfg.output
    old = install_signal_handlers(sim)
    if not sim.state.start_time:
        sim.state.start_time = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if sim.state.step == 0:
        warn_early_stop(sim)
    if sim.outdir is not None:
        sim.open_diagnostics()
        if sim.state.step == 0:
            sim.write_snapshot()
            sim.write_checkpoint()
    reason = ""
    torn = False
    # this invocation's time: in the step's parts, in writing outputs, and the rest
    loop_start = time.perf_counter()
    step0 = sim.state.step
    parts0 = dict(sim.timers)
    star_steps = 0.0
    in_step = in_output = 0.0
    # steps in which any rank compiled kernels (cmc.compiling: a kernel's first use, or
    # all of them in a new checkout) are left out of the timing whole, parts, outputs and
    # loop, so that it times steady steps (a compile took 297 ms per step where steps
    # took 40)
    compiled = {"steps": 0, "star_steps": 0.0, "wall": 0.0, "step": 0.0, "output": 0.0,
                "compile": 0.0, "parts": dict.fromkeys(PARTS, 0.0)}
    try:
        while not reason:
            t_step = time.perf_counter()
            compile0, parts_before = COMPILE_WATCH.seconds, dict(sim.timers)
            step_before, output_before, n_step = in_step, in_output, sim.n_total
            try:
                star_steps += n_step
                d = sim.step()
                reason = stop_reason(sim, d)
            except StopRun as exc:
                reason = f"error: {exc}"
                torn = exc.torn
                d = sim.last
            in_step += time.perf_counter() - t_step
            if sim.fault is not None:
                _inject_fault(sim.fault, sim.rank, sim.state.step)
            wall = time.monotonic() - sim.wall_start
            flags = allreduce_max(sim.comm, np.array([
                float(sim.signal_received),
                # per invocation: a batch job's limit (restarts get their own allowance)
                float(sim.cfg.run.max_wall_hours > 0
                      and wall > 3600 * sim.cfg.run.max_wall_hours),
                float(time.monotonic() - sim.output.last_checkpoint
                      > 60 * out.checkpoint_minutes > 0),
                float(COMPILE_WATCH.seconds > compile0)]))
            if not reason and flags[0]:
                reason = "signal"
            if not reason and flags[1]:
                reason = "wall_clock"
            step = sim.state.step
            if step % out.progress_every == 0 or reason:
                tidal = ""
                if sim.state.r_t0 > 0.0:
                    tidal = (f" M={d.get('M', 0):.4f} stripped={d.get('M_stripped', 0):.4f}"
                             f" r_t={d.get('r_tidal', 0):.4g}")
                if "M_se" in d:  # stellar evolution: mass it took, objects evolved
                    tidal += f" M_se={d['M_se']:.4g} evolved={d.get('n_se_evolved', 0):.0f}"
                if "n_stepped" in d:  # time-step zones: the stars stepped, the level due
                    tidal += (f" stepped={d['n_stepped']:.0f}"
                              f" (zones 0-{d.get('zone_level', 0):.0f})")
                log.info("step %d t=%.4f t_rh0 (%.4g Myr) dt=%.3e N=%d r_c=%.4g r_h=%.4g "
                         "N_core=%.1f dE/E0=%.2e%s", step, d.get("time_trh", 0),
                         d.get("time_myr", 0), d.get("dt", 0), d.get("N", 0),
                         d.get("r_c", 0), d.get("r_h", 0), d.get("N_core", 0),
                         d.get("dE_rel", 0), tidal)
            t_out = time.perf_counter()
            if out.snapshot_every and step % out.snapshot_every == 0 and not reason:
                sim.write_snapshot()
            if step % out.diagnostics_every == 0 and not reason:
                sim.write_diagnostics()
            if (step % out.checkpoint_every == 0 or flags[2]) and not reason:
                sim.write_checkpoint()
            in_output += time.perf_counter() - t_out
            if flags[3]:
                log.info("step %d compiled kernels (%.1f s on rank 0): left out of the "
                         "timing", step, COMPILE_WATCH.seconds - compile0)
                compiled["steps"] += 1
                compiled["star_steps"] += n_step
                compiled["wall"] += time.perf_counter() - t_step
                compiled["step"] += in_step - step_before
                compiled["output"] += in_output - output_before
                compiled["compile"] += COMPILE_WATCH.seconds - compile0
                for p in PARTS:
                    compiled["parts"][p] += sim.timers[p] - parts_before[p]
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    sim.state.stop_reason = reason
    log.info("stopped after step %d: %s", sim.state.step, reason)
    t_out = time.perf_counter()
    if torn:  # stopped part-way through a step: its state is no state of the run
        log.error("the state of the failed step is not written: the last checkpoint is "
                  "intact")
    else:
        sim.write_checkpoint()
        if sim.output.snap_step != sim.state.step:
            sim.write_snapshot()
    in_output += time.perf_counter() - t_out
    sim.timing = timing_summary(sim, sim.state.step - step0, star_steps,
                                       time.perf_counter() - loop_start, in_step, in_output,
                                       parts0, compiled)

    sim.output.close(reason, sim.timing)
    sim.release_shared_memory()
    return reason


def timing_summary(sim: Simulation, steps: int, star_steps: float, wall: float,
                   in_step: float, in_output: float, parts0: dict[str, float],
                   compiled: dict | None = None) -> dict:
    """Where this invocation of :meth:`run` spent its time (collective: each figure the
    slowest rank's); logged and kept as the ``timing`` attribute of diagnostics.h5.

    Seconds in all: ``wall`` (the step loop, from the first step to the final outputs),
    each part of the step (:data:`PARTS`; their sum is less than the time in
    :meth:`step`, whose untimed remainder is ``step_other``), ``output`` (snapshots,
    diagnostics rows, checkpoints) and ``loop_other`` (stop checks, progress lines,
    signal and wall-clock reductions).  ``star_steps`` is the sum over the steps of the
    number of objects.

    ``compiled`` (from :meth:`run`): the steps in which kernels compiled, with their
    share of each figure, which is taken out; ``steps`` are then the steps timed,
    ``steps_compiling`` those left out and ``compile_s`` the compilation in them.
    """
    c = compiled or {"steps": 0, "star_steps": 0.0, "wall": 0.0, "step": 0.0,
                     "output": 0.0, "compile": 0.0, "parts": {}}
    steps -= c["steps"]
    star_steps -= c["star_steps"]
    wall, in_step, in_output = wall - c["wall"], in_step - c["step"], in_output - c["output"]
    parts = {p: sim.timers[p] - parts0.get(p, 0.0) - c["parts"].get(p, 0.0) for p in PARTS}
    step_other = in_step - sum(parts.values())
    mine = np.array([wall, in_step, in_output, step_other, c["compile"], *parts.values()])
    worst = allreduce_max(sim.comm, mine)
    wall, in_step, in_output, step_other, compile_s = (float(x) for x in worst[:5])
    parts = dict(zip(PARTS, (float(x) for x in worst[5:]), strict=True))
    out = {"steps": int(steps), "star_steps": float(star_steps), "wall_s": wall,
           "step_s": in_step, "parts_s": parts, "step_other_s": step_other,
           "output_s": in_output, "loop_other_s": wall - in_step - in_output,
           "steps_compiling": int(c["steps"]), "compile_s": compile_s,
           "ranks": sim.size, "threads": int(numba.get_num_threads())}
    left_out = (f"; {c['steps']} step(s) that compiled kernels ({compile_s:.1f} s of "
                "compilation) left out" if c["steps"] else "")
    if steps:
        log.info("timing: %d steps in %.1f s, %.2f ms per step (%.3f us per star-step): %s "
                 "ms per step%s", steps, wall, wall / steps * 1e3,
                 wall / max(star_steps, 1.0) * 1e6, timing_split(out), left_out)
    elif c["steps"]:
        log.info("timing: none: every step compiled kernels (%.1f s of compilation)",
                 compile_s)
    return out


def timing_split(timing: dict) -> str:
    """A run's timing summary (:func:`timing_summary`) as ms per step: the parts
    that took time, largest first, then the rest of the step, outputs and the rest of the
    loop, e.g. ``"orbits 21.06, sort 4.48, rest of the step 0.03, outputs 0.24, rest of the
    loop 0.02"``."""
    ms = 1e3 / timing["steps"]
    parts = sorted(((v, k) for k, v in timing["parts_s"].items() if v > 0.0), reverse=True)
    rest = (("rest of the step", timing["step_other_s"]), ("outputs", timing["output_s"]),
            ("rest of the loop", timing["loop_other_s"]))
    return ", ".join([f"{k} {v * ms:.2f}" for v, k in parts]
                     + [f"{k} {v * ms:.2f}" for k, v in rest])


