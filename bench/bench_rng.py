"""Throughput of the lfsr113 kernels (doubles per second, one core).

Run ``python bench/bench_rng.py`` for a table and a JSON line; the target is
at least 1e8 doubles/s inside jitted code.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit
from numpy.random import Generator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parallel.rng import (  # noqa: E402
    SUBSTREAM_JUMP,
    fill_uniform,
    jump_matrices,
    seed_state,
    taus_uniform,
)
from parallel.streams import Streams  # noqa: E402


@njit(cache=True)
def _bulk(states, n_total, chunk):
    # A cache-resident buffer refilled many times measures the generator, not
    # memory bandwidth; the sum keeps the work from being optimised away.
    buf = np.empty(chunk)
    acc = 0.0
    done = 0
    while done < n_total:
        fill_uniform(states, 0, buf)
        acc += buf[0] + buf[chunk - 1]
        done += chunk
    return acc, done


@njit(cache=True)
def _per_call(states, n):
    acc = 0.0
    for _ in range(n):
        acc += taus_uniform(states, 0)
    return acc


@njit(cache=True)
def _per_call_rows(states, n):
    # Engine-like access: a different generator row (block) for each draw;
    # the row count is a power of two so the index costs a mask, not a division.
    acc = 0.0
    mask = states.shape[0] - 1
    for k in range(n):
        acc += taus_uniform(states, k & mask)
    return acc


def _best(fn, repeat: int = 3) -> float:
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_rng(n: int = 100_000_000, chunk: int = 65_536) -> dict:
    """Measure the generator's throughput.

    Parameters
    ----------
    n : int
        Doubles per timed run of the bulk and per-call loops.
    chunk : int
        Buffer size of the bulk loop.

    Returns
    -------
    dict
        Rates in doubles (or outputs) per second and setup timings in seconds.
    """
    states = seed_state(1).reshape(1, 4).copy()
    rows = np.repeat(states, 64, axis=0)
    # Compile / load from cache before timing.
    _bulk(states, chunk, chunk)
    _per_call(states, 10)
    _per_call_rows(rows, 10)

    t_bulk = _best(lambda: _bulk(states, n, chunk))
    t_call = _best(lambda: _per_call(states, n))
    t_rows = _best(lambda: _per_call_rows(rows, n))

    Streams.create(1, 1, 10)
    t_create = _best(lambda: Streams.create(1, 4, 50_000))
    t_jm = _best(lambda: jump_matrices(SUBSTREAM_JUMP * 12_345_679), repeat=1)

    gen = Generator(Streams.create(1, 1, 1).bit_generator(0, 0))
    m = 10_000_000
    gen.random(10)
    t_np = _best(lambda: gen.random(m))

    n_bulk = chunk * -(-n // chunk)
    return {
        "fill_uniform_per_s": n_bulk / t_bulk,
        "taus_uniform_per_call_per_s": n / t_call,
        "taus_uniform_64_rows_per_s": n / t_rows,
        "numpy_generator_random_per_s": m / t_np,
        "streams_create_4x50000_s": t_create,
        "jump_matrices_uncached_s": t_jm,
    }


if __name__ == "__main__":
    res = bench_rng()
    print(f"{'measure':34s} {'value':>12s}")
    for key, value in res.items():
        print(f"{key:34s} {value:12.4g}")
    print(json.dumps(res))
