"""The galactic tide of the direct N-body mode (physics.nbody_tidal, issue 50).

Measured when written (one core of a loaded 2-core machine):

* Hill's equations for a free particle (two stars of 1e-14 far apart, Omega = 0.7, 5 time
  units: the Clohessy-Wiltshire solution): position error 1.6e-6, 5.5e-8, 1.8e-9 at order 6
  with dt_max 1/8, 1/16, 1/32 (fifth order in the step: the velocity-dependent Coriolis force
  is evaluated at the predicted velocity); 4.5e-3, 5.9e-4, 7.5e-5 at order 4 (third order).
* ``cmc nbody`` of a King W0 = 3, N = 200 model with ``tidal.mode = shrinking`` (r_t0 = the
  model's truncation radius, 3.02 r_vir), order 6, 8 N-body units: Jacobi's energy conserved
  to 5.9e-8; restarted at 4 it is the uninterrupted run bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from physics.nbody import NBodyState, evolve
from physics.nbody_tidal import (
    add_hill_field,
    add_hill_field_reference,
    hill_omega,
    jacobi_radius,
)

KING = "[initial]\nmodel = king\nw0 = 3\nn = 200\nseed = 3\n[tidal]\nmode = shrinking\n"


def test_field_kernel_equals_reference():
    rng = np.random.default_rng(4)
    pos, vel, acc, jerk, snap = (rng.normal(size=(7, 3)) for _ in range(5))
    outs = []
    for f in (add_hill_field, add_hill_field_reference):
        a, j, s = acc.copy(), jerk.copy(), snap.copy()
        f(pos, vel, a, j, s, 0.37)
        outs.append((a, j, s))
    for x, y in zip(*outs):
        np.testing.assert_allclose(x, y, rtol=1e-14, atol=1e-14)
    a, j = acc.copy(), jerk.copy()
    add_hill_field(pos, vel, a, j, np.zeros((0, 3)), 0.37)  # no snap rows: the 4th order
    np.testing.assert_array_equal(a, outs[0][0])
    assert hill_omega(2.0) ** 2 == pytest.approx(1.0 / 24.0)
    assert jacobi_radius(1.0, hill_omega(2.0)) == pytest.approx(2.0)


def _clohessy_wiltshire(order, dt_max, omega=0.7, t=5.0):
    x0 = np.array([[0.3, -0.2, 0.1], [-5.0, 4.0, -3.0]])
    v0 = np.array([[0.05, 0.1, -0.02], [0.0, 0.0, 0.0]])
    s = evolve(NBodyState.create(np.full(2, 1e-14), x0, v0, dt_max=dt_max, order=order,
                                 omega=omega), t)
    c, sn, n = math.cos(omega * t), math.sin(omega * t), omega
    (x, y, z), (u, v, w) = x0[0], v0[0]
    want = [(4 - 3 * c) * x + sn / n * u + 2 / n * (1 - c) * v,
            6 * (sn - n * t) * x + y - 2 / n * (1 - c) * u + (4 * sn - 3 * n * t) / n * v,
            z * c + w / n * sn]
    return float(np.abs(s.pos[0] - want).max())


@pytest.mark.parametrize("order, tol, ratio", [(6, 3e-6, 25.0), (4, 1e-2, 6.0)])
def test_free_particle_follows_hill_equations(order, tol, ratio):
    errs = [_clohessy_wiltshire(order, d) for d in (1 / 8, 1 / 16, 1 / 32)]
    assert errs[0] < tol
    assert errs[0] / errs[1] > ratio and errs[1] / errs[2] > ratio  # converges with the step


def test_cmc_nbody_in_the_tide_conserves_jacobi_energy_and_restarts(tmp_path):
    from cmc.cli import main
    from cmc.io import read_diagnostics

    ini = tmp_path / "k.ini"
    ini.write_text(KING)
    base = ["nbody", str(ini), "--order", "6", "-o"]
    assert main(base + [str(tmp_path / "whole"), "--t-end", "8"]) == 0
    assert main(base + [str(tmp_path / "split"), "--t-end", "4"]) == 0
    assert main(["nbody", "--restart", str(tmp_path / "split"), "--t-end", "8"]) == 0
    da, aa = read_diagnostics(tmp_path / "whole" / "diagnostics.h5")
    db, _ = read_diagnostics(tmp_path / "split" / "diagnostics.h5")
    assert aa["tidal_mode"] == "shrinking"
    assert np.all(da["r_tidal"] > 2.5) and np.all(da["E_tidal_field"] < 0.0)
    assert np.max(np.abs(da["dE_rel"])) < 1e-6
    for name in da:
        if name != "wall_s":
            np.testing.assert_array_equal(da[name], db[name], err_msg=name)


def test_a_star_beyond_two_jacobi_radii_escapes(tmp_path):
    from cmc.config import load_config
    from cmc.nbody import NBodyRun

    ini = tmp_path / "k.ini"
    ini.write_text(KING)
    run = NBodyRun(load_config(str(ini)), tmp_path, t_end=0.25)
    r_j = jacobi_radius(1.0, run.nb.omega)
    assert r_j == pytest.approx(3.0, rel=0.05)  # the King W0 = 3 truncation radius
    run.nb.pos[7] = [2.2 * r_j, 0.0, 0.0]
    run.nb.vel[7] = 0.0
    row = run.diagnostics()
    assert run.escaped[7] and row["N_escaped"] == 1 and row["N"] == 199


def test_fixed_tidal_radius_is_refused(tmp_path):
    from cmc.config import load_config
    from cmc.errors import InputError
    from cmc.nbody import NBodyRun

    ini = tmp_path / "k.ini"
    ini.write_text(KING.replace("shrinking", "fixed"))
    with pytest.raises(InputError, match="tidal.mode = fixed"):
        NBodyRun(load_config(str(ini)), None, t_end=1.0)
