"""Radial time-step zones (run.zones; cmc/processes/zones.py): the levels, the window scans
against their whole-array twin, the kernels' per-row steps, and runs: energy, which stars are
stepped, the stars' clocks, restart and emulation bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from cmc.config import load_config
from cmc.processes.zones import due_level
from cmc.simulation import Simulation
from parallel.comm import SerialComm
from parallel.decomposition import MIN_CHUNK
from parallel.streams import Streams
from physics.relaxation import (
    block_moments,
    relax_or_select_pairs,
    relax_pairs,
    window_boundary_rows,
    window_last_below_inside,
    window_last_below_straddling,
    window_relaxation_times,
)


def test_due_level_is_the_trailing_zeros_of_the_step():
    """Level z is due every 2^z steps, all of them in step 0; at most zones - 1."""
    assert [due_level(k, 4) for k in range(17)] == [3, 0, 1, 0, 2, 0, 1, 0, 3, 0, 1, 0, 2,
                                                    0, 1, 0, 3]
    assert [due_level(k, 1) for k in range(5)] == [0] * 5
    assert due_level(1 << 20, 16) == 15


def _cluster(n: int, seed: int = 4) -> tuple:
    rng = np.random.default_rng(seed)
    r = np.sort(rng.uniform(0.01, 5.0, n) ** 2)
    m = rng.uniform(0.5, 1.5, n) / n
    vr, vt = rng.normal(size=n), np.abs(rng.normal(size=n))
    return r, m, vr, vt


@pytest.mark.parametrize("cuts", [(), (37,), (5, 6, 60, 61), (3, 50, 99)])
def test_window_scan_split_over_ranks_equals_the_whole_array_twin(cuts):
    """For each limit, the last window whose relaxation time is below it: the local scans of
    any split into rank ranges (windows wholly inside plus those built from the gathered
    boundary rows) give numpy's answer on window_relaxation_times of all blocks."""
    n = 2000
    r, m, vr, vt = _cluster(n)
    n0, cr, width = float(n), 1.0, 2
    moments = block_moments(m, vr, vt, n0)
    nb = moments.shape[0]
    times = window_relaxation_times(r, moments, n0, cr, width)
    limits = np.quantile(times, [0.05, 0.3, 0.7, 0.95])
    want = np.array([np.flatnonzero(times < lim).max() for lim in limits])
    bounds = [0, *cuts, nb]
    last = np.full(limits.size, -1, dtype=np.int64)
    edges = []
    for b0, b1 in zip(bounds[:-1], bounds[1:], strict=True):
        window_last_below_inside(r, np.ascontiguousarray(moments[b0:b1]), b0, nb, n0, cr,
                                 width, limits, last)
        edges.append(window_boundary_rows(np.ascontiguousarray(moments[b0:b1]), b0, nb,
                                          width))
    window_last_below_straddling(r, np.ascontiguousarray(np.vstack(edges)), n0, cr, width,
                                 limits, last)
    np.testing.assert_array_equal(last, want)


def test_kernels_with_unit_ratios_equal_the_shared_step():
    """relax_pairs and relax_or_select_pairs with every row's ratio 1 give the shared step's
    bits; with ratio 2 everywhere they give the bits of a step twice as long."""
    n = 400
    r, m, vr, vt = _cluster(n)
    nb = n // MIN_CHUNK
    st0 = Streams.create(9, 1, nb, first_stream=0).states[0].copy()

    def relaxed(dt, ratio):
        a, b, s = vr.copy(), vt.copy(), st0.copy()
        stats = np.zeros((nb, 2))
        relax_pairs(r, 0, m, a, b, s, dt, float(n), 1.0, stats, ratio)
        return a, b, s

    for got, want in zip(relaxed(1e-3, np.ones(n)), relaxed(1e-3, None), strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(relaxed(1e-3, np.full(n, 2.0)), relaxed(2e-3, None), strict=True):
        np.testing.assert_array_equal(got, want)
    # a due mask: all due = no mask; pairs with no due row keep their velocities and draw
    # nothing (block 0 none due: its stream and rows untouched; the others as unmasked)
    due = np.ones(n, dtype=np.bool_)
    a, b, s = vr.copy(), vt.copy(), st0.copy()
    relax_pairs(r, 0, m, a, b, s, 1e-3, float(n), 1.0, np.zeros((nb, 2)), None, due)
    for got, want in zip((a, b, s), relaxed(1e-3, None), strict=True):
        np.testing.assert_array_equal(got, want)
    due[:MIN_CHUNK] = False
    due[2 * MIN_CHUNK + 1::2] = False  # block 2 on: one due row per pair
    a, b, s = vr.copy(), vt.copy(), st0.copy()
    relax_pairs(r, 0, m, a, b, s, 1e-3, float(n), 1.0, np.zeros((nb, 2)), None, due)
    ua, ub, us = relaxed(1e-3, None)
    np.testing.assert_array_equal(s[0], st0[0])
    np.testing.assert_array_equal(a[:MIN_CHUNK], vr[:MIN_CHUNK])
    np.testing.assert_array_equal(s[1:], us[1:])
    np.testing.assert_array_equal(a[MIN_CHUNK:], ua[MIN_CHUNK:])
    # with binaries: the encounter probability scales too (the same pairs meet at 2 dt)
    is_bin = np.zeros(n, dtype=np.bool_)
    is_bin[::3] = True
    bin_a = np.full(n, 0.05)

    def selected(dt, ratio):
        a, b, s = vr.copy(), vt.copy(), st0.copy()
        enc = np.zeros(n // 2 + 1, dtype=np.bool_)
        phi, w = np.zeros(n // 2 + 1), np.zeros(n // 2 + 1)
        relax_or_select_pairs(r, 0, m, a, b, bin_a, is_bin, np.zeros(n, dtype=np.bool_), s,
                              dt, float(n), 1.0, dt * 3e4, 2.0, 2.0, True, True,
                              np.zeros((nb, 2)), enc, phi, w, np.zeros((nb, 3)), None, None,
                              0.0, ratio)
        return a, b, s, enc, phi, w

    for got, want in zip(selected(1e-3, np.ones(n)), selected(1e-3, None), strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(selected(1e-3, np.full(n, 2.0)), selected(2e-3, None), strict=True):
        np.testing.assert_array_equal(got, want)
    assert selected(2e-3, None)[3].sum() >= 3


#: zones without the cap on their steps (run.zone_dt_max): in the first steps of a Plummer
#: model the shared step is already 0.05-0.1 t_rh0, so the default cap keeps every star in
#: zone 0 there; these tests want the zones at work from the start
UNCAPPED = "run.zone_dt_max=1000"


def _plan_rows_twin(zone, clock, time, t_end, dt, level, top, relax):
    """numpy twin of physics.zones.plan_rows: (zone, clock, due, ratio, count)."""
    zone, clock = zone.copy(), clock.copy()
    clock[np.isnan(clock)] = time
    np.minimum(zone, top, out=zone)
    due = zone <= level
    owed = np.where(clock == time, 1.0, (t_end - clock) / dt)
    ratio = np.zeros(zone.size)
    if relax:
        pairs = 2 * (zone.size // 2)
        on = due[0:pairs:2] | due[1:pairs:2]
        pair = np.where(on, np.minimum(owed[0:pairs:2], owed[1:pairs:2]), 0.0)
        ratio[0:pairs:2] = pair
        ratio[1:pairs:2] = pair
        clock[:pairs] += ratio[:pairs] * dt
        np.minimum(clock, t_end, out=clock)
        if zone.size % 2 and due[-1]:
            clock[-1] = t_end
    return zone, clock, due, ratio, int(np.count_nonzero(due))


@pytest.mark.parametrize("n,relax", [(1001, True), (1000, True), (1000, False)])
def test_plan_rows_equals_its_numpy_twin(n, relax):
    """The zones' one-pass kernels against numpy expressions, bit for bit: plan_rows (NaN
    clocks, zones cut to the cap, due rows, pairs' shorter owed times, clocks moved on and
    kept at the step's end), and freeze_rows / thaw_rows around the orbit kernel."""
    from physics.orbits import ORBIT_OK, ORBIT_REMOVED
    from physics.zones import freeze_rows, plan_rows, thaw_rows

    rng = np.random.default_rng(n)
    time, dt = 3.25, 1e-3
    zone = rng.integers(0, 7, n).astype(np.int32)
    clock = time - dt * rng.integers(0, 40, n) * rng.uniform(0.5, 1.0, n)
    clock[rng.random(n) < 0.3] = time
    clock[rng.random(n) < 0.02] = np.nan
    want = _plan_rows_twin(zone, clock, time, time + dt, dt, 2, 4, relax)
    due, ratio = np.empty(n, dtype=np.bool_), np.empty(n)
    got = plan_rows(zone, clock, time, time + dt, dt, 2, 4, relax, due, ratio)
    for a, b in zip((zone, clock, due, ratio, got), want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert (ratio.max() > 1.0 if relax else not ratio.any()) and np.all(clock <= time + dt)
    status = rng.choice(np.array([ORBIT_OK, ORBIT_OK, ORBIT_OK, ORBIT_REMOVED, 1],
                                 dtype=np.int8), n)
    status0 = status.copy()
    frozen = np.empty(n, dtype=np.bool_)
    freeze_rows(zone, 2, status, frozen)
    want_frozen = (status0 == ORBIT_OK) & (zone > 2)
    np.testing.assert_array_equal(frozen, want_frozen)
    np.testing.assert_array_equal(status, np.where(want_frozen, ORBIT_REMOVED, status0))
    r_all, gidx = np.sort(rng.random(n)), rng.permutation(n)
    r_new, p_oo, r_apo = (rng.random(n) for _ in range(3))
    p_on = -1.0 / r_new  # new orbits about a unit point mass, some reaching in past bounds
    vr_new, vt_new = rng.normal(0.0, 0.8, n), np.abs(rng.normal(0.0, 0.8, n))
    bound_r = np.array([0.05, 0.1, 0.2, 0.4])
    bound_phi = -1.0 / bound_r
    zone_in = zone.copy()
    thaw_rows(frozen, r_all, gidx, status, r_new, vr_new, vt_new, p_oo, p_on, r_apo,
              bound_r, bound_phi, zone)
    np.testing.assert_array_equal(status, status0)
    np.testing.assert_array_equal(r_new[frozen], r_all[gidx[frozen]])
    assert not (p_oo[frozen].any() or p_on[frozen].any() or r_apo[frozen].any())
    drawn = (status0 == ORBIT_OK) & ~frozen  # the rows given a new orbit that stay
    assert drawn.any() and frozen.any() and (status0 != ORBIT_OK).any()
    want_zone = np.where(drawn, _pericentre_zones_twin(r_new, vr_new, vt_new, -1.0 / r_new,
                                                       bound_r, bound_phi), zone_in)
    np.testing.assert_array_equal(zone, want_zone)
    assert len(np.unique(zone[drawn])) > 2  # the orbits reach in to several bounds


@pytest.mark.parametrize("relax", [True, False])
def test_sync_rows_is_the_plan_of_a_step_with_every_row_due(relax):
    """sync_rows (no zone may be longer than the innermost one, every clock at the step's
    start or NaN) leaves the zones and clocks that plan_rows with top = 0 leaves, bit for bit,
    and every row is due with unit ratios there; with one clock behind it changes nothing and
    says so."""
    from physics.zones import plan_rows, sync_rows

    n, time, dt = 1001, 3.25, 1e-3
    rng = np.random.default_rng(3)
    zone = rng.integers(0, 7, n).astype(np.int32)
    clock = np.full(n, time)
    clock[rng.random(n) < 0.05] = np.nan
    z_plan, c_plan = zone.copy(), clock.copy()
    due, ratio = np.empty(n, dtype=np.bool_), np.empty(n)
    assert plan_rows(z_plan, c_plan, time, time + dt, dt, 0, 0, relax, due, ratio) == n
    assert due.all() and np.all(ratio[:-1] == (1.0 if relax else 0.0))
    assert sync_rows(zone, clock, time, time + dt, relax)
    np.testing.assert_array_equal(zone, z_plan)
    np.testing.assert_array_equal(clock, c_plan)
    assert not zone.any() and np.all(clock == (time + dt if relax else time))
    clock[:] = time
    clock[500] = time - dt  # owed more than the step: the plan's ratio would not be 1
    zone[:] = 3
    assert not sync_rows(zone, clock, time, time + dt, relax)
    assert np.all(zone == 3) and clock[0] == time and clock[500] == time - dt


def _sim(zones: int, n: int = 2000, emulate: int = 0, extra: tuple = (UNCAPPED,)
         ) -> Simulation:
    return Simulation.create(load_config(None, [
        f"initial.n={n}", "initial.seed=7", f"run.zones={zones}", "run.n_core_stop=0",
        f"run.emulate_ranks={emulate}", *extra]), SerialComm())


def test_a_run_with_zones_steps_the_due_stars_and_conserves_energy():
    """Plummer N = 2000, 4 zones, 24 steps: every level comes due on its own cadence (all
    stars in steps 0, 8, 16); the stars whose zone is not due keep their radius exactly, the
    due ones all move; the relaxed stars' clocks move on, never past the run's time; the frozen
    stars keep their zone; E_tot is conserved to rounding."""
    sim = _sim(4)
    levels, stepped = [], []
    for k in range(24):
        before = sim.gather_stars()
        t0 = sim.state.time
        d = sim.step()
        after = sim.gather_stars()
        levels.append(int(d["zone_level"]))
        stepped.append(int(d["n_stepped"]))
        rows = [int(d[f"zone_rows_{z}"]) for z in range(3)]
        assert rows == sorted(rows) and rows[0] >= MIN_CHUNK
        due = before["zone"] <= levels[-1]
        assert stepped[-1] == np.count_nonzero(due)
        stay = np.isin(before["id"], after["id"])  # (not the escapers)
        order = np.argsort(after["id"])
        row_after = order[np.searchsorted(after["id"], before["id"][stay], sorter=order)]
        due = due[stay]
        assert np.array_equal(before["r"][stay][~due], after["r"][row_after[~due]]), k
        assert np.mean(before["r"][stay][due] != after["r"][row_after[due]]) > 0.99
        # every due star was relaxed (its clock moved on by its pair's shorter owed time);
        # no clock runs ahead of the run
        clock_before = before["t_last"][stay]  # (NaN: a new clock, started at the step)
        clock_before = np.where(np.isnan(clock_before), t0, clock_before)
        assert np.all(after["t_last"][row_after[due]] > clock_before[due])
        assert np.all(after["t_last"][row_after] <= sim.state.time)
        assert np.all(after["t_last"][row_after][~due] <= sim.state.time)
        assert np.count_nonzero(after["t_last"][row_after][~due] > t0) > 0 or due.all()
        assert np.array_equal(after["zone"][row_after[~due]], before["zone"][stay][~due])
    assert levels == [due_level(k, 4) for k in range(24)]
    assert min(stepped) < sim.n_total  # the zones do leave stars out
    assert abs(sim.history["dE_rel"][-1]) < 1e-12


def _pericentre_zones_twin(r: np.ndarray, vr: np.ndarray, vt: np.ndarray, phi: np.ndarray,
                           bound_r: np.ndarray, bound_phi: np.ndarray) -> np.ndarray:
    """The numpy twin of :func:`physics.zones.thaw_rows`'s zones: the number of level bounds
    ``B`` (``bound_r``, the potential there ``bound_phi``) below ``r`` inside the orbit's
    pericentre, where ``Q(B) = 2 (E - phi(B)) - J^2 / B^2 < 0``."""
    e2 = 2.0 * phi + vr * vr + vt * vt
    j2 = (r * vt) ** 2
    zone = np.zeros(r.shape, dtype=np.int32)
    for b, pb in zip(bound_r, bound_phi, strict=True):
        zone += ((b < r) & (e2 - 2.0 * pb - j2 / (b * b) < 0.0)).astype(np.int32)
    return zone


def test_pericentre_zones_counts_the_bounds_inside_the_orbit():
    """A Kepler orbit about a unit point mass (phi = -1/r) with pericentre 0.3 and apocentre
    2: bounds at 0.1 and 0.2 are inside its pericentre (zone 2), 0.5 is not; a bound outside
    the star's radius never counts; a radial orbit (J = 0) reaches every bound (zone 0)."""
    rp, ra = 0.3, 2.0
    a, e = 0.5 * (rp + ra), (ra - rp) / (ra + rp)
    energy, jang = -0.5 / a, np.sqrt(a * (1 - e * e))
    r = np.array([1.0, 1.0, 0.4, 1.0])
    vt = np.array([jang, jang, jang / 0.4, 0.0])
    vr = np.sqrt(np.maximum(2 * (energy + 1 / r) - vt ** 2, 0.0))
    vr[3] = np.sqrt(2 * (energy + 1.0))
    bounds = np.array([0.1, 0.2, 0.5, 0.35])
    inner = np.sort(bounds)[:3]
    got = _pericentre_zones_twin(r, vr, vt, -1.0 / r, inner, -1.0 / inner)
    assert got.tolist() == [2, 2, 2, 0]
    outer = np.array([0.1, 0.2, 0.29, 0.31])
    got = _pericentre_zones_twin(r, vr, vt, -1.0 / r, outer, -1.0 / outer)
    assert got.tolist() == [3, 3, 3, 0]
    # the kernel (physics.zones.thaw_rows, no row frozen) gives the same zones
    from physics.orbits import ORBIT_OK
    from physics.zones import thaw_rows

    for bound in (inner, outer):
        zone, n = np.full(r.size, -1, dtype=np.int32), r.size
        thaw_rows(np.zeros(n, dtype=np.bool_), r.copy(), np.arange(n), np.full(n, ORBIT_OK,
                  dtype=np.int8), r.copy(), vr, vt, np.zeros(n), -1.0 / r, np.zeros(n),
                  bound, -1.0 / bound, zone)
        assert zone.tolist() == ([2, 2, 2, 0] if bound is inner else [3, 3, 3, 0])


def test_capped_zones_that_never_act_give_the_shared_steps_bits():
    """With the default run.zone_dt_max (0.001 t_rh0) the first 62 steps of a Plummer model
    (N = 1e4 at theta_max 1.412, 20-star windows: dt 0.02-0.2 t_rh0) have every star in zone
    0: 8 zones then give the bits of the shared step (stars and streams), also across steps
    where an escape makes N odd (the unpaired last row is not relaxed and its clock moves on,
    as the shared step leaves it; taking its time up later broke the equality at step 59)."""
    def make(zones):
        return Simulation.create(load_config(None, [
            "initial.n=10000", "initial.seed=1", f"run.zones={zones}", "run.n_core_stop=0",
            "run.theta_max=1.412", "run.dt_window=20"]), SerialComm())

    a, b = make(8), make(1)
    parities = set()
    for _ in range(62):
        d = a.step()
        b.step()
        parities.add(a.n_total % 2)
        # every level's bound at the end, every star due (both counted at the step's start)
        assert all(d[f"zone_rows_{z}"] == d["n_stepped"] for z in range(7))
        assert a.n_total <= d["n_stepped"] <= a.n_total + 3
    assert parities == {0, 1}
    for key in ("r", "vr", "vt", "id"):
        np.testing.assert_array_equal(getattr(a.stars, key), getattr(b.stars, key))
    np.testing.assert_array_equal(a.streams.states, b.streams.states)


def test_zones_over_the_cap_are_cut_to_it():
    """A star keeps the zone it was drawn with until it is due again; when dt has grown (or
    run.zone_dt_max been lowered) so that its zone's step is over the cap, its zone is cut to
    the longest allowed: with the cap below 2 dt every star is due in the next step."""
    sim = _sim(4)
    for _ in range(3):
        sim.step()
    assert sim.stars.zone.max() >= 1
    n_before = sim.n_total
    sim.cfg.run.zone_dt_max = 1e-12
    d = sim.step()
    assert d["n_stepped"] == n_before
    assert sim.stars.zone.max() == 0


def test_zones_one_is_the_shared_step():
    """run.zones = 1: no clock column, no zone columns, and the steps of a run without the
    key (the code path is the shared step's)."""
    a, b = _sim(1), Simulation.create(load_config(None, [
        "initial.n=2000", "initial.seed=7", "run.n_core_stop=0"]), SerialComm())
    for _ in range(5):
        a.step()
        b.step()
    assert not a.stars.has_zone_fields and "zone_level" not in a.history
    for key in ("r", "vr", "vt", "id"):
        np.testing.assert_array_equal(getattr(a.stars, key), getattr(b.stars, key))


@pytest.fixture
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("emulate", [0, 3])
def test_restart_with_zones_is_bit_for_bit(tmp_path, _in_tmp, emulate):
    """Stopped at step 11 (inside a cycle of 8) and restarted to 20 with 4 zones and 10 %
    binaries (encounters in the due zones): stars (with their clocks), streams and every
    diagnostics column equal the uninterrupted run's, and E_tot is conserved."""
    from tests.test_engine import _stopped_and_restarted

    ini = ("[initial]\nn = 1500\nseed = 5\nbinary_fraction = 0.1\n[run]\nzones = 4\n"
           "zone_dt_max = 1000\n"
           f"n_core_stop = 0\nemulate_ranks = {emulate}\n[output]\ncheckpoint_every = 3\n")
    (sa, _, da), (sb, _, db) = _stopped_and_restarted(tmp_path, ini, 11, 20)
    assert "t_last" in sa
    for k in set(da) | set(db):
        np.testing.assert_array_equal(da[k], db[k], err_msg=k)
    assert da["n_stepped"].min() < 1500
    # energy to rounding with products that add rows inside due blocks (broken wide
    # binaries, exchanges: the orbits then take the due blocks' rows, not the step's start's)
    assert np.abs(da["dE_rel"]).max() < 1e-12
    assert (da["n_wide_broken"] + da["n_binary_single"] + da["n_binary_binary"]).sum() >= 2


def test_zones_cannot_change_on_restart(tmp_path, _in_tmp):
    """run.zones defines the run (the clocks, the zone columns): a restart that changes it is
    refused by name, one that repeats it is not."""
    from cmc.cli import main
    from cmc.errors import InputError

    ini = tmp_path / "m.ini"
    ini.write_text("[initial]\nn = 1000\nseed = 5\n[run]\nn_core_stop = 0\nzones = 3\n"
                   "zone_dt_max = 1000\n")
    out = tmp_path / "a"
    assert main(["run", str(ini), "-o", str(out), "--set", "run.max_steps=3"]) == 0
    with pytest.raises(InputError, match="run.zones: cannot change on restart"):
        Simulation.from_checkpoint(out / "checkpoint.h5", SerialComm(),
                                   ["run.zones=4", "run.max_steps=9"])
    sim = Simulation.from_checkpoint(out / "checkpoint.h5", SerialComm(),
                                     ["run.zones=3", "run.max_steps=9"])
    assert sim.stars.has_zone_fields and np.all(sim.stars.t_last <= sim.state.time)
    d = sim.step()
    assert d["zone_level"] == 0 and d["n_stepped"] < 1000  # step 3: the innermost level


def _drop_zones_from_checkpoint(path) -> None:
    """The checkpoint as a version before the zones wrote it: no ``zones`` in its [run]."""
    import h5py

    from cmc.io import content_digest

    with h5py.File(path, "r+") as fh:
        text = str(fh.attrs["config"])
        assert "zones = 1" in text
        fh.attrs["config"] = "\n".join(line for line in text.splitlines()
                                       if not line.startswith("zones ="))
        fh.attrs["sha256"] = content_digest(fh)


def test_a_checkpoint_from_before_the_zones_restarts_with_the_shared_step(tmp_path, _in_tmp):
    """A checkpoint whose configuration does not name run.zones was a shared-step run: it
    restarts as one (the default is 8; its table has no clocks) and gives the uninterrupted
    shared-step run's bits; asking it for zones is refused by name."""
    from cmc.cli import main
    from cmc.errors import InputError

    ini = tmp_path / "m.ini"
    ini.write_text("[initial]\nn = 1000\nseed = 5\n[run]\nn_core_stop = 0\nzones = 1\n"
                   "[output]\ncheckpoint_every = 4\n")
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main(["run", str(ini), "-o", str(whole), "--set", "run.max_steps=8"]) == 0
    assert main(["run", str(ini), "-o", str(cut), "--set", "run.max_steps=4"]) == 0
    _drop_zones_from_checkpoint(cut / "checkpoint.h5")
    with pytest.raises(InputError, match="run.zones: cannot change on restart"):
        Simulation.from_checkpoint(cut / "checkpoint.h5", SerialComm(),
                                   ["run.zones=8", "run.max_steps=8"])
    sim = Simulation.from_checkpoint(cut / "checkpoint.h5", SerialComm(), ["run.max_steps=8"])
    assert sim.cfg.run.zones == 1 and not sim.stars.has_zone_fields
    assert main(["restart", str(cut), "--set", "run.max_steps=8"]) == 0
    import h5py

    with h5py.File(whole / "checkpoint.h5") as fa, h5py.File(cut / "checkpoint.h5") as fb:
        for k in fa["stars"]:
            np.testing.assert_array_equal(fa["stars"][k][...], fb["stars"][k][...], err_msg=k)
        np.testing.assert_array_equal(fa["streams/states"][...], fb["streams/states"][...])
