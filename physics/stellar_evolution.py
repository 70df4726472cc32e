"""Stellar evolution through COSMIC's BSE (``cosmic._evolvebin.evolv2``): single stars and
binaries evolved from their last call to a new time, as CMC-COSMIC does.

This module names the per-star BSE state that the star table carries (the table's fields are
declared from these names in :mod:`cmc.fields`).  A star's BSE state is its stellar type
(``startype`` / ``bin_startype{j}``), its mass (``m_msun`` / ``bin_m{j}_msun``) and radius
(``rad`` / ``bin_rad{j}``), which every run has, plus :data:`MEMBER_QUANTITIES`, present only
when stellar evolution is on.  Per object (single star or binary) there are also
``se_tphys`` (time of its last BSE call) and ``se_t_next`` (when it must next be evolved).

The kernel layer (numpy and cosmic only; see ``docs/notes/issue48_stellar_evolution_brief.md``):

* :func:`cosmic_defaults` and :func:`apply_flags` set COSMIC's common blocks once per process;
* :class:`Batch` is a structure of arrays of objects (2 member slots each; a single star is
  slot 0 with a massless ``kstar = 15`` companion in slot 1, as CMC-COSMIC does);
* :func:`evolve` evolves every object of a batch to a new time, one ``evolv2`` call each, and
  writes the state back in place; :class:`Result` says what happened (outcome, kicks);
* :func:`merge_pair` makes the product of two colliding stars;
* :func:`next_call_times` says when each object must next be evolved.

Units: Msun, Rsun, Lsun, Myr, km/s; orbital periods in days.  BSE keeps all its state in
process-global Fortran common blocks: never call it from threads.  ``evolv2`` writes warnings
to Fortran unit 99, i.e. to a file ``fort.99`` in the current directory (only when it has
something to say: more than 40 bpp rows, interpolation or iteration limits).
"""

from __future__ import annotations

import ast
import copy
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

import numpy as np

#: Per-star BSE quantities beyond type, mass and radius: name -> (unit, meaning).
MEMBER_QUANTITIES: dict[str, tuple[str, str]] = {
    "mass0": ("Msun", "BSE's initial mass (reset at phase changes and by mass transfer)"),
    "lum": ("Lsun", "luminosity"),
    "massc": ("Msun", "core mass"),
    "radc": ("Rsun", "core radius"),
    "menv": ("Msun", "mass of the convective envelope"),
    "renv": ("Rsun", "radius of the convective envelope"),
    "ospin": ("1/yr", "spin angular frequency"),
    "b0": ("G", "magnetic field (pulsars)"),
    "bacc": ("Msun", "mass accreted by a neutron star"),
    "tacc": ("Myr", "time spent accreting (neutron star)"),
    "epoch": ("Myr", "epoch: the star's age is tphys - epoch"),
    "tms": ("Myr", "main-sequence lifetime"),
    "bhspin": ("", "dimensionless black-hole spin"),
    "zams": ("Msun", "zero-age main-sequence mass"),
}

#: Per-object times: name -> (unit, meaning).
OBJECT_TIMES: dict[str, tuple[str, str]] = {
    "se_tphys": ("Myr", "time of the object's last stellar-evolution call"),
    "se_t_next": ("Myr", "time by which the object must next be evolved"),
}


def single_field(quantity: str) -> str:
    """Star-table field of ``quantity`` for a single star (``se_<quantity>``)."""
    return f"se_{quantity}"


def member_field(quantity: str, j: int) -> str:
    """Star-table field of ``quantity`` for member ``j`` (1 or 2) of a binary
    (``bin_se_<quantity>_<j>``)."""
    return f"bin_se_{quantity}_{j}"


# --------------------------------------------------------------------------------------------
# Outcomes, constants
# --------------------------------------------------------------------------------------------

#: The object evolved without a change of structure (a binary is still bound, a single star
#: still has mass).
EVOLVED = 0
#: A binary was disrupted (by a supernova kick): both members survive as single stars.
DISRUPTED = 1
#: One star is left in slot 0 (member 1): a merger, or member 2 destroyed (e.g. pair instability).
MERGED_1 = 2
#: One star is left in slot 1 (member 2).
MERGED_2 = 3
#: Nothing is left (both slots massless); a single star that becomes massless counts here.
DESTROYED = 4
#: Names of the outcomes, by value.
OUTCOME_NAMES = ("evolved", "disrupted", "merged_1", "merged_2", "destroyed")

#: Stellar type of a massless slot.
MASSLESS = 15
#: BSE's constants (``const_bse.h``): Rsun per AU and days per year, used for the period.
AURSUN = 214.95
YEARDY = 365.24
#: Call seeds must lie in [SEED_MIN, SEED_MAX] (``rand1.idum1`` is an int32; ran3 needs > 0).
SEED_MIN, SEED_MAX = 1, 2**31 - 2
#: Roche-lobe filling factor above which a binary is evolved at every step (see
#: :func:`next_call_times`).
RRLO_EVERY_STEP = 0.18

# Column indices (0-based) in a bpp row with all 52 columns (cosmic.consts.ALL_COLUMNS).
_SEP, _PORB, _ECC, _RRLO1, _RRLO2, _EVOL_TYPE = 5, 6, 7, 8, 9, 10
_BIN_STATE, _MERGER_TYPE = 49, 50
# The BSE arrays, in evolv2's argument order after rad (lumin is our "lum", b_0 our "b0").
_EVOLV2_Q = ("mass0", "lum", "massc", "radc", "menv", "renv", "ospin", "b0", "bacc", "tacc",
             "epoch", "tms", "bhspin")
_NATAL_KICK_RESET = np.array([[-100.0, -100.0, -100.0, -100.0, 0.0]] * 2)


class StellarEvolutionError(RuntimeError):
    """BSE failed for one object of a batch.

    Attributes
    ----------
    index : int
        The object's index in the batch.
    """

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


# --------------------------------------------------------------------------------------------
# Flags
# --------------------------------------------------------------------------------------------

def _literal(text: Any) -> Any:
    """A json option's value: a number, or a string like ``'[2.0/21.0, ...]'``."""
    if not isinstance(text, str):
        return text

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.List):
            return [ev(x) for x in node.elts]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return ev(node.left) / ev(node.right)
        raise ValueError(f"cannot read the COSMIC default {text!r}")

    return ev(ast.parse(text, mode="eval").body)


def cosmic_defaults() -> dict[str, Any]:
    """COSMIC's BSE defaults, keyed by COSMIC's ``BSEDict`` names.

    Read from ``cosmic/data/cosmic-settings.json`` (category ``bse``, the option marked
    ``default``): 71 keys, spelt as COSMIC spells them (``LBV_flag``, ``ST_tide`` and
    ``ST_cr`` are mixed-case; all others lower-case).  The per-system ``randomseed`` is not
    among them: :func:`evolve` takes one seed per object.  Array flags (``alpha1``,
    ``acc_lim``, ``qcrit_array``, ``fprimc_array``, ``natal_kick_array``) are lists.

    Returns
    -------
    dict
        A fresh dictionary (the caller may change it).
    """
    settings = json.loads(files("cosmic.data").joinpath("cosmic-settings.json").read_text())
    (bse,) = [c for c in settings if c["category"] == "bse"]
    out = {}
    for s in bse["settings"]:
        (value,) = [o["name"] for o in s["options"] if o.get("default")]
        out[s["name"]] = _literal(value)
    return out


_FLAGS_SET: dict[str, Any] = {}  # the flags last applied (the pts1 rule reads pts1 here)


def _canonical_names() -> dict[str, tuple[str, str]]:
    """lower-case key -> (COSMIC's spelling, common block), from ``GROUPED_SETTINGS``."""
    from cosmic.consts import GROUPED_SETTINGS
    return {name.lower(): (name, group) for group, names in GROUPED_SETTINGS.items()
            for name in names if name != "randomseed"}


def apply_flags(flags: Mapping[str, Any]) -> None:
    """Set every BSE flag in COSMIC's common blocks, as ``Evolve`` does for each system.

    Keys are COSMIC's ``BSEDict`` names, matched case-insensitively; a missing key takes its
    value from :func:`cosmic_defaults`.  The values are checked with COSMIC's own
    ``cosmic.utils.error_check`` (an invalid ``LBV_flag`` would otherwise kill the process),
    on a copy: unlike ``Evolve``, the given ``ecsn``/``ecsn_mlow`` are kept for ``kickflag``
    -1 or -2 (``error_check`` moves them to 2.25/1.6 by a rule of COSMIC's kick numbering
    before 3.5.0).  Also sets ``cmcpass.using_cmc = 0``, ``se_flags.using_sse = 1``,
    ``using_metisse = 0``, all 52 bpp and bcm columns in ``ALL_COLUMNS`` order and
    ``check_dtp = 0``.  Call it once per process, at start and on restart, before
    :func:`evolve`.

    Parameters
    ----------
    flags : Mapping[str, Any]
        ``BSEDict``-style flags.

    Raises
    ------
    ValueError
        For an unknown key (``randomseed`` included: seeds are per object), a key given twice
        in different cases, a value that is not a finite number (or list of them, shaped like
        the default), or a value COSMIC refuses; the message names the key.
    """
    from cosmic import _evolvebin
    from cosmic.utils import error_check

    names = _canonical_names()
    merged = cosmic_defaults()
    seen: dict[str, str] = {}
    for key, value in flags.items():
        low = str(key).lower()
        if low == "randomseed":
            raise ValueError("randomseed: not a flag here; evolve() takes one seed per object")
        if low not in names:
            raise ValueError(f"{key}: unknown BSE flag (COSMIC {_cosmic_version()})")
        if low in seen:
            raise ValueError(f"{key}: given twice (also as {seen[low]})")
        seen[low] = str(key)
        name = names[low][0]
        try:
            arr = np.asarray(value)
            ok = (arr.dtype.kind in "iuf" and arr.shape == np.shape(merged[name])
                  and np.isfinite(arr).all())
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"{key}: must be a number, or numbers of the shape of COSMIC's "
                             f"default {merged[name]!r} (got {value!r})")
        merged[name] = value
    checked = {k: (list(v) if isinstance(v, np.ndarray) else v) for k, v in merged.items()}
    # COSMIC's check refuses bad values; it also moves ecsn/ecsn_mlow to 2.25/1.6 for
    # kickflag -1 and -2, a rule of its numbering before 3.5.0 (those were Giacobbo &
    # Mapelli's kicks then; now -1 is the standard kick with the old orbit update, CMC's 0):
    # the values given are kept, so a configured value is never replaced silently
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        error_check(copy.deepcopy(checked), {"stellar_engine": "sse"})
    for name, group in names.values():
        try:
            setattr(getattr(_evolvebin, group), name.lower(), checked[name])
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name}: cannot be set to {checked[name]!r} ({exc})") from None
    _evolvebin.cmcpass.using_cmc = 0
    _evolvebin.se_flags.using_sse = 1
    _evolvebin.se_flags.using_metisse = 0
    cols = np.arange(1, 53, dtype=np.int32)
    _evolvebin.col.n_col_bpp = 52
    _evolvebin.col.col_inds_bpp = cols
    _evolvebin.col.n_col_bcm = 52
    _evolvebin.col.col_inds_bcm = cols
    _evolvebin.check_dtp.check_dtp = 0
    _FLAGS_SET.clear()
    _FLAGS_SET.update(checked)


def _cosmic_version() -> str:
    from cosmic import __version__
    return __version__


# --------------------------------------------------------------------------------------------
# Batch and result
# --------------------------------------------------------------------------------------------

@dataclass
class Batch:
    """Objects (single stars and binaries) to evolve, as a structure of arrays.

    Member arrays have shape ``(n, 2)``: slot 0 is member 1, slot 1 member 2.  A single star
    is slot 0, with slot 1 a massless companion (``kstar = 15``, everything 0).  The
    constructor converts every array to its dtype and C order once (a copy if needed);
    :func:`evolve` writes into these arrays in place.

    Attributes
    ----------
    kstar : ndarray of int32, (n, 2)
        BSE stellar type, 0-15.
    mass, rad : ndarray of float64, (n, 2)
        Mass [Msun] and radius [Rsun].
    q : dict[str, ndarray of float64, (n, 2)]
        Every :data:`MEMBER_QUANTITIES` key (units there); missing keys are filled with 0.
    tphys : ndarray of float64, (n,)
        Time of the object's last BSE call [Myr].
    sep : ndarray of float64, (n,)
        Semi-major axis [Rsun]; 0 for a single star.
    ecc : ndarray of float64, (n,)
        Eccentricity; 0 for a single star.
    seed : ndarray of int64, (n,)
        Seed of the object's next call, in [1, 2**31 - 2].
    """

    kstar: np.ndarray
    mass: np.ndarray
    rad: np.ndarray
    q: dict[str, np.ndarray] = field(default_factory=dict)
    tphys: np.ndarray | None = None
    sep: np.ndarray | None = None
    ecc: np.ndarray | None = None
    seed: np.ndarray | None = None

    def __post_init__(self) -> None:
        # always a copy, as _f8 makes of the float arrays: ascontiguousarray would return a
        # caller's C-ordered int32 array itself, and evolve() would overwrite it
        self.kstar = np.array(self.kstar, dtype=np.int32, order="C").reshape(-1, 2)
        n = self.kstar.shape[0]
        self.mass = _f8(self.mass, (n, 2))
        self.rad = _f8(self.rad, (n, 2))
        unknown = set(self.q) - set(MEMBER_QUANTITIES)
        if unknown:
            raise ValueError(f"unknown member quantities {sorted(unknown)}")
        self.q = {k: _f8(self.q.get(k, 0.0), (n, 2)) for k in MEMBER_QUANTITIES}
        self.tphys = _f8(0.0 if self.tphys is None else self.tphys, (n,))
        self.sep = _f8(0.0 if self.sep is None else self.sep, (n,))
        self.ecc = _f8(0.0 if self.ecc is None else self.ecc, (n,))
        seed = np.arange(1, n + 1) if self.seed is None else self.seed
        self.seed = np.ascontiguousarray(np.broadcast_to(seed, (n,)), dtype=np.int64).copy()

    def __len__(self) -> int:
        return self.kstar.shape[0]

    @property
    def single_mask(self) -> np.ndarray:
        """(n,) bool: single stars (slot 1 massless)."""
        return (self.kstar[:, 1] == MASSLESS) & (self.mass[:, 1] <= 0.0)

    @classmethod
    def zams(cls, mass1: Any, mass2: Any = 0.0, *, sep: Any = 0.0, ecc: Any = 0.0,
             tphys: Any = 0.0, seed: Any = None) -> Batch:
        """Zero-age main-sequence objects, as COSMIC and CMC start them.

        ``kstar`` = 0 for m <= 0.7 Msun, else 1; ``mass0 = zams = mass``; everything else 0
        (the first call, e.g. to 1e-6 Myr, sets radius, luminosity, ``tms`` and spin).

        Parameters
        ----------
        mass1, mass2 : array_like
            Member masses [Msun]; ``mass2 = 0`` makes a single star.
        sep, ecc : array_like
            Semi-major axis [Rsun] and eccentricity (0 for singles).
        tphys : array_like
            Start time [Myr].
        seed : array_like, optional
            Seeds of the first call (default 1..n).
        """
        m = np.stack(np.broadcast_arrays(np.asarray(mass1, float), np.asarray(mass2, float)), -1)
        m = m.reshape(-1, 2)
        k = np.where(m <= 0.7, 0, 1).astype(np.int32)
        k[m <= 0.0] = MASSLESS
        b = cls(k, m, np.zeros_like(m), {"mass0": m, "zams": m}, tphys=tphys, sep=sep,
                ecc=ecc, seed=seed)
        b.sep[b.single_mask] = b.ecc[b.single_mask] = 0.0
        return b

    def take(self, index: Any) -> Batch:
        """A new batch of the objects ``index`` (a copy)."""
        idx = np.atleast_1d(np.arange(len(self))[index])
        return Batch(self.kstar[idx], self.mass[idx], self.rad[idx],
                     {k: v[idx] for k, v in self.q.items()}, self.tphys[idx],
                     self.sep[idx], self.ecc[idx], self.seed[idx])

    def put(self, index: Any, other: Batch) -> None:
        """Write ``other``'s objects into this batch at ``index``."""
        for name in ("kstar", "mass", "rad", "tphys", "sep", "ecc", "seed"):
            getattr(self, name)[index] = getattr(other, name)
        for k, v in self.q.items():
            v[index] = other.q[k]


def _f8(x: Any, shape: tuple[int, ...]) -> np.ndarray:
    return np.ascontiguousarray(np.broadcast_to(np.asarray(x, dtype=np.float64), shape)).copy()


@dataclass
class Result:
    """What one :func:`evolve` call did, per object (the state itself is in the batch).

    Attributes
    ----------
    outcome : ndarray of int8, (n,)
        :data:`EVOLVED`, :data:`DISRUPTED`, :data:`MERGED_1`, :data:`MERGED_2` or
        :data:`DESTROYED`.
    dv : ndarray of float64, (n, 2, 3)
        Velocity change of each member from supernova kicks in this call [km/s], in COSMIC's
        frame (x, y, z); for a bound binary both members get the centre of mass's change.
    supernova : ndarray of bool, (n, 2)
        Member j went supernova (a natal kick was drawn) in this call.
    rrlo : ndarray of float64, (n, 2)
        Roche-lobe filling factor R/R_L (at periastron) from the last bpp row; 0 for single
        stars.
    kstar_before, mass_before, rad_before : ndarray, (n, 2)
        Type, mass [Msun] and radius [Rsun] before the call; the mass lost to the cluster
        is ``mass_before.sum(1) - batch.mass.sum(1)``.
    tphys_before, sep_before : ndarray of float64, (n,)
        Time [Myr] and semi-major axis [Rsun] before the call.
    bin_state, merger_type : ndarray of int32, (n,)
        From the last bpp row: bin_state 0 bound, 1 merged, 2 disrupted, -1 single;
        merger_type BSE's 4-digit code (e.g. 212 = "0212"), -1 when none.
    kick_info : ndarray of float64, (n, 2, 19)
        COSMIC's kick_info (row = member, columns ``cosmic.consts.KICK_COLUMNS[:19]``).
    """

    outcome: np.ndarray
    dv: np.ndarray
    supernova: np.ndarray
    rrlo: np.ndarray
    kstar_before: np.ndarray
    mass_before: np.ndarray
    rad_before: np.ndarray
    tphys_before: np.ndarray
    sep_before: np.ndarray
    bin_state: np.ndarray
    merger_type: np.ndarray
    kick_info: np.ndarray


# --------------------------------------------------------------------------------------------
# evolve
# --------------------------------------------------------------------------------------------

def period_days(sep: Any, m1: Any, m2: Any) -> Any:
    """Orbital period [days] of a separation ``sep`` [Rsun] and masses [Msun], with BSE's
    constants (AU = 214.95 Rsun, year = 365.24 days), the inverse of evolv2's own conversion."""
    return YEARDY * (sep / AURSUN) * np.sqrt(sep / (AURSUN * (m1 + m2)))


def _check_batch(batch: Batch) -> None:
    """Refuse arrays that f2py would copy (their results would be lost silently)."""
    n = len(batch)
    arrays = [("kstar", batch.kstar, np.int32, (n, 2)), ("mass", batch.mass, np.float64, (n, 2)),
              ("rad", batch.rad, np.float64, (n, 2))]
    arrays += [(f"q[{k!r}]", batch.q.get(k), np.float64, (n, 2)) for k in MEMBER_QUANTITIES]
    arrays += [(name, getattr(batch, name), np.float64, (n,)) for name in ("tphys", "sep", "ecc")]
    for name, a, dtype, shape in arrays:
        if (not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != shape
                or not a.flags.c_contiguous or not a.flags.writeable):
            raise TypeError(f"Batch.{name} must be a writeable C-ordered {np.dtype(dtype)} "
                            f"array of shape {shape}, got "
                            f"{getattr(a, 'dtype', type(a))} {getattr(a, 'shape', '')}")
    if np.any((batch.seed < SEED_MIN) | (batch.seed > SEED_MAX)):
        raise ValueError(f"Batch.seed must lie in [{SEED_MIN}, {SEED_MAX}]")


def evolve(batch: Batch, t_end: Any, z: float, pts1_highmass_cutoff: float = 5.0) -> Result:
    """Evolve every object of ``batch`` from ``batch.tphys`` to ``t_end``, one evolv2 call each.

    Per call, as ``cosmic.evolve._evolve_single_system`` does after :func:`apply_flags`:
    ``kick_info`` is zeroed (``[0, 0] = 1`` if a member is of type 10-14), the sticky
    ``snvars.natal_kick_array`` is reset to "draw everything", ``rand1.idum1 = seed`` (a full
    reseed of ran3), and the rows of ``binary.bpp``/``bcm`` written are zeroed afterwards.
    The bcm interval is ``dtp = tphysf - tphys``, so evolv2 ends its last internal step
    exactly at ``tphysf`` (``Evolve``'s ``dtp = tphysf`` is the same from ``tphys = 0``; from
    ``tphys > 0`` it leaves the last step uncut, the radius one step ahead; ``2 tphysf`` never
    returned from a call in which both stars of a binary became massless).  CMC's rule
    for massive stars: ``pts1`` is divided by 10 for the call if a member has ``kstar <= 1``
    or 7 and ``zams > pts1_highmass_cutoff``.  The period passed is :func:`period_days` of
    ``sep`` (0 for singles).  A single black hole's spin, which evolv2 zeroes at entry with
    ``using_cmc = 0``, is restored.  Objects with ``tphys == t_end`` are left alone, and so
    are empty objects (both slots massless: evolv2 never returns for them), which only get
    ``tphys = t_end`` and the outcome :data:`DESTROYED`.

    Call boundaries are not free: each call reseeds (kicks differ once an evolution is
    split), restarts evolv2's internal step, and resets ``mtvars.mbh_initial`` (BH accretion
    efficiency); main-sequence states split into calls agree bit for bit but for the spin.

    The final state is written into ``batch`` in place: ``kstar``, ``mass``, ``rad``, every
    ``q`` but ``zams`` (unchanged), ``tphys = t_end``, and ``sep`` [Rsun] and ``ecc`` from the
    last bpp row for a binary that is still bound (0 otherwise); slot 1 of a single star is
    zeroed again.  Disrupted or merged binaries keep their members in their slots; evolv2
    itself evolves them on to ``t_end`` (two single stars, or the merger product).

    Parameters
    ----------
    batch : Batch
        The objects; changed in place.
    t_end : float or ndarray, (n,)
        End time [Myr], >= ``batch.tphys``.
    z : float
        Metallicity.
    pts1_highmass_cutoff : float
        ZAMS mass [Msun] above which CMC's pts1 rule applies.

    Returns
    -------
    Result

    Raises
    ------
    StellarEvolutionError
        ``evol_type >= 100`` in bpp, ``er_flags.bcm_err``, a negative ``bpp_index``, NaN or
        negative mass, radius or luminosity; ``.index`` is the object's index in the batch.
        The batch may then be partly updated.
    RuntimeError
        If :func:`apply_flags` was not called.
    """
    from cosmic import _evolvebin as bse

    if not _FLAGS_SET:
        raise RuntimeError("stellar_evolution.apply_flags() must be called before evolve()")
    _check_batch(batch)
    n = len(batch)
    t_end = np.broadcast_to(np.asarray(t_end, dtype=np.float64), (n,))
    if np.any(t_end < batch.tphys) or not np.all(np.isfinite(t_end)):
        raise ValueError("evolve: t_end must be finite and >= batch.tphys")
    k, m, q = batch.kstar, batch.mass, batch.q
    res = Result(
        outcome=np.zeros(n, np.int8), dv=np.zeros((n, 2, 3)), supernova=np.zeros((n, 2), bool),
        rrlo=np.zeros((n, 2)), kstar_before=k.copy(), mass_before=m.copy(),
        rad_before=batch.rad.copy(), tphys_before=batch.tphys.copy(),
        sep_before=batch.sep.copy(),
        bin_state=np.full(n, -1, np.int32), merger_type=np.full(n, -1, np.int32),
        kick_info=np.zeros((n, 2, 19)))
    single = batch.single_mask
    bad = ~single & ((batch.sep <= 0.0) | (m[:, 1] <= 0.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"evolve: object {i} is a binary with sep={float(batch.sep[i])!r}, "
                         f"mass={m[i].tolist()} (a binary needs both > 0)")
    # Per-call inputs as Python scalars (numpy scalar work costs more than the call itself).
    empty = ((k == MASSLESS) | (m <= 0.0)).all(axis=1)
    batch.tphys[empty] = t_end[empty]
    called = (t_end > batch.tphys).tolist()
    compact = ((k >= 10) & (k <= 14)).any(axis=1).tolist()
    massive = (((k <= 1) | (k == 7)) & (q["zams"] > pts1_highmass_cutoff)).any(axis=1).tolist()
    with np.errstate(divide="ignore", invalid="ignore"):
        tb = np.where(single, 0.0, period_days(batch.sep, m[:, 0], m[:, 1])).tolist()
    seeds, ecc, t0s, t1s = (a.tolist() for a in (batch.seed, batch.ecc, batch.tphys, t_end))
    spin0 = q["bhspin"][:, 0].copy()
    rows = np.zeros((n, 52))
    pts1 = float(_FLAGS_SET["pts1"])
    bse.points.pts1 = pts1
    qargs = [q[name] for name in _EVOLV2_Q]
    zpars, kick_in = np.zeros(20), np.zeros((2, 19))
    points, rand1, er_flags = bse.points, bse.rand1, bse.er_flags
    natal_kicks, bpp, bcm = bse.snvars.natal_kick_array, bse.binary.bpp, bse.binary.bcm
    for i in range(n):
        if not called[i]:
            continue
        kick_in[:] = 0.0
        kick_in[0, 0] = 1.0 if compact[i] else 0.0
        natal_kicks[:] = _NATAL_KICK_RESET
        rand1.idum1 = seeds[i]
        er_flags.bcm_err = 0
        if massive[i]:
            points.pts1 = pts1 / 10.0
        try:
            _, res.kick_info[i], jp, ip = bse.evolv2(
                k[i], m[i], tb[i], ecc[i], z, t1s[i], t1s[i] - t0s[i], qargs[0][i], batch.rad[i],
                *[a[i] for a in qargs[1:]], t0s[i], zpars, kick_in)
        finally:
            if massive[i]:
                points.pts1 = pts1
        if jp > 0:
            rows[i] = bpp[jp - 1]
            bpp[:jp] = 0.0
        if ip > 0:
            bcm[:ip] = 0.0
        if jp <= 0:
            _fail(i, f"bpp_index={jp}", batch, res, t1s[i])
        if rows[i, _EVOL_TYPE] >= 100:
            _fail(i, f"evol_type {rows[i, _EVOL_TYPE]:g} in bpp", batch, res, t1s[i])
        if er_flags.bcm_err:
            _fail(i, f"er_flags.bcm_err={int(er_flags.bcm_err)}", batch, res, t1s[i])
    _finish(batch, res, np.array(called, bool), single, rows, spin0, t_end)
    res.outcome[empty] = DESTROYED
    return res


def _finish(batch: Batch, res: Result, called: np.ndarray, single: np.ndarray,
            rows: np.ndarray, spin0: np.ndarray, t_end: np.ndarray) -> None:
    """Checks, outcome, kicks and orbit of the objects called, from their last bpp rows."""
    k, m, q = batch.kstar, batch.mass, batch.q
    ok = (m >= 0.0) & (batch.rad >= 0.0) & (q["lum"] >= 0.0)  # False for NaN too
    bad = called & ~ok.all(axis=1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        _fail(i, "NaN or negative mass, radius or luminosity", batch, res, float(t_end[i]))
    # evolv2 zeroes a single star's bhspin at entry (using_cmc = 0): give a BH its spin back
    keep = called & single & (res.kstar_before[:, 0] == 14) & (k[:, 0] == 14)
    q["bhspin"][keep, 0] = spin0[keep]
    res.bin_state[called] = rows[called, _BIN_STATE]
    res.merger_type[called] = rows[called, _MERGER_TYPE]
    res.rrlo[called & ~single] = rows[called & ~single][:, [_RRLO1, _RRLO2]]
    alive = (m > 0.0) & (k != MASSLESS)
    outcome = np.select(
        [single & alive[:, 0], single, alive.all(axis=1) & (res.bin_state == 2),
         alive.all(axis=1), alive[:, 0], alive[:, 1]],
        [EVOLVED, DESTROYED, DISRUPTED, EVOLVED, MERGED_1, MERGED_2], DESTROYED)
    res.outcome[called] = outcome[called]
    bound = called & ~single & (res.outcome == EVOLVED)
    gone = called & ~single & ~bound
    batch.sep[bound], batch.ecc[bound] = rows[bound, _SEP], rows[bound, _ECC]
    batch.sep[gone] = batch.ecc[gone] = 0.0
    batch.tphys[called] = t_end[called]
    s = called & single  # slot 1 of a single star is all zeros, as it came in
    k[s, 1] = MASSLESS
    m[s, 1] = batch.rad[s, 1] = 0.0
    for v in q.values():
        v[s, 1] = 0.0
    # kick_info rows (row = member) with a supernova carry its seed (col 17) and time (col 18).
    # Disrupted (or single): member 1's change in cols 6-8, member 2's in cols 10-12; still
    # bound: cols 6-8 are the centre of mass's change, which both members get.
    # A row is a supernova of the star in col 0 (1 or 2); COSMIC may put a second member's
    # explosion time in the next row, so rows are counted by col 0 (measured: 8 + 15 Msun).
    kick = res.kick_info
    row_sn = (kick[:, :, 17] != 0.0) | (kick[:, :, 18] != 0.0)
    for j in (0, 1):
        res.supernova[:, j] = (row_sn & (kick[:, :, 0] == j + 1)).any(axis=1)
    sn = row_sn[:, :, None]
    split = sn & (kick[:, :, 1:2] == 1.0)
    res.dv[:, 0] = np.where(sn, kick[:, :, 6:9], 0.0).sum(axis=1)
    res.dv[:, 1] = np.where(split, kick[:, :, 10:13], np.where(sn, kick[:, :, 6:9], 0.0)).sum(1)


def _fail(i: int, why: str, batch: Batch, res: Result, t1: float) -> None:
    raise StellarEvolutionError(
        i, f"BSE failed for object {i}: {why}; before: kstar={res.kstar_before[i].tolist()} "
           f"mass={res.mass_before[i].tolist()} tphys={float(res.tphys_before[i])!r} "
           f"sep={float(res.sep_before[i])!r} seed={int(batch.seed[i])} t_end={t1!r}; after: "
           f"kstar={batch.kstar[i].tolist()} mass={batch.mass[i].tolist()} "
           f"rad={batch.rad[i].tolist()} lum={batch.q['lum'][i].tolist()}")


# --------------------------------------------------------------------------------------------
# Scheduling
# --------------------------------------------------------------------------------------------

# Peters (1964) circular merger time [Myr] = _PETERS * a[Rsun]^4 / (m1 m2 (m1+m2) [Msun^3]).
_G, _C, _MSUN, _RSUN, _MYR = 6.6743e-8, 2.99792458e10, 1.98847e33, 6.957e10, 3.15576e13
_PETERS = 5.0 / 256.0 * _RSUN**4 * _C**5 / (_G**3 * _MSUN**3) / _MYR


def peters_time(sep: Any, ecc: Any, m1: Any, m2: Any) -> Any:
    """Gravitational-wave merger time [Myr] of a binary (Peters 1964): the circular time
    times ``(1 - e^2)^(7/2)``, which never overestimates it.

    Parameters
    ----------
    sep : array_like
        Semi-major axis [Rsun].
    ecc : array_like
        Eccentricity.
    m1, m2 : array_like
        Masses [Msun].
    """
    e2 = np.clip(np.asarray(ecc, float) ** 2, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = _PETERS * np.asarray(sep, float) ** 4 / (m1 * m2 * (m1 + m2)) * (1.0 - e2) ** 3.5
    return np.where(np.isfinite(t), t, np.inf)


def next_call_times(batch: Batch, result: Result, t_prev: Any, t_now: Any,
                    tolerance: float, age_tolerance: float | None = None,
                    giant_tolerance: float = 0.0) -> np.ndarray:
    """When each object of a batch just evolved (by :func:`evolve`, from ``t_prev`` to
    ``t_now``) must next be evolved: the earliest time its state can change by more than
    ``tolerance`` (relative).  A returned ``t_now`` means "due at the next step"; ``inf``
    means never (BSE keeps the mass of WDs, NSs and BHs fixed).

    Rules per member (type k after the call, mass m, BSE's ``tms`` and ``epoch``):

    * k = 0, 1 (main sequence): ``t_now + min(age_tolerance * tms, epoch + tms - t_now,
      tolerance * m / (2 |mdot|))``, mdot the mass change over the call / ``t_now - t_prev``
      (halved: winds grow along the main sequence; skipped when 0).  The second term puts
      the next call right after the main sequence, from which on it is called each step;
    * k = 2 .. 9 (giants, helium stars): every step if ``giant_tolerance`` is 0 (as
      CMC-COSMIC calls every star), else ``t_now + min(giant_tolerance * tms,
      giant_tolerance * r / (2 |rdot|), tolerance * m / (2 |mdot|))``, r the radius and rdot
      its change over the call / ``t_now - t_prev`` (each term skipped when its rate is 0;
      ``tms`` the star's ``tms`` in BSE's state after the call).  A giant's mass and radius
      change smoothly within a phase; the end of a phase (a jump of the radius, the
      envelope's loss, a supernova) is seen at the next call, at most ``giant_tolerance *
      tms`` late;
    * k = 10 .. 15 (WD, NS, BH, massless): ``inf``.

    A single star follows its member rule.  A bound binary is due every step if a member
    has k = 2 .. 9 or ``max(rrlo)`` > :data:`RRLO_EVERY_STEP` (0.18): SSE's main-sequence
    stars grow by at most a factor 5.2 from ZAMS to the end of the main sequence (measured,
    0.3-150 Msun, Z = 1e-4 .. 0.03), so a star filling less than 1/5.2 of its Roche lobe
    at periastron cannot fill it before its main sequence ends, when it is called anyway.
    Otherwise it is due at ``t_now + tolerance * t_GW`` (:func:`peters_time`) if both
    members are compact (k 10 .. 14); else at the earliest of its members' rules, of
    ``t_now + tolerance * t_GW`` and of ``t_now + tolerance * a / |adot|`` (the change of
    the semi-major axis over the call: tides, magnetic braking, winds).  An object whose
    outcome is not :data:`EVOLVED` is due at the next step (``t_now``; its members become
    new objects), unless :data:`DESTROYED` (``inf``).

    Parameters
    ----------
    batch : Batch
        The state after the call.
    result : Result
        The call's result.
    t_prev, t_now : float or ndarray, (n,)
        Start and end time of the call [Myr].
    tolerance : float
        Relative change allowed between calls (e.g. 0.01).
    age_tolerance : float, optional
        The main-sequence term's fraction of ``tms`` instead (default ``tolerance``).
    giant_tolerance : float, optional
        The giants' rule above; 0 (the default) calls a single giant every step.

    Returns
    -------
    ndarray of float64, (n,)
        Next call time [Myr], >= ``t_now``.
    """
    n = len(batch)
    t_now = np.broadcast_to(np.asarray(t_now, float), (n,))
    dt = (t_now - np.broadcast_to(np.asarray(t_prev, float), (n,)))[:, None]
    k, m = batch.kstar, batch.mass
    tms, epoch = batch.q["tms"], batch.q["epoch"]
    with np.errstate(divide="ignore", invalid="ignore"):
        mdot = np.abs(m - result.mass_before) / dt
        t_mass = np.where((mdot > 0) & (dt > 0), 0.5 * tolerance * m / mdot, np.inf)
    ms_left = np.maximum(epoch + tms - t_now[:, None], 0.0)
    age_tol = tolerance if age_tolerance is None else age_tolerance
    wait = np.minimum(np.minimum(age_tol * tms, ms_left), t_mass)
    member = np.where(k <= 1, t_now[:, None] + wait, np.inf)
    giant = (k >= 2) & (k <= 9)
    if giant_tolerance > 0.0 and giant.any():
        rad = batch.rad
        with np.errstate(divide="ignore", invalid="ignore"):
            rdot = np.abs(rad - result.rad_before) / dt
            t_rad = np.where((rdot > 0) & (dt > 0), 0.5 * giant_tolerance * rad / rdot, np.inf)
        g_wait = np.minimum(np.minimum(giant_tolerance * np.maximum(tms, 0.0), t_rad), t_mass)
        member = np.where(giant, t_now[:, None] + g_wait, member)
    else:
        member = np.where(giant, t_now[:, None], member)
    member = np.where(m > 0, member, np.inf)

    single = batch.single_mask
    out = np.where(single, member[:, 0], member.min(axis=1))
    binary = ~single & (result.outcome == EVOLVED)
    if binary.any():
        a, e = batch.sep, batch.ecc
        t_gw = t_now + tolerance * peters_time(a, e, m[:, 0], m[:, 1])
        with np.errstate(divide="ignore", invalid="ignore"):
            adot = np.abs(a - result.sep_before) / dt[:, 0]
            t_orbit = np.where((adot > 0) & (dt[:, 0] > 0), t_now + tolerance * a / adot, np.inf)
        compact = ((k >= 10) & (k <= 14)).all(axis=1)
        t_bin = np.where(compact, t_gw, np.minimum(np.minimum(out, t_gw), t_orbit))
        busy = ((k >= 2) & (k <= 9)).any(axis=1) | (result.rrlo.max(axis=1) > RRLO_EVERY_STEP)
        out = np.where(binary, np.where(busy, t_now, t_bin), out)
    out = np.where((result.outcome != EVOLVED) & ~single, t_now, out)
    out = np.where(result.outcome == DESTROYED, np.inf, out)
    return np.maximum(out, t_now)
