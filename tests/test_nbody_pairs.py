"""Close pairs of the direct N-body integrator (issue 50): physics.nbody_pairs, its use in
physics.nbody and in ``cmc nbody``.

Measured when written (one core of a loaded 2-core machine):

* Isolated Kepler binary, a = 1e-3, M = 1, 1000.3 orbits from apocentre, dt_max = 1/8 and the
  default pair_dt (2^-15): the members' relative position equals the analytic orbit to 2.0e-11
  a (e = 0.5) and 1.9e-8 a (e = 0.9: the phase error of the 18 Hermite steps before the pair
  formed), |dE/E| 2e-15 and 3.4e-12, in 20 and 18 particle steps; without pairs 260652 and
  474088 steps, |dE/E| 3.1e-3 and 9.1e-3 (eta = 0.02).
* Binary a = 1e-3 (masses 0.5) and a perturber (0.5) at pericentre 0.02, order 6: resolved at
  d = 0.0368 (gamma = 1e-9 / d^3 = 2 pair_gamma), re-formed at d = 0.047; |dE/E| at most
  2.1e-5 (1.75e-5 of it just before the resolution: the neglected tide, ~ gamma E_bin), 3274
  particle steps; without pairs 1.5e-3 in 292533 steps.  Order 4: 1.8e-4 (the Hermite steps of
  the resolved binary) in 5802 steps; without pairs 2.0e-2 in 526967.
* Plummer N = 256 (seed 1) with stars 0 and 1 made a circular binary of a = 1e-3 (period
  2.2e-3), 2 time units, order 4: max |dE/E| 2.1e-7 in 65004 particle steps (one pair,
  unperturbed throughout); without pairs 1.7e-5 in 197267; pair_gamma = 1e-6: 2.4e-6 in 83135
  (resolved once).  Order 6: 2.4e-7 in 41181; without pairs 7.4e-5 in 136786.  With the
  perturbers' tide on the pair (physics.nbody_perturbed; the same at pair_gamma 1e-5 and
  1e-3): order 4 2.2e-7 in 65052 steps, order 6 2.7e-8 in 41208.
* The same model with a wider binary, a = 3e-3, order 6, 4 time units: pair_gamma 1e-3 keeps
  it a pair throughout (20969 tidal kicks): max |dE/E| 3.6e-8, |dP| 1.5e-8, in 86994 steps;
  1e-5 resolves it: 1.3e-6 in 117206; without pairs 1.4e-6 in 120221.
"""

from __future__ import annotations

import math

import h5py
import numpy as np
import pytest
from test_nbody import _plummer_3d  # (pytest puts tests/ on the path)

from physics.nbody import NBodyState, energy, evolve, predicted
from physics.nbody_kernels import acc_jerk_serial, correct_block, predict_all


def _plant(m, pos, vel, a, e=0.0, i=0, j=1):
    """Make stars i and j a binary of semi-major axis ``a`` and eccentricity ``e`` (at
    apocentre, along x) at i's former position and velocity; returns new arrays."""
    pos, vel = pos.copy(), vel.copy()
    mt = m[i] + m[j]
    ra = a * (1.0 + e)
    va = math.sqrt(mt / a * (1.0 - e) / (1.0 + e))
    r, w = np.array([ra, 0.0, 0.0]), np.array([0.0, va, 0.0])
    x, v = pos[i].copy(), vel[i].copy()
    pos[i], vel[i] = x - m[j] / mt * r, v - m[j] / mt * w
    pos[j], vel[j] = x + m[i] / mt * r, v + m[i] / mt * w
    return pos, vel


def _kepler_analytic(a, e, mt, t):
    """Relative position at ``t`` of the orbit that starts at apocentre ``(a(1+e), 0, 0)``
    moving along +y (mean anomaly pi at t = 0; the orbit with pericentre on +x, turned by
    pi)."""
    n = math.sqrt(mt / a ** 3)
    mean = math.fmod(math.pi + n * t, 2.0 * math.pi)
    ecc = mean if e < 0.8 else math.pi
    for _ in range(100):
        ecc -= (ecc - e * math.sin(ecc) - mean) / (1.0 - e * math.cos(ecc))
    return -np.array([a * (math.cos(ecc) - e), a * math.sqrt(1.0 - e * e) * math.sin(ecc),
                      0.0])


@pytest.mark.parametrize("e, tol", [(0.5, 1e-9), (0.9, 1e-7)])
def test_isolated_kepler_pair_is_exact_and_cheap(e, tol):
    """After 1000.3 orbits the members are where the analytic orbit puts them, to ``tol``
    of a: the error is the Hermite steps' phase error before the pair formed (the 0.9 orbit
    needs more of them), the Kepler propagation adds rounding."""
    a, m = 1e-3, np.array([0.4, 0.6])
    pos, vel = _plant(m, np.zeros((2, 3)), np.zeros((2, 3)), a, e)
    period = 2.0 * math.pi * math.sqrt(a ** 3)
    t_end = 1000.0 * period + 0.3 * period  # not at apocentre
    steps = {}
    for gamma in (1e-5, 0.0):
        s = NBodyState.create(m, pos, vel, dt_max=0.125, pair_gamma=gamma)
        e0 = sum(energy(s))
        evolve(s, t_end)
        x, _ = predicted(s)
        steps[gamma] = s.n_steps
        if gamma:
            assert s.n_pair_formed == 1 and s.n_pairs_now == 1 and s.n == 1
            ref = _kepler_analytic(a, e, 1.0, t_end)
            np.testing.assert_allclose(x[1] - x[0], ref, rtol=0, atol=tol * a)
            np.testing.assert_allclose(m @ x, 0.0, atol=1e-15)  # the centre of mass at rest
            # the Hermite steps before the pair formed: measured 3.4e-12 at e = 0.9
            assert abs(sum(energy(s)) / e0 - 1.0) < 1e-10
    assert steps[1e-5] * 50 < steps[0.0], steps


def _perturber(vp=2.0, b=0.123):
    m = np.array([0.5, 0.5, 0.5])
    a = 1e-3
    vb = math.sqrt(1.0 / a)
    pos = np.array([[-a / 2, 0, 0], [a / 2, 0, 0], [-1.0, b, 0]])
    vel = np.array([[0, -vb / 2, 0], [0, vb / 2, 0], [vp, 0, 0]])
    return m, pos - m @ pos / m.sum(), vel - m @ vel / m.sum()


def test_perturber_resolves_the_pair_and_energy_is_conserved():
    """A binary (a = 1e-3, masses 0.5) and a perturber (0.5) from distance 1 at speed 2 with
    impact parameter 0.123 (pericentre 0.02 about the binary): the pair is resolved before
    the closest approach (gamma ~ 1e-9 / d^3 passes 2e-5 at d = 0.037), re-formed after it;
    the 3-body energy is conserved to 1e-4 (order 6; dominated by the Hermite steps of the
    resolved binary, ~100 orbits), and the perturber's path about the binary's centre of mass
    is the point-mass hyperbola (the tides of a pair 20 times smaller than b bend it little)."""
    from physics.fewbody_kepler import kepler_propagate_hyperbolic

    m, pos, vel = _perturber()
    s = NBodyState.create(m, pos, vel, dt_max=0.125, order=6, pair_gamma=1e-5)
    e0 = sum(energy(s))
    xc0, vc0 = (m[:2] @ pos[:2]) / 1.0, (m[:2] @ vel[:2]) / 1.0
    r0, w0 = pos[2] - xc0, vel[2] - vc0
    worst, rows = 0.0, []
    for t in np.arange(1, 8193) * 2.0 ** -13:  # to t = 1 (the perturber moves <= 0.002)
        evolve(s, t)
        x, _ = predicted(s)
        worst = max(worst, abs(sum(energy(s)) / e0 - 1.0))
        rows.append((float(np.linalg.norm(x[2] - 0.5 * (x[0] + x[1]))), s.n_pairs_now,
                     s.n_pair_resolved))
    d, now, res = (np.array(c) for c in zip(*rows))
    k = int(np.argmin(d))
    assert d[k] < 0.025
    assert now[k] == 0 and res[k] == 1  # resolved at the closest approach
    first = int(np.argmax(res > 0))
    assert 0.03 < d[first] < 0.05 and first < k  # resolved on the way in
    assert now[-1] == 1 and s.n_pair_formed == 2  # re-formed on the way out
    assert worst < 1e-4, worst
    r1, w1 = np.empty(3), np.empty(3)
    kepler_propagate_hyperbolic(r0, w0, 1.5, 1.0, r1, w1)
    # measured 9.5e-4 (9.6e-4 without pairs: the tides, not the pair treatment)
    np.testing.assert_allclose(x[2] - 0.5 * (x[0] + x[1]), r1, rtol=0, atol=2e-3)


def test_step_limit_sees_an_approaching_star():
    """The centre of mass's next step is cut so that a star on a straight line cannot pass
    within the resolving distance (gamma = 2 pair_gamma: d = 0.0368 here) during it: a
    perturber at x = 0.5 moving at -20 would be there after 0.023, so the step 1/8 becomes
    2^-6 (2^-5 would take it past); the same perturber receding leaves the step alone.  The
    perturber's own step (2^-10 here) is set to 1/8 for this, as the step is also at most
    that of each perturber (physics.nbody_perturbed), checked last."""
    import physics.nbody_pairs as pairs

    m, pos, vel = _perturber()
    pos[:2] -= 0.5 * (pos[0] + pos[1])  # the binary's centre of mass at rest at the origin
    vel[:2] -= 0.5 * (vel[0] + vel[1])
    pos[2], vel[2] = (3.0, 0.01, 0.0), (-20.0, 0.0, 0.0)
    s = evolve(NBodyState.create(m, pos, vel, dt_max=0.125, pair_gamma=1e-5), 0.125)
    assert s.n_pairs_now == 1 and np.all(s.t == 0.125)
    row = int(np.searchsorted(s.ids, s.pair_i[0]))
    assert 0.45 < s.pos[1, 0] - s.pos[row, 0] < 0.55
    for sign, want in ((1.0, 2.0 ** -6), (-1.0, 0.125)):
        vel = s.vel.copy()
        vel[1] = vel[row] + sign * (vel[1] - vel[row])
        s.dt[row], s.dt[1] = 0.125, 0.125
        pairs._limit_steps(s, 0.125, s.pos.copy(), vel)
        assert s.dt[row] == want, (sign, s.dt[row])
    # the approaching perturber on a short step: the centre of mass's step is no longer
    vel[1] = vel[row] - (vel[1] - vel[row])
    s.dt[row], s.dt[1] = 0.125, 2.0 ** -10
    pairs._limit_steps(s, 0.125, s.pos.copy(), vel)
    assert s.dt[row] == 2.0 ** -10


@pytest.fixture(scope="module")
def planted():
    """Plummer N = 256 (seed 1) with stars 0 and 1 made a circular binary of a = 1e-3."""
    m, pos, vel = _plummer_3d(256, 1)
    pos, vel = _plant(m, pos, vel, 1e-3)
    return m, pos, vel


def test_plummer_with_a_hard_binary(planted):
    """2 time units: with pairs the energy is conserved to 2e-6 in less than half the steps
    of the run without (where the binary's Hermite steps dominate both cost and error)."""
    m, pos, vel = planted
    out = {}
    for gamma in (1e-5, 0.0):
        s = NBodyState.create(m, pos, vel, dt_max=0.125, pair_gamma=gamma)
        e0 = sum(energy(s))
        worst = 0.0
        for t in np.arange(1, 17) * 0.125:
            evolve(s, t)
            worst = max(worst, abs(sum(energy(s)) / e0 - 1.0))
        out[gamma] = (s.n_steps, worst, s)
    steps, worst, s = out[1e-5]
    assert s.n_pair_formed >= 1 and s.n_pairs_now == 1
    assert sorted((int(s.pair_i[0]), int(s.pair_j[0]))) == [0, 1]
    assert s.n == 255 and s.n_stars == 256
    assert worst < 2e-6, worst
    assert steps < 0.5 * out[0.0][0], (steps, out[0.0][0])


def test_plummer_with_a_perturbed_binary():
    """A binary of a = 3e-3 in the Plummer N = 256 model stays a pair under the tide at
    pair_gamma = 1e-3, conserving energy better than the Hermite integration of its members
    (pairs off) in fewer steps; at 1e-5 it is resolved."""
    from physics.nbody import momentum

    m, pos, vel = _plummer_3d(256, 1)
    pos, vel = _plant(m, pos, vel, 3e-3)
    out = {}
    for gamma in (1e-3, 1e-5, 0.0):
        s = NBodyState.create(m, pos, vel, dt_max=0.125, order=6, pair_gamma=gamma)
        e0, p0 = sum(energy(s)), momentum(s)
        worst = 0.0
        for t in np.arange(1, 33) * 0.125:
            evolve(s, t)
            worst = max(worst, abs(sum(energy(s)) / e0 - 1.0))
        out[gamma] = (s, worst, float(np.linalg.norm(momentum(s) - p0)))
    s, worst, dp = out[1e-3]
    assert s.n_pair_formed == 1 and s.n_pair_resolved == 0 and s.n_pair_kicks > 1000
    assert worst < 2e-7 and dp < 1e-7, (worst, dp)
    assert s.n_steps < 0.8 * out[0.0][0].n_steps
    assert out[0.0][1] > 5 * worst  # the members' Hermite steps do worse
    assert out[1e-5][0].n_pair_resolved >= 1


def _old_evolve(m, pos, vel, t_end):
    """The integrator before close pairs (4th order), from its kernels."""
    s = NBodyState.create(m, pos, vel, dt_max=0.125, pair_gamma=0.0)
    while True:
        tnext = s.t + s.dt
        tnow = float(tnext.min())
        if tnow > t_end:
            return s
        active = np.flatnonzero(tnext == tnow)
        predict_all(s.pos, s.vel, s.acc, s.jerk, s.t, tnow, s._ppos, s._pvel)
        anew, jnew, _ = acc_jerk_serial(s._ppos, s._pvel, s.mass, active, s.eps2)
        s.n_steps += active.size
        assert not correct_block(active, tnow, s._ppos, s._pvel, anew, jnew, s.pos, s.vel,
                                 s.acc, s.jerk, s.snap, s.crackle, s.t, s.dt, s.eta,
                                 s.dt_max, s.dt_min)


def test_pair_gamma_zero_is_the_old_integrator(planted):
    m, pos, vel = planted
    ref = _old_evolve(m, pos, vel, 0.5)
    off = evolve(NBodyState.create(m, pos, vel, dt_max=0.125, pair_gamma=0.0), 0.5)
    on = evolve(NBodyState.create(m, pos, vel, dt_max=0.125, pair_gamma=1e-5), 0.5)
    assert off.n_pair_formed == 0 and on.n_pair_formed == 1
    for name in ("pos", "vel", "acc", "jerk", "t", "dt"):
        np.testing.assert_array_equal(getattr(off, name), getattr(ref, name), err_msg=name)
    assert off.n_steps == ref.n_steps
    assert not np.array_equal(predicted(on)[0], predicted(off)[0])


def test_bits_do_not_depend_on_threads(planted):
    import numba

    m, pos, vel = planted
    before = numba.get_num_threads()
    runs = []
    try:
        for threads in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(threads)
            s = NBodyState.create(m, pos, vel, dt_max=0.125, order=6, pair_gamma=1e-5)
            runs.append(predicted(evolve(s, 0.25)))
    finally:
        numba.set_num_threads(before)
    for a, b in zip(runs[0], runs[-1]):
        np.testing.assert_array_equal(a, b)


def test_bad_settings_are_refused():
    m, pos, vel = _perturber()
    for kw in ({"pair_gamma": -1.0}, {"pair_gamma": math.nan}, {"pair_dt": 3e-5},
               {"pair_dt": 0.25}, {"pair_dt": 2.0 ** -41}):
        with pytest.raises(ValueError, match="pair_"):
            NBodyState.create(m, pos, vel, dt_max=0.125, **kw)


# -------------------------------------------------------------------- cmc nbody
INI = "[initial]\nmodel = plummer\nn = 64\nseed = 5\nmass_function = kroupa\n"


def _planted_run(tmp, name, t_end, order):
    """An NBodyRun of INI whose stars 0 and 1 are made a binary of a = 1e-3."""
    from cmc.config import load_config
    from cmc.nbody import NBodyRun

    ini = tmp / "p.ini"
    ini.write_text(INI)
    out = tmp / name
    out.mkdir()
    run = NBodyRun(load_config(str(ini)), out, t_end=t_end, dt_out=0.125, order=order)
    nb = run.nb
    pos, vel = _plant(nb.star_mass, *predicted(nb), 1e-3)
    run.nb = NBodyState.create(nb.star_mass, pos, vel, dt_max=0.125, order=order,
                               pair_gamma=nb.pair_gamma, pair_dt=nb.pair_dt)
    return run, out


@pytest.mark.parametrize("order", [4, 6])
def test_restart_with_a_pair_is_the_uninterrupted_run(tmp_path, order):
    from cmc.cli import main
    from cmc.io import read_diagnostics
    from cmc.nbody_checkpoint import PAIR_ARRAYS, STATE_ARRAYS

    whole, wdir = _planted_run(tmp_path, "whole", 1.0, order)
    assert whole.run() == "max_time"
    split, sdir = _planted_run(tmp_path, "split", 0.5, order)
    assert split.run() == "max_time"
    with h5py.File(sdir / "checkpoint.h5", "r") as fh:
        assert fh["nbody"]["pair_i"].size == 1 and fh["nbody"].attrs["time"] == 0.5
    assert main(["nbody", "--restart", str(sdir), "--t-end", "1"]) == 0
    da, aa = read_diagnostics(wdir / "diagnostics.h5")
    db, ab = read_diagnostics(sdir / "diagnostics.h5")
    assert sorted(da) == sorted(db) and ab["stop_reason"] == "max_time"
    assert da["nb_pairs"][-1] == 1 and da["nb_pairs_formed"][-1] >= 1
    assert aa["pair_gamma"] == 1e-4 and aa["pair_dt"] == 2.0 ** -15
    assert np.max(np.abs(da["dE_rel"])) < 1e-5
    for name in da:
        if name != "wall_s":
            np.testing.assert_array_equal(da[name], db[name], err_msg=name)
    with h5py.File(wdir / "checkpoint.h5", "r") as fa, \
            h5py.File(sdir / "checkpoint.h5", "r") as fb:
        for name in STATE_ARRAYS + PAIR_ARRAYS:
            np.testing.assert_array_equal(fa["nbody"][name][...], fb["nbody"][name][...],
                                          err_msg=name)
        for name in ("time", "n_steps", "n_blocks", "n_pairs", "n_pair_formed"):
            assert fa["nbody"].attrs[name] == fb["nbody"].attrs[name], name


def test_checkpoint_without_pair_data_restarts(tmp_path):
    """A checkpoint (and diagnostics) of the format before close pairs restarts as a run
    with no pairs: the uninterrupted run."""
    from cmc import io as cio
    from cmc.cli import main
    from cmc.io import read_diagnostics
    from cmc.nbody_checkpoint import PAIR_ARRAYS, PAIR_SCALARS

    ini = tmp_path / "p.ini"
    ini.write_text(INI)
    args = ["nbody", str(ini), "--dt-out", "0.125", "-o"]
    assert main(args + [str(tmp_path / "whole"), "--t-end", "1"]) == 0
    out = tmp_path / "old"
    assert main(args + [str(out), "--t-end", "0.5"]) == 0
    with h5py.File(out / "checkpoint.h5", "a") as fh:
        for name in PAIR_ARRAYS:
            del fh["nbody"][name]
        for name in PAIR_SCALARS:
            del fh["nbody"].attrs[name]
        fh.attrs["sha256"] = cio.content_digest(fh)
    binary_columns = ("N_binaries", "binary_fraction", "binary_fraction_core", "E_binding")
    with h5py.File(out / "diagnostics.h5", "a") as fh:
        # (and of the format before the binaries' columns and escapers.h5)
        for name in ("nb_pairs_formed", "nb_pairs_resolved", "nb_pairs", "nb_pair_kicks",
                     *binary_columns):
            del fh[name]
    (out / "escapers.h5").unlink()
    assert main(["nbody", "--restart", str(out), "--t-end", "1"]) == 0
    da, _ = read_diagnostics(tmp_path / "whole" / "diagnostics.h5")
    db, ab = read_diagnostics(out / "diagnostics.h5")
    assert ab["pair_gamma"] == 1e-4  # (the default now)
    assert ab["eta_close"] == 0.0  # (eta throughout, as the old run had it)
    for name in da:
        if name == "wall_s":
            continue
        if name in binary_columns:  # not known for the rows before the restart
            assert np.all(np.isnan(db[name][:5]))
            np.testing.assert_array_equal(da[name][5:], db[name][5:], err_msg=name)
        else:
            np.testing.assert_array_equal(da[name], db[name], err_msg=name)
    assert (out / "escapers.h5").exists()


@pytest.mark.parametrize("opt, value", [("--pair-gamma", "-1"), ("--pair-gamma", "nan"),
                                        ("--pair-dt", "0.1"), ("--pair-dt", "0.25"),
                                        ("--pair-dt", "0"), ("--eta-close", "-0.1"),
                                        ("--eta-close", "0.5"), ("--eta-close", "nan")])
def test_bad_pair_options_exit_2(tmp_path, capsys, opt, value):
    from cmc.cli import main
    from cmc.config import load_config
    from cmc.errors import InputError
    from cmc.nbody import NBodyRun

    ini = tmp_path / "p.ini"
    ini.write_text(INI)
    capsys.readouterr()
    assert main(["nbody", str(ini), "-o", str(tmp_path / "o"), "--t-end", "0.25", opt,
                 value]) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if "error" in x]
    assert len(err) == 1 and opt in err[0], err
    key = opt[2:].replace("-", "_")
    with pytest.raises(InputError, match=opt):
        NBodyRun(load_config(str(ini)), None, t_end=0.25, **{key: float(value)})


def test_restart_refuses_other_pair_dt_and_takes_a_new_pair_gamma(tmp_path, capsys):
    """``--pair-dt`` defines the run; ``--pair-gamma`` and ``--eta-close`` (numerical
    settings) may change on restart: the run goes on with them, and the files' attributes
    say so."""
    import h5py

    from cmc.cli import main

    ini = tmp_path / "p.ini"
    ini.write_text(INI)
    out = tmp_path / "o"
    assert main(["nbody", str(ini), "-o", str(out), "--t-end", "0.25", "--pair-gamma",
                 "0", "--pair-dt", str(2.0 ** -12)]) == 0
    capsys.readouterr()
    assert main(["nbody", "--restart", str(out), "--t-end", "0.5", "--pair-dt",
                 str(2.0 ** -13)]) == 2
    assert "--pair-dt" in capsys.readouterr().err
    assert main(["nbody", "--restart", str(out), "--t-end", "0.5", "--pair-gamma",
                 "-1"]) == 2
    assert main(["nbody", "--restart", str(out), "--t-end", "0.5", "--eta-close",
                 "0.03"]) == 2  # (above eta, 0.02 at order 4)
    assert main(["nbody", "--restart", str(out), "--t-end", "0.5", "--pair-gamma",
                 "1e-4", "--eta-close", "0.001"]) == 0
    with h5py.File(out / "checkpoint.h5", "r") as f:
        assert f["nbody"].attrs["pair_gamma"] == 1e-4
        assert f["nbody"].attrs["eta_close"] == 0.001
