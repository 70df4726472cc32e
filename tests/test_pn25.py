"""The 2.5 post-Newtonian term in few-body encounters (issue 49, ``binaries.pn25``): its
acceleration against a plain twin, binaries that inspiral as Peters (1964) says, the radiated
energy and angular momentum booked exactly, black-hole mergers with general relativity's mass
loss, spin and recoil, and nothing changed without it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from physics import fewbody as fb
from physics import fewbody_integrator as fi
from physics.binaries import C_KMS, bh_merger_remnant


# ------------------------------------------------------------------ the acceleration
def _pn25_twin(x: np.ndarray, w: np.ndarray, m: np.ndarray, is_bh: np.ndarray,
               c: float) -> np.ndarray:
    """Plain twin: Kidder (1995)'s relative 2.5PN acceleration of each black-hole pair,
    ``a_rel = -(M / r^2) (A n + B v)`` with A, B as Fewbody writes them, shared between the
    two by their masses (``a_i = -m_j / M a_rel``, ``a_j = m_i / M a_rel``)."""
    out = np.zeros_like(x)
    for i in range(m.size):
        for j in range(i + 1, m.size):
            if not (is_bh[i] and is_bh[j]):
                continue
            r = x[j] - x[i]
            v = w[j] - w[i]
            d = np.linalg.norm(r)
            n = r / d
            rdot = n @ v
            mt = m[i] + m[j]
            nu = m[i] * m[j] / mt ** 2
            a5 = (-24 * rdot * nu * (v @ v) * mt / (5 * d)
                  - 136 * rdot * nu * mt ** 2 / (15 * d ** 2)) / c ** 5
            b5 = (8 * nu * (v @ v) * mt / (5 * d) + 24 * nu * mt ** 2 / (5 * d ** 2)) / c ** 5
            a_rel = -(mt / d ** 2) * (a5 * n + b5 * v)
            out[i] -= m[j] / mt * a_rel
            out[j] += m[i] / mt * a_rel
    return out


def test_pn25_acceleration_equals_its_twin_and_keeps_momentum():
    """The kernel equals the twin to rounding for 5 bodies, 3 of them black holes; pairs with
    a star get nothing; the total force sum m a vanishes (momentum is kept)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 3))
    w = rng.normal(size=(5, 3))
    m = rng.uniform(0.2, 2.0, 5)
    is_bh = np.array([1, 0, 1, 1, 0], dtype=np.int64)
    out = np.empty((5, 3))
    fi.pn25_accelerations(x, w, m, 5, is_bh, 7.0, out)
    ref = _pn25_twin(x, w, m, is_bh, 7.0)
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-16 * np.abs(ref).max())
    assert np.all(out[[1, 4]] == 0.0)
    assert np.abs(m @ out).max() < 1e-15 * np.abs(ref).max() * m.sum()


# ------------------------------------------------------------------ inspirals
def _inspiral(c: float, e0: float, t_end: float, tol: float = 1e-12):
    """An equal-mass black-hole binary (M = 1, a = 1, from pericentre) integrated with
    :func:`physics.fewbody_integrator.bs_step_pn` to ``t_end``: the final a, e, the
    extrapolated B, the Newtonian energy and angular momentum, and the summed angular
    momentum the term took."""
    n = 2
    m = np.array([0.5, 0.5])
    rp = 1.0 - e0
    vp = math.sqrt((1.0 + e0) / rp)
    x = np.array([[-0.5 * rp, 0.0, 0.0], [0.5 * rp, 0.0, 0.0]])
    v = np.array([[0.0, -0.5 * vp, 0.0], [0.0, 0.5 * vp, 0.0]])
    is_bh = np.ones(2, dtype=np.int64)
    ws = [np.empty((2, 3)) for _ in range(5)]
    size = fi.pn_state_size(2)
    tab = np.empty((fi.KMAX, fi.KMAX, size))
    ynew = np.empty(size)
    errs = np.empty(fi.KMAX)
    b = fi.potential_energy(x, m, n) - fi.kinetic_energy(v, m, n)
    l0 = np.empty(3)
    fi.angular_momentum(x, v, m, n, l0)
    dl = np.zeros(3)
    t, h = 0.0, 0.05
    while t < t_end:
        k, _, _ = fi.bs_step_pn(x, v, t, m, n, b, h, tol, 12, fi.SEQUENCE, *ws, is_bh, c,
                                tab, ynew, errs)
        if k == 0:
            h *= 0.5
            continue
        t = fi._unpack(ynew, n, x, v)
        b = ynew[6 * n + 1]
        dl += ynew[9 * n + 2: 9 * n + 5]
        h *= fi._next_step_factor(k, errs, fi.SEQUENCE, 12)
    r = x[1] - x[0]
    w = v[1] - v[0]
    energy = fi.kinetic_energy(v, m, n) - fi.potential_energy(x, m, n)
    a = -0.25 / (2.0 * energy)
    hvec = np.cross(r, w)
    e = math.sqrt(max(0.0, 1.0 - hvec @ hvec / a))
    l1 = np.empty(3)
    fi.angular_momentum(x, v, m, n, l1)
    return t, a, e, b, energy, l1 - l0, dl


def _peters(c: float, e0: float, t: float) -> tuple[float, float]:
    """Peters (1964)'s orbit-averaged da/dt, de/dt for m1 = m2 = 1/2 (G = 1), integrated."""
    from scipy.integrate import solve_ivp

    k = 0.25 / c ** 5

    def rhs(_, y):
        a, e = y
        e2 = e * e
        return [-64 / 5 * k / (a ** 3 * (1 - e2) ** 3.5) * (1 + 73 / 24 * e2 + 37 / 96 * e2 * e2),
                -304 / 15 * k * e / (a ** 4 * (1 - e2) ** 2.5) * (1 + 121 / 304 * e2)]

    sol = solve_ivp(rhs, (0.0, t), [1.0, e0], rtol=1e-12, atol=1e-14)
    return float(sol.y[0, -1]), float(sol.y[1, -1])


def test_circular_binary_inspirals_as_peters_and_the_books_close():
    """v/c = 0.1: over 4000 time units (~640 orbits) a falls to 0.836 as Peters' a^4 = a0^4 -
    (256/5) m1 m2 M t / c^5 says, to 1e-6; B, extrapolated with the radiated work, stays -E to
    1e-8 of E (the tolerance's drift over 2500 steps; 1e-8 of the energy radiated); the angular
    momentum lost is the summed torque of the term to 1e-9."""
    c = 10.0
    t, a, _, b, energy, dl_true, dl = _inspiral(c, 0.0, 4000.0)
    a_peters = (1.0 - 256 / 5 * 0.25 * t / c ** 5) ** 0.25
    assert a_peters < 0.84
    assert a == pytest.approx(a_peters, rel=1e-6)
    assert abs(b + energy) < 1e-8 * abs(energy)
    np.testing.assert_allclose(dl, dl_true, rtol=0, atol=1e-9 * 0.25)
    assert dl_true[2] < -0.01  # it did lose angular momentum


@pytest.mark.parametrize("c,e0,t_end", [(10.0, 0.5, 1000.0), (30.0, 0.9, 3000.0)])
def test_eccentric_binary_follows_peters_a_and_e(c, e0, t_end):
    """Eccentric binaries: a and e follow Peters' orbit-averaged equations; the osculating
    elements oscillate within an orbit at order (v/c)^5 of the loss, so the tolerance is a
    fraction of the change: 2 % of 1 - a and of e0 - e."""
    t, a, e, *_ = _inspiral(c, e0, t_end)
    a_p, e_p = _peters(c, e0, t)
    assert 1.0 - a_p > 0.01 and e0 - e_p > 0.01
    assert abs(a - a_p) < 0.02 * (1.0 - a_p), (a, a_p)
    assert abs(e - e_p) < 0.02 * (e0 - e_p), (e, e_p)


def test_without_black_holes_the_pn_step_is_the_newtonian_one():
    """With no black hole the term is zero: the PN step's x, v and t equal the Newtonian
    step's (the leapfrogs differ only in how the kick is split, so to 1e-14) and B is kept."""
    rng = np.random.default_rng(8)
    x = rng.normal(size=(3, 3))
    v = 0.3 * rng.normal(size=(3, 3))
    m = np.array([0.3, 0.5, 0.2])
    n = 3
    b = fi.potential_energy(x, m, n) - fi.kinetic_energy(v, m, n)
    ws = [np.empty((3, 3)) for _ in range(5)]
    tab = np.empty((fi.KMAX, fi.KMAX, fi.pn_state_size(3)))
    y_pn = np.empty(fi.pn_state_size(3))
    y_nw = np.empty(fi.pn_state_size(3))
    errs = np.empty(fi.KMAX)
    k1, _, _ = fi.bs_step_pn(x, v, 0.0, m, n, b, 0.01, 1e-12, 12, fi.SEQUENCE, *ws,
                             np.zeros(3, dtype=np.int64), 5.0, tab, y_pn, errs)
    k2, _, _ = fi.bs_step(x, v, 0.0, m, n, b, 0.01, 1e-12, 12, fi.SEQUENCE, ws[0], ws[1],
                          ws[3], tab, y_nw, errs)
    assert k1 > 0 and k2 > 0
    np.testing.assert_allclose(y_pn[:6 * n + 1], y_nw[:6 * n + 1], rtol=1e-13, atol=1e-14)
    assert y_pn[6 * n + 1] == b


# ------------------------------------------------------------------ mergers
def test_bh_merger_remnant_is_the_fits():
    """Equal masses: 4.83 % of the mass radiated, spin 0.686, no recoil (Barausse et al.
    2012; Barausse & Rezzolla 2009; Gonzalez et al. 2007); the largest mass-asymmetry recoil,
    175 km/s, near q = 0.36; symmetric in the two masses."""
    frac, spin, kick = bh_merger_remnant(10.0, 10.0)
    assert frac == pytest.approx(1.0 - 0.04827, rel=1e-12)
    assert spin == pytest.approx(0.6864, abs=1e-4)
    assert kick == 0.0
    qs = np.linspace(0.05, 1.0, 2000)
    kicks = np.array([bh_merger_remnant(1.0, q)[2] for q in qs]) * C_KMS
    assert qs[np.argmax(kicks)] == pytest.approx(0.36, abs=0.01)
    assert kicks.max() == pytest.approx(175.0, abs=2.0)
    assert bh_merger_remnant(3.0, 7.0) == bh_merger_remnant(7.0, 3.0)


def _bh_binary_and_single(c: float | None = None, radius: float | None = None):
    """Three 1/3-mass black holes, binary a = 1: their sticky radii 5 Schwarzschild radii
    at speed of light ``c``."""
    m = 1.0 / 3.0
    rs = radius if radius is not None else 5.0 * 2.0 * m / c ** 2
    return (fb.binary((0, 1), (m, m), 1.0, 0.0, (rs, rs), (True, True)),
            fb.single(2, m, rs, True))


#: The three-black-hole set-up of the validation (docs/validation_collisions.md): three 1/3
#: mass black holes, binary a = 1, e = 0, the single at 0.1 v_c with impact parameter
#: sqrt(THREE_BH_B2) times the one of pericentre 2 a (b = 19.196), orientation and phase
#: THREE_BH_U, c = 100 (orbital speeds ~0.01 c), sticky radii 5 Schwarzschild radii; found
#: by scanning b (bench/validate_pn25.py).
THREE_BH_B2 = 27.5 / 60
THREE_BH_U = (0.31, 0.62, 0.17, 0.44, 0.5, 0.5, 0.5, 0.5)
THREE_BH_C = 100.0


def three_bh_outcome(clight: float) -> fb.Outcome:
    """The validation's three-black-hole encounter with the speed of light ``clight`` (0:
    Newtonian), recoil angles 0.3, 0.7, 0.1."""
    bin_, sin = _bh_binary_and_single(THREE_BH_C)
    vc = fb.critical_velocity(bin_, sin)
    b = fb.pericentre_impact_parameter(1.0, 0.1 * vc, 2.0) * math.sqrt(THREE_BH_B2)
    state = fb.initial_state(bin_, sin, 0.1 * vc, b, THREE_BH_U)
    state.recoil_uniforms = np.array([0.3, 0.7, 0.1])
    return fb.integrate(state, fb.EncounterSettings(clight=clight))


def test_three_black_holes_merge_with_the_term_and_not_without():
    """The same three-black-hole encounter: Newtonian, the binary survives ([0 1] 2, no
    contact of the sticky radii); with the 2.5PN term, black holes 1 and 2 capture each
    other and merge, and the product keeps the fit's fraction of their mass (0.9517), the
    encounter's energy books close with the radiated work (valid), one merger counts as
    general relativity's."""
    newton = three_bh_outcome(0.0)
    assert newton.valid and newton.mergers == 0, newton.hierarchy
    gr = three_bh_outcome(THREE_BH_C)
    assert gr.valid, gr.reason
    assert gr.mergers == 1 and gr.n_gw_mergers == 1, gr.hierarchy
    assert gr.de_gw < 0.0 and gr.de_rel < 1e-6
    merged = [p for p in _walk(gr.products) if p.is_single and len(p.ids) == 2]
    assert len(merged) == 1
    frac = bh_merger_remnant(1 / 3, 1 / 3)[0]
    assert merged[0].m == pytest.approx(2 / 3 * frac, rel=1e-12)


def _walk(products):
    for p in products:
        yield p
        yield from _walk(p.children)


def test_newtonian_encounters_draw_and_do_nothing_new():
    """clight = 0, or fewer than two black holes: no recoil draws (the stream advances by the
    encounter's 9 only), de_gw = 0, and the outcome is the one without black-hole flags."""
    from tests.conftest import rng_states

    bin_, sin = _bh_binary_and_single(radius=1e-3)
    vc = fb.critical_velocity(bin_, sin)
    plain_bin = fb.binary((0, 1), bin_.masses, 1.0, 0.0, bin_.radii)
    plain_sin = fb.single(2, sin.masses[0], sin.radii[0])
    a, b = rng_states(4, seed=9), rng_states(4, seed=9)
    for row in range(4):
        o1 = fb.scatter(bin_, sin, 0.3 * vc, 2.0, a, row)
        o2 = fb.scatter(plain_bin, plain_sin, 0.3 * vc, 2.0, b, row)
        assert o1.hierarchy == o2.hierarchy and o1.de_gw == 0.0 == o2.de_gw
        assert o1.de_rel == o2.de_rel
    np.testing.assert_array_equal(a, b)
    c = rng_states(1, seed=9)
    st = fb.sample_encounter(bin_, plain_sin, 0.3 * vc, 2.0, c, 0)
    before = c.copy()
    fb.draw_recoil_uniforms(st, fb.EncounterSettings(clight=30.0), c, 0)  # two BHs: draws
    assert st.recoil_uniforms.size == fb.RECOIL_DRAWS and not np.array_equal(c, before)
    d = rng_states(1, seed=9)
    st = fb.sample_encounter(plain_bin, sin, 0.3 * vc, 2.0, d, 0)
    before = d.copy()
    fb.draw_recoil_uniforms(st, fb.EncounterSettings(clight=30.0), d, 0)  # one BH: none
    assert st.recoil_uniforms.size == 0 and np.array_equal(d, before)


def test_ias15_refuses_the_term():
    """The reference integrator has no 2.5PN term: asking for it is an error, not a silent
    Newtonian run."""
    from tests.conftest import rng_states

    bin_, sin = _bh_binary_and_single(c=30.0)
    vc = fb.critical_velocity(bin_, sin)
    with pytest.raises(ValueError, match="2.5PN"):
        fb.scatter(bin_, sin, 0.3 * vc, 2.0, rng_states(1, seed=1), 0,
                   fb.EncounterSettings(integrator="ias15", clight=30.0))


# ------------------------------------------------------------------ in the cluster
def test_a_black_hole_merger_product_is_written_with_the_fits_mass_and_spin():
    """The write-back of a product two black holes made with the term (``gw``): the Hénon
    mass is the integrator's (the fit's fraction of the parts'), the Msun mass, BSE's masses
    and the radius scale with it, the spin is the fit's; without ``gw`` the merge rule's
    product is kept (masses summed)."""
    from physics.encounter_events import _leaf
    from physics.stellar_evolution import MEMBER_QUANTITIES

    def member(m, msun):
        d = {"m": m, "m_msun": msun, "rad": 4.24e-6 * msun, "startype": 14,
             "se_tphys": 10.0, **dict.fromkeys(MEMBER_QUANTITIES, 0.0)}
        d.update(mass0=msun, massc=msun, zams=3.0 * msun)
        return d

    def rule(parts):  # BSE's mix of two black holes: the masses add up
        msun = sum(p["m_msun"] for p in parts)
        return {"m_msun": msun, "rad": 4.24e-6 * msun, "startype": 14, "se_tphys": 10.0,
                **dict.fromkeys(MEMBER_QUANTITIES, 0.0), "mass0": msun, "massc": msun,
                "zams": sum(p["zams"] for p in parts)}

    frac, spin, _ = bh_merger_remnant(20.0, 10.0)
    q = fb.Product((4, 7), (2e-3 + 1e-3) * frac, np.zeros(3), np.zeros(3))
    members = {4: member(2e-3, 20.0), 7: member(1e-3, 10.0)}
    assert _leaf(q, members, 1.0, rule, gw=True) == 4
    p = members[4]
    assert p["m"] == pytest.approx(3e-3 * frac, rel=1e-14)
    assert p["m_msun"] == pytest.approx(30.0 * frac, rel=1e-14)
    assert p["massc"] == pytest.approx(30.0 * frac, rel=1e-14)
    assert p["rad"] == pytest.approx(4.24e-6 * 30.0 * frac, rel=1e-14)
    assert p["bhspin"] == pytest.approx(spin, rel=1e-14) and 0.5 < spin < 0.7
    members = {4: member(2e-3, 20.0), 7: member(1e-3, 10.0)}
    _leaf(q, members, 1.0, rule, gw=False)
    assert members[4]["m"] == 3e-3 and members[4]["m_msun"] == 30.0


#: tests/test_bh_capture.py's cluster (~100 black holes made in the first step, GW capture
#: with slow light) with the 2.5PN term in encounters, whose speed of light is cut by
#: PN_SLOW_LIGHT (c ~ 3 N-body velocities): the captured binaries meet black holes from step
#: ~35 on and radiate in the encounters.
PN_RUN = ["binaries.pn25=true"]
PN_SLOW_LIGHT = 1e-4
PN_STEPS = 140


def slow_pn_light(sim, plan: dict) -> None:
    """tests/test_bh_capture.py's plan and slow light, and the encounters' speed of light cut
    by :data:`PN_SLOW_LIGHT`."""
    import dataclasses

    from tests.test_bh_capture import black_holes_with_slow_light

    black_holes_with_slow_light(sim, plan)
    sim.phys = dataclasses.replace(sim.phys, settings=dataclasses.replace(
        sim.phys.settings, clight=sim.phys.settings.clight * PN_SLOW_LIGHT))


def pn_config() -> list[str]:
    from tests.test_bh_capture import CAPTURING

    return [*CAPTURING, *PN_RUN]


def test_a_run_with_the_term_keeps_its_books(tmp_path, monkeypatch):
    """140 steps of the black-hole cluster with the term: encounters among black holes
    radiate (E_gw_encounters < 0), E_tot (less it) stays at E0 to 1e-12 and the mass books
    (M_gw among them) close to 1e-13; the encounters' speed of light is c over the velocity
    unit; without the switch the columns are absent."""
    from cmc.config import load_config
    from cmc.simulation import Simulation
    from parallel.comm import SerialComm
    from tests.test_bh_capture import black_hole_plan

    monkeypatch.chdir(tmp_path)  # evolv2's fort.99
    cfg = pn_config()
    sim = Simulation.create(load_config(None, cfg), SerialComm())
    assert sim.phys.settings.clight == pytest.approx(C_KMS / sim.units.velocity_kms,
                                                      rel=1e-15)
    slow_pn_light(sim, black_hole_plan(cfg))
    for _ in range(PN_STEPS):
        sim.step()
    h = {k: np.asarray(v) for k, v in sim.history.items()}
    assert h["n_binary_single"].sum() >= 5
    assert h["E_gw_encounters"][-1] < -1e-5, h["E_gw_encounters"][-1]
    assert np.max(np.abs(h["dE_rel"])) < 1e-12, np.max(np.abs(h["dE_rel"]))
    mass = h["M"] + h["M_escaped"] + h["M_stripped"] + h["M_se"] + h["M_gw"]
    np.testing.assert_allclose(mass, 1.0, rtol=0, atol=1e-13)
    off = Simulation.create(load_config(None, cfg[:-1]), SerialComm())
    assert off.phys.settings.clight == 0.0
    off.step()
    assert "E_gw_encounters" not in off.history and "n_gw_mergers" not in off.history


@pytest.mark.parametrize("emulate", [0, 3])
def test_restart_with_the_term_is_bit_for_bit(tmp_path, monkeypatch, emulate):
    """The black-hole cluster with the term (and GW captures), stopped at step 70 (checkpoint)
    and continued to 140, equals the uninterrupted run: every star column and the last
    diagnostics row; captures and radiating encounters happen on both sides of the stop."""
    from cmc.config import load_config
    from cmc.simulation import Simulation
    from parallel.comm import SerialComm
    from tests.test_bh_capture import black_hole_plan

    monkeypatch.chdir(tmp_path)
    cfg = [*pn_config(), f"run.emulate_ranks={emulate}"]
    plan = black_hole_plan(cfg[:-1], emulate)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    whole = Simulation.create(load_config(None, cfg), SerialComm(), tmp_path / "a")
    slow_pn_light(whole, plan)
    for _ in range(PN_STEPS):
        whole.step()
    half = Simulation.create(load_config(None, cfg), SerialComm(), tmp_path / "b")
    slow_pn_light(half, plan)
    for _ in range(PN_STEPS // 2):
        half.step()
    half.write_checkpoint()
    again = Simulation.from_checkpoint(tmp_path / "b" / "checkpoint.h5", SerialComm())
    slow_pn_light(again, {})  # the slow light again (the plan is in the stars already)
    for _ in range(PN_STEPS - PN_STEPS // 2):
        again.step()
    assert whole.history["E_gw_encounters"][-1] < 0.0
    caps = np.asarray(whole.history["n_bh_captures"])
    assert caps[:PN_STEPS // 2].sum() >= 3 and caps[PN_STEPS // 2 + 1:].sum() >= 3
    a, b = whole.gather_stars(), again.gather_stars()
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    for k, col in whole.history.items():
        assert np.asarray(col[-1]).tobytes() == np.asarray(again.history[k][-1]).tobytes(), k


def test_recoil_lies_in_the_orbital_plane_at_the_drawn_angle():
    """The recoil of a merger (fewbody_kernels._recoil): its speed is the kick's, it lies in
    the pair's orbital plane (normal to r x v), at the angle theta = 2 pi u: cos(theta) along
    v_rel x L, sin(theta) along v_rel (CMC-COSMIC's fb_merge); a head-on pair
    (no angular momentum) gets the same split with any normal to its relative velocity."""
    from physics.fewbody_kernels import _recoil

    x = np.array([[0.0, 0.0, 0.0], [1.0, 0.2, -0.1]])
    v = np.array([[0.1, 0.0, 0.3], [-0.2, 0.5, 0.1]])
    r, w = x[1] - x[0], v[1] - v[0]
    ell = np.cross(r, w)
    for u in (0.0, 0.25, 0.6):
        dv = _recoil(x, v, 0, 1, 0.01, u)
        assert np.linalg.norm(dv) == pytest.approx(0.01, rel=1e-12)
        assert abs(dv @ ell) < 1e-14 * np.linalg.norm(ell)
        y = w / np.linalg.norm(w)
        assert dv @ y == pytest.approx(0.01 * math.sin(2 * math.pi * u), abs=1e-14)
    head_on = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    dv = _recoil(head_on, np.array([[0.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]), 0, 1, 0.01, 0.3)
    assert np.linalg.norm(dv) == pytest.approx(0.01, rel=1e-12)
    assert -dv[0] == pytest.approx(0.01 * math.sin(2 * math.pi * 0.3), abs=1e-15)
    assert not np.any(_recoil(x, v, 0, 1, 0.0, 0.3))
