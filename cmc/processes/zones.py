"""Radial time-step zones (``run.zones`` > 1; docs/method.md, "Time-step zones").

The step is cut into zones whose steps are 1, 2, 4, ... 2^(Z-1) times the innermost step
``dt`` (the shared step of :class:`cmc.processes.timestep.TimeStep`). The radial structure:
window ``w`` may be in level ``z`` when ``2^z dt`` is within ``(2 run.zone_theta_max / pi)^2
T_rel`` and ``run.zone_dt_max``; levels never fall outward, so the stars inside the bound
radius ``B_z`` are those of levels ``0 .. z``. A star's zone is the level of its orbit's
pericentre, set when it is given a new orbit: its step is then within the limit wherever on
its orbit it is, and when it is next due does not depend on where on its orbit it was drawn
(a zone by the drawn radius would keep the stars drawn far out there longer, and the time-
averaged cluster would expand). In step ``k`` the zones up to ``L = min(trailing zeros of k,
Z - 1)`` are due: their stars get new orbits; a radial pair (or triplet) with a due star is
relaxed (the other keeps its radius, with its velocity changed); every other star keeps its
orbit and goes through the sort, the energy correction (exact for it too: its old and new
radius are the same) and the escape test. Each star's clock (``t_last``) is the time to
which it has been relaxed; a pair is relaxed for the shorter of its two stars' owed times,
which both clocks advance by (the other keeps the rest for later).

With binaries or collisions setting the step, the central objects whose time scales set it
(:data:`cmc.diagnostics.CENTRAL_STARS`) are in level 0.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from cmc.diagnostics import CENTRAL_STARS
from parallel.comm import allreduce_max, allreduce_sum
from parallel.decomposition import MIN_CHUNK
from physics.relaxation import window_last_below_inside, window_last_below_straddling
from physics.zones import plan_rows, sync_rows

if TYPE_CHECKING:
    from cmc.processes.base import StepWork
    from cmc.simulation import Simulation


def due_level(step: int, zones: int) -> int:
    """The highest level due in step ``step`` (0-based): the trailing zeros of ``step``, at
    most ``zones - 1`` (every level is due in step 0)."""
    if step == 0:
        return zones - 1
    return min((step & -step).bit_length() - 1, zones - 1)


def allowed_levels(sim: Simulation, dt: float) -> np.ndarray:
    """Which of the levels 1 .. Z - 1 may hold stars now: those whose step ``2^z dt`` is at
    most ``run.zone_dt_max`` (a prefix: True up to the longest allowed)."""
    cfg = sim.cfg.run
    return dt * 2.0 ** np.arange(1, cfg.zones) <= cfg.zone_dt_max * sim.state.t_rh0


def zone_rows(sim: Simulation, dt: float, coulomb_ratio: float, scan: tuple,
              centre_fixed: bool, allowed: np.ndarray) -> np.ndarray:
    """Global rows of the levels up to each ``z = 0 .. Z - 2``: rows ``[0, rows[z])`` are
    in levels ``<= z`` (collective: one reduction of Z - 1 numbers under MPI).

    ``scan`` is the time step's ``(moments, first block, blocks in all, gathered boundary
    rows or None)``; window ``w`` is above level ``z`` when its relaxation time is at least
    ``2^(z+1) dt / (2 run.zone_theta_max / pi)^2`` and level ``z + 1`` is ``allowed``
    (:func:`allowed_levels`); level ``z`` reaches to the last window that is not.
    ``centre_fixed``: the step was set by the central objects' binary or collision time
    scales, so the windows holding them are in level 0.
    """
    cfg = sim.cfg.run
    levels = cfg.zones
    if not allowed.any():  # no level holds a window (the same on every rank: dt is global)
        return np.full(levels - 1, sim.n_total, dtype=np.int64)
    factor = (2.0 * cfg.zone_theta_max / math.pi) ** 2
    # a level not allowed holds no window: its bound is at the end
    limits = np.where(allowed, dt * 2.0 ** np.arange(1, levels) / factor, np.inf)
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
    rows = np.minimum((last + 1) * width * MIN_CHUNK, sim.n_total)
    rows[~allowed] = sim.n_total  # (a level not allowed holds no window at all,
    # whatever the last windows' times: a window of too few stars has T = inf)
    return rows


def plan_zones(sim: Simulation, work: StepWork, scan: tuple, centre_fixed: bool) -> None:
    """The step's zones (collective): ``work.zone_rows``, ``zone_bounds``, ``zone_level``,
    ``due`` (the local rows whose zone is due), ``n_stepped`` (their number on all ranks) and
    ``dt_ratio`` (each row's relaxation time this step over ``work.dt``: its pair's shorter
    owed time); the clocks of the rows relaxed move on by it (:func:`physics.zones.plan_rows`).
    """
    st = sim.state
    levels = sim.cfg.run.zones
    allowed = allowed_levels(sim, work.dt)
    rows = zone_rows(sim, work.dt, work.coulomb_ratio, scan, centre_fixed, allowed)
    level = due_level(st.step, levels)
    stars = sim.stars
    # the longest zone allowed now: a star drawn when dt was shorter may hold a zone whose
    # step is now over run.zone_dt_max (dt grows as well as shrinks)
    top = int(np.count_nonzero(allowed))
    t_end = st.time + work.dt
    relax = sim.cfg.run.relaxation
    if top == 0 and sync_rows(stars.zone, stars.t_last, st.time, t_end, relax):
        # every row due for the whole step: the shared step's path (the same bits as the
        # plan's unit ratios; tests/test_golden.py), without the per-row plan, the frozen
        # rows' passes and the pericentre zones (all 0)
        due = None
        work.dt_ratio = None
        n_due = stars.n
    else:
        due = np.empty(stars.n, dtype=np.bool_)
        work.dt_ratio = np.empty(stars.n)
        n_due = plan_rows(stars.zone, stars.t_last, st.time, t_end, work.dt, level, top, relax,
                          due, work.dt_ratio)
    inside = rows < sim.n_total  # the levels' bound radii and the (old) potential there
    bound_r = np.full(rows.shape, np.inf)
    bound_phi = np.zeros(rows.shape)
    bound_r[inside] = sim.r_all[rows[inside]]
    bound_phi[inside] = sim.phi_all[rows[inside]]
    work.zone_rows = rows
    work.zone_bounds = (bound_r, bound_phi)
    work.zone_level = level
    work.due = due
    work.n_stepped = int(round(float(allreduce_sum(sim.comm, np.array([float(n_due)]))[0])))


def zone_columns(work: StepWork, zones: int) -> dict:
    """The diagnostics columns of the zones: the step's level, the stars due, and each
    level's outer bound (rows)."""
    out = {"zone_level": float(work.zone_level), "n_stepped": float(work.n_stepped)}
    for z in range(zones - 1):
        out[f"zone_rows_{z}"] = float(work.zone_rows[z])
    return out
