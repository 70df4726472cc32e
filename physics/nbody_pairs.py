"""Close pairs of the direct N-body integrator (issue 50, "Close pairs").

A hard binary makes the Hermite integrator of :mod:`physics.nbody` take ever smaller steps.
As NBODY's treatment of KS pairs (Aarseth 2003, ch. 5) and Fewbody's collapse of isolated
binaries (:func:`physics.fewbody_kepler.collapse_isolated`), a bound pair whose tidal
perturbation from the rest of the system is small is taken out of the Hermite integration:
the two stars are replaced by their centre of mass (one integrated body of mass ``m_i +
m_j``), and their relative orbit is carried apart, at every block step of the centre of
mass, by exact Kepler drifts with tidal kicks from the pair's perturbers
(:mod:`physics.nbody_perturbed`; the perturbers get the pair's reaction back).  With no
perturber above :data:`physics.nbody_perturbed.PERTURBER_GAMMA` the step is one Kepler
drift (:func:`physics.fewbody_kepler.kepler_propagate`, Lagrange f and g).

Units: N-body units, G = 1, as :mod:`physics.nbody`.

Criteria
--------
* Forming (after a block step, :func:`update_pairs`): an active single body ``i`` whose new
  step is at or below ``pair_dt``, whose nearest neighbour ``j`` (at the block time) is a
  single body also at the block time, bound to it (``w^2/2 - (m_i + m_j)/r < 0``), with the
  tidal perturbation ``gamma = max_k 2 m_k R^3 / ((m_i + m_j) d_k^3)`` (``R = a (1 + e)`` the
  apocentre, ``d_k`` the distance of body ``k`` from the pair's centre of mass, over every
  other integrated body) below ``pair_gamma``.
* Advancing: at each of the centre of mass's block steps the relative orbit is advanced
  from ``pair_t0`` (the previous one) to the block time (:mod:`physics.nbody_perturbed`); the
  centre of mass's next step is at most the shortest of its perturbers'.
* Resolving: then ``gamma`` is recomputed; above :data:`HYSTERESIS` ``pair_gamma`` the two
  stars are put back, at the block time, with the relative orbit, fresh forces and first
  steps.

Layout
------
The state's per-body arrays (``mass``, ``pos``, ... of :class:`physics.nbody.NBodyState`) hold
only the integrated bodies, compacted, in the order of ``ids`` (the original index of each
body; for a pair's body its first member's, so ``ids`` stays sorted and a state without
pairs is laid out as before).  The pairs are a small structure of arrays: ``pair_i <
pair_j`` (original indices), ``pair_r``, ``pair_w`` (relative position and velocity ``x_j -
x_i``, ``v_j - v_i`` at time ``pair_t0``); ``star_mass`` holds the masses of all original
stars.  Only loops over the pairs are in Python; the force kernels are unchanged.

Limits: the two-body motion is exact only for ``eps = 0`` (with softening no pair is
formed); a pair whose perturbation is above ``pair_gamma`` (a close encounter with a third
body) stays in the Hermite integration with small steps (and can still stop it at
``dt_min``); pairs of pairs, triples and other multiples are not regularised.
"""

from __future__ import annotations

import math

import numpy as np

from physics.fewbody_classify import _pair_orbit
from physics.fewbody_kepler import kepler_propagate
from physics.nbody_kernels import quantise_down
from physics.nbody_perturbed import (
    approach_step,
    max_perturbation,
    perturbed_kepler,
    select_perturbers,
    substeps,
)

__all__ = ["HYSTERESIS", "PAIR_DT_LEVELS", "PAIR_GAMMA", "anchor_pairs", "default_pair_dt",
           "expand", "init_pairs", "perturbation", "update_pairs"]

#: Default ``pair_dt = dt_max / 2^PAIR_DT_LEVELS``: with dt_max = 1/8 (the default output
#: interval) 2^-15 = 3.1e-5 N-body units, some 10^5 times shorter than a crossing time and
#: below the steps of the single stars of a Plummer core at N <= 10^4; only stars in tight
#: binaries (periods of order 100 such steps) get there.
PAIR_DT_LEVELS = 12
#: Default tidal perturbation below which a bound close pair is carried as a Kepler orbit
#: under its perturbers' tide (physics.nbody_perturbed): 1e-4.  The post-collapse core of the
#: N = 1000 Plummer run (4 time units from its checkpoint at 16.4 t_rh0, docs/method.md):
#: |dE| 4e-7 in 37 s at 1e-4, 4e-6 in 41 s at 1e-3, 8e-7 in 113 s at 1e-5.  The three-body
#: flyby of tests/test_nbody_fewbody.py against the pairs-off run: within 3.5e-5 (a, e, the
#: single's velocity, energy and angular momentum) at 1e-3, 2.5e-6 at 1e-4.  (Before the tide
#: was applied, pairs were unperturbed Kepler orbits and this was 1e-5.)
PAIR_GAMMA = 1e-4
#: A pair is resolved when its perturbation exceeds ``HYSTERESIS x pair_gamma``.
HYSTERESIS = 2.0
_EMPTY_INT = np.zeros(0, dtype=np.int64)
_ORIGIN = np.zeros(3)


def default_pair_dt(dt_max: float) -> float:
    """``dt_max / 2^PAIR_DT_LEVELS`` (a power of two when ``dt_max`` is one)."""
    return math.ldexp(float(dt_max), -PAIR_DT_LEVELS)


def init_pairs(state, star_mass=None) -> None:
    """Give ``state`` an empty pair structure (no pairs: ``ids = arange(n)``), keeping any
    part it has already (a restored checkpoint)."""
    n = state.mass.size
    if state.ids is None:
        state.ids = np.arange(n, dtype=np.int64)
    if state.star_mass is None:
        state.star_mass = state.mass.copy() if star_mass is None else star_mass
    if state.pair_i is None:
        state.pair_i = _EMPTY_INT.copy()
        state.pair_j = _EMPTY_INT.copy()
        state.pair_r = np.zeros((0, 3))
        state.pair_w = np.zeros((0, 3))
        state.pair_t0 = np.zeros(0)


def anchor_pairs(state) -> None:
    """Bring each pair's relative orbit to its body's time by Kepler motion, where it is not
    there (a checkpoint from before the perturbed pairs kept the orbit at its forming time;
    since then it is advanced at every step of the centre of mass, :func:`update_pairs`)."""
    if state.pair_i.size == 0:
        return
    rows = np.searchsorted(state.ids, state.pair_i)
    for k in np.flatnonzero(state.pair_t0 != state.t[rows]):
        state.pair_r[k], state.pair_w[k] = _relative_at(state, k, float(state.t[rows[k]]))
        state.pair_t0[k] = state.t[rows[k]]


def _relative_at(state, k: int, time: float) -> tuple[np.ndarray, np.ndarray]:
    """Relative position and velocity of pair ``k`` at ``time`` (Kepler, from pair_t0)."""
    if time == state.pair_t0[k]:
        return state.pair_r[k].copy(), state.pair_w[k].copy()
    r1 = np.empty(3)
    w1 = np.empty(3)
    mu = float(state.star_mass[state.pair_i[k]] + state.star_mass[state.pair_j[k]])
    kepler_propagate(state.pair_r[k], state.pair_w[k], mu, time - state.pair_t0[k], r1, w1)
    return r1, w1


def _members(state, k, xc, vc, time):
    """Positions and velocities of pair ``k``'s members ``(xi, vi, xj, vj)`` at ``time``
    from its centre of mass ``xc``, ``vc``."""
    mi = state.star_mass[state.pair_i[k]]
    mj = state.star_mass[state.pair_j[k]]
    r, w = _relative_at(state, k, time)
    fi, fj = mj / (mi + mj), mi / (mi + mj)
    return xc - fi * r, vc - fi * w, xc + fj * r, vc + fj * w


def expand(state, pos: np.ndarray, vel: np.ndarray,
           time: float) -> tuple[np.ndarray, np.ndarray]:
    """Every original star's position and velocity ``(N, 3)`` at ``time`` from the bodies'
    ``pos``, ``vel`` ``(n, 3)`` at that time (the pairs resolved in a copy, not in the
    state).  Without pairs the arrays are returned as they are."""
    if state.pair_i.size == 0:
        return pos, vel
    nstar = state.star_mass.size
    out_x = np.empty((nstar, 3))
    out_v = np.empty((nstar, 3))
    out_x[state.ids] = pos
    out_v[state.ids] = vel
    rows = np.searchsorted(state.ids, state.pair_i)
    for k in range(state.pair_i.size):
        xi, vi, xj, vj = _members(state, k, pos[rows[k]], vel[rows[k]], time)
        out_x[state.pair_i[k]], out_v[state.pair_i[k]] = xi, vi
        out_x[state.pair_j[k]], out_v[state.pair_j[k]] = xj, vj
    return out_x, out_v


def perturbation(pos: np.ndarray, mass: np.ndarray, skip, xc: np.ndarray, mpair: float,
                 apo: float) -> float:
    """Numpy twin of :func:`physics.nbody_perturbed.max_perturbation`: the largest tidal
    perturbation ``2 m_k apo^3 / (mpair d_k^3)`` of the bodies ``k`` (rows of ``pos``,
    ``mass``, except the rows in ``skip``) on a pair of mass ``mpair`` and apocentre ``apo``
    centred at ``xc`` (the form of :func:`physics.fewbody_classify.tidal_perturbation`
    for equal masses, normalised by the pair's mass); infinite when a body is within ``apo``."""
    d2 = np.einsum("ic,ic->i", pos - xc, pos - xc)
    keep = np.ones(d2.size, dtype=bool)
    keep[list(skip)] = False
    if not np.any(keep):
        return 0.0
    d2 = d2[keep]
    if float(d2.min()) <= apo * apo:
        return math.inf
    return float(np.max(2.0 * mass[keep] * apo ** 3 / (mpair * d2 * np.sqrt(d2))))


def _orbit(r: np.ndarray, w: np.ndarray, mu: float) -> float:
    """Apocentre ``a (1 + e)`` of a relative orbit of total mass ``mu`` (infinite when
    unbound): the few-body engine's :func:`physics.fewbody_classify._pair_orbit`."""
    _, a, e, _, _ = _pair_orbit(_ORIGIN, _ORIGIN, float(mu), np.ascontiguousarray(r, float),
                                np.ascontiguousarray(w, float), 0.0)
    return float(a * (1.0 + e))


def _first_step(state, acc: np.ndarray, jerk: np.ndarray, tnow: float) -> np.ndarray:
    """First steps ``eta_s |a| / |j|`` (as :meth:`physics.nbody.NBodyState.create`), powers
    of two that divide ``tnow``; a step below ``dt_min`` raises FloatingPointError."""
    amod = np.sqrt(np.einsum("ic,ic->i", acc, acc))
    jmod = np.sqrt(np.einsum("ic,ic->i", jerk, jerk))
    out = np.empty(amod.size)
    for k in range(amod.size):  # the few bodies of the pairs formed or resolved
        want = state.eta_s * amod[k] / jmod[k] if jmod[k] > 0.0 else state.dt_max
        h = quantise_down(want, state.dt_max) if want > 0.0 else state.dt_min
        while h >= state.dt_min and math.floor(tnow / h) != tnow / h:
            h *= 0.5
        if h < state.dt_min:
            raise FloatingPointError(f"a pair's body needs a first step below dt_min = "
                                     f"{state.dt_min:g} at t = {tnow!r}")
        out[k] = h
    return out


def update_pairs(state, tnow: float, active: np.ndarray, force) -> bool:
    """Resolve the perturbed pairs whose body is in the block ``active`` and form new pairs
    among its bodies (in place, after the block's corrector, at the block time ``tnow``).

    ``force(P, V, A, rows)`` gives ``(acc, jerk, snap)`` of ``rows`` in the bodies ``P``, ``V``
    (``A`` their accelerations, for the 6th order's snap; snap zero at the 4th order).
    Returns whether the layout changed.
    """
    st = state
    cand = active[st.dt[active] <= st.pair_dt]
    if cand.size == 0 and st.pair_i.size == 0:
        return False
    prows = np.searchsorted(st.ids, st.pair_i)
    if cand.size == 0 and not np.any(st.t[prows] == tnow):
        return False
    # every body at tnow: the corrected block, the others predicted
    P = st._ppos.copy()
    V = st._pvel.copy()
    A = st._pacc.copy() if st.order == 6 else None
    P[active] = st.pos[active]
    V[active] = st.vel[active]
    if A is not None:
        A[active] = st.acc[active]
    is_active = np.zeros(st.mass.size, dtype=bool)
    is_active[active] = True
    is_pair = np.zeros(st.mass.size, dtype=bool)
    is_pair[prows] = True
    for k in range(st.pair_i.size):  # the relative orbits of the block's pairs to tnow
        if is_active[prows[k]] and st.pair_t0[k] < tnow:
            _advance(st, k, prows[k], tnow, P, V)
    resolve = []
    for k in range(st.pair_i.size):
        row = prows[k]
        if not is_active[row]:
            continue
        mpair = float(st.mass[row])
        apo = _orbit(*_relative_at(st, k, tnow), mpair)
        if max_perturbation(P, st.mass, row, -1, P[row], mpair, apo) > HYSTERESIS * st.pair_gamma:
            resolve.append(k)
    form = []
    if st.eps2 == 0.0:
        used = set()
        for i in cand:
            if is_pair[i] or int(i) in used:
                continue
            d2 = np.einsum("ic,ic->i", P - P[i], P - P[i])
            d2[i] = math.inf
            j = int(np.argmin(d2))
            if not is_active[j] or is_pair[j] or j in used:
                continue
            mi, mj = float(st.mass[i]), float(st.mass[j])
            r, w = P[j] - P[i], V[j] - V[i]
            apo = _orbit(r, w, mi + mj)
            if math.isinf(apo):  # unbound
                continue
            xc = (mi * P[i] + mj * P[j]) / (mi + mj)
            if max_perturbation(P, st.mass, int(i), j, xc, mi + mj, apo) >= st.pair_gamma:
                continue
            used.update((int(i), j))
            form.append((int(st.ids[min(i, j)]), int(st.ids[max(i, j)])))
    if not resolve and not form:
        _limit_steps(st, tnow, P, V)
        return False
    fresh = []  # original ids of the bodies that need fresh forces and steps
    # resolve: the members back as bodies (the first in the pair's row, the second inserted)
    for k in resolve:
        row = int(np.searchsorted(st.ids, st.pair_i[k]))
        xi, vi, xj, vj = _members(st, k, P[row], V[row], tnow)
        mi, mj = st.star_mass[st.pair_i[k]], st.star_mass[st.pair_j[k]]
        at = int(np.searchsorted(st.ids, st.pair_j[k]))
        P[row], V[row], st.mass[row] = xi, vi, mi
        P, V = np.insert(P, at, xj, axis=0), np.insert(V, at, vj, axis=0)
        if A is not None:
            A = np.insert(A, at, A[row], axis=0)
        _insert_row(st, at, st.pair_j[k], mj)
        fresh.extend((int(st.pair_i[k]), int(st.pair_j[k])))
    if resolve:
        keep = np.ones(st.pair_i.size, dtype=bool)
        keep[resolve] = False
        for name in ("pair_i", "pair_j", "pair_r", "pair_w", "pair_t0"):
            setattr(st, name, getattr(st, name)[keep])
        st.n_pair_resolved += len(resolve)
    # form: the centre of mass in the first member's row, the second member's row removed
    for a, b in form:
        ra, rb = np.searchsorted(st.ids, (a, b))
        ma, mb = float(st.mass[ra]), float(st.mass[rb])
        st.pair_i = np.append(st.pair_i, a)
        st.pair_j = np.append(st.pair_j, b)
        st.pair_r = np.vstack((st.pair_r, P[rb] - P[ra]))
        st.pair_w = np.vstack((st.pair_w, V[rb] - V[ra]))
        st.pair_t0 = np.append(st.pair_t0, tnow)
        P[ra] = (ma * P[ra] + mb * P[rb]) / (ma + mb)
        V[ra] = (ma * V[ra] + mb * V[rb]) / (ma + mb)
        if A is not None:
            A[ra] = (ma * A[ra] + mb * A[rb]) / (ma + mb)
        st.mass[ra] = ma + mb
        P, V = np.delete(P, rb, axis=0), np.delete(V, rb, axis=0)
        if A is not None:
            A = np.delete(A, rb, axis=0)
        _delete_row(st, rb)
        fresh.append(a)
        st.n_pair_formed += 1
    rows = np.searchsorted(st.ids, np.array(sorted(set(fresh)), dtype=np.int64))
    acc, jerk, snap = force(P, V, A, rows)
    st.pos[rows], st.vel[rows] = P[rows], V[rows]
    st.acc[rows], st.jerk[rows], st.snap[rows] = acc, jerk, snap
    st.crackle[rows] = 0.0
    st.t[rows] = tnow
    st.dt[rows] = _first_step(st, acc, jerk, tnow)
    _limit_steps(st, tnow, P, V)
    return True


def _advance(st, k: int, row: int, tnow: float, P: np.ndarray, V: np.ndarray) -> None:
    """Pair ``k``'s relative orbit from ``pair_t0`` to ``tnow`` under the tide of its
    perturbers (:mod:`physics.nbody_perturbed`); its body ``row`` is at ``tnow`` (corrected),
    ``P``, ``V`` every body there."""
    span = tnow - float(st.pair_t0[k])
    mpair = float(st.mass[row])
    r, w = st.pair_r[k].copy(), st.pair_w[k].copy()
    apo = _orbit(r, w, mpair)
    rows, passage = select_perturbers(P, V, st.mass, row, apo, -span)
    nsub = substeps(r, w, mpair, span, passage) if rows.size else 0
    mi, mj = float(st.star_mass[st.pair_i[k]]), float(st.star_mass[st.pair_j[k]])
    dv = np.zeros((rows.size, 3))
    perturbed_kepler(r, w, mi, mj, float(st.pair_t0[k]), tnow, nsub, float(st.t[row]),
                     _polynomials(st, np.array([row])), st.t[rows], _polynomials(st, rows),
                     st.mass[rows], dv)
    st.pair_r[k], st.pair_w[k], st.pair_t0[k] = r, w, tnow
    if rows.size:  # the reaction, given at tnow: a perturber behind it (at its own time)
        # gets the velocity change and the position shift that keep it where it is at tnow
        dvc = -(st.mass[rows] @ dv) / mpair
        st.vel[rows] += dv
        st.pos[rows] -= dv * (tnow - st.t[rows])[:, None]
        V[rows] += dv
        st.vel[row] += dvc
        V[row] += dvc
    st.n_pair_kicks += nsub


def _polynomials(st, rows: np.ndarray) -> np.ndarray:
    """``(k, 6, 3)``: position, velocity, acceleration, jerk, snap, crackle of ``rows`` at
    their own times."""
    return np.stack([st.pos[rows], st.vel[rows], st.acc[rows], st.jerk[rows], st.snap[rows],
                     st.crackle[rows]], axis=1)


def _limit_steps(st, tnow: float, P: np.ndarray, V: np.ndarray) -> None:
    """Halve the next step of every pair's body at ``tnow`` (down to ``pair_dt`` at most)
    while some body, moving on a straight line from ``P``, ``V`` relative to it, would come
    close enough within that step to perturb the pair above ``HYSTERESIS x pair_gamma``: so
    an approaching star is seen at a block step of the centre of mass before it is too near
    (the resolution is checked only there)."""
    if st.pair_i.size == 0:
        return
    rows = np.searchsorted(st.ids, st.pair_i)
    limit = HYSTERESIS * st.pair_gamma
    for k in np.flatnonzero(st.t[rows] == tnow):
        row = rows[k]
        h = st.dt[row]
        mpair = float(st.mass[row])
        apo = _orbit(*_relative_at(st, k, tnow), mpair)
        # at most the shortest step of the perturbers: their polynomials are used within
        # about one of their steps in the tide of the next step (physics.nbody_perturbed)
        near, _ = select_perturbers(P, V, st.mass, row, apo, h)
        if near.size:
            h = min(h, float(st.dt[near].min()))
        st.dt[row] = approach_step(P, V, st.mass, row, apo, h, st.pair_dt, limit)


_BODY = ("mass", "pos", "vel", "acc", "jerk", "snap", "crackle", "t", "dt", "ids",
         "_ppos", "_pvel", "_pacc")


def _insert_row(st, at: int, ident: int, m: float) -> None:
    for name in _BODY:
        arr = getattr(st, name)
        fill = ident if name == "ids" else (m if name == "mass" else 0.0)
        setattr(st, name, np.insert(arr, at, fill, axis=0))


def _delete_row(st, row: int) -> None:
    for name in _BODY:
        setattr(st, name, np.delete(getattr(st, name), row, axis=0))
