"""Fixtures for tests that run under ``mpiexec -n P python -m pytest`` (any P, also 1).

Every rank runs the same tests in the same order, so fixtures and tests must be
deterministic and must not skip on some ranks only. Tests should finish all
communication before asserting and assert on data every rank holds (e.g. after
an ``allgather``), so that a failure fails on every rank instead of leaving the
others blocked in a collective.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

MPI = pytest.importorskip("mpi4py.MPI")


@pytest.fixture(scope="session")
def world() -> Any:
    """``MPI.COMM_WORLD``."""
    return MPI.COMM_WORLD


@pytest.fixture(scope="session")
def subcomms(world: Any) -> Iterator[list[tuple[int, Any]]]:
    """Sub-communicators of sizes ``1 .. world.size`` made of the lowest world ranks.

    Yields a list of ``(p, comm)``; ``comm`` is ``None`` on world ranks outside
    the size-``p`` communicator. A 4-rank run thus covers P = 1, 2, 3, 4.
    """
    subs = []
    for p in range(1, world.size + 1):
        color = 0 if world.rank < p else MPI.UNDEFINED
        sub = world.Split(color, world.rank)
        subs.append((p, None if sub == MPI.COMM_NULL else sub))
    yield subs
    for _, sub in subs:
        if sub is not None:
            sub.Free()


def run_on_subcomms(
    world: Any, subcomms: list[tuple[int, Any]], fn: Callable[[Any], Any]
) -> dict[int, list[tuple[str, Any]]]:
    """Run ``fn(comm)`` on every sub-communicator and share the outcomes.

    Returns ``{p: [outcome of rank 0, ..., outcome of rank p-1]}`` on every
    world rank, each outcome ``('ok', value)`` or ``('err', 'ExcType: message')``
    (a string, since not every exception pickles). Exceptions are caught so
    that the gather (and the asserts after it) still happen on every rank.
    """
    out = {}
    for p, sub in subcomms:
        local = None
        if sub is not None:
            try:
                local = ("ok", fn(sub))
            except Exception as exc:  # reported through the gather, asserted later
                local = ("err", f"{type(exc).__name__}: {exc}")
        out[p] = world.allgather(local)[:p]
    return out


@pytest.fixture
def on_subcomms(world: Any, subcomms: list[tuple[int, Any]]) -> Callable[[Callable], dict]:
    """``on_subcomms(fn)`` runs :func:`run_on_subcomms` with the session communicators."""
    return lambda fn: run_on_subcomms(world, subcomms, fn)
