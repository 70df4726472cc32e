"""Binaries in the cluster: one event at a time -- its draws, and its products written back.

Part of the binary processes of the step (:mod:`physics.encounters` runs the events of a step
in their fixed order and re-exports these names).  Holds the switches and parameters
(:class:`BinaryPhysics`), the counters every event adds to (:data:`COUNT_NAMES`, :data:`C`),
and for each kind of event its random draws and its write-back: a strong encounter
(:func:`_encounter_setup` draws 9 + 1 uniforms, 3 more for the recoil of black-hole mergers
in an encounter with the 2.5PN term, :func:`_encounter` places the products of the
few-body integration, :mod:`physics.fewbody`), a three-body binary (:func:`_three_body_draws`,
7 uniforms, and :func:`_three_body`) and a wide binary broken (:func:`_break_wide`, no draws).
A block's rows are held by :class:`_Block` while its events are applied: it places the
products in the slots of the stars that met, keeps the shells' energy exact (``e_slots``),
ejects products left unbound at once, and takes the energy a break needs from the block's
other stars (at most :data:`physics.energy.TAKE_FRACTION` of their kinetic energy; the rest is
the block's debt).  The geometry helpers orient an encounter's outcome in the frame of the pair
(:func:`pair_velocities`, :func:`incoming_direction`, :func:`rotation_onto`).

With stellar evolution on, the records carry each star's BSE state
(:mod:`physics.stellar_evolution`: ``se_<q>`` for a single star, ``bin_se_<q>_<j>`` for member
``j`` of a binary, and the object's ``se_tphys`` / ``se_t_next``): every product takes its
members' state with it (:func:`_members`, :func:`_single_record`, :func:`_binary_record`), a
merger's comes from :attr:`BinaryPhysics.merge_stars`, and every product the encounters wrote
is due for stellar evolution (``se_t_next = -1``), which runs after them in the same step.

Units: Hénon (G = 1, M0 = 1); no MPI, no files.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from parallel.decomposition import MIN_CHUNK
from parallel.rng import taus_uniform
from physics import fewbody
from physics.binaries import (
    bh_merger_remnant,
    binding_energy,
    three_body_binary_kinematics,
    three_body_hardness,
)
from physics.energy import TAKE_FRACTION
from physics.relaxation import gw_capture_pericentre
from physics.stellar_evolution import MEMBER_QUANTITIES, member_field, single_field

log = logging.getLogger("cmc.encounters")

#: Object ids of binaries formed in a run: this plus the smaller member id (unique, and apart
#: from every star id).
NEW_BINARY_ID_BASE = 1 << 50
#: Uniform draws of a three-body formation: 2 azimuths, 2 hardness, 1 eccentricity, 2 direction.
DRAWS_THREE_BODY = 7
#: BSE stellar type of a black hole (for ``three_body = bh``).
BLACK_HOLE = 14
#: BSE stellar type of a massless remnant: what a merger BSE destroys becomes (see
#: :attr:`BinaryPhysics.merge_stars`).
MASSLESS_REMNANT = 15
#: ``se_t_next`` of a product of the binary processes: due at once (the stellar-evolution
#: process, after the encounters in the same step, evolves it and sets its next time).
SE_DUE = -1.0
#: (85 pi) / (12 sqrt 2): the energy two masses radiate in gravitational waves on one
#: parabolic passage at pericentre r_p is GW_ENERGY_LOSS m1^2 m2^2 sqrt(m1 + m2) / (c^5
#: r_p^3.5) (Quinlan & Shapiro 1989, G = 1; CMC-COSMIC's constant).
GW_ENERGY_LOSS = 15.735210
#: Default neighbours on each side for the local density of a triplet
#: (``binaries.three_body_neighbours``; CMC-COSMIC's BH_AVEKERNEL, 10 by default, not the
#: relaxation's 20: in a core of a few stars the wider window dilutes n, and the rate goes as
#: n^2).
THREE_BODY_NEIGHBOURS = 10

#: Counters of :func:`physics.encounters.apply_events`, in the order of the array it returns.
COUNT_NAMES = (
    "n_binary_single", "n_binary_binary", "n_exchanges", "n_ionisations", "n_mergers",
    "n_triples", "n_encounters_discarded", "n_three_body", "n_wide_broken",
    "e_encounters", "e_three_body", "e_taken", "e_oops", "e_slots",
    "n_ejected", "m_ejected", "e_ejected", "e_bind_ejected", "e_mergers", "e_integrator",
    "n_collisions", "n_bh_captures", "e_gw_capture", "n_gw_mergers", "e_gw_encounters",
    "m_gw",
)
#: Index of each counter in the array :func:`physics.encounters.apply_events` returns.
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
        Also break binaries softer than this
        (:func:`physics.encounter_selection.select_wide_binaries`); 0: off.
    radius_unit : float
        One solar radius in the cluster's length unit: stellar radii (``rad``, ``bin_rad*``,
        Rsun) become sticky spheres in encounters, which may merge.  0 (until a run has a
        physical scale): point masses, no mergers.
    settings : EncounterSettings
        Few-body integrator settings.
    merge_stars : callable or None
        The merge rule of stellar evolution (needed only when the records carry BSE state):
        ``merge_stars(parts) -> product``, ``parts`` the two merging stars' member dicts
        (``m`` [Hénon], ``m_msun``, ``rad``, ``startype``, every quantity of
        :data:`physics.stellar_evolution.MEMBER_QUANTITIES` by its bare name, ``se_tphys``),
        ``product`` the merged star's (``m_msun``, ``rad``, ``startype``, the quantities,
        ``se_tphys``; its ``m`` is ignored), or None when BSE destroys it (it becomes a
        massless remnant, :data:`MASSLESS_REMNANT`, that stellar evolution removes).  The
        dynamics keep the Hénon mass (the sum of the parts'); stellar evolution later sets it
        from ``m_msun``.  A merger of three stars is merged pairwise in id order.
    ss_collision, coll_factor : bool, float
        Single-single sticky-sphere collisions (CMC's SS_COLLISION, COLL_FACTOR).
    bh_radius_multiplier : float
        Black holes' radii in few-body encounters in units of BSE's.
    bh_capture : bool
        Gravitational-wave capture of two single black holes (CMC's BH_CAPTURE):
        :func:`_capture`.
    clight : float
        The speed of light [N-body velocity] (0: no capture).
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
    merge_stars: Callable[[list[dict]], dict | None] | None = None
    ss_collision: bool = False
    coll_factor: float = 1.0
    bh_radius_multiplier: float = 1.0
    bh_capture: bool = False
    clight: float = 0.0

    @property
    def pn25(self) -> bool:
        """Whether encounters with two or more black holes have the 2.5PN term (the
        encounter settings carry a speed of light)."""
        return self.settings.clight > 0.0


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
    """Member stars of a row: id -> {m, m_msun, rad, startype}, and with BSE state (records
    with ``se_tphys``) every quantity of MEMBER_QUANTITIES by its bare name and the object's
    ``se_tphys`` (a binary's members share it)."""
    if rec.get("binind", -1) >= 0:
        out = {int(rec["bin_id1"]): {"m": rec["bin_m1"], "m_msun": rec["bin_m1_msun"],
                                     "rad": rec["bin_rad1"], "startype": rec["bin_startype1"]},
               int(rec["bin_id2"]): {"m": rec["bin_m2"], "m_msun": rec["bin_m2_msun"],
                                     "rad": rec["bin_rad2"], "startype": rec["bin_startype2"]}}
        if "se_tphys" in rec:
            for j, mem in enumerate(out.values(), start=1):
                mem.update({q: rec[member_field(q, j)] for q in MEMBER_QUANTITIES})
                mem["se_tphys"] = rec["se_tphys"]
        return out
    mem = {"m": rec["m"], "m_msun": rec["m_msun"], "rad": rec["rad"],
           "startype": rec["startype"]}
    if "se_tphys" in rec:
        mem.update({q: rec[single_field(q)] for q in MEMBER_QUANTITIES})
        mem["se_tphys"] = rec["se_tphys"]
    return {int(rec["id"]): mem}


def _object(rec: dict, radius_unit: float, bh_multiplier: float = 1.0) -> fewbody.StarObject:
    """The few-body object of a row; radii in the cluster's length unit, a black hole's
    ``bh_multiplier`` times BSE's (CMC's BH_RADIUS_MULTIPLYER)."""
    def radius(rad: float, kind: int) -> float:
        return float(rad) * radius_unit * (bh_multiplier if int(kind) == BLACK_HOLE else 1.0)

    if rec["binind"] >= 0:
        return fewbody.binary((int(rec["bin_id1"]), int(rec["bin_id2"])),
                              (float(rec["bin_m1"]), float(rec["bin_m2"])),
                              float(rec["bin_a"]), float(rec["bin_e"]),
                              (radius(rec["bin_rad1"], rec["bin_startype1"]),
                               radius(rec["bin_rad2"], rec["bin_startype2"])),
                              (int(rec["bin_startype1"]) == BLACK_HOLE,
                               int(rec["bin_startype2"]) == BLACK_HOLE))
    return fewbody.single(int(rec["id"]), float(rec["m"]),
                          radius(rec["rad"], rec["startype"]),
                          int(rec["startype"]) == BLACK_HOLE)


def _leaf(q: fewbody.Product, members: dict[int, dict], radius_unit: float,
          merge_stars: Callable[[list[dict]], dict | None] | None = None,
          gw: bool = False) -> int:
    """Star id of a single body of the outcome; a merger product becomes a new member under
    its smallest id: mass summed; without BSE state the Msun mass summed, the radius from the
    integrator and the largest stellar type (stellar evolution will decide); with it, the
    star ``merge_stars`` makes of the parts (:func:`_merged`).  ``gw``: the encounter had
    black-hole mergers with the 2.5PN term; a product made only of black holes then has the
    integrator's mass (what the merger fit left, :func:`_gw_merged`)."""
    if len(q.ids) == 1:
        return q.ids[0]
    parts = [members[i] for i in q.ids]
    in_order = [members[i] for i in sorted(q.ids)]
    sid = min(q.ids)
    if "se_tphys" in parts[0]:
        members[sid] = _merged(in_order, merge_stars)
    else:
        members[sid] = {"m": sum(p["m"] for p in parts),
                        "m_msun": sum(p["m_msun"] for p in parts),
                        "rad": q.radius / radius_unit if radius_unit > 0 else 0.0,
                        "startype": max(p["startype"] for p in parts)}
    if gw and all(int(p["startype"]) == BLACK_HOLE for p in parts):
        _gw_merged(members[sid], in_order, q.m)
    return sid


def _gw_merged(product: dict, parts: list[dict], m_final: float) -> None:
    """A black hole that black holes ``parts`` merged into with the 2.5PN term: its Hénon
    mass the integrator's ``m_final`` (the parts' less what the merger fit radiated,
    :func:`physics.binaries.bh_merger_remnant`), the Msun mass and BSE's masses and radius
    (a multiple of the Schwarzschild radius) scaled with it, and the fit's spin (of the
    parts merged pairwise in id order, the spins taken as zero as the fit does)."""
    m_sum = sum(float(p["m"]) for p in parts)
    frac = m_final / m_sum
    msun_final = sum(float(p["m_msun"]) for p in parts) * frac
    scale = msun_final / float(product["m_msun"]) if product["m_msun"] > 0 else frac
    product["m"] = m_final
    product["m_msun"] = msun_final
    product["rad"] = float(product["rad"]) * scale
    for key in ("mass0", "massc", "zams"):
        if key in product:
            product[key] = float(product[key]) * scale
    if "bhspin" in product:
        m_acc = float(parts[0]["m_msun"])
        spin = 0.0
        for p in parts[1:]:
            _, spin, _ = bh_merger_remnant(m_acc, float(p["m_msun"]))
            m_acc += float(p["m_msun"])
        product["bhspin"] = float(spin)


#: Keys a merge rule's product must have (besides the BSE quantities).
_MERGED_KEYS = ("m_msun", "rad", "startype", "se_tphys")


def _merged(parts: list[dict], merge_stars: Callable[[list[dict]], dict | None] | None
            ) -> dict:
    """The member a merger of ``parts`` (member dicts with BSE state, in id order) makes:
    pairwise in that order through ``merge_stars``; the Hénon mass ``m`` is the sum of the
    parts' (the integrator conserves it).  A product BSE destroys (``merge_stars`` gives
    None) is a massless remnant (``startype`` :data:`MASSLESS_REMNANT`, ``m_msun`` and its
    quantities 0, ``se_tphys`` the parts' latest) carrying the Hénon mass until stellar
    evolution removes it; merging with such a remnant leaves the other star as it was
    (its clock too)."""
    if merge_stars is None:
        raise ValueError(
            "a merger in an encounter of stars that carry BSE state (stellar evolution is on) "
            "needs a merge rule: BinaryPhysics.merge_stars is None")
    product = parts[0]
    for other in parts[1:]:
        pair = [product, other]
        m = product["m"] + other["m"]
        gone = [p["startype"] == MASSLESS_REMNANT for p in pair]
        if gone[0] or gone[1]:  # the other star as it was, its clock too
            new = dict(pair[1] if gone[0] else pair[0])
        else:
            made = merge_stars([dict(product), dict(other)])
            if made is None:
                new = {"m_msun": 0.0, "rad": 0.0, "startype": MASSLESS_REMNANT,
                       **{q: 0.0 for q in MEMBER_QUANTITIES},
                       "se_tphys": max(product["se_tphys"], other["se_tphys"])}
            else:
                missing = [k for k in (*_MERGED_KEYS, *MEMBER_QUANTITIES) if k not in made]
                if missing:
                    raise ValueError(f"BinaryPhysics.merge_stars returned no {missing}")
                new = {k: made[k] for k in (*_MERGED_KEYS, *MEMBER_QUANTITIES)}
        new["m"] = m
        product = new
    return product


def _single_record(template: dict, sid: int, mem: dict, v: np.ndarray) -> dict:
    """A single star ``sid`` (member dict ``mem``) at velocity ``v``, with the other fields of
    ``template``; the binary fields at their defaults.  With BSE state: the member's state in
    the single fields, its ``se_tphys``, and due at once (``se_t_next`` = :data:`SE_DUE`)."""
    rec = dict(template)
    rec.update(id=sid, m=mem["m"], m_msun=mem["m_msun"], rad=mem["rad"],
               startype=mem["startype"], binind=-1, vr=float(v[2]),
               vt=math.hypot(float(v[0]), float(v[1])))
    for k in rec:
        if k.startswith("bin_"):  # bin_se_* included: their default is 0
            rec[k] = -1 if k.startswith("bin_id") else (1 if "startype" in k else 0.0)
    if "se_tphys" in rec:
        for q in MEMBER_QUANTITIES:
            rec[single_field(q)] = mem[q]
        rec["se_tphys"] = mem["se_tphys"]
        rec["se_t_next"] = SE_DUE
    return rec


def _binary_record(template: dict, id1: int, id2: int, members: dict[int, dict], a: float,
                   e: float, v: np.ndarray, old_ids: dict[tuple[int, int], int]) -> dict:
    """A binary of members ``id1``, ``id2`` (orbit ``a``, ``e``) at velocity ``v``, with the
    other fields of ``template``; its id the old binary's of that pair, else a new one.  With
    BSE state: each member's state in its member fields, the single ones at their defaults
    (0), ``se_tphys`` the later of the members' (a lagging member is on the main sequence,
    whose state BSE recomputes from its age) and due at once (``se_t_next`` = SE_DUE)."""
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
    if "se_tphys" in rec:
        for q in MEMBER_QUANTITIES:
            rec[single_field(q)] = 0.0
            rec[member_field(q, 1)] = m1[q]
            rec[member_field(q, 2)] = m2[q]
        rec["se_tphys"] = max(m1["se_tphys"], m2["se_tphys"])
        rec["se_t_next"] = SE_DUE
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
    its frame about the relative velocity (10 uniforms from the block's sub-stream), then,
    with the 2.5PN term and two or more black holes, the recoil angles of their mergers
    (:func:`physics.fewbody.draw_recoil_uniforms`, 3 more)."""
    obj1 = _object(blk.row(i), phys.radius_unit, phys.bh_radius_multiplier)
    obj2 = _object(blk.row(i + 1), phys.radius_unit, phys.bh_radius_multiplier)
    both = obj1.is_binary and obj2.is_binary
    rp = phys.x_bb * (obj1.a + obj2.a) if both else phys.x_bs * max(obj1.a, obj2.a)
    state = fewbody.sample_encounter(obj1, obj2, w, rp, states, blk.b, phys.settings.tidal_tol)
    spin = 2.0 * math.pi * taus_uniform(states, blk.b)
    fewbody.draw_recoil_uniforms(state, phys.settings, states, blk.b)
    return state, spin


def _encounter(blk: _Block, i: int, phi: float, state: fewbody.InitialState, spin: float,
               out: fewbody.Outcome, counts: np.ndarray, radius_unit: float = 0.0,
               merge_stars: Callable[[list[dict]], dict | None] | None = None) -> None:
    """Write back the products of the encounter of local rows (i, i + 1) (``merge_stars``:
    :attr:`BinaryPhysics.merge_stars`, for mergers of stars with BSE state)."""
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
    gw = out.n_gw_mergers > 0
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
                sid = _leaf(q, members, radius_unit, merge_stars, gw)
                new_recs.append(_single_record(ri, sid, members[sid], v))
            else:
                c1, c2 = q.children
                new_recs.append(_binary_record(
                    ri, _leaf(c1, members, radius_unit, merge_stars, gw),
                    _leaf(c2, members, radius_unit, merge_stars, gw), members, q.a, q.e, v,
                    old_ids))
    counts[C["n_exchanges"]] += out.exchanges
    # binaries destroyed
    counts[C["n_ionisations"]] += max(0, out.n_binaries_in - out.n_binaries_out)
    counts[C["n_mergers"]] += out.mergers
    # mechanical energy changed by mergers (a merged pair's orbital energy goes into the
    # product: its negative binding energy leaves the budget), booked so E_tot is kept
    counts[C["e_mergers"]] += out.de_merger
    # what gravitational waves took during the integration (the 2.5PN term)
    counts[C["e_gw_encounters"]] += out.de_gw
    counts[C["n_gw_mergers"]] += out.n_gw_mergers
    if gw:  # the mass black-hole mergers radiated
        counts[C["m_gw"]] += float(ri["m"]) + float(rj["m"]) - sum(float(r["m"])
                                                                    for r in new_recs)
    dk = _kinetic(new_recs) - k_before
    counts[C["e_encounters"]] += dk
    # what the cluster's budget changes by, all of it the integrator's energy error: the
    # products' kinetic and internal energy (a stable triple's outer orbit is paid for
    # below, from the neighbours or as e_oops, so it counts), less what mergers dissipated
    counts[C["e_integrator"]] += (dk + _internal(new_recs) - eb_before + e_outer - out.de_merger
                                  - out.de_gw)
    blk.place([i, j], [(i if k == 0 else j, rec) for k, rec in enumerate(new_recs)], counts)
    if e_outer < 0.0:
        taken, left = blk.take_energy(-e_outer, new_recs)
        counts[C["e_taken"]] += taken
        blk.owed += left


def is_collision(blk: _Block, i: int) -> bool:
    """Whether the selected pair (i, i + 1) is a collision: two single stars (a pair with a
    binary is a few-body encounter)."""
    return blk.row(i)["binind"] < 0 and blk.row(i + 1)["binind"] < 0


def _collision(blk: _Block, i: int, phi: float, counts: np.ndarray,
               merge_stars: Callable[[list[dict]], dict | None] | None) -> None:
    """Two single stars (local rows i, i + 1) that touched merge (CMC's sscollision_do for
    sticky spheres): the product, BSE's merger of the two (:func:`_merged`; due for stellar
    evolution in this step), moves with the pair's centre-of-mass velocity at the drawn
    ``phi`` and takes row i's slot.  The pair's relative kinetic energy (mu W^2 / 2) is what
    the merger dissipates: ``e_mergers``, so ``E_tot`` keeps it; the shells' energy change
    from the mass moving between the two slots is kept exact by :meth:`_Block.place`."""
    j = i + 1
    ri, rj = blk.row(i), blk.row(j)
    v_i, v_j = pair_velocities(ri["vr"], ri["vt"], rj["vr"], rj["vt"], phi)
    mi, mj = float(ri["m"]), float(rj["m"])
    v_cm = (mi * v_i + mj * v_j) / (mi + mj)
    members = {**_members(ri), **_members(rj)}
    sid = min(members)
    if "se_tphys" in ri:
        product = _merged([members[k] for k in sorted(members)], merge_stars)
    else:  # point masses with radii (no stellar evolution): masses and radii add up
        product = {"m": mi + mj, "m_msun": ri["m_msun"] + rj["m_msun"],
                   "rad": ri["rad"] + rj["rad"], "startype": max(ri["startype"],
                                                                  rj["startype"])}
    rec = _single_record(ri, sid, product, v_cm)
    dk = _kinetic((rec,)) - _kinetic((ri, rj))
    counts[C["n_collisions"]] += 1
    counts[C["e_mergers"]] += dk
    blk.place([i, j], [(i, rec)], counts)


def is_capture(blk: _Block, i: int, phys: BinaryPhysics) -> bool:
    """Whether the selected collision (i, i + 1) of two single stars is a candidate for
    gravitational-wave capture: two black holes, with ``phys.bh_capture`` and a speed of
    light (as the selection kernel's ``is_bh``)."""
    return (phys.bh_capture and phys.clight > 0.0
            and int(blk.row(i)["startype"]) == BLACK_HOLE
            and int(blk.row(i + 1)["startype"]) == BLACK_HOLE)


def gw_energy_loss(m1: float, m2: float, rp: float, clight: float) -> float:
    """Energy radiated in gravitational waves by two masses on one parabolic passage at
    pericentre ``rp`` (G = 1): ``15.735210 m1^2 m2^2 sqrt(m1 + m2) / (c^5 rp^3.5)``."""
    return GW_ENERGY_LOSS * (m1 * m2) ** 2 * math.sqrt(m1 + m2) / (clight ** 5 * rp ** 3.5)


def capture_pericentre(u: float, r_max: float, m12: float, w: float) -> float:
    """The pericentre of a pair (total mass ``m12``, relative speed ``w`` at infinity) whose
    impact parameter is ``b = sqrt(u) b_max``, ``b_max`` that of pericentre ``r_max`` (the
    impact parameter uniform in b^2, as CMC-COSMIC's sscollision_do): ``m12 / W^2 (-1 +
    sqrt(1 + x^2))``, ``x = b W^2 / m12``, in the form ``x^2 / (1 + sqrt(1 + x^2))`` that
    keeps its digits when focusing is strong (x << 1)."""
    b_max = r_max * math.sqrt(1.0 + 2.0 * m12 / (r_max * w * w))
    x = math.sqrt(u) * b_max * w * w / m12
    return m12 / (w * w) * (x * x / (1.0 + math.sqrt(1.0 + x * x)))


def _capture_draw(blk: _Block, states: np.ndarray) -> float:
    """The one uniform of a capture candidate: its impact parameter."""
    return taus_uniform(states, blk.b)


def _capture(blk: _Block, i: int, phi: float, w: float, u: float, counts: np.ndarray,
             phys: BinaryPhysics) -> None:
    """Two single black holes (local rows i, i + 1) selected with the larger of the sticky
    and the gravitational-wave capture cross sections (CMC-COSMIC's BH_CAPTURE branch of
    sscollision_do): the pericentre from the drawn impact parameter
    (:func:`capture_pericentre`, ``r_max`` the larger of the selection's two pericentres);
    within the sum of their sticky radii they merge (:func:`_collision`), else they form a
    binary at the pair's centre-of-mass velocity (the first row's slot) whose orbital energy
    is the pair's at infinity, mu W^2 / 2, less what the passage radiated
    (:func:`gw_energy_loss`): a = m1 m2 / (2 |E|), e = 1 - r_p / a (at least 0).  The change
    of the mechanical energy (the binary's kinetic and internal energy less the two stars'
    kinetic energy) is what the waves carried away: ``e_gw_capture``.  A pericentre whose loss
    does not bind the pair (E >= 0: only by the rounding of CMC's constants, at r_p = r_cap)
    leaves the pair as it was (it neither relaxes nor captures in this step)."""
    j = i + 1
    ri, rj = blk.row(i), blk.row(j)
    mi, mj = float(ri["m"]), float(rj["m"])
    m12 = mi + mj
    r_stick = phys.coll_factor * phys.radius_unit * (float(ri["rad"]) + float(rj["rad"]))
    r_cap = float(gw_capture_pericentre(mi, mj, w, phys.clight))
    # the pericentre of the selection's cross section (sticky radii only with ss_collision)
    r_max = max(r_stick if phys.ss_collision else 0.0, r_cap)
    rperi = capture_pericentre(u, r_max, m12, w)
    if rperi <= r_stick:
        _collision(blk, i, phi, counts, phys.merge_stars)
        return
    e_orb = 0.5 * mi * mj / m12 * w * w - gw_energy_loss(mi, mj, rperi, phys.clight)
    if e_orb >= 0.0:
        log.debug("black holes %d and %d: no capture at r_p = %g (r_cap %g)", int(ri["id"]),
                  int(rj["id"]), rperi, r_cap)
        return
    a = mi * mj / (2.0 * abs(e_orb))
    ecc = max(0.0, 1.0 - rperi / a)
    v_i, v_j = pair_velocities(ri["vr"], ri["vt"], rj["vr"], rj["vt"], phi)
    v_cm = (mi * v_i + mj * v_j) / m12
    members = {**_members(ri), **_members(rj)}
    rec = _binary_record(ri, int(ri["id"]), int(rj["id"]), members, a, ecc, v_cm, {})
    counts[C["n_bh_captures"]] += 1
    counts[C["e_gw_capture"]] += _kinetic((rec,)) + _internal((rec,)) - _kinetic((ri, rj))
    blk.place([i, j], [(i, rec)], counts)


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


