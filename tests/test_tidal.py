"""Physical units, the tidal field (shrinking tidal radius, iterative stripping, exact energy
of the stripped stars) and the mass-spectrum details that follow CMC."""

from __future__ import annotations

import math

import h5py
import numpy as np
import pytest

from cmc.config import ConfigError, load_config
from cmc.processes.tidal import strip
from cmc.simulation import Simulation
from cmc.units import Units, jacobi_radius_pc
from parallel.comm import SerialComm
from physics.orbits import ORBIT_ESCAPED_TIDAL, ORBIT_OK
from physics.relaxation import bin_relaxation_times, block_moments, window_relaxation_times
from physics.structure import core_properties, core_properties_reference
from physics.tidal import (
    mutual_energy,
    mutual_energy_reference,
    shell_potential,
    shell_potential_reference,
    tidal_mass_loss_timestep,
    tidal_radius,
)

# CMC's constants (include/cmc/cmc.h, cgs): its units_set is the independent check of ours
CMC_G, CMC_MSUN, CMC_PARSEC, CMC_YEAR = 6.67259e-8, 1.989e33, 3.0857e18, 3.155693e7


# ---------------------------------------------------------------- units
def test_units_against_cmc_units_set():
    """t_NB = sqrt(l^3 / (G m)) and t_rel = t_NB N / ln(gamma N) as CMC's units_set computes
    them with its cgs constants (which differ from astropy's in the 4th-5th digit)."""
    u = Units(mass_msun=2.5e5, length_pc=3.0, n0=400000, gamma=0.01)
    m, length = 2.5e5 * CMC_MSUN, 3.0 * CMC_PARSEC
    t_nb_s = math.sqrt(length ** 3 / (CMC_G * m))
    assert u.time_nb_myr == pytest.approx(t_nb_s / CMC_YEAR / 1e6, rel=2e-4)
    t_rel = t_nb_s * 400000 / math.log(0.01 * 400000) / CMC_YEAR / 1e6
    assert u.time_rel_myr == pytest.approx(t_rel, rel=2e-4)
    v = math.sqrt(CMC_G * m / length) / 1e5
    assert u.velocity_kms == pytest.approx(v, rel=2e-4)
    # the three are consistent: one length unit per time unit at the velocity unit
    assert u.length_pc / (u.velocity_kms * u.time_nb_myr) == pytest.approx(1.0227, rel=1e-4)


def test_units_round_trip_exactly():
    u = Units(mass_msun=12345.678, length_pc=2.25, n0=20000, gamma=0.01)
    assert Units.from_attrs(u.attrs()) == u
    t = np.array([0.0, 1e-7, 0.3, 17.0, 1234.5])
    back = np.array([u.myr_to_rel(u.rel_to_myr(x)) for x in t])
    # one multiplication and one division: at most one unit in the last place apart
    assert np.all(np.abs(back - t) <= np.spacing(t))
    with pytest.raises(ValueError, match="unit_length_pc"):
        Units.from_attrs({"unit_mass_msun": 1.0})
    with pytest.raises(ValueError, match="length_pc"):
        Units(1.0, 0.0, 100, 0.1)


def test_jacobi_radius_point_mass_galaxy():
    """r_J = R_gc (M / (3 M_gal))^(1/3) with M_gal = v_c^2 R_gc / G; 1e5 Msun at 8 kpc with
    220 km/s (M_gal = 9.0e10 Msun): 57.4 pc."""
    from cmc.units import constants

    g = constants()["G"]
    m_gal = 220.0 ** 2 * 8000.0 / g
    rj = jacobi_radius_pc(1e5, 8.0, 220.0)
    assert rj == pytest.approx(8000.0 * (1e5 / (3 * m_gal)) ** (1 / 3), rel=1e-12)
    assert rj == pytest.approx(57.45, rel=1e-3)
    assert jacobi_radius_pc(8e5, 8.0, 220.0) == pytest.approx(2 * rj, rel=1e-12)


# ---------------------------------------------------------------- tidal kernels
def test_mutual_energy_and_shell_potential_match_reference():
    rng = np.random.default_rng(4)
    r = np.sort(rng.uniform(0.1, 5.0, 60))
    r[10] = r[11]  # products of an encounter share a slot
    m = rng.uniform(1e-4, 1e-3, 60)
    assert mutual_energy(r, m) == pytest.approx(mutual_energy_reference(r, m), rel=1e-12)
    x = np.concatenate([rng.uniform(0.05, 6.0, 50), r[:5]])
    np.testing.assert_allclose(shell_potential(r, m, x), shell_potential_reference(r, m, x),
                               rtol=1e-12)
    assert np.all(shell_potential(r[:0], m[:0], x) == 0.0)


def test_tidal_radius_and_mass_loss_step():
    assert tidal_radius(3.0, 0.125, 1.0) == pytest.approx(1.5, rel=1e-15)
    assert tidal_radius(3.0, 0.0, 1.0) == 0.0
    # CMC: a step that stripped more than 1 % of M0 makes the next one 0.8 of it
    assert tidal_mass_loss_timestep(1.0, 0.5, 0.02, 1.0, 0.01) == 0.4
    assert tidal_mass_loss_timestep(0.3, 0.5, 0.02, 1.0, 0.01) == 0.3
    assert tidal_mass_loss_timestep(1.0, 0.5, 0.005, 1.0, 0.01) == 1.0
    assert tidal_mass_loss_timestep(1.0, 0.5, 0.5, 1.0, 0.0) == 1.0


# ---------------------------------------------------------------- configuration
def test_tidal_configuration_errors_name_the_key():
    with pytest.raises(ConfigError, match="tidal.r_t0_from"):
        load_config(None, ["tidal.mode=shrinking"])  # Plummer has no truncation radius
    with pytest.raises(ConfigError, match="tidal.r_t0:"):
        load_config(None, ["tidal.mode=fixed", "tidal.r_t0_from=value"])
    with pytest.raises(ConfigError, match="initial.r_vir_pc"):
        load_config(None, ["initial.r_vir_pc=0"])
    with pytest.raises(ConfigError, match="tidal.mode"):
        load_config(None, ["tidal.mode=galactic"])
    load_config(None, ["tidal.mode=shrinking", "tidal.r_t0_from=orbit"])


@pytest.mark.parametrize("value,mode,src,r_t0", [("0", "isolated", "model", 0.0),
                                                 ("-1", "fixed", "model", 0.0),
                                                 ("3.5", "fixed", "value", 3.5)])
def test_legacy_run_r_tidal_is_read(value, mode, src, r_t0):
    """Parameter files and checkpoints written before [tidal] existed keep their meaning."""
    cfg = load_config(text=f"[initial]\nmodel = king\n[run]\nr_tidal = {value}\n")
    assert (cfg.tidal.mode, cfg.tidal.r_t0_from, cfg.tidal.r_t0) == (mode, src, r_t0)
    with pytest.raises(ConfigError, match="run.r_tidal"):
        load_config(text="[run]\nr_tidal = -2\n")


# ---------------------------------------------------------------- the run
def _king(*extra, n=2000):
    return load_config(None, ["initial.model=king", "initial.w0=3", f"initial.n={n}",
                              "initial.seed=3", "run.n_core_stop=0", *extra])


@pytest.fixture(scope="module")
def stripped_run():
    sim = Simulation.create(_king("tidal.mode=shrinking"), SerialComm())
    for _ in range(120):
        sim.step()
    return sim


def test_shrinking_tidal_radius_follows_the_mass(stripped_run):
    sim = stripped_run
    h = {k: np.asarray(v) for k, v in sim.history.items()}
    assert h["M_stripped"][-1] > 0.15  # heavy stripping is what this test is about
    # R_t = R_t0 (M/M0)^(1/3) with M the mass left after the step's stripping
    np.testing.assert_allclose(h["r_tidal"], sim.state.r_t0 * h["M"] ** (1 / 3), rtol=1e-12)
    # every star that stays has its apocentre, hence its radius, inside R_t
    assert sim.r_all[-1] <= sim.state.r_tidal
    # mass: bound + stripped + other escapers = M0
    np.testing.assert_allclose(h["M"] + h["M_stripped"] + h["M_escaped"], 1.0, rtol=1e-12)
    assert h["N_stripped"][-1] == np.sum(h["n_stripped_step"])


def test_energy_budget_closes_with_heavy_stripping(stripped_run):
    """The stripped stars take m (phi + v^2/2) less their mutual energy, and the stars that
    stay do not keep their share of the potential change: the budget closes to round-off
    (the isolated runs' precision is 1e-5 over the same steps)."""
    h = stripped_run.history
    assert max(abs(x) for x in h["dE_rel"]) < 1e-11
    assert h["E_stripped"][-1] != 0.0


def test_fixed_tidal_radius_stays():
    sim = Simulation.create(_king("tidal.mode=fixed", n=1000), SerialComm())
    for _ in range(40):
        sim.step()
    h = sim.history
    assert set(h["r_tidal"]) == {sim.state.r_t0}
    assert h["N_stripped"][-1] > 0
    assert max(abs(x) for x in h["dE_rel"]) < 1e-11


def test_stripping_iterates_to_a_fixed_point():
    """Rows whose apocentres lie just inside R_t0 are stripped only after the mass of the
    first ones has gone: the cut is repeated until no apocentre is beyond R_t."""
    sim = Simulation.create(_king("tidal.mode=shrinking", n=1000), SerialComm())
    n = sim.stars.n
    gidx = np.arange(n, dtype=np.int64)
    rt0 = sim.state.r_t0
    # the 100 outermost below R_t0 by less than one star's mass moves R_t (1/3 of 1/n):
    # each cut brings the next ones in; all others far inside
    r_apo = np.linspace(0.1, 0.5, n) * rt0
    r_apo[-110:-10] = (0.999 - 2e-4 * np.arange(100)[::-1]) * rt0
    status = np.full(n, ORBIT_OK, dtype=np.int8)
    status[-10:] = ORBIT_ESCAPED_TIDAL  # the kernel's cut at R_t0
    args = [sim.r_all[gidx].copy(), sim.stars.vr.copy(), sim.stars.vt.copy(), np.zeros(n),
            np.zeros(n)]
    strip(sim, gidx, r_apo, status, *args)
    stripped = status == ORBIT_ESCAPED_TIDAL
    m_left = float(sim.mcum_all[-1]) - float(np.sum(sim.stars.m[stripped]))
    assert sim.state.r_tidal == pytest.approx(tidal_radius(rt0, m_left, sim.state.m0),
                                              rel=1e-14)
    assert np.count_nonzero(stripped) == 110  # the kernel's 10 and the cascade's 100
    assert np.all(r_apo[~stripped] <= sim.state.r_tidal)
    assert np.all(r_apo[stripped[:-10].nonzero()[0]] > sim.state.r_tidal)


def test_physical_units_in_outputs_and_t_max_myr(tmp_path):
    cfg = _king("tidal.mode=shrinking", "tidal.r_t0_from=orbit", "initial.r_vir_pc=0",
                "initial.mass_function=kroupa", "initial.m_min=0.08", "initial.m_max=1",
                "run.t_max_myr=150", n=1000)
    sim = Simulation.create(cfg, SerialComm(), tmp_path)
    assert sim.run() == "max_time"
    with h5py.File(tmp_path / "diagnostics.h5", "r") as fh:
        u = Units.from_attrs(fh.attrs)
        t_myr = fh["time_myr"][:]
        t = fh["time"][:]
        assert fh["time_myr"].attrs["unit"] == "Myr"
    assert u == sim.units
    np.testing.assert_allclose(t_myr, t * u.time_rel_myr, rtol=1e-15)
    assert t_myr[-1] >= 150.0 > t_myr[-2]
    # tidally filling: the King truncation radius is the Jacobi radius of the cluster
    m_msun = u.mass_msun
    assert sim.state.r_t0 * u.length_pc == pytest.approx(jacobi_radius_pc(m_msun, 8.0, 220.0),
                                                         rel=1e-12)
    snaps = sorted((tmp_path / "snapshots").glob("snap_*.h5"))
    with h5py.File(snaps[-1], "r") as fh:
        assert Units.from_attrs(fh.attrs) == u
        assert fh.attrs["r_tidal"] == sim.state.r_tidal
        assert np.sum(fh["stars/m_msun"][:]) == pytest.approx(
            np.sum(fh["stars/m"][:]) * u.mass_msun, rel=1e-12)


def test_given_cluster_mass_scales_the_stars():
    cfg = load_config(None, ["initial.n=400", "initial.m_total_msun=1e5",
                             "initial.r_vir_pc=2"])
    sim = Simulation.create(cfg, SerialComm())
    assert sim.units.mass_msun == pytest.approx(1e5, rel=1e-12)
    assert np.sum(sim.stars.m_msun) == pytest.approx(1e5, rel=1e-12)


# ---------------------------------------------------------------- mass spectrum as CMC
def test_time_step_dispersion_is_mass_weighted():
    """One 40-star window: half the stars heavy and slow, half light and fast.  CMC's
    sigma^2 = sum m v^2 / sum m, not the plain mean of v^2."""
    n = 40
    r = np.linspace(0.1, 0.2, n)
    m = np.where(np.arange(n) % 2 == 0, 4e-3, 1e-3)
    v = np.where(np.arange(n) % 2 == 0, 0.2, 1.0)
    n0 = 1000.0
    t = bin_relaxation_times(r, m, v, np.zeros(n), n0, 1.0, width=2)
    mp = m * n0
    sigma2 = np.sum(mp * v ** 2) / np.sum(mp)
    w = 4 * math.sqrt(sigma2) / math.sqrt(3 * math.pi)
    nprime = (n - 1) / (4 / 3 * math.pi * (r[-1] ** 3 - r[0] ** 3) * n0)
    expect = math.pi / 32 * w ** 3 / (4 * np.mean(mp ** 2) * nprime)
    assert t[0] == pytest.approx(expect, rel=1e-12)
    mom = block_moments(m, v, np.zeros(n), n0)
    assert window_relaxation_times(r, mom, n0, 2.0, 2)[0] == pytest.approx(expect / 2,
                                                                           rel=1e-12)


def test_core_uses_density_weighted_mean_mass():
    """N_core = 4/3 pi r_c^3 rho_c / (2 m_c), m_c the density-weighted mean mass (CMC's
    central.m_ave): heavy stars in the centre give fewer core stars than the mean mass says."""
    rng = np.random.default_rng(2)
    n = 4000
    r = np.sort(rng.uniform(0, 1, n) ** 2 * 3)
    m = np.full(n, 1.0 / n)
    m[:400] *= 5.0
    m /= m.sum()
    rh = float(r[np.searchsorted(np.cumsum(m), 0.5)])
    got = core_properties(r, m, rh)
    np.testing.assert_allclose(got, core_properties_reference(r, m, rh), rtol=1e-10)
    # equal masses give the plain formula
    meq = np.full(n, 1.0 / n)
    rc, rho, nc = core_properties(r, meq, rh)
    assert nc == pytest.approx(4 / 3 * math.pi * rc ** 3 * rho / 2 / meq[0], rel=1e-12)
    assert got[2] < 4 / 3 * math.pi * got[0] ** 3 * got[1] / 2 / np.mean(m)


def test_coulomb_logarithm_n0_by_default_and_n_of_t_as_option():
    """ln(gamma N0) throughout (CMC): the step does not change when stars leave; with
    run.coulomb_n = current it shrinks with ln(gamma N(t))."""
    runs = {}
    for mode in ("initial", "current"):
        sim = Simulation.create(_king("tidal.mode=shrinking", f"run.coulomb_n={mode}",
                                      n=1000), SerialComm())
        for _ in range(30):
            sim.step()
        runs[mode] = sim.history
    a, b = runs["initial"], runs["current"]
    assert a["dt"][1] == b["dt"][1]  # N = N0 in the first step
    assert a["N"][-1] < 1000 and a["dt"][-1] != b["dt"][-1]


def test_tidal_parameters_are_fixed_on_restart():
    from cmc.errors import InputError
    from cmc.restart import check_restart_overrides

    old = _king("tidal.mode=shrinking")
    new = _king("tidal.mode=shrinking", "tidal.r_gc_kpc=4")
    with pytest.raises(InputError, match="tidal.r_gc_kpc"):
        check_restart_overrides(old, new, ["tidal.r_gc_kpc=4"])


def test_plot_in_physical_units(tmp_path):
    from cmc.plot import plot_run

    sim = Simulation.create(_king("tidal.mode=shrinking", "run.max_steps=15", n=1000),
                            SerialComm(), tmp_path)
    sim.run()
    assert plot_run(tmp_path, physical=True).stat().st_size > 10000


def test_tidal_examples_are_valid():
    """examples/king_tidal.ini and its sweep over R_gc give valid configurations whose
    tidally filling scale follows the orbit (r_vir ~ r_J ~ R_gc^(2/3))."""
    from pathlib import Path

    from cmc.initial import physical_scale
    from cmc.sweep_file import read_sweep

    ex = Path(__file__).resolve().parents[1] / "examples"
    base, _, models = read_sweep(ex / "sweep_tidal.ini")
    assert [m["tidal.r_gc_kpc"] for m in models] == ["4", "8", "16"]
    radii = []
    for m in models:
        cfg = load_config(str(base), [f"{k}={v}" for k, v in m.items()])
        assert (cfg.tidal.mode, cfg.initial.mass_function, cfg.initial.n) == (
            "shrinking", "kroupa", 20000)
        info = {"m_total_msun": 5733.0, "r_tidal": 5.37}
        radii.append(physical_scale(cfg, info, 1.0)[1])
    assert radii[2] / radii[1] == pytest.approx(2 ** (2 / 3), rel=1e-12)
    assert radii[1] == pytest.approx(22.15 / 5.37, rel=1e-3)
