"""Few-body classification: the hierarchy of the bodies and whether the encounter is over.

Part of the compiled kernels of the few-body encounter engine (:mod:`physics.fewbody_kernels`;
conventions there).  Holds the two-body orbit of a pair, the tidal perturbation, the
Mardling & Aarseth (2001) stability criterion and :func:`classify`.

Classification: the hierarchy built by pairing the most bound top-level pair, repeatedly (as
Fewbody does); the encounter is over when the top-level objects are unbound and receding, the
tidal perturbation on every bound top-level object is below the tolerance, and every
hierarchical triple is stable by Mardling & Aarseth (2001).
"""

from __future__ import annotations

import numpy as np
from numba import njit


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
