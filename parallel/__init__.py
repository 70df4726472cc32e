"""Communicator, domain decomposition, parallel sort and random streams."""

from parallel.jit_cache import configure_numba_cache as _configure_numba_cache

_configure_numba_cache()
