"""The BSE state of stellar evolution carried through the binary processes (issue 48).

With stellar evolution on, every star carries its BSE state (``se_<q>`` for a single star,
``bin_se_<q>_<j>`` for member j of a binary, per object ``se_tphys`` and ``se_t_next``).  The
events of :mod:`physics.encounter_events` must move it with the stars: an exchange keeps each
member's state with its id, a broken binary gives its members' states to the singles, a
three-body binary takes the singles' states into its member slots, and a merger's state comes
from the merge rule (``BinaryPhysics.merge_stars``).  Every product is due for stellar
evolution (``se_t_next = -1``).  Without the BSE fields nothing changes.

Synthetic records and outcomes only: no integration, no COSMIC call.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from cmc.fields import BINARY_FIELDS, STAR_FIELDS
from physics import encounter_events as ev
from physics import fewbody
from physics.encounter_events import COUNT_NAMES, C
from physics.potential import compute_potential
from physics.stellar_evolution import (
    MEMBER_QUANTITIES,
    OBJECT_TIMES,
    member_field,
    single_field,
)

N = 40
SINGLE = 20  # row of the single star of the encounter
BIN = 21  # row of the binary (members 100, 101)
BIN_IDS = (100, 101)
QS = tuple(MEMBER_QUANTITIES)
#: The BSE fields of the star table (all float64, default 0).
SE_KEYS = ({single_field(q) for q in QS} | set(OBJECT_TIMES)
           | {member_field(q, j) for q in QS for j in (1, 2)})


def _state_of(sid: int) -> dict:
    """A distinct BSE state for star ``sid``: quantity k is ``1000 sid + k + 0.5``."""
    return {q: 1000.0 * sid + k + 0.5 for k, q in enumerate(QS)}


def _table(se: bool = True) -> dict:
    """``N`` stars in a unit sphere; row BIN a binary of stars 100, 101; with ``se`` the BSE
    fields filled with distinct values (each single its own state and clock, the binary's
    members theirs and one clock)."""
    rng = np.random.default_rng(11)
    t = {f.name: np.full(N, f.default, dtype=f.dtype) for f in STAR_FIELDS + BINARY_FIELDS}
    if se:
        t.update({k: np.zeros(N) for k in sorted(SE_KEYS)})
    t["id"] = np.arange(N, dtype=np.int64)
    t["m"] = np.linspace(0.5, 1.5, N) / N
    t["m"] /= t["m"].sum()
    t["m_msun"] = 40.0 * t["m"]
    t["r"] = np.sort(rng.random(N)) ** (1 / 3)
    t["vr"] = rng.normal(0, 0.05, N)
    t["vt"] = np.abs(rng.normal(0, 0.05, N))
    t["rad"] = 1.0 + np.arange(N) / 100.0
    t["startype"][:] = 1
    t["startype"][SINGLE] = 3
    m = t["m"][BIN]
    t["binind"][BIN] = 0
    t["bin_id1"][BIN], t["bin_id2"][BIN] = BIN_IDS
    t["bin_m1"][BIN], t["bin_m2"][BIN] = 0.6 * m, 0.4 * m
    t["bin_m1_msun"][BIN], t["bin_m2_msun"][BIN] = 0.6 * t["m_msun"][BIN], 0.4 * t["m_msun"][BIN]
    t["bin_a"][BIN], t["bin_e"][BIN] = 1e-4, 0.3
    t["bin_rad1"][BIN], t["bin_rad2"][BIN] = 2.0, 3.0
    t["bin_startype1"][BIN], t["bin_startype2"][BIN] = 4, 1
    t["m_msun"][BIN] = 0.0
    t["rad"][BIN] = 0.0
    if se:
        for i in range(N):
            for q, x in _state_of(i).items():
                t[single_field(q)][i] = x
        for q in QS:
            t[single_field(q)][BIN] = 0.0
        for j, sid in enumerate(BIN_IDS, start=1):
            for q, x in _state_of(sid).items():
                t[member_field(q, j)][BIN] = x
        t["se_tphys"] = 10.0 + np.arange(N, dtype=float)
        t["se_tphys"][BIN] = 7.0
        t["se_t_next"] = 100.0 + np.arange(N, dtype=float)
    return t


def _block(t: dict, b: int = 1) -> ev._Block:
    phi_all, _ = compute_potential(t["r"], t["m"])
    return ev._Block(t, b, N, 0, t["r"], phi_all)


def _records(blk: ev._Block, slots: tuple[int, ...] = (SINGLE, BIN)) -> list[dict]:
    """The products an event wrote in the rows ``slots`` of the block: there, as extra rows
    or ejected."""
    return ([blk.row(i) for i in slots if blk.row(i) is not None]
            + [r for _, r in blk.extra] + [r for r, _, _ in blk.ejected])


def _by_id(recs: list[dict]) -> dict[int, dict]:
    return {int(r["id"]): r for r in recs}


def _counts() -> np.ndarray:
    return np.zeros(len(COUNT_NAMES))


def _leaf(ids: tuple[int, ...], m: float = 1e-3, radius: float = 0.0) -> fewbody.Product:
    return fewbody.Product(ids=ids, m=m, x=np.zeros(3), v=np.zeros(3), radius=radius)


def _pair(c1: fewbody.Product, c2: fewbody.Product) -> fewbody.Product:
    return fewbody.Product(ids=c1.ids + c2.ids, m=c1.m + c2.m, x=np.zeros(3), v=np.zeros(3),
                           a=2e-4, e=0.5, children=[c1, c2])


def _encounter(t: dict, products: list[fewbody.Product], merge_stars=None, mergers: int = 0,
               radius_unit: float = 0.0) -> ev._Block:
    """Write back an outcome with ``products`` (top-level objects) of the encounter of rows
    SINGLE and BIN (their velocities at infinity: equal and opposite, slow)."""
    blk = _block(t)
    obj1 = ev._object(blk.row(SINGLE), radius_unit)
    obj2 = ev._object(blk.row(BIN), radius_unit)
    state = fewbody.initial_state(obj1, obj2, 0.1, 1e-4, [0.3, 0.6, 0.2, 0.7] * 2)
    dirs = [np.array([0.01, 0.0, 0.0]), np.array([-0.01, 0.0, 0.0])]
    for p, d in zip(products, dirs, strict=False):
        p.v_inf = d
    out = SimpleNamespace(valid=True, reason="", products=products, exchanges=0,
                          n_binaries_in=1, n_binaries_out=1, mergers=mergers, de_merger=0.0,
                          de_gw=0.0, n_gw_mergers=0)
    ev._encounter(blk, SINGLE, 1.1, state, 0.4, out, _counts(), radius_unit, merge_stars)
    return blk


def _assert_single_state(rec: dict, sid: int, tphys: float) -> None:
    for q, x in _state_of(sid).items():
        assert rec[single_field(q)] == x, q
    for q in QS:
        assert rec[member_field(q, 1)] == 0.0 and rec[member_field(q, 2)] == 0.0
    assert rec["se_tphys"] == tphys
    assert rec["se_t_next"] == -1.0


def _assert_binary_state(rec: dict, ids: tuple[int, int], tphys: float) -> None:
    assert (int(rec["bin_id1"]), int(rec["bin_id2"])) == ids
    for j, sid in enumerate(ids, start=1):
        for q, x in _state_of(sid).items():
            assert rec[member_field(q, j)] == x, (q, j)
    for q in QS:
        assert rec[single_field(q)] == 0.0
    assert rec["se_tphys"] == tphys
    assert rec["se_t_next"] == -1.0


# ------------------------------------------------------------------------------ members
def test_members_read_the_bse_state():
    t = _table()
    blk = _block(t)
    single = ev._members(blk.row(SINGLE))[SINGLE]
    assert {q: single[q] for q in QS} == _state_of(SINGLE)
    assert single["se_tphys"] == 10.0 + SINGLE
    both = ev._members(blk.row(BIN))
    assert list(both) == list(BIN_IDS)
    for sid in BIN_IDS:
        assert {q: both[sid][q] for q in QS} == _state_of(sid)
        assert both[sid]["se_tphys"] == 7.0
    plain = ev._members(_block(_table(se=False)).row(BIN))
    assert all(set(m) == {"m", "m_msun", "rad", "startype"} for m in plain.values())


# ----------------------------------------------------------------------------- exchange
def test_exchange_keeps_each_members_state_with_its_id():
    """[100 101] + 20 -> [101 20] + 100: the new binary holds 101's and 20's states in the
    slots of their ids, with the later clock; 100 leaves as a single with its own state and
    the old binary's clock; both are due."""
    t = _table()
    blk = _encounter(t, [_pair(_leaf((101,)), _leaf((SINGLE,))), _leaf((100,))])
    recs = _records(blk)
    assert len(recs) == 2
    binrec = next(r for r in recs if r["binind"] >= 0)
    single = next(r for r in recs if r["binind"] < 0)
    _assert_binary_state(binrec, (101, SINGLE), max(7.0, 10.0 + SINGLE))
    assert binrec["bin_startype1"] == 1 and binrec["bin_startype2"] == 3
    assert single["id"] == 100
    _assert_single_state(single, 100, 7.0)
    assert single["startype"] == 4 and single["rad"] == 2.0


def test_flyby_keeps_states_and_makes_both_due():
    t = _table()
    blk = _encounter(t, [_pair(_leaf((100,)), _leaf((101,))), _leaf((SINGLE,))])
    recs = _by_id(_records(blk))
    _assert_binary_state(recs[int(t["id"][BIN])], BIN_IDS, 7.0)
    _assert_single_state(recs[SINGLE], SINGLE, 10.0 + SINGLE)


# -------------------------------------------------------------------------- wide breaks
def test_break_of_a_wide_binary_gives_each_single_its_members_state():
    t = _table()
    blk = _block(t)
    ev._break_wide(blk, BIN, _counts())
    recs = _by_id(_records(blk, (BIN,)))
    for sid in BIN_IDS:
        _assert_single_state(recs[sid], sid, 7.0)
    assert recs[100]["startype"] == 4 and recs[101]["rad"] == 3.0


# ---------------------------------------------------------------------- three-body binary
def test_three_body_binary_takes_the_singles_states_with_the_latest_clock():
    """Rows 23..25 (masses rising with the row): 25 and 24 pair up (25 first, the heavier),
    23 recoils with its own state and schedule (only its orbit changed)."""
    t = _table()
    blk = _block(t)
    i = 23
    before = dict(blk.row(i))
    u = np.array([0.1, 0.7, 0.3, 0.5, 0.4, 0.6, 0.2])
    ev._three_body(blk, i, np.array([1.0, 0.01, 1.0 / N]), u, ev.BinaryPhysics(), _counts())
    recs = _records(blk, (i, i + 1, i + 2))
    binrec = next(r for r in recs if r["binind"] >= 0)
    _assert_binary_state(binrec, (25, 24), 10.0 + 25)
    third = next(r for r in recs if r["binind"] < 0 and r["id"] == i)
    assert {k: third[k] for k in third if k in SE_KEYS} == {
        k: before[k] for k in before if k in SE_KEYS}


def test_three_body_binary_clock_is_the_later_members():
    """A binary's clock is the later member's whichever member is first."""
    t = _table()
    t["se_tphys"][25] = 3.0  # the heavier member lags
    blk = _block(t)
    ev._three_body(blk, 23, np.array([1.0, 0.01, 1.0 / N]),
                   np.array([0.1, 0.7, 0.3, 0.5, 0.4, 0.6, 0.2]), ev.BinaryPhysics(),
                   _counts())
    binrec = next(r for r in _records(blk, (23, 24, 25)) if r["binind"] >= 0)
    assert binrec["bin_id1"] == 25 and binrec["se_tphys"] == 10.0 + 24


# ------------------------------------------------------------------------------ mergers
class FakeMerge:
    """A merge rule that sums masses and quantities, records its arguments, and gives the
    product a clock of the later part + 0.5 and stellar type 4."""

    def __init__(self, destroy: bool = False):
        self.calls: list[list[dict]] = []
        self.destroy = destroy

    def __call__(self, parts: list[dict]) -> dict | None:
        self.calls.append([dict(p) for p in parts])
        if self.destroy:
            return None
        out = {q: sum(p[q] for p in parts) for q in QS}
        out.update(m_msun=sum(p["m_msun"] for p in parts), rad=5.5, startype=4,
                   se_tphys=max(p["se_tphys"] for p in parts) + 0.5, m=-1.0)
        return out


def _part(t: dict, sid: int) -> dict:
    """What merge_stars is given for star ``sid`` of the table."""
    if sid in BIN_IDS:
        j = BIN_IDS.index(sid) + 1
        return {"m": t[f"bin_m{j}"][BIN], "m_msun": t[f"bin_m{j}_msun"][BIN],
                "rad": t[f"bin_rad{j}"][BIN], "startype": t[f"bin_startype{j}"][BIN],
                **_state_of(sid), "se_tphys": 7.0}
    return {"m": t["m"][sid], "m_msun": t["m_msun"][sid], "rad": t["rad"][sid],
            "startype": t["startype"][sid], **_state_of(sid), "se_tphys": t["se_tphys"][sid]}


def test_merger_product_carries_the_merge_rules_state():
    """20 merges with 100 (the product under id 20), 101 flies off: merge_stars gets both
    parents' member dicts in id order; the product has their summed Hénon mass and the
    rule's state; both products are due."""
    t = _table()
    merge = FakeMerge()
    blk = _encounter(t, [_leaf((SINGLE, 100), radius=1.0), _leaf((101,))], merge, mergers=1)
    assert merge.calls == [[_part(t, SINGLE), _part(t, 100)]]
    recs = _by_id(_records(blk))
    prod = recs[SINGLE]
    assert prod["binind"] < 0
    assert prod["m"] == t["m"][SINGLE] + t["bin_m1"][BIN]
    assert prod["m_msun"] == t["m_msun"][SINGLE] + t["bin_m1_msun"][BIN]
    assert prod["rad"] == 5.5 and prod["startype"] == 4
    for q in QS:
        assert prod[single_field(q)] == _state_of(SINGLE)[q] + _state_of(100)[q]
    assert prod["se_tphys"] == 10.0 + SINGLE + 0.5
    assert prod["se_t_next"] == -1.0
    _assert_single_state(recs[101], 101, 7.0)


def test_merger_product_in_a_binary():
    """[20:101 100]: the merger product is a member of the new binary, in its id's slot."""
    t = _table()
    merge = FakeMerge()
    blk = _encounter(t, [_pair(_leaf((SINGLE, 101), radius=1.0), _leaf((100,)))], merge,
                     mergers=1)
    assert merge.calls == [[_part(t, SINGLE), _part(t, 101)]]
    (binrec,) = _records(blk)
    assert (binrec["bin_id1"], binrec["bin_id2"]) == (SINGLE, 100)
    for q in QS:
        assert binrec[member_field(q, 1)] == _state_of(SINGLE)[q] + _state_of(101)[q]
        assert binrec[member_field(q, 2)] == _state_of(100)[q]
    assert binrec["bin_m1"] == t["m"][SINGLE] + t["bin_m2"][BIN]
    assert binrec["bin_rad1"] == 5.5 and binrec["bin_startype1"] == 4
    assert binrec["se_tphys"] == 10.0 + SINGLE + 0.5 and binrec["se_t_next"] == -1.0


def test_three_star_merger_is_merged_pairwise_in_id_order():
    t = _table()
    merge = FakeMerge()
    blk = _encounter(t, [_leaf((101, SINGLE, 100), radius=1.0)], merge, mergers=2)
    first, second = merge.calls
    assert first == [_part(t, SINGLE), _part(t, 100)]
    assert second[1] == _part(t, 101)
    assert second[0]["m"] == t["m"][SINGLE] + t["bin_m1"][BIN]
    assert second[0]["se_tphys"] == 10.0 + SINGLE + 0.5
    (prod,) = _records(blk)
    assert prod["id"] == SINGLE
    assert prod["m"] == pytest.approx(t["m"][SINGLE] + t["m"][BIN], rel=1e-15)
    assert prod[single_field("lum")] == sum(_state_of(s)["lum"] for s in (SINGLE, *BIN_IDS))
    assert prod["se_t_next"] == -1.0


def test_merger_destroyed_by_bse_leaves_a_massless_remnant():
    """merge_stars None: the product keeps the Hénon mass (stellar evolution removes it) as a
    massless remnant; merging with a remnant leaves the other star as it was."""
    t = _table()
    merge = FakeMerge(destroy=True)
    blk = _encounter(t, [_leaf((SINGLE, 100), radius=1.0), _leaf((101,))], merge, mergers=1)
    prod = _by_id(_records(blk))[SINGLE]
    assert prod["startype"] == ev.MASSLESS_REMNANT
    assert prod["m_msun"] == 0.0 and prod["rad"] == 0.0
    assert prod["m"] == t["m"][SINGLE] + t["bin_m1"][BIN]
    assert all(prod[single_field(q)] == 0.0 for q in QS)
    assert prod["se_tphys"] == 10.0 + SINGLE and prod["se_t_next"] == -1.0
    # three stars: the first pair destroyed, the third survives as it was
    merge = FakeMerge(destroy=True)
    members = {**ev._members(_block(t).row(SINGLE)), **ev._members(_block(t).row(BIN))}
    sid = ev._leaf(_leaf((SINGLE, 100, 101)), members, 1.0, merge)
    assert len(merge.calls) == 1
    assert {q: members[sid][q] for q in QS} == _state_of(101)
    assert members[sid]["se_tphys"] == 7.0 and members[sid]["startype"] == 1
    assert members[sid]["m"] == pytest.approx(t["m"][SINGLE] + t["m"][BIN], rel=1e-15)


def test_merger_with_bse_state_needs_a_merge_rule():
    t = _table()
    with pytest.raises(ValueError, match="merge_stars"):
        _encounter(t, [_leaf((SINGLE, 100), radius=1.0), _leaf((101,))], None, mergers=1)
    bad = FakeMerge()
    with pytest.raises(ValueError, match="tms"):
        _encounter(t, [_leaf((SINGLE, 100), radius=1.0), _leaf((101,))],
                   lambda parts: {k: v for k, v in bad(parts).items() if k != "tms"},
                   mergers=1)


def test_merger_without_bse_state_is_as_before():
    """No BSE fields: masses summed, radius from the integrator, the larger type; no merge
    rule called."""
    t = _table(se=False)
    merge = FakeMerge()
    blk = _encounter(t, [_leaf((SINGLE, 100), radius=0.25), _leaf((101,))], merge,
                     mergers=1, radius_unit=0.5)
    assert merge.calls == []
    prod = _by_id(_records(blk))[SINGLE]
    assert prod["m_msun"] == t["m_msun"][SINGLE] + t["bin_m1_msun"][BIN]
    assert prod["rad"] == 0.5 and prod["startype"] == 4
    assert not SE_KEYS & set(prod)


# ------------------------------------------------------------------ without the fields
def _run_all(se: bool) -> list[list[dict]]:
    """The records every kind of event writes back, on the table with or without BSE."""
    out = []
    t = _table(se)
    out.append(_records(_encounter(t, [_pair(_leaf((101,)), _leaf((SINGLE,))),
                                       _leaf((100,))])))
    blk = _block(t)
    ev._break_wide(blk, BIN, _counts())
    out.append(_records(blk, (BIN,)))
    blk = _block(t)
    ev._three_body(blk, 23, np.array([1.0, 0.01, 1.0 / N]),
                   np.array([0.1, 0.7, 0.3, 0.5, 0.4, 0.6, 0.2]), ev.BinaryPhysics(),
                   _counts())
    out.append(_records(blk, (23, 24, 25)))
    return out


def test_the_bse_state_changes_nothing_else():
    """The same events with and without the BSE fields write the same other fields, bit for
    bit; without them no BSE field appears."""
    with_se, without = _run_all(True), _run_all(False)
    for a, b in zip(with_se, without, strict=True):
        assert len(a) == len(b)
        for ra, rb in zip(a, b, strict=True):
            assert not SE_KEYS & set(rb)
            assert set(ra) - SE_KEYS == set(rb)
            for k in rb:
                va, vb = ra[k], rb[k]
                assert va == vb or (math.isnan(va) and math.isnan(vb)), k


def test_counts_are_unchanged_by_the_bse_state():
    """An encounter's counters do not depend on the BSE fields."""
    res = []
    for se in (True, False):
        t = _table(se)
        blk = _block(t)
        counts = _counts()
        ev._break_wide(blk, BIN, counts)
        res.append(counts)
    np.testing.assert_array_equal(res[0], res[1])
    assert res[0][C["n_wide_broken"]] == 1
