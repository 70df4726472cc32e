"""Energy correction after the potential has been recomputed (paper sec. 2, step 7).

Orbits are sampled in the old potential.  When the potential changes from old (o) to new (n),
a star's specific energy changes by the average of the change at its old and new radius
(Stodolkiewicz 1982).  With ``U_ab`` the a-potential at the b-radius (own shell removed) and
``v_old`` the speed before the orbit step (at the old radius):

    v_new^2 = v_old^2 + (U_oo - U_on) + (U_no - U_nn)

which, written with the sampled speed ``v_s`` at the new radius (``v_s^2 = v_old^2 +
2 (U_oo - U_on)``), is ``v_new^2 = v_s^2 + (U_on - U_oo) + (U_no - U_nn)``.  ``vr`` and ``vt``
are scaled by one factor so that ``vr/vt`` is kept (Fregeau & Rasio 2007).  Where
``v_new^2 <= 0`` the star keeps its sampled speed and the energy it owes is taken from the
next stars of its block or, failing that, returned so that the caller takes it from all
stars: energy is never dropped silently (see :func:`correct_velocities`).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from parallel.decomposition import MIN_CHUNK

#: Stars per block (the MPI decomposition's unit): the deficit is settled inside a block.
BLOCK = MIN_CHUNK


#: Largest fraction of a star's kinetic energy that may be taken to pay another's deficit.
TAKE_FRACTION = 0.8


@njit(cache=True, parallel=True)
def correct_velocities(r_all, phi_all, offset, m, r_old_all, phi_at_old, old_index, vr, vt,
                       dphi_old, deficit):
    """Apply the energy correction in place.

    Where ``v_new^2 <= 0`` the star keeps its sampled velocity (as the C code does) and the
    energy it should have lost, ``m (v_s^2 - v_new^2) / 2``, is taken from the following stars
    of the same 20-star block (at most :data:`TAKE_FRACTION` of each one's kinetic energy, the
    ratio vr/vt kept).  What a block cannot pay is returned in ``deficit`` (one entry per block)
    for the caller to take from all stars; blocks are global, so the result does not depend on
    the number of MPI ranks or threads.

    Parameters
    ----------
    r_all, phi_all : ndarray
        Replicated radii and potential after the sort (new potential).
    offset : int
        Global index of local star 0.
    m : ndarray
        Local masses.
    r_old_all, phi_at_old : ndarray, shape (N_old,)
        Replicated radii before the orbit step, and the new potential (all shells) there
        (:func:`physics.potential.potential_at_sorted_radii`).
    old_index : ndarray of int64
        Each local star's index in ``r_old_all``.
    vr, vt : ndarray
        Sampled velocities at the new radius; corrected in place.
    dphi_old : ndarray
        ``U_on - U_oo``: the old potential (own shell removed) at the new radius less that at
        the old radius.
    deficit : ndarray, shape (nblocks,)
        Output: energy each block could not pay [Hénon energy] (0 nearly always).
    """
    n = m.shape[0]
    nb = (n + BLOCK - 1) // BLOCK
    for b in prange(nb):
        owed = 0.0
        for i in range(b * BLOCK, min(n, (b + 1) * BLOCK)):
            s = offset + i
            rn = r_all[s]
            j = old_index[i]
            ro = r_old_all[j]
            ms = m[i]
            rmax_ = rn if rn > ro else ro
            u_nn = phi_all[s] + ms / rn
            u_no = phi_at_old[j] + ms / rmax_
            v2 = vr[i] * vr[i] + vt[i] * vt[i]
            v2new = v2 + dphi_old[i] + (u_no - u_nn)
            if v2new <= 0.0:
                owed += 0.5 * ms * (v2 - v2new)
                continue
            if v2 > 0.0:
                f = np.sqrt(v2new / v2)
                vr[i] *= f
                vt[i] *= f
            else:
                vt[i] = np.sqrt(v2new)
            if owed > 0.0:
                ke = 0.5 * ms * v2new
                pay = TAKE_FRACTION * ke
                if pay > owed:
                    pay = owed
                g = np.sqrt((ke - pay) / ke)
                vr[i] *= g
                vt[i] *= g
                owed -= pay
        deficit[b] = owed


def correct_velocities_reference(r_all, m_all, offset, m, r_old, vr, vt, phi_oo, phi_on):
    """Plain version of :func:`correct_velocities` from the shell sums of eq 1.

    ``r_all, m_all`` are the new sorted radii and masses, ``r_old`` each local star's radius
    before the orbit step, ``phi_oo, phi_on`` the old potential (own shell removed) at its old
    and new radius (the kernel takes their difference).  Returns ``(vr, vt, deficit)`` (new
    arrays).
    """
    r_all = np.asarray(r_all, dtype=float)
    m_all = np.asarray(m_all, dtype=float)
    vr = np.array(vr, dtype=float)
    vt = np.array(vt, dtype=float)

    def potential(x):  # all shells: -(mass inside x)/x - sum of m_k/r_k outside
        inside = r_all <= x
        return -m_all[inside].sum() / x - (m_all[~inside] / r_all[~inside]).sum()

    n = len(m)
    deficit = np.zeros((n + BLOCK - 1) // BLOCK)
    for b in range(deficit.size):
        owed = 0.0
        for i in range(b * BLOCK, min(n, (b + 1) * BLOCK)):
            rn, ro, ms = r_all[offset + i], r_old[i], m[i]
            u_nn = potential(rn) + ms / rn
            u_no = potential(ro) + ms / max(rn, ro)
            v2 = vr[i] ** 2 + vt[i] ** 2
            v2new = v2 + (phi_on[i] - phi_oo[i]) + (u_no - u_nn)
            if v2new <= 0.0:
                owed += 0.5 * ms * (v2 - v2new)
                continue
            if v2 > 0.0:
                vr[i] *= np.sqrt(v2new / v2)
                vt[i] *= np.sqrt(v2new / v2)
            else:
                vt[i] = np.sqrt(v2new)
            if owed > 0.0:
                ke = 0.5 * ms * v2new
                pay = min(TAKE_FRACTION * ke, owed)
                vr[i] *= np.sqrt((ke - pay) / ke)
                vt[i] *= np.sqrt((ke - pay) / ke)
                owed -= pay
        deficit[b] = owed
    return vr, vt, deficit


@njit(cache=True)
def block_sums(x, block):
    """Sums of ``x`` over consecutive blocks of ``block`` elements, in a fixed order.

    Summing these block sums (gathered in global block order) gives a total that does not
    depend on how stars are split over MPI ranks, because rank boundaries are block boundaries.
    """
    n = x.shape[0]
    nb = (n + block - 1) // block
    out = np.zeros(nb)
    for b in range(nb):
        acc = 0.0
        for i in range(b * block, min(n, (b + 1) * block)):
            acc += x[i]
        out[b] = acc
    return out


@njit(cache=True)
def block_kinetic(m, vr, vt, block):
    """``block_sums(0.5 * m * (vr**2 + vt**2), block)`` in one pass without temporaries: the
    same products and sums in the same order, so the same bits [Hénon energy]."""
    n = m.shape[0]
    nb = (n + block - 1) // block
    out = np.zeros(nb)
    for b in range(nb):
        acc = 0.0
        for i in range(b * block, min(n, (b + 1) * block)):
            acc += 0.5 * m[i] * (vr[i] * vr[i] + vt[i] * vt[i])
        out[b] = acc
    return out


@njit(cache=True)
def scale_blocks(vr, vt, factor, block):
    """Multiply the velocities of block ``b`` (rows ``b * block ..``) by ``factor[b]``, in
    place.  Blocks whose factor is exactly 1 are skipped: ``x * 1.0`` is ``x``, so the bits are
    those of multiplying every row, and a debt paid by a few blocks touches only theirs."""
    n = vr.shape[0]
    for b in range(factor.shape[0]):
        f = factor[b]
        if f == 1.0:
            continue
        for i in range(b * block, min(n, (b + 1) * block)):
            vr[i] = vr[i] * f
            vt[i] = vt[i] * f


@njit(cache=True)
def settle_debts(debts, kinetic, fraction):
    """Carry block debts outward: block ``b`` pays up to ``fraction * kinetic[b]``.

    Parameters
    ----------
    debts, kinetic : ndarray, shape (nblocks,)
        Energy each block could not pay itself, and each block's kinetic energy, in global
        block order.
    fraction : float
        Largest share of a block's kinetic energy it may give.

    Returns
    -------
    pay : ndarray
        Energy taken from each block.
    left : float
        Debt still open after the outermost block.
    """
    nb = debts.shape[0]
    pay = np.zeros(nb)
    carry = 0.0
    for b in range(nb):
        cap = fraction * kinetic[b]
        if carry > 0.0:
            take = carry if carry < cap else cap
            pay[b] = take
            carry -= take
        carry += debts[b]
    return pay, carry
