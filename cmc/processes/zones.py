"""Radial time-step zones (``run.zones`` > 1; docs/method.md, "Time-step zones").

The cluster is cut at window bounds into zones whose steps are 1, 2, 4, ... 2^(Z-1) times
the innermost step ``dt`` (the shared step of :class:`cmc.processes.timestep.TimeStep`).  A
window may be in level ``z`` when ``2^z dt`` is within its own limit, ``(2 theta_max /
pi)^2 T_rel``; levels never fall outward (a window is at most the level of every window
outside it), so the stars of the levels ``0 .. L`` are a prefix of the sorted table.  In step
``k`` the levels up to ``L = min(trailing zeros of k, Z - 1)`` are due: that prefix is
relaxed and given new orbits, the other stars keep their orbits (radius and velocities: the
potential the stepped stars see has the outer stars where they were) and take part in the
sort, the energy correction (exact for them too: their old and new radius are the same) and
the escape test as every step.  Each due star is relaxed for the time since its own last
step (``t_last``), so a star that moved between zones is relaxed for the time that passed.

With binaries or collisions setting the step, the central objects whose time scales set it
(:data:`cmc.diagnostics.CENTRAL_STARS`) stay in the innermost zone.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from cmc.diagnostics import CENTRAL_STARS
from parallel.comm import allreduce_max
from parallel.decomposition import MIN_CHUNK
from physics.relaxation import window_last_below_inside, window_last_below_straddling

if TYPE_CHECKING:
    from cmc.processes.base import StepWork
    from cmc.simulation import Simulation


def due_level(step: int, zones: int) -> int:
    """The highest level due in step ``step`` (0-based): the trailing zeros of ``step``, at
    most ``zones - 1`` (every level is due in step 0)."""
    if step == 0:
        return zones - 1
    return min((step & -step).bit_length() - 1, zones - 1)


def zone_rows(sim: Simulation, dt: float, coulomb_ratio: float, scan: tuple,
              centre_fixed: bool) -> np.ndarray:
    """Global rows of the levels up to each ``z = 0 .. Z - 2``: rows ``[0, rows[z])`` are
    in levels ``<= z`` (collective: one reduction of Z - 1 numbers under MPI).

    ``scan`` is the time step's ``(moments, first block, blocks in all, gathered boundary
    rows or None)``; window ``w`` is above level ``z`` when its relaxation time is at least
    ``2^(z+1) dt / (2 theta_max / pi)^2``, and level ``z`` reaches to the last window that is
    not.  ``centre_fixed``: the step was set by the central objects' binary or collision time
    scales, so the windows holding them are in level 0.
    """
    cfg = sim.cfg.run
    levels = cfg.zones
    factor = (2.0 * cfg.theta_max / math.pi) ** 2
    limits = dt * 2.0 ** np.arange(1, levels) / factor
    last = np.full(levels - 1, -1, dtype=np.int64)
    moments, block0, nb_total, edge = scan
    width = cfg.dt_window // MIN_CHUNK
    n0 = float(sim.state.n0)
    window_last_below_inside(sim.r_all, moments, block0, nb_total, n0, coulomb_ratio, width,
                             limits, last)
    if edge is not None:  # (every rank gets the same straddling windows)
        window_last_below_straddling(sim.r_all, edge, n0, coulomb_ratio, width, limits, last)
        last = allreduce_max(sim.comm, last.astype(np.float64)).astype(np.int64)
    if centre_fixed:
        last = np.maximum(last, (min(CENTRAL_STARS, sim.n_total) - 1) // (width * MIN_CHUNK))
    return np.minimum((last + 1) * width * MIN_CHUNK, sim.n_total)


def plan_zones(sim: Simulation, work: StepWork, scan: tuple, centre_fixed: bool) -> None:
    """The step's zones (collective): ``work.zone_rows``, ``zone_level``, ``n_stepped``,
    ``due_rows`` and ``due_blocks`` (the local rows due, a prefix, and their blocks: the
    binary events and stellar evolution may add or remove rows inside blocks later in the
    step, so the orbits take the due blocks' rows then) and ``dt_ratio`` (each due row's time
    since its last step over ``work.dt``); the due rows' clock is moved to the step's end."""
    st = sim.state
    levels = sim.cfg.run.zones
    rows = zone_rows(sim, work.dt, work.coulomb_ratio, scan, centre_fixed)
    level = due_level(st.step, levels)
    n_due = sim.n_total if level == levels - 1 else int(rows[level])
    stars = sim.stars
    due = min(max(n_due - sim.offset, 0), stars.n)
    clock = stars.t_last
    new = np.isnan(clock)
    if new.any():  # objects made since the last step: their clock starts at its end
        clock[new] = st.time
    t_end = st.time + work.dt
    work.dt_ratio = (t_end - clock[:due]) / work.dt
    clock[:due] = t_end
    work.zone_rows = rows
    work.zone_level = level
    work.n_stepped = n_due
    work.due_rows = due
    work.due_blocks = (due + MIN_CHUNK - 1) // MIN_CHUNK


def zone_columns(work: StepWork, zones: int) -> dict:
    """The diagnostics columns of the zones: the step's level, the stars stepped, and each
    level's outer bound (rows)."""
    out = {"zone_level": float(work.zone_level), "n_stepped": float(work.n_stepped)}
    for z in range(zones - 1):
        out[f"zone_rows_{z}"] = float(work.zone_rows[z])
    return out
