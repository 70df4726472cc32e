"""Kernels of radial time-step zones (the process is :mod:`cmc.processes.zones`): one pass
over the rows each, instead of a dozen array operations over all N per step.

Their plain twins are the numpy expressions in tests/test_zones.py (same bits).
"""

from __future__ import annotations

from numba import njit, prange

from physics.orbits import ORBIT_OK, ORBIT_REMOVED


@njit(cache=True, parallel=True)
def plan_rows(zone, clock, time, t_end, dt, level, top, relax, due, ratio):
    """The rows' part of a step's zones, in place; returns the number of rows due.

    Each row: a NaN clock (an object made since the last step) starts at ``time`` (the
    step's start); its zone is cut to ``top`` (the longest step allowed now); it is due when
    its zone is at most ``level``.  With ``relax``, each relaxation pair (rows 2k, 2k+1) with a
    due row gets ``ratio`` = the shorter of its rows' owed times over ``dt`` (a clock at
    ``time`` owes exactly 1), and both clocks advance by ``ratio dt``, at most to ``t_end``;
    every other row (and every row without ``relax``) gets ratio 0; a due odd last row (no
    partner) has its clock moved to ``t_end`` unrelaxed, as the shared step leaves it.

    Parameters
    ----------
    zone : ndarray of int32
        The rows' zones (cut in place).
    clock : ndarray
        The rows' ``t_last`` [t_rel] (in place).
    time, t_end, dt : float
        The step's start, end and length [t_rel].
    level, top : int
        The highest zone due, the longest zone allowed.
    relax : bool
        Whether the step relaxes (``run.relaxation``).
    due : ndarray of bool
        Out: the rows due.
    ratio : ndarray
        Out: each row's relaxation time over ``dt``.
    """
    n = zone.shape[0]
    count = 0
    for i in prange(n):
        if clock[i] != clock[i]:
            clock[i] = time
        if zone[i] > top:
            zone[i] = top
        d = zone[i] <= level
        due[i] = d
        count += 1 if d else 0
    for k in prange(n // 2):
        i = 2 * k
        j = i + 1
        p = 0.0
        if relax and (due[i] or due[j]):
            oi = 1.0 if clock[i] == time else (t_end - clock[i]) / dt
            oj = 1.0 if clock[j] == time else (t_end - clock[j]) / dt
            p = oi if oi < oj else oj
            ci = clock[i] + p * dt
            cj = clock[j] + p * dt
            clock[i] = ci if ci < t_end else t_end
            clock[j] = cj if cj < t_end else t_end
        ratio[i] = p
        ratio[j] = p
    if n % 2:  # an odd last row has no partner: as in the shared step it is not relaxed,
        # and its clock moves on (it does not take the time up later)
        ratio[n - 1] = 0.0
        if relax and due[n - 1]:
            clock[n - 1] = t_end
    return count


@njit(cache=True, parallel=True)
def sync_rows(zone, clock, time, t_end, relax):
    """A step in which every row is due and relaxed for the whole step (no zone may be longer
    than the innermost one, and every clock is at the step's start ``time`` or NaN): in place,
    what :func:`plan_rows` (``top = 0``) and the orbits' pericentre zones would leave, without
    the per-row plan: every zone 0 and, with ``relax``, every clock at ``t_end`` (without, the NaN
    clocks at ``time``).  Returns False, changing nothing, if some clock is neither ``time`` nor
    NaN (it is owed more than the step: the step needs :func:`plan_rows`)."""
    n = zone.shape[0]
    behind = 0
    for i in prange(n):
        c = clock[i]
        if c == c and c != time:
            behind += 1
    if behind:
        return False
    for i in prange(n):
        zone[i] = 0
        if relax:
            clock[i] = t_end
        elif clock[i] != clock[i]:  # (unrelaxed, a new object's clock starts at the step's)
            clock[i] = time
    return True


@njit(cache=True, parallel=True)
def freeze_rows(zone, level, status, frozen):
    """Before the orbit kernel: the rows whose zone is over ``level`` and that are not
    leaving (``status`` ``ORBIT_OK``) are ``frozen`` and marked ``ORBIT_REMOVED`` for the
    kernel to skip."""
    for i in prange(zone.shape[0]):
        f = status[i] == ORBIT_OK and zone[i] > level
        frozen[i] = f
        if f:
            status[i] = ORBIT_REMOVED


@njit(cache=True, parallel=True)
def thaw_rows(frozen, r_all, gidx, status, r_new, vr_new, vt_new, phi_oo, phi_on, r_apo,
              bound_r, bound_phi, zone):
    """After the orbit kernel: the frozen rows are ``ORBIT_OK`` again at their old radius
    (their slot's), with no potential change (``phi_oo = phi_on = 0``) and no apocentre for
    the tidal test; the rows given a new orbit that stay (``ORBIT_OK``) get their new
    orbit's pericentre ``zone``: the number of level bounds ``bound_r`` (the old
    potential there ``bound_phi``) below the new radius that the orbit does not reach in to,
    ``Q(B) = 2 (E - phi(B)) - J^2 / B^2 < 0`` (``E``, ``J`` from ``r_new``, ``vr_new``,
    ``vt_new`` and ``phi_on``)."""
    nb = bound_r.shape[0]
    for i in prange(frozen.shape[0]):
        if frozen[i]:
            status[i] = ORBIT_OK
            r_new[i] = r_all[gidx[i]]
            phi_oo[i] = 0.0
            phi_on[i] = 0.0
            r_apo[i] = 0.0
        elif status[i] == ORBIT_OK:
            r = r_new[i]
            e2 = 2.0 * phi_on[i] + vr_new[i] * vr_new[i] + vt_new[i] * vt_new[i]
            j2 = (r * vt_new[i]) * (r * vt_new[i])
            z = 0
            for k in range(nb):
                b = bound_r[k]
                if b < r and e2 - 2.0 * bound_phi[k] - j2 / (b * b) < 0.0:
                    z += 1
            zone[i] = z
