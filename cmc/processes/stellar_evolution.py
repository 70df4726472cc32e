"""Stellar evolution in the step: every object whose BSE state is due is evolved with COSMIC's
``evolv2`` (:mod:`physics.stellar_evolution`) to the end of the step; its mass changes go into
the potential, natal kicks into its velocity, and binaries that BSE disrupts or merges come
back as singles, as CMC-COSMIC's ``do_stellar_evolution`` does.

Unlike CMC-COSMIC, not every object is evolved every step: each object carries ``se_t_next``,
the time by which its state can have changed by more than ``bse.tolerance``
(:func:`physics.stellar_evolution.next_call_times`), and only the objects due are called.  A
main-sequence star's state is a function of its age, so evolving it late is exact (COSMIC's
single-star tracks are analytic on the main sequence).

Energy: the mass an object loses leaves with the object's velocity; the change of K + W this
makes is booked in ``E_se_mass`` (W exactly, over every rank's changed shells, with the pair
energy of rows that share a slot: a disrupted binary's two singles, the products of this
step's encounters), the kinetic energy of natal kicks in ``E_se_kicks``, and the change of
the binaries' internal energy (mass transfer, winds, kicks, disruptions, mergers) in
``E_se_binding``; ``E_tot`` takes the three off, so it stays conserved.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import numpy as np

from cmc.diagnostics import SE_COUNTS, SE_SUMS
from cmc.fields import FIELD_BY_NAME
from cmc.processes.base import Process, StepWork
from cmc.processes.se_spread import bse_watchdog, evolve_spread
from cmc.replicated import update_slot_masses
from cmc.stars import StarTable
from cmc.state import StopRun
from parallel.rng import fill_uniform
from physics import encounters as enc
from physics import stellar_evolution as se
from physics.binaries import binding_energy
from physics.stellar_mergers import merge_pair

if TYPE_CHECKING:
    from cmc.simulation import Simulation

log = logging.getLogger("cmc.simulation")

#: Uniforms each evolved object draws from its block's sub-stream: BSE's seed and the
#: azimuth of the kick in the plane of the transverse velocity (as CMC's vt_add_kick).
DRAWS_PER_OBJECT = 2
#: Seeds of COSMIC's ran3: 1 .. 2^31 - 2.
_SEED_SPAN = 2 ** 31 - 3
#: A product row of a binary process that must be evolved in this step (se_t_next < 0).
DUE_NOW = -1.0


def _member_names(j: int) -> dict[str, str]:
    """Star-table field of each BSE quantity of a single (j = 0) or binary member j."""
    names = {"kstar": "startype", "mass": "m_msun", "rad": "rad"} if j == 0 else {
        "kstar": f"bin_startype{j}", "mass": f"bin_m{j}_msun", "rad": f"bin_rad{j}"}
    for q in se.MEMBER_QUANTITIES:
        names[q] = se.single_field(q) if j == 0 else se.member_field(q, j)
    return names


SINGLE = _member_names(0)
MEMBER = (_member_names(1), _member_names(2))


def batch_of(fields: dict[str, np.ndarray], rows: np.ndarray, length_rsun: float,
             seeds: np.ndarray) -> se.Batch:
    """The BSE state of the objects at ``rows`` of the table: a single star in slot 0 with a
    massless companion in slot 1, a binary's members in slots 0 and 1 (separation in Rsun
    from ``bin_a``)."""
    n = rows.size
    binary = fields["binind"][rows] >= 0 if "bin_a" in fields else np.zeros(n, bool)
    kstar = np.zeros((n, 2), dtype=np.int32)
    kstar[:, 1] = 15
    mass = np.zeros((n, 2))
    rad = np.zeros((n, 2))
    q = {name: np.zeros((n, 2)) for name in se.MEMBER_QUANTITIES}
    cols = {"kstar": kstar, "mass": mass, "rad": rad, **q}
    single = ~binary
    for key, col in cols.items():
        col[single, 0] = fields[SINGLE[key]][rows[single]]
        if binary.any():
            for j in (0, 1):
                col[binary, j] = fields[MEMBER[j][key]][rows[binary]]
    sep = np.zeros(n)
    ecc = np.zeros(n)
    if binary.any():
        sep[binary] = fields["bin_a"][rows[binary]] * length_rsun
        ecc[binary] = fields["bin_e"][rows[binary]]
    return se.Batch(kstar=kstar, mass=mass, rad=rad, q=q,
                    tphys=np.array(fields["se_tphys"][rows], dtype=np.float64), sep=sep,
                    ecc=ecc, seed=seeds.astype(np.int64))


def _write_member(out: dict, row: int | None, names: dict[str, str], batch: se.Batch, b: int,
                  j: int) -> None:
    """Member ``j`` of batch object ``b`` into the fields ``names`` of ``out``: a record
    (``row`` None) or the table's columns at ``row``."""
    for key, name in names.items():
        v = batch_column(batch, key)[b, j]
        if row is None:
            out[name] = v.item()
        else:
            out[name][row] = v


def _as_single(rec: dict, sid: int) -> dict:
    """``rec`` made a single star (binary columns at their defaults), keeping its orbit."""
    out = dict(rec)
    out["id"] = sid
    out["binind"] = -1
    for k in out:
        if k.startswith("bin_"):
            out[k] = FIELD_BY_NAME[k].default
    return out


class StellarEvolution(Process):
    """BSE for the objects due (``se_t_next`` at or before the step's end, and the products of
    this step's binary processes), in row order; mass changes into the potential of every
    rank (one Allgatherv), kicks into the velocities, disrupted and merged binaries back as
    singles."""

    name = "stellar evolution"
    timer = "stellar_evolution"
    reads = ("the BSE state of the objects due (se_t_next <= the step's end); work.gidx, "
             "block_start, dt")
    changes = ("the BSE state, masses, speeds, binaries (a, e, disrupted, merged) of the "
               "objects evolved; m_all, phi_all, mcum_all; work.gidx, block_start, se_parts")
    draws = ("block sub-stream, after the binary events': per object evolved, in row order, "
             "2 uniforms (BSE's seed, the kick's azimuth)")
    energy = ("E_se_mass", "E_se_kicks", "E_se_binding")
    counters = SE_COUNTS
    wait_after = True

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        self.on = sim.stars.has_se_fields
        if self.on:  # BSE's flags live in the process's common blocks: set them here
            from cmc.bse_config import bse_flags

            se.apply_flags(bse_flags(sim.cfg.bse))

    def run(self, work: StepWork) -> None:
        sim = self.sim
        nseg = work.seg_blocks.size - 1
        work.se_parts = np.zeros((nseg, len(SE_SUMS)))
        if not self.on:
            return
        st = sim.state
        fields = sim.stars.as_dict()
        t_end = sim.units.rel_to_myr(st.time + work.dt)
        due = np.flatnonzero(fields["se_t_next"] <= t_end)
        due = due[fields["se_tphys"][due] < t_end]
        # each row's block (rows of a block are contiguous: block_start)
        block_of = np.searchsorted(work.block_start, due, side="right") - 1
        u = np.empty((due.size, DRAWS_PER_OBJECT))
        # blocks in order, their rows in order (``due`` is sorted: a block's rows are
        # contiguous in it)
        blocks, first, count = np.unique(block_of, return_index=True, return_counts=True)
        for b, k0, c in zip(blocks.tolist(), first.tolist(), count.tolist(), strict=True):
            draws = np.empty(c * DRAWS_PER_OBJECT)
            fill_uniform(work.states, b, draws)
            u[k0:k0 + c] = draws.reshape(c, DRAWS_PER_OBJECT)
        seeds = 1 + np.floor(u[:, 0] * _SEED_SPAN).astype(np.int64)
        # a single of type 15 (a merger BSE destroyed in an encounter) has nothing to evolve
        single = fields["binind"][due] < 0
        void = single & (fields["startype"][due] == se.MASSLESS)
        call = due[~void]
        batch = batch_of(fields, call, sim.units.length_rsun, seeds[~void])
        t_prev = batch.tphys.copy()
        # the calls go round-robin over the ranks (the objects due sit on the first ones)
        result, failed = evolve_spread(sim.comm, batch, fields["id"][call], t_end,
                                       st.metallicity, sim.cfg.bse.pts1_highmass_cutoff)
        error = None if failed is None else (
            f"stellar evolution failed for object id {failed[0]} at t = {t_end:.6g} Myr "
            f"(step {st.step + 1}): {failed[1]}")
        errors = [e for e in sim.comm.allgather(error) if e]
        if errors:
            for e in errors:
                log.error("%s", e)
            raise StopRun(f"stellar evolution failed: {errors[0]}", torn=True)
        t_next = se.next_call_times(batch, result, t_prev, t_end, sim.cfg.bse.tolerance,
                                    sim.cfg.bse.ms_age_tolerance, sim.cfg.bse.giant_tolerance)
        index = np.full(due.size, -1, dtype=np.int64)  # each due row's object in the batch
        index[~void] = np.arange(call.size)
        self._write_back(work, due, block_of, index, batch, result, t_next, u[:, 1])

    def _write_back(self, work: StepWork, due: np.ndarray, block_of: np.ndarray,
                    index: np.ndarray, batch: se.Batch, result, t_next: np.ndarray,
                    azimuth_u: np.ndarray) -> None:
        """The evolved states into the table, the masses into the potential, the energies
        into ``work.se_parts``."""
        sim = self.sim
        units = sim.units
        fields = dict(sim.stars.as_dict())  # written in place (few rows)
        has_bin = "bin_a" in fields
        m_unit = units.mass_msun
        v_unit = units.velocity_kms
        seg_of = np.searchsorted(work.seg_blocks, block_of, side="right") - 1
        parts = work.se_parts
        col = {name: SE_SUMS.index(name) for name in SE_SUMS}
        n = fields["m"].size
        keep = np.ones(n, dtype=bool)
        extras: list[tuple[int, dict]] = []  # (row it follows, record)
        # rows that share a slot (products of this step's binary processes, the singles of a
        # disrupted binary) have a pair energy the slots' masses do not hold: its change is
        # booked with the shells' (see _slot_pair_energies)
        touched = np.unique(work.gidx[due])
        pairs_before = _slot_pair_energies(touched, work.gidx, fields["m"], sim.r_all)
        # the objects that stay what they are (a single star, a bound binary: nearly all) are
        # written a column at a time, their energies summed per segment in row order (one
        # np.bincount per part); the few others (destroyed, disrupted, merged) row by row
        stays = np.zeros(due.size, dtype=bool)
        stays[index >= 0] = result.outcome[index[index >= 0]] == se.EVOLVED
        binary_of = fields["binind"][due] >= 0 if has_bin else np.zeros(due.size, dtype=bool)
        old_msun = {name: fields[name][due] for name in ("m_msun", "bin_m1_msun", "bin_m2_msun")
                    if name in fields}
        # the objects' values before this step's change (m_msun of a single: above)
        m_old = fields["m"][due]
        v2_old = fields["vr"][due] ** 2 + fields["vt"][due] ** 2
        eb_old = np.zeros(due.size)
        if has_bin:
            rb = due[binary_of]
            eb_old[binary_of] = binding_energy(fields["bin_m1"][rb], fields["bin_m2"][rb],
                                               fields["bin_a"][rb])
        # a product of this step's binary processes: its mass from BSE's, whatever the
        # dynamics summed
        product = fields["se_t_next"][due] < 0.0
        write_states(fields, due, index, batch, stays & ~binary_of, stays & binary_of)
        kicked = np.any(result.dv / v_unit != 0.0, axis=2)
        n_sn = np.count_nonzero(result.supernova, axis=1)
        psi = 2.0 * math.pi * azimuth_u
        nseg = parts.shape[0]

        def add(name: str, sel: np.ndarray, values: np.ndarray) -> None:
            """Per-object ``values`` of the rows ``sel`` (indices into ``due``) into each
            segment's part ``name``, summed in row order."""
            parts[:, col[name]] += np.bincount(seg_of[sel], weights=values, minlength=nseg)

        parts[:, col["n_se_evolved"]] += np.bincount(seg_of, minlength=nseg)
        ev = np.flatnonzero(stays)
        if ev.size:
            b_ev = index[ev]
            rows = due[ev]
            bin_ev = binary_of[ev]
            fields["se_tphys"][rows] = batch.tphys[b_ev]
            fields["se_t_next"][rows] = t_next[b_ev]
            _update_objects(fields, rows, batch, b_ev, bin_ev, m_unit, units.length_rsun,
                            product[ev], {k: v[ev] for k, v in old_msun.items()})
            m_new = fields["m"][rows]
            add("n_supernovae", ev, n_sn[b_ev])
            add("m_se", ev, m_old[ev] - m_new)
            add("e_se_kinetic", ev, 0.5 * (m_new - m_old[ev]) * v2_old[ev])
            kick = kicked[b_ev, 0]
            if kick.any():
                kr = rows[kick]
                vr, vt = _kicked_arrays(fields["vr"][kr], fields["vt"][kr], psi[ev[kick]],
                                        result.dv[b_ev[kick], 0] / v_unit)
                add("e_se_kicks", ev[kick],
                    0.5 * m_new[kick] * (vr * vr + vt * vt - v2_old[ev[kick]]))
                fields["vr"][kr], fields["vt"][kr] = vr, vt
            if bin_ev.any():
                rb = rows[bin_ev]
                add("e_se_binding", ev[bin_ev],
                    binding_energy(fields["bin_m1"][rb], fields["bin_m2"][rb],
                                   fields["bin_a"][rb]) - eb_old[ev[bin_ev]])
        # the rest (few): no object to evolve or destroyed, disrupted, merged
        for k in np.flatnonzero(~stays).tolist():
            row = int(due[k])
            p = parts[seg_of[k]]
            b = int(index[k])
            m_old_k = float(m_old[k])
            v2_old_k = float(v2_old[k])
            eb_old_k = float(eb_old[k])
            if b < 0 or result.outcome[b] == se.DESTROYED:
                keep[row] = False
                p[col["n_se_destroyed"]] += 1
                p[col["m_se"]] += m_old_k
                p[col["e_se_kinetic"]] -= 0.5 * m_old_k * v2_old_k
                p[col["e_se_binding"]] -= eb_old_k
                continue
            p[col["n_supernovae"]] += int(n_sn[b])
            fields["se_tphys"][row] = batch.tphys[b]
            fields["se_t_next"][row] = t_next[b]
            # a binary disrupted (two singles, each with its kick) or merged (one left)
            recs = self._split(fields, row, batch, b, m_unit)
            p[col["n_se_disrupted" if len(recs) == 2 else "n_se_mergers"]] += 1
            p[col["e_se_binding"]] -= eb_old_k
            m_new_k = sum(float(r["m"]) for _, r in recs)
            p[col["m_se"]] += m_old_k - m_new_k
            p[col["e_se_kinetic"]] += 0.5 * (m_new_k - m_old_k) * v2_old_k
            for j, rec in recs:
                dv = result.dv[b, j] / v_unit
                if np.any(dv != 0.0):
                    rec["vr"], rec["vt"] = _kicked(rec["vr"], rec["vt"], float(psi[k]), dv)
                p[col["e_se_kicks"]] += 0.5 * float(rec["m"]) * (
                    rec["vr"] ** 2 + rec["vt"] ** 2 - v2_old_k)
            for name in fields:
                fields[name][row] = recs[0][1][name]
            if len(recs) == 2:
                extras.append((row, recs[1][1]))
        gidx, block_start = work.gidx, work.block_start
        if extras or not keep.all():
            fields, gidx, block_start = _relayout(fields, keep, extras, gidx, block_start)
            if work.slots is None:  # rows no longer one per slot (escape.remove_unbound)
                work.slots = np.zeros(0, dtype=np.int64)
        slots = np.unique(work.gidx[due])
        slot_mass = enc.slot_masses(slots, gidx, fields["m"])
        dm = slot_mass - sim.m_all[slots]
        moved = dm != 0.0
        changes = np.column_stack((np.zeros(int(moved.sum())), slots[moved], dm[moved]))
        _, all_changes, _ = update_slot_masses(sim, slots[moved], slot_mass[moved],
                                               changes=changes)
        sim.state.e_se_mass += shell_energy_change(all_changes, sim.r_all, sim.phi_all,
                                                   sim.m_all)
        d_pairs = _slot_pair_energies(touched, gidx, fields["m"], sim.r_all) - pairs_before
        if np.any(d_pairs != 0.0):  # a slot's rows are in one block: its segment's part
            seg = dict(zip(work.gidx[due].tolist(), seg_of.tolist(), strict=True))
            for k in np.flatnonzero(d_pairs != 0.0):
                parts[seg[int(touched[k])], col["e_se_kinetic"]] += d_pairs[k]
        sim.stars = StarTable(fields)
        work.gidx, work.block_start = gidx, block_start

    def _split(self, fields: dict, row: int, batch: se.Batch, b: int,
               m_unit: float) -> list[tuple[int, dict]]:
        """The singles a binary leaves: [(member slot, record)], two if disrupted, one if the
        members merged (or one was destroyed)."""
        rec = {name: col[row] for name, col in fields.items()}
        out = []
        for j in (0, 1):
            if batch.mass[b, j] <= 0.0:
                continue
            single = _as_single(rec, int(rec[f"bin_id{j + 1}"]))
            _write_member(single, None, SINGLE, batch, b, j)
            single["m"] = single["m_msun"] / m_unit
            out.append((j, single))
        return out


def _update_objects(fields: dict, rows: np.ndarray, batch: se.Batch, objects: np.ndarray,
                    binary: np.ndarray, m_unit: float, length_rsun: float, product: np.ndarray,
                    old_msun: dict[str, np.ndarray]) -> None:
    """Objects that stay what they were (single stars, bound binaries: masks over ``rows``),
    their member columns already written (:meth:`StellarEvolution._write_back`): a Hénon mass
    follows BSE's where BSE's changed from ``old_msun`` (the object's or member's mass in Msun
    before, at ``rows``), or for a ``product`` of this step; a binary's orbit is BSE's."""
    single = ~binary
    if single.any():
        rs = rows[single]
        upd = rs[product[single] | (fields["m_msun"][rs] != old_msun["m_msun"][single])]
        fields["m"][upd] = fields["m_msun"][upd] / m_unit
    if not binary.any():
        return
    rb = rows[binary]
    for j in (1, 2):
        msun = fields[f"bin_m{j}_msun"]
        upd = rb[product[binary] | (msun[rb] != old_msun[f"bin_m{j}_msun"][binary])]
        fields[f"bin_m{j}"][upd] = msun[upd] / m_unit
    fields["bin_a"][rb] = batch.sep[objects[binary]] / length_rsun
    fields["bin_e"][rb] = batch.ecc[objects[binary]]
    fields["m"][rb] = fields["bin_m1"][rb] + fields["bin_m2"][rb]
    fields["m_msun"][rb] = fields["bin_m1_msun"][rb] + fields["bin_m2_msun"][rb]


def _kicked_arrays(vr: np.ndarray, vt: np.ndarray, psi: np.ndarray,
                   dv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_kicked` of arrays (``dv`` of shape (n, 3))."""
    x = vt * np.cos(psi) + dv[:, 0]
    y = vt * np.sin(psi) + dv[:, 1]
    return vr + dv[:, 2], np.hypot(x, y)


def _kicked(vr: float, vt: float, psi: float, dv: np.ndarray) -> tuple[float, float]:
    """(vr, vt) after a kick ``dv`` (Hénon velocity; components: two transverse, radial),
    the transverse velocity at azimuth ``psi`` in its plane (CMC's vt_add_kick)."""
    x = vt * math.cos(psi) + float(dv[0])
    y = vt * math.sin(psi) + float(dv[1])
    return float(vr) + float(dv[2]), math.hypot(x, y)


def _relayout(fields: dict, keep: np.ndarray, extras: list[tuple[int, dict]],
              gidx: np.ndarray, block_start: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray]:
    """The table without the destroyed rows and with each extra row right after the row it
    came from (same slot, same block); the rows' slots and the blocks' first rows."""
    n = keep.size
    after = np.array([r for r, _ in extras], dtype=np.int64)
    row_block = np.searchsorted(block_start, np.arange(n), side="right") - 1
    at = np.searchsorted(np.flatnonzero(keep), after, side="right")
    out = {}
    for name, arr in fields.items():
        col = arr[keep]
        if extras:
            col = np.insert(col, at, np.array([rec[name] for _, rec in extras],
                                               dtype=arr.dtype))
        out[name] = col
    new_gidx = gidx[keep]
    blocks = row_block[keep]
    if extras:
        new_gidx = np.insert(new_gidx, at, gidx[after])
        blocks = np.insert(blocks, at, row_block[after])
    nb = block_start.size - 1
    return out, new_gidx, np.searchsorted(blocks, np.arange(nb + 1)).astype(np.int64)


def _slot_pair_energies(slots: np.ndarray, gidx: np.ndarray, m: np.ndarray,
                        r_all: np.ndarray) -> np.ndarray:
    """Pair energy ``-sum_{a<b} m_a m_b / r_g`` of the rows at each of the sorted ``slots``
    (``gidx`` each row's slot): 0 at a slot of one row.  Shells at one radius interact
    with ``1 / max(r_a, r_b) = 1 / r_g``, as the orbits and the escape see them (each row's
    potential leaves out its own mass only), and as the sort's one row per slot then has it
    in ``W``; the replicated arrays hold a slot's rows as one shell without it.  The rows
    are summed in row order."""
    out = np.zeros(slots.size)
    if slots.size == 0:
        return out
    top = int(slots[-1]) + 1
    listed = np.zeros(top + 1, dtype=bool)
    listed[slots] = True
    rows = np.flatnonzero(listed[np.minimum(gidx, top)])
    at = np.searchsorted(slots, gidx[rows])
    shared = np.flatnonzero(np.bincount(at, minlength=slots.size) > 1)
    for k in shared:  # few: a loop over their rows
        ms = m[rows[at == k]]
        e = 0.0
        for a in range(ms.size):
            for b in range(a + 1, ms.size):
                e -= float(ms[a]) * float(ms[b])
        out[k] = e / float(r_all[slots[k]])
    return out


def shell_energy_change(changes: np.ndarray, r_all: np.ndarray, phi_all: np.ndarray,
                        m_all: np.ndarray) -> float:
    """Exact change of the shells' pair energy ``W = -sum m_a m_b / max(r_a, r_b)`` from mass
    changes ``dm`` at slots, given the potential and masses after them.

    With ``phi'`` the new potential (own shell included) and ``m'`` the new masses,
    ``dW = sum_g dm_g (phi'_g + m'_g / r_g) + sum_{a<b} dm_a dm_b / max(r_a, r_b)``.  Every
    rank holds the same gathered rows and replicated arrays, so every rank gets the same bits.

    Parameters
    ----------
    changes : ndarray, shape (k, 3)
        Rows (key, slot, mass change) of all ranks (:func:`cmc.replicated.update_slot_masses`).
    r_all, phi_all, m_all : ndarray
        Replicated radii, potential and masses after the change.
    """
    if changes.shape[0] == 0:
        return 0.0
    slot = changes[:, 1].astype(np.int64)
    order = np.argsort(slot, kind="stable")
    g = slot[order]
    dm = changes[order, 2]
    r = r_all[g]
    own = float(np.sum(dm * (phi_all[g] + m_all[g] / r)))
    before = np.cumsum(dm) - dm  # changes at smaller radii (slots are in radial order)
    return own + float(np.sum(dm * before / r))


def zero_age_state(stars: dict[str, np.ndarray], z: float, length_rsun: float,
                   pts1_highmass_cutoff: float, tolerance: float,
                   age_tolerance: float | None = None) -> None:
    """Give an initial model its stellar-evolution columns: every star at zero age (type 0
    below 0.7 Msun, else 1, as CMC-COSMIC; BSE's initial and ZAMS mass its mass), evolved
    over 1e-6 Myr by BSE to set its radius, luminosity and main-sequence time (CMC-COSMIC's
    stellar_evolution_init), and scheduled.  Runs on the global table (rank 0); BSE's seed
    is the object's id, so the set-up draws nothing from the streams.

    A file's stellar types other than 0 and 1 (a star that is not on the zero-age main
    sequence) carry no BSE history (initial mass, epoch): refused.
    """
    from cmc.fields import SE_BINARY_FIELDS, SE_FIELDS, STAR_FIELDS

    n = stars["m"].size
    has_bin = "bin_a" in stars
    for f in STAR_FIELDS:  # a model's table may leave fields at their defaults out
        if f.name not in stars:
            stars[f.name] = np.full(n, f.default, dtype=f.dtype)
    for f in SE_FIELDS + (SE_BINARY_FIELDS if has_bin else ()):
        stars[f.name] = np.full(n, f.default, dtype=f.dtype)
    binary = stars["binind"] >= 0 if has_bin else np.zeros(n, dtype=bool)
    for names, sel in ((SINGLE, ~binary),) + tuple((MEMBER[j], binary) for j in (0, 1)):
        if not sel.any():
            continue
        kstar = stars[names["kstar"]]
        given = sel & (kstar != 1)
        bad = given & (kstar != 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"object id {int(stars['id'][i])} starts with stellar type "
                             f"{int(kstar[i])}: stellar evolution starts from the zero-age "
                             "main sequence (types 0 and 1)")
        mass = stars[names["mass"]]
        if np.any(mass[sel] <= 0.0):
            raise ValueError("stellar evolution needs every star's mass in Msun (m_msun > 0)")
        kstar[sel] = np.where(mass[sel] <= 0.7, 0, 1)
        stars[names["mass0"]][sel] = mass[sel]
        stars[names["zams"]][sel] = mass[sel]
    rows = np.arange(n)
    seeds = 1 + np.asarray(stars["id"], dtype=np.int64) % _SEED_SPAN
    batch = batch_of(stars, rows, length_rsun, seeds)
    with bse_watchdog():
        result = se.evolve(batch, 1e-6, z, pts1_highmass_cutoff)
    # a binary BSE disrupts or merges at once (members in contact) keeps its zero-age state
    # and is evolved in the first step, where the products enter the table
    ok = result.outcome == se.EVOLVED
    write_states(stars, rows, rows, batch, ok & ~binary, ok & binary)
    if has_bin:
        stars["m_msun"][binary] = stars["bin_m1_msun"][binary] + stars["bin_m2_msun"][binary]
    stars["se_tphys"][:] = np.where(ok, batch.tphys, 0.0)
    stars["se_t_next"][:] = np.where(ok, se.next_call_times(batch, result, np.zeros(n), 1e-6,
                                                            tolerance, age_tolerance),
                                      DUE_NOW)


def write_states(fields: dict[str, np.ndarray], rows: np.ndarray, objects: np.ndarray,
                 batch: se.Batch, single: np.ndarray, binary: np.ndarray) -> None:
    """Batch objects ``objects`` into the table's ``rows``, a column at a time: slot 0 into
    the single-star columns where ``single``, both members into the binary columns where
    ``binary`` (masks over ``rows``)."""
    for names, j, sel in ((SINGLE, 0, single), (MEMBER[0], 0, binary), (MEMBER[1], 1, binary)):
        if sel.any():
            for key, name in names.items():
                fields[name][rows[sel]] = batch_column(batch, key)[objects[sel], j]


def batch_column(batch: se.Batch, key: str) -> np.ndarray:
    """A member quantity of a batch, shape (n, 2)."""
    return getattr(batch, key) if key in ("kstar", "mass", "rad") else batch.q[key]


def start_stellar_evolution(stars: dict[str, np.ndarray], cfg, info: dict) -> None:
    """:func:`zero_age_state` for a new run's global table (rank 0), with the run's flags,
    metallicity (the model's, else ``bse.metallicity``) and length unit."""
    from cmc.bse_config import bse_flags
    from cmc.units import constants

    se.apply_flags(bse_flags(cfg.bse))
    z = float(info.get("metallicity", 0.0)) or cfg.bse.metallicity
    info["metallicity"] = z  # the run's Z, kept in its state and outputs
    length_rsun = float(info["scale"][1]) * constants()["rsun_per_pc"]
    zero_age_state(stars, z, length_rsun, cfg.bse.pts1_highmass_cutoff, cfg.bse.tolerance,
                   cfg.bse.ms_age_tolerance)


class MergeRule:
    """``BinaryPhysics.merge_stars`` of a run with stellar evolution: the product of two stars
    that touch in a few-body encounter, made by BSE
    (:func:`physics.stellar_mergers.merge_pair`) at the start of the step from the parts'
    member dicts (:mod:`physics.encounter_events`).  A merger draws nothing from the streams
    (BSE's seed is a function of the parts' masses).  A kick BSE gives the product (a
    supernova during the merger) is left out and logged: the product is evolved again in the
    same step."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def __call__(self, parts: list[dict]) -> dict | None:
        sim = self.sim
        t = max(sim.units.rel_to_myr(sim.state.time),
                *(float(p["se_tphys"]) for p in parts))
        # the seed: a function of the parts' masses (their bits), the same on every rank
        bits = np.array([float(p["m_msun"]) for p in parts]).view(np.uint64)
        seed = 1 + int(np.bitwise_xor.reduce(bits) % np.uint64(_SEED_SPAN))
        q = {name: np.array([float(p[name]) for p in parts]) for name in se.MEMBER_QUANTITIES}
        with bse_watchdog():
            out = merge_pair(np.array([int(p["startype"]) for p in parts], dtype=np.int32),
                                np.array([float(p["m_msun"]) for p in parts]),
                                np.array([float(p["rad"]) for p in parts]), q, t,
                                sim.state.metallicity, seed, sim.cfg.bse.pts1_highmass_cutoff)
        if out is None:
            return None
        if np.any(out["dv"] != 0.0):
            log.info("a merger product got a kick of %.3g km/s from BSE (not applied)",
                     float(np.linalg.norm(out["dv"])))
        return {"m_msun": out["mass"], "rad": out["rad"], "startype": out["kstar"],
                "se_tphys": out["tphys"], **{name: out[name] for name in se.MEMBER_QUANTITIES}}


def binary_physics_settings(sim: Simulation) -> dict:
    """What stellar evolution sets in the run's :class:`physics.encounters.BinaryPhysics`:
    stellar radii as sticky spheres (one Rsun in the cluster's length unit) and the merger
    rule; nothing in runs without it (point masses)."""
    if not sim.cfg.bse.stellar_evolution:
        return {}
    return {"radius_unit": 1.0 / sim.units.length_rsun, "merge_stars": MergeRule(sim)}


