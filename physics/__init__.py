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

# Threading layer: OpenMP where numba has it (its wheels do), else TBB, else workqueue.  On a
# node whose cores are the run's (the production case) OpenMP is the fastest: N = 1e5, two
# threads, 0.40-0.43 us per star-step against 0.45-0.51 with workqueue (same sitting; orbit
# kernel 0.24 against 0.26-0.36), i.e. 80-90 % parallel efficiency instead of 70-78 %.  On an
# oversubscribed machine (more ranks x threads than cores, as the MPI tests run) its spinning
# threads cost milliseconds per parallel region, so the test targets of the Makefile select
# workqueue (~0.1 ms per region) through NUMBA_THREADING_LAYER, which always wins.
if "NUMBA_THREADING_LAYER" not in _os.environ:
    _numba.config.THREADING_LAYER = "default"
    _numba.config.THREADING_LAYER_PRIORITY = ["omp", "tbb", "workqueue"]

# OpenMP workers that wait passively (sleep) between parallel regions instead of spinning:
# the step sorts its keys on Python threads (numpy's argsort, parallel.sort_local) right
# after numba's regions, and spinning workers held the second core, so that sort did not
# speed up with threads (N = 1e5, two threads: sort 0.086-0.090 -> 0.071 us per star, the
# step 0.335-0.353 -> 0.328-0.333; the wake-up costs the orbit kernel ~0.003).  Read by
# libgomp when it loads, at numba's first parallel region; a value the user set is kept.
# A short spin before sleeping (GOMP_SPINCOUNT, which overrides the passive policy's 0; about
# 0.2 ms at libgomp's estimate of 1e5 spins per ms) catches the step's back-to-back regions
# without holding the core through the sort: two threads, N = 1e5, three A/B alternations
# 0.333 / 0.340 / 0.335 -> 0.317 / 0.317 / 0.332 us per star-step (10,000: 0.326 / 0.330 /
# 0.321).
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
_os.environ.setdefault("GOMP_SPINCOUNT", "20000")
