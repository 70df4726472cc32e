"""Stellar evolution in whole runs (issue 48): the energy and mass books, supernovae with
kicks and disruptions, restart bit for bit, the outputs' columns, a BSE failure, and the
scheduler's lag.

Supernovae within a few steps of a young cluster: a main-sequence star's BSE state is a
function of its age ``tphys - epoch``, so moving a massive star's epoch back ages it; the age
that puts its core collapse at a chosen time is found by bisection on a copy evolved alone
(:func:`plan_supernovae`).  ``evolv2`` writes warnings to ``fort.99`` in the current folder:
every test runs in its own temporary folder.
"""

from __future__ import annotations

import inspect
import re

import h5py
import numpy as np
import pytest
from test_binary_table import assert_idle_binary_columns  # (pytest puts tests/ on the path)

from cmc.config import load_config
from cmc.processes import stellar_evolution as sep
from cmc.simulation import Simulation
from parallel.comm import SerialComm
from physics import stellar_evolution as se

#: A Kroupa cluster with 10 % binaries and stellar evolution (N = 1000, seed 6: eight single
#: stars above 10 Msun, and a binary of 28.4 and 14.4 Msun 0.27 pc apart).
KROUPA = ("initial.mass_function=kroupa", "initial.m_min=0.08", "initial.m_max=100",
          "initial.binary_fraction=0.1", "run.n_core_stop=0")
SE_ON = ("bse.stellar_evolution=true",)
SE_COLUMNS = ("E_se_mass", "E_se_kicks", "E_se_binding", "M_se", "n_se_evolved",
              "n_supernovae", "n_se_disrupted", "n_se_mergers", "n_se_destroyed")


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # evolv2's fort.99


def make_sim(n=1000, seed=6, emulate=0, se_on=True, extra=(), outdir=None, comm=None):
    cfg = load_config(None, [f"initial.n={n}", f"initial.seed={seed}",
                             f"run.emulate_ranks={emulate}", *KROUPA,
                             *(SE_ON if se_on else ()), *extra])
    return Simulation.create(cfg, comm or SerialComm(), outdir)


def history(sim) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in sim.history.items()}


# --------------------------------------------------------------------------------------------
# Ageing massive stars
# --------------------------------------------------------------------------------------------

def _epoch_name(j: int) -> str:
    return "se_epoch" if j == 0 else f"bin_se_epoch_{j}"


def _alone(sim, fields, row: int, j: int, age: float, times) -> tuple[int, list]:
    """Member ``j`` (0: a single star) of the object at ``row`` aged to ``age`` at its
    ``se_tphys`` and evolved alone through the calls ending at ``times``: its type at the
    end (99 where BSE fails: too old to start from) and the times of calls with a
    supernova."""
    f = dict(fields)
    name = _epoch_name(j)
    f[name] = fields[name].copy()
    f[name][row] = fields["se_tphys"][row] - age
    b = sep.batch_of(f, np.array([row]), sim.units.length_rsun, np.array([12345]))
    slot = max(j - 1, 0)
    sn = []
    try:
        for t in times:
            r = se.evolve(b, t, sim.state.metallicity, sim.cfg.bse.pts1_highmass_cutoff)
            if r.supernova[0, slot]:
                sn.append(t)
            if r.outcome[0] != se.EVOLVED:
                break
    except se.StellarEvolutionError:
        return 99, sn
    return int(b.kstar[0, slot]), sn


def _age_for_supernova(sim, fields, row: int, j: int, t_sn: float) -> float:
    """The age at ``se_tphys`` whose core collapses at ``t_sn`` (evolved in one call):
    bisection on 'a remnant at t_sn' between 0.5 and 1.5 main-sequence lifetimes."""
    tms = float(fields["se_tms" if j == 0 else f"bin_se_tms_{j}"][row])
    lo, hi = 0.5 * tms, 1.5 * tms
    for _ in range(45):
        mid = 0.5 * (lo + hi)
        if _alone(sim, fields, row, j, mid, [t_sn])[0] < 13:
            lo = mid
        else:
            hi = mid
    return hi


def plan_supernovae(sim, t_sn: float, m_min: float = 10.0,
                    m_max: float = np.inf) -> dict[int, tuple[int, float]]:
    """{object id: (member, age)}: every single star of ``m_min`` to ``m_max`` Msun and, in
    each binary with a member in that range, its lightest such member, aged so that it
    explodes at ``t_sn`` (a serial run's table, before its first step)."""
    f = sim.stars.as_dict()
    plan = {}
    for row in np.flatnonzero((f["binind"] < 0) & (f["m_msun"] > m_min)
                              & (f["m_msun"] <= m_max)):
        plan[int(f["id"][row])] = (0, _age_for_supernova(sim, f, row, 0, t_sn))
    for row in np.flatnonzero(f["binind"] >= 0):
        heavy = [j for j in (1, 2) if m_min < f[f"bin_m{j}_msun"][row] <= m_max]
        if heavy:
            j = min(heavy, key=lambda j: f[f"bin_m{j}_msun"][row])
            plan[int(f["id"][row])] = (j, _age_for_supernova(sim, f, row, j, t_sn))
    return plan


def apply_plan(sim, plan: dict[int, tuple[int, float]]) -> None:
    """Age this rank's objects of ``plan`` and make them due at once."""
    s = sim.stars
    for row in np.flatnonzero(np.isin(s.id, list(plan))):
        j, age = plan[int(s.id[row])]
        col = getattr(s, _epoch_name(j))
        col[row] = s.se_tphys[row] - age
        s.se_t_next[row] = sep.DUE_NOW


def step_times(sim, steps: int) -> np.ndarray:
    """Time [Myr] at the start and after each of ``steps`` steps of ``sim`` (stepped)."""
    out = [sim.units.rel_to_myr(sim.state.time)]
    for _ in range(steps):
        sim.step()
        out.append(sim.units.rel_to_myr(sim.state.time))
    return np.array(out)


# --------------------------------------------------------------------------------------------
# 1. The books
# --------------------------------------------------------------------------------------------

def _books(h: dict, se_on: bool) -> np.ndarray:
    e = (h["K"] + h["W"] + h["E_escaped"] + h["E_stripped"] + h["E_binding"]
         + h["E_binding_escaped"] - h["E_oops"] - h["E_mergers"] - h["E_integrator"])
    if se_on:
        e = e - h["E_se_mass"] - h["E_se_kicks"] - h["E_se_binding"]
    return e


def test_energy_and_mass_books_close_with_stellar_evolution():
    """Kroupa 0.08-100 Msun, 10 % binaries, 40 steps (1.75 Myr; 1.3 % of the mass lost to
    winds, strong encounters whose products BSE evolves in the same step): E_tot, which takes
    off the energy stellar evolution moved, stays at E0 to 1e-13 (measured 2.8e-15; it was
    6.1e-7 from the first step before rows sharing a slot had their pair energy booked), and
    M + M_escaped + M_stripped + M_se = 1 to 1e-13 (measured 1.9e-15).  The SE columns
    exist exactly with SE on; E_tot's formula without it is unchanged."""
    sim = make_sim()
    assert sim.stars.has_se_fields
    for _ in range(40):
        sim.step()
    h = history(sim)
    assert set(SE_COLUMNS) <= set(h)
    assert np.max(np.abs(h["dE_rel"])) < 1e-13, np.max(np.abs(h["dE_rel"]))
    mass = h["M"] + h["M_escaped"] + h["M_stripped"] + h["M_se"]
    np.testing.assert_allclose(mass, 1.0, rtol=0, atol=1e-13)
    np.testing.assert_allclose(_books(h, True), h["E_tot"], rtol=1e-13)
    assert h["M_se"][-1] > 1e-5 and np.all(np.diff(h["M_se"]) >= 0.0)
    assert np.all(h["n_se_evolved"][1:] >= 1)
    assert np.sum(h["n_binary_single"]) + np.sum(h["n_binary_binary"]) >= 1
    # masses in Msun and Henon units agree (BSE's masses are the run's): to rounding for
    # the objects evolved in the run; the others still carry the loss of the zero-age call
    # (1e-6 Myr: up to 1e-7 of a 100 Msun star's mass), booked when they are next evolved
    s = sim.stars
    np.testing.assert_allclose(s.m * sim.units.mass_msun, s.m_msun, rtol=1e-6)
    ev = s.se_tphys > 1e-6
    assert np.count_nonzero(ev) >= 5
    np.testing.assert_allclose(s.m[ev] * sim.units.mass_msun, s.m_msun[ev], rtol=1e-13)

    off = make_sim(se_on=False)
    assert not off.stars.has_se_fields
    assert not any(k.startswith("se_") or k.startswith("bin_se_") for k in off.stars.as_dict())
    for _ in range(5):
        off.step()
    h = history(off)
    assert not set(SE_COLUMNS) & set(h)
    np.testing.assert_allclose(_books(h, False), h["E_tot"], rtol=1e-14)
    assert np.max(np.abs(h["dE_rel"])) < 1e-13


# --------------------------------------------------------------------------------------------
# 2. Supernovae, kicks, disruptions
# --------------------------------------------------------------------------------------------

def test_supernovae_kicks_and_disruptions_keep_the_books(tmp_path):
    """The massive stars aged to explode in the first step (N = 1500, seed 5: five singles
    above 10 Msun, binaries of 12.5 + 2.2 Msun at 2000 AU and 17.2 + 5.5 Msun at 0.27 pc):
    every one goes supernova (NS or BH), natal kicks (E_se_kicks, 1e3 |E0|) throw most out of
    the cluster, the 2000 AU binary is unbound by its member's kick into two singles with the
    members' ids (the soft one is broken by the dynamics first, and its member explodes as a
    single star), and E_tot still closes to 2e-12 of E0: a few ulps of the kicks' 1.1e3 |E0|
    (one is 2.5e-13 of E0; measured 2.7e-13), where it was off by 1.5e-4 before the
    disrupted binary's two singles, which share its slot, had their pair energy booked."""
    twin = make_sim(n=1500, seed=5)
    t = step_times(twin, 1)
    sim = make_sim(n=1500, seed=5, outdir=tmp_path / "o")
    plan = plan_supernovae(sim, 0.5 * (t[0] + t[1]))
    binary_ids = {i for i in plan if plan[i][0] > 0}
    s0 = sim.stars
    exploding, companions, m_before = set(), set(), {}
    for row in np.flatnonzero(np.isin(s0.id, list(plan))):
        j = plan[int(s0.id[row])][0]
        if j == 0:
            exploding.add(int(s0.id[row]))
            m_before[int(s0.id[row])] = float(s0.m_msun[row])
        else:
            ids = (int(s0.bin_id1[row]), int(s0.bin_id2[row]))
            exploding.add(ids[j - 1])
            companions.add(ids[2 - j])
            m_before[ids[j - 1]] = float(getattr(s0, f"bin_m{j}_msun")[row])
    assert len(plan) == 7 and len(binary_ids) == 2
    apply_plan(sim, plan)
    e_tot0 = sim.diagnostics(record=False)["E_tot"]
    d = sim.step()
    assert d["time_myr"] == t[1]
    assert d["n_supernovae"] == len(plan)
    assert d["n_se_disrupted"] == 1 and d["n_wide_broken"] >= 1
    assert d["E_se_kicks"] > 100.0 * abs(e_tot0)
    assert abs(d["E_tot"] - e_tot0) < 2e-12 * abs(e_tot0), (d["E_tot"], e_tot0)
    assert abs(d["dE_rel"]) < 2e-12
    assert abs(d["M"] + d["M_escaped"] + d["M_stripped"] + d["M_se"] - 1.0) < 1e-13
    assert d["M_se"] > 0.05  # the stars' envelopes
    # every exploded star and companion: in the cluster or among the escapers, single
    s = sim.stars
    # the disrupted binary's singles carry the binary columns at their defaults (which the
    # sort relies on: cmc.stars.StarTable.idle_binary_columns)
    assert assert_idle_binary_columns(s) > 0
    esc = {k: np.concatenate([p[k] for p in sim.escapers.rows]) for k in sim.escapers.rows[0]}
    where = {}
    for i in exploding | companions:
        here, gone = np.flatnonzero(s.id == i), np.flatnonzero(esc["id"] == i)
        assert here.size + gone.size == 1, i
        src, row = (s.as_dict(), here[0]) if here.size else (esc, gone[0])
        assert src["binind"][row] < 0
        where[i] = (bool(here.size), int(src["startype"][row]), float(src["m_msun"][row]),
                    float(src["E"][row]) if not here.size else None)
    for i in exploding:  # neutron stars and black holes, with a fraction of their mass
        assert where[i][1] in (13, 14) and where[i][2] < 0.6 * m_before[i], where[i]
    for i in companions:  # still on the main sequence
        assert where[i][1] in (0, 1)
    # the disrupted binaries are gone as objects: their members are singles (N grew)
    assert not np.isin(s.id, list(binary_ids)).any()
    assert not np.isin(esc["id"], list(binary_ids)).any()
    # most left with their kicks, unbound
    left = [i for i in exploding if not where[i][0]]
    assert len(left) >= len(exploding) // 2
    assert all(where[i][3] > 0.0 for i in left)
    # the run's masses: table, replicated arrays and Msun agree
    np.testing.assert_array_equal(sim.m_all, s.m)
    ev = s.se_tphys > 1e-6
    np.testing.assert_allclose(s.m[ev] * sim.units.mass_msun, s.m_msun[ev], rtol=1e-13)
    assert float(sim.mcum_all[-1]) == pytest.approx(d["M"], rel=1e-14)
    # the remnants left in the cluster are not evolved again (BSE keeps their masses)
    stay = np.isin(s.id, [i for i in exploding if where[i][0]])
    assert np.all(np.isinf(s.se_t_next[stay]))
    for _ in range(3):
        d = sim.step()
        assert abs(d["dE_rel"]) < 2e-12
        assert d["n_supernovae"] == 0


# --------------------------------------------------------------------------------------------
# 3. Restart
# --------------------------------------------------------------------------------------------

def _final(outdir):
    """test_engine's final state (checkpoint stars and streams, diagnostics), with the
    escaper table."""
    from cmc.io import read_diagnostics
    from tests.test_engine import _final as final_state

    esc, _ = read_diagnostics(outdir / "escapers.h5")
    return (*final_state(outdir), esc)


def _aged_runs(monkeypatch, plan):
    """New runs of the CLI (not restarts, nor its kernel warm-up) start with ``plan``
    applied."""
    create = Simulation.create.__func__

    def aged(cls, cfg, comm, outdir=None, **kw):
        sim = create(cls, cfg, comm, outdir, **kw)
        if outdir is not None:
            apply_plan(sim, plan)
        return sim

    monkeypatch.setattr(Simulation, "create", classmethod(aged))


@pytest.mark.parametrize("emulate,dmse", [(0, False), (3, True)])
def test_restart_with_stellar_evolution_is_bit_for_bit(tmp_path, monkeypatch, emulate, dmse):
    """Stopped at step 6 and restarted to 14, with the massive stars aged to explode in step
    8 of the run without them (giants from step 1 on): the stars with
    their BSE state, every diagnostics column (the SE ones too) and the escaper table equal
    the uninterrupted run's, bit for bit (the BSE flags are set again on restart; the
    scheduler's times and the DMse limit's last loss travel in the checkpoint).  Without the
    DMse limit the clock is the unaged run's and the supernovae happen after the restart;
    with it, the giants' winds cut every step (to 1e-3 of M lost per step) and the restart
    continues a run whose step is set by the last step's loss."""
    from cmc.cli import main

    stop, total = 6, 14
    # (with the DMse limit, the giants every step, CMC-COSMIC's way, so that their winds set
    # every step; without it, the giants' own schedule, bse.giant_tolerance)
    extra = ("bse.giant_tolerance=0",) if dmse else ("bse.dt_mass_fraction=0",)
    t = step_times(make_sim(emulate=emulate, extra=extra), stop + 2)
    # (without the limit, the 10-20 Msun stars only: the winds of the heavier giants, 28 %
    # of the cluster's mass in 6 steps, would change the clock)
    plan = plan_supernovae(make_sim(emulate=emulate, extra=extra),
                           0.5 * (t[stop + 1] + t[stop + 2]), m_max=np.inf if dmse else 20.0)
    _aged_runs(monkeypatch, plan)
    ini = tmp_path / "m.ini"
    ini.write_text("[initial]\nn = 1000\nseed = 6\nmass_function = kroupa\nm_min = 0.08\n"
                   "m_max = 100\nbinary_fraction = 0.1\n[run]\nn_core_stop = 0\n"
                   f"emulate_ranks = {emulate}\n[bse]\nstellar_evolution = true\n"
                   + ("giant_tolerance = 0\n" if dmse else "dt_mass_fraction = 0\n")
                   + "[output]\ncheckpoint_every = 4\n")
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", str(ini), "-o", str(a), "--set", f"run.max_steps={total}"]) == 0
    assert main(["run", str(ini), "-o", str(b), "--set", f"run.max_steps={stop}"]) == 0
    assert main(["restart", str(b), "--set", f"run.max_steps={total}"]) == 0
    (sa, ra, da, ea), (sb, rb, db, eb) = _final(a), _final(b)
    assert sorted(sa) == sorted(sb)
    assert {"se_tphys", "se_t_next", "se_epoch", "binaries/bin_se_epoch_2"} <= set(sa)
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)
    np.testing.assert_array_equal(ra, rb)
    assert sorted(da) == sorted(db) and set(SE_COLUMNS) <= set(da)
    for k in da:
        np.testing.assert_array_equal(da[k], db[k], err_msg=k)
    assert sorted(ea) == sorted(eb) and "se_epoch" in ea
    for k in ea:
        np.testing.assert_array_equal(ea[k], eb[k], err_msg=f"escapers.h5 {k}")
    assert da["step"][-1] == total
    # (a few ulps of the kicks' energy, 1e3 |E0|: measured 7e-13)
    assert np.max(np.abs(da["dE_rel"])) < 5e-12
    if dmse:  # every step after the first limited by the last one's loss
        m = da["M"]
        limit = 1e-3 * m[1:-1] * da["dt"][1:-1] / np.diff(da["M_se"])[:-1]
        assert np.all(da["dt"][2:] <= limit * (1.0 + 1e-12))
        at_limit = np.isclose(da["dt"][2:], limit, rtol=1e-12, atol=0.0)
        assert np.count_nonzero(at_limit) >= 8 and at_limit[stop - 1:].all()  # (or growth)
        assert np.all(da["n_se_evolved"][1:] >= len(plan))  # the giants, every step
    else:  # the supernovae after the restart point, their kicked remnants escaping
        assert np.sum(da["n_supernovae"][stop + 1:]) >= len(plan) // 2
        assert np.all(da["n_se_evolved"][1:stop + 1] >= len(plan))
        assert np.count_nonzero(np.isin(ea["startype"], (13, 14)) & (ea["step"] > stop)) >= 1


# --------------------------------------------------------------------------------------------
# 4. Outputs
# --------------------------------------------------------------------------------------------

def test_checkpoint_and_snapshot_hold_the_stellar_evolution_state(tmp_path):
    """The checkpoint and the snapshot hold every BSE column, the objects' (se_*) in the
    stars group and the members' (bin_se_*) in the binaries group, each with its unit and
    meaning; reading them back, and a run restored from the checkpoint, give the same
    arrays."""
    from cmc.fields import FIELD_BY_NAME, SE_BINARY_NAMES, SE_NAMES
    from cmc.io import read_checkpoint, read_snapshot

    (tmp_path / "o").mkdir()
    sim = make_sim(outdir=tmp_path / "o")
    for _ in range(4):
        sim.step()
    sim.write_checkpoint()
    sim.write_snapshot()
    stars = sim.gather_stars()
    assert set(SE_NAMES) | set(SE_BINARY_NAMES) <= set(stars)
    assert np.any(stars["se_tphys"] > 1e-6) and np.any(stars["bin_se_tms_1"] > 0.0)
    snap = tmp_path / "o" / "snapshots" / f"snap_{sim.state.step:07d}.h5"
    if not snap.exists():
        (snap,) = [p for p in (tmp_path / "o" / "snapshots").iterdir()
                   if p.name.endswith(f"{sim.state.step}.h5")]
    for path in (tmp_path / "o" / "checkpoint.h5", snap):
        with h5py.File(path, "r") as fh:
            for group, names in (("stars", SE_NAMES), ("binaries", SE_BINARY_NAMES)):
                for name in names:
                    ds = fh[group][name]
                    assert ds.attrs["unit"] == FIELD_BY_NAME[name].unit, (path.name, name)
                    assert ds.attrs["meaning"] == FIELD_BY_NAME[name].meaning
            assert fh["stars"]["se_epoch"].attrs["unit"] == "Myr"
            assert fh["binaries"]["bin_se_lum_2"].attrs["unit"] == "Lsun"
            rows = fh["binaries"]["star_row"][...]
            np.testing.assert_array_equal(fh["binaries"]["bin_se_epoch_1"][...],
                                          stars["bin_se_epoch_1"][rows])
    back, state, _, _ = read_checkpoint(tmp_path / "o" / "checkpoint.h5")
    snap_back, _ = read_snapshot(snap)
    restored = Simulation.from_checkpoint(tmp_path / "o" / "checkpoint.h5", SerialComm())
    again = restored.gather_stars()
    assert restored.stars.has_se_fields and int(state["step"]) == 4
    for k in stars:
        np.testing.assert_array_equal(back[k], stars[k], err_msg=k)
        np.testing.assert_array_equal(snap_back[k], stars[k], err_msg=k)
        np.testing.assert_array_equal(again[k], stars[k], err_msg=k)


# --------------------------------------------------------------------------------------------
# 5. A BSE failure
# --------------------------------------------------------------------------------------------

def test_bse_failure_stops_the_run_at_its_last_checkpoint(tmp_path, monkeypatch, capsys):
    """BSE fails in step 5 (injected: StellarEvolutionError for the first object of the
    step's batch): the run exits with 3, the log and stderr name the object's id, the torn
    step is not written (checkpoint.h5 is step 4's, the last one before the failure), and
    ``cmc restart`` continues from it."""
    from cmc.cli import main

    now = {"step": None}
    run = sep.StellarEvolution.run

    def counted(self, work):
        now["step"] = self.sim.state.step + 1
        try:
            return run(self, work)
        finally:
            now["step"] = None

    evolve = se.evolve
    failed: list[int] = []

    def failing(batch, *args, **kwargs):
        if now["step"] == 5:
            caller = inspect.currentframe().f_back.f_locals  # se_spread._evolve_here's
            failed.append(int(caller["ids"][0]))
            raise se.StellarEvolutionError(0, "injected")
        return evolve(batch, *args, **kwargs)

    monkeypatch.setattr(sep.StellarEvolution, "run", counted)
    monkeypatch.setattr(sep.se, "evolve", failing)
    ini = tmp_path / "m.ini"
    ini.write_text("[initial]\nn = 1000\nseed = 6\nmass_function = kroupa\nm_min = 0.08\n"
                   "m_max = 100\nbinary_fraction = 0.1\n[run]\nn_core_stop = 0\n"
                   "max_steps = 10\n[bse]\nstellar_evolution = true\n"
                   "[output]\ncheckpoint_every = 2\n")
    out = tmp_path / "o"
    assert main(["run", str(ini), "-o", str(out)]) == 3
    assert len(failed) == 1
    err = capsys.readouterr().err
    named = f"stellar evolution failed for object id {failed[0]} "
    assert named in err and "(step 5)" in err and "injected" in err
    assert named in (out / "cmc.log").read_text()
    assert re.search(r"state of the failed step is not written", (out / "cmc.log").read_text())
    with h5py.File(out / "checkpoint.h5", "r") as fh:
        assert int(fh["state"].attrs["step"]) == 4
    monkeypatch.setattr(sep.se, "evolve", evolve)
    assert main(["restart", str(out), "--set", "run.max_steps=7"]) == 0
    with h5py.File(out / "checkpoint.h5", "r") as fh:
        assert int(fh["state"].attrs["step"]) == 7
        assert "se_tphys" in fh["stars"]
    from cmc.io import read_diagnostics

    d, _ = read_diagnostics(out / "diagnostics.h5")
    np.testing.assert_array_equal(d["step"], np.arange(8))
    assert np.max(np.abs(d["dE_rel"])) < 1e-12


# --------------------------------------------------------------------------------------------
# 6. The scheduler's lag
# --------------------------------------------------------------------------------------------

def test_scheduled_states_lag_by_at_most_the_tolerance():
    """After 30 steps (1.5 Myr), each main-sequence single star's state in the table (as of
    its last call, se_tphys) evolved on by a copy, to the run's time and to the star's next
    call (se_t_next, the longest the scheduler lets it wait): its mass differs by at most
    bse.tolerance (relative), its radius by at most bse.ms_age_tolerance now and twice it at
    the next call (a star waits at most that fraction of its main sequence, over which its
    radius grows by a factor ~2, faster towards its end).  No object is overdue."""
    sim = make_sim()
    for _ in range(30):
        sim.step()
    tol = sim.cfg.bse.tolerance
    t_now = sim.units.rel_to_myr(sim.state.time)
    f = sim.stars.as_dict()
    assert np.all(f["se_t_next"] >= t_now)  # (= t_now: due in the next step)
    rows = np.flatnonzero((f["binind"] < 0) & (f["startype"] <= 1))
    lags = {}
    for when, t in (("now", t_now), ("next call", f["se_t_next"][rows])):
        batch = sep.batch_of(f, rows, sim.units.length_rsun, np.arange(1, rows.size + 1))
        res = se.evolve(batch, t, sim.state.metallicity, sim.cfg.bse.pts1_highmass_cutoff)
        assert np.all(res.outcome == se.EVOLVED) and np.all(batch.kstar[:, 0] <= 1)
        lags[when] = (np.abs(batch.mass[:, 0] / f["m_msun"][rows] - 1.0),
                      np.abs(batch.rad[:, 0] / f["rad"][rows] - 1.0))
    (dm, drad), (dm_next, drad_next) = lags["now"], lags["next call"]
    print(f"lag now: mass {dm.max():.3g}, radius {drad.max():.3g}; at the next call: mass "
          f"{dm_next.max():.3g}, radius {drad_next.max():.3g}")
    assert dm.max() <= tol and dm_next.max() <= tol
    age_tol = sim.cfg.bse.ms_age_tolerance
    assert drad.max() <= age_tol and drad_next.max() <= 2.0 * age_tol
    # the massive stars were evolved in the run, and wait for their next call
    massive = f["m_msun"][rows] > 15.0
    assert np.count_nonzero(massive) >= 5
    assert np.all(f["se_tphys"][rows][massive] > 0.5 * t_now)
    assert np.all(dm_next[massive] > 1e-5) and np.all(drad_next[massive] > 1e-3)


def test_a_bse_call_that_never_returns_ends_the_process():
    """evolv2 has looped for ever on some systems: the watchdog around every batch of BSE
    calls ends the process (status 1, tracebacks on stderr) instead of letting it hang."""
    import subprocess
    import sys

    code = ("import time\nfrom cmc.processes.stellar_evolution import bse_watchdog\n"
            "with bse_watchdog(1):\n    time.sleep(30)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1
    assert "Timeout" in out.stderr


# --------------------------------------------------------------------------------------------
# 7. The write-back against a per-object twin
# --------------------------------------------------------------------------------------------

def _reference_write_back(fields, due, index, batch, result, t_next, azimuth_u, seg_of, nseg,
                          units):
    """The write-back of the objects that stay what they are or are destroyed, one object
    at a time (the loop the process had before it was vectorised): the table's new columns
    (copies), each segment's parts with the sum of their terms' sizes, the destroyed ids."""
    from cmc.diagnostics import SE_SUMS

    f = {k: v.copy() for k, v in fields.items()}
    parts, size = np.zeros((nseg, len(SE_SUMS))), np.zeros((nseg, len(SE_SUMS)))
    gone = []

    def put(k, name, x):
        parts[seg_of[k], SE_SUMS.index(name)] += x
        size[seg_of[k], SE_SUMS.index(name)] += abs(x)

    for k, row in enumerate(due.tolist()):
        b = int(index[k])
        put(k, "n_se_evolved", 1)
        binary = f["binind"][row] >= 0
        m_old = float(f["m"][row])
        v2_old = float(f["vr"][row] ** 2 + f["vt"][row] ** 2)
        eb_old = -0.5 * f["bin_m1"][row] * f["bin_m2"][row] / f["bin_a"][row] if binary else 0.0
        product = f["se_t_next"][row] < 0.0
        if b < 0 or result.outcome[b] == se.DESTROYED:
            gone.append(int(f["id"][row]))
            put(k, "n_se_destroyed", 1)
            put(k, "m_se", m_old)
            put(k, "e_se_kinetic", -0.5 * m_old * v2_old)
            put(k, "e_se_binding", -eb_old)
            continue
        assert result.outcome[b] == se.EVOLVED  # (no binary splits in this step)
        put(k, "n_supernovae", int(np.count_nonzero(result.supernova[b])))
        f["se_tphys"][row], f["se_t_next"][row] = batch.tphys[b], t_next[b]
        if binary:
            old = [f[f"bin_m{j}_msun"][row] for j in (1, 2)]
            for j in (1, 2):
                sep._write_member(f, row, sep.MEMBER[j - 1], batch, b, j - 1)
                if product or f[f"bin_m{j}_msun"][row] != old[j - 1]:
                    f[f"bin_m{j}"][row] = f[f"bin_m{j}_msun"][row] / units.mass_msun
            f["bin_a"][row] = batch.sep[b] / units.length_rsun
            f["bin_e"][row] = batch.ecc[b]
            f["m"][row] = f["bin_m1"][row] + f["bin_m2"][row]
            f["m_msun"][row] = f["bin_m1_msun"][row] + f["bin_m2_msun"][row]
        else:
            old = f["m_msun"][row]
            sep._write_member(f, row, sep.SINGLE, batch, b, 0)
            if product or f["m_msun"][row] != old:
                f["m"][row] = f["m_msun"][row] / units.mass_msun
        m_new = float(f["m"][row])
        put(k, "m_se", m_old - m_new)
        put(k, "e_se_kinetic", 0.5 * (m_new - m_old) * v2_old)
        dv = result.dv[b, 0] / units.velocity_kms
        if np.any(dv != 0.0):
            vr, vt = sep._kicked(f["vr"][row], f["vt"][row], 2.0 * np.pi * azimuth_u[k], dv)
            put(k, "e_se_kicks", 0.5 * m_new * (vr * vr + vt * vt - v2_old))
            f["vr"][row], f["vt"][row] = vr, vt
        if binary:
            put(k, "e_se_binding",
                -0.5 * f["bin_m1"][row] * f["bin_m2"][row] / f["bin_a"][row] - eb_old)
    return f, parts, size, gone


def test_write_back_equals_a_per_object_twin(monkeypatch):
    """Every object of a run (N = 1000, 10 % binaries, three segments) made due in step 2, a
    seventh of them as products of the step (their Hénon mass from BSE's whatever changed),
    with injected natal kicks and supernova flags on every fifth one, a binary member's mass
    changed by BSE and its companion's not in every third binary, the Hénon masses off
    their Msun ones by 1e-9 (so that a mass rewritten where it must not be shows), one
    object destroyed by BSE and one void single: the table's columns of the objects evolved
    and each segment's energy, mass and counter parts equal a per-object twin of the old
    loop's (to 1e-14 of the sizes of the terms summed), and the destroyed ones are gone."""
    sim = make_sim(emulate=3)
    sim.step()
    s = sim.stars
    n = s.m.size
    s.se_t_next[:] = 0.0  # all due, not products ...
    s.se_t_next[::7] = sep.DUE_NOW  # ... but these
    void = int(np.flatnonzero((s.binind < 0) & (np.arange(n) % 7 != 0))[3])
    s.startype[void] = se.MASSLESS
    void_id = int(s.id[void])
    seen = {}
    write_back = sep.StellarEvolution._write_back

    def checked(self, work, due, block_of, index, batch, result, t_next, azimuth_u):
        fields = self.sim.stars.as_dict()
        units = self.sim.units
        rng = np.random.default_rng(3)
        ok = np.flatnonzero(index >= 0)
        ok = ok[result.outcome[index[ok]] == se.EVOLVED]
        binary = fields["binind"][due] >= 0
        for k in ok[::5]:  # kicks of a few km/s, each flagged as a supernova
            result.dv[index[k], 0] = rng.normal(0.0, 3.0, 3)
            result.supernova[index[k], 0] = True
        for k in ok[binary[ok]][::3]:  # member 1 changed, member 2 as before
            row, b = due[k], index[k]
            batch.mass[b, 0] = fields["bin_m1_msun"][row] * (1.0 - 1e-6)
            batch.mass[b, 1] = fields["bin_m2_msun"][row]
        singles = ok[~binary[ok] & (result.dv[index[ok], 0, 0] == 0.0)]
        destroyed_id = int(fields["id"][due[singles[2]]])
        result.outcome[index[singles[2]]] = se.DESTROYED
        for name in ("m", "bin_m1", "bin_m2"):
            fields[name][due] *= 1.0 + 1e-9
        seg_of = np.searchsorted(work.seg_blocks, block_of, side="right") - 1
        nseg = work.seg_blocks.size - 1
        ref, parts, size, gone = _reference_write_back(
            fields, due, index, batch, result, t_next, azimuth_u, seg_of, nseg, units)
        assert sorted(gone) == sorted([void_id, destroyed_id])
        ids = fields["id"][due[ok]]
        m_before = fields["m"].copy()
        product = fields["se_t_next"][due[ok]] < 0.0
        write_back(self, work, due, block_of, index, batch, result, t_next, azimuth_u)
        new = self.sim.stars.as_dict()
        assert not np.isin(gone, new["id"]).any()
        at = np.flatnonzero(np.isin(new["id"], ids))
        at = at[np.argsort(new["id"][at])]
        was = due[ok][np.argsort(ids)]
        assert at.size == ids.size - 1  # (the one destroyed)
        was = was[fields["id"][was] != destroyed_id]
        for name in ref:
            np.testing.assert_allclose(new[name][at], ref[name][was], rtol=1e-14, atol=0.0,
                                       err_msg=name)
        np.testing.assert_array_less(np.abs(work.se_parts - parts), 1e-14 * size + 1e-300)
        # what the test covers
        evolved = parts[:, 4]  # (n_se_evolved)
        seen.update(nseg=np.count_nonzero(evolved > 0), kicked=ok[::5].size,
                    m_changed=np.count_nonzero(ref["m"][was] != m_before[was]),
                    m_kept=np.count_nonzero(ref["m"][was] == m_before[was]),
                    binaries=np.count_nonzero(binary[ok]), products=np.count_nonzero(product))

    monkeypatch.setattr(sep.StellarEvolution, "_write_back", checked)
    # (the pair energy of rows that share a slot is booked after the loop: left out here)
    monkeypatch.setattr(sep, "_slot_pair_energies", lambda slots, *a: np.zeros(slots.size))
    sim.step()
    print(f"write-back twin covered: {seen}")
    assert seen["nseg"] == 3 and seen["kicked"] >= 50 and seen["binaries"] >= 50
    assert seen["m_changed"] >= 10 and seen["m_kept"] >= 100 and seen["products"] >= 50
