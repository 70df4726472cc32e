"""Few-body encounters: the outcome, decoded from the kernels' hierarchy.

Part of the few-body encounter engine (:mod:`physics.fewbody` is its interface and re-exports
:class:`Product` and :class:`Outcome`).  Holds what both integrators share after the set-up:
the units of the scaled problem (:func:`_scales`: total mass 1, widest binary's a = 1), the
empty hierarchy arrays the classification fills (:func:`_empty_tree`), and the decoding of the
final hierarchy into an :class:`Outcome` of :class:`Product` objects in physical units, with
its kind (preservation, exchange, ionisation, merger, triple, quadruple), the counts, and the
energy and angular momentum errors that make an encounter invalid (:func:`_finish`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from physics import fewbody_integrator as fi
from physics import fewbody_kernels as fk
from physics.binaries import binding_energy
from physics.fewbody_objects import EncounterSettings, InitialState

STATUS_NAMES = {
    fk.STATUS_DONE: "done",
    fk.STATUS_TIME_LIMIT: "time_limit",
    fk.STATUS_STEP_LIMIT: "step_limit",
    fk.STATUS_FAILED: "failed",
}


# ---------------------------------------------------------------------------
# outcome
# ---------------------------------------------------------------------------
@dataclass
class Product:
    """One object of the outcome (a node of the hierarchy).

    Attributes
    ----------
    ids : tuple of int
        Star ids of all its members (a merger product has several in one body).
    m : float
        Mass.
    x, v : ndarray, shape (3,)
        Centre-of-mass position and velocity in the encounter's centre-of-mass frame at the end.
    v_inf : ndarray, shape (3,)
        Velocity at infinity (top-level objects; velocities scaled by
        ``sqrt(1 + PE_outer / KE_outer)`` as CMC does).
    a, e : float
        Orbit of the two children (0 for a single body).
    children : list of Product
        Empty for a single body; two for a binary or a hierarchy.
    radius : float
        Radius of a single body (merger products: the merged radius).
    """

    ids: tuple[int, ...]
    m: float
    x: np.ndarray
    v: np.ndarray
    a: float = 0.0
    e: float = 0.0
    children: list[Product] = field(default_factory=list)
    radius: float = 0.0
    v_inf: np.ndarray | None = None

    @property
    def n_bodies(self) -> int:
        return 1 if not self.children else sum(c.n_bodies for c in self.children)

    @property
    def is_single(self) -> bool:
        return not self.children

    @property
    def is_binary(self) -> bool:
        return len(self.children) == 2 and all(c.is_single for c in self.children)

    @property
    def internal_energy(self) -> float:
        """Sum of the binding energies ``-m1 m2 / (2 a)`` of this node and every inner node."""
        if not self.children:
            return 0.0
        c1, c2 = self.children
        return (float(binding_energy(c1.m, c2.m, self.a)) + c1.internal_energy
                + c2.internal_energy)

    def notation(self) -> str:
        """Fewbody's notation: ``[0 1]`` a binary, ``[[0 1] 2]`` a triple, ``0:1`` a merger."""
        if not self.children:
            return ":".join(str(i) for i in self.ids)
        return "[" + " ".join(c.notation() for c in self.children) + "]"


@dataclass
class Outcome:
    """What came out of an encounter.

    Attributes
    ----------
    status : str
        "done", "time_limit", "step_limit" or "failed".
    kind : str
        "preservation" (flyby: the incoming objects come out as they went in), "exchange" (a
        bound object pairs stars that came in separately), "ionisation" (fewer binaries out than
        in, none new), "merger", "triple" (a stable hierarchical triple), "quadruple" (a bound
        four-body object) or "unresolved" (status is not "done").
    valid : bool
        False when the caller should discard the encounter (as CMC does): unfinished, a
        quadruple, or an energy / angular momentum error above ``energy_tol``.
    reason : str
        Why it is invalid ("" when valid).
    products : list of Product
        Top-level objects at the end, with their hierarchy.
    hierarchy : str
        Fewbody-style notation of the products, e.g. ``"[0 2] 1"``.
    de_internal : float
        Internal energy (binding energies of all bound objects) out minus in; the kinetic energy
        at infinity of the products changes by ``-de_internal - de_merger`` (energy given to
        the cluster).
    de_merger : float
        Energy change in mergers (total energy just after minus just before; the pair's
        relative kinetic energy is lost and its mutual potential energy removed; a black-hole
        merger with the 2.5PN term also the mass it radiates and its recoil).
    de_gw : float
        Energy change by the 2.5PN term (what gravitational waves took during the
        integration; <= 0): the total energy at the end is the initial one plus
        ``de_merger + de_gw``.
    n_gw_mergers : int
        Mergers of two black holes with the 2.5PN term (mass loss and recoil as general
        relativity has them).
    de_rel, dl_rel : float
        Energy error relative to the initial internal binding energy |E_b|; angular momentum
        error relative to the initial binaries' internal angular momentum.
    t_end : float
        Integration time; ``t_end_periods`` in initial periods of the widest binary.
    n_steps, n_rejected, n_forces, n_jumps : int
        Integrator work (steps of the method; force evaluations and Kepler jumps for "ar").
    exchanges, ionisations, mergers, n_binaries_in, n_binaries_out : int
        Counts.
    """

    status: str
    kind: str
    valid: bool
    reason: str
    products: list[Product]
    hierarchy: str
    de_internal: float
    de_merger: float
    de_rel: float
    dl_rel: float
    t_end: float
    t_end_periods: float
    n_steps: int
    n_rejected: int
    n_forces: int
    n_jumps: int
    exchanges: int
    ionisations: int
    mergers: int
    n_binaries_in: int
    n_binaries_out: int
    initial: InitialState | None = None
    de_gw: float = 0.0
    n_gw_mergers: int = 0

    def binaries(self) -> list[Product]:
        """Every binary among the products (including inner binaries of triples)."""
        return [p for p in _walk_all(self.products) if p.is_binary]


def _tree_to_products(node: int, tx, tv, tm, ta, te, ch, members, rad, ids, scale_l, scale_v,
                      scale_m) -> Product:
    if ch[node, 0] < 0:
        mask = int(members[node])
        mids = tuple(ids[i] for i in range(len(ids)) if mask >> i & 1)
        return Product(mids, float(tm[node] * scale_m), tx[node] * scale_l, tv[node] * scale_v,
                       radius=float(rad[node] * scale_l))
    kids = [_tree_to_products(int(ch[node, c]), tx, tv, tm, ta, te, ch, members, rad, ids,
                              scale_l, scale_v, scale_m) for c in range(2)]
    kids.sort(key=lambda p: min(p.ids))
    allids = tuple(sorted(i for k in kids for i in k.ids))
    return Product(allids, float(tm[node] * scale_m), tx[node] * scale_l, tv[node] * scale_v,
                   a=float(ta[node] * scale_l), e=float(te[node]), children=kids)


def _velocities_at_infinity(products: list[Product]) -> None:
    """CMC's rescaling of the top-level velocities to infinity (centre-of-mass frame)."""
    ke = sum(0.5 * p.m * float(p.v @ p.v) for p in products)
    pe = 0.0
    for i, p in enumerate(products):
        for q in products[i + 1:]:
            pe -= p.m * q.m / float(np.linalg.norm(p.x - q.x))
    fac = math.sqrt(max(0.0, 1.0 + pe / ke)) if ke > 0 else 0.0
    for p in products:
        p.v_inf = p.v * fac


def _classify_kind(state: InitialState, products: list[Product], n_mergers: int
                   ) -> tuple[str, int, int, int, int]:
    """Name the outcome and count exchanges and ionisations."""
    in_groups = [tuple(sorted(state.ids[i] for i in g)) for g in state.groups]
    same_origin = {i: k for k, g in enumerate(in_groups) for i in g}
    n_in = sum(1 for g in in_groups if len(g) == 2)
    binaries = [p for p in _walk_all(products) if p.is_binary]
    n_out = len(binaries)
    exchanges = 0
    for bnode in binaries:
        origins = {same_origin[i] for i in bnode.ids}
        if len(origins) > 1 or tuple(sorted(bnode.ids)) not in in_groups:
            exchanges += 1
    ionisations = max(0, n_in - (n_out - exchanges))
    if n_mergers:
        kind = "merger"
    elif any(p.n_bodies >= 4 for p in products):
        kind = "quadruple"
    elif any(p.n_bodies == 3 for p in products):
        kind = "triple"
    elif exchanges:
        kind = "exchange"
    elif n_out < n_in:
        kind = "ionisation"
    else:
        kind = "preservation"
    return kind, exchanges, ionisations, n_in, n_out


def _walk_all(products: list[Product]) -> list[Product]:
    out: list[Product] = []

    def walk(p: Product) -> None:
        out.append(p)
        for c in p.children:
            walk(c)

    for p in products:
        walk(p)
    return out


def _internal_angular_momentum(state: InitialState) -> float:
    """Sum over incoming binaries of the internal angular momentum mu sqrt(M a (1 - e^2))."""
    tot = 0.0
    for obj in state.objects:
        if obj.is_binary:
            m1, m2 = obj.masses
            mu = m1 * m2 / (m1 + m2)
            tot += mu * math.sqrt((m1 + m2) * obj.a * max(1.0 - obj.e ** 2, 1e-12))
    return tot


def _finish(state: InitialState, status: int, n: int, x, v, m, rad, members, tree, istats,
            t_end: float, de_merge: float, settings: EncounterSettings, scales,
            de_gw: float = 0.0, dl_gw: np.ndarray | None = None) -> Outcome:
    """Decode the kernels' hierarchy into an :class:`Outcome` (physical units)."""
    scale_m, scale_l, scale_v, scale_t = scales
    tx, tv, tm, ta, te, ch, top, n_nodes, n_top = tree
    ids = state.ids
    products = [_tree_to_products(int(top[k]), tx, tv, tm, ta, te, ch, members, rad, ids,
                                  scale_l, scale_v, scale_m) for k in range(n_top)]
    products.sort(key=lambda p: min(p.ids))
    _velocities_at_infinity(products)
    n_mergers = len(ids) - n
    kind, exchanges, ionisations, n_in, n_out = _classify_kind(state, products, n_mergers)
    # conservation, in scaled units
    e_end = fi.kinetic_energy(v, m, n) - fi.potential_energy(x, m, n)
    e0 = state.energy / (scale_m * scale_v ** 2)
    e_bind = abs(sum(o.binding_energy for o in state.objects)) / (scale_m * scale_v ** 2)
    de_rel = abs(e_end - e0 - de_merge - de_gw) / e_bind
    l0 = np.empty(3)
    l1 = np.empty(3)
    xs = state.x / scale_l
    vs = state.v / scale_v
    ms = state.m / scale_m
    fi.angular_momentum(xs, vs, ms, ms.size, l0)
    fi.angular_momentum(x, v, m, n, l1)
    l_int = _internal_angular_momentum(state) / (scale_m * scale_l * scale_v)
    if dl_gw is not None:  # what the 2.5PN term took
        l1 = l1 - dl_gw
    dl_rel = float(np.linalg.norm(l1 - l0)) / l_int if n_mergers == 0 else 0.0
    e_int_in = sum(o.binding_energy for o in state.objects)
    e_int_out = sum(p.internal_energy for p in products)
    valid, reason = True, ""
    if status != fk.STATUS_DONE:
        valid, reason, kind = False, STATUS_NAMES[status], "unresolved"
    elif kind == "quadruple":
        valid, reason = False, "quadruple"
    elif not (de_rel <= settings.energy_tol):
        valid, reason = False, f"energy error {de_rel:.3g}"
    elif not (dl_rel <= settings.energy_tol):
        valid, reason = False, f"angular momentum error {dl_rel:.3g}"
    period = max(o.period for o in state.objects)
    t_phys = t_end * scale_t
    return Outcome(
        status=STATUS_NAMES[status], kind=kind, valid=valid, reason=reason, products=products,
        hierarchy=" ".join(p.notation() for p in products),
        de_internal=float(e_int_out - e_int_in), de_merger=float(de_merge * scale_m * scale_v ** 2),
        de_gw=float(de_gw * scale_m * scale_v ** 2),
        n_gw_mergers=int(istats[fk.IST_GW_MERGERS]),
        de_rel=float(de_rel), dl_rel=float(dl_rel), t_end=float(t_phys),
        t_end_periods=float(t_phys / period), n_steps=int(istats[fk.IST_STEPS]),
        n_rejected=int(istats[fk.IST_REJECTED]), n_forces=int(istats[fk.IST_FORCES]),
        n_jumps=int(istats[fk.IST_JUMPS]),
        exchanges=exchanges, ionisations=ionisations, mergers=n_mergers, n_binaries_in=n_in,
        n_binaries_out=n_out, initial=state)


def _scales(state: InitialState) -> tuple[float, float, float, float]:
    """Mass, length, velocity and time units of the scaled problem (M = 1, widest a = 1)."""
    scale_m = float(state.m.sum())
    scale_l = max(o.a for o in state.objects)
    scale_v = math.sqrt(scale_m / scale_l)
    return scale_m, scale_l, scale_v, scale_l / scale_v


def _empty_tree(nmax: int):
    nt = 2 * nmax - 1
    return (np.zeros((nt, 3)), np.zeros((nt, 3)), np.zeros(nt), np.zeros(nt), np.zeros(nt),
            np.full((nt, 2), -1, dtype=np.int64), np.zeros(nmax, dtype=np.int64))
