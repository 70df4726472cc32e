"""Golden hashes (tests/golden_runs.py): every process of the step gives the bits it gave when
the hashes were recorded, serially with one and two threads and under ``--emulate-ranks 3``
(tests/mpi/test_golden_mpi.py checks ``mpiexec -n 3`` against the same)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from golden_runs import CASES, hash_run, load_golden, platform_key, run_case

GOLDEN = load_golden()
SAME_PLATFORM = GOLDEN["platform"] == platform_key()
pytestmark = pytest.mark.skipif(
    not SAME_PLATFORM, reason=f"golden hashes were recorded on a CPU with {GOLDEN['platform']}"
    f" (numpy's float64 loops dispatch on these); this one has {platform_key()}")


def _differing(got: dict, want: dict) -> list[str]:
    return sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))


@pytest.mark.parametrize("emulate,threads", [(0, 1), (0, 2), (3, 1)])
@pytest.mark.parametrize("name", sorted(CASES))
def test_results_equal_the_golden_hashes(tmp_path, name, emulate, threads):
    out = run_case(name, tmp_path, emulate, threads)
    bad = _differing(hash_run(out), GOLDEN["runs"][f"{name}/emulate{emulate}"])
    assert not bad, f"{name}: columns that changed: {bad[:12]}{' ...' if len(bad) > 12 else ''}"
    if emulate == 0 and threads == 1:  # the case runs what it is there to run
        with h5py.File(out / "diagnostics.h5", "r") as fh:
            d = {k: fh[k][...] for k in fh if isinstance(fh[k], h5py.Dataset)}
        if name in ("single_mass", "three_body", "cosmic_file"):
            assert np.sum(d["n_escaped_step"]) > 0
        if name == "kroupa_tidal":
            assert np.sum(d["n_stripped_step"]) > 10
        if name == "binaries":
            assert np.sum(d["n_binary_single"] + d["n_binary_binary"]) >= 3
            assert np.sum(d["n_wide_broken"]) >= 1 and d["E_taken"][-1] > 0
        if name == "three_body":
            assert np.sum(d["n_three_body"]) >= 1
        if name == "zones":  # the zones act: some steps give new orbits to some stars only
            assert np.any(d["n_stepped"] < d["N"]) and np.any(d["zone_level"] > 0)
        assert np.all(np.abs(d["dE_rel"]) < 1e-12)
