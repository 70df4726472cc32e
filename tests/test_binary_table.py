"""Primordial binaries: the binary table of cmc/fields.py in the initial conditions, in HDF5
files and in the energy budget."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cmc.config import load_config
from cmc.fields import BINARY_NAMES
from cmc.initial import build_initial_stars
from cmc.io import read_snapshot, write_snapshot
from cmc.simulation import Simulation
from parallel.comm import SerialComm
from physics.binaries import binding_energy


def _stars(fraction, n=4000, **kw):
    over = [f"initial.n={n}", "initial.seed=3", f"initial.binary_fraction={fraction}"]
    over += [f"initial.{k}={v}" for k, v in kw.items()]
    return build_initial_stars(load_config(None, over))


def test_primordial_binaries_follow_their_distributions():
    stars, info = _stars(0.3, n=6000, binary_q_min=0.2, binary_a_min=0.05, binary_a_max=2.0)
    b = stars["binind"] >= 0
    nb = int(b.sum())
    assert info["n_binaries"] == nb
    assert abs(nb - 0.3 * 6000) < 4 * math.sqrt(6000 * 0.3 * 0.7)
    m1, m2, a, e = (stars[k][b] for k in ("bin_m1", "bin_m2", "bin_a", "bin_e"))
    np.testing.assert_allclose(m1 + m2, stars["m"][b], rtol=1e-14)
    q = m2 / m1
    assert q.min() >= 0.2 - 1e-12 and q.max() <= 1.0 + 1e-12
    assert abs(q.mean() - 0.6) < 4 * 0.8 / math.sqrt(12 * nb)
    # a log-uniform between 0.05 and 2 hard/soft boundaries
    ke = 0.5 * np.sum(stars["m"] * (stars["vr"] ** 2 + stars["vt"] ** 2))
    a_hs = m1 * m2 / (np.mean(stars["m"]) * 2 * ke / (3 * np.sum(stars["m"])))
    x = np.log(a / a_hs)
    assert x.min() >= math.log(0.05) - 1e-9 and x.max() <= math.log(2.0) + 1e-9
    assert abs(np.mean(x) - 0.5 * (math.log(0.05) + math.log(2.0))) < 0.1
    # thermal eccentricities: <e^2> = 1/2
    assert abs(np.mean(e ** 2) - 0.5) < 4 * math.sqrt(1 / 12 / nb)
    ids = np.concatenate([stars["id"], stars["bin_id1"][b], stars["bin_id2"][b]])
    assert np.unique(ids).size == ids.size
    assert np.all(stars["binind"][~b] == -1)


@pytest.mark.parametrize("fraction, n, expected", [(0.1, 2000, 200), (0.3, 6000, 1800),
                                                   (0.25, 42, 11), (1.0, 50, 50),
                                                   (0.001, 400, 0)])
def test_binary_fraction_is_exact_and_fixed_by_the_seed(fraction, n, expected):
    """initial.binary_fraction makes exactly round(f N) binaries (halves up), the same objects
    for the same seed (issue 46, item 11: a draw per object, 0.1 of 2000 gave 211)."""
    stars, info = _stars(fraction, n=n)
    b = stars["binind"] >= 0
    assert int(b.sum()) == info["n_binaries"] == expected
    again, _ = _stars(fraction, n=n)
    np.testing.assert_array_equal(again["binind"], stars["binind"])
    np.testing.assert_array_equal(again["bin_a"], stars["bin_a"])
    if 0 < expected < n:
        other = build_initial_stars(load_config(None, [
            f"initial.n={n}", "initial.seed=4", f"initial.binary_fraction={fraction}"]))[0]
        assert int(np.sum(other["binind"] >= 0)) == expected
        assert not np.array_equal(other["binind"] >= 0, b)


def test_binaries_do_not_change_the_rest_of_the_model():
    s0, _ = _stars(0.0)
    s1, _ = _stars(0.25)
    assert not any(k in s0 for k in BINARY_NAMES)
    for k in ("id", "m", "r", "vr", "vt"):
        np.testing.assert_array_equal(s0[k], s1[k])


def test_snapshot_round_trip_and_validation(tmp_path):
    stars, _ = _stars(0.2, n=500)
    path = tmp_path / "ic.h5"
    write_snapshot(path, stars)
    back, _ = read_snapshot(path)
    for k in stars:
        np.testing.assert_array_equal(back[k], stars[k], err_msg=k)
    import h5py

    with h5py.File(path, "r") as fh:
        assert fh["binaries/bin_a"].shape[0] == int(np.sum(stars["binind"] >= 0))
        assert fh["binaries/bin_a"].attrs["unit"] == "r_vir"
    bad = dict(stars)
    bad["bin_e"] = stars["bin_e"].copy()
    bad["bin_e"][np.flatnonzero(stars["binind"] >= 0)[3]] = 1.5
    write_snapshot(tmp_path / "bad.h5", bad)
    with pytest.raises(ValueError, match="binary of star"):
        read_snapshot(tmp_path / "bad.h5")


def test_binding_energy_is_booked_and_carried_by_escapers():
    """With encounters and wide-binary breaking off, binaries are inert: their internal energy
    only leaves with escaping binaries."""
    cfg = load_config(None, ["initial.n=3000", "initial.seed=4", "initial.binary_fraction=0.2",
                             "run.n_core_stop=0", "run.r_tidal=3.0",
                             "binaries.binary_single=false", "binaries.binary_binary=false",
                             "binaries.wide_factor=0"])
    sim = Simulation.create(cfg, SerialComm())
    e_b0 = sim.history["E_binding"][0]
    s = sim.gather_stars()
    b = s["binind"] >= 0
    assert e_b0 == pytest.approx(float(np.sum(binding_energy(
        s["bin_m1"][b], s["bin_m2"][b], s["bin_a"][b]))), rel=1e-12)
    for _ in range(40):
        sim.step()
    h = sim.history
    # inert binaries: internal energy only leaves with escaping binaries
    assert h["E_binding"][-1] + h["E_binding_escaped"][-1] == pytest.approx(e_b0, rel=1e-12)
    assert h["N_binaries"][-1] < h["N_binaries"][0]  # binaries beyond r_tidal escaped
    assert h["E_binding_escaped"][-1] < 0


def assert_idle_binary_columns(stars) -> int:
    """Every single star's row holds the binary columns (``bin_*``) at their defaults (what
    :meth:`cmc.stars.StarTable.idle_binary_columns` and so the sort rely on); returns the
    number of single rows checked."""
    from cmc.fields import FIELD_BY_NAME

    single = stars.binind < 0
    for name in stars:
        if name.startswith("bin_"):
            col = getattr(stars, name)[single]
            default = np.array(FIELD_BY_NAME[name].default, dtype=col.dtype)
            assert col.tobytes() == np.full(col.size, default).tobytes(), name
    return int(np.count_nonzero(single))


@pytest.mark.parametrize("se_on", [False, True])
def test_single_rows_keep_the_binary_columns_at_their_defaults(tmp_path, monkeypatch, se_on):
    """Through a run whose binaries are broken, disrupted and exchanged in strong encounters
    (and, with stellar evolution, evolved by BSE): after every step, every single star's row
    holds the binary columns at their defaults, and a table without binaries names them all
    as idle (the sort then takes them without a scan: the same bits)."""
    monkeypatch.chdir(tmp_path)  # evolv2's fort.99
    over = ["initial.n=1500", "initial.seed=5", "initial.binary_fraction=0.3",
            "initial.binary_a_max=100", "run.n_core_stop=0"]
    if se_on:
        over += ["initial.mass_function=kroupa", "initial.m_min=0.08", "initial.m_max=100",
                 "bse.stellar_evolution=true"]
    sim = Simulation.create(load_config(None, over), SerialComm())
    b0 = sim.stars.binind >= 0
    members0 = set(sim.stars.bin_id1[b0].tolist()) | set(sim.stars.bin_id2[b0].tolist())
    events = 0.0
    for _ in range(25):
        d = sim.step()
        events += d["n_wide_broken"] + d["n_binary_single"] + d["n_binary_binary"]
        assert_idle_binary_columns(sim.stars)
        assert sim.stars.idle_binary_columns() is None  # binaries left
    # binaries were unmade into singles (broken wide ones, encounter products): members of
    # the initial binaries are single stars now, in rows that were binaries' rows
    assert events >= 5
    freed = members0 & set(sim.stars.id[sim.stars.binind < 0].tolist())
    assert len(freed) >= 4, (events, len(freed))
    singles = sim.stars.take(sim.stars.binind < 0)
    idle = singles.idle_binary_columns()
    assert idle is not None and set(idle) == {k for k in singles if k.startswith("bin_")}
    assert len(idle) == (40 if se_on else 12)
