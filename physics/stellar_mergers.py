"""Collisions of two stars through BSE: the merge rule's product (:func:`merge_pair`).

Part of stellar evolution through COSMIC (:mod:`physics.stellar_evolution` holds the state,
the calls and their outcomes); kept apart because a collision is one more way of calling
``evolv2``: the two stars in contact, evolved for a year until BSE merges them.

Units: Msun, Rsun, Myr (BSE's); no MPI, no files.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from physics.stellar_evolution import (
    DESTROYED,
    MERGED_1,
    MERGED_2,
    Batch,
    StellarEvolutionError,
    evolve,
)

#: Duration of the evolv2 call that merges a colliding pair [Myr] (1 yr, as CMC-COSMIC).
MERGE_DT = 1e-6
#: Tries of :func:`merge_pair`: try k uses a separation (R1 + R2) / k, as CMC-COSMIC.
MERGE_TRIES = 9


def merge_pair(kstar: Any, mass: Any, rad: Any, q: Mapping[str, Any], t: float, z: float,
               seed: int, pts1_highmass_cutoff: float = 5.0) -> dict[str, Any] | None:
    """The product of two stars that collide (sticky spheres), made by BSE.

    The two stars are put in a circular contact binary, ``a = R1 + R2``, and evolved from
    ``t`` to ``t + MERGE_DT`` with :func:`physics.stellar_evolution.evolve` (COSMIC's wheel
    does not expose ``mix``): both fill their Roche lobes, and BSE merges them (``mix``) or
    runs a common envelope.
    When that leaves two stars (a common envelope that ejects), the pair is tried again
    from the same state with ``a = (R1 + R2) / k`` for k = 2 .. :data:`MERGE_TRIES`, from
    k = 3 on with the common-envelope ``lambdaf`` set to ``-1e-4 / k`` (a fixed, tiny
    lambda: the envelope cannot be ejected), as CMC-COSMIC's ``merge_two_stars`` does; a
    giant that a small star falls into swallows it.  The product's ``zams`` is its BSE
    ``mass0`` (its effective initial mass; CMC's pts1 rule reads it).

    Parameters
    ----------
    kstar, mass, rad : array_like, (2,)
        Types, masses [Msun] and radii [Rsun] of the two stars at ``t``.
    q : Mapping[str, array_like (2,)]
        Their :data:`physics.stellar_evolution.MEMBER_QUANTITIES` (missing ones are 0).
    t : float
        Time of their BSE state [Myr]; both must be evolved to ``t``.
    z : float
        Metallicity.
    seed : int
        Seed of the BSE call, in [1, 2**31 - 2].
    pts1_highmass_cutoff : float
        As in :func:`physics.stellar_evolution.evolve`.

    Returns
    -------
    dict or None
        ``None`` if nothing is left; else the product: ``kstar`` (int), ``mass``, ``rad``,
        every :data:`physics.stellar_evolution.MEMBER_QUANTITIES` key (floats), ``tphys``
        (= t + MERGE_DT), ``dv`` (ndarray (3,), km/s, a supernova kick during the merger),
        ``tries`` (the k used), ``merger_type`` (BSE's code).

    Raises
    ------
    StellarEvolutionError
        If no separation made BSE leave a single star (``index`` 0), or BSE failed.
    """
    from cosmic import _evolvebin as bse

    a0 = float(np.sum(rad))
    lambdaf = float(bse.cevars.lambdaf)
    for k in range(1, MERGE_TRIES + 1):
        # each try starts from the parts' state (Batch copies it; evolve writes the batch)
        b = Batch(np.asarray(kstar).reshape(1, 2), np.asarray(mass).reshape(1, 2),
                  np.asarray(rad).reshape(1, 2),
                  {n: np.asarray(v, float).reshape(1, 2) for n, v in q.items()},
                  tphys=t, sep=a0 / k, ecc=0.0, seed=seed)
        if k > 2:  # CMC-COSMIC: force the merger in the common envelope
            bse.cevars.lambdaf = -1.0e-4 / k
        try:
            r = evolve(b, t + MERGE_DT, z, pts1_highmass_cutoff)
        finally:
            bse.cevars.lambdaf = lambdaf
        if r.outcome[0] == DESTROYED:
            return None
        if r.outcome[0] in (MERGED_1, MERGED_2):
            j = 0 if r.outcome[0] == MERGED_1 else 1
            out: dict[str, Any] = {"kstar": int(b.kstar[0, j]), "mass": float(b.mass[0, j]),
                                   "rad": float(b.rad[0, j])}
            out.update({n: float(v[0, j]) for n, v in b.q.items()})
            out.update(zams=out["mass0"], tphys=float(b.tphys[0]), dv=r.dv[0, j].copy(),
                       tries=k, merger_type=int(r.merger_type[0]))
            return out
    raise StellarEvolutionError(0, f"merge_pair: BSE left two stars for every separation "
                                   f"(R1+R2)/k, k <= {MERGE_TRIES}: kstar={list(kstar)} "
                                   f"mass={list(mass)} rad={list(rad)} t={t!r}")
