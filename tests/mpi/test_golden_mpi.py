"""Golden hashes under ``mpiexec -n 3``: every case of tests/golden_runs.py run on three ranks
gives the bits recorded from ``--emulate-ranks 3`` (tests/test_golden.py checks the serial
runs).  Other communicator sizes skip (the hashes are of three ranks' streams)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden_runs import CASES, hash_run, load_golden, platform_key, run_case, write_case  # noqa: E402

GOLDEN = load_golden()


@pytest.mark.parametrize("name", sorted(CASES))
def test_three_ranks_equal_the_golden_hashes(world, name):
    if world.size != 3:
        pytest.skip("the golden hashes are of three ranks")
    if GOLDEN["platform"] != platform_key():
        pytest.skip(f"golden hashes were recorded on a CPU with {GOLDEN['platform']}")
    tmp = Path(world.bcast(tempfile.mkdtemp(prefix="cmc-golden-") if world.rank == 0 else None))
    if world.rank == 0:
        write_case(name, tmp)
    world.Barrier()
    out = run_case(name, tmp)
    bad = None
    if world.rank == 0:
        got, want = hash_run(out), GOLDEN["runs"][f"{name}/emulate3"]
        bad = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    bad = world.bcast(bad, root=0)
    assert not bad, f"{name} on 3 ranks: columns that changed: {bad[:12]}"
