"""Binaries in the cluster: strong encounters, three-body binaries and wide-binary breaking.

One step of a cluster with binaries (the paper's section 2, steps 2 and 3; CMC-COSMIC's
``dynamics_apply``, ``binint_do``, ``perform_3bb`` and ``break_wide_binaries``):

1. :func:`physics.relaxation.relax_or_select_pairs` relaxes the radial-neighbour pairs; a pair
   holding a binary has a strong encounter instead with probability ``P = n W S dt``.
2. :func:`physics.encounter_selection.select_three_body` picks the triplets of single stars
   (rows 3t, 3t+1, 3t+2 of a 20-star block) that form a binary, with the rate of Morscher et
   al. (2013, 2015) for the triplet's two heaviest stars, as CMC-COSMIC's ``dynamics_apply``.
3. :func:`physics.encounter_selection.select_wide_binaries` picks binaries whose apocentre exceeds
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
(orientation about the relative velocity); three-body formation: 7; a collision of two single
stars none, and with ``binaries.bh_capture`` two single black holes 1 (the impact parameter of
their gravitational-wave capture, :func:`physics.encounter_events._capture`).

Energy: an encounter changes the pair's kinetic energy by ``-(change of internal energy)`` up to
the integrator's error; three-body formation by ``-E_b``.  Breaking a wide binary (or splitting
a stable triple into its inner binary and outer star) needs ``|E_b|`` (``|E_outer|``), taken
from the kinetic energy of the other stars of the block, at most
:data:`physics.energy.TAKE_FRACTION` of it.  What the block cannot pay is its debt
(``debts``): the caller carries it outward through the following blocks, each paying at most
the same fraction of its kinetic energy, across ranks (CMC-COSMIC's break_wide_binaries carries
its E_excess outward star by star through every rank); only a caller that passes no ``debts``
list books it as ``e_oops``.

The parts: :mod:`physics.encounter_selection` (the compiled selection kernels of steps 2 and
3, and the per-block sums of the binary time scales), :mod:`physics.encounter_events` (one
event: the parameters, the counters, each kind of event's draws and the write-back of its
products into its block, with the block's energy bookkeeping) and this module (step 4: every
event of the step in the fixed order, the encounters integrated concurrently, the new table
assembled; the pair energy of mass changes of different events, :func:`cross_event_energy`;
the mass at each slot, :func:`slot_masses`).  The names of the parts that callers use are
importable from here.

Units: Hénon (G = 1, M0 = 1); no MPI, no files.
"""

from __future__ import annotations

import logging

import numpy as np

from parallel.decomposition import MIN_CHUNK
from physics import fewbody
from physics.encounter_events import (
    BLACK_HOLE,
    COUNT_NAMES,
    DRAWS_THREE_BODY,
    NEW_BINARY_ID_BASE,
    THREE_BODY_NEIGHBOURS,
    BinaryPhysics,
    C,
    _Block,
    _break_wide,
    _capture,
    _capture_draw,
    _collision,
    _encounter,
    _encounter_setup,
    _three_body,
    _three_body_draws,
    incoming_direction,
    is_capture,
    is_collision,
    pair_velocities,
    relative_state,
    rotation_onto,
)
from physics.encounter_selection import (
    TRIPLETS_PER_BLOCK,
    central_block_sums,
    select_three_body,
    select_wide_binaries,
)

__all__ = [
    "BLACK_HOLE",
    "C",
    "COUNT_NAMES",
    "DRAWS_THREE_BODY",
    "NEW_BINARY_ID_BASE",
    "THREE_BODY_NEIGHBOURS",
    "TRIPLETS_PER_BLOCK",
    "BinaryPhysics",
    "apply_events",
    "central_block_sums",
    "cross_event_energy",
    "incoming_direction",
    "integrate_concurrently",
    "pair_velocities",
    "relative_state",
    "rotation_onto",
    "select_three_body",
    "select_wide_binaries",
    "slot_masses",
]

log = logging.getLogger("cmc.encounters")

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
        From :func:`physics.encounter_selection.select_three_body`.
    wide : ndarray of bool
        From :func:`physics.encounter_selection.select_wide_binaries`.
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
        if kind == 0 and is_collision(block(b), i):
            # a collision of two single stars draws nothing; two single black holes that may
            # capture each other (binaries.bh_capture) one uniform, their impact parameter
            draws.append(_capture_draw(block(b), states) if is_capture(block(b), i, phys)
                         else None)
        elif kind == 0:
            draws.append(_encounter_setup(block(b), i, float(enc_w[i // 2]), states, phys))
        elif kind == 1:
            draws.append(_three_body_draws(block(b), states))
        else:
            draws.append(None)
    # 2. the encounters, concurrently (each a function of its initial state only)
    outcomes = integrate_all([d[0] for (_, kind, _), d in zip(events, draws, strict=True)
                              if kind == 0 and isinstance(d, tuple)], phys.settings)
    # 3. write-back in the fixed order
    k_enc = 0
    for (b, kind, i), d in zip(events, draws, strict=True):
        blk = block(b)
        # the counters of the rank that owns block b (a view: updated in place)
        c = seg_counts[int(np.searchsorted(bounds, b, side="right")) - 1]
        if kind == 0 and d is None:
            _collision(blk, i, float(enc_phi[i // 2]), c, phys.merge_stars)
        elif kind == 0 and not isinstance(d, tuple):
            _capture(blk, i, float(enc_phi[i // 2]), float(enc_w[i // 2]), d, c, phys)
        elif kind == 0:
            _encounter(blk, i, float(enc_phi[i // 2]), d[0], d[1], outcomes[k_enc], c,
                       phys.radius_unit, phys.merge_stars)
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
    (:meth:`physics.encounter_events._Block.place`), so when several events change masses in
    the same step, W also changes by ``-sum dm_a dm_b / max(r_a, r_b)`` over pairs of changes
    in different events (at different slots: a slot's own mass has no pair energy), which no
    event paid.

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


