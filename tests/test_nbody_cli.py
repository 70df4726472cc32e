"""``cmc nbody``: the same initial stars as ``cmc run``, the same diagnostics, bad input."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from cmc.cli import main
from cmc.config import load_config
from cmc.io import read_diagnostics, read_snapshot

INI = "[initial]\nmodel = plummer\nn = 200\nseed = 3\nmass_function = kroupa\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A Plummer N = 200 model (Kroupa masses) by ``cmc nbody`` to t = 1 and by ``cmc run``
    for one step."""
    d = tmp_path_factory.mktemp("nbody")
    ini = d / "p200.ini"
    ini.write_text(INI)
    assert main(["nbody", str(ini), "-o", str(d / "nb"), "--t-end", "1",
                 "--dt-out", "0.125"]) == 0
    assert main(["run", str(ini), "-o", str(d / "mc"), "--set", "run.max_steps=1"]) == 0
    return ini, d / "nb", d / "mc"


def test_diagnostics_as_the_monte_carlo_run(runs):
    _, nb, mc = runs
    dn, an = read_diagnostics(nb / "diagnostics.h5")
    dm, am = read_diagnostics(mc / "diagnostics.h5")
    assert an["mode"] == "nbody"
    assert an["stop_reason"] == "max_time"
    assert dn["step"].size == 9
    np.testing.assert_allclose(dn["time_nb"], np.arange(9) * 0.125, rtol=0, atol=1e-15)
    shared = sorted(set(dn) & set(dm))
    for name in ("step", "time", "time_nb", "time_trh", "N", "K", "W", "E_tot", "dE_rel",
                 "r_h", "r_c", "N_core", "lagrange_radii", "M", "N_escaped"):
        assert name in shared, name
    with h5py.File(nb / "diagnostics.h5", "r") as fn, h5py.File(mc / "diagnostics.h5") as fm:
        for name in shared:
            assert fn[name].attrs["unit"] == fm[name].attrs["unit"], name
            assert fn[name].shape[1:] == fm[name].shape[1:], name
        for name in set(dn) - set(dm):  # the mode's own columns carry units too
            assert "unit" in fn[name].attrs, name
    assert np.max(np.abs(dn["dE_rel"])) < 1e-5
    # the row of t = 0: the Monte Carlo initial model's radii, star for star
    for name in ("lagrange_radii", "m_mean_lagrange", "r_h", "r_c", "rho_c", "N_core", "M",
                 "K", "r_max"):
        np.testing.assert_allclose(dn[name][0], dm[name][0], rtol=1e-13, err_msg=name)
    assert dn["N"][0] == dm["N"][0] == 200
    assert an["t_rh0"] == pytest.approx(am["t_rh0"], rel=1e-15)
    np.testing.assert_allclose(dn["time_trh"], dn["time"] / am["t_rh0"], rtol=1e-14)
    np.testing.assert_allclose(dn["time"], dn["time_nb"] * np.log(0.1 * 200) / 200,
                               rtol=1e-14)
    # the N-body potential energy of this realisation is near the spherical model's
    assert dn["W"][0] == pytest.approx(dm["W"][0], rel=0.1)
    assert np.all(dn["N"] + dn["N_escaped"] == 200)
    # the binary columns of the Monte Carlo run (a binary is one object) and the escaper
    # table with its columns (one row per star counted as escaped)
    for name in ("N_binaries", "binary_fraction", "binary_fraction_core", "E_binding"):
        assert name in shared, name
    assert dn["N_binaries"][0] == 0
    np.testing.assert_allclose(dn["binary_fraction"],
                               dn["N_binaries"] / (dn["N"] - dn["N_binaries"]), rtol=1e-14)
    assert np.all((dn["E_binding"] < 0) == (dn["N_binaries"] > 0))
    k_t = 2.0 * dn["K"] / (3.0 * dn["N"])  # only hard binaries are counted
    assert np.all(dn["E_binding"] <= -k_t * dn["N_binaries"] * (1 - 1e-12))
    with h5py.File(nb / "escapers.h5", "r") as fe, h5py.File(mc / "escapers.h5") as fm:
        assert set(fe) == set(fm)
        assert fe["id"].shape[0] == dn["N_escaped"][-1]
        for name in fe:
            assert fe[name].attrs["unit"] == fm[name].attrs["unit"], name


def test_initial_stars_are_those_of_cmc_run(runs):
    ini, _, mc = runs
    from cmc.nbody import NBodyRun

    run = NBodyRun(load_config(str(ini)), None, t_end=1.0)
    snap, _ = read_snapshot(sorted((mc / "snapshots").glob("snap_0000000.h5"))[0])
    st = run.stars
    order = np.argsort(snap["id"])
    np.testing.assert_array_equal(st["id"], snap["id"][order])
    for key in ("m", "r", "vr", "vt"):
        np.testing.assert_array_equal(st[key], snap[key][order], err_msg=key)
    pos, vel = run.nb.pos, run.nb.vel
    np.testing.assert_array_equal(run.nb.mass, st["m"])
    r = np.linalg.norm(pos, axis=1)
    np.testing.assert_allclose(r, st["r"], rtol=4e-16 * 4)
    rhat = pos / r[:, None]
    vr = np.einsum("ic,ic->i", vel, rhat)
    np.testing.assert_allclose(vr, st["vr"], rtol=0, atol=1e-15 * np.max(np.abs(st["vr"])) * 8)
    vt = np.linalg.norm(vel - vr[:, None] * rhat, axis=1)
    np.testing.assert_allclose(vt, st["vt"], rtol=1e-14)
    # isotropic directions: the mean of the unit vectors is near 0
    assert np.all(np.abs(rhat.mean(axis=0)) < 4.0 / np.sqrt(200))


@pytest.mark.parametrize("extra, key", [
    (["initial.binary_fraction=0.1"], "initial.binary_fraction"),
    (["bse.stellar_evolution=true"], "bse.stellar_evolution"),
    (["tidal.mode=fixed", "tidal.r_t0_from=value", "tidal.r_t0=20"], "tidal.mode"),
    (["initial.n=50000"], "initial.n"),
])
def test_refused_configs_one_line_exit_2(tmp_path, capsys, extra, key):
    ini = tmp_path / "p.ini"
    ini.write_text(INI)
    sets = [x for e in extra for x in ("--set", e)]
    code = main(["nbody", str(ini), "-o", str(tmp_path / "o"), "--t-end", "1", *sets])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert key in err
    assert "Traceback" not in err
    if key == "initial.n":
        assert "about" in err and "estimate" in err
    assert not (tmp_path / "o" / "diagnostics.h5").exists()


def test_bad_options_exit_2(tmp_path, capsys):
    ini = tmp_path / "p.ini"
    ini.write_text(INI)
    assert main(["nbody", str(ini), "-o", str(tmp_path / "o"), "--dt-out", "0.1"]) == 2
    assert "--dt-out" in capsys.readouterr().err


def test_t_end_from_run_t_max(tmp_path):
    from cmc.nbody import NBodyRun

    cfg = load_config(text=INI + "[run]\nt_max = 0.5\n")
    run = NBodyRun(cfg, None)
    assert run.t_end == pytest.approx(0.5 * run.t_rh0 * 200 / np.log(0.1 * 200), rel=1e-14)


def test_close_pair_is_a_physics_failure(tmp_path, capsys, monkeypatch):
    import physics.nbody

    def fail(state, t_end):
        raise FloatingPointError("2 particle(s) need a step below dt_min")

    monkeypatch.setattr(physics.nbody, "evolve", fail)
    ini = tmp_path / "p.ini"
    ini.write_text(INI)
    assert main(["nbody", str(ini), "-o", str(tmp_path / "o"), "--t-end", "1"]) == 3
    assert "close_pair" in capsys.readouterr().err
    d, a = read_diagnostics(tmp_path / "o" / "diagnostics.h5")
    assert a["stop_reason"] == "close_pair" and d["step"].size == 1


def test_order_6_end_to_end(runs, tmp_path):
    """``--order 6``: the same stars, the same columns, units and shapes as the 4th order,
    the order recorded in the file's attributes."""
    ini, nb4, _ = runs
    out = tmp_path / "nb6"
    assert main(["nbody", str(ini), "-o", str(out), "--t-end", "1", "--dt-out", "0.125",
                 "--order", "6"]) == 0
    d6, a6 = read_diagnostics(out / "diagnostics.h5")
    d4, a4 = read_diagnostics(nb4 / "diagnostics.h5")
    assert (a6["order"], a4["order"]) == (6, 4)
    assert (a6["eta"], a4["eta"]) == (0.4, 0.02)  # each order's default
    assert a6["integrator"].startswith("hermite6") and a4["integrator"].startswith("hermite4")
    assert a6["stop_reason"] == "max_time"
    assert sorted(d6) == sorted(d4)
    with h5py.File(out / "diagnostics.h5", "r") as f6, h5py.File(nb4 / "diagnostics.h5") as f4:
        for name in d4:
            assert f6[name].shape == f4[name].shape, name
            assert f6[name].attrs["unit"] == f4[name].attrs["unit"], name
    np.testing.assert_array_equal(d6["time_nb"], d4["time_nb"])
    for name in d4:  # the row of t = 0: the same stars, the same bits
        if name != "wall_s":
            np.testing.assert_array_equal(d6[name][0], d4[name][0], err_msg=name)
    # default eta of each order: fewer steps and a smaller energy error at order 6
    e6, e4 = np.max(np.abs(d6["dE_rel"])), np.max(np.abs(d4["dE_rel"]))
    assert e6 < 2e-6 and e6 < 0.3 * e4  # measured 5.5e-7 against 5.3e-6
    assert d6["nb_steps"][-1] < d4["nb_steps"][-1]  # measured 20288 against 29109
    # the same cluster: the Lagrange radii at t = 1 agree closely (measured 2.5e-5)
    np.testing.assert_allclose(d6["lagrange_radii"][-1], d4["lagrange_radii"][-1], rtol=1e-3)


def test_bad_order_exit_2(tmp_path, capsys):
    ini = tmp_path / "p.ini"
    ini.write_text(INI)
    with pytest.raises(SystemExit) as exc:  # argparse: a choice of 4 or 6
        main(["nbody", str(ini), "-o", str(tmp_path / "o"), "--order", "5"])
    assert exc.value.code == 2
    assert "--order" in capsys.readouterr().err
    from cmc.errors import InputError
    from cmc.nbody import NBodyRun

    with pytest.raises(InputError, match="--order"):
        NBodyRun(load_config(str(ini)), None, t_end=1.0, order=8)


def test_command_shapes_exit_2(tmp_path, capsys):
    """CONFIG -o OUTDIR or --restart OUTDIR, not both, not neither; an existing run is
    refused naming the restart; --overwrite starts afresh without the old checkpoint."""
    ini = tmp_path / "p.ini"
    ini.write_text("[initial]\nmodel = plummer\nn = 40\nseed = 1\n")
    out = tmp_path / "o"
    assert main(["nbody", str(ini)]) == 2
    assert main(["nbody", "--restart", str(out), str(ini)]) == 2
    assert main(["nbody", "--restart", str(out)]) == 2  # no such folder
    capsys.readouterr()
    assert main(["nbody", str(ini), "-o", str(out), "--t-end", "0.25"]) == 0
    assert (out / "checkpoint.h5").exists()
    capsys.readouterr()
    assert main(["nbody", str(ini), "-o", str(out), "--t-end", "0.25"]) == 2
    assert f"cmc nbody --restart {out}" in capsys.readouterr().err
    assert main(["nbody", str(ini), "-o", str(out), "--t-end", "0.125", "--overwrite"]) == 0
    import h5py

    with h5py.File(out / "checkpoint.h5", "r") as fh:
        assert fh["nbody"].attrs["time"] == 0.125
