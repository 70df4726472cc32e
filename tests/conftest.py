"""Shared fixtures: small sampled clusters built with the project's own streams."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from cmc.initial import initial_generator
from physics.initial_conditions import plummer


@pytest.fixture(scope="session")
def plummer_5k():
    """A Plummer model of 5000 equal-mass stars (Hénon units, sorted)."""
    return plummer(5000, initial_generator(7))


@pytest.fixture(scope="session")
def plummer_20k():
    return plummer(20000, initial_generator(11))


def rng_states(n: int, seed: int = 3) -> np.ndarray:
    """``n`` independent sub-stream states (test helper)."""
    from parallel.streams import Streams

    return np.ascontiguousarray(Streams.create(seed, 1, n).states[0])


@pytest.fixture(autouse=True)
def _drop_cmc_log_handlers():
    """A test that ran the CLI leaves the ``cmc`` logger writing to that test's captured
    stderr, closed once it ends; drop such handlers so that no test depends on the order."""
    yield
    logger = logging.getLogger("cmc")
    for h in list(logger.handlers):
        logger.removeHandler(h)
        h.close()


def njit_callees(roots: list[tuple[str, str]]) -> dict[str, set[str]]:
    """Every numba function the ``(module, name)`` roots reach through calls, itself
    included: name -> the numba functions it calls (the GPU kernels' device-function tables
    must list all of them, tests/test_orbits_gpu.py, tests/test_nbody_gpu.py)."""
    import importlib

    from numba.core.registry import CPUDispatcher

    calls: dict[str, set[str]] = {}
    todo = list(roots)
    while todo:
        mod, name = todo.pop()
        if name in calls:
            continue
        module = importlib.import_module(mod)
        calls[name] = set()
        for ref in getattr(module, name).py_func.__code__.co_names:
            obj = getattr(module, ref, None)
            if isinstance(obj, CPUDispatcher):
                calls[name].add(ref)
                todo.append((obj.py_func.__module__, ref))
    return calls
