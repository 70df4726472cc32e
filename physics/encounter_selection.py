"""Binaries in the cluster: which events happen this step (compiled selection kernels).

Part of the binary processes of the step (:mod:`physics.encounters` applies the events and
re-exports these names).  Holds :func:`select_three_body` (the triplets of single stars that
form a binary, with the rate of Morscher et al. 2013, 2015 for the triplet's two heaviest stars,
one uniform per eligible triplet from its block's sub-stream), :func:`select_wide_binaries`
(binaries wider than ``wide_factor n^(-1/3)`` of the local density, or softer than a hardness;
no random draws), and :func:`central_block_sums` (per-block sums of the binary time scales).
Strong encounters are selected in the relaxation pass
(:func:`physics.relaxation.relax_or_select_pairs`).

Units: Hénon (G = 1, M0 = 1); no MPI, no files.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from parallel.decomposition import MIN_CHUNK
from parallel.rng import taus_uniform
from physics.binaries import three_body_rate
from physics.relaxation import local_number_density

#: Triplets per 20-star block (rows 0-2, 3-5, ..., 15-17).
TRIPLETS_PER_BLOCK = MIN_CHUNK // 3


# ---------------------------------------------------------------------------------- kernels
@njit(cache=True, inline="always")
def _block_mv2(m, vr, vt, i0, i1):
    """(sum m v^2, sum m) over rows i0 .. i1 - 1."""
    mv2 = 0.0
    msum = 0.0
    for i in range(i0, i1):
        mv2 += m[i] * (vr[i] * vr[i] + vt[i] * vt[i])
        msum += m[i]
    return mv2, msum


@njit(cache=True, inline="always")
def _heaviest_first(m, i):
    """Rows ``i .. i + 2`` ordered by mass, heaviest first (ties in row order)."""
    a, b, c = i, i + 1, i + 2
    if m[b] > m[a]:
        a, b = b, a
    if m[c] > m[b]:
        b, c = c, b
        if m[b] > m[a]:
            a, b = b, a
    return a, b, c


@njit(cache=True, parallel=True)
def select_three_body(r_all, offset, m, vr, vt, eligible, states, n0, dt_nb, eta_min,
                      neighbours, formed, block_stats, tb_stats, dt_ratio=None, due=None):
    """Triplets of single stars that form a binary this step.

    Triplet ``t`` of block ``b`` is rows ``20 b + 3 t .. 20 b + 3 t + 2``.  A triplet whose
    three rows are ``eligible`` (single, not in an encounter this step, of the allowed type)
    draws one uniform ``u`` and forms a binary when ``u < f Gamma dt_nb``
    (:func:`physics.binaries.three_body_rate` for its two heaviest stars and the third, with
    the local density at its heaviest star from ``neighbours`` radial neighbours on each side
    and the block's mean relative speed, CMC-COSMIC's ``4 sigma / sqrt(3 pi)`` with ``sigma``
    the mass-weighted 3-D dispersion).  CMC-COSMIC tries every star in one triplet (N/3 of
    them); a block of ``k`` stars offers ``k // 3`` (6 of 20 stars), so ``f = k / (3 (k //
    3))`` (10/9 for a whole block) keeps the expected formations per star CMC's.

    Parameters
    ----------
    eligible : ndarray of bool, shape (n,)
    states : ndarray of uint32, shape (nblocks, 4)
        Block sub-streams (advanced in place).
    n0, dt_nb, eta_min : float
        Unit of the local density, the step in N-body time units, smallest hardness.
    neighbours : int
        Radial neighbours on each side for the local density (CMC's BH_AVEKERNEL).
    formed : ndarray of bool, shape (nblocks * TRIPLETS_PER_BLOCK,)
        Out.
    block_stats : ndarray, shape (nblocks, 3)
        Out per block: mean relative speed ``4 sigma / sqrt(3 pi)``, ``sigma^2 = <m v^2> / <m>``
        (3-D) and mean mass (what the formation uses).
    tb_stats : ndarray, shape (nblocks, 2)
        Out per block: eligible triplets, sum of their probabilities.
    dt_ratio : ndarray, optional
        Time-step zones: each row's own step over the step's; a triplet's probability
        takes ``dt_nb`` times the mean of its three rows' ratios.  None: ``dt_nb``.
    due : ndarray of bool, optional
        Time-step zones: a triplet with none of its rows due is skipped.  None: none is.
    """
    n = m.shape[0]
    nb = states.shape[0]
    for b in prange(nb):
        i0 = b * MIN_CHUNK
        i1 = min(i0 + MIN_CHUNK, n)
        mv2, msum = _block_mv2(m, vr, vt, i0, i1)
        cnt = i1 - i0
        sigma2 = mv2 / msum if msum > 0.0 else 0.0
        vrel = 4.0 * np.sqrt(sigma2 / (3.0 * np.pi))
        block_stats[b, 0] = vrel
        block_stats[b, 1] = sigma2
        block_stats[b, 2] = msum / max(cnt, 1)
        tried = min(TRIPLETS_PER_BLOCK, cnt // 3)
        per_star = cnt / (3.0 * tried) if tried > 0 else 0.0
        n_el = 0.0
        p_sum = 0.0
        for t in range(TRIPLETS_PER_BLOCK):
            k = b * TRIPLETS_PER_BLOCK + t
            formed[k] = False
            i = i0 + 3 * t
            if i + 2 >= i1 or not (eligible[i] and eligible[i + 1] and eligible[i + 2]):
                continue
            if due is not None:
                if not (due[i] or due[i + 1] or due[i + 2]):
                    continue
            if vrel <= 0.0:
                continue
            h1, h2, h3 = _heaviest_first(m, i)
            dens = local_number_density(r_all, offset + h1, n0, neighbours) * n0
            p = three_body_rate(dens, vrel, m[h1], m[h2], m[h3], eta_min) * dt_nb * per_star
            if dt_ratio is not None:
                p *= (dt_ratio[i] + dt_ratio[i + 1] + dt_ratio[i + 2]) / 3.0
            n_el += 1.0
            p_sum += p
            if taus_uniform(states, b) < p:
                formed[k] = True
        tb_stats[b, 0] = n_el
        tb_stats[b, 1] = p_sum


@njit(cache=True)
def select_wide_binaries(r_all, offset, m, vr, vt, is_binary, bin_m1, bin_m2, bin_a, bin_e,
                         n0, wide_factor, hardness_min, out):
    """Binaries to break: apocentre ``a (1 + e)`` beyond ``wide_factor n^(-1/3)`` (CMC's rule,
    ``n`` the local number density; ``wide_factor = 0`` off), or hardness
    ``m1 m2 / (a <m> sigma^2)`` below ``hardness_min`` (0 off; ``<m>`` and the mass-weighted
    3-D ``sigma^2`` of the binary's 20-star block, the convention of the three-body binaries).
    """
    n = is_binary.shape[0]
    for b in range((n + MIN_CHUNK - 1) // MIN_CHUNK):
        i0 = b * MIN_CHUNK
        i1 = min(i0 + MIN_CHUNK, n)
        mv2, _ = _block_mv2(m, vr, vt, i0, i1)
        kt = mv2 / (i1 - i0)  # <m> sigma^2 = sum m v^2 / count
        for i in range(i0, i1):
            out[i] = False
            if not is_binary[i]:
                continue
            if wide_factor > 0.0:
                dens = local_number_density(r_all, offset + i, n0) * n0
                if dens > 0.0 and (bin_a[i] * (1.0 + bin_e[i])
                                   > wide_factor * dens ** (-1.0 / 3.0)):
                    out[i] = True
            if hardness_min > 0.0 and kt > 0.0:
                if bin_m1[i] * bin_m2[i] / (bin_a[i] * kt) < hardness_min:
                    out[i] = True


@njit(cache=True)
def central_block_sums(m, vr, vt, is_binary, bin_a, n_blocks):
    """Per 20-star block, for the first ``n_blocks`` local blocks: number of singles, number of
    binaries, sum v^2, sum a, sum a^2, sum M_b, sum M_b a (binaries' mass M_b), sum v^2 of the
    binaries -- the ingredients of the binary time scales (paper eqs 9, 10)."""
    n = m.shape[0]
    out = np.zeros((n_blocks, 8))
    for b in range(n_blocks):
        for i in range(b * MIN_CHUNK, min(n, (b + 1) * MIN_CHUNK)):
            v2 = vr[i] * vr[i] + vt[i] * vt[i]
            out[b, 2] += v2
            if is_binary[i]:
                out[b, 1] += 1.0
                out[b, 3] += bin_a[i]
                out[b, 4] += bin_a[i] * bin_a[i]
                out[b, 5] += m[i]
                out[b, 6] += m[i] * bin_a[i]
                out[b, 7] += v2
            else:
                out[b, 0] += 1.0
    return out
