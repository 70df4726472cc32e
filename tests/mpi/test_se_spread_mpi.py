"""BSE's calls spread over the ranks (:mod:`cmc.processes.se_spread`) give each rank's objects
exactly the states and results of evolving them on that rank.

Written once for any communicator size (``mpiexec -n P python -m pytest tests/mpi``); every
rank asserts on gathered data, after all communication.
"""

from __future__ import annotations

import numpy as np
import pytest

from cmc.processes.se_spread import evolve_spread
from physics import stellar_evolution as se

pytest.importorskip("mpi4py.MPI")

Z = 0.0017


@pytest.fixture(autouse=True)
def _bse(tmp_path_factory, monkeypatch, world):
    # evolv2 writes its warnings into fort.99 in the working directory: one per rank
    monkeypatch.chdir(tmp_path_factory.mktemp(f"rank{world.rank}"))
    se.apply_flags({})
    yield


def _objects(rank: int) -> tuple[se.Batch, np.ndarray]:
    """An uneven number of objects per rank (none on every third): singles and binaries from
    0.5 to 60 Msun (supernovae, kicks, disruptions by 40 Myr)."""
    n = (9, 0, 14)[rank % 3]
    rng = np.random.default_rng(100 + rank)
    m1 = 10 ** rng.uniform(np.log10(0.5), np.log10(60.0), n)
    m2 = np.where(rng.random(n) < 0.4, m1 * rng.uniform(0.3, 1.0, n), 0.0)
    sep = np.where(m2 > 0, 10 ** rng.uniform(1, 4, n), 0.0)
    ecc = np.where(m2 > 0, rng.uniform(0.0, 0.7, n), 0.0)
    seeds = rng.integers(1, 2**31 - 2, n)
    return se.Batch.zams(m1, m2, sep=sep, ecc=ecc, seed=seeds), 1000 * rank + np.arange(n)


def _state(b: se.Batch) -> dict[str, np.ndarray]:
    out = {"kstar": b.kstar, "mass": b.mass, "rad": b.rad, "tphys": b.tphys, "sep": b.sep,
           "ecc": b.ecc, "seed": b.seed}
    out.update({f"q.{k}": v for k, v in b.q.items()})
    return {k: np.array(v) for k, v in out.items()}


def test_spread_calls_equal_local_calls_bit_for_bit(world):
    batch, ids = _objects(world.rank)
    local = batch.take(np.arange(len(batch)))  # a copy
    for t in (3.0, 40.0):  # two steps: the second starts from the spread call's states
        want = se.evolve(local, t, Z)
        got, error = evolve_spread(world, batch, ids, t, Z, 5.0)
        assert error is None and got is not None
        a, b = _state(batch), _state(local)
        diff = [k for k in a if not np.array_equal(a[k], b[k])]
        diff += [f.name for f in se.Result.__dataclass_fields__.values()
                 if not np.array_equal(getattr(got, f.name), getattr(want, f.name))]
        diff += [f"{f.name} dtype" for f in se.Result.__dataclass_fields__.values()
                 if getattr(got, f.name).dtype != getattr(want, f.name).dtype]
        everyone = world.allgather(diff)
        assert everyone == [[]] * world.size, everyone
    supernovae = sum(world.allgather(int(np.count_nonzero(got.supernova))))
    assert world.size == 1 or supernovae > 0  # the test exercises kicks


def test_a_failed_call_on_any_rank_reaches_every_rank_without_a_hang(world, monkeypatch):
    batch, ids = _objects(world.rank)
    real = se.evolve
    total = sum(world.allgather(len(batch)))

    def failing(b, t_end, z, cutoff=5.0):  # the global object 0 lands on rank 0
        if world.rank == 0 and len(b) > 0:
            raise se.StellarEvolutionError(0, "injected")
        return real(b, t_end, z, cutoff)

    monkeypatch.setattr(se, "evolve", failing)
    got, error = evolve_spread(world, batch, ids, 3.0, Z, 5.0)
    errors = [e for e in world.allgather(error) if e]
    assert total > 0
    assert got is None
    assert len(errors) == 1 and errors[0][1] == "injected"
    assert errors[0][0] in sum(world.allgather(ids.tolist()), [])
