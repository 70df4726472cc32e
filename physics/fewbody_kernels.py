"""Compiled kernels of the few-body encounter engine (see :mod:`physics.fewbody`).

Everything here works on small arrays in the encounter's centre-of-mass frame with G = 1:
``x``, ``v`` of shape ``(nmax, 3)``, masses ``m`` and radii ``rad`` of shape ``(nmax,)``, of which
the first ``n`` rows are live bodies.  ``members[i]`` is a bit mask of the input bodies that
body ``i`` is made of (a merger ORs them).

Integrator: the logarithmic-Hamiltonian ("algorithmically regularised") leapfrog of Mikkola &
Tanikawa (1999) and Preto & Tremaine (1999) -- drift ``dt = h / (T + B)``, kick ``dt = h / U``
with ``B = -E`` -- which follows a Kepler orbit exactly in shape, through any pericentre, made
accurate to a tolerance by Gragg-Bulirsch-Stoer extrapolation in ``h^2`` (the leapfrog is
time-symmetric).  Errors are measured on every pair's separation and relative velocity, so a
tight binary far from the centre of mass is resolved as well as the outer orbit.

Classification: the hierarchy built by pairing the most bound top-level pair, repeatedly (as
Fewbody does); the encounter is over when the top-level objects are unbound and receding, the
tidal perturbation on every bound top-level object is below the tolerance, and every
hierarchical triple is stable by Mardling & Aarseth (2001).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# status codes returned by integrate_encounter
STATUS_DONE = 0
STATUS_TIME_LIMIT = 1
STATUS_STEP_LIMIT = 2
STATUS_FAILED = 3

#: Gragg-Bulirsch-Stoer: leapfrog substeps of each extrapolation row.  The leapfrog is
#: symmetric, so any sequence has an error expansion in even powers of the substep.  This
#: Romberg-like sequence (1, 2, 3, 4, 6, 8, 12, ...) needed 2-3x fewer force evaluations per
#: period than 1, 2, 3, ... or 2, 4, 6, ... for eccentric binaries (no rejected steps).
SEQUENCE = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64], dtype=np.int64)
KMAX = SEQUENCE.size

# indices into the integer statistics array
IST_STEPS = 0
IST_REJECTED = 1
IST_FORCES = 2
IST_MERGERS = 3
IST_CLASSIFY = 4
IST_JUMPS = 5
IST_COLLAPSES = 6
N_ISTATS = 7
#: An isolated binary (tidal perturbation below the collapse tolerance) is integrated as one
#: body until its perturbation exceeds this many times that tolerance (hysteresis).
EXPAND_FACTOR = 10.0


@njit(cache=True)
def kinetic_energy(v, m, n):
    """Kinetic energy of the first ``n`` bodies."""
    t = 0.0
    for i in range(n):
        t += 0.5 * m[i] * (v[i, 0] * v[i, 0] + v[i, 1] * v[i, 1] + v[i, 2] * v[i, 2])
    return t


@njit(cache=True)
def potential_energy(x, m, n):
    """``U = sum_{i<j} m_i m_j / r_ij`` (positive; the potential energy is ``-U``)."""
    u = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = x[j, 0] - x[i, 0]
            dy = x[j, 1] - x[i, 1]
            dz = x[j, 2] - x[i, 2]
            u += m[i] * m[j] / np.sqrt(dx * dx + dy * dy + dz * dz)
    return u


@njit(cache=True)
def angular_momentum(x, v, m, n, out):
    """Total angular momentum of the first ``n`` bodies into ``out`` (3,)."""
    out[:] = 0.0
    for i in range(n):
        out[0] += m[i] * (x[i, 1] * v[i, 2] - x[i, 2] * v[i, 1])
        out[1] += m[i] * (x[i, 2] * v[i, 0] - x[i, 0] * v[i, 2])
        out[2] += m[i] * (x[i, 0] * v[i, 1] - x[i, 1] * v[i, 0])


@njit(cache=True)
def _accelerations(x, m, n, acc):
    """Fill ``acc`` and return ``U`` (positive)."""
    u = 0.0
    for i in range(n):
        acc[i, 0] = 0.0
        acc[i, 1] = 0.0
        acc[i, 2] = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = x[j, 0] - x[i, 0]
            dy = x[j, 1] - x[i, 1]
            dz = x[j, 2] - x[i, 2]
            r2 = dx * dx + dy * dy + dz * dz
            inv = 1.0 / np.sqrt(r2)
            inv3 = inv * inv * inv
            u += m[i] * m[j] * inv
            acc[i, 0] += m[j] * dx * inv3
            acc[i, 1] += m[j] * dy * inv3
            acc[i, 2] += m[j] * dz * inv3
            acc[j, 0] -= m[i] * dx * inv3
            acc[j, 1] -= m[i] * dy * inv3
            acc[j, 2] -= m[i] * dz * inv3
    return u


@njit(cache=True)
def _drift(x, v, m, n, bconst, h):
    """Drift by ``h`` in the regularised time: ``dt = h / (T + B)``; returns dt (< 0: fail)."""
    tb = kinetic_energy(v, m, n) + bconst
    if not tb > 0.0:
        return -1.0
    dt = h / tb
    for i in range(n):
        for c in range(3):
            x[i, c] += dt * v[i, c]
    return dt


@njit(cache=True)
def leapfrog(x, v, m, n, bconst, hstep, nsub, acc):
    """``nsub`` logarithmic-Hamiltonian DKD leapfrog steps of ``hstep / nsub`` in place.

    Returns
    -------
    float
        Physical time advanced; negative if ``T + B`` went non-positive (step too large).
    """
    h = hstep / nsub
    t = _drift(x, v, m, n, bconst, 0.5 * h)
    if t < 0.0:
        return -1.0
    for s in range(nsub):
        u = _accelerations(x, m, n, acc)
        dtk = h / u
        for i in range(n):
            for c in range(3):
                v[i, c] += dtk * acc[i, c]
        dt = _drift(x, v, m, n, bconst, h if s < nsub - 1 else 0.5 * h)
        if dt < 0.0:
            return -1.0
        t += dt
    return t


@njit(cache=True)
def _pack(x, v, t, n, y):
    k = 0
    for i in range(n):
        for c in range(3):
            y[k] = x[i, c]
            k += 1
    for i in range(n):
        for c in range(3):
            y[k] = v[i, c]
            k += 1
    y[k] = t


@njit(cache=True)
def _unpack(y, n, x, v):
    k = 0
    for i in range(n):
        for c in range(3):
            x[i, c] = y[k]
            k += 1
    for i in range(n):
        for c in range(3):
            v[i, c] = y[k]
            k += 1
    return y[k]


@njit(cache=True)
def _scaled_error(ya, yb, n, t0):
    """Largest relative difference of pair separations, relative velocities and time step."""
    off = 3 * n
    err = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            d2 = 0.0
            s2 = 0.0
            w2 = 0.0
            q2 = 0.0
            for c in range(3):
                sa = ya[3 * j + c] - ya[3 * i + c]
                sb = yb[3 * j + c] - yb[3 * i + c]
                d2 += (sa - sb) * (sa - sb)
                s2 += sa * sa
                wa = ya[off + 3 * j + c] - ya[off + 3 * i + c]
                wb = yb[off + 3 * j + c] - yb[off + 3 * i + c]
                w2 += (wa - wb) * (wa - wb)
                q2 += wa * wa
            e = np.sqrt(d2 / s2)
            if e > err:
                err = e
            if q2 > 0.0:
                e = np.sqrt(w2 / q2)
                if e > err:
                    err = e
    k = 6 * n
    dts = abs(ya[k] - t0)
    if dts > 0.0:
        e = abs(ya[k] - yb[k]) / dts
        if e > err:
            err = e
    return err


@njit(cache=True)
def bs_step(x, v, t, m, n, bconst, hstep, tol, kmax, seq, ws_x, ws_v, acc, tab, ynew, errs):
    """One Gragg-Bulirsch-Stoer step of the logarithmic-Hamiltonian leapfrog.

    Parameters
    ----------
    x, v : ndarray, shape (nmax, 3)
        State at the start (not modified).
    t : float
        Physical time at the start.
    hstep : float
        Step in the regularised time ``s``.
    tol : float
        Relative tolerance on pair separations, relative velocities and the time step.
    kmax : int
        Most extrapolation rows.
    seq : ndarray of int64
        Leapfrog substeps of each row (:data:`SEQUENCE`).
    ws_x, ws_v, acc : ndarray, shape (nmax, 3)
        Work space.
    tab : ndarray, shape (KMAX, KMAX, 6 nmax + 1)
        Extrapolation tableau (work space).
    ynew : ndarray, shape (6 nmax + 1,)
        Extrapolated state ``(x, v, t)`` when converged.
    errs : ndarray, shape (KMAX,)
        Out: error estimate of each row computed (relative to ``tol``).

    Returns
    -------
    k : int
        Row (1-based) at which the step converged, 0 if it did not.
    err : float
        Error estimate relative to ``tol`` at that row (or the last one).
    forces : int
        Force evaluations spent.
    """
    ny = 6 * n + 1
    forces = 0
    err = np.inf
    for k in range(kmax):
        nsub = seq[k]
        for i in range(n):
            for c in range(3):
                ws_x[i, c] = x[i, c]
                ws_v[i, c] = v[i, c]
        dt = leapfrog(ws_x, ws_v, m, n, bconst, hstep, nsub, acc)
        forces += nsub
        if dt < 0.0:
            return 0, np.inf, forces
        _pack(ws_x, ws_v, t + dt, n, tab[k, 0])
        for j in range(1, k + 1):
            ratio = seq[k] / seq[k - j]
            den = ratio * ratio - 1.0
            for q in range(ny):
                tab[k, j, q] = tab[k, j - 1, q] + (tab[k, j - 1, q] - tab[k - 1, j - 1, q]) / den
        if k >= 1:
            err = _scaled_error(tab[k, k], tab[k, k - 1], n, t) / tol
            errs[k] = err
            if not np.isfinite(err):
                return 0, np.inf, forces
            if err <= 1.0:
                for q in range(ny):
                    ynew[q] = tab[k, k, q]
                return k + 1, err, forces
    return 0, err, forces


@njit(cache=True)
def _next_step_factor(k, errs, seq, kmax):
    """Step-size factor after a step accepted at row ``k`` (1-based), by least work per unit step.

    The error of row ``j`` scales as ``h^(2j - 1)``; each candidate row (``k - 1``, ``k``) gets
    the step that would bring its error to 0.65 of the tolerance, and the one with the least
    force evaluations per unit step wins; if that is row ``k`` and it is clearly cheaper than
    ``k - 1``, aim one row higher with the step scaled by the work ratio (as in Hairer &
    Wanner's ODEX).
    """
    best_w = np.inf
    best_f = 1.0
    best_j = k
    w_prev = np.inf
    work = 0.0
    for j in range(1, k + 1):
        work += seq[j - 1]
        if j < 2 or j < k - 1:
            continue
        e = max(errs[j - 1], 1e-12)
        f = 0.94 * (0.65 / e) ** (1.0 / (2 * j - 1))
        f = min(8.0, max(0.1, f))
        w = work / f
        if j == k - 1:
            w_prev = w
        if w < best_w:
            best_w = w
            best_f = f
            best_j = j
    if best_j == k and k < kmax - 1 and best_w < 0.9 * w_prev:
        best_f *= (work + seq[k]) / work
    return min(8.0, best_f)


@njit(cache=True)
def _pair_orbit(xi, vi, mi, xj, vj, mj):
    """Two-body energy, semi-major axis, eccentricity of a pair (a = inf if unbound)."""
    mt = mi + mj
    mu = mi * mj / mt
    rx = xj[0] - xi[0]
    ry = xj[1] - xi[1]
    rz = xj[2] - xi[2]
    wx = vj[0] - vi[0]
    wy = vj[1] - vi[1]
    wz = vj[2] - vi[2]
    r = np.sqrt(rx * rx + ry * ry + rz * rz)
    w2 = wx * wx + wy * wy + wz * wz
    eps = 0.5 * w2 - mt / r
    hx = ry * wz - rz * wy
    hy = rz * wx - rx * wz
    hz = rx * wy - ry * wx
    h2 = hx * hx + hy * hy + hz * hz
    e2 = 1.0 + 2.0 * eps * h2 / (mt * mt)
    e = np.sqrt(e2) if e2 > 0.0 else 0.0
    a = -mt / (2.0 * eps) if eps < 0.0 else np.inf
    return mu * eps, a, e, r, rx * wx + ry * wy + rz * wz


@njit(cache=True)
def _mutual_inclination(tx, tv, tm, inner, outer, ch):
    """Angle between the inner binary's and the outer orbit's angular momenta."""
    c1 = ch[inner, 0]
    c2 = ch[inner, 1]
    li = np.empty(3)
    lo = np.empty(3)
    rin = tx[c2] - tx[c1]
    win = tv[c2] - tv[c1]
    rout = tx[outer] - tx[inner]
    wout = tv[outer] - tv[inner]
    li[0] = rin[1] * win[2] - rin[2] * win[1]
    li[1] = rin[2] * win[0] - rin[0] * win[2]
    li[2] = rin[0] * win[1] - rin[1] * win[0]
    lo[0] = rout[1] * wout[2] - rout[2] * wout[1]
    lo[1] = rout[2] * wout[0] - rout[0] * wout[2]
    lo[2] = rout[0] * wout[1] - rout[1] * wout[0]
    ni = np.sqrt(li[0] ** 2 + li[1] ** 2 + li[2] ** 2)
    no = np.sqrt(lo[0] ** 2 + lo[1] ** 2 + lo[2] ** 2)
    if ni == 0.0 or no == 0.0:
        return 0.0
    c = (li[0] * lo[0] + li[1] * lo[1] + li[2] * lo[2]) / (ni * no)
    c = min(1.0, max(-1.0, c))
    return np.arccos(c)


@njit(cache=True)
def tidal_perturbation(m1, m2, m_pert, apo, d):
    """Tidal force of ``m_pert`` at distance ``d`` relative to a binary's internal force.

    ``2 (m1 + m2) m_pert apo / d^3`` against ``m1 m2 / apo^2`` at apocentre ``apo`` (Fewbody's
    ratio of forces, as CMC uses it for the starting distance).
    """
    return 2.0 * (m1 + m2) * m_pert * apo ** 3 / (m1 * m2 * d ** 3)


@njit(cache=True)
def mardling_aarseth_stable(a_in, a_out, e_out, q_out, incl):
    """Mardling & Aarseth (2001) stability of a hierarchical triple.

    Stable when the outer pericentre ``a_out (1 - e_out)`` is at least
    ``2.8 a_in (1 - 0.3 i / pi) [(1 + q_out)(1 + e_out) / sqrt(1 - e_out)]^(2/5)``,
    ``q_out = m_out / m_in`` and ``i`` the mutual inclination (rad); ``q_out > 5`` counts as
    unstable, as in Fewbody (outside the fit's range).
    """
    if not (e_out < 1.0) or not np.isfinite(a_out) or q_out > 5.0:
        return False
    crit = 2.8 * a_in * (1.0 - 0.3 * incl / np.pi) * (
        (1.0 + q_out) * (1.0 + e_out) / np.sqrt(1.0 - e_out)
    ) ** 0.4
    return a_out * (1.0 - e_out) >= crit


@njit(cache=True)
def classify(x, v, m, rad, n, tidal_tol, tx, tv, tm, ta, te, ch, top):
    """Build the hierarchy of the first ``n`` bodies and decide whether the encounter is over.

    Parameters
    ----------
    x, v, m, rad, n
        Current bodies.
    tidal_tol : float
        Largest tidal perturbation (:func:`tidal_perturbation`) a bound top-level object may
        feel from any other top-level object.
    tx, tv : ndarray, shape (2 nmax - 1, 3)
        Out: centre-of-mass position and velocity of every node (leaves first).
    tm, ta, te : ndarray, shape (2 nmax - 1,)
        Out: node mass, semi-major axis and eccentricity of its orbit (0 for leaves).
    ch : ndarray of int64, shape (2 nmax - 1, 2)
        Out: the two children of a node, -1 for leaves.
    top : ndarray of int64, shape (nmax,)
        Out: the top-level nodes.

    Returns
    -------
    done : bool
    n_nodes : int
    n_top : int
    """
    for i in range(n):
        for c in range(3):
            tx[i, c] = x[i, c]
            tv[i, c] = v[i, c]
        tm[i] = m[i]
        ta[i] = 0.0
        te[i] = 0.0
        ch[i, 0] = -1
        ch[i, 1] = -1
        top[i] = i
    nn = n
    ntop = n
    while ntop >= 2:
        best = 0.0
        bp = -1
        bq = -1
        for p in range(ntop):
            for q in range(p + 1, ntop):
                ip = top[p]
                iq = top[q]
                eb, a, e, r, rv = _pair_orbit(tx[ip], tv[ip], tm[ip], tx[iq], tv[iq], tm[iq])
                if eb < best:
                    best = eb
                    bp = p
                    bq = q
        if bp < 0:
            break
        ip = top[bp]
        iq = top[bq]
        eb, a, e, r, rv = _pair_orbit(tx[ip], tv[ip], tm[ip], tx[iq], tv[iq], tm[iq])
        mt = tm[ip] + tm[iq]
        for c in range(3):
            tx[nn, c] = (tm[ip] * tx[ip, c] + tm[iq] * tx[iq, c]) / mt
            tv[nn, c] = (tm[ip] * tv[ip, c] + tm[iq] * tv[iq, c]) / mt
        tm[nn] = mt
        ta[nn] = a
        te[nn] = e
        ch[nn, 0] = ip
        ch[nn, 1] = iq
        # replace p by the new node, drop q
        top[bp] = nn
        top[bq] = top[ntop - 1]
        ntop -= 1
        nn += 1

    # 1. top-level objects recede from each other, and each is unbound from (and receding
    # from) the centre of mass of all the others: pairwise unbound singles can still form a
    # bound system (a democratic resonance caught with everyone moving apart)
    for p in range(ntop):
        for q in range(p + 1, ntop):
            ip = top[p]
            iq = top[q]
            eb, a, e, r, rv = _pair_orbit(tx[ip], tv[ip], tm[ip], tx[iq], tv[iq], tm[iq])
            if rv <= 0.0:
                return False, nn, ntop
    if ntop >= 3:
        rest_x = np.empty(3)
        rest_v = np.empty(3)
        for p in range(ntop):
            ip = top[p]
            mr = 0.0
            rest_x[:] = 0.0
            rest_v[:] = 0.0
            for q in range(ntop):
                if q != p:
                    iq = top[q]
                    mr += tm[iq]
                    for c in range(3):
                        rest_x[c] += tm[iq] * tx[iq, c]
                        rest_v[c] += tm[iq] * tv[iq, c]
            rest_x /= mr
            rest_v /= mr
            eb, a, e, r, rv = _pair_orbit(tx[ip], tv[ip], tm[ip], rest_x, rest_v, mr)
            if not (eb > 0.0 and rv > 0.0):
                return False, nn, ntop
    # 2. tidal perturbation on every bound top-level object
    for p in range(ntop):
        ip = top[p]
        if ch[ip, 0] < 0:
            continue
        apo = ta[ip] * (1.0 + te[ip])
        for q in range(ntop):
            if q == p:
                continue
            iq = top[q]
            dx = tx[iq, 0] - tx[ip, 0]
            dy = tx[iq, 1] - tx[ip, 1]
            dz = tx[iq, 2] - tx[ip, 2]
            d = np.sqrt(dx * dx + dy * dy + dz * dz)
            c1 = ch[ip, 0]
            c2 = ch[ip, 1]
            if tidal_perturbation(tm[c1], tm[c2], tm[iq], apo, d) > tidal_tol:
                return False, nn, ntop
    # 3. every hierarchy stable; binaries of finite-size bodies not in contact
    for k in range(n, nn):
        c1 = ch[k, 0]
        c2 = ch[k, 1]
        if ch[c1, 0] < 0 and ch[c2, 0] < 0:
            if ta[k] * (1.0 - te[k]) <= rad[c1] + rad[c2]:
                return False, nn, ntop
            continue
        # the inner object is the composite child; of two binaries, the wider (as Fewbody)
        inner = c1
        outer = c2
        if ch[c1, 0] < 0 or (ch[c2, 0] >= 0 and ta[c2] > ta[c1]):
            inner = c2
            outer = c1
        incl = _mutual_inclination(tx, tv, tm, inner, outer, ch)
        if not mardling_aarseth_stable(ta[inner], ta[k], te[k], tm[outer] / tm[inner], incl):
            return False, nn, ntop
    return True, nn, ntop


@njit(cache=True)
def _merge_contacts(x, v, m, rad, members, n, xold, vold, radius_factor):
    """Merge pairs in contact (or whose two-body pericentre since the last step touched).

    Returns the new body count.  A merged body keeps mass, centre of mass and momentum; its
    radius is ``radius_factor * (r_1 + r_2)``.
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
                    for c in range(3):
                        x[i, c] = (m[i] * x[i, c] + m[j] * x[j, c]) / mt
                        v[i, c] = (m[i] * v[i, c] + m[j] * v[j, c]) / mt
                    m[i] = mt
                    rad[i] = radius_factor * rsum
                    members[i] |= members[j]
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
                    n -= 1
                    merged = True
                    break
    return n


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


@njit(cache=True, nogil=True)
def integrate_encounter(x, v, m, rad, members, n, hstep, tol, kmax, seq, tidal_tol, jump_tol,
                        t_max, max_steps, classify_every, radius_factor,
                        tx, tv, tm, ta, te, ch, top, istats, fstats, collapse_tol=0.0):
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
    fstats : ndarray of float64, shape (4,)
        Out: end time, energy lost in mergers (E_after - E_before summed), final n_nodes,
        final n_top.

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
    tab = np.empty((KMAX, KMAX, 6 * nmax + 1))
    ynew = np.empty(6 * nmax + 1)
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
    collapsing = collapse_tol > 0.0 and point_masses
    de_merge = 0.0
    t = 0.0
    bconst = potential_energy(x, m, n) - kinetic_energy(v, m, n)
    status = STATUS_DONE
    since = 0
    nn = n
    ntop = n
    while True:
        k, err, nf = bs_step(x, v, t, m, n, bconst, hstep, tol, kmax, seq, ws_x, ws_v, acc, tab,
                             ynew, errs)
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
            n_new = _merge_contacts(x, v, m, rad, members, n, xold, vold, radius_factor)
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
    return status, n
