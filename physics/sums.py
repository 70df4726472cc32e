"""Sums over all stars with numpy's bits, on every thread.

``np.sum`` of a contiguous float64 array adds its elements in a fixed binary tree (pairwise
summation: halves split at multiples of 8 down to blocks of at most 128, each summed with
eight accumulators).  The tree does not depend on how it is evaluated, so its subtrees can be
summed on different threads and joined in the same order: :func:`pairwise_sum` returns the
bits of ``np.sum`` for any thread count, where ``np.sum`` itself runs on one thread.  The
diagnostics' energy sums (:func:`kinetic_energy`, :func:`potential_energy_sum`) fill their terms
in a threaded pass and add them so, the bits of the numpy expressions they replace
(``0.5 * np.sum(m * (vr**2 + vt**2))``; :func:`physics.potential.potential_energy`).

:func:`pairwise_sum_reference` is the plain recursive twin; ``tests/test_sums.py`` checks both
against ``np.sum``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

#: numpy's block size: a range of at most this many elements is summed with 8 accumulators.
PAIRWISE_BLOCK = 128
#: Depth of the tree cut into independent subtrees (2**depth of them at most): fixed, so the
#: additions do not depend on the thread count.
SPLIT_DEPTH = 5
#: A subtree is not cut further below this many elements (a thread's share stays large).
SPLIT_MIN = 4096


@njit(cache=True)
def _pairwise_block(x, lo, n):
    """numpy's ``pairwise_sum`` of ``x[lo:lo + n]``, ``n <= PAIRWISE_BLOCK``."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += x[i]
        return res
    r0 = x[lo]
    r1 = x[lo + 1]
    r2 = x[lo + 2]
    r3 = x[lo + 3]
    r4 = x[lo + 4]
    r5 = x[lo + 5]
    r6 = x[lo + 6]
    r7 = x[lo + 7]
    i = 8
    m = n - n % 8
    while i < m:
        j = lo + i
        r0 += x[j]
        r1 += x[j + 1]
        r2 += x[j + 2]
        r3 += x[j + 3]
        r4 += x[j + 4]
        r5 += x[j + 5]
        r6 += x[j + 6]
        r7 += x[j + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += x[lo + i]
        i += 1
    return res


@njit(cache=True)
def _pairwise_serial(x, lo, n):
    """numpy's pairwise sum of ``x[lo:lo + n]`` on one thread (the tree walked with a stack:
    numba compiles no recursion cheaply)."""
    # the pending ranges (start, length; length -1 marks a join) and the partial results
    stack_lo = np.empty(128, dtype=np.int64)
    stack_n = np.empty(128, dtype=np.int64)
    vals = np.empty(128)
    nv = 0
    stack_lo[0] = lo
    stack_n[0] = n
    top = 1
    # iterative post-order: a range is either a leaf (summed, pushed as a value) or split
    # into its halves; a marker (n = -1) joins the last two values when both halves are done
    while top > 0:
        top -= 1
        a = stack_lo[top]
        k = stack_n[top]
        if k < 0:
            nv -= 1
            vals[nv - 1] = vals[nv - 1] + vals[nv]
        elif k <= PAIRWISE_BLOCK:
            vals[nv] = _pairwise_block(x, a, k)
            nv += 1
        else:
            k2 = k // 2
            k2 -= k2 % 8
            stack_lo[top] = 0
            stack_n[top] = -1
            stack_lo[top + 1] = a + k2
            stack_n[top + 1] = k - k2
            stack_lo[top + 2] = a
            stack_n[top + 2] = k2
            top += 3
    return vals[0]


@njit(cache=True)
def _subtrees(lo, n):
    """The tree's nodes down to :data:`SPLIT_DEPTH` as a heap (children of ``k`` at
    ``2k + 1``, ``2k + 2``): start, length and whether the node is split (-1 for none)."""
    nn = 2 ** (SPLIT_DEPTH + 1) - 1
    start = np.full(nn, -1, dtype=np.int64)
    count = np.zeros(nn, dtype=np.int64)
    split = np.zeros(nn, dtype=np.bool_)
    start[0] = lo
    count[0] = n
    for k in range(2 ** SPLIT_DEPTH - 1):  # the nodes that may have children
        if start[k] < 0:
            continue
        c = count[k]
        if c >= SPLIT_MIN:  # (> PAIRWISE_BLOCK: numpy splits it too)
            c2 = c // 2
            c2 -= c2 % 8
            split[k] = True
            start[2 * k + 1] = start[k]
            count[2 * k + 1] = c2
            start[2 * k + 2] = start[k] + c2
            count[2 * k + 2] = c - c2
    return start, count, split


@njit(cache=True, parallel=True)
def pairwise_sum(x, lo, hi):
    """``np.sum(x[lo:hi])`` to the bit, its subtrees summed on the threads.

    Parameters
    ----------
    x : ndarray of float64, shape (N,)
        Values (contiguous).
    lo, hi : int
        The range summed.

    Returns
    -------
    float
        The sum; 0.0 for an empty range.
    """
    # (an empty range is one leaf of length 0, summed to 0.0: no early return, which made
    # the serial loops of parallel functions slower here)
    start, count, split = _subtrees(lo, max(hi - lo, 0))
    nn = start.shape[0]
    vals = np.zeros(nn)
    leaves = np.flatnonzero((start >= 0) & ~split)
    for j in prange(leaves.shape[0]):
        k = leaves[j]
        vals[k] = _pairwise_serial(x, start[k], count[k])
    for k in range(nn - 1, -1, -1):  # children have larger indices: joined bottom-up
        if split[k]:
            vals[k] = vals[2 * k + 1] + vals[2 * k + 2]
    return vals[0]


def pairwise_sum_reference(x: np.ndarray, lo: int = 0, hi: int | None = None) -> float:
    """Plain recursive twin of :func:`pairwise_sum` (numpy's algorithm written out)."""
    hi = x.shape[0] if hi is None else hi

    def rec(a: int, n: int) -> float:
        if n < 8:
            res = 0.0
            for i in range(a, a + n):
                res += float(x[i])
            return res
        if n <= PAIRWISE_BLOCK:
            r = [float(v) for v in x[a:a + 8]]
            i = 8
            while i < n - n % 8:
                for j in range(8):
                    r[j] += float(x[a + i + j])
                i += 8
            res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
            for j in range(i, n):
                res += float(x[a + j])
            return res
        n2 = n // 2
        n2 -= n2 % 8
        return rec(a, n2) + rec(a + n2, n - n2)

    return rec(lo, max(0, hi - lo))


# (the kernels take slices: an index like ``i - lo`` could be negative for numba, whose
# wraparound test per element keeps the loop from vectorising, 3-5x slower)
@njit(cache=True, parallel=True)
def kinetic_terms(m, vr, vt, out):
    """``out = m * (vr**2 + vt**2)`` (numpy's operations: its square is ``v * v``)."""
    for i in prange(m.shape[0]):
        out[i] = m[i] * (vr[i] * vr[i] + vt[i] * vt[i])


@njit(cache=True, parallel=True)
def potential_terms(r, m, phi, out):
    """``out = m * (phi + m / r)``."""
    for i in prange(m.shape[0]):
        out[i] = m[i] * (phi[i] + m[i] / r[i])


def kinetic_energy(m: np.ndarray, vr: np.ndarray, vt: np.ndarray, lo: int = 0,
                   hi: int | None = None) -> float:
    """``0.5 * np.sum(m * (vr**2 + vt**2))`` over rows ``lo:hi``, to the bit [Hénon energy]."""
    hi = m.shape[0] if hi is None else hi
    terms = np.empty(max(0, hi - lo))
    kinetic_terms(m[lo:hi], vr[lo:hi], vt[lo:hi], terms)
    return 0.5 * float(pairwise_sum(terms, 0, terms.shape[0]))


def potential_energy_sum(r: np.ndarray, m: np.ndarray, phi: np.ndarray, lo: int = 0,
                         hi: int | None = None) -> float:
    """:func:`physics.potential.potential_energy` of rows ``lo:hi``, to the bit, threaded
    [Hénon energy]."""
    hi = r.shape[0] if hi is None else hi
    terms = np.empty(max(0, hi - lo))
    potential_terms(r[lo:hi], m[lo:hi], phi[lo:hi], terms)
    return 0.5 * float(pairwise_sum(terms, 0, terms.shape[0]))


# The step's elementwise passes over all rows, on the threads: numba splits a prange loop of
# the same length into the same contiguous shares, so each thread reads the rows it wrote in
# the kernels before (a numpy pass on one thread would fetch half of them from the other
# core's cache: 2-3x its one-thread time here).
@njit(cache=True, parallel=True)
def copy_rows(src, dst):
    """``dst[:] = src`` on the threads."""
    for i in prange(src.shape[0]):
        dst[i] = src[i]


@njit(cache=True, parallel=True)
def difference(a, b, out):
    """``out = a - b`` on the threads (numpy's bits: one subtraction each)."""
    for i in prange(a.shape[0]):
        out[i] = a[i] - b[i]
