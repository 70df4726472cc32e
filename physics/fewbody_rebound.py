"""REBOUND's IAS15 as the reference integrator of :mod:`physics.fewbody` (``integrator="ias15"``).

The same initial state and the same classification (:func:`physics.fewbody_classify.classify`)
as our own integrator; only the integration differs.  REBOUND integrates in chunks of
``ias15_check_periods`` initial binary periods and the hierarchy is checked after each chunk.
Finite radii use REBOUND's line collision search with its "merge" resolution; the merged radius
is then reset to ``merger_radius_factor * (r1 + r2)`` as Fewbody does.  Wide bound excursions
are skipped with the same Kepler jump as our integrator (``jump_tol``), so both back ends solve
the same problem.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from physics import fewbody_classify as fc
from physics import fewbody_integrator as fi
from physics import fewbody_kepler as kep
from physics import fewbody_kernels as fk
from physics.fewbody_objects import EncounterSettings, InitialState
from physics.fewbody_outcome import Outcome, _empty_tree, _finish, _scales

__all__ = ["integrate_ias15"]


def _import_rebound():
    try:
        import rebound
    except ImportError as exc:  # pragma: no cover - rebound is a dependency
        raise RuntimeError("integrator 'ias15' needs REBOUND: pip install rebound") from exc
    return rebound


def _energy(x, v, m, n) -> float:
    return float(fi.kinetic_energy(v, m, n) - fi.potential_energy(x, m, n))


def integrate_ias15(state: InitialState, settings: EncounterSettings) -> Outcome:
    """Integrate a prepared encounter with IAS15 and classify it (see :func:`fewbody.integrate`)."""
    rebound = _import_rebound()
    scales = _scales(state)
    scale_m, scale_l, scale_v, scale_t = scales
    n0 = state.m.size
    sim = rebound.Simulation()
    sim.G = 1.0
    sim.integrator = "ias15"
    sim.integrator.epsilon = settings.ias15_epsilon
    has_radii = bool(np.any(state.radius > 0))
    if has_radii:
        sim.collision = "line"
        sim.collision_resolve = "merge"
    for i in range(n0):
        sim.add(m=state.m[i] / scale_m, x=state.x[i, 0] / scale_l, y=state.x[i, 1] / scale_l,
                z=state.x[i, 2] / scale_l, vx=state.v[i, 0] / scale_v,
                vy=state.v[i, 1] / scale_v, vz=state.v[i, 2] / scale_v,
                r=state.radius[i] / scale_l, name=str(i + 1))
    members_by_hash = {i + 1: 1 << i for i in range(n0)}
    period = max(o.period for o in state.objects) / scale_t
    t_max = settings.t_max_periods * period
    chunk = settings.ias15_check_periods * period
    tree = _empty_tree(n0)
    tx, tv, tm, ta, te, ch, top = tree
    de_merge = 0.0
    status = fk.STATUS_DONE
    x = np.zeros((n0, 3))
    v = np.zeros((n0, 3))
    m = np.zeros(n0)
    rad = np.zeros(n0)
    members = np.zeros(n0, dtype=np.int64)
    n_checks = 0
    n_jumps = 0

    def read() -> int:
        n = sim.N
        xyz = np.empty(3 * n)
        vxyz = np.empty(3 * n)
        mm = np.empty(n)
        rr = np.empty(n)
        sim.serialize_particle_data(xyz=xyz, vxvyvz=vxyz, m=mm, r=rr)
        x[:n] = xyz.reshape(n, 3)
        v[:n] = vxyz.reshape(n, 3)
        m[:n] = mm
        rad[:n] = rr
        if has_radii:
            for i, p in enumerate(sim.particles):
                members[i] = members_by_hash[int(p.name)]
        else:
            members[:n] = [members_by_hash[i + 1] for i in range(n)]
        return n

    n = read()
    nn, ntop = n, n
    while True:
        if has_radii:
            e_before = _energy(x, v, m, n)
            before = {int(p.name): (p.m, p.r) for p in sim.particles}
        try:
            sim.integrate(min(sim.t + chunk, t_max), exact_finish_time=0)
        except rebound.Collision:  # pragma: no cover - only with collision_resolve = halt
            status = fk.STATUS_FAILED
            break
        merged = has_radii and sim.N < len(before)
        if merged:
            _record_mergers(sim, before, members_by_hash, settings.merger_radius_factor)
        n = read()
        if merged:
            # energy lost in the merger: the energy change over the chunk (IAS15 keeps the
            # rest to round-off)
            de_merge += _energy(x, v, m, n) - e_before
        n_checks += 1
        done, nn, ntop = fc.classify(x, v, m, rad, n, settings.tidal_tol, tx, tv, tm, ta, te,
                                     ch, top)
        if done:
            break
        if settings.jump_tol > 0.0:
            xs0, vs0 = x[:n].copy(), v[:n].copy()
            dtj = kep.kepler_jump(x, v, m, n, settings.jump_tol, tx, tv, tm, ta, te, ch, top, nn,
                                 ntop)
            if dtj > 0.0:
                # same analytic skip of a wide excursion as our integrator
                for i, p in enumerate(sim.particles):
                    p.x, p.y, p.z = x[i]
                    p.vx, p.vy, p.vz = v[i]
                sim.t = sim.t + dtj
                n_jumps += 1
            elif dtj < 0.0:
                x[:n], v[:n] = xs0, vs0
        if sim.t >= t_max:
            status = fk.STATUS_TIME_LIMIT
            break
        if sim.steps_done >= settings.max_steps:
            status = fk.STATUS_STEP_LIMIT
            break
        if not np.all(np.isfinite(x[:n])):
            status = fk.STATUS_FAILED
            break
    istats = np.zeros(fk.N_ISTATS, dtype=np.int64)
    istats[fk.IST_STEPS] = sim.steps_done
    istats[fk.IST_MERGERS] = n0 - n
    istats[fk.IST_CLASSIFY] = n_checks
    istats[fk.IST_JUMPS] = n_jumps
    t_end = float(sim.t)
    xs = np.ascontiguousarray(x[:n])
    vs = np.ascontiguousarray(v[:n])
    out = _finish(state, status, n, xs, vs, m[:n].copy(), rad[:n].copy(), members[:n].copy(),
                  (tx, tv, tm, ta, te, ch, top, nn, ntop), istats, t_end, de_merge, settings,
                  scales)
    sim = None
    return out


def _record_mergers(sim, before, members_by_hash, factor) -> None:
    """Update member masks and radii after REBOUND merged particles.

    A survivor's mass grew by the sum of the masses of the particles it absorbed; with at most
    four bodies the absorbed set is found by trying subsets.
    """
    after = {int(p.name): p for p in sim.particles}
    removed = [h for h in before if h not in after]
    for h, p in after.items():
        grown = p.m - before[h][0]
        if grown <= 0:
            continue
        for k in range(1, len(removed) + 1):
            combo = next((c for c in itertools.combinations(removed, k)
                          if math.isclose(sum(before[q][0] for q in c), grown, rel_tol=1e-9)),
                         None)
            if combo is None:
                continue
            p.r = factor * (before[h][1] + sum(before[q][1] for q in combo))
            for q in combo:
                members_by_hash[h] |= members_by_hash[q]
                removed.remove(q)
            break
