"""Gravitational-wave capture of two single black holes (CMC's BH_CAPTURE,
``binaries.bh_capture``): the capture pericentre and the energy radiated against Quinlan &
Shapiro's / Peters' formulas, the selection kernel against a plain twin (and nothing changed
with the switch off), the event's binary (a, e, the energy radiated booked exactly) and its
merger inside the sticky radii, the configuration.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cmc.config import ConfigError, load_config
from parallel.rng import taus_uniform
from physics import encounters as enc
from physics.binaries import binding_energy
from physics.encounter_events import capture_pericentre, gw_energy_loss
from physics.encounters import C
from physics.potential import compute_potential
from physics.relaxation import gw_capture_pericentre
from tests.test_collisions import _energy, _peters_loss, _select, _singles, _states, _twin

BH = 14


@pytest.mark.parametrize("m1,m2,w,c", [(1e-3, 1e-3, 0.5, 300.0), (3e-3, 5e-4, 1.3, 40.0),
                                       (2e-5, 7e-5, 0.05, 1e4)])
def test_capture_pericentre_radiates_the_kinetic_energy_at_infinity(m1, m2, w, c):
    """At r_cap the energy radiated on the passage equals the pair's kinetic energy at
    infinity, mu W^2 / 2 (to the 8 digits of CMC's constants); r_cap solved independently
    from that condition; the loss formula is Peters'."""
    mu = m1 * m2 / (m1 + m2)
    r_cap = float(gw_capture_pericentre(m1, m2, w, c))
    assert _peters_loss(m1, m2, r_cap, c) == pytest.approx(0.5 * mu * w * w, rel=1e-6)
    assert gw_energy_loss(m1, m2, r_cap, c) == pytest.approx(0.5 * mu * w * w, rel=1e-6)
    r_solved = (_peters_loss(m1, m2, 1.0, c) / (0.5 * mu * w * w)) ** (1.0 / 3.5)
    assert r_cap == pytest.approx(r_solved, rel=1e-6)
    for rp in (0.3 * r_cap, 2.0 * r_cap):
        assert gw_energy_loss(m1, m2, rp, c) == pytest.approx(_peters_loss(m1, m2, rp, c),
                                                              rel=1e-6)


def test_impact_parameter_gives_the_pericentre():
    """b = sqrt(u) b_max gives the pericentre of the focused hyperbola: b^2 = rp^2 + 2 M rp /
    W^2 (b = b_max at u = 1 gives r_max); the form used keeps its digits at strong focusing."""
    m12, w, r_max = 2e-3, 0.4, 1e-7
    assert capture_pericentre(1.0, r_max, m12, w) == pytest.approx(r_max, rel=1e-12)
    b_max = r_max * math.sqrt(1.0 + 2.0 * m12 / (r_max * w * w))
    for u in (0.01, 0.3, 0.77):
        rp = capture_pericentre(u, r_max, m12, w)
        assert rp * rp + 2.0 * m12 * rp / (w * w) == pytest.approx(u * b_max * b_max,
                                                                  rel=1e-12)


def _bh_table(n: int, seed: int, frac: float = 0.5) -> dict:
    t = _singles(n, seed)
    rng = np.random.default_rng(seed + 100)
    t["m"] = rng.uniform(0.5, 2.0, n)
    t["m"] /= t["m"].sum()
    t["startype"][:] = np.where(rng.random(n) < frac, BH, 1)
    t["rad"][:] = 0.0
    return t


def _select_bh(t, states, dt_nb, coll_rad, is_bh, c):
    from physics.relaxation import relax_or_select_pairs

    n = t["m"].size
    nb = states.shape[0]
    encounter = np.zeros(n // 2 + 1, dtype=bool)
    phi = np.zeros(n // 2 + 1)
    w = np.zeros(n // 2 + 1)
    relax_or_select_pairs(t["r"], 0, t["m"], t["vr"], t["vt"], t["bin_a"], t["binind"] >= 0,
                          np.zeros(n, dtype=bool), states, 1e-3, float(n), 1.0, dt_nb, 2.0,
                          2.0, True, True, np.zeros((nb, 2)), encounter, phi, w,
                          np.zeros((nb, 3)), coll_rad, is_bh, c)
    return encounter


def test_capture_selection_equals_its_twin_and_its_probability():
    """Pairs of two single black holes are tested with S = max(S_coll, S_cap) (their sticky
    radii 0 or not): the kernel's decisions equal a plain loop's draw for draw (r_cap solved
    there from the energy condition, so to 1e-7: no pair's P lies that close to its u here),
    and over 5 streams their number equals the sum of P (5 sigma)."""
    n, c, dt_nb = 4000, 1.0, 1.0
    counts, sums = [], []
    for seed in range(5):
        t = _bh_table(n, seed + 1)
        is_bh = t["startype"] == BH
        coll_rad = np.zeros(n)
        coll_rad[::5] = 3e-3  # some stars with sticky radii: BH pairs take the larger S
        tt = {k: v.copy() for k, v in t.items()}
        sk, st = _states(n // 20, seed + 1), _states(n // 20, seed + 1)
        encounter = _select_bh(tt, sk, dt_nb, coll_rad, is_bh, c)
        p = []
        np.testing.assert_array_equal(encounter, _twin(t, st, dt_nb, coll_rad, is_bh, c, p))
        np.testing.assert_array_equal(sk, st)
        counts.append(int(encounter.sum()))
        sums.append(np.array(p))
    p = np.concatenate(sums)
    assert 50 < p.sum() < 2000, p.sum()
    var = float(np.sum(p * (1 - p)))
    assert abs(sum(counts) - p.sum()) < 5 * math.sqrt(var), (counts, p.sum())


def test_without_capture_nothing_changes():
    """is_bh with clight = 0, or None (the default), and the switch off in the collision
    kernel: the same bits, the same streams (no extra draw)."""
    n = 400
    t = _bh_table(n, 7)
    is_bh = t["startype"] == BH
    for coll_rad in (np.zeros(n), np.full(n, 1e-3)):
        res = []
        for args in ((coll_rad, None, 0.0), (coll_rad, is_bh, 0.0)):
            tt = {k: v.copy() for k, v in t.items()}
            s = _states(20, 3)
            e = _select_bh(tt, s, 1.0, *args)
            res.append((e, s, tt["vr"], tt["vt"]))
        for a, b in zip(res[0], res[1], strict=True):
            np.testing.assert_array_equal(a, b)
    # and with no collision radii: as the kernel called without them (coll_rad None)
    a, b = {k: v.copy() for k, v in t.items()}, {k: v.copy() for k, v in t.items()}
    sa, sb = _states(20, 4), _states(20, 4)
    _select(a, sa, 1.0, None)
    _select_bh(b, sb, 1.0, np.zeros(n), is_bh, 0.0)
    np.testing.assert_array_equal(sa, sb)
    np.testing.assert_array_equal(a["vt"], b["vt"])


def _event(t: dict, i: int, phi: float, phys: enc.BinaryPhysics, seed: int = 5):
    n = t["m"].size
    encounter = np.zeros(n // 2 + 1, dtype=bool)
    encounter[i // 2] = True
    enc_phi = np.zeros(n // 2 + 1)
    enc_phi[i // 2] = phi
    vi, vj = enc.pair_velocities(t["vr"][i], t["vt"][i], t["vr"][i + 1], t["vt"][i + 1], phi)
    enc_w = np.zeros(n // 2 + 1)
    enc_w[i // 2] = np.linalg.norm(vj - vi)
    nb = (n + 19) // 20
    states = _states(nb, seed)
    before = states.copy()
    phi_all, _ = compute_potential(t["r"], t["m"])
    out = enc.apply_events(
        t, 0, t["r"], phi_all, states, encounter, enc_phi, enc_w,
        np.zeros(nb * enc.TRIPLETS_PER_BLOCK, dtype=bool), np.tile([1.0, 0.1, 1.0 / n], (nb, 1)),
        np.zeros(n, dtype=bool), phys)
    return out, before, states, float(enc_w[i // 2]), vi, vj


def test_capture_forms_the_binary_and_books_the_radiated_energy():
    """A selected pair of single black holes draws one uniform (its impact parameter) and,
    outside the sticky radii, becomes a binary in the first row's slot: a and e from the
    pericentre and the energy left after the passage (computed here independently), the ids
    and masses kept, and K + W + E_binding changes by exactly e_gw_capture (to rounding)."""
    n, i, phi, c = 60, 20, 1.1, 30.0
    t = _singles(n, seed=4)
    t["m"][i] *= 20.0
    t["m"][i + 1] *= 12.0
    t["m"] /= t["m"].sum()
    t["startype"][[i, i + 1]] = BH
    t["rad"][:] = 1e-6
    e0 = _energy(t, np.arange(n), t["r"])
    phys = enc.BinaryPhysics(radius_unit=1e-3, bh_capture=True, clight=c)
    (out, gidx, _, counts, *_), before, states, w, vi, vj = _event(t, i, phi, phys)
    # one draw, from the pair's block
    drawn = before.copy()
    u = taus_uniform(drawn, i // 20)
    np.testing.assert_array_equal(states, drawn)
    assert counts[C["n_bh_captures"]] == 1 and counts[C["n_collisions"]] == 0
    mi, mj = t["m"][i], t["m"][i + 1]
    m12, mu = mi + mj, mi * mj / (mi + mj)
    # independently: r_cap from the energy condition, b uniform in b^2 below b_max, the
    # pericentre of the focused hyperbola, then the orbit left
    r_cap = (_peters_loss(mi, mj, 1.0, c) / (0.5 * mu * w * w)) ** (1.0 / 3.5)
    b2 = u * r_cap ** 2 * (1.0 + 2.0 * m12 / (r_cap * w * w))
    rp = -m12 / w ** 2 + math.sqrt((m12 / w ** 2) ** 2 + b2)
    e_orb = 0.5 * mu * w * w - _peters_loss(mi, mj, rp, c)
    assert e_orb < 0.0
    a = mi * mj / (2.0 * -e_orb)
    k = int(np.flatnonzero(out["binind"] >= 0)[0])
    assert out["m"].size == n - 1 and gidx[k] == i
    assert out["bin_a"][k] == pytest.approx(a, rel=1e-6)
    assert out["bin_e"][k] == pytest.approx(1.0 - rp / a, rel=1e-6)
    assert (out["bin_id1"][k], out["bin_id2"][k]) == (t["id"][i], t["id"][i + 1])
    assert (out["bin_m1"][k], out["bin_m2"][k]) == (mi, mj) and out["m"][k] == mi + mj
    assert out["bin_startype1"][k] == BH and out["bin_startype2"][k] == BH
    assert sorted(set(out["id"]) - {out["id"][k]}) == sorted(
        set(t["id"]) - {t["id"][i], t["id"][i + 1]})
    # the books: K + W + E_binding - e_gw_capture is kept to rounding; the radiated energy is
    # the passage's loss less the orbit's kinetic energy at infinity
    e_b = float(binding_energy(out["bin_m1"][k], out["bin_m2"][k], out["bin_a"][k]))
    e1 = _energy(out, gidx, t["r"]) + e_b
    de = counts[C["e_gw_capture"]]
    assert de < 0.0
    assert abs(e1 - de - e0) < 1e-14 * abs(e0)
    assert de == pytest.approx(-0.5 * mu * w * w + e_orb, rel=1e-6)  # CMC's 8 digits
    assert counts[C["e_mergers"]] == 0.0


def test_capture_inside_the_sticky_radii_merges():
    """With sticky radii larger than the capture pericentre every drawn pericentre lies inside
    them: the black holes merge (as a collision: one star, mass the sum, -mu W^2/2 in
    e_mergers), after their one draw."""
    n, i, phi, c = 60, 20, 0.4, 30.0
    t = _singles(n, seed=4)
    t["startype"][[i, i + 1]] = BH
    t["rad"][:] = 1.0
    phys = enc.BinaryPhysics(radius_unit=1e-2, bh_capture=True, clight=c, ss_collision=True)
    (out, gidx, _, counts, *_), before, states, w, _, _ = _event(t, i, phi, phys)
    assert 2e-2 > float(gw_capture_pericentre(t["m"][i], t["m"][i + 1], w, c))
    drawn = before.copy()
    taus_uniform(drawn, i // 20)
    np.testing.assert_array_equal(states, drawn)
    assert counts[C["n_collisions"]] == 1 and counts[C["n_bh_captures"]] == 0
    assert counts[C["e_gw_capture"]] == 0.0
    assert out["m"].size == n - 1 and np.all(out["binind"] < 0)
    mu = t["m"][i] * t["m"][i + 1] / (t["m"][i] + t["m"][i + 1])
    assert counts[C["e_mergers"]] == pytest.approx(-0.5 * mu * w * w, rel=1e-12)


def test_capture_switch_off_or_not_black_holes_is_a_plain_collision():
    """Two single stars that are not both black holes, or capture off: a collision that draws
    nothing (as before)."""
    n, i = 60, 20
    for types, cap in (((BH, 1), True), ((BH, BH), False)):
        t = _singles(n, seed=4)
        t["startype"][[i, i + 1]] = types
        phys = enc.BinaryPhysics(radius_unit=1e-3, bh_capture=cap, clight=30.0,
                                 ss_collision=True)
        (out, *_, counts, _s, _m, _c), before, states, *_ = _event(t, i, 0.3, phys)
        np.testing.assert_array_equal(states, before)
        assert counts[C["n_collisions"]] == 1 and counts[C["n_bh_captures"]] == 0


def test_bh_capture_config():
    with pytest.raises(ConfigError, match=r"^binaries\.bh_capture: needs bse\.stellar_evolution"):
        load_config(None, ["binaries.bh_capture=true"])
    cfg = load_config(None, ["binaries.bh_capture=true", "bse.stellar_evolution=true"])
    assert cfg.binaries.bh_capture and not cfg.binaries.ss_collision
    assert not load_config(None, []).binaries.bh_capture  # CMC's BH_CAPTURE = 0
    from cmc.initial import ensure_binary_columns

    stars = {"m": np.full(10, 0.1), "startype": np.ones(10, dtype=np.int64)}
    ensure_binary_columns(stars, "off", True, cfg.binaries.bh_capture)
    assert "bin_a" in stars


def test_simulation_carries_the_speed_of_light(tmp_path, monkeypatch):
    """BinaryPhysics.clight is c over the run's velocity unit with the switch, 0 without; the
    diagnostics have n_bh_captures and E_gw_capture only with it."""
    monkeypatch.chdir(tmp_path)  # evolv2's fort.99
    from cmc.simulation import C_KMS, Simulation
    from parallel.comm import SerialComm

    base = ["initial.n=400", "initial.seed=3", "bse.stellar_evolution=true",
            "run.n_core_stop=0"]
    sim = Simulation.create(load_config(None, [*base, "binaries.bh_capture=true"]),
                            SerialComm())
    assert sim.phys.bh_capture
    assert sim.phys.clight == pytest.approx(C_KMS / sim.units.velocity_kms, rel=1e-15)
    assert sim.stars.has_binary_fields
    sim.step()
    assert len(sim.history["n_bh_captures"]) == 2  # the initial row and the step's
    assert not any(sim.history["n_bh_captures"]) and not any(sim.history["E_gw_capture"])
    off = Simulation.create(load_config(None, base), SerialComm())
    assert off.phys.clight == 0.0
    off.step()
    assert "n_bh_captures" not in off.history and "E_gw_capture" not in off.history


#: A cluster that makes ~100 black holes in its first step: a top-heavy power law (dN/dm ~
#: m^-1, 0.5-40 Msun, N = 2000) at Z = 0.0002 whose stars above 25 Msun are aged to explode
#: in step 1 (small fallback kicks: ~97 stay), with GW capture on.
CAPTURING = ["initial.n=2000", "initial.seed=4", "initial.mass_function=power_law",
             "initial.alpha=1.0", "initial.m_min=0.5", "initial.m_max=40",
             "bse.stellar_evolution=true", "bse.metallicity=0.0002", "binaries.bh_capture=true",
             "run.n_core_stop=0"]
#: The speed of light is cut by this factor in these runs (the capture radius grows as
#: c^(-10/7)), so that the ~100 black holes capture each other within a few steps.
SLOW_LIGHT = 1e-6


def black_hole_plan(cfg_args, comm_size: int = 0) -> dict:
    """The aged-star plan (tests/test_stellar_evolution_run.py) for CAPTURING's stars above
    25 Msun: they explode in the middle of the first step."""
    from cmc.simulation import Simulation
    from parallel.comm import SerialComm
    from tests.test_stellar_evolution_run import plan_supernovae, step_times

    emu = [f"run.emulate_ranks={comm_size}"] if comm_size > 1 else []
    t = step_times(Simulation.create(load_config(None, [*cfg_args, *emu]), SerialComm()), 1)
    return plan_supernovae(Simulation.create(load_config(None, cfg_args), SerialComm()),
                           0.5 * (t[0] + t[1]), m_min=25.0)


def black_holes_with_slow_light(sim, plan: dict) -> None:
    """``plan`` applied, and the run's speed of light cut by :data:`SLOW_LIGHT`."""
    import dataclasses

    from tests.test_stellar_evolution_run import apply_plan

    apply_plan(sim, plan)
    sim.phys = dataclasses.replace(sim.phys, clight=sim.phys.clight * SLOW_LIGHT)


def test_a_run_with_captures_keeps_its_books(tmp_path, monkeypatch):
    """~100 black holes that capture each other (slow light): binaries form, E_tot (less
    E_gw_capture, the energy the waves carried away) stays at E0 to 1e-12, the mass books
    close to 1e-13, and the BBHs are black-hole binaries of the census."""
    from cmc.simulation import Simulation
    from parallel.comm import SerialComm

    monkeypatch.chdir(tmp_path)  # evolv2's fort.99
    plan = black_hole_plan(CAPTURING)
    sim = Simulation.create(load_config(None, CAPTURING), SerialComm())
    black_holes_with_slow_light(sim, plan)
    for _ in range(12):
        sim.step()
    h = {k: np.asarray(v) for k, v in sim.history.items()}
    assert h["n_supernovae"].sum() == len(plan) > 150
    assert h["N_bh"][-1] >= 50
    assert h["n_bh_captures"].sum() >= 3, h["n_bh_captures"].sum()
    assert h["N_bbh"][-1] >= 1
    assert h["E_gw_capture"][-1] < 0.0  # radiated: the mechanical energy fell
    assert np.max(np.abs(h["dE_rel"])) < 1e-12, np.max(np.abs(h["dE_rel"]))
    mass = h["M"] + h["M_escaped"] + h["M_stripped"] + h["M_se"]
    np.testing.assert_allclose(mass, 1.0, rtol=0, atol=1e-13)
