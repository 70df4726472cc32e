"""``cmc compare`` (issue 50): Monte Carlo and N-body runs as ensembles on one time axis."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cmc.cli import main
from cmc.io import read_diagnostics

INI = "[initial]\nn = 300\nseed = {seed}\n[run]\nmax_steps = 40\nn_core_stop = 0\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two Monte Carlo runs (seeds 1, 2) and the N-body run of seed 1's stars."""
    base = tmp_path_factory.mktemp("cmp")
    out = {}
    for seed in (1, 2):
        ini = base / f"s{seed}.ini"
        ini.write_text(INI.format(seed=seed))
        assert main(["run", str(ini), "-o", str(base / f"mc{seed}")]) == 0
        out[f"mc{seed}"] = base / f"mc{seed}"
    assert main(["nbody", str(base / "s1.ini"), "-o", str(base / "nb1"), "--t-end", "1",
                 "--dt-out", "0.125"]) == 0
    out["nb1"] = base / "nb1"
    out["base"] = base
    return out


def test_compare_groups_runs_and_shades_the_seeds(runs):
    prefix = runs["base"] / "cmp"
    assert main(["compare", str(runs["mc1"]), str(runs["mc2"]), str(runs["nb1"]), "-o",
                 str(prefix)]) == 0
    assert prefix.with_suffix(".png").stat().st_size > 10_000
    doc = json.loads(prefix.with_suffix(".json").read_text())
    kinds = [(e["kind"], e["N"], len(e["runs"])) for e in doc["ensembles"]]
    assert kinds == [("Monte Carlo", 300, 2), ("N-body", 300, 1)]
    mc, nb = doc["ensembles"]
    first = [read_diagnostics(runs[k] / "diagnostics.h5")[0] for k in ("mc1", "mc2", "nb1")]
    j = mc["lagrange_fractions"].index(0.5)
    r0 = [float(d["lagrange_radii"][0, j]) for d in first]
    # t = 0: the ensemble's range is its runs' first rows, the median their mean (two runs)
    assert mc["low"]["r_0.5"][0] == min(r0[:2]) and mc["high"]["r_0.5"][0] == max(r0[:2])
    assert mc["median"]["r_0.5"][0] == pytest.approx(0.5 * (r0[0] + r0[1]), rel=1e-15)
    # the N-body run starts with seed 1's stars: the same Lagrange radii at t = 0
    assert nb["median"]["r_0.5"][0] == pytest.approx(r0[0], rel=1e-13)
    # each ensemble's grid ends with its shortest run
    t_end = min(float(d["time_trh"][-1]) for d in first[:2])
    assert mc["t_trh0"][-1] == pytest.approx(t_end, rel=1e-12)
    assert np.all(np.array(mc["low"]["rc_rh"]) <= np.array(mc["high"]["rc_rh"]))
    assert doc["table"] and doc["table"][0]["t_trh0"] == 0.0


def test_compare_refuses_a_folder_without_diagnostics(runs, tmp_path, capsys):
    assert main(["compare", str(tmp_path), "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "diagnostics.h5" in err[0]
