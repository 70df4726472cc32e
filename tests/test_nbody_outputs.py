"""The N-body mode's outputs as the Monte Carlo run's (issue 50): cmc.nbody_outputs.

Binaries by a neighbour search (mutual nearest neighbours, bound, tidal perturbation at the
apocentre below 0.25), the diagnostics columns with the Monte Carlo run's names, and the
escaper table (escapers.h5) with the Monte Carlo table's columns, units and restart rule.
"""

from __future__ import annotations

import math

import h5py
import numpy as np
import pytest

from cmc import io as cio
from cmc.diagnostics import DIAG_MEANINGS, DIAG_UNITS
from cmc.fields import ESCAPE_UNBOUND, escaper_columns
from cmc.nbody_outputs import (
    BINARY_COLUMNS,
    GAMMA_MAX,
    Binaries,
    binary_columns,
    concat_rows,
    escaper_fields,
    escaper_rows,
    find_binaries,
    open_escapers,
)


def plummer_cloud(n: int, rng: np.random.Generator):
    """Positions of a Plummer sphere (scale 3 pi / 16, the 1% tails cut), random velocities
    of dispersion 0.4 per component, equal masses 1/200, ids not the rows."""
    b = 3.0 * math.pi / 16.0
    u = rng.uniform(0.01, 0.99, n)
    r = b / np.sqrt(u ** (-2.0 / 3.0) - 1.0)
    d = rng.normal(size=(n, 3))
    pos = r[:, None] * d / np.linalg.norm(d, axis=1)[:, None]
    vel = rng.normal(0.0, 0.4, (n, 3))
    return pos, vel, np.full(n, 1.0 / 200.0)


def rotation(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    return q * np.sign(np.diag(r))


def kepler_pair(a, e, m1, m2, f, x, v, rot):
    """Members' positions and velocities (2, 3) of a Kepler orbit (a, e) at true anomaly f,
    centre of mass at x moving with v, orbital plane rotated by rot."""
    mt = m1 + m2
    p = a * (1.0 - e * e)
    rr = p / (1.0 + e * math.cos(f))
    rel = rot @ np.array([rr * math.cos(f), rr * math.sin(f), 0.0])
    relv = rot @ (math.sqrt(mt / p) * np.array([-math.sin(f), e + math.cos(f), 0.0]))
    pos = np.array([x - m2 / mt * rel, x + m1 / mt * rel])
    vel = np.array([v - m2 / mt * relv, v + m1 / mt * relv])
    return pos, vel


def cluster_with_binaries(rng, n, specs):
    """A Plummer cloud of n stars whose first 2 len(specs) stars are replaced by the members
    of Kepler binaries ``(a, e, m1, m2, f)`` at the replaced stars' places; ids shuffled."""
    pos, vel, mass = plummer_cloud(n, rng)
    for k, (a, e, m1, m2, f) in enumerate(specs):
        i = 2 * k
        p, v = kepler_pair(a, e, m1, m2, f, pos[i], vel[i], rotation(rng))
        pos[i:i + 2], vel[i:i + 2], mass[i:i + 2] = p, v, (m1, m2)
    ids = rng.permutation(n).astype(np.int64) * 3 + 11
    return pos, vel, mass, ids


@pytest.mark.parametrize("eps2", [0.0, 1e-10])
def test_kepler_binary_in_plummer_found_exactly(eps2):
    rng = np.random.default_rng(50)
    a, e, m1, m2 = 1.0e-3, 0.7, 0.007, 0.003
    pos, vel, mass, ids = cluster_with_binaries(rng, 200, [(a, e, m1, m2, 2.0)])
    b = find_binaries(pos, vel, mass, ids, eps2)
    # the only binary of this cloud (its chance neighbours are unbound or torn)
    assert b.size == 1
    assert {int(b.id1[0]), int(b.id2[0])} == {int(ids[0]), int(ids[1])}
    assert b.id1[0] < b.id2[0]
    first = 0 if ids[0] < ids[1] else 1  # member 1 is the smaller id
    assert b.m1[0] == mass[first] and b.m2[0] == mass[1 - first]
    assert abs(b.a[0] / a - 1.0) < 1e-10
    assert abs(b.e[0] / e - 1.0) < 1e-10
    assert b.E_b[0] == -0.5 * m1 * m2 / b.a[0]
    assert abs(b.E_b[0] / (-0.5 * m1 * m2 / a) - 1.0) < 1e-10
    x_cm = (mass[0] * pos[0] + mass[1] * pos[1]) / (m1 + m2)
    np.testing.assert_allclose(b.x_cm[0], x_cm, rtol=0, atol=1e-15)
    v_cm = (mass[0] * vel[0] + mass[1] * vel[1]) / (m1 + m2)
    np.testing.assert_allclose(b.v_cm[0], v_cm, rtol=0, atol=1e-15)
    assert 0.0 < b.gamma[0] < 1e-3
    assert sorted((int(b.i1[0]), int(b.i2[0]))) == [0, 1]


def three_body(r_third: float):
    """A bound circular pair (separation 0.05, masses 0.01) at the origin and an equal third
    body at ``r_third`` from its centre of mass, normal to the pair's axis, at rest."""
    m = 0.01
    pos_p, vel_p = kepler_pair(0.05, 0.0, m, m, 0.0, np.zeros(3), np.zeros(3), np.eye(3))
    pos = np.vstack([pos_p, [0.0, 0.0, r_third]])
    vel = np.vstack([vel_p, np.zeros(3)])
    return pos, vel, np.full(3, m), np.array([4, 7, 9], dtype=np.int64)


def test_wide_pair_perturbed_by_close_third_body_is_not_a_binary():
    # third body at 0.07: both members' nearest neighbour is still the other (0.05 < 0.074)
    # and the pair is bound, but gamma = 2 m3 Q^3 / (m12 R^3) = 0.364 > 0.25
    pos, vel, mass, ids = three_body(0.07)
    d = np.linalg.norm(pos[:, None] - pos[None], axis=2) + np.eye(3)
    assert d[0, 1] < min(d[0, 2], d[1, 2])
    gamma = 2 * mass[2] * 0.05 ** 3 / (2 * mass[0] * 0.07 ** 3)
    assert gamma > GAMMA_MAX
    assert find_binaries(pos, vel, mass, ids).size == 0
    # the same pair with the third body far away is one
    pos, vel, mass, ids = three_body(0.5)
    b = find_binaries(pos, vel, mass, ids)
    assert b.size == 1 and (b.id1[0], b.id2[0]) == (4, 7)
    assert abs(b.a[0] / 0.05 - 1.0) < 1e-12 and b.e[0] < 1e-12


def test_hierarchical_triple_gives_its_inner_binary_only():
    # a light tight binary (a = 1e-3) on a circular orbit at 0.05 about a heavy star: the
    # heavy star's nearest neighbour is a member, and that pair is bound and little
    # perturbed by the other (light) member, but not mutual nearest neighbours
    big, m = 1.0, 1e-3
    x = np.array([0.05, 0.0, 0.0])
    v = np.array([0.0, math.sqrt((big + 2 * m) / 0.05), 0.0])
    p, w = kepler_pair(1e-3, 0.3, m, m, 1.0, x, v, rotation(np.random.default_rng(3)))
    pos = np.vstack([np.zeros(3), p])
    vel = np.vstack([np.zeros(3), w])
    mass = np.array([big, m, m])
    ids = np.array([1, 2, 3], dtype=np.int64)
    b = find_binaries(pos, vel, mass, ids)
    assert list(b.id1) == [2] and list(b.id2) == [3]
    assert abs(b.a[0] / 1e-3 - 1.0) < 1e-10 and abs(b.e[0] / 0.3 - 1.0) < 1e-10
    # the outer orbit: gamma = 2 m0 Q^3 / (m12 R^3), R the distance of the heavy star
    q = 1e-3 * 1.3
    assert abs(b.gamma[0] / (2 * big * q ** 3 / (2 * m * 0.05 ** 3)) - 1.0) < 1e-12


def test_chance_pair_of_unbound_neighbours_is_not_a_binary():
    rng = np.random.default_rng(7)
    pos, vel, mass = plummer_cloud(200, rng)
    ids = np.arange(200, dtype=np.int64)
    sep, m = 0.01, mass[0]
    v_esc = math.sqrt(2.0 * 2.0 * m / sep)
    # an isolated pair of neighbours far out, flying apart at 1.5 times the escape speed
    pos[0], pos[1] = [5.0, 0.0, 0.0], [5.0, sep, 0.0]
    vel[0], vel[1] = [0.1, 0.0, 0.0], [0.1, 0.0, 1.5 * v_esc]
    hits = find_binaries(pos, vel, mass, ids)
    assert 0 not in hits.id1
    # the same pair at 0.9 of the escape speed is bound, hence a binary
    vel[1] = [0.1, 0.0, 0.9 * v_esc]
    hits = find_binaries(pos, vel, mass, ids)
    assert 0 in hits.id1 and hits.id2[list(hits.id1).index(0)] == 1
    # ... unless the integration's softening unbinds it: eps = sep makes the potential at
    # sep a factor sqrt(2) shallower, and 0.9^2 > 1 / sqrt(2)
    hits = find_binaries(pos, vel, mass, ids, eps2=sep * sep)
    assert 0 not in hits.id1


def test_order_and_bits_independent_of_input_order():
    rng = np.random.default_rng(11)
    specs = [(2e-3, 0.3, 0.004, 0.006, 0.5), (5e-4, 0.9, 0.01, 0.01, 3.0),
             (1e-3, 0.1, 0.002, 0.008, 5.5)]
    pos, vel, mass, ids = cluster_with_binaries(rng, 200, specs)
    b = find_binaries(pos, vel, mass, ids)
    assert b.size >= 3
    assert np.all(np.diff(b.id1) > 0) and np.all(b.id1 < b.id2)
    assert set(b.id1) >= {min(ids[2 * k], ids[2 * k + 1]) for k in range(3)}
    centre = np.array([0.01, -0.02, 0.0])
    cols = binary_columns(b, pos, 0.5, centre)
    for seed in (1, 2, 3):
        perm = np.random.default_rng(seed).permutation(200)
        bp = find_binaries(pos[perm], vel[perm], mass[perm], ids[perm])
        for name, arr in b.as_dict().items():
            if name in ("i1", "i2"):
                np.testing.assert_array_equal(perm[getattr(bp, name)], arr)
            else:
                assert arr.dtype == getattr(bp, name).dtype
                assert arr.tobytes() == getattr(bp, name).tobytes(), name
        assert binary_columns(bp, pos[perm], 0.5, centre) == cols


def test_binary_columns_match_a_hand_count():
    c = np.array([0.1, 0.0, 0.0])
    m = 0.01
    parts = [kepler_pair(1e-3, 0.2, m, m, 1.0, c + [0.2, 0.0, 0.0], np.zeros(3), np.eye(3)),
             kepler_pair(1e-3, 0.5, m, m, 2.0, c + [0.0, 2.0, 0.0], np.zeros(3), np.eye(3)),
             # centre of mass 0.9995 from c, members on either side of r_c = 1
             kepler_pair(2e-3, 0.0, m, m, 0.0, c + [0.0, 0.0, 0.9995], np.zeros(3),
                         np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))]
    singles = c + np.array([[-0.5, 0.0, 0.0], [0.0, -0.5, 0.0], [0.3, 0.3, -0.4],
                            [0.0, 0.0, -3.0], [3.0, 1.0, 0.0]])
    pos = np.vstack([p for p, _ in parts] + [singles])
    vel = np.vstack([v for _, v in parts] + [np.zeros((5, 3))])
    mass = np.full(11, m)
    ids = np.arange(100, 111, dtype=np.int64)
    r = np.linalg.norm(pos - c, axis=1)
    assert r[4] < 1.0 < r[5]  # the third binary straddles r_c
    b = find_binaries(pos, vel, mass, ids)
    assert list(b.id1) == [100, 102, 104] and list(b.id2) == [101, 103, 105]
    cols = binary_columns(b, pos, 1.0, c)
    assert set(cols) == set(BINARY_COLUMNS)
    # 11 stars, 3 binaries: 8 objects; in the core: 3 singles and the binaries 1 and 3
    assert cols["N_binaries"] == 3.0
    assert cols["binary_fraction"] == 3.0 / 8.0
    assert cols["binary_fraction_core"] == 2.0 / 5.0
    e_b = -0.5 * m * m * (2.0 / 1e-3 + 1.0 / 2e-3)
    assert abs(cols["E_binding"] / e_b - 1.0) < 1e-12
    assert cols["E_binding"] == float(np.sum(b.E_b))
    # the columns are the Monte Carlo run's, with its units
    assert {k: DIAG_UNITS[k] for k in cols} == {
        "N_binaries": "binaries", "binary_fraction": "1", "binary_fraction_core": "1",
        "E_binding": "E_NB"}
    assert all(k in DIAG_MEANINGS for k in cols)
    empty = binary_columns(Binaries.empty(), pos, 1.0, c)
    assert empty == {"N_binaries": 0.0, "binary_fraction": 0.0,
                     "binary_fraction_core": 0.0, "E_binding": 0.0}


def escaper_setup():
    """A point mass 0.5 at the centre c and two stars that escape (ids 9 and 2) and one that
    escaped before (id 5), in a frame moving with -V."""
    c = np.array([1.0, 2.0, 3.0])
    big_v = np.array([0.1, -0.2, 0.3])
    n_hat = np.array([2.0, -1.0, 2.0]) / 3.0
    t_hat = np.array([1.0, 2.0, 0.0]) / math.sqrt(5.0)
    assert abs(n_hat @ t_hat) < 1e-15
    r, vr, vt = 4.0, 0.3, 0.2
    pos = np.array([c + 10.0 * n_hat, c + r * n_hat, c - 2.0 * r * t_hat, c])
    vel = np.array([big_v, big_v + vr * n_hat + vt * t_hat, big_v - 0.5 * t_hat, big_v])
    mass = np.array([1e-3, 2e-3, 3e-3, 0.5])
    pot = np.append(-0.5 / np.linalg.norm(pos[:3] - c, axis=1), -1.0)
    ids = np.array([5, 9, 2, 0], dtype=np.int64)
    new = np.array([False, True, True, False])
    return dict(new_mask=new, ids=ids, mass=mass, pos=pos, vel=vel, pot=pot, centre=c,
                v_cm=big_v), (r, vr, vt)


def test_escaper_rows_energy_and_angular_momentum_of_a_known_orbit():
    args, (r, vr, vt) = escaper_setup()
    rows = escaper_rows(**args, step=7, time_rel=0.125,
                        star_fields={"m_msun": np.array([1.0, 2.0, 3.0, 4.0])})
    cols = escaper_columns(False, False)
    assert [f.name for f in cols] == list(rows)
    assert all(rows[f.name].dtype == np.dtype(f.dtype) for f in cols)
    assert list(rows["id"]) == [2, 9]  # kind, then id, as the Monte Carlo table
    k = 1  # the star of id 9: r, vr, vt about c in the frame of V
    assert abs(rows["r"][k] - r) < 1e-14
    assert abs(rows["vr"][k] - vr) < 1e-14 and abs(rows["vt"][k] - vt) < 1e-14
    assert abs(rows["E"][k] - (0.5 * (vr * vr + vt * vt) - 0.5 / r)) < 1e-14
    assert abs(rows["J"][k] - r * vt) < 1e-14
    # the star of id 2: at 2 r along -t_hat, moving along -t_hat: radial, J = 0
    assert abs(rows["vr"][0] - 0.5) < 1e-14 and abs(rows["J"][0]) < 1e-14
    assert abs(rows["E"][0] - (0.125 - 0.5 / (2.0 * r))) < 1e-14
    assert list(rows["m"]) == [3e-3, 2e-3]
    assert list(rows["m_msun"]) == [3.0, 2.0]
    assert list(rows["step"]) == [7, 7] and list(rows["time"]) == [0.125, 0.125]
    assert list(rows["kind"]) == [ESCAPE_UNBOUND] * 2 and list(rows["r_tidal"]) == [0.0, 0.0]
    assert list(rows["binind"]) == [-1, -1] and list(rows["startype"]) == [1, 1]
    assert list(rows["rad"]) == [0.0, 0.0]
    none = escaper_rows(**{**args, "new_mask": np.zeros(4, dtype=bool)}, step=8,
                        time_rel=0.25)
    assert all(v.size == 0 for v in none.values()) and list(none) == list(rows)


def test_escaper_table_reads_back_and_restarts_at_the_checkpoint(tmp_path):
    args, _ = escaper_setup()
    path = tmp_path / "escapers.h5"
    attrs = {"mode": "nbody", "n0": 4}
    w = open_escapers(path, attrs, 0)
    per_step = []
    for step in (1, 2, 3):
        rows = escaper_rows(**args, step=step, time_rel=0.125 * step)
        per_step.append(rows)
        w.append(rows)
    w.close()
    with h5py.File(path, "r") as fh:
        assert fh.attrs["mode"] == "nbody" and fh.attrs["n0"] == 4
        for f in escaper_fields():
            assert fh[f.name].attrs["unit"] == f.unit, f.name
            assert fh[f.name].attrs["meaning"] == f.meaning
            assert fh[f.name].dtype == np.dtype(f.dtype)
            np.testing.assert_array_equal(fh[f.name][...], concat_rows(per_step)[f.name])
        assert fh["E"].attrs["unit"] == "v_NB^2" and fh["time"].attrs["unit"] == "t_rel"
    # a restart from the checkpoint of output 2: the rows of output 3 are dropped, then the
    # recomputed ones appended
    w = open_escapers(path, attrs, 2)
    again = escaper_rows(**args, step=3, time_rel=0.375)
    again["E"] = again["E"] + 1.0
    w.append(again)
    w.close()
    data, got_attrs = cio.read_diagnostics(path)
    assert list(data["step"]) == [1, 1, 2, 2, 3, 3]
    np.testing.assert_array_equal(data["E"], concat_rows(per_step[:2] + [again])["E"])
    assert got_attrs["mode"] == "nbody"
    # a restart whose table is missing starts an empty one
    path.unlink()
    w = open_escapers(path, attrs, 2)
    w.close()
    data, _ = cio.read_diagnostics(path)
    assert data["step"].size == 0 and set(data) == {f.name for f in escaper_fields()}


def test_select_keeps_the_chosen_binaries_in_order():
    """``Binaries.select``: the rows of a mask, every field, in their order (the N-body
    diagnostics keep the hard ones with it)."""
    rng = np.random.default_rng(8)
    pos = rng.standard_normal((300, 3))
    vel = 0.3 * rng.standard_normal((300, 3))
    mass = np.full(300, 1.0 / 300)
    b = find_binaries(pos, vel, mass, np.arange(300, dtype=np.int64))
    assert b.size >= 2
    keep = np.arange(b.size) % 2 == 0
    s = b.select(keep)
    assert s.size == int(keep.sum())
    for name, arr in s.as_dict().items():
        np.testing.assert_array_equal(arr, b.as_dict()[name][keep], err_msg=name)
    assert b.select(np.zeros(b.size, bool)).size == 0


@pytest.mark.parametrize("speed, escapes", [(3.0, True), (0.05, False)])
def test_an_escaping_hard_binary_leaves_whole(tmp_path, speed, escapes):
    """Two stars of a Plummer N = 64 made a hard binary (a = 1e-3) at 30 r_h from the centre,
    moving outward at ``speed``: fast, its centre of mass is unbound and both members are
    escapers at the next output (each alone has a negative energy: held by its companion);
    slow, it stays bound and neither is."""
    from cmc.config import load_config
    from cmc.nbody import NBodyRun
    from cmc.nbody_outputs import escape_energies, find_binaries

    ini = tmp_path / "b.ini"
    ini.write_text("[initial]\nmodel = plummer\nn = 64\nseed = 5\n")
    run = NBodyRun(load_config(str(ini)), None, t_end=1.0, pair_gamma=0.0)
    d0 = run.diagnostics()
    st = run.nb
    mu = float(st.mass[0] + st.mass[1])
    x = np.array([30.0 * d0["r_h"], 0.0, 0.0])
    a = 1e-3
    v_orb = math.sqrt(mu / a)
    st.pos[0] = x - np.array([0.0, 0.5 * a, 0.0])
    st.pos[1] = x + np.array([0.0, 0.5 * a, 0.0])
    v = np.array([speed, 0.0, 0.0])
    st.vel[0] = v + np.array([0.0, 0.0, 0.5 * v_orb])  # (the orbit across the motion)
    st.vel[1] = v - np.array([0.0, 0.0, 0.5 * v_orb])
    run.step = 1
    d = run.diagnostics()
    # each member alone is bound (its companion's potential)
    from physics.nbody import acc_jerk

    _, _, pot = acc_jerk(st.pos, st.vel, st.mass)
    v_cm = (st.mass @ st.vel) / st.mass.sum()
    e_star = 0.5 * np.sum((st.vel - v_cm) ** 2, axis=1) + pot
    assert e_star[0] < 0.0 and e_star[1] < 0.0
    assert bool(run.escaped[0]) is escapes and bool(run.escaped[1]) is escapes
    assert d["N_escaped"] == (2 if escapes else 0)
    assert sorted(run.escaper_rows["id"].tolist()) == (
        sorted(np.asarray(run.stars["id"])[:2].tolist()) if escapes else [])
    # the centre of mass's energy: the pair's kinetic energy and the cluster's potential
    rows = np.arange(64)
    b = find_binaries(st.pos, st.vel, st.mass, np.arange(64))
    assert b.id1.tolist()[:1] == [0] and b.id2.tolist()[:1] == [1]
    rad = np.sqrt(np.sum((st.pos - run.centre) ** 2, axis=1))
    e, r = escape_energies(b.select(np.array([0])), rows, e_star, rad, st.mass, st.pos,
                           st.vel, pot, v_cm, run.centre)
    mutual = st.mass[0] * st.mass[1] / a
    e_cm = (0.5 * mu * speed_of(st, v_cm) ** 2 + st.mass[0] * pot[0] + st.mass[1] * pot[1]
            + 2.0 * mutual) / mu
    assert e[0] == e[1] == pytest.approx(e_cm, rel=1e-9)
    assert r[0] == r[1] == pytest.approx(float(np.linalg.norm(x - run.centre)), rel=1e-12)
    np.testing.assert_array_equal(e[2:], e_star[2:])


def speed_of(st, v_frame):
    """Speed of the centre of mass of stars 0 and 1 in the frame ``v_frame``."""
    v = (st.mass[0] * st.vel[0] + st.mass[1] * st.vel[1]) / (st.mass[0] + st.mass[1])
    return float(np.linalg.norm(v - v_frame))
