"""The MPI engine against its serial stream emulation, restart at P ranks, and sweeps.

Written once for any communicator size: ``mpiexec -n P python -m pytest tests/mpi``.
Every rank computes, the comparisons happen on data shared with every rank, and every rank
asserts the same thing (no rank is left waiting in a collective).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from cmc.config import load_config
from cmc.simulation import Simulation
from parallel.comm import SerialComm

MPI = pytest.importorskip("mpi4py.MPI")


def shared_tmpdir(world) -> Path:
    path = tempfile.mkdtemp(prefix="cmc-mpi-") if world.rank == 0 else None
    return Path(world.bcast(path, root=0))


#: a tidally limited King model whose shrinking tidal radius strips stars in every step
TIDAL = ["initial.model=king", "initial.w0=3", "tidal.mode=shrinking"]


def _cfg(p_emul: int, n: int = 2000, steps: int = 50, binaries: float = 0.0,
         extra: tuple = ()):
    return load_config(None, [f"initial.n={n}", "initial.seed=12", f"run.max_steps={steps}",
                              f"run.emulate_ranks={p_emul}", "run.n_core_stop=0",
                              f"initial.binary_fraction={binaries}", *extra])


def _run_and_emulation(world, steps: int, prepare=None, prepare_emulation=None, **cfg):
    """``steps`` steps on ``world`` and, on rank 0, of its serial emulation (``_cfg(**cfg)``):
    ``(stars, diagnostics)`` of the run, then of the emulation (None on the other ranks).
    ``prepare(sim)`` sees the parallel run before its first step, ``prepare_emulation(sim)``
    the emulation."""
    p = world.size
    sim = Simulation.create(_cfg(0, **cfg), world)
    if prepare is not None:
        prepare(sim)
    for _ in range(steps):
        sim.step()
    par = sim.gather_stars()
    par_diag = {k: np.asarray(v) for k, v in sim.history.items()}
    ser = ser_diag = None
    if world.rank == 0:  # the serial emulation of p ranks, computed on rank 0
        emu = Simulation.create(_cfg(p if p > 1 else 0, **cfg), SerialComm())
        if prepare_emulation is not None:
            prepare_emulation(emu)
        for _ in range(steps):
            emu.step()
        ser = emu.gather_stars()
        ser_diag = {k: np.asarray(v) for k, v in emu.history.items()}
    return par, par_diag, ser, ser_diag


@pytest.mark.parametrize("binaries,tidal", [(0.0, False), (0.2, False), (0.0, True),
                                            (0.2, True)])
def test_parallel_run_equals_serial_emulation(world, binaries, tidal):
    """Also with primordial binaries and strong encounters: the binary table moves with the
    centre of mass through the sample sort and the redistribution, encounters draw from their
    block's sub-stream and products stay in their block.  With a shrinking tidal radius the
    iterative stripping decides on the same bits on every rank count."""
    extra = TIDAL if tidal else ()
    par, par_diag, ser, ser_diag = _run_and_emulation(world, 50, binaries=binaries,
                                                      extra=extra)
    verdict = None
    if world.rank == 0:
        keys = ("id", "r", "m", "vr", "vt") + (("binind", "bin_a", "bin_e", "bin_m1",
                                                 "bin_id2") if binaries else ())
        same = {k: bool(np.array_equal(par[k], ser[k])) for k in keys}
        if binaries:
            same["has_binaries"] = bool(np.count_nonzero(par["binind"] >= 0) > 300)
        # every diagnostics column, bit for bit: the sums are reduced as the ranks' partial
        # sums added in rank order, and the emulation sums its emulated ranks apart
        rel = sorted(k for k in set(par_diag) | set(ser_diag)
                     if k not in par_diag or k not in ser_diag
                     or par_diag[k].tobytes() != ser_diag[k].tobytes())
        n_enc = float(np.sum(par_diag["n_binary_single"]) + np.sum(par_diag["n_binary_binary"]))
        # every star is a single or one of two members: stars are only lost by escape
        n_stars = par_diag["N"] + par_diag["N_binaries"]
        n_strip = float(np.sum(par_diag["n_stripped_step"]))
        n_debt = int(np.count_nonzero(np.diff(par_diag["E_deficit"])))
        verdict = (same, rel, int(n_stars[-1]), int(n_stars[0]), n_enc, n_strip, n_debt)
    same, rel, n_end, n_start, n_enc, n_strip, n_debt = world.bcast(verdict, root=0)
    assert all(same.values()), same
    assert not rel, f"diagnostics differ: {rel}"
    # the comparison covers energy debts passed on between blocks (1 step of 50 in the tidal
    # run without binaries with the pinned packages; debts forced across ranks:
    # test_take_deficit_carries_event_debts_across_ranks and the binary-debt test)
    assert n_debt >= 1
    assert n_end <= n_start
    if binaries:
        assert n_enc >= 5  # the comparison covers encounters
    if tidal:
        assert n_strip >= 100  # and stripping


def _compare(par: dict, par_diag: dict, ser: dict, ser_diag: dict) -> tuple[dict, list]:
    """(star column -> equal, with "columns": the same names), and the diagnostics columns
    that differ in any bit or exist on one side only."""
    same = {k: bool(np.array_equal(par[k], ser[k])) for k in set(par) | set(ser)
            if k in par and k in ser}
    same["columns"] = sorted(par) == sorted(ser)
    rel = sorted(k for k in set(par_diag) | set(ser_diag)
                 if k not in par_diag or k not in ser_diag
                 or par_diag[k].tobytes() != ser_diag[k].tobytes())
    return same, rel


def test_stellar_evolution_equals_serial_emulation(world, monkeypatch):
    """Stellar evolution (Kroupa 0.08-100 Msun, 10 % binaries, N = 1500, seed 5) with the
    massive stars aged to explode in the first step (tests/test_stellar_evolution_run.py's
    plan, made on rank 0 and applied by object id on every rank and in the emulation):
    supernovae, kicks, a binary disrupted by its member's kick (its two singles in one
    slot), kicked remnants leaving, then winds and the scheduler over 10 steps.  The P-rank
    run equals its serial emulation bit for bit: the stars with every BSE column, and every
    diagnostics column (the SE ones too)."""
    from tests.test_stellar_evolution_run import apply_plan, plan_supernovae, step_times

    monkeypatch.chdir(tempfile.mkdtemp(prefix="cmc-mpi-se-"))  # evolv2's fort.99, per rank
    p = world.size
    extra = ("initial.seed=5", "initial.mass_function=kroupa", "initial.m_min=0.08",
             "initial.m_max=100", "bse.stellar_evolution=true")
    plan = None
    if world.rank == 0:  # the first step's end, from the emulation without the plan
        t = step_times(Simulation.create(_cfg(p if p > 1 else 0, n=1500, binaries=0.1,
                                              extra=extra), SerialComm()), 1)
        plan = plan_supernovae(Simulation.create(_cfg(0, n=1500, binaries=0.1, extra=extra),
                                                 SerialComm()), 0.5 * (t[0] + t[1]))
    plan = world.bcast(plan, root=0)

    def aged(sim):
        apply_plan(sim, plan)

    par, par_diag, ser, ser_diag = _run_and_emulation(
        world, 10, aged, aged, n=1500, binaries=0.1, extra=extra)
    verdict = None
    if world.rank == 0:
        same, rel = _compare(par, par_diag, ser, ser_diag)
        verdict = (same, rel, "se_epoch" in par and "bin_se_epoch_2" in par,
                   float(np.sum(par_diag["n_supernovae"])),
                   float(np.sum(par_diag["n_se_disrupted"])),
                   float(np.sum(par_diag["n_escaped_step"])),
                   float(np.max(np.abs(par_diag["dE_rel"]))))
    same, rel, has_se, n_sn, n_dis, n_esc, de = world.bcast(verdict, root=0)
    assert all(same.values()), {k: v for k, v in same.items() if not v}
    assert not rel, f"diagnostics differ: {rel}"
    assert has_se
    assert n_sn == len(plan) == 7 and n_dis == 1 and n_esc >= 3
    assert de < 2e-12


def test_collisions_equal_serial_emulation(world, monkeypatch):
    """Single-single collisions (binaries.ss_collision, radii stretched by coll_factor so that
    they happen in every step) with stellar evolution and 10 % binaries, N = 1500, 10 steps:
    the P-rank run equals its serial emulation bit for bit (stars, every diagnostics column,
    n_collisions among them)."""
    monkeypatch.chdir(tempfile.mkdtemp(prefix="cmc-mpi-coll-"))  # evolv2's fort.99
    extra = ("initial.seed=5", "initial.mass_function=kroupa", "initial.m_min=0.08",
             "initial.m_max=20", "bse.stellar_evolution=true", "binaries.ss_collision=true",
             "binaries.coll_factor=1e5")
    par, par_diag, ser, ser_diag = _run_and_emulation(world, 10, n=1500, binaries=0.1,
                                                      extra=extra)
    verdict = None
    if world.rank == 0:
        same, rel = _compare(par, par_diag, ser, ser_diag)
        verdict = (same, rel, float(np.sum(par_diag["n_collisions"])),
                   float(np.max(np.abs(par_diag["dE_rel"]))))
    same, rel, n_coll, de = world.bcast(verdict, root=0)
    assert all(same.values()), {k: v for k, v in same.items() if not v}
    assert not rel, f"diagnostics differ: {rel}"
    assert n_coll >= 3
    assert de < 1e-11


def test_bh_capture_equals_serial_emulation(world, monkeypatch):
    """Gravitational-wave captures among ~100 black holes made in the first step
    (tests/test_bh_capture.py's cluster, its speed of light cut so that they capture within a
    few steps), 10 steps: the P-rank run equals its serial emulation bit for bit (stars,
    every diagnostics column, n_bh_captures and E_gw_capture among them)."""
    from tests.test_bh_capture import CAPTURING, black_hole_plan, black_holes_with_slow_light

    monkeypatch.chdir(tempfile.mkdtemp(prefix="cmc-mpi-cap-"))  # evolv2's fort.99
    p = world.size
    plan = black_hole_plan(CAPTURING, p) if world.rank == 0 else None
    plan = world.bcast(plan, root=0)

    def prepare(sim):
        black_holes_with_slow_light(sim, plan)

    par, par_diag, ser, ser_diag = _run_and_emulation(world, 10, prepare, prepare, n=2000,
                                                      extra=tuple(CAPTURING))
    verdict = None
    if world.rank == 0:
        same, rel = _compare(par, par_diag, ser, ser_diag)
        verdict = (same, rel, float(np.sum(par_diag["n_bh_captures"])))
    same, rel, n_cap = world.bcast(verdict, root=0)
    assert all(same.values()), {k: v for k, v in same.items() if not v}
    assert not rel, f"diagnostics differ: {rel}"
    assert n_cap >= 3


def test_pn25_equals_serial_emulation(world, monkeypatch):
    """The 2.5PN term in encounters among the black holes of test_bh_capture's cluster
    (tests/test_pn25.py: the encounters' speed of light cut so that they radiate), 140
    steps: the P-rank run equals its serial emulation bit for bit (stars, every diagnostics
    column, E_gw_encounters among them; the recoil draws in the block sub-streams)."""
    from tests.test_bh_capture import black_hole_plan
    from tests.test_pn25 import PN_STEPS, pn_config, slow_pn_light

    monkeypatch.chdir(tempfile.mkdtemp(prefix="cmc-mpi-pn-"))  # evolv2's fort.99
    p = world.size
    cfg = pn_config()
    plan = black_hole_plan(cfg, p) if world.rank == 0 else None
    plan = world.bcast(plan, root=0)

    def prepare(sim):
        slow_pn_light(sim, plan)

    par, par_diag, ser, ser_diag = _run_and_emulation(world, PN_STEPS, prepare, prepare,
                                                      n=2000, extra=tuple(cfg))
    verdict = None
    if world.rank == 0:
        same, rel = _compare(par, par_diag, ser, ser_diag)
        verdict = (same, rel, float(par_diag["E_gw_encounters"][-1]))
    same, rel, e_gw = world.bcast(verdict, root=0)
    assert all(same.values()), {k: v for k, v in same.items() if not v}
    assert not rel, f"diagnostics differ: {rel}"
    assert e_gw < 0.0


@pytest.mark.parametrize("binaries,tidal", [(0.0, False), (0.2, True)])
def test_zones_equal_serial_emulation(world, binaries, tidal):
    """Radial time-step zones (run.zones = 4), 30 steps: only the stars whose zone is due
    are stepped (the zone bounds from one reduction over the ranks' windows, the due pairs'
    draws only); with 20 % binaries and a shrinking tidal radius also encounters and
    stripping.  The P-rank run equals its serial emulation bit for bit (stars with their
    zones and clocks, every diagnostics column)."""
    extra = ("run.zones=4", "run.zone_dt_max=1000", *(TIDAL if tidal else ()))
    par, par_diag, ser, ser_diag = _run_and_emulation(world, 30, binaries=binaries,
                                                      extra=extra)
    verdict = None
    if world.rank == 0:
        same, rel = _compare(par, par_diag, ser, ser_diag)
        verdict = (same, rel, float(par_diag["n_stepped"][1:].min()), float(np.sum(
            par_diag["n_binary_single"] + par_diag["n_binary_binary"])))
    same, rel, least, n_enc = world.bcast(verdict, root=0)
    assert all(same.values()), {k: v for k, v in same.items() if not v}
    assert not rel, f"diagnostics differ: {rel}"
    assert least < 1800  # steps that leave stars out
    if binaries:
        assert n_enc >= 3


@pytest.mark.parametrize("sign,binaries", [(1, 0.2), (-1, 0.0)])
def test_shared_orbit_blocks_equal_serial_emulation(world, sign, binaries):
    """Neighbouring ranks compute each other's orbit blocks (run.orbit_balance; the shifts
    fixed here instead of measured, so that every run moves blocks both ways: with sign 1,
    rank 0 takes rank 1's first 6 blocks and rank 2 rank 1's last 8; with -1 the other way).
    The blocks' inputs, stream states and results travel, and the run equals its serial
    emulation bit for bit, also with strong encounters (blocks of uneven rows; one direction
    each, to keep the suite's time)."""
    p = world.size

    def fix_shifts(sim):
        if p > 1:
            sim.orbits.share.fixed = np.array(
                [sign * (6 if j % 2 == 0 else -8) for j in range(p - 1)], dtype=float)

    par, par_diag, ser, ser_diag = _run_and_emulation(world, 30, fix_shifts,
                                                      binaries=binaries)
    verdict = None
    if world.rank == 0:
        same = {k: bool(np.array_equal(par[k], ser[k])) for k in par}
        rel = sorted(k for k in par_diag if par_diag[k].tobytes() != ser_diag[k].tobytes())
        verdict = (same, rel)
    same, rel = world.bcast(verdict, root=0)
    assert all(same.values()), same
    assert not rel, f"diagnostics differ: {rel}"


def test_three_body_binaries_equal_serial_emulation(world):
    """Three-body binary formation in a collapsed core (a 2000-star model near collapse,
    tests/data/collapsed_core_n2000.h5, eta_min = 3 so that binaries form within 100 steps):
    the P-rank run equals its serial emulation bit for bit."""
    data = Path(__file__).resolve().parents[1] / "data" / "collapsed_core_n2000.h5"

    def cfg(p_emul):
        return load_config(None, ["initial.model=file", f"initial.file={data}",
                                  "initial.seed=12", "binaries.three_body=all",
                                  "binaries.eta_min=3", "run.n_core_stop=0",
                                  # the first defaults' time step: binaries form by step 100
                                  "run.theta_max=1.0", "run.dt_window=40",
                                  f"run.emulate_ranks={p_emul}"])

    p = world.size
    sim = Simulation.create(cfg(0), world)
    for _ in range(100):
        sim.step()
    par = sim.gather_stars()
    n3 = float(np.sum(sim.history["n_three_body"]))
    verdict = None
    if world.rank == 0:
        emu = Simulation.create(cfg(p if p > 1 else 0), SerialComm())
        for _ in range(100):
            emu.step()
        ser = emu.gather_stars()
        same = {k: bool(np.array_equal(par[k], ser[k])) for k in par}
        verdict = (same, float(np.sum(emu.history["n_three_body"])))
    same, n3_ser = world.bcast(verdict, root=0)
    assert all(same.values()), same
    assert n3 == n3_ser >= 1


def test_binary_debts_carried_across_ranks_equal_serial_emulation(world, monkeypatch):
    """Energy that a binary event's block cannot pay is carried outward through the blocks
    (issue 45, item 6): a wide binary breaks in rank 0's last block, whose objects are slowed
    1000-fold, so its binding energy is paid by the blocks after it (on rank 1 when the sort
    leaves the layout as it was); the P-rank run equals its serial emulation bit for bit,
    E_oops does not get the energy and E_tot is conserved.  (The carrying across ranks itself:
    test_take_deficit_carries_event_debts_across_ranks.)"""
    import cmc.processes.energy as energy_process
    from parallel.decomposition import rank_bounds

    p = world.size
    first: list = []
    settle_debts = energy_process.settle_debts

    def settle(debts, kinetic, fraction):
        pay, left = settle_debts(debts, kinetic, fraction)
        if not first:
            first.append((debts.copy(), pay.copy()))
        return pay, left

    monkeypatch.setattr(energy_process, "settle_debts", settle)
    bound = int(rank_bounds(2000, p)[1]) if p > 1 else 1000  # rank 0's rows
    row = bound - 15
    sizes = []

    def cold(sim):
        """rank 0's last block slowed, its binaries made single (no encounter gives it
        kinetic energy), a wide binary in it"""
        if sim.offset <= row < sim.offset + sim.stars.n:
            s = sim.stars
            i = row - sim.offset
            blk = slice(i - 5, i + 15)
            s.vr[blk] *= 1e-3
            s.vt[blk] *= 1e-3
            s.binind[blk] = -1
            for col in ("bin_id1", "bin_id2"):
                getattr(s, col)[blk] = -1
            m = float(s.m[i])
            s.binind[i], s.bin_id1[i], s.bin_id2[i] = 10**6, 10**9, 10**9 + 1
            s.bin_m1[i] = s.bin_m2[i] = 0.5 * m
            s.bin_m1_msun[i] = s.bin_m2_msun[i] = 0.5 * float(s.m_msun[i])
            s.bin_a[i], s.bin_e[i] = 0.05, 0.0
            sizes.append(m * m / 4 / (2 * 0.05))

    steps = 3
    sim = Simulation.create(_cfg(0, binaries=0.1, steps=steps), world)
    cold(sim)
    e_start = sim.diagnostics(record=False)["E_tot"]
    for _ in range(steps):
        sim.step()
    par = sim.gather_stars()
    debts, pay = first[0] if first else (np.zeros(0), np.zeros(0))
    par_diag = {k: np.asarray(v) for k, v in sim.history.items()}
    e_b = world.allreduce(sum(sizes))
    def emulate():
        first.clear()
        emu = Simulation.create(_cfg(p if p > 1 else 0, binaries=0.1, steps=steps),
                                SerialComm())
        cold(emu)
        emu.diagnostics(record=False)
        for _ in range(steps):
            emu.step()
        ser = emu.gather_stars()
        ser_diag = {k: np.asarray(v) for k, v in emu.history.items()}
        same = {k: bool(np.array_equal(par[k], ser[k])) for k in par}
        rel = sorted(k for k in par_diag if par_diag[k].tobytes() != ser_diag[k].tobytes())
        # what the binary's block owed in the first step, and what the blocks after it paid
        owed = float(debts[row // 20])
        paid_beyond = float(np.sum(pay[row // 20 + 1:]))
        return (same, rel, owed, paid_beyond, float(par_diag["E_oops"][1]),
                float(par_diag["E_taken"][1]),
                float(np.max(np.abs(par_diag["E_tot"][1:] / e_start - 1.0))))

    verdict = None
    if world.rank == 0:
        try:
            verdict = emulate()
        except Exception as exc:  # noqa: BLE001 -- it must reach every rank, not hang them
            verdict = repr(exc)
    verdict = world.bcast(verdict, root=0)
    assert not isinstance(verdict, str), verdict
    same, rel, owed, paid_beyond, e_oops, e_taken, de = verdict
    assert all(same.values()), same
    assert not rel, f"diagnostics differ: {rel}"
    # the block owes about all of it (its stars are slowed 1000-fold and meet no one)
    assert owed >= 0.9 * e_b and paid_beyond >= owed
    assert e_taken >= 0.99 * e_b and abs(e_oops) < 1e-3 * e_b
    assert de < 1e-12


def test_take_deficit_carries_event_debts_across_ranks(world):
    """A debt of rank 0's last block larger than 0.8 of the kinetic energy of the next two
    blocks is paid by rank 1's blocks (and further), each giving 0.8 of its kinetic energy by
    one velocity factor; the P-rank result equals the serial emulation's bit for bit and the
    kinetic energy drops by the debt (to rounding)."""
    from cmc.processes.energy import take_deficit
    from parallel.decomposition import rank_bounds

    p = world.size
    bound = int(rank_bounds(2000, p)[1]) if p > 1 else 1000
    last = bound // 20 - 1  # rank 0's last block

    def run(sim, amount):
        take_deficit(sim, np.zeros((sim.stars.n + 19) // 20),
                     np.array([[float(last), amount]]))
        return sim.gather_stars()

    sim = Simulation.create(_cfg(0, binaries=0.1), world)
    # the debt: 2.5 times what the two blocks after the last one of rank 0 hold
    par0 = sim.gather_stars()
    amount = None
    if world.rank == 0:
        v2 = par0["vr"] ** 2 + par0["vt"] ** 2
        k_next = float(np.sum(0.5 * par0["m"][bound:bound + 40] * v2[bound:bound + 40]))
        amount = 2.5 * k_next
    amount = world.bcast(amount, root=0)
    par = run(sim, amount)
    verdict = None
    if world.rank == 0:
        emu = Simulation.create(_cfg(p if p > 1 else 0, binaries=0.1), SerialComm())
        ser = run(emu, amount)
        same = {k: bool(np.array_equal(par[k], ser[k])) for k in ("vr", "vt", "r", "id")}

        def kin(t, a, b):
            return float(np.sum(0.5 * t["m"][a:b] * (t["vr"][a:b] ** 2 + t["vt"][a:b] ** 2)))

        dk = kin(par0, 0, None) - kin(par, 0, None)
        untouched = kin(par0, 0, bound) == kin(par, 0, bound)
        next_two = kin(par, bound, bound + 40) / kin(par0, bound, bound + 40)
        verdict = (same, dk / amount, untouched, next_two, emu.state.e_taken)
    same, ratio, untouched, next_two, e_taken = world.bcast(verdict, root=0)
    assert all(same.values()), same
    assert ratio == pytest.approx(1.0, rel=1e-9)
    assert untouched  # nothing is taken inside or before the block that owes
    assert next_two == pytest.approx(0.2, rel=1e-9)  # each gave 80 %
    assert e_taken == amount


def test_escaper_table_equals_serial_emulation(world):
    """escapers.h5 of a P-rank run (tidal stripping, binaries, unbound escapers) equals the
    serial emulation's row for row and bit for bit."""
    tmp = shared_tmpdir(world)
    cfg = _cfg(0, n=1500, steps=30, binaries=0.2, extra=TIDAL)
    if world.rank == 0:
        (tmp / "par").mkdir()
        (tmp / "ser").mkdir()
    world.Barrier()
    Simulation.create(cfg, world, tmp / "par").run()
    verdict = None
    if world.rank == 0:
        p = world.size
        Simulation.create(_cfg(p if p > 1 else 0, n=1500, steps=30, binaries=0.2,
                               extra=TIDAL), SerialComm(), tmp / "ser").run()
        from cmc.io import read_diagnostics

        a, _ = read_diagnostics(tmp / "par" / "escapers.h5")
        b, _ = read_diagnostics(tmp / "ser" / "escapers.h5")
        same = sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
        verdict = (same, int(a["step"].size), int(np.count_nonzero(a["kind"] == 2)))
    same, rows, stripped = world.bcast(verdict, root=0)
    assert same
    assert stripped >= 50 and rows >= stripped


def test_restart_at_p_ranks_is_bit_for_bit(world):
    from cmc.cli import main

    tmp = shared_tmpdir(world)
    ini = tmp / "m.ini"
    if world.rank == 0:
        ini.write_text("[initial]\nn = 1500\nseed = 8\n[run]\nmax_steps = 24\n"
                       "n_core_stop = 0\n[output]\ncheckpoint_every = 5\n")
    world.Barrier()
    rc = [main(["run", str(ini), "-o", str(tmp / "a")]),
          main(["run", str(ini), "-o", str(tmp / "b"), "--set", "run.max_steps=11"]),
          main(["restart", str(tmp / "b"), "--set", "run.max_steps=24"])]
    verdict = None
    if world.rank == 0:
        with h5py.File(tmp / "a/checkpoint.h5") as fa, h5py.File(tmp / "b/checkpoint.h5") as fb:
            same = all(np.array_equal(fa["stars"][k][...], fb["stars"][k][...])
                       for k in fa["stars"])
            same_rng = np.array_equal(fa["streams/states"][...], fb["streams/states"][...])
            steps = int(fb["state"].attrs["step"])
        verdict = (same, same_rng, steps)
    rcs = world.allgather(rc)
    same, same_rng, steps = world.bcast(verdict, root=0)
    assert all(r == [0, 0, 0] for r in rcs), rcs
    assert same and same_rng and steps == 24


def _sweep_files(world, tmp: Path, values: str, rpm: int) -> Path:
    """Write base.ini and a list-mode sweep.ini (rank 0) into the shared ``tmp``."""
    sweep = tmp / "sweep.ini"
    if world.rank == 0:
        (tmp / "base.ini").write_text("[initial]\nn = 300\n[run]\nmax_steps = 3\n"
                                      "n_core_stop = 0\n")
        sweep.write_text(f"[sweep]\nbase = base.ini\nranks_per_model = {rpm}\nmode = list\n"
                         f"[values]\n{values}")
    world.Barrier()
    return sweep


def _sweep_rows(world, out: Path) -> list[dict]:
    """The rows of OUT/summary.json, read on rank 0 and shared with every rank."""
    import json

    rows = json.loads((out / "summary.json").read_text()) if world.rank == 0 else None
    return world.bcast(rows, root=0)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rpm", [1, 2])
def test_sweep_reports_broken_model(world, rpm):
    """Failing models are recorded and the other models (and groups) go on: nobody hangs."""
    from cmc.sweep import run_sweep

    tmp = shared_tmpdir(world)
    # model 2 fails in its run (an energy error), model 4 asks for initial conditions that
    # are not there (fails in the set-up): they must fail alone.  (A value that the
    # configuration refuses refuses the whole sweep: the next test.)
    sweep = _sweep_files(world, tmp, "initial.seed = 1, 2, 3, 4, 5\n"
                         "initial.model = plummer, king, king, plummer, file\n"
                         "run.energy_error_max = 0.05, 0.05, 1e-30, 0.05, 0.05\n"
                         f"initial.file = x, x, x, x, {tmp / 'missing.h5'}\n", rpm)
    code = run_sweep(sweep, world, tmp / "out")
    codes = world.allgather(code)
    rows = _sweep_rows(world, tmp / "out")
    assert codes == [3] * world.size
    assert [r["status"] for r in rows] == ["finished", "finished", "failed", "finished",
                                           "failed"], rows
    assert rows[2]["stop_reason"] == "energy_error"
    assert "missing.h5" in rows[4]["stop_reason"]
    assert all(r["steps"] == 3 for r in rows if r["status"] == "finished")


@pytest.mark.timeout(120)
def test_sweep_with_a_bad_value_is_refused_on_every_rank(world):
    """A value that any model refuses (initial.n = -5) refuses the whole sweep on every rank
    together, before any model runs or any folder is made (issue 46, item 8)."""
    from cmc.config import ConfigError
    from cmc.sweep import run_sweep

    tmp = shared_tmpdir(world)
    sweep = _sweep_files(world, tmp, "initial.n = 400, -5\n", 1)
    with pytest.raises(ConfigError, match=r"model 1 \(initial.n = -5\)"):
        run_sweep(sweep, world, tmp / "out")
    world.Barrier()
    assert not (tmp / "out").exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rpm", [1, 2])
def test_sweep_dynamic_dispatch_runs_every_model_once(world, rpm):
    """More models than groups: every model runs exactly once, on a group leader, spread over
    the groups; ranks beyond the last full group stay idle; a rerun skips them all."""
    import re

    from cmc.sweep import run_sweep

    tmp = shared_tmpdir(world)
    n_groups = max(1, world.size // rpm)
    n_models = 2 * n_groups + 1
    seeds = ", ".join(str(s) for s in range(1, n_models + 1))
    sweep = _sweep_files(world, tmp, f"initial.seed = {seeds}\n", rpm)
    out = tmp / "out"
    code = run_sweep(sweep, world, out)
    rows = _sweep_rows(world, out)
    ran = None
    if world.rank == 0:
        # the leader of the group that ran a model logs to its cmc.log, with its world rank
        logs = [(out / r["name"] / "cmc.log").read_text() for r in rows]
        ran = [(text.count("stopped after step"),
                sorted({int(k) for k in re.findall(r"\[rank (\d+)\]", text)}))
               for text in logs]
    ran = world.bcast(ran, root=0)
    codes = world.allgather(code)
    code2 = run_sweep(sweep, world, out)
    codes2 = world.allgather(code2)
    rows2 = _sweep_rows(world, out)
    assert codes == [0] * world.size and codes2 == [0] * world.size
    assert len(rows) == n_models
    assert all(r["status"] == "finished" and r["steps"] == 3 and not r["skipped"]
               and not r["resumed"] for r in rows), rows
    leaders = {g * rpm for g in range(n_groups)}
    assert all(n_stops == 1 and len(ranks) == 1 and ranks[0] in leaders
               for n_stops, ranks in ran), ran
    assert len({ranks[0] for _, ranks in ran}) >= min(2, n_groups), ran
    assert all(r["status"] == "finished" and r["skipped"] for r in rows2), rows2
    assert [r["steps"] for r in rows2] == [r["steps"] for r in rows]


def test_old_potential_lookup_equals_serial_emulation(world, monkeypatch):
    """With many ranks the energy correction looks up the new potential at its own stars' old
    radii instead of merging all N (cmc.processes.energy.OLD_POTENTIAL_LOOKUP_MIN_RANKS, lowered
    so that 2 and 3 ranks take that path): the run still equals its serial emulation."""
    import cmc.processes.energy as cs

    monkeypatch.setattr(cs, "OLD_POTENTIAL_LOOKUP_MIN_RANKS", 2)
    par, _, ser, _ = _run_and_emulation(world, 30, binaries=0.1)
    verdict = None
    if world.rank == 0:
        verdict = {k: bool(np.array_equal(par[k], ser[k])) for k in par}
    same = world.bcast(verdict, root=0)
    assert all(same.values()), same


@pytest.mark.timeout(300)
def test_checkpoint_with_uneven_substream_tables(world):
    """Ranks whose blocks drew from different numbers of sub-streams (encounters make them
    grow their tables unevenly: 250 against 251 sub-streams on two ranks of
    examples/plummer_binaries.ini by step 200, where the checkpoint then failed and the run
    was lost) still write one checkpoint, every rank growing its table to the longest first;
    a run restarted from it continues as the run that wrote it, bit for bit."""
    tmp = shared_tmpdir(world)
    cfg = _cfg(0, n=1200, steps=20, binaries=0.2)
    if world.rank == 0:
        (tmp / "a").mkdir()
    world.Barrier()
    a = Simulation.create(cfg, world, tmp / "a")
    for _ in range(2):
        a.step()
    a.streams.ensure_substreams(a.streams.n_substreams + 1 + world.rank)  # uneven
    longest = max(world.allgather(a.streams.n_substreams))
    a.write_checkpoint()
    b = Simulation.from_checkpoint(tmp / "a" / "checkpoint.h5", world)
    for _ in range(3):
        a.step()
        b.step()
    mine = (np.array_equal(a.r_all, b.r_all) and np.array_equal(a.m_all, b.m_all)
            and all(np.array_equal(x, y) for x, y in zip(a.stars.as_dict().values(),
                                                         b.stars.as_dict().values(),
                                                         strict=True))
            and b.streams.n_substreams == longest)
    verdict = world.allgather(mine)
    assert all(verdict), verdict


@pytest.mark.timeout(300)
@pytest.mark.parametrize("what", ["checkpoint", "snapshot", "diagnostics"])
def test_write_failure_on_rank_0_ends_every_rank(world, what, monkeypatch):
    """Rank 0 writes the outputs; when its write fails (here a full disk), every rank raises,
    marked collective with the same exit code, instead of rank 0 alone while the others go on
    into the next step's collectives and wait there for ever (a library caller hung; the
    command line had to abort the job)."""
    import errno

    from cmc import io as cio
    from cmc.errors import EXIT_IO

    tmp = shared_tmpdir(world)
    if world.rank == 0:
        (tmp / "w").mkdir()
    world.Barrier()
    sim = Simulation.create(_cfg(0, n=600, steps=5), world, tmp / "w")
    sim.step()

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    if world.rank == 0:
        if what == "diagnostics":
            monkeypatch.setattr(sim.escapers, "flush", disk_full)
        else:
            monkeypatch.setattr(cio, f"write_{what}", disk_full)
    outcome = None
    try:
        getattr(sim, f"write_{what}")()
    except Exception as exc:  # every rank must get here
        code = EXIT_IO if isinstance(exc, OSError) else getattr(exc, "exit_code", None)
        outcome = (bool(getattr(exc, "collective", False)), code, "No space left" in str(exc))
    outcomes = world.allgather(outcome)
    # (alone, a rank needs no mark: nobody waits for it)
    assert all(o == (world.size > 1, EXIT_IO, True) for o in outcomes), outcomes
    # and the ranks are still in step: a collective after it completes
    assert world.allreduce(1) == world.size
