"""Numerical kernels and physical processes of the Hénon Monte Carlo method.

Nothing in this package communicates or touches files: kernels take arrays and scalars.
All quantities are in Hénon (N-body) units (G = 1, initial total mass 1, initial energy -1/4)
unless a docstring says otherwise; times are in relaxation units t_NB * N0 / ln(gamma N0).
"""

import os as _os

import numba as _numba

from parallel.jit_cache import configure_numba_cache as _configure_numba_cache

# before any kernel module is imported: a cache folder per version of the kernel sources
_configure_numba_cache()

# numba's default threading layer costs milliseconds per parallel region on a busy machine;
# the workqueue layer ~0.1 ms (the kernels are called a few times per step).
if "NUMBA_THREADING_LAYER" not in _os.environ:
    _numba.config.THREADING_LAYER = "workqueue"
