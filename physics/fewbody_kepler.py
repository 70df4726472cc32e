"""Few-body Kepler pieces: analytic two-body orbits inside the encounter integration.

Part of the compiled kernels of the few-body encounter engine (:mod:`physics.fewbody_kernels`;
conventions there).  Holds the elliptic and hyperbolic Kepler propagators (Lagrange f and g
functions), the jump that skips a wide bound excursion analytically (:func:`kepler_jump`), and
the collapse of isolated binaries into one body and their restoration
(:func:`collapse_isolated`, :func:`expand_collapsed`, as Fewbody collapses isolated tree
nodes).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from physics.fewbody_classify import _pair_orbit, tidal_perturbation
from physics.fewbody_integrator import kinetic_energy, potential_energy


@njit(cache=True)
def kepler_propagate(r0, w0, mu, dt, r1, w1):
    """Advance a bound two-body relative orbit by ``dt`` (Lagrange f and g functions).

    Parameters
    ----------
    r0, w0 : ndarray, shape (3,)
        Relative position and velocity.
    mu : float
        ``G (m1 + m2)``.
    dt : float
        Time step (any size; the mean anomaly is reduced modulo 2 pi).
    r1, w1 : ndarray, shape (3,)
        Out: the state after ``dt``.
    """
    rn = np.sqrt(r0[0] ** 2 + r0[1] ** 2 + r0[2] ** 2)
    w2 = w0[0] ** 2 + w0[1] ** 2 + w0[2] ** 2
    rw = r0[0] * w0[0] + r0[1] * w0[1] + r0[2] * w0[2]
    a = 1.0 / (2.0 / rn - w2 / mu)
    nmot = np.sqrt(mu / a ** 3)
    ecos = 1.0 - rn / a
    esin = rw / np.sqrt(mu * a)
    e = np.sqrt(ecos * ecos + esin * esin)
    e0 = np.arctan2(esin, ecos)
    m0 = e0 - esin
    two_pi = 2.0 * np.pi
    m1 = (m0 + nmot * dt) % two_pi
    # Kepler's equation at the end, from Danby's starting value (safe up to e -> 1)
    ecc1 = m1 + 0.85 * e * (1.0 if np.sin(m1) >= 0.0 else -1.0)
    for _ in range(60):
        step = (ecc1 - e * np.sin(ecc1) - m1) / (1.0 - e * np.cos(ecc1))
        ecc1 -= step
        if abs(step) < 1e-15:
            break
    dE = (ecc1 - e0) % two_pi  # whole periods dropped
    # Lagrange coefficients; g in closed form (dt - (dE - sin dE)/n would cancel badly)
    f = 1.0 - a / rn * (1.0 - np.cos(dE))
    g = (rn / a * np.sin(dE) + esin * (1.0 - np.cos(dE))) / nmot
    for c in range(3):
        r1[c] = f * r0[c] + g * w0[c]
    r1n = np.sqrt(r1[0] ** 2 + r1[1] ** 2 + r1[2] ** 2)
    fd = -np.sqrt(mu * a) / (r1n * rn) * np.sin(dE)
    gd = 1.0 - a / r1n * (1.0 - np.cos(dE))
    for c in range(3):
        w1[c] = fd * r0[c] + gd * w0[c]


@njit(cache=True)
def _split(xcm, vcm, ma, mb, r, w, xa, va, xb, vb):
    """Positions and velocities of two parts of masses ``ma``, ``mb`` with centre of mass
    ``xcm``, ``vcm`` and relative position ``r`` and velocity ``w`` (b minus a)."""
    mt = ma + mb
    for c in range(3):
        xa[c] = xcm[c] - mb / mt * r[c]
        va[c] = vcm[c] - mb / mt * w[c]
        xb[c] = xcm[c] + ma / mt * r[c]
        vb[c] = vcm[c] + ma / mt * w[c]


@njit(cache=True)
def _place_child(node, xc, vc, x, v, m, ch, dt):
    """Put the bodies of a top-level child (a body or a binary of two bodies) at centre of mass
    ``xc``, ``vc``, propagating a binary's internal orbit by ``dt``."""
    if ch[node, 0] < 0:
        for c in range(3):
            x[node, c] = xc[c]
            v[node, c] = vc[c]
        return
    i = ch[node, 0]
    j = ch[node, 1]
    r1 = np.empty(3)
    w1 = np.empty(3)
    kepler_propagate(x[j] - x[i], v[j] - v[i], m[i] + m[j], dt, r1, w1)
    _split(xc, vc, m[i], m[j], r1, w1, x[i], v[i], x[j], v[j])


@njit(cache=True)
def kepler_propagate_hyperbolic(r0, w0, mu, dt, r1, w1):
    """Advance an unbound two-body relative orbit by ``dt >= 0`` (hyperbolic f and g).

    Parameters as :func:`kepler_propagate`; the orbit must have positive energy.
    """
    rn = np.sqrt(r0[0] ** 2 + r0[1] ** 2 + r0[2] ** 2)
    w2 = w0[0] ** 2 + w0[1] ** 2 + w0[2] ** 2
    rw = r0[0] * w0[0] + r0[1] * w0[1] + r0[2] * w0[2]
    a = 1.0 / (w2 / mu - 2.0 / rn)  # > 0 for a hyperbola
    nmot = np.sqrt(mu / a ** 3)
    ecosh = 1.0 + rn / a
    esinh = rw / np.sqrt(mu * a)
    e = np.sqrt(ecosh * ecosh - esinh * esinh)
    f0 = np.arcsinh(esinh / e)
    m1 = esinh - f0 + nmot * dt
    # e sinh F - F = M: Newton from the asymptotic guess
    ff = np.arcsinh(m1 / e) if abs(m1) < e else np.sign(m1) * np.log(2.0 * abs(m1) / e + 1.0)
    for _ in range(100):
        step = (e * np.sinh(ff) - ff - m1) / (e * np.cosh(ff) - 1.0)
        ff -= step
        if abs(step) < 1e-15 * max(1.0, abs(ff)):
            break
    dff = ff - f0
    ch1 = np.cosh(dff) - 1.0
    sh = np.sinh(dff)
    f = 1.0 - a / rn * ch1
    g = (rn / a * sh + esinh * ch1) / nmot
    for c in range(3):
        r1[c] = f * r0[c] + g * w0[c]
    r1n = np.sqrt(r1[0] ** 2 + r1[1] ** 2 + r1[2] ** 2)
    fd = -np.sqrt(mu * a) / (r1n * rn) * sh
    gd = 1.0 - a / r1n * ch1
    for c in range(3):
        w1[c] = fd * r0[c] + gd * w0[c]


@njit(cache=True)
def _simple(node, ch):
    """A body, or a binary of two bodies."""
    return ch[node, 0] < 0 or (ch[ch[node, 0], 0] < 0 and ch[ch[node, 1], 0] < 0)


@njit(cache=True)
def _binaries_isolated(node, ch, ta, te, tm, m_pert, d, jump_tol):
    """Tidal perturbation of ``m_pert`` at distance ``d`` below ``jump_tol`` on ``node`` (if it
    is a binary of two bodies)."""
    if ch[node, 0] < 0:
        return True
    apo = ta[node] * (1.0 + te[node])
    return tidal_perturbation(tm[ch[node, 0]], tm[ch[node, 1]], m_pert, apo, d) <= jump_tol


@njit(cache=True)
def kepler_jump(x, v, m, n, jump_tol, tx, tv, tm, ta, te, ch, top, nn, ntop):
    """Skip a wide excursion analytically; return the time skipped (0 if none).

    A bound top-level object ``k`` whose two children are bodies or binaries of two bodies,
    receding from each other on an orbit reaching more than 1.1 times their separation, with
    the tidal perturbation on each binary child below ``jump_tol``: its outer orbit is moved
    to the same separation on its way back (mirror point: eccentric anomaly E -> 2 pi - E) and
    each binary's internal orbit is advanced by the same time, all as unperturbed Kepler
    orbits.  With a second top-level object (an escaper: a body or a binary of two bodies,
    unbound from ``k`` and receding, whose tidal perturbation on ``k``'s outer orbit at
    apocentre and on every binary is below ``jump_tol``), the escaper moves on its hyperbola
    relative to ``k`` for the same time.  The tidal terms neglected are of order ``jump_tol``
    of the binding energies; the total energy is then restored by changing ``k``'s outer radial
    speed, which leaves every angular momentum as it was.  Returns -1 (and changes nothing the
    caller keeps) if that correction is impossible.
    """
    if n < 3 or ntop > 2:
        return 0.0
    k = top[0]
    esc = -1
    if ntop == 2:
        k = top[0] if ch[top[0], 0] >= 0 else top[1]
        esc = top[1] if k == top[0] else top[0]
        if not _simple(esc, ch):
            # both composite: jump inside the one that is not a binary of bodies
            if _simple(k, ch):
                k, esc = esc, k
            if not _simple(esc, ch):
                return 0.0
    c1 = ch[k, 0]
    c2 = ch[k, 1]
    if c1 < 0 or not _simple(c1, ch) or not _simple(c2, ch):
        return 0.0
    mo = tm[c1] + tm[c2]
    r0 = tx[c2] - tx[c1]
    w0 = tv[c2] - tv[c1]
    rn = np.sqrt(r0[0] ** 2 + r0[1] ** 2 + r0[2] ** 2)
    rw = r0[0] * w0[0] + r0[1] * w0[1] + r0[2] * w0[2]
    a_out = ta[k]
    e_out = te[k]
    if not (np.isfinite(a_out) and rw > 0.0 and a_out * (1.0 + e_out) > 1.1 * rn):
        return 0.0
    for side in range(2):
        if not _binaries_isolated(ch[k, side], ch, ta, te, tm, tm[ch[k, 1 - side]], rn,
                                  jump_tol):
            return 0.0
    re0 = np.empty(3)
    we0 = np.empty(3)
    if esc >= 0:
        eb, ae, ee, de, rve = _pair_orbit(tx[k], tv[k], tm[k], tx[esc], tv[esc], tm[esc])
        if not (eb > 0.0 and rve > 0.0):
            return 0.0
        apo_out = a_out * (1.0 + e_out)
        if de <= 2.0 * apo_out:
            return 0.0
        # the escaper is receding: its distance only grows during the jump
        if tidal_perturbation(tm[c1], tm[c2], tm[esc], apo_out, de) > jump_tol:
            return 0.0
        for side in range(2):
            if not _binaries_isolated(ch[k, side], ch, ta, te, tm, tm[esc], de - apo_out,
                                      jump_tol):
                return 0.0
        if not _binaries_isolated(esc, ch, ta, te, tm, tm[k], de, jump_tol):
            return 0.0
        for c in range(3):
            re0[c] = tx[esc, c] - tx[k, c]
            we0[c] = tv[esc, c] - tv[k, c]
    # time to the mirror point of the outer orbit
    nmot = np.sqrt(mo / a_out ** 3)
    esin = rw / np.sqrt(mo * a_out)
    ecos = 1.0 - rn / a_out
    e0 = np.arctan2(esin, ecos)
    # mean anomaly from E0 - e sin E0 to (2 pi - E0) + e sin E0
    dt = (2.0 * (np.pi - e0) + 2.0 * esin) / nmot
    e_before = kinetic_energy(v, m, n) - potential_energy(x, m, n)
    # new centre of mass of k (and of the escaper)
    xk = np.empty(3)
    vk = np.empty(3)
    if esc < 0:
        for c in range(3):
            xk[c] = tx[k, c] + tv[k, c] * dt
            vk[c] = tv[k, c]
    else:
        mt = tm[k] + tm[esc]
        re1 = np.empty(3)
        we1 = np.empty(3)
        kepler_propagate_hyperbolic(re0, we0, mt, dt, re1, we1)
        xcm = np.empty(3)
        vcm = np.empty(3)
        for c in range(3):
            vcm[c] = (tm[k] * tv[k, c] + tm[esc] * tv[esc, c]) / mt
            xcm[c] = (tm[k] * tx[k, c] + tm[esc] * tx[esc, c]) / mt + vcm[c] * dt
        xe = np.empty(3)
        ve = np.empty(3)
        _split(xcm, vcm, tm[k], tm[esc], re1, we1, xk, vk, xe, ve)
        _place_child(esc, xe, ve, x, v, m, ch, dt)
    r1 = np.empty(3)
    w1 = np.empty(3)
    kepler_propagate(r0, w0, mo, dt, r1, w1)
    xa = np.empty(3)
    va = np.empty(3)
    xb = np.empty(3)
    vb = np.empty(3)
    for attempt in range(2):
        _split(xk, vk, tm[c1], tm[c2], r1, w1, xa, va, xb, vb)
        # binaries are propagated once; on the energy-fix pass only their centre moves
        _place_child(c1, xa, va, x, v, m, ch, dt if attempt == 0 else 0.0)
        _place_child(c2, xb, vb, x, v, m, ch, dt if attempt == 0 else 0.0)
        if attempt == 0:
            # restore the energy through the outer radial speed only (keeps r x w)
            e_after = kinetic_energy(v, m, n) - potential_energy(x, m, n)
            mu = tm[c1] * tm[c2] / mo
            r1n = np.sqrt(r1[0] ** 2 + r1[1] ** 2 + r1[2] ** 2)
            wr = (r1[0] * w1[0] + r1[1] * w1[1] + r1[2] * w1[2]) / r1n
            wr2 = wr * wr - 2.0 * (e_after - e_before) / mu
            if wr2 <= 0.0:
                return -1.0
            wr_new = -np.sqrt(wr2)
            for c in range(3):
                w1[c] += (wr_new - wr) * r1[c] / r1n
    return dt


@njit(cache=True)
def _remove_body(x, v, m, rad, members, body_col, n, j):
    """Move the last body into slot ``j``; returns the new n."""
    last = n - 1
    if j != last:
        for c in range(3):
            x[j, c] = x[last, c]
            v[j, c] = v[last, c]
        m[j] = m[last]
        rad[j] = rad[last]
        members[j] = members[last]
        body_col[j] = body_col[last]
    body_col[last] = -1
    return last


@njit(cache=True)
def _binary_perturbation(x, m, n, i, j, mi, mj, apo, cx):
    """Largest tidal perturbation (:func:`tidal_perturbation`) of the other bodies on a binary
    of masses mi, mj and apocentre ``apo`` centred at ``cx`` (bodies i and j are the binary or
    its collapsed body; pass j = i for the latter)."""
    worst = 0.0
    for k in range(n):
        if k == i or k == j:
            continue
        d = np.sqrt((x[k, 0] - cx[0]) ** 2 + (x[k, 1] - cx[1]) ** 2 + (x[k, 2] - cx[2]) ** 2)
        if d <= apo:
            return np.inf
        p = tidal_perturbation(mi, mj, m[k], apo, d)
        if p > worst:
            worst = p
    return worst


@njit(cache=True)
def collapse_isolated(x, v, m, rad, members, n, tol, t, body_col, col_r, col_w, col_m,
                      col_rad, col_mem, col_t):
    """Integrate isolated binaries as one body (Fewbody's collapse of isolated tree nodes).

    A pair of point-mass bodies (neither a collapsed binary), each the other's nearest
    neighbour, bound, with a tidal perturbation below ``tol`` from every other body, is
    replaced by its centre of mass; its relative orbit is kept (``col_*`` row = the first free
    one, time ``t``) and advanced as a Kepler orbit when the pair is restored
    (:func:`expand_collapsed`).  Needs at least three bodies.  Returns the new n.
    """
    cx = np.empty(3)
    i = 0
    while i < n and n > 2:
        # nearest neighbour of i
        j = -1
        best = np.inf
        for k in range(n):
            if k != i:
                d2 = ((x[k, 0] - x[i, 0]) ** 2 + (x[k, 1] - x[i, 1]) ** 2
                      + (x[k, 2] - x[i, 2]) ** 2)
                if d2 < best:
                    best = d2
                    j = k
        ok = j > i and body_col[i] < 0 and body_col[j] < 0 and rad[i] == 0.0 and rad[j] == 0.0
        if ok:  # mutual nearest neighbours?
            for k in range(n):
                if k != j and k != i:
                    d2 = ((x[k, 0] - x[j, 0]) ** 2 + (x[k, 1] - x[j, 1]) ** 2
                          + (x[k, 2] - x[j, 2]) ** 2)
                    if d2 < best:
                        ok = False
        if ok:
            mt = m[i] + m[j]
            r = np.sqrt(best)
            w2 = 0.0
            for c in range(3):
                w2 += (v[j, c] - v[i, c]) ** 2
            energy = 0.5 * w2 - mt / r
            if energy < 0.0:
                a = -0.5 * mt / energy
                rw = 0.0
                for c in range(3):
                    rw += (x[j, c] - x[i, c]) * (v[j, c] - v[i, c])
                ecc = np.sqrt(max(0.0, (1.0 - r / a) ** 2 + rw * rw / (mt * a)))
                for c in range(3):
                    cx[c] = (m[i] * x[i, c] + m[j] * x[j, c]) / mt
                pert = _binary_perturbation(x, m, n, i, j, m[i], m[j], a * (1.0 + ecc), cx)
                if pert < tol:
                    slot = 0
                    while col_t[slot] >= 0.0:
                        slot += 1
                    for c in range(3):
                        col_r[slot, c] = x[j, c] - x[i, c]
                        col_w[slot, c] = v[j, c] - v[i, c]
                        x[i, c] = cx[c]
                        v[i, c] = (m[i] * v[i, c] + m[j] * v[j, c]) / mt
                    col_m[slot, 0] = m[i]
                    col_m[slot, 1] = m[j]
                    col_rad[slot, 0] = rad[i]
                    col_rad[slot, 1] = rad[j]
                    col_mem[slot, 0] = members[i]
                    col_mem[slot, 1] = members[j]
                    col_t[slot] = t
                    m[i] = mt
                    members[i] = members[i] | members[j]
                    body_col[i] = slot
                    n = _remove_body(x, v, m, rad, members, body_col, n, j)
                    continue  # look at the new body i again (it may pair with another)
        i += 1
    return n


@njit(cache=True)
def expand_collapsed(x, v, m, rad, members, n, tol, t, body_col, col_r, col_w, col_m,
                     col_rad, col_mem, col_t, force):
    """Restore collapsed binaries whose tidal perturbation exceeds ``tol`` (all if ``force``):
    their relative orbit is advanced from the collapse to ``t`` on its Kepler orbit.  Returns
    (n, smallest restored orbit's ``m1 m2 P / a`` or inf) -- the latter sets the next step."""
    r1 = np.empty(3)
    w1 = np.empty(3)
    cx = np.empty(3)
    scale = np.inf
    b = 0
    while b < n:
        slot = body_col[b]
        if slot < 0:
            b += 1
            continue
        m1 = col_m[slot, 0]
        m2 = col_m[slot, 1]
        mt = m1 + m2
        r = np.sqrt(col_r[slot, 0] ** 2 + col_r[slot, 1] ** 2 + col_r[slot, 2] ** 2)
        w2 = col_w[slot, 0] ** 2 + col_w[slot, 1] ** 2 + col_w[slot, 2] ** 2
        a = -0.5 * mt / (0.5 * w2 - mt / r)
        rw = 0.0
        for c in range(3):
            rw += col_r[slot, c] * col_w[slot, c]
            cx[c] = x[b, c]
        ecc = np.sqrt(max(0.0, (1.0 - r / a) ** 2 + rw * rw / (mt * a)))
        if not force and _binary_perturbation(x, m, n, b, b, m1, m2, a * (1.0 + ecc),
                                              cx) <= tol:
            b += 1
            continue
        kepler_propagate(col_r[slot], col_w[slot], mt, t - col_t[slot], r1, w1)
        k = n
        for c in range(3):
            xc = x[b, c]
            vc = v[b, c]
            x[b, c] = xc - m2 / mt * r1[c]
            v[b, c] = vc - m2 / mt * w1[c]
            x[k, c] = xc + m1 / mt * r1[c]
            v[k, c] = vc + m1 / mt * w1[c]
        m[b] = m1
        m[k] = m2
        rad[b] = col_rad[slot, 0]
        rad[k] = col_rad[slot, 1]
        members[b] = col_mem[slot, 0]
        members[k] = col_mem[slot, 1]
        body_col[b] = -1
        body_col[k] = -1
        col_t[slot] = -1.0
        n += 1
        period = 2.0 * np.pi * np.sqrt(a ** 3 / mt)
        scale = min(scale, m1 * m2 * period / a)
        # body b now holds member 1; a member is never itself collapsed, so move on
        b += 1
    return n, scale
