"""Few-body encounter engine: integrator against Kepler, set-up, classification, conservation,
determinism, scattering physics (exchange cross section, Heggie's law, thermal exchange
eccentricities) and agreement with REBOUND's IAS15."""

from __future__ import annotations

import math

import numpy as np
import pytest

from physics import fewbody as fb
from physics import fewbody_classify as fc
from physics import fewbody_integrator as fi
from physics import fewbody_kepler as kep
from physics.fewbody_outcome import _empty_tree
from tests.conftest import rng_states

BIN = fb.binary((0, 1), (1.0, 1.0), 1.0, 0.0)
SIN = fb.single(2, 1.0)
VC = fb.critical_velocity(BIN, SIN)


# ---------------------------------------------------------------------------
# integrator against the analytic Kepler orbit (the kernel's reference twin)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("e", [0.0, 0.6, 0.95, 0.999])
def test_bulirsch_stoer_leapfrog_follows_kepler(e):
    """A two-body orbit over 5 periods through its pericentre: position, energy and angular
    momentum against the analytic solution."""
    m = np.array([0.7, 0.3])
    a = 1.3
    r0, w0 = fb.kepler_relative(1.0, a, e, 2.0)
    x = np.array([-m[1] * r0, m[0] * r0])
    v = np.array([-m[1] * w0, m[0] * w0])
    n = 2
    bconst = fi.potential_energy(x, m, n) - fi.kinetic_energy(v, m, n)
    e0 = -bconst
    ws_x, ws_v, acc = np.empty((2, 3)), np.empty((2, 3)), np.empty((2, 3))
    tab = np.empty((fi.KMAX, fi.KMAX, 13))
    ynew = np.empty(13)
    errs = np.empty(fi.KMAX)
    t = 0.0
    h = 0.05 * m[0] * m[1] * 2 * math.pi * math.sqrt(a)
    period = 2 * math.pi * math.sqrt(a ** 3)
    while t < 5 * period:
        k, err, _ = fi.bs_step(x, v, t, m, n, bconst, h, 1e-12, 12, fi.SEQUENCE, ws_x, ws_v,
                               acc, tab, ynew, errs)
        if k == 0:
            h *= 0.5
            continue
        t = fi._unpack(ynew, n, x, v)
        h *= fi._next_step_factor(k, errs, fi.SEQUENCE, 12)
    # analytic position at time t
    r_ref, w_ref = fb.kepler_relative(1.0, a, e, 2.0 + 2 * math.pi * t / period)
    rel = x[1] - x[0]
    assert np.linalg.norm(rel - r_ref) < 1e-8 * a
    assert np.linalg.norm((v[1] - v[0]) - w_ref) < 1e-8 * np.linalg.norm(w_ref) / (1 - e)
    e1 = fi.kinetic_energy(v, m, n) - fi.potential_energy(x, m, n)
    assert abs(e1 - e0) < 1e-10 * abs(e0)
    lz0, lz1 = np.empty(3), np.empty(3)
    x0 = np.array([-m[1] * r0, m[0] * r0])
    v0 = np.array([-m[1] * w0, m[0] * w0])
    fi.angular_momentum(x0, v0, m, n, lz0)
    fi.angular_momentum(x, v, m, n, lz1)
    assert np.linalg.norm(lz1 - lz0) < 1e-10 * np.linalg.norm(lz0)


# ---------------------------------------------------------------------------
# set-up
# ---------------------------------------------------------------------------
def test_initial_state_geometry():
    v_inf, b = 0.3 * VC, 1.7
    u = [0.2, 0.4, 0.6, 0.8, 0.5, 0.5, 0.5, 0.5]
    st = fb.initial_state(BIN, SIN, v_inf, b, u)
    # CMC's starting distance: 74 a(1+e) for equal masses and tidal tolerance 1e-5
    assert st.r_start == pytest.approx((4.0 / 1e-5) ** (1 / 3), rel=1e-12)
    assert st.r_start == pytest.approx(73.68, abs=0.01)
    # centre of mass at rest at the origin
    assert np.allclose(st.m @ st.x, 0, atol=1e-12)
    assert np.allclose(st.m @ st.v, 0, atol=1e-12)
    # binary internal orbit: a and e as given
    eb, a, e, r, _ = fc._pair_orbit(st.x[0], st.v[0], 1.0, st.x[1], st.v[1], 1.0)
    assert a == pytest.approx(1.0, rel=1e-12)
    assert e == pytest.approx(0.0, abs=1e-7)
    # outer orbit: energy v_inf^2/2 and angular momentum b v_inf per unit reduced mass
    cm_x = (st.x[0] + st.x[1]) / 2
    cm_v = (st.v[0] + st.v[1]) / 2
    rel_x, rel_v = st.x[2] - cm_x, st.v[2] - cm_v
    eps = 0.5 * rel_v @ rel_v - 3.0 / np.linalg.norm(rel_x)
    assert eps == pytest.approx(0.5 * v_inf ** 2, rel=1e-12)
    assert np.linalg.norm(np.cross(rel_x, rel_v)) == pytest.approx(b * v_inf, rel=1e-12)
    assert rel_x @ rel_v < 0  # incoming
    # pericentre of the focused hyperbola
    rp = st.r_peri
    assert fb.pericentre_impact_parameter(3.0, v_inf, rp) == pytest.approx(b, rel=1e-12)


def test_eccentric_binary_and_binary_binary_setup():
    b2 = fb.binary((5, 6), (0.5, 2.0), 0.3, 0.8)
    u = np.linspace(0.1, 0.9, 8)
    st = fb.initial_state(BIN, b2, 0.5, 0.4, u)
    assert st.ids == [0, 1, 5, 6]
    assert st.groups == [(0, 1), (2, 3)]
    eb, a, e, r, _ = fc._pair_orbit(st.x[2], st.v[2], 0.5, st.x[3], st.v[3], 2.0)
    assert a == pytest.approx(0.3, rel=1e-10)
    assert e == pytest.approx(0.8, rel=1e-10)
    # the start is where the tidal perturbation on the more perturbed binary is the tolerance
    r0 = fb.start_distance(BIN, b2, 1e-5)
    assert st.r_start == pytest.approx(r0, rel=1e-12)
    pert = [fc.tidal_perturbation(1.0, 1.0, 2.5, 1.0, r0),
            fc.tidal_perturbation(0.5, 2.0, 2.0, 0.3 * 1.8, r0)]
    assert max(pert) == pytest.approx(1e-5, rel=1e-9)


def test_random_orientations_are_isotropic():
    """Binary angular momentum directions from the stream: <cos theta> ~ 0, <cos^2> ~ 1/3."""
    states = rng_states(1, seed=11)
    cz = []
    for _ in range(2000):
        st = fb.sample_encounter(BIN, SIN, 0.1 * VC, 2.0, states, 0)
        lz = np.cross(st.x[1] - st.x[0], st.v[1] - st.v[0])
        cz.append(lz[2] / np.linalg.norm(lz))
    cz = np.array(cz)
    assert abs(cz.mean()) < 4 / math.sqrt(3 * 2000)
    assert abs((cz ** 2).mean() - 1 / 3) < 4 * math.sqrt(4 / 45 / 2000)


def test_sample_encounter_draws_fixed_count_and_b_distribution():
    states = rng_states(1, seed=4)
    ref = states.copy()
    bs = []
    for _ in range(3000):
        st = fb.sample_encounter(BIN, SIN, 0.1 * VC, 2.0, states, 0)
        bs.append(st.b)
    from parallel.rng import taus_uniform

    for _ in range(3000 * fb.DRAWS_PER_ENCOUNTER):
        taus_uniform(ref, 0)
    assert np.array_equal(states, ref)
    # uniform in area up to b_max
    bmax = fb.pericentre_impact_parameter(3.0, 0.1 * VC, 2.0)
    frac = np.mean(np.array(bs) < bmax / math.sqrt(2))
    assert abs(frac - 0.5) < 4 * math.sqrt(0.25 / 3000)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="eccentricity"):
        fb.binary((0, 1), (1.0, 1.0), 1.0, 1.0)
    with pytest.raises(ValueError, match="masses"):
        fb.single(0, -1.0)
    with pytest.raises(ValueError, match="at least one binary"):
        fb.initial_state(SIN, fb.single(3, 1.0), 1.0, 0.0, [0.5] * 8)
    with pytest.raises(ValueError, match="v_inf"):
        fb.initial_state(BIN, SIN, 0.0, 0.0, [0.5] * 8)
    with pytest.raises(ValueError, match="integrator"):
        fb.EncounterSettings(integrator="rk4")
    with pytest.raises(ValueError, match="tol"):
        fb.EncounterSettings(tol=-1.0)


# ---------------------------------------------------------------------------
# classification
# ---------------------------------------------------------------------------
def _classify(x, v, m, rad=None, tol=1e-5):
    n = m.size
    rad = np.zeros(n) if rad is None else rad
    tree = _empty_tree(n)
    done, nn, ntop = fc.classify(np.asarray(x, float), np.asarray(v, float), m, rad, n, tol,
                                 *tree)
    return done, nn, ntop, tree


def _triple(a_out, e_out, incl=0.0):
    """Inner equal-mass circular binary a = 1 and a third star on an outer orbit at apocentre."""
    r_in, w_in = fb.kepler_relative(2.0, 1.0, 0.0, 0.3)
    r_out, w_out = fb.kepler_relative(3.0, a_out, e_out, math.pi)
    rot = np.array([[1, 0, 0], [0, math.cos(incl), -math.sin(incl)],
                    [0, math.sin(incl), math.cos(incl)]])
    r_out, w_out = rot @ r_out, rot @ w_out
    x = np.array([-0.5 * r_in - r_out / 3, 0.5 * r_in - r_out / 3, 2 * r_out / 3])
    v = np.array([-0.5 * w_in - w_out / 3, 0.5 * w_in - w_out / 3, 2 * w_out / 3])
    return x, v, np.ones(3)


def test_classify_stable_and_unstable_triples():
    # Mardling-Aarseth: q_out = 1/2, e_out = 0.1: stable when a_out (1 - e) >= 2.8 * 1.2 ...
    crit = 2.8 * ((1.5 * 1.1) / math.sqrt(0.9)) ** 0.4
    x, v, m = _triple(1.05 * crit / 0.9, 0.1)
    done, nn, ntop, tree = _classify(x, v, m)
    assert done and ntop == 1 and nn == 5
    x, v, m = _triple(0.95 * crit / 0.9, 0.1)
    assert not _classify(x, v, m)[0]
    # retrograde inclination lowers the critical separation by 30 %
    x, v, m = _triple(0.8 * crit / 0.9, 0.1, incl=math.pi)
    assert _classify(x, v, m)[0]
    assert fc.mardling_aarseth_stable(1.0, 1.05 * crit / 0.9, 0.1, 0.5, 0.0)
    assert not fc.mardling_aarseth_stable(1.0, 100.0, 0.1, 6.0, 0.0)  # q_out > 5


def test_classify_flyby_needs_receding_and_tidal_isolation():
    r_in, w_in = fb.kepler_relative(2.0, 1.0, 0.0, 0.0)
    for d, vr, expect in [(200.0, 1.0, True), (200.0, -1.0, False), (30.0, 1.0, False)]:
        x = np.array([-0.5 * r_in, 0.5 * r_in, [d, 0, 0]])
        v = np.array([-0.5 * w_in, 0.5 * w_in, [vr, 0, 0]])
        x -= x.mean(0)
        v -= v.mean(0)
        done, nn, ntop, tree = _classify(x, v, np.ones(3))
        assert done is expect
        assert ntop == 2


def test_classify_refuses_a_bound_system_of_pairwise_unbound_singles():
    """Three stars moving apart, each pair unbound, but the total energy negative: not over."""
    ang = np.array([0, 2 * math.pi / 3, 4 * math.pi / 3])
    x = np.stack([np.cos(ang), np.sin(ang), 0 * ang], 1) * 3.0
    # speed with pairwise energy > 0 (w^2/4 > 1/r_ij) but total energy < 0
    r_ij = 3.0 * math.sqrt(3)
    s = math.sqrt(4 / r_ij / 3) * 1.05
    v = x / 3.0 * s
    m = np.ones(3)
    for i in range(3):
        for j in range(i + 1, 3):
            assert fc._pair_orbit(x[i], v[i], 1, x[j], v[j], 1)[0] > 0
    assert fi.kinetic_energy(v, m, 3) - fi.potential_energy(x, m, 3) < 0
    assert not _classify(x, v, m)[0]


# ---------------------------------------------------------------------------
# encounters: conservation, determinism, physics
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hard_ensemble():
    """300 equal-mass hard binary-single encounters at v/v_c = 0.1, r_p <= 3a (our integrator)."""
    states = rng_states(300, seed=21)
    return [fb.scatter(BIN, SIN, 0.1 * VC, 3.0, states, i) for i in range(300)]


def test_encounters_conserve_energy_and_angular_momentum(hard_ensemble):
    de = np.array([o.de_rel for o in hard_ensemble])
    dl = np.array([o.dl_rel for o in hard_ensemble])
    assert all(o.status == "done" for o in hard_ensemble)
    assert de.max() < 1e-6, de.max()
    assert dl.max() < 1e-6, dl.max()
    # the integrator's error budget is far below the CMC discard threshold
    assert np.median(de) < 1e-9


def test_no_ionisation_below_critical_speed(hard_ensemble):
    kinds = [o.kind for o in hard_ensemble]
    assert kinds.count("ionisation") == 0
    assert all(o.n_binaries_out >= 1 for o in hard_ensemble if o.kind != "triple")


def test_outcome_bookkeeping(hard_ensemble):
    for o in hard_ensemble:
        ids = sorted(i for p in o.products for i in p.ids)
        assert ids == [0, 1, 2]
        assert sum(p.m for p in o.products) == pytest.approx(3.0, rel=1e-14)
        mom = sum(p.m * p.v for p in o.products)
        assert np.allclose(mom, 0, atol=1e-10)
        # energy at infinity of the products balances the internal energy change
        ke_inf = sum(0.5 * p.m * p.v_inf @ p.v_inf for p in o.products)
        ke0 = 0.5 * (2.0 * 1.0 / 3.0) * o.initial.v_inf ** 2
        if len(o.products) == 2:
            assert ke_inf - ke0 == pytest.approx(-o.de_internal, abs=1e-5 * 0.5)
        if o.kind == "exchange":
            (bnode,) = o.binaries()
            assert 2 in bnode.ids


def test_exchange_cross_section_and_heggies_law(hard_ensemble):
    """sigma_ex (v/v_c)^2 against the Heggie, Hut & McMillan (1996) fit for equal masses,
    3.91 pi a^2 (the fit is good to 25 %; see docs/validation.md); 300 encounters give ~80
    exchanges, a statistical error of ~11 %, so the test accepts 35 %.  Heggie's law: close
    encounters harden the binary by ~40 %."""
    n = len(hard_ensemble)
    n_ex = sum(o.kind == "exchange" for o in hard_ensemble)
    bmax2 = fb.pericentre_impact_parameter(3.0, 0.1 * VC, 3.0) ** 2
    sigma = n_ex / n * bmax2 * 0.1 ** 2
    assert sigma == pytest.approx(3.91, rel=0.35), (n_ex, sigma)
    # Heggie's law on the close ones (r_p <= a): <dE_b / E_b> ~ 0.4 (0.3-0.5 accepted, wider
    # for the sample size)
    close = [o for o in hard_ensemble if o.initial.r_peri <= 1.0 and o.kind != "triple"]
    rel = [o.de_internal / -0.5 for o in close]
    assert len(close) > 50
    assert 0.2 < np.mean(rel) < 0.6


def test_exchange_eccentricities_are_thermal(hard_ensemble):
    e = np.array([o.binaries()[0].e for o in hard_ensemble if o.kind == "exchange"])
    assert e.size > 40
    # <e^2> = 1/2 for f(e) = 2e; the standard error of e^2 is sqrt(1/12 / n)
    assert abs(np.mean(e ** 2) - 0.5) < 4 * math.sqrt(1 / 12 / e.size)


def test_same_stream_same_outcome_bit_for_bit():
    a = rng_states(3, seed=8)
    b = a.copy()
    for row in range(3):
        oa = fb.scatter(BIN, SIN, 0.25 * VC, 2.0, a, row)
        ob = fb.scatter(BIN, SIN, 0.25 * VC, 2.0, b, row)
        assert oa.hierarchy == ob.hierarchy
        assert oa.n_forces == ob.n_forces
        for pa, pb in zip(oa.products, ob.products):
            assert np.array_equal(pa.x, pb.x) and np.array_equal(pa.v, pb.v)
            assert pa.a == pb.a and pa.e == pb.e
    assert np.array_equal(a, b)


def test_physical_scale_invariance():
    """The same encounter in other units (masses x 1e3, lengths x 1e-2) is the same outcome."""
    u = [0.3, 0.6, 0.2, 0.9, 0.5, 0.5, 0.5, 0.5]
    st1 = fb.initial_state(BIN, SIN, 0.5 * VC, 1.2, u)
    bin2 = fb.binary((0, 1), (1e3, 1e3), 1e-2, 0.0)
    sin2 = fb.single(2, 1e3)
    vscale = math.sqrt(1e3 / 1e-2)
    st2 = fb.initial_state(bin2, sin2, 0.5 * VC * vscale, 1.2e-2, u)
    o1, o2 = fb.integrate(st1), fb.integrate(st2)
    assert o1.hierarchy == o2.hierarchy
    assert o2.products[0].a == pytest.approx(o1.products[0].a * 1e-2, rel=1e-9)
    assert o2.de_internal == pytest.approx(o1.de_internal * 1e3 ** 2 / 1e-2, rel=1e-5)


def test_binary_binary_encounters():
    states = rng_states(40, seed=5)
    obj2 = fb.binary((2, 3), (1.0, 1.0), 1.0, 0.0)
    vc = fb.critical_velocity(BIN, obj2)
    assert vc == pytest.approx(math.sqrt(2.0), rel=1e-12)
    kinds = set()
    for i in range(40):
        o = fb.scatter(BIN, obj2, 0.2 * vc, 4.0, states, i,
                       fb.EncounterSettings(t_max_periods=2e4))
        if o.status != "done":
            assert not o.valid
            continue
        kinds.add(o.kind)
        assert sorted(i for p in o.products for i in p.ids) == [0, 1, 2, 3]
        assert o.de_rel < 1e-6
        assert o.dl_rel < 1e-6
        if o.kind == "quadruple":
            assert not o.valid
    assert "preservation" in kinds


def test_recentring_keeps_a_recoiling_tight_binary_accurate():
    """A binary-binary encounter that leaves a long-lived triple with e_in ~ 0.997 far from the
    centre of mass: 1e-5 energy error before the closest pair was re-centred, < 1e-6 now."""
    obj2 = fb.binary((2, 3), (1.0, 1.0), 1.0, 0.0)
    states = rng_states(40, seed=5)
    st = fb.sample_encounter(BIN, obj2, 0.2 * math.sqrt(2.0), 4.0, states, 35)
    o = fb.integrate(st, fb.EncounterSettings(t_max_periods=2e4))
    assert o.kind == "triple" and o.status == "done"
    assert o.binaries()[0].e > 0.99
    assert o.de_rel < 1e-6
    # positions are reported in the centre-of-mass frame
    assert np.allclose(sum(p.m * p.x for p in o.products), 0, atol=1e-9)


def test_time_limit_is_reported_and_invalid():
    st = fb.initial_state(BIN, SIN, 0.1 * VC, 0.5, [0.5] * 8)
    o = fb.integrate(st, fb.EncounterSettings(t_max_periods=3.0))
    assert o.status == "time_limit" and o.kind == "unresolved" and not o.valid
    assert 3.0 <= o.t_end_periods < 3.5


def test_sticky_sphere_merger():
    """Head-on with large radii: the single merges with a binary member; mass, momentum and
    the energy books balance."""
    b = fb.binary((0, 1), (1.0, 1.0), 1.0, 0.0, radii=(0.1, 0.1))
    s = fb.single(2, 1.0, radius=0.3)
    st = fb.initial_state(b, s, 0.1 * VC, 0.0, [0.5, 0.25, 0.5, 0.1, 0.5, 0.5, 0.5, 0.5])
    o = fb.integrate(st)
    assert o.kind == "merger" and o.mergers >= 1 and o.status == "done"
    merged = [p for p in _leaves(o.products) if len(p.ids) > 1]
    assert merged and merged[0].m == pytest.approx(len(merged[0].ids) * 1.0)
    assert sum(p.m * p.v for p in o.products) == pytest.approx(np.zeros(3), abs=1e-10)
    assert o.de_merger != 0
    assert o.de_rel < 1e-6


def _leaves(products):
    out = []
    for p in products:
        out += [p] if p.is_single else _leaves(p.children)
    return out


# ---------------------------------------------------------------------------
# REBOUND IAS15 reference
# ---------------------------------------------------------------------------
def test_ias15_agrees_on_fixed_encounters():
    """The same initial states through both integrators: identical outcome for the short
    (non-resonant) encounters, energy conserved by both."""
    pytest.importorskip("rebound")
    states = rng_states(12, seed=31)
    ias = fb.EncounterSettings(integrator="ias15")
    n_short = 0
    for i in range(12):
        st = fb.sample_encounter(BIN, SIN, 0.5 * VC, 2.0, states, i)
        o_ar = fb.integrate(st)
        o_ias = fb.integrate(st, ias)
        assert o_ias.status == "done" and o_ias.de_rel < 1e-6
        if o_ar.t_end_periods < 60:
            n_short += 1
            assert o_ar.hierarchy == o_ias.hierarchy, i
            for p, q in zip(o_ar.products, o_ias.products):
                assert p.a == pytest.approx(q.a, rel=1e-4, abs=1e-12)
    assert n_short >= 6


def test_ias15_merger():
    pytest.importorskip("rebound")
    b = fb.binary((0, 1), (1.0, 1.0), 1.0, 0.0, radii=(0.1, 0.1))
    s = fb.single(2, 1.0, radius=0.3)
    st = fb.initial_state(b, s, 0.1 * VC, 0.0, [0.5, 0.25, 0.5, 0.1, 0.5, 0.5, 0.5, 0.5])
    o = fb.integrate(st, fb.EncounterSettings(integrator="ias15"))
    assert o.kind == "merger" and o.status == "done"
    assert sorted(i for p in o.products for i in p.ids) == [0, 1, 2]


# ---------------------------------------------------------------------------
# Kepler propagation and jumps
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("e", [0.0, 0.7, 0.99])
def test_kepler_propagate_matches_the_analytic_orbit(e):
    mu, a = 1.7, 2.3
    period = 2 * math.pi * math.sqrt(a ** 3 / mu)
    r0, w0 = fb.kepler_relative(mu, a, e, 0.4)
    r1, w1 = np.empty(3), np.empty(3)
    for dt in (0.1 * period, 3.37 * period, 1234.5 * period):
        kep.kepler_propagate(r0, w0, mu, dt, r1, w1)
        r_ref, w_ref = fb.kepler_relative(mu, a, e, 0.4 + 2 * math.pi * dt / period)
        assert np.allclose(r1, r_ref, atol=1e-9 * a * (1 + 1e4 * (dt > 1000)))
        assert np.allclose(w1, w_ref, rtol=1e-6, atol=1e-9 * np.linalg.norm(w0) / (1 - e))


def _jump_setup(x, v, m):
    """Energy, angular momentum and classified hierarchy of a state about to jump."""
    n = m.size
    e0 = fi.kinetic_energy(v, m, n) - fi.potential_energy(x, m, n)
    l0 = np.empty(3)
    fi.angular_momentum(x, v, m, n, l0)
    tree = _empty_tree(n)
    done, nn, ntop = fc.classify(x, v, m, np.zeros(n), n, 1e-5, *tree)
    return e0, l0, tree, done, nn, ntop


def test_kepler_jump_lands_on_the_mirror_point():
    """A binary and a single on a wide bound orbit, receding: the jump brings the single back to
    the same separation, approaching, with energy and angular momentum unchanged."""
    r_in, w_in = fb.kepler_relative(2.0, 1.0, 0.3, 1.0)
    a_out, e_out = 2000.0, 0.999  # outer pericentre 2: unstable by Mardling & Aarseth
    r_out, w_out = fb.kepler_relative(3.0, a_out, e_out, 0.2)  # receding, well past pericentre
    x = np.array([-0.5 * r_in - r_out / 3, 0.5 * r_in - r_out / 3, 2 * r_out / 3])
    v = np.array([-0.5 * w_in - w_out / 3, 0.5 * w_in - w_out / 3, 2 * w_out / 3])
    m = np.ones(3)
    e0, l0, tree, done, nn, ntop = _jump_setup(x, v, m)
    l1 = np.empty(3)
    assert not done and ntop == 1
    d0 = np.linalg.norm(x[2] - 0.5 * (x[0] + x[1]))
    dt = kep.kepler_jump(x, v, m, 3, 1e-6, *tree, nn, ntop)
    p_out = 2 * math.pi * math.sqrt(a_out ** 3 / 3.0)
    assert 0.5 * p_out < dt < p_out
    rel = x[2] - 0.5 * (x[0] + x[1])
    relv = v[2] - 0.5 * (v[0] + v[1])
    assert np.linalg.norm(rel) == pytest.approx(d0, rel=1e-6)
    assert rel @ relv < 0
    e1 = fi.kinetic_energy(v, m, 3) - fi.potential_energy(x, m, 3)
    fi.angular_momentum(x, v, m, 3, l1)
    assert abs(e1 - e0) < 1e-12 * 0.5
    assert np.linalg.norm(l1 - l0) < 1e-9 * np.linalg.norm(l0)
    # the inner binary keeps its orbit
    eb, a, e, r, _ = fc._pair_orbit(x[0], v[0], 1.0, x[1], v[1], 1.0)
    assert a == pytest.approx(1.0, rel=1e-6) and e == pytest.approx(0.3, rel=1e-5)


def test_kepler_propagate_keeps_angular_momentum_to_the_mirror_point():
    """Near-parabolic orbit (e = 0.9974) from just past pericentre to its mirror point, as a
    Kepler jump does: energy and angular momentum exact.  (The cancellation in
    g = dt - (dE - sin dE)/n once broke L by 3e-4 in a jump; the hard-encounter ensemble test
    holds that case.)"""
    mu, a, e = 1.0, 628.0, 0.9974
    ecc0 = 0.05
    n = math.sqrt(mu / a ** 3)
    r0, w0 = fb.kepler_relative(mu, a, e, ecc0 - e * math.sin(ecc0))
    dt = (2 * (math.pi - ecc0) + 2 * e * math.sin(ecc0)) / n
    r1, w1 = np.empty(3), np.empty(3)
    kep.kepler_propagate(r0, w0, mu, dt, r1, w1)
    l0, l1 = np.cross(r0, w0), np.cross(r1, w1)
    assert np.linalg.norm(l1 - l0) < 1e-11 * np.linalg.norm(l0)
    # the period of so eccentric an orbit is known to ~1e-11 only (a from 2/r - w^2/mu), so
    # the landing point moves along the orbit by ~1e-7 of r; E and L are what must be exact
    assert np.linalg.norm(r1) == pytest.approx(np.linalg.norm(r0), rel=1e-6)
    assert r1 @ w1 == pytest.approx(-(r0 @ w0), rel=1e-5)
    assert 0.5 * w1 @ w1 - mu / np.linalg.norm(r1) == pytest.approx(-mu / (2 * a), rel=1e-9)


def _hyperbola_state(mu, a, e, ff):
    """Relative position and velocity on a hyperbola (a > 0) at hyperbolic anomaly ff."""
    b = a * math.sqrt(e * e - 1)
    r = np.array([a * (e - math.cosh(ff)), b * math.sinh(ff), 0.0])
    dfdt = math.sqrt(mu / a ** 3) / (e * math.cosh(ff) - 1)
    w = np.array([-a * math.sinh(ff) * dfdt, b * math.cosh(ff) * dfdt, 0.0])
    return r, w


@pytest.mark.parametrize("e", [1.01, 1.5, 5.0])
def test_kepler_propagate_hyperbolic_matches_the_analytic_orbit(e):
    mu, a = 2.0, 3.0
    n = math.sqrt(mu / a ** 3)
    f0, f1 = -0.7, 2.3
    r0, w0 = _hyperbola_state(mu, a, e, f0)
    dt = ((e * math.sinh(f1) - f1) - (e * math.sinh(f0) - f0)) / n
    r1, w1 = np.empty(3), np.empty(3)
    kep.kepler_propagate_hyperbolic(r0, w0, mu, dt, r1, w1)
    r_ref, w_ref = _hyperbola_state(mu, a, e, f1)
    assert np.allclose(r1, r_ref, rtol=1e-10, atol=1e-10 * a)
    assert np.allclose(w1, w_ref, rtol=1e-10, atol=1e-10 * np.linalg.norm(w0))


def test_kepler_jump_with_an_escaper():
    """A binary and a single on a wide bound orbit (receding) while a fourth star escapes on a
    hyperbola: after the jump the triple's outer orbit is at its mirror point, the escaper has
    moved out along its hyperbola, and energy and angular momentum are unchanged."""
    r_in, w_in = fb.kepler_relative(2.0, 1.0, 0.3, 1.0)
    r_out, w_out = fb.kepler_relative(3.0, 2000.0, 0.999, 0.2)
    xt = np.array([-0.5 * r_in - r_out / 3, 0.5 * r_in - r_out / 3, 2 * r_out / 3])
    vt = np.array([-0.5 * w_in - w_out / 3, 0.5 * w_in - w_out / 3, 2 * w_out / 3])
    # escaper: mass 1 at 1e6 from the triple, receding at 3x the escape speed
    d = 1e6 * np.array([0.0, 0.0, 1.0])
    u = 3.0 * math.sqrt(2 * 4.0 / 1e6) * np.array([0.0, 0.2, 1.0])
    x = np.vstack([xt - d / 4, d * 3 / 4])
    v = np.vstack([vt - u / 4, u * 3 / 4])
    m = np.ones(4)
    e0, l0, tree, done, nn, ntop = _jump_setup(x, v, m)
    l1 = np.empty(3)
    assert not done and ntop == 2
    dsep0 = np.linalg.norm(x[2] - 0.5 * (x[0] + x[1]))
    desc0 = np.linalg.norm(x[3] - x[:3].mean(0))
    dt = kep.kepler_jump(x, v, m, 4, 1e-6, *tree, nn, ntop)
    assert dt > 0
    assert np.linalg.norm(x[2] - 0.5 * (x[0] + x[1])) == pytest.approx(dsep0, rel=1e-6)
    # the escaper moved out by about its speed times dt
    desc1 = np.linalg.norm(x[3] - x[:3].mean(0))
    assert desc1 > desc0 + 0.5 * np.linalg.norm(u) * dt
    e1 = fi.kinetic_energy(v, m, 4) - fi.potential_energy(x, m, 4)
    fi.angular_momentum(x, v, m, 4, l1)
    assert abs(e1 - e0) < 1e-10
    assert np.linalg.norm(l1 - l0) < 1e-9 * np.linalg.norm(l0)


def test_collapse_of_isolated_binaries_keeps_outcomes_and_saves_steps():
    """A tight binary (a = 0.01) meeting a wide one: integrated as one body while isolated
    (collapse_tol 1e-7), the outcomes equal those of the full integration, energy errors stay
    below 1e-5 of the binding energy, and the step count drops by more than 10x."""
    import dataclasses

    from parallel.streams import Streams

    wide = fb.binary((0, 1), (0.5, 0.5), 1.0, 0.3)
    tight = fb.binary((2, 3), (0.4, 0.6), 1e-2, 0.5)
    vc = fb.critical_velocity(wide, tight)
    full = fb.EncounterSettings()
    coll = dataclasses.replace(full, collapse_tol=1e-7)
    steps_full = steps_coll = 0
    for k in range(6):
        states = np.ascontiguousarray(Streams.create(40 + k, 1, 1).states[0])
        st = fb.sample_encounter(wide, tight, 0.3 * vc, 2.0 * 1.01, states, 0)
        a = fb.integrate(st, full)
        b = fb.integrate(st, coll)
        assert a.status == b.status == "done"
        assert a.hierarchy == b.hierarchy
        assert b.de_rel < 1e-5
        steps_full += a.n_steps
        steps_coll += b.n_steps
    assert steps_coll * 10 < steps_full
