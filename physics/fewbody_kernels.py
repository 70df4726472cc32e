"""Compiled kernels of the few-body encounter engine (see :mod:`physics.fewbody`): the driver.

Everything here works on small arrays in the encounter's centre-of-mass frame with G = 1:
``x``, ``v`` of shape ``(nmax, 3)``, masses ``m`` and radii ``rad`` of shape ``(nmax,)``, of which
the first ``n`` rows are live bodies.  ``members[i]`` is a bit mask of the input bodies that
body ``i`` is made of (a merger ORs them).

:func:`integrate_encounter` runs an encounter to its end: steps of the integrator core
(:mod:`physics.fewbody_integrator`: the logarithmic-Hamiltonian leapfrog with Bulirsch-Stoer
extrapolation), mergers of bodies in contact (here), classification of the hierarchy
(:mod:`physics.fewbody_classify`), and the analytic Kepler pieces -- jumps over wide bound
excursions and isolated binaries integrated as one body (:mod:`physics.fewbody_kepler`).  This
module holds the driver, its status codes and statistics indices, the mergers and the
recentring of the coordinates.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from physics.binaries import bh_merger_remnant
from physics.fewbody_classify import _pair_orbit, classify
from physics.fewbody_integrator import (
    KMAX,
    _next_step_factor,
    _unpack,
    bs_step,
    bs_step_pn,
    kinetic_energy,
    potential_energy,
)
from physics.fewbody_kepler import collapse_isolated, expand_collapsed, kepler_jump

# status codes returned by integrate_encounter
STATUS_DONE = 0
STATUS_TIME_LIMIT = 1
STATUS_STEP_LIMIT = 2
STATUS_FAILED = 3

# indices into the integer statistics array
IST_STEPS = 0
IST_REJECTED = 1
IST_FORCES = 2
IST_MERGERS = 3
IST_CLASSIFY = 4
IST_JUMPS = 5
IST_COLLAPSES = 6
IST_GW_MERGERS = 7
N_ISTATS = 8
#: An isolated binary (tidal perturbation below the collapse tolerance) is integrated as one
#: body until its perturbation exceeds this many times that tolerance (hysteresis).
EXPAND_FACTOR = 10.0


@njit(cache=True)
def _cross(a, b):
    """``a x b`` of two 3-vectors."""
    return np.array([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                     a[0] * b[1] - a[1] * b[0]])


@njit(cache=True)
def _recoil(x, v, i, j, kick, u):
    """The recoil velocity (3,) of the merger of bodies ``i`` and ``j``: speed ``kick`` in
    their orbital plane at the angle ``2 pi u`` from their relative velocity (as CMC-COSMIC's
    ``fb_merge``: y along the relative velocity, z along the pair's angular momentum, the kick
    ``cos(theta) (y x z) + sin(theta) y``); a head-on pair takes any axis normal to y."""
    y = np.empty(3)
    r = np.empty(3)
    for c in range(3):
        y[c] = v[j, c] - v[i, c]
        r[c] = x[j, c] - x[i, c]
    ny = np.sqrt(y[0] * y[0] + y[1] * y[1] + y[2] * y[2])
    out = np.zeros(3)
    if ny == 0.0 or kick == 0.0:
        return out
    y /= ny
    z = _cross(r, y)
    nz = np.sqrt(z[0] * z[0] + z[1] * z[1] + z[2] * z[2])
    if nz == 0.0:  # head on: any direction normal to y
        e = np.zeros(3)
        e[np.argmin(np.abs(y))] = 1.0
        z = _cross(y, e)
        nz = np.sqrt(z[0] * z[0] + z[1] * z[1] + z[2] * z[2])
    z /= nz
    xa = _cross(y, z)
    th = 2.0 * np.pi * u
    for c in range(3):
        out[c] = kick * (np.cos(th) * xa[c] + np.sin(th) * y[c])
    return out


@njit(cache=True)
def _merge_contacts(x, v, m, rad, members, n, xold, vold, radius_factor, is_bh, clight,
                    kick_u, nkick):
    """Merge pairs in contact (or whose two-body pericentre since the last step touched).

    Returns the new body count.  A merged body keeps mass, centre of mass and momentum; its
    radius is ``radius_factor * (r_1 + r_2)``.  With ``clight > 0`` two black holes merge as
    general relativity has it (:func:`physics.binaries.bh_merger_remnant`): the product
    keeps the fraction of the mass the fit leaves (radius scaled with it: the black holes'
    radii are a multiple of the Schwarzschild radius), moves with the pair's centre-of-mass
    velocity plus the recoil (:func:`_recoil`, its angle from ``kick_u[nkick[0]]``, then
    ``nkick[0]`` counts on); a product with a black hole in it is a black hole.
    """
    merged = True
    while merged:
        merged = False
        for i in range(n):
            if merged:
                break
            for j in range(i + 1, n):
                rsum = rad[i] + rad[j]
                if rsum <= 0.0:
                    continue
                eb, a, e, r, rv = _pair_orbit(x[i], v[i], m[i], x[j], v[j], m[j])
                touch = r <= rsum
                if not touch and rv > 0.0 and j < xold.shape[0]:
                    # approaching at the last step and receding now: pericentre passed
                    rvo = 0.0
                    for c in range(3):
                        rvo += (xold[j, c] - xold[i, c]) * (vold[j, c] - vold[i, c])
                    if rvo < 0.0:
                        q = a * (1.0 - e) if np.isfinite(a) else r
                        if not np.isfinite(a):
                            # hyperbolic: pericentre from energy and angular momentum
                            mt = m[i] + m[j]
                            eps = eb * mt / (m[i] * m[j])
                            q = mt * (e - 1.0) / (2.0 * eps) if eps > 0.0 else r
                        touch = q <= rsum
                if touch:
                    mt = m[i] + m[j]
                    gr = clight > 0.0 and is_bh[i] != 0 and is_bh[j] != 0
                    frac = 1.0
                    dv = np.zeros(3)
                    if gr:
                        frac, _, kick = bh_merger_remnant(m[i], m[j])
                        u = kick_u[nkick[0]] if nkick[0] < kick_u.shape[0] else 0.0
                        nkick[0] += 1
                        dv = _recoil(x, v, i, j, kick * clight, u)
                    for c in range(3):
                        x[i, c] = (m[i] * x[i, c] + m[j] * x[j, c]) / mt
                        v[i, c] = (m[i] * v[i, c] + m[j] * v[j, c]) / mt
                    if gr:
                        for c in range(3):
                            v[i, c] += dv[c]
                    m[i] = mt * frac
                    rad[i] = radius_factor * rsum * frac
                    members[i] |= members[j]
                    if is_bh[j] != 0:
                        is_bh[i] = 1
                    last = n - 1
                    if j != last:
                        for c in range(3):
                            x[j, c] = x[last, c]
                            v[j, c] = v[last, c]
                            xold[j, c] = xold[last, c]
                            vold[j, c] = vold[last, c]
                        m[j] = m[last]
                        rad[j] = rad[last]
                        members[j] = members[last]
                        is_bh[j] = is_bh[last]
                    n -= 1
                    merged = True
                    break
    return n


@njit(cache=True)
def recentre_on_closest_pair(x, n):
    """Shift all positions so the closest pair's midpoint is the origin.

    Forces depend on differences only, so this changes nothing physical; it keeps the
    coordinates of the tightest pair small, so round-off in its separation stays relative to its
    own size when the pair is far from the system's centre of mass (a tight binary recoiling
    from an escaper).
    """
    best = np.inf
    bi = 0
    bj = 1
    for i in range(n):
        for j in range(i + 1, n):
            d = (x[j, 0] - x[i, 0]) ** 2 + (x[j, 1] - x[i, 1]) ** 2 + (x[j, 2] - x[i, 2]) ** 2
            if d < best:
                best = d
                bi = i
                bj = j
    for c in range(3):
        o = 0.5 * (x[bi, c] + x[bj, c])
        for i in range(n):
            x[i, c] -= o


@njit(cache=True)
def recentre_on_centre_of_mass(x, m, n):
    """Shift all positions so the centre of mass is the origin."""
    mt = 0.0
    for i in range(n):
        mt += m[i]
    for c in range(3):
        o = 0.0
        for i in range(n):
            o += m[i] * x[i, c]
        o /= mt
        for i in range(n):
            x[i, c] -= o


@njit(cache=True, nogil=True)
def integrate_encounter(x, v, m, rad, members, n, hstep, tol, kmax, seq, tidal_tol, jump_tol,
                        t_max, max_steps, classify_every, radius_factor,
                        tx, tv, tm, ta, te, ch, top, istats, fstats, is_bh, clight, kick_u,
                        collapse_tol=0.0):
    """Integrate an encounter until it is classified as over, or a limit is reached.

    Parameters
    ----------
    x, v, m, rad, members : ndarray
        Bodies (rows ``0 .. n-1`` live), updated in place; mergers compact them.
    n : int
        Number of bodies at the start.
    hstep : float
        First step in the regularised time (adapted afterwards).
    tol : float
        Bulirsch-Stoer relative tolerance.
    kmax : int
        Most extrapolation rows per step (<= KMAX).
    seq : ndarray of int64
        Leapfrog substeps per row.
    tidal_tol : float
        Tidal tolerance of the classification.
    jump_tol : float
        Tidal perturbation below which a wide bound excursion is skipped analytically
        (:func:`kepler_jump`); 0 switches the jumps off.
    t_max : float
        Largest physical time.
    max_steps : int
        Largest number of accepted steps.
    classify_every : int
        Classify after this many accepted steps (and after every merger).
    radius_factor : float
        Radius of a merger product in units of the sum of the two radii.
    collapse_tol : float
        Tidal perturbation below which an isolated binary is integrated as one body
        (:func:`collapse_isolated`; restored above ``EXPAND_FACTOR`` times it and before
        every classification that would end the encounter); 0 switches this off.  Only in
        encounters without finite radii.
    tx, tv, tm, ta, te, ch, top : ndarray
        Out: the final hierarchy (see :func:`classify`).
    istats : ndarray of int64, shape (N_ISTATS,)
        Out: accepted and rejected steps, force evaluations, mergers, classifications, jumps.
    fstats : ndarray of float64, shape (8,)
        Out: end time, energy lost in mergers (E_after - E_before summed), final n_nodes,
        final n_top, energy change by the 2.5PN term (the radiated energy, negative), and the
        angular momentum (3) it gave (the radiated, with the sign of a change).
    is_bh : ndarray of int64, shape (nmax,)
        1 for a black hole (updated as bodies merge).
    clight : float
        The speed of light in the units of ``v``; > 0 with two or more black holes switches
        on the 2.5PN term between black holes (:func:`physics.fewbody_integrator.bs_step_pn`)
        and general-relativistic black-hole mergers (:func:`_merge_contacts`), and switches
        off the Kepler jumps and collapsed binaries (they would skip the radiation); 0:
        Newtonian.
    kick_u : ndarray, shape (k,)
        Uniforms in (0, 1) for the recoil angles of the black-hole mergers, in order.

    Returns
    -------
    status : int
        STATUS_DONE, STATUS_TIME_LIMIT, STATUS_STEP_LIMIT or STATUS_FAILED.
    n : int
        Number of bodies at the end.
    """
    nmax = x.shape[0]
    ws_x = np.empty((nmax, 3))
    ws_v = np.empty((nmax, 3))
    acc = np.empty((nmax, 3))
    xold = np.empty((nmax, 3))
    vold = np.empty((nmax, 3))
    tab = np.empty((KMAX, KMAX, 9 * nmax + 5))
    ynew = np.empty(9 * nmax + 5)
    ws_w = np.empty((nmax, 3))
    fpn = np.empty((nmax, 3))
    nkick = np.zeros(1, dtype=np.int64)
    n_bh = 0
    for i in range(n):
        if is_bh[i] != 0:
            n_bh += 1
    pn = clight > 0.0 and n_bh >= 2
    if pn:
        jump_tol = 0.0
    de_pn = 0.0
    errs = np.empty(KMAX)
    istats[:] = 0
    body_col = np.full(nmax, -1, dtype=np.int64)
    col_r = np.zeros((nmax, 3))
    col_w = np.zeros((nmax, 3))
    col_m = np.zeros((nmax, 2))
    col_rad = np.zeros((nmax, 2))
    col_mem = np.zeros((nmax, 2), dtype=np.int64)
    col_t = np.full(nmax, -1.0)
    point_masses = True
    for i in range(n):
        if rad[i] > 0.0:
            point_masses = False
    collapsing = collapse_tol > 0.0 and point_masses and not pn
    de_merge = 0.0
    fstats[:] = 0.0
    t = 0.0
    bconst = potential_energy(x, m, n) - kinetic_energy(v, m, n)
    status = STATUS_DONE
    since = 0
    nn = n
    ntop = n
    while True:
        if pn:
            k, err, nf = bs_step_pn(x, v, t, m, n, bconst, hstep, tol, kmax, seq, ws_x, ws_v,
                                    ws_w, acc, fpn, is_bh, clight, tab, ynew, errs)
        else:
            k, err, nf = bs_step(x, v, t, m, n, bconst, hstep, tol, kmax, seq, ws_x, ws_v, acc,
                                 tab, ynew, errs)
        istats[IST_FORCES] += nf
        if k == 0:
            istats[IST_REJECTED] += 1
            if np.isfinite(err) and err > 0.0:
                fac = 0.94 * (0.65 / err) ** (1.0 / (2 * kmax - 1))
                hstep *= min(0.5, max(0.05, fac))
            else:
                hstep *= 0.25
            if hstep <= 0.0 or istats[IST_REJECTED] > 1000 + istats[IST_STEPS]:
                status = STATUS_FAILED
                break
            continue
        for i in range(n):
            for c in range(3):
                xold[i, c] = x[i, c]
                vold[i, c] = v[i, c]
        t = _unpack(ynew, n, x, v)
        if pn:  # B = -E grew by the energy the waves took
            de_pn -= ynew[6 * n + 1] - bconst
            bconst = ynew[6 * n + 1]
            for c in range(3):
                fstats[5 + c] += ynew[9 * n + 2 + c]
        istats[IST_STEPS] += 1
        since += 1
        hstep *= _next_step_factor(k, errs, seq, kmax)
        # finite radii: merge bodies in contact
        has_radii = False
        for i in range(n):
            if rad[i] > 0.0:
                has_radii = True
        if has_radii and n > 1:
            e_before = kinetic_energy(v, m, n) - potential_energy(x, m, n)
            n_new = _merge_contacts(x, v, m, rad, members, n, xold, vold, radius_factor, is_bh,
                                    clight, kick_u, nkick)
            if n_new < n:
                istats[IST_MERGERS] += n - n_new
                n = n_new
                e_after = kinetic_energy(v, m, n) - potential_energy(x, m, n)
                de_merge += e_after - e_before
                bconst = potential_energy(x, m, n) - kinetic_energy(v, m, n)
                since = classify_every
        if since >= classify_every or n == 1:
            since = 0
            istats[IST_CLASSIFY] += 1
            if n > 2:
                recentre_on_closest_pair(x, n)
            done, nn, ntop = classify(x, v, m, rad, n, tidal_tol, tx, tv, tm, ta, te, ch, top)
            if collapsing:
                n_before = n
                n, scale = expand_collapsed(x, v, m, rad, members, n,
                                            EXPAND_FACTOR * collapse_tol, t, body_col, col_r,
                                            col_w, col_m, col_rad, col_mem, col_t, done)
                if not done:
                    n = collapse_isolated(x, v, m, rad, members, n, collapse_tol, t, body_col,
                                          col_r, col_w, col_m, col_rad, col_mem, col_t)
                if n != n_before:
                    if n < n_before:
                        istats[IST_COLLAPSES] += n_before - n
                    if scale < np.inf:
                        hstep = min(hstep, 0.05 * scale)
                    bconst = potential_energy(x, m, n) - kinetic_energy(v, m, n)
                    if done:  # decide again with the binaries restored
                        if n > 2:
                            recentre_on_closest_pair(x, n)
                        done, nn, ntop = classify(x, v, m, rad, n, tidal_tol, tx, tv, tm, ta,
                                                  te, ch, top)
            if done:
                status = STATUS_DONE
                break
            if jump_tol > 0.0:
                for i in range(n):
                    for c in range(3):
                        xold[i, c] = x[i, c]
                        vold[i, c] = v[i, c]
                dtj = kepler_jump(x, v, m, n, jump_tol, tx, tv, tm, ta, te, ch, top, nn, ntop)
                if dtj > 0.0:
                    t += dtj
                    istats[IST_JUMPS] += 1
                    # the log-Hamiltonian drift needs B = -E of the state it advances: a
                    # mismatch makes positions and velocities advance at different rates
                    # (it grew to a 2 % energy error over 45 jumps in a long resonance)
                    bconst = potential_energy(x, m, n) - kinetic_energy(v, m, n)
                elif dtj < 0.0:
                    for i in range(n):
                        for c in range(3):
                            x[i, c] = xold[i, c]
                            v[i, c] = vold[i, c]
        if t > t_max:
            status = STATUS_TIME_LIMIT
            break
        if istats[IST_STEPS] >= max_steps:
            status = STATUS_STEP_LIMIT
            break
    if collapsing:
        n, _ = expand_collapsed(x, v, m, rad, members, n, 0.0, t, body_col, col_r, col_w,
                                col_m, col_rad, col_mem, col_t, True)
    recentre_on_centre_of_mass(x, m, n)
    done, nn, ntop = classify(x, v, m, rad, n, tidal_tol, tx, tv, tm, ta, te, ch, top)
    if status == STATUS_DONE and not done and n > 1:
        status = STATUS_FAILED  # cannot happen: the last classification said done
    fstats[0] = t
    fstats[1] = de_merge
    fstats[2] = nn
    fstats[3] = ntop
    fstats[4] = de_pn
    istats[IST_GW_MERGERS] = nkick[0]
    return status, n
