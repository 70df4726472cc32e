"""Binaries in the cluster: strong encounters, three-body binaries and wide-binary breaking.

One step of a cluster with binaries (the paper's section 2, steps 2 and 3; CMC-COSMIC's
``dynamics_apply``, ``binint_do``, ``perform_3bb`` and ``break_wide_binaries``):

1. :func:`physics.relaxation.relax_or_select_pairs` relaxes the radial-neighbour pairs; a pair
   holding a binary has a strong encounter instead with probability ``P = n W S dt``.
2. :func:`select_three_body` picks the triplets of single stars (rows 3t, 3t+1, 3t+2 of a
   20-star block) that form a binary, with the rate of Morscher et al. (2013, 2015) for the
   triplet's two heaviest stars, as CMC-COSMIC's ``dynamics_apply``.
3. :func:`select_wide_binaries` picks binaries whose apocentre exceeds
   ``wide_factor n^(-1/3)`` of the local density.
4. :func:`apply_events` runs the encounters through the few-body integrator
   (:mod:`physics.fewbody`), forms the three-body binaries, breaks the wide binaries, and writes
   the products back into the table.

Products take the radial slots of the stars that met: the first product the first star's, the
second the second's, any further one (an ionisation) the second's again; a merged pair frees a
slot.  CMC puts them at the pair's mass-weighted mean radius; the two differ by less than the
spacing of radial neighbours, and slots keep the potential's star order, which the orbit
kernel needs (:func:`physics.orbits.new_orbits_rows` takes each row's slot).  A block keeps its
rows together, so every block's sub-stream draws the same numbers on any number of ranks.

Random numbers: each event draws from its block's sub-stream, after the block's relaxation
draws, in a fixed order: a block's encounters (pair order), then its three-body formations
(triplet order).  Encounter: 9 (set-up, :data:`physics.fewbody.DRAWS_PER_ENCOUNTER`) + 1
(orientation about the relative velocity); three-body formation: 7.

Energy: an encounter changes the pair's kinetic energy by ``-(change of internal energy)`` up to
the integrator's error; three-body formation by ``-E_b``.  Breaking a wide binary (or splitting
a stable triple into its inner binary and outer star) needs ``|E_b|`` (``|E_outer|``), taken
from the kinetic energy of the other stars of the block, at most
:data:`physics.energy.TAKE_FRACTION` of it.  What the block cannot pay is its debt
(``debts``): the caller carries it outward through the following blocks, each paying at most
the same fraction of its kinetic energy, across ranks (CMC-COSMIC's break_wide_binaries carries
its E_excess outward star by star through every rank); only a caller that passes no ``debts``
list books it as ``e_oops``.

Units: Hénon (G = 1, M0 = 1); no MPI, no files.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from parallel.decomposition import MIN_CHUNK
from parallel.rng import taus_uniform
from physics import fewbody
from physics.binaries import (
    binding_energy,
    three_body_binary_kinematics,
    three_body_hardness,
    three_body_rate,
)
from physics.energy import TAKE_FRACTION
from physics.relaxation import local_number_density

log = logging.getLogger("cmc.encounters")

#: Triplets per 20-star block (rows 0-2, 3-5, ..., 15-17).
TRIPLETS_PER_BLOCK = MIN_CHUNK // 3
#: Object ids of binaries formed in a run: this plus the smaller member id (unique, and apart
#: from every star id).
NEW_BINARY_ID_BASE = 1 << 50
#: Uniform draws of a three-body formation: 2 azimuths, 2 hardness, 1 eccentricity, 2 direction.
DRAWS_THREE_BODY = 7
#: BSE stellar type of a black hole (for ``three_body = bh``).
BLACK_HOLE = 14
#: Default neighbours on each side for the local density of a triplet
#: (``binaries.three_body_neighbours``; CMC-COSMIC's BH_AVEKERNEL, 10 by default, not the
#: relaxation's 20: in a core of a few stars the wider window dilutes n, and the rate goes as
#: n^2).
THREE_BODY_NEIGHBOURS = 10

#: Counters of :func:`apply_events`, in the order of the array it returns.
COUNT_NAMES = (
    "n_binary_single", "n_binary_binary", "n_exchanges", "n_ionisations", "n_mergers",
    "n_triples", "n_encounters_discarded", "n_three_body", "n_wide_broken",
    "e_encounters", "e_three_body", "e_taken", "e_oops", "e_slots",
    "n_ejected", "m_ejected", "e_ejected", "e_bind_ejected", "e_mergers", "e_integrator",
)
#: Index of each counter in the array :func:`apply_events` returns.
C = {name: k for k, name in enumerate(COUNT_NAMES)}


@dataclass(frozen=True)
class BinaryPhysics:
    """Switches and parameters of binary processes (from ``[binaries]``).

    Attributes
    ----------
    binary_single, binary_binary : bool
        Strong binary-single / binary-binary encounters.
    x_bs, x_bb : float
        Pericentre caps in units of a (CMC's XBS, XBB).
    three_body : str
        "off", "bh" (black holes only, CMC's default) or "all".
    eta_min, eta_max : float
        Hardness range of new three-body binaries (Morscher et al. 2015; CMC's 5 and 50).
    three_body_neighbours : int
        Radial neighbours on each side for a triplet's local density (CMC's BH_AVEKERNEL).
    wide_factor : float
        Break binaries whose apocentre exceeds ``wide_factor n^(-1/3)`` (CMC: 0.1); 0: off.
    wide_hardness_min : float
        Also break binaries softer than this (:func:`select_wide_binaries`); 0: off.
    radius_unit : float
        One solar radius in the cluster's length unit: stellar radii (``rad``, ``bin_rad*``,
        Rsun) become sticky spheres in encounters, which may merge.  0 (until a run has a
        physical scale): point masses, no mergers.
    settings : EncounterSettings
        Few-body integrator settings.
    """

    binary_single: bool = True
    binary_binary: bool = True
    x_bs: float = 2.0
    x_bb: float = 2.0
    three_body: str = "bh"
    eta_min: float = 5.0
    eta_max: float = 50.0
    three_body_neighbours: int = THREE_BODY_NEIGHBOURS
    wide_factor: float = 0.1
    wide_hardness_min: float = 0.0
    radius_unit: float = 0.0
    settings: fewbody.EncounterSettings = fewbody.EncounterSettings()


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
                      neighbours, formed, block_stats, tb_stats):
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
            if vrel <= 0.0:
                continue
            h1, h2, h3 = _heaviest_first(m, i)
            dens = local_number_density(r_all, offset + h1, n0, neighbours) * n0
            p = three_body_rate(dens, vrel, m[h1], m[h2], m[h3], eta_min) * dt_nb * per_star
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


# ------------------------------------------------------------------------ geometry helpers
def pair_velocities(vr_i: float, vt_i: float, vr_j: float, vt_j: float, phi: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """3-D velocities of a pair in its frame (z radial, star i's transverse motion along x,
    star j's at angle phi), as the relaxation pass sets them up."""
    return (np.array([vt_i, 0.0, vr_i]),
            np.array([vt_j * math.cos(phi), vt_j * math.sin(phi), vr_j]))


def relative_state(state: fewbody.InitialState) -> tuple[np.ndarray, np.ndarray, float]:
    """Position and velocity of object 2's centre of mass relative to object 1's, and their
    total mass, at the start of an encounter."""
    g1, g2 = list(state.groups[0]), list(state.groups[1])
    m = state.m
    m1, m2 = m[g1].sum(), m[g2].sum()
    x = (m[g2] @ state.x[g2]) / m2 - (m[g1] @ state.x[g1]) / m1
    v = (m[g2] @ state.v[g2]) / m2 - (m[g1] @ state.v[g1]) / m1
    return x, v, float(m1 + m2)


def incoming_direction(state: fewbody.InitialState) -> np.ndarray:
    """Unit vector of object 2's velocity relative to object 1 at infinity (incoming)."""
    x, v, mu = relative_state(state)
    h = np.cross(x, v)
    hn = float(np.linalg.norm(h))
    if hn <= 1e-14 * float(np.linalg.norm(x)) * float(np.linalg.norm(v)):
        return v / float(np.linalg.norm(v))  # head-on
    e_vec = np.cross(v, h) / mu - x / float(np.linalg.norm(x))
    ecc = float(np.linalg.norm(e_vec))
    e_hat = e_vec / ecc
    q_hat = np.cross(h / hn, e_hat)
    # incoming asymptote: the position direction at f -> -f_inf (cos f_inf = -1/e), reversed
    cos_f = -1.0 / ecc
    sin_f = math.sqrt(max(0.0, 1.0 - cos_f * cos_f))
    return -(cos_f * e_hat - sin_f * q_hat)


def rotation_onto(a: np.ndarray, b: np.ndarray, angle: float) -> np.ndarray:
    """Rotation taking unit vector ``a`` to unit vector ``b``, then by ``angle`` about ``b``."""
    v = np.cross(a, b)
    c = float(a @ b)
    if c < -1.0 + 1e-12:  # opposite: half a turn about any axis perpendicular to a
        axis = np.cross(a, [1.0, 0.0, 0.0])
        if np.linalg.norm(axis) < 1e-6:
            axis = np.cross(a, [0.0, 1.0, 0.0])
        axis /= np.linalg.norm(axis)
        align = 2.0 * np.outer(axis, axis) - np.eye(3)
    else:
        vx = np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])
        align = np.eye(3) + vx + vx @ vx / (1.0 + c)
    k = np.array([[0.0, -b[2], b[1]], [b[2], 0.0, -b[0]], [-b[1], b[0], 0.0]])
    spin = np.eye(3) + math.sin(angle) * k + (1.0 - math.cos(angle)) * (k @ k)
    return spin @ align


# ---------------------------------------------------------------------------- the events
class _Block:
    """Rows of one block while its events are applied: field values per row (dicts)."""

    def __init__(self, fields: dict[str, np.ndarray], b: int, n: int, offset: int,
                 r_all: np.ndarray, phi_all: np.ndarray):
        self.r_all = r_all
        self.phi_all = phi_all
        self.b = b
        self.i0 = b * MIN_CHUNK
        self.i1 = min(self.i0 + MIN_CHUNK, n)
        self.rows: list[dict | None] = [
            {k: v[i] for k, v in fields.items()} for i in range(self.i0, self.i1)]
        self.gidx = [offset + i for i in range(self.i0, self.i1)]
        self.extra: list[tuple[int, dict]] = []
        #: products ejected at once: (row as it left, radius, specific energy)
        self.ejected: list[tuple[dict, float, float]] = []
        #: per event placed: (its first input's slot, {slot: mass change}), in event order
        self.changes: list[tuple[int, dict[int, float]]] = []
        #: energy the block's events needed and its rows could not give [Hénon energy]
        self.owed = 0.0

    def row(self, i: int) -> dict:
        return self.rows[i - self.i0]

    def place(self, inputs: list[int], products: list[tuple[int, dict]], counts: np.ndarray
              ) -> None:
        """Replace the rows ``inputs`` by ``products`` (each with the row whose slot it takes;
        a slot taken twice gets an extra row at the block's end), keeping K + W exact.

        Moving mass between the slots changes the shells' energy ``W`` by ``dW``; the products'
        speeds are scaled by one factor so that their kinetic energy changes by ``-dW``
        (``e_slots``), or, if they have too little, stopped and the rest owed by the block.
        A product then unbound from the cluster (``phi + v^2/2 >= 0`` in the potential of all
        other shells as they now are) leaves at once with that energy (``*_ejected``): its shell
        is never in the potential the orbits are drawn in, so the budget stays exact (removing
        a star from a core of a few stars in the next step's potential change instead cost up
        to 1e-3 of E0 per ejection).
        """
        g_of = {i: self.gidx[i - self.i0] for i in inputs}
        old = [(g_of[i], float(self.row(i)["m"])) for i in inputs]
        new = [(g_of[i], float(rec["m"])) for i, rec in products]
        dw = _shell_energy_change(self.r_all, self.phi_all, old, new)
        k = _kinetic([rec for _, rec in products])
        if dw != 0.0:
            f = math.sqrt(max(0.0, 1.0 - dw / k)) if k > 0.0 else 0.0
            for _, rec in products:
                rec["vr"] *= f
                rec["vt"] *= f
            counts[C["e_slots"]] += -dw if k - dw >= 0.0 else k
            if k - dw < 0.0:
                self.owed += dw - k
        products = list(products)
        ejected = True
        while ejected and products:
            ejected = False
            for k, (i, rec) in enumerate(products):
                # the other shells as they now are: old ones out, the other products in
                x = self.r_all[g_of[i]]
                phi = _outside_potential(self.r_all, self.phi_all, g_of[i], old)
                phi -= sum(float(o["m"]) / max(x, self.r_all[g_of[io]])
                           for kk, (io, o) in enumerate(products) if kk != k)
                e = float(rec["m"]) * (phi + 0.5 * (rec["vr"] ** 2 + rec["vt"] ** 2))
                if e >= 0.0:
                    self.ejected.append((dict(rec), x, e / float(rec["m"])))
                    counts[C["n_ejected"]] += 1
                    counts[C["m_ejected"]] += float(rec["m"])
                    counts[C["e_ejected"]] += e
                    if rec["binind"] >= 0:
                        counts[C["e_bind_ejected"]] += float(binding_energy(
                            rec["bin_m1"], rec["bin_m2"], rec["bin_a"]))
                    del products[k]
                    ejected = True
                    break
        for i in inputs:
            self.rows[i - self.i0] = None
        dm: dict[int, float] = {}
        for g, m in old:
            dm[g] = dm.get(g, 0.0) - m
        for i, rec in products:
            dm[g_of[i]] = dm.get(g_of[i], 0.0) + float(rec["m"])
            if self.rows[i - self.i0] is None:
                self.rows[i - self.i0] = rec
            else:
                self.extra.append((g_of[i], rec))
        self.changes.append((g_of[inputs[0]], dm))

    def take_energy(self, amount: float, skip: list[dict]) -> tuple[float, float]:
        """Take ``amount`` of kinetic energy from this block's rows other than the records in
        ``skip`` (the event's products), at most TAKE_FRACTION of theirs, by one velocity
        factor.  Returns (taken, left)."""
        mine = {id(r) for r in skip}
        others = [r for r in self.rows + [r for _, r in self.extra]
                  if r is not None and id(r) not in mine]
        ke = sum(0.5 * r["m"] * (r["vr"] ** 2 + r["vt"] ** 2) for r in others)
        take = min(amount, TAKE_FRACTION * ke)
        if take > 0.0:
            f = math.sqrt(1.0 - take / ke)
            for r in others:
                r["vr"] *= f
                r["vt"] *= f
        return take, amount - take


def _outside_potential(r_all: np.ndarray, phi_all: np.ndarray, g: int,
                       removed: list[tuple[int, float]]) -> float:
    """Potential at slot ``g`` of all shells but the ``removed`` ones (slot, mass)."""
    x = r_all[g]
    return phi_all[g] + sum(mq / max(x, r_all[gq]) for gq, mq in removed)


def _shell_energy_change(r_all: np.ndarray, phi_all: np.ndarray,
                         old: list[tuple[int, float]], new: list[tuple[int, float]]) -> float:
    """Change of the shells' pair energy ``W = -sum m_a m_b / max(r_a, r_b)`` when the shells
    ``old`` (slot, mass) are replaced by ``new`` (slots are indices of ``r_all``; ``phi_all``
    the potential of all shells at them)."""
    def outside(g: int) -> float:
        return _outside_potential(r_all, phi_all, g, old)

    def pairs(shells: list[tuple[int, float]]) -> float:
        return -sum(ma * mb / max(r_all[ga], r_all[gb])
                    for k, (ga, ma) in enumerate(shells) for gb, mb in shells[k + 1:])

    return (sum(m * outside(g) for g, m in new) + pairs(new)
            - sum(m * outside(g) for g, m in old) - pairs(old))


def _members(rec: dict) -> dict[int, dict]:
    """Member stars of a row: id -> {m, m_msun, rad, startype}."""
    if rec.get("binind", -1) >= 0:
        return {int(rec["bin_id1"]): {"m": rec["bin_m1"], "m_msun": rec["bin_m1_msun"],
                                      "rad": rec["bin_rad1"], "startype": rec["bin_startype1"]},
                int(rec["bin_id2"]): {"m": rec["bin_m2"], "m_msun": rec["bin_m2_msun"],
                                      "rad": rec["bin_rad2"], "startype": rec["bin_startype2"]}}
    return {int(rec["id"]): {"m": rec["m"], "m_msun": rec["m_msun"], "rad": rec["rad"],
                             "startype": rec["startype"]}}


def _object(rec: dict, radius_unit: float) -> fewbody.StarObject:
    if rec["binind"] >= 0:
        return fewbody.binary((int(rec["bin_id1"]), int(rec["bin_id2"])),
                              (float(rec["bin_m1"]), float(rec["bin_m2"])),
                              float(rec["bin_a"]), float(rec["bin_e"]),
                              (float(rec["bin_rad1"]) * radius_unit,
                               float(rec["bin_rad2"]) * radius_unit))
    return fewbody.single(int(rec["id"]), float(rec["m"]), float(rec["rad"]) * radius_unit)


def _leaf(q: fewbody.Product, members: dict[int, dict], radius_unit: float) -> int:
    """Star id of a single body of the outcome; a merger product becomes a new member under
    its smallest id (mass and Msun mass summed, radius from the integrator, the largest
    stellar type: stellar evolution will decide)."""
    if len(q.ids) == 1:
        return q.ids[0]
    parts = [members[i] for i in q.ids]
    sid = min(q.ids)
    members[sid] = {"m": sum(p["m"] for p in parts), "m_msun": sum(p["m_msun"] for p in parts),
                    "rad": q.radius / radius_unit if radius_unit > 0 else 0.0,
                    "startype": max(p["startype"] for p in parts)}
    return sid


def _single_record(template: dict, sid: int, mem: dict, v: np.ndarray) -> dict:
    rec = dict(template)
    rec.update(id=sid, m=mem["m"], m_msun=mem["m_msun"], rad=mem["rad"],
               startype=mem["startype"], binind=-1, vr=float(v[2]),
               vt=math.hypot(float(v[0]), float(v[1])))
    for k in rec:
        if k.startswith("bin_"):
            rec[k] = -1 if k.startswith("bin_id") else (1 if "startype" in k else 0.0)
    return rec


def _binary_record(template: dict, id1: int, id2: int, members: dict[int, dict], a: float,
                   e: float, v: np.ndarray, old_ids: dict[tuple[int, int], int]) -> dict:
    m1, m2 = members[id1], members[id2]
    rec = dict(template)
    key = (min(id1, id2), max(id1, id2))
    rec.update(id=old_ids.get(key, NEW_BINARY_ID_BASE + key[0]), m=m1["m"] + m2["m"],
               m_msun=m1["m_msun"] + m2["m_msun"], rad=0.0, startype=template["startype"],
               binind=0, vr=float(v[2]), vt=math.hypot(float(v[0]), float(v[1])),
               bin_id1=id1, bin_id2=id2, bin_m1=m1["m"], bin_m2=m2["m"], bin_a=float(a),
               bin_e=float(e), bin_rad1=m1["rad"], bin_rad2=m2["rad"],
               bin_startype1=m1["startype"], bin_startype2=m2["startype"],
               bin_m1_msun=m1["m_msun"], bin_m2_msun=m2["m_msun"])
    return rec


def _kinetic(recs) -> float:
    return sum(0.5 * r["m"] * (r["vr"] ** 2 + r["vt"] ** 2) for r in recs)


def _internal(recs) -> float:
    """Internal (binding) energy of the binaries among ``recs``, as E_binding counts it."""
    return sum(float(binding_energy(r["bin_m1"], r["bin_m2"], r["bin_a"]))
               for r in recs if r["binind"] >= 0)


def _encounter_setup(blk: _Block, i: int, w: float, states: np.ndarray, phys: BinaryPhysics
                     ) -> tuple[fewbody.InitialState, float]:
    """Draw the encounter of local rows (i, i + 1): its initial state and the spin angle of
    its frame about the relative velocity (10 uniforms from the block's sub-stream)."""
    obj1 = _object(blk.row(i), phys.radius_unit)
    obj2 = _object(blk.row(i + 1), phys.radius_unit)
    both = obj1.is_binary and obj2.is_binary
    rp = phys.x_bb * (obj1.a + obj2.a) if both else phys.x_bs * max(obj1.a, obj2.a)
    state = fewbody.sample_encounter(obj1, obj2, w, rp, states, blk.b, phys.settings.tidal_tol)
    return state, 2.0 * math.pi * taus_uniform(states, blk.b)


def _encounter(blk: _Block, i: int, phi: float, state: fewbody.InitialState, spin: float,
               out: fewbody.Outcome, counts: np.ndarray, radius_unit: float = 0.0) -> None:
    """Write back the products of the encounter of local rows (i, i + 1)."""
    j = i + 1
    ri, rj = blk.row(i), blk.row(j)
    obj1, obj2 = state.objects
    counts[C["n_binary_binary"] if obj1.is_binary and obj2.is_binary
           else C["n_binary_single"]] += 1
    if out is None or not out.valid:
        counts[C["n_encounters_discarded"]] += 1
        if out is not None:
            log.info("encounter of %s and %s discarded (%s)", obj1.ids, obj2.ids, out.reason)
        return
    v_i, v_j = pair_velocities(ri["vr"], ri["vt"], rj["vr"], rj["vt"], phi)
    mi, mj = ri["m"], rj["m"]
    v_cm = (mi * v_i + mj * v_j) / (mi + mj)
    w_vec = v_j - v_i
    rot = rotation_onto(incoming_direction(state), w_vec / float(np.linalg.norm(w_vec)), spin)
    members = {**_members(ri), **_members(rj)}
    old_ids = {}
    for rec in (ri, rj):
        if rec["binind"] >= 0:
            a_, b_ = int(rec["bin_id1"]), int(rec["bin_id2"])
            old_ids[(min(a_, b_), max(a_, b_))] = int(rec["id"])
    k_before = _kinetic((ri, rj))
    eb_before = _internal((ri, rj))
    new_recs: list[dict] = []
    e_outer = 0.0
    for p in out.products:
        v = v_cm + rot @ p.v_inf
        parts = [p]
        if p.n_bodies == 3:  # stable triple: inner binary and outer star go their own ways
            e_outer += float(binding_energy(p.children[0].m, p.children[1].m, p.a))
            parts = list(p.children)
            counts[C["n_triples"]] += 1
        for q in parts:
            if q.is_single:
                sid = _leaf(q, members, radius_unit)
                new_recs.append(_single_record(ri, sid, members[sid], v))
            else:
                c1, c2 = q.children
                new_recs.append(_binary_record(ri, _leaf(c1, members, radius_unit),
                                               _leaf(c2, members, radius_unit), members, q.a,
                                               q.e, v, old_ids))
    counts[C["n_exchanges"]] += out.exchanges
    # binaries destroyed
    counts[C["n_ionisations"]] += max(0, out.n_binaries_in - out.n_binaries_out)
    counts[C["n_mergers"]] += out.mergers
    # mechanical energy changed by mergers (a merged pair's orbital energy goes into the
    # product: its negative binding energy leaves the budget), booked so E_tot is kept
    counts[C["e_mergers"]] += out.de_merger
    dk = _kinetic(new_recs) - k_before
    counts[C["e_encounters"]] += dk
    # what the cluster's budget changes by, all of it the integrator's energy error: the
    # products' kinetic and internal energy (a stable triple's outer orbit is paid for
    # below, from the neighbours or as e_oops, so it counts), less what mergers dissipated
    counts[C["e_integrator"]] += dk + _internal(new_recs) - eb_before + e_outer - out.de_merger
    blk.place([i, j], [(i if k == 0 else j, rec) for k, rec in enumerate(new_recs)], counts)
    if e_outer < 0.0:
        taken, left = blk.take_energy(-e_outer, new_recs)
        counts[C["e_taken"]] += taken
        blk.owed += left


def _three_body_draws(blk: _Block, states: np.ndarray) -> np.ndarray:
    """The uniforms of a three-body formation, in order: two azimuths, hardness (term, value),
    eccentricity, direction (two)."""
    return np.array([taus_uniform(states, blk.b) for _ in range(DRAWS_THREE_BODY)])


def _three_body(blk: _Block, i: int, bstats: np.ndarray, u: np.ndarray,
                phys: BinaryPhysics, counts: np.ndarray) -> None:
    """The two most massive stars of rows i..i+2 form a binary (at row i's slot), the third
    carries the recoil (at row i+2's); Morscher et al. (2015) as CMC-COSMIC does it: hardness
    ``eta`` gives ``E_b = -eta <m> sigma^2 / 2`` (``sigma`` the 3-D dispersion)."""
    recs = sorted((blk.row(i + k) for k in range(3)), key=lambda r: -r["m"])
    m = np.array([r["m"] for r in recs])
    a2 = 2.0 * math.pi * u[0]
    a3 = 2.0 * math.pi * u[1]
    v = np.array([[recs[0]["vt"], 0.0, recs[0]["vr"]],
                  [recs[1]["vt"] * math.cos(a2), recs[1]["vt"] * math.sin(a2), recs[1]["vr"]],
                  [recs[2]["vt"] * math.cos(a3), recs[2]["vt"] * math.sin(a3), recs[2]["vr"]]])
    m12 = m[0] + m[1]
    v12 = float(np.linalg.norm(v[0] - v[1]))
    v3 = float(np.linalg.norm(v[2] - (m[0] * v[0] + m[1] * v[1]) / m12))
    kk = 2.0 * (m.sum() / m12) * (v12 / v3) ** 2 if v3 > 0 else 0.0
    eta = three_body_hardness(kk, phys.eta_min, phys.eta_max, u[2], u[3])
    ecc = math.sqrt(u[4])
    u1, u2 = u[5], u[6]
    _, sigma2, m_mean = bstats
    e_bind = -0.5 * eta * m_mean * sigma2
    a = m[0] * m[1] / (-2.0 * e_bind)
    out_v = np.empty((2, 3))
    three_body_binary_kinematics(m, v, e_bind, u1, u2, out_v)
    members = {**_members(recs[0]), **_members(recs[1])}
    k_before = _kinetic(recs)
    id1, id2 = int(recs[0]["id"]), int(recs[1]["id"])
    binrec = _binary_record(recs[0], id1, id2, members, a, ecc, out_v[0], {})
    single = dict(recs[2])
    single["vr"] = float(out_v[1, 2])
    single["vt"] = math.hypot(float(out_v[1, 0]), float(out_v[1, 1]))
    counts[C["n_three_body"]] += 1
    counts[C["e_three_body"]] += _kinetic((binrec, single)) - k_before
    blk.place([i, i + 1, i + 2], [(i, binrec), (i + 2, single)], counts)


def _break_wide(blk: _Block, i: int, counts: np.ndarray) -> None:
    """Split the binary of row i into its two members at its centre-of-mass velocity."""
    rec = blk.row(i)
    members = _members(rec)
    v = np.array([rec["vt"], 0.0, rec["vr"]])
    (id1, mem1), (id2, mem2) = members.items()
    e_b = float(binding_energy(rec["bin_m1"], rec["bin_m2"], rec["bin_a"]))
    parts = [_single_record(rec, id1, mem1, v), _single_record(rec, id2, mem2, v)]
    blk.place([i], [(i, parts[0]), (i, parts[1])], counts)
    taken, left = blk.take_energy(-e_b, parts)
    counts[C["n_wide_broken"]] += 1
    counts[C["e_taken"]] += taken
    blk.owed += left


def _integrate_one(state: fewbody.InitialState, settings: fewbody.EncounterSettings
                   ) -> fewbody.Outcome | None:
    """One encounter; None (the encounter is discarded, and logged) if the integrator
    raised, so that an error never leaves other ranks waiting."""
    try:
        return fewbody.integrate(state, settings)
    except Exception:  # noqa: BLE001 -- any failure discards this encounter only
        log.exception("encounter of %s and %s failed", *(o.ids for o in state.objects))
        return None


def integrate_concurrently(states: list[fewbody.InitialState],
                           settings: fewbody.EncounterSettings) -> list[fewbody.Outcome | None]:
    """Integrate encounters on the numba thread count's worth of threads (the kernel releases
    the GIL); the outcomes do not depend on the number of threads."""
    import numba

    workers = min(len(states), numba.get_num_threads())
    if workers <= 1:
        return [_integrate_one(s, settings) for s in states]
    from concurrent.futures import ThreadPoolExecutor

    # longest first would balance better, but their cost is not known in advance
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda s: _integrate_one(s, settings), states))


def apply_events(fields: dict[str, np.ndarray], offset: int, r_all: np.ndarray,
                 phi_all: np.ndarray, states: np.ndarray, encounter: np.ndarray,
                 enc_phi: np.ndarray, enc_w: np.ndarray, formed: np.ndarray,
                 block_stats: np.ndarray, wide: np.ndarray, phys: BinaryPhysics,
                 integrate_all=None, ejected: list | None = None,
                 block_segments: np.ndarray | None = None,
                 debts: list | None = None) -> tuple:
    """Apply this step's encounters, three-body formations and wide-binary breaks.

    Parameters
    ----------
    fields : dict of ndarray
        The local star table (with the binary columns); not modified.
    offset : int
        Global index of local row 0.
    r_all, phi_all : ndarray
        Replicated radii and potential (the slots and their potential).
    states : ndarray of uint32, shape (nblocks, 4)
        Block sub-streams (advanced in place).
    encounter, enc_phi, enc_w : ndarray
        From :func:`physics.relaxation.relax_or_select_pairs`.
    formed, block_stats : ndarray
        From :func:`select_three_body`.
    wide : ndarray of bool
        From :func:`select_wide_binaries`.
    phys : BinaryPhysics
    integrate_all : callable, optional
        ``integrate_all(states, settings) -> outcomes`` (None for an encounter that failed);
        called exactly once, also with an empty list, so that a caller may make it a
        collective (the cluster spreads encounters over MPI ranks).  Default: this process's
        threads (:func:`integrate_concurrently`).
    ejected : list, optional
        Receives ``(row, r, E)`` of each product ejected at once (its fields as it left, its
        radius and specific energy), in block order: the escaper table's rows.
    block_segments : ndarray of int64, optional
        Bounds of the blocks of each rank a serial emulation stands for (``[0, nblocks]``
        under MPI): the counters are then kept per segment, each summed in event order as
        that rank sums its own, shape (S, len(COUNT_NAMES)).
    debts : list, optional
        Receives ``(global block, energy)`` of each block that owes energy its own rows could
        not give (to be carried outward, :func:`physics.energy.settle_debts`), in block order;
        without it the debt is booked as ``e_oops`` of the block's rank.

    Returns
    -------
    fields : dict of ndarray
        The new table (the input arrays when nothing happened).
    gidx, block_start : ndarray of int64
        Slot of each row in the replicated arrays, first row of each block (for
        :func:`physics.orbits.new_orbits_rows`).
    counts : ndarray
        This rank's counters, in the order of :data:`COUNT_NAMES` (per segment with
        ``block_segments``).
    slots, slot_mass : ndarray
        The slots of the blocks that changed and the mass now at each (the sum of the rows
        there; 0 where a row was freed): the caller updates the replicated masses with them,
        so that the orbits are drawn in the potential of the stars as they now are.
    """
    n = fields["m"].size
    nb = states.shape[0]
    bounds = np.array([0, nb]) if block_segments is None else np.asarray(block_segments)
    seg_counts = np.zeros((bounds.size - 1, len(COUNT_NAMES)))
    counts = seg_counts[0] if block_segments is None else seg_counts
    pairs = np.flatnonzero(encounter)
    trips = np.flatnonzero(formed)
    wides = np.flatnonzero(wide)
    integrate_all = integrate_all or integrate_concurrently
    if pairs.size + trips.size + wides.size == 0:
        integrate_all([], phys.settings)
        gidx = np.arange(offset, offset + n, dtype=np.int64)
        block_start = np.minimum(np.arange(nb + 1, dtype=np.int64) * MIN_CHUNK, n)
        return (fields, gidx, block_start, counts, np.zeros(0, np.int64), np.zeros(0),
                np.zeros((0, 3)))
    blocks: dict[int, _Block] = {}

    def block(b: int) -> _Block:
        if b not in blocks:
            blocks[b] = _Block(fields, b, n, offset, r_all, phi_all)
        return blocks[b]

    events = ([(2 * int(k) // MIN_CHUNK, 0, 2 * int(k)) for k in pairs]
              + [(int(t) // TRIPLETS_PER_BLOCK, 1,
                  int(t) // TRIPLETS_PER_BLOCK * MIN_CHUNK + 3 * (int(t) % TRIPLETS_PER_BLOCK))
                 for t in trips]
              + [(int(i) // MIN_CHUNK, 2, int(i)) for i in wides])
    events.sort()
    # 1. every draw, in the fixed order (block, kind, row)
    draws = []
    for b, kind, i in events:
        if kind == 0:
            draws.append(_encounter_setup(block(b), i, float(enc_w[i // 2]), states, phys))
        elif kind == 1:
            draws.append(_three_body_draws(block(b), states))
        else:
            draws.append(None)
    # 2. the encounters, concurrently (each a function of its initial state only)
    outcomes = integrate_all([d[0] for (_, kind, _), d in zip(events, draws, strict=True)
                              if kind == 0], phys.settings)
    # 3. write-back in the fixed order
    k_enc = 0
    for (b, kind, i), d in zip(events, draws, strict=True):
        blk = block(b)
        # the counters of the rank that owns block b (a view: updated in place)
        c = seg_counts[int(np.searchsorted(bounds, b, side="right")) - 1]
        if kind == 0:
            _encounter(blk, i, float(enc_phi[i // 2]), d[0], d[1], outcomes[k_enc], c,
                       phys.radius_unit)
            k_enc += 1
        elif kind == 1:
            _three_body(blk, i, block_stats[b], d, phys, c)
        else:
            _break_wide(blk, i, c)
    if ejected is not None:
        for b in sorted(blocks):
            ejected.extend(blocks[b].ejected)
    for b in sorted(blocks):
        owed = blocks[b].owed
        if owed > 0.0:
            if debts is not None:
                debts.append((offset // MIN_CHUNK + b, owed))
            else:
                seg_counts[int(np.searchsorted(bounds, b, side="right")) - 1,
                           C["e_oops"]] += owed
    # assemble in one O(N) pass per field: the kept rows in their order, the touched rows'
    # new values written over them, the extra rows inserted at the end of their block
    keep = np.ones(n, dtype=bool)
    for blk in blocks.values():
        for k, rec in enumerate(blk.rows):
            if rec is None:
                keep[blk.i0 + k] = False
    new_row = np.cumsum(keep) - 1  # row of each kept original row in the kept arrays
    written = [(int(new_row[blk.i0 + k]), rec) for blk in blocks.values()
               for k, rec in enumerate(blk.rows) if rec is not None]
    extras = [(b, g, rec) for b, blk in blocks.items() for g, rec in blk.extra]  # block order
    n_kept = int(keep.sum())
    row_block = np.arange(n, dtype=np.int64) // MIN_CHUNK
    # extras go after the last kept row of their block
    at = np.searchsorted(row_block[keep], [b for b, _, _ in extras], side="right")
    out = {}
    for name, arr in fields.items():
        col = arr[keep] if n_kept < n else arr.copy()
        for r, rec in written:
            col[r] = rec[name]
        if extras:
            col = np.insert(col, at, np.array([rec[name] for _, _, rec in extras],
                                               dtype=arr.dtype))
        out[name] = col
    gidx = np.arange(offset, offset + n, dtype=np.int64)[keep]
    blocks_all = row_block[keep]
    if extras:
        gidx = np.insert(gidx, at, np.array([g for _, g, _ in extras], dtype=np.int64))
        blocks_all = np.insert(blocks_all, at, np.array([b for b, _, _ in extras],
                                                        dtype=np.int64))
    block_start = np.searchsorted(blocks_all, np.arange(nb + 1)).astype(np.int64)
    # every slot of the touched blocks, with the mass now there
    slots = np.concatenate([np.arange(offset + blocks[b].i0, offset + blocks[b].i1)
                            for b in sorted(blocks)]).astype(np.int64)
    changes = np.array([(key, g, d) for b in sorted(blocks) for key, dm in blocks[b].changes
                        for g, d in sorted(dm.items()) if d != 0.0], dtype=np.float64)
    return (out, gidx, block_start, counts, slots, slot_masses(slots, gidx, out["m"]),
            changes.reshape(-1, 3))


def cross_event_energy(changes: np.ndarray, r_all: np.ndarray) -> float:
    """Pair energy of the shell changes of different events of one step.

    Every event books its own change of the shells' energy W against the step's old potential
    (:meth:`_Block.place`), so when several events change masses in the same step, W also
    changes by ``-sum dm_a dm_b / max(r_a, r_b)`` over pairs of changes in different events
    (at different slots: a slot's own mass has no pair energy), which no event paid.

    Parameters
    ----------
    changes : ndarray, shape (k, 3)
        Rows ``(event key, slot, mass change)`` of all ranks (:func:`apply_events`' last
        value, gathered), in global order.
    r_all : ndarray
        Replicated radii (the slots index it).

    Returns
    -------
    float
        The energy [Hénon energy]; 0 with fewer than two events.
    """
    key = changes[:, 0]
    if changes.shape[0] < 2 or np.all(key == key[0]):
        return 0.0
    g = changes[:, 1].astype(np.int64)
    dm = changes[:, 2]
    r = r_all[g]
    other = (key[:, None] != key[None, :]) & (g[:, None] != g[None, :])
    pair = -np.outer(dm, dm) / np.maximum(r[:, None], r[None, :])
    return 0.5 * float(np.sum(pair[other]))


def slot_masses(slots: np.ndarray, gidx: np.ndarray, m: np.ndarray,
                skip: np.ndarray | None = None) -> np.ndarray:
    """Mass at each of the sorted ``slots``: the sum of the rows there (``gidx`` each row's
    slot; rows where ``skip`` is True left out), in row order; 0 where no row is left."""
    mass = np.zeros(slots.size)
    if slots.size:
        # the few rows at a listed slot, by one lookup each in a table of the slots (a search
        # of every row's slot cost 0.3 ms at 1e5 rows, in every step with an escaper)
        top = int(slots[-1]) + 1
        listed = np.zeros(top + 1, dtype=bool)
        listed[slots] = True
        at = listed[np.minimum(gidx, top)]
        if skip is not None:
            at &= ~skip
        rows = np.flatnonzero(at)  # increasing: the sums keep row order
        np.add.at(mass, np.searchsorted(slots, gidx[rows]), m[rows])
    return mass


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
