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

from physics.potential import locate_radius, potential_below, radius_lookup_table

#: Stars per block (the MPI decomposition's unit): the deficit is settled inside a block.
BLOCK = 20


#: Largest fraction of a star's kinetic energy that may be taken to pay another's deficit.
TAKE_FRACTION = 0.8


@njit(cache=True, parallel=True)
def correct_velocities(r_all, phi_all, mcum_all, offset, m, r_old, vr, vt, phi_oo, phi_on,
                       deficit):
    """Apply the energy correction in place.

    Where ``v_new^2 <= 0`` the star keeps its sampled velocity (as the C code does) and the
    energy it should have lost, ``m (v_s^2 - v_new^2) / 2``, is taken from the following stars
    of the same 20-star block (at most :data:`TAKE_FRACTION` of each one's kinetic energy, the
    ratio vr/vt kept).  What a block cannot pay is returned in ``deficit`` (one entry per block)
    for the caller to take from all stars; blocks are global, so the result does not depend on
    the number of MPI ranks or threads.

    Parameters
    ----------
    r_all, phi_all, mcum_all : ndarray
        Replicated radii, potential and enclosed mass after the sort (new potential).
    offset : int
        Global index of local star 0.
    m, r_old : ndarray
        Local masses and radii before the orbit step.
    vr, vt : ndarray
        Sampled velocities at the new radius; corrected in place.
    phi_oo, phi_on : ndarray
        Old potential (own shell removed) at the old and at the new radius.
    deficit : ndarray, shape (nblocks,)
        Output: energy each block could not pay [Hénon energy] (0 nearly always).
    """
    n = m.shape[0]
    lut, lut_lo, lut_inv = radius_lookup_table(r_all, 4)
    nb = (n + BLOCK - 1) // BLOCK
    for b in prange(nb):
        owed = 0.0
        for i in range(b * BLOCK, min(n, (b + 1) * BLOCK)):
            s = offset + i
            rn = r_all[s]
            ro = r_old[i]
            ms = m[i]
            rmax_ = rn if rn > ro else ro
            u_nn = phi_all[s] + ms / rn
            k = locate_radius(ro, r_all, lut, lut_lo, lut_inv)
            u_no = potential_below(r_all, phi_all, mcum_all, k, ro) + ms / rmax_
            v2 = vr[i] * vr[i] + vt[i] * vt[i]
            v2new = v2 + (phi_on[i] - phi_oo[i]) + (u_no - u_nn)
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
