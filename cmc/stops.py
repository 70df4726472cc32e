"""When a run stops: core collapse (median-smoothed N_core and the fall of r_c/r_h), the time
and step limits, dissolution and the energy error; and whether a stopped run may go on."""

from __future__ import annotations

import json
import logging
import math
from typing import TYPE_CHECKING

import numpy as np

from cmc.errors import PLANNED_STOPS, InputError
from cmc.state import MIN_OBJECTS

if TYPE_CHECKING:
    from pathlib import Path

    from cmc.simulation import Simulation

log = logging.getLogger("cmc.simulation")


def core_stop(sim: Simulation) -> float:
    """N_core below which the run stops: ``run.n_core_stop``, or with -1 (auto) 100 for a
    run that cannot form binaries and 0 (off: runs go on through collapse) for one that
    can (binaries in the table, or ``binaries.three_body = all``)."""
    c = sim.cfg.run
    if c.n_core_stop >= 0:
        return c.n_core_stop
    # the binary columns are there exactly when the run has or can form binaries
    # (:func:`cmc.initial.build_initial_stars`)
    return 0.0 if sim.stars.has_binary_fields else 100.0


def core_collapsed(sim: Simulation, d: dict) -> bool:
    """Whether the core-collapse stop holds (``core_collapse_ncore``).

    The median of N_core over the last :data:`CORE_STOP_WINDOW` recorded steps is below
    :func:`core_stop`, and the median of r_c/r_h over the same steps is below its initial
    value over ``run.rc_rh_drop`` (docs/method.md, "Core collapse").  The medians keep one
    low N_core of a noisy core from stopping the run; the fall of r_c/r_h keeps a small
    cluster, whose N_core is below 100 long before its core collapses (a 2000-star King
    model at 2.5 t_rh0: r_c/r_h 0.24, initially 0.40, its collapse near 5.5), running
    to the collapse.  ``d`` is the latest recorded row (the window's last; a checkpoint of
    an older version has no window: ``d`` alone).
    """
    n_core_stop = core_stop(sim)
    if n_core_stop <= 0:
        return False
    window = json.loads(sim.state.core_window)
    if not window:
        window = [[d["N_core"], d["r_c"] / d["r_h"] if d["r_h"] > 0 else 0.0]]
    n_core, rc_rh = np.median(np.asarray(window, dtype=np.float64), axis=0)
    if not n_core < n_core_stop:
        return False
    drop = sim.cfg.run.rc_rh_drop
    st = sim.state
    return bool(drop <= 1.0 or st.r_h0 <= 0.0 or rc_rh * drop < st.r_c0 / st.r_h0)


def stop_reason(sim: Simulation, d: dict) -> str:
    c = sim.cfg.run
    if core_collapsed(sim, d):
        return "core_collapse_ncore"
    if c.rc_stop_fraction > 0 and d["r_c"] < c.rc_stop_fraction * sim.state.r_c0:
        return "core_collapse_rc"
    if d["time_trh"] >= c.t_max:
        return "max_time"
    if c.t_max_myr > 0 and d["time_myr"] >= c.t_max_myr:
        return "max_time"
    if c.t_max_code > 0 and d["time"] >= c.t_max_code:
        return "max_time"
    if d["N"] < c.n_min_fraction * sim.state.n0 or d["N"] < MIN_OBJECTS:
        return "dissolved"
    if sim.state.step >= c.max_steps:
        return "max_steps"
    if abs(d["dE_rel"]) > c.energy_error_max:
        return "energy_error"
    return ""


def warn_early_stop(sim: Simulation) -> None:
    """Warn when N_core starts near ``n_core_stop``: the run would stop within a few
    steps on N_core alone (``run.rc_rh_drop = 1``), or its stop rests on the fall of
    r_c/r_h alone."""
    stop = core_stop(sim)
    n_core = sim.last.get("N_core", math.inf)
    if stop > 0 and n_core < 2.0 * stop:
        drop = sim.cfg.run.rc_rh_drop
        then = ("the run will stop within a few steps (core_collapse_ncore); set "
                "run.n_core_stop lower (0: off) for a model this small" if drop <= 1.0
                else f"the core-collapse stop rests on r_c/r_h falling by run.rc_rh_drop "
                f"= {drop:g} alone (run.n_core_stop = 0: no such stop)")
        log.warning("the initial N_core = %.1f is within a factor 2 of run.n_core_stop = "
                    "%g: %s", n_core, stop, then)


def check_continuable(sim: Simulation, stopped: str, path: str | Path) -> None:
    """Refuse to continue a run that ended, unless the overrides lift its stop."""
    if stopped not in PLANNED_STOPS and stopped != "energy_error":
        raise InputError(f"the run in {path} stopped with a failure ({stopped}) at step "
                         f"{sim.state.step}; it cannot go on from this checkpoint (an "
                         "older one: cmc restart OUTDIR --checkpoint checkpoint.1.h5)")
    still = stop_reason(sim, sim.last)
    if still:
        key = {"max_time": "run.t_max (or run.t_max_myr, run.t_max_code)",
               "max_steps": "run.max_steps",
               "dissolved": "run.n_min_fraction",
               "core_collapse_ncore": "run.n_core_stop", "core_collapse_rc":
               "run.rc_stop_fraction", "energy_error": "run.energy_error_max"}[still]
        raise InputError(f"the run in {path} is finished ({still} at step "
                         f"{sim.state.step}); to continue it, extend the stop with "
                         f"--set {key}=...")

