"""Few-body integrator core: the regularised leapfrog with Bulirsch-Stoer extrapolation.

Part of the compiled kernels of the few-body encounter engine (:mod:`physics.fewbody_kernels`
drives them; conventions there: small arrays in the encounter's centre-of-mass frame, G = 1,
the first ``n`` rows live).  Holds the energies and angular momentum of the bodies, the
forces, the logarithmic-Hamiltonian leapfrog and one Gragg-Bulirsch-Stoer step with its
step-size control.

Integrator: the logarithmic-Hamiltonian ("algorithmically regularised") leapfrog of Mikkola &
Tanikawa (1999) and Preto & Tremaine (1999) -- drift ``dt = h / (T + B)``, kick ``dt = h / U``
with ``B = -E`` -- which follows a Kepler orbit exactly in shape, through any pericentre, made
accurate to a tolerance by Gragg-Bulirsch-Stoer extrapolation in ``h^2`` (the leapfrog is
time-symmetric).  Errors are measured on every pair's separation and relative velocity, so a
tight binary far from the centre of mass is resolved as well as the outer orbit.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: Gragg-Bulirsch-Stoer: leapfrog substeps of each extrapolation row.  The leapfrog is
#: symmetric, so any sequence has an error expansion in even powers of the substep.  This
#: Romberg-like sequence (1, 2, 3, 4, 6, 8, 12, ...) needed 2-3x fewer force evaluations per
#: period than 1, 2, 3, ... or 2, 4, 6, ... for eccentric binaries (no rejected steps).
SEQUENCE = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64], dtype=np.int64)
KMAX = SEQUENCE.size


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
def _extrapolate(tab, k, seq, ny, n, t, tol, errs, ynew, err):
    """Row ``k`` of the Gragg-Bulirsch-Stoer tableau from its leapfrog result ``tab[k, 0]``
    (Neville's scheme in h^2), and its error against row ``k - 1`` relative to ``tol``.

    Returns ``(verdict, err)``: -1 the error is not finite, 1 it is within ``tol`` (the
    extrapolated state in ``ynew``), 0 go on to the next row (``err`` as given for row 0).
    """
    for j in range(1, k + 1):
        ratio = seq[k] / seq[k - j]
        den = ratio * ratio - 1.0
        for q in range(ny):
            tab[k, j, q] = tab[k, j - 1, q] + (tab[k, j - 1, q] - tab[k - 1, j - 1, q]) / den
    if k < 1:
        return 0, err
    err = _scaled_error(tab[k, k], tab[k, k - 1], n, t) / tol
    errs[k] = err
    if not np.isfinite(err):
        return -1, err
    if err <= 1.0:
        for q in range(ny):
            ynew[q] = tab[k, k, q]
        return 1, err
    return 0, err


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
        verdict, err = _extrapolate(tab, k, seq, ny, n, t, tol, errs, ynew, err)
        if verdict < 0:
            return 0, np.inf, forces
        if verdict > 0:
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


# ---------------------------------------------------------------------------
# the 2.5 post-Newtonian term (gravitational-wave reaction) between black holes
# ---------------------------------------------------------------------------
def pn_state_size(n: int) -> int:
    """Length of the extrapolated state of :func:`bs_step_pn` for ``n`` bodies: x (3n),
    v (3n), t, B, w (3n), and the angular momentum the 2.5PN term took (3)."""
    return 9 * n + 5


@njit(cache=True)
def pn25_accelerations(x, w, m, n, is_bh, clight, fpn):
    """The 2.5PN (radiation-reaction) accelerations between every pair of black holes.

    For the pair ``i, j`` with ``r = x_j - x_i``, ``v = w_j - w_i``, ``n = r / |r|``,
    ``M = m_i + m_j``, ``nu = m_i m_j / M^2`` (G = 1)::

        A = -(8/5) nu (M/r) rdot (3 v^2 + (17/3) M/r) / c^5
        B =  (8/5) nu (M/r) (v^2 + 3 M/r) / c^5
        a_i += m_j (A n + B v) / r^2,   a_j -= m_i (A n + B v) / r^2

    (Kidder 1995's relative acceleration ``-(M/r^2) (A n + B v)`` in the gauge Fewbody's
    ``fb_nonks_func`` uses, as CMC-COSMIC's; its orbit average is Peters' 1964 loss).  Momentum
    is conserved; pairs with a body that is not a black hole get nothing.

    Parameters
    ----------
    x, w : ndarray, shape (nmax, 3)
        Positions and the velocities the term is evaluated with.
    m : ndarray, shape (nmax,)
    n : int
    is_bh : ndarray of int64, shape (nmax,)
        1 for a black hole.
    clight : float
        The speed of light in the units of ``x``, ``w`` (G = 1).
    fpn : ndarray, shape (nmax, 3)
        Out: the accelerations.
    """
    c5 = clight ** 5
    for i in range(n):
        for c in range(3):
            fpn[i, c] = 0.0
    for i in range(n):
        if is_bh[i] == 0:
            continue
        for j in range(i + 1, n):
            if is_bh[j] == 0:
                continue
            rx = x[j, 0] - x[i, 0]
            ry = x[j, 1] - x[i, 1]
            rz = x[j, 2] - x[i, 2]
            vx = w[j, 0] - w[i, 0]
            vy = w[j, 1] - w[i, 1]
            vz = w[j, 2] - w[i, 2]
            r = np.sqrt(rx * rx + ry * ry + rz * rz)
            nx = rx / r
            ny = ry / r
            nz = rz / r
            rdot = nx * vx + ny * vy + nz * vz
            v2 = vx * vx + vy * vy + vz * vz
            mt = m[i] + m[j]
            nu = m[i] * m[j] / (mt * mt)
            gm = mt / r
            a_n = -1.6 * nu * gm * rdot * (3.0 * v2 + (17.0 / 3.0) * gm) / c5
            b_v = 1.6 * nu * gm * (v2 + 3.0 * gm) / c5
            inv2 = 1.0 / (r * r)
            fx = (a_n * nx + b_v * vx) * inv2
            fy = (a_n * ny + b_v * vy) * inv2
            fz = (a_n * nz + b_v * vz) * inv2
            fpn[i, 0] += m[j] * fx
            fpn[i, 1] += m[j] * fy
            fpn[i, 2] += m[j] * fz
            fpn[j, 0] -= m[i] * fx
            fpn[j, 1] -= m[i] * fy
            fpn[j, 2] -= m[i] * fz


@njit(cache=True)
def _half_kick_pn(x, v, m, n, acc, fpn, dtk, dl):
    """``v += dtk (acc + fpn)`` with ``fpn`` held fixed; returns the change of ``B = -E``:
    ``-dtk sum m <v> . fpn`` with ``<v>`` the mean of the velocities before and after (time
    symmetric), and adds the angular momentum the term gave, ``dtk sum m x x fpn``, to
    ``dl`` (3,)."""
    db = 0.0
    for i in range(n):
        for c in range(3):
            v0 = v[i, c]
            v[i, c] = v0 + dtk * (acc[i, c] + fpn[i, c])
            db -= dtk * m[i] * 0.5 * (v0 + v[i, c]) * fpn[i, c]
        dl[0] += dtk * m[i] * (x[i, 1] * fpn[i, 2] - x[i, 2] * fpn[i, 1])
        dl[1] += dtk * m[i] * (x[i, 2] * fpn[i, 0] - x[i, 0] * fpn[i, 2])
        dl[2] += dtk * m[i] * (x[i, 0] * fpn[i, 1] - x[i, 1] * fpn[i, 0])
    return db


@njit(cache=True)
def leapfrog_pn(x, v, w, m, n, bconst, hstep, nsub, acc, fpn, is_bh, clight, out_b):
    """:func:`leapfrog` with the 2.5PN term: the velocity-dependent kick by the auxiliary
    velocity ``w`` (Hellström & Mikkola 2010's generalised midpoint, as Mikkola & Merritt 2008
    add post-Newtonian terms to the logarithmic-Hamiltonian leapfrog): ``v`` half-kicked with
    the term at ``w``, ``w`` kicked with it at ``v``, ``v`` again at ``w``; every map is
    symmetric, so the step stays time symmetric and extrapolates in ``h^2``.  ``B = -E``
    (Newtonian) is no longer constant: it is advanced by the work the term does (the radiated
    energy) and the drift uses it.

    Returns the physical time advanced (< 0: failed); ``out_b[0]`` the final ``B``,
    ``out_b[1:4]`` the angular momentum the term gave over the step.
    """
    h = hstep / nsub
    b = bconst
    dl = out_b[1:4]
    dl[:] = 0.0
    tb = kinetic_energy(v, m, n) + b
    if not tb > 0.0:
        return -1.0
    t = 0.5 * h / tb
    for i in range(n):
        for c in range(3):
            x[i, c] += t * v[i, c]
    for s in range(nsub):
        u = _accelerations(x, m, n, acc)
        dtk = h / u
        pn25_accelerations(x, w, m, n, is_bh, clight, fpn)
        b += _half_kick_pn(x, v, m, n, acc, fpn, 0.5 * dtk, dl)
        pn25_accelerations(x, v, m, n, is_bh, clight, fpn)
        for i in range(n):
            for c in range(3):
                w[i, c] += dtk * (acc[i, c] + fpn[i, c])
        pn25_accelerations(x, w, m, n, is_bh, clight, fpn)
        b += _half_kick_pn(x, v, m, n, acc, fpn, 0.5 * dtk, dl)
        tb = kinetic_energy(v, m, n) + b
        if not tb > 0.0:
            return -1.0
        dt = (h if s < nsub - 1 else 0.5 * h) / tb
        for i in range(n):
            for c in range(3):
                x[i, c] += dt * v[i, c]
        t += dt
    out_b[0] = b
    return t


@njit(cache=True)
def _pack_pn(x, v, w, t, b, dl, n, y):
    _pack(x, v, t, n, y)
    k = 6 * n + 1
    y[k] = b
    k += 1
    for i in range(n):
        for c in range(3):
            y[k] = w[i, c]
            k += 1
    for c in range(3):
        y[k + c] = dl[c]


@njit(cache=True)
def bs_step_pn(x, v, t, m, n, bconst, hstep, tol, kmax, seq, ws_x, ws_v, ws_w, acc, fpn,
               is_bh, clight, tab, ynew, errs):
    """:func:`bs_step` with the 2.5PN term (:func:`leapfrog_pn`): the extrapolated state is
    ``(x, v, t, B, w, dL)`` (:func:`pn_state_size`), ``w`` starting equal to ``v``; the error
    is measured as there.  ``ynew[6 n + 1]`` is the new ``B``, ``ynew[9 n + 2: 9 n + 5]``
    the angular momentum the term gave over the step."""
    ny = 9 * n + 5
    forces = 0
    err = np.inf
    out_b = np.empty(4)
    for k in range(kmax):
        nsub = seq[k]
        for i in range(n):
            for c in range(3):
                ws_x[i, c] = x[i, c]
                ws_v[i, c] = v[i, c]
                ws_w[i, c] = v[i, c]
        dt = leapfrog_pn(ws_x, ws_v, ws_w, m, n, bconst, hstep, nsub, acc, fpn, is_bh, clight,
                         out_b)
        forces += nsub
        if dt < 0.0:
            return 0, np.inf, forces
        _pack_pn(ws_x, ws_v, ws_w, t + dt, out_b[0], out_b[1:4], n, tab[k, 0])
        verdict, err = _extrapolate(tab, k, seq, ny, n, t, tol, errs, ynew, err)
        if verdict < 0:
            return 0, np.inf, forces
        if verdict > 0:
            return k + 1, err, forces
    return 0, err, forces
