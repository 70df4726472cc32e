"""[bse]: stellar evolution through COSMIC's BSE, its switch, its scheduler and every BSE flag.

The section holds our own keys (:data:`OWN_KEYS`: the switch ``stellar_evolution``, the
``metallicity`` of a model without one, CMC's ``pts1_highmass_cutoff`` and the scheduler's
``tolerance`` and ``dt_mass_fraction``) and the 71 flags of COSMIC 4.3.3's ``BSEDict`` under
their COSMIC names in lower case (an INI file's keys are case-insensitive): ``LBV_flag``,
``ST_tide`` and ``ST_cr`` are ``lbv_flag``, ``st_tide`` and ``st_cr`` here
(:data:`COSMIC_SPELLING`).  COSMIC's ``randomseed`` is not a key: the kicks draw from the
run's block streams.  :func:`bse_flags` gives the ``BSEDict`` that
``physics.stellar_evolution.apply_flags`` takes.

``kickflag`` defaults to -1, CMC-COSMIC's 0 in COSMIC 4.3.3's numbering
(:data:`KICKFLAG_FROM_CMC`).  Beware: 4.3.3's ``error_check`` still moves ``ecsn`` and
``ecsn_mlow`` to 2.25 and 1.6 for kickflag -1 or -2 (a check written for the old numbering,
where those were Giacobbo & Mapelli's), so CMC's 2.5 and 1.4 hold only where the flags are not
passed through it.

Defaults are CMC-COSMIC's production ``[bse]`` (its ``examples/KingProfile.ini``; see
docs/notes/issue48_stellar_evolution_brief.md, section 5), and COSMIC's own for the keys CMC
does not have.  Types follow the Fortran common blocks (``i`` -> int, ``d`` -> float; the
0/1 flag ``smt_periastron_check`` is an int).  The allowed values and ranges are those of
COSMIC's ``cosmic/data/cosmic-settings.json`` and ``cosmic.utils.error_check``, declared here
so that a run without COSMIC installed validates the same (tests/test_bse_config.py checks the
declarations against both).

Lists in an INI file are comma-separated numbers (brackets are ignored, so COSMIC's and
CMC's ``[...]`` spelling reads too): ``alpha1`` and ``acc_lim`` have 2 (one per binary
member), ``qcrit_array`` and ``fprimc_array`` 16 (one per stellar type 0-15), and
``natal_kick_array`` 10: member 1's ``vk, phi, theta, mean_anomaly, rand_seed``, then member
2's (COSMIC's 2x5 array row by row; -100 means "draw it").

This module imports nothing of the package (:mod:`cmc.config` imports it): the field
declarations carry the same metadata as :func:`cmc.config._p`, and the cross-key check
:func:`bse_problem` returns the message that :meth:`cmc.config.Config.validate` raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

#: Our own keys of [bse]: not COSMIC flags, left out of :func:`bse_flags`.
OWN_KEYS = ("stellar_evolution", "metallicity", "pts1_highmass_cutoff", "tolerance",
            "ms_age_tolerance", "giant_tolerance", "dt_mass_fraction")

#: Our key -> COSMIC's BSEDict spelling, where it is not all lower case.
COSMIC_SPELLING = {"lbv_flag": "LBV_flag", "st_tide": "ST_tide", "st_cr": "ST_cr"}

#: CMC-COSMIC's kickflag (COSMIC before 3.5.0) -> COSMIC 4.3.3's.  COSMIC 3.5.0 (commit
#: cd318dc, "Implement new kick prescription") renumbered the prescriptions from 1 and made a
#: negative value mean "the same with the old Kiel & Hurley 2009 orbit update", which is the
#: update the old numbering always used: old 0 (BSE's standard kicks), -1 and -2 (Giacobbo &
#: Mapelli 2020 Eq. 1 and 2) and -3 (Bray & Eldridge 2016) are now -1, -2, -3 and -4.
KICKFLAG_FROM_CMC = {0: -1, -1: -2, -2: -3, -3: -4}

#: [bse] keys a restart may change (accuracy controls of the time steps); every other key
#: defines the run (:data:`cmc.restart.FIXED_ON_RESTART`).
CHANGEABLE_ON_RESTART = ("pts1", "pts2", "pts3", "pts1_highmass_cutoff", "tolerance",
                         "ms_age_tolerance", "giant_tolerance", "dt_mass_fraction")


def _p(default: Any, unit: str, doc: str, lo: float | None = None, hi: float | None = None,
       choices: tuple | None = None, lo_open: bool = False, length: int | None = None,
       check: Callable[[Any], str | None] | None = None):
    """A parameter, declared as :func:`cmc.config._p` does; lists also have a ``length``
    (and ``lo``/``hi`` bound each number), and ``check`` returns why a value is refused."""
    meta = {"unit": unit, "doc": doc, "lo": lo, "hi": hi, "choices": choices,
            "lo_open": lo_open, "length": length, "check": check}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def _one_of_or_positive(allowed: tuple[float, ...], what: str) -> Callable[[Any], str | None]:
    """COSMIC's options "these values, or positive values"."""
    def check(v: float) -> str | None:
        return None if v > 0 or v in allowed else f"must be {what}"
    return check


def _maltsev_fallback(v: float) -> str | None:
    return None if 0.0 <= v <= 1.0 or v == -1.0 else "must be in [0, 1] or -1"


def _acc_lim(v: list) -> str | None:
    for x in v:
        if not (0.0 <= x <= 1.0 or x in (-1.0, -2.0, -3.0, -4.0)):
            return f"{x:g} is neither in [0, 1] nor one of -1, -2, -3, -4"
    return None


#: natal_kick_array's columns: name and COSMIC's range (-100: draw it).
_KICK_COLUMNS = (("vk", 0.0, float("inf")), ("phi", -90.0, 90.0), ("theta", 0.0, 360.0),
                 ("mean_anomaly", 0.0, 360.0), ("rand_seed", -float("inf"), float("inf")))


def _natal_kicks(v: list) -> str | None:
    for i, x in enumerate(v):
        name, lo, hi = _KICK_COLUMNS[i % 5]
        if x != -100.0 and not lo <= x <= hi:
            return (f"member {i // 5 + 1}'s {name} = {x:g} is outside [{lo:g}, {hi:g}] "
                    "(and not -100)")
    return None


_SIXTEEN = "one per stellar type 0-15, comma-separated"
_TWO = "one per binary member, comma-separated"


@dataclass
class BseConfig:
    """[bse]: stellar evolution (COSMIC's BSE flags under their BSEDict names)."""

    # -- ours ----------------------------------------------------------------------------
    stellar_evolution: bool = _p(False, "", "evolve the stars and binaries through COSMIC's "
                                 "BSE (CMC's STELLAR_EVOLUTION); needs cosmic-popsynth")
    metallicity: float = _p(0.02, "", "metallicity Z of the stars when the initial model has "
                            "none (a COSMIC file's Z wins, as in CMC); SSE's fits hold for "
                            "1e-4 <= Z <= 0.03", lo=1e-4, hi=0.03)
    pts1_highmass_cutoff: float = _p(5.0, "Msun", "main-sequence and helium main-sequence "
                                     "stars with a ZAMS mass above this are evolved with "
                                     "pts1/10 (CMC's PTS1_HIGHMASS_CUTOFF)", lo=0.0)
    tolerance: float = _p(0.01, "", "the scheduler's tolerance: a star is evolved again "
                          "before its mass (or a binary's orbit) can change by more than this "
                          "fraction", lo=0.0, hi=1.0, lo_open=True)
    ms_age_tolerance: float = _p(0.05, "", "a main-sequence star is evolved again at the "
                                 "latest after this fraction of its main-sequence time (its "
                                 "radius grows about 2-fold over it; every 1 % called most "
                                 "2-10 Msun stars in every step of a 50 Myr old cluster)",
                                 lo=0.0, hi=1.0, lo_open=True)
    giant_tolerance: float = _p(0.01, "", "a single giant or helium star (k = 2-9) is "
                                "evolved again before its radius can change by more than "
                                "this fraction, and at the latest after this fraction of its "
                                "main-sequence time (the end of a phase is seen that late at "
                                "most); 0: every step, as CMC-COSMIC (a 2.7 Msun core-helium "
                                "star at 470 Myr: every ~0.5 Myr instead of every 0.004 Myr "
                                "step)", lo=0.0, hi=1.0)
    dt_mass_fraction: float = _p(1e-3, "M", "CMC's DMse rule: the step is limited so that "
                                 "stellar evolution loses at most this fraction of the "
                                 "cluster mass per step (from the last step's loss); 0: off",
                                 lo=0.0, hi=1.0)
    # -- COSMIC's BSEDict, in the order of cosmic-settings.json --------------------------
    pts1: float = _p(0.05, "", "BSE time step on the main sequence, as a fraction of the "
                     "phase's duration (CMC: 0.05; COSMIC: 0.001)", lo=0.0, lo_open=True)
    pts2: float = _p(0.01, "", "BSE time step on GB, CHeB, AGB, HeGB", lo=0.0, lo_open=True)
    pts3: float = _p(0.02, "", "BSE time step on HG, HeMS", lo=0.0, lo_open=True)
    zsun: float = _p(0.014, "", "solar metallicity (scales the winds; Asplund+2009)", lo=0.0,
                     lo_open=True)
    windflag: int = _p(3, "", "winds: -1 none, 0 SSE/BSE, 1 StarTrack, 2 Vink+2001/2005, 3 as 2 "
                       "with LBV-like mass loss, 5 as 3 times 0.33, 6 Bjorklund+2023, 7 "
                       "Krticka+2024", choices=(-1, 0, 1, 2, 3, 5, 6, 7))
    eddlimflag: int = _p(0, "", "1: metallicity dependence of winds near the Eddington limit "
                         "(Giacobbo+2018)", choices=(0, 1))
    neta: float = _p(0.5, "", "Reimers mass-loss coefficient eta", lo=0.0, lo_open=True)
    bwind: float = _p(0.0, "", "binary-enhanced mass loss B_w (Hurley+2000 Eq. 12)", lo=0.0)
    hewind: float = _p(0.5, "", "helium-star mass-loss factor (windflag = 0 only)", lo=0.0,
                       hi=1.0)
    beta: float = _p(-1.0, "", "wind velocity factor beta_w; -1: StarTrack (Belczynski+2008) "
                     "(CMC: -1; COSMIC: 0.125)",
                     check=_one_of_or_positive((-1.0,), "-1 or positive"))
    xi: float = _p(0.5, "", "wind accretion efficiency factor (spin angular momentum)", lo=0.0,
                   hi=1.0)
    acc2: float = _p(1.5, "", "Bondi-Hoyle wind accretion factor alpha_w", lo=0.0, lo_open=True)
    lbv_flag: int = _p(1, "", "LBV mass loss: 0 none, 1 Hurley+2000, 2 Belczynski+2008 "
                       "(COSMIC's LBV_flag)", choices=(0, 1, 2))
    alpha1: list = _p([1.0, 1.0], "", f"common-envelope efficiency alpha, {_TWO}", lo=0.0,
                      length=2)
    lambdaf: float = _p(0.0, "", "envelope binding energy: >= 0 variable lambda (Claeys+2014) "
                        "with this fraction of the ionisation energy; < 0: lambda = -lambdaf")
    ce2stageflag: int = _p(0, "", "1: two-stage common envelope (Hirai & Mandel 2022)",
                           choices=(0, 1))
    ceflag: int = _p(1, "", "1: initial orbital energy from the total masses (de Kool 1990); "
                     "0: from the core masses (CMC: 1; COSMIC: 0)", choices=(0, 1))
    cekickflag: int = _p(2, "", "SN kick during a common envelope: 0 pre-CE mass and post-CE "
                         "separation, 1 pre-CE both, 2 post-CE both", choices=(0, 1, 2))
    cemergeflag: int = _p(0, "", "1: a common envelope whose donor has no distinct core-"
                          "envelope boundary (kstar 0-2, 7, 8, 10-12) always merges "
                          "(pessimistic; CMC: 0, COSMIC: 1)", choices=(0, 1))
    cehestarflag: int = _p(0, "", "Tauris+2015 fits for helium-star CE: 0 off, 1 final period, "
                           "2 final mass and period", choices=(0, 1, 2))
    qcflag: int = _p(1, "", "critical mass ratios for unstable mass transfer: 0 BSE, 1 BSE "
                     "with Hjellming & Webbink for GB/AGB, 2 Claeys+2014, 3 as 2 with H&W, 4 "
                     "Belczynski+2008, 5 Neijssel+2020 (CMC: 1; COSMIC: 5)",
                     choices=(0, 1, 2, 3, 4, 5))
    qcrit_array: list = _p([0.0] * 16, "", f"critical mass ratio per donor type, 0: qcflag's "
                           f"({_SIXTEEN})", lo=0.0, length=16)
    kickflag: int = _p(-1, "", "natal kicks (COSMIC >= 3.5 numbering): 1 Maxwellian of sigma "
                       "(bhflag, sigmadiv), 2/3 Giacobbo & Mapelli 2020 Eq. 1/2, 4 Bray & "
                       "Eldridge 2016, 5 as 1 with Disberg & Mandel 2025 for CCSN (COSMIC's "
                       "default), 6 Mandel & Mueller 2020, 7 Janka 2017, 8 Richards+2023, 9 "
                       "Shariat+2026; -1..-6: as 1..6 with the Kiel & Hurley 2009 orbit update.  "
                       "-1 is CMC-COSMIC's kickflag 0 (its COSMIC used the old numbering: "
                       "0, -1, -2, -3 are now -1, -2, -3, -4)",
                       choices=(1, 2, 3, 4, 5, 6, 7, 8, 9, -1, -2, -3, -4, -5, -6))
    sigma: float = _p(265.0, "km/s", "dispersion of the Maxwellian of core-collapse kicks",
                      lo=0.0)
    bhflag: int = _p(1, "", "black-hole kicks: 0 none, 1 reduced by fallback (Fryer+2012), 2 "
                     "reduced by M_NS/M_BH, 3 as neutron stars, 4 as 1 also for kicks given "
                     "in natal_kick_array", choices=(0, 1, 2, 3, 4))
    bhsigmafrac: float = _p(1.0, "", "factor on sigma for black holes", lo=0.0, hi=1.0,
                            lo_open=True)
    sigmadiv: float = _p(-20.0, "km/s", "ECSN kicks: > 0 sigma/sigmadiv, < 0 a Maxwellian of "
                         "dispersion -sigmadiv, 0 as core collapse")
    ecsn: float = _p(2.5, "Msun", "largest helium-core mass of an electron-capture SN; 0: no "
                     "ECSN (CMC: 2.5, Podsiadlowski+2004; COSMIC: 2.25)", lo=0.0)
    ecsn_mlow: float = _p(1.4, "Msun", "smallest helium-core mass of an electron-capture SN "
                          "(CMC: 1.4; COSMIC: 1.6); at most ecsn", lo=0.0)
    aic: int = _p(1, "", "accretion-induced collapse kicks: 1 by sigmadiv, 0 by sigma",
                  choices=(0, 1))
    ussn: int = _p(1, "", "ultra-stripped SN kicks: 1 by sigmadiv, 0 by sigma",
                   choices=(0, 1))
    polar_kick_angle: float = _p(90.0, "deg", "opening angle of the kicks about the pole "
                                 "(90: isotropic)", lo=0.0, hi=90.0)
    natal_kick_array: list = _p([-100.0, -100.0, -100.0, -100.0, 0.0] * 2, "",
                                "given kicks: member 1's vk (km/s), phi, theta, mean anomaly "
                                "(deg), rand_seed, then member 2's; -100: draw it",
                                length=10, check=_natal_kicks)
    mm_mu_ns: float = _p(400.0, "km/s", "neutron-star kick scale of Mandel & Mueller 2020 "
                         "(kickflag 6)", lo=0.0, lo_open=True)
    mm_mu_bh: float = _p(200.0, "km/s", "black-hole kick scale of Mandel & Mueller 2020",
                         lo=0.0, lo_open=True)
    remnantflag: int = _p(4, "", "remnant masses: 0 Hurley+2000, 1 Belczynski+2002, 2 "
                          "Belczynski+2008, 3 Fryer+2012 rapid, 4 Fryer+2012 delayed, 5 "
                          "Mandel & Mueller 2020, 6 Maltsev+2025, 7 Fryer+2022",
                          choices=(0, 1, 2, 3, 4, 5, 6, 7))
    fryer_mass_limit: int = _p(0, "", "limit a Fryer remnant to the total (0) or core (1) "
                               "mass at collapse", choices=(0, 1))
    mxns: float = _p(3.0, "Msun", "largest neutron-star mass", lo=0.0, lo_open=True)
    fryer_fmix: float = _p(1.0, "", "mixing fraction of Fryer+2022 (remnantflag 7)", lo=0.0,
                           lo_open=True)
    fryer_mcrit_nsbh: float = _p(5.75, "Msun", "critical NS/BH core mass of Fryer+2022",
                                 lo=0.0, lo_open=True)
    rembar_massloss: float = _p(0.5, "Msun", "> 0: largest mass lost in the collapse to a "
                                "black hole; in [-1, 0]: that fraction of the baryonic mass",
                                lo=-1.0)
    wd_mass_lim: int = _p(1, "", "1: limit white-dwarf masses to the Chandrasekhar mass in "
                          "merger-induced collapse",
                          choices=(0, 1))
    maltsev_mode: int = _p(0, "", "Maltsev+2025 fits: 0 extrapolated in Z, 1 within Z/Zsun "
                           "in [1/50, 1], 2 within [1/10, 1]", choices=(0, 1, 2))
    maltsev_fallback: float = _p(0.5, "", "fallback fraction of partial fallback (Maltsev); "
                                 "-1: Ugolini+2025", check=_maltsev_fallback)
    maltsev_pf_prob: float = _p(0.1, "", "probability that partial fallback makes a black "
                                "hole (Maltsev)", lo=0.0, hi=1.0)
    pisn: float = _p(-2.0, "", "(pulsational) pair instability: 0 off, -1 Spera & Mapelli "
                     "2017, -2 Marchant+2018, -3 Woosley 2019, -4 Renzo+2022, -5 Belczynski "
                     "weak; > 0: the largest remnant mass (Msun)",
                     check=_one_of_or_positive((0.0, -1.0, -2.0, -3.0, -4.0, -5.0),
                                               "0, -1, -2, -3, -4, -5 or positive"))
    ppi_co_shift: float = _p(0.0, "Msun", "shift of the CO-core threshold of pair instability")
    ppi_extra_ml: float = _p(0.0, "Msun", "extra mass loss in pulsational pair instability",
                             lo=0.0)
    bhspinflag: int = _p(0, "", "black-hole spins: 0 all bhspinmag, 1 uniform in [0, "
                         "bhspinmag], 2 by core mass (Belczynski+2017)", choices=(0, 1, 2))
    bhspinmag: float = _p(0.0, "", "black-hole spin (or its upper limit)", lo=0.0, hi=1.0)
    grflag: int = _p(1, "", "1: orbital decay by gravitational waves", choices=(0, 1))
    eddfac: float = _p(1.0, "", "accretion onto compact objects limited to this times the "
                       "Eddington rate; 0: none (CMC: 1; COSMIC: 10)", lo=0.0)
    gamma: float = _p(-2.0, "", "angular momentum of material lost in mass transfer: -1 "
                      "primary's, -2 as a wind from the secondary, -3 circumbinary disc, >= 0 "
                      "this fraction of the orbit's",
                      check=_one_of_or_positive((0.0, -1.0, -2.0, -3.0),
                                                "-1, -2, -3 or non-negative"))
    don_lim: float = _p(-1.0, "", "donor mass-loss rate: -1 Hurley+2002, -2 Claeys+2014",
                        choices=(-1.0, -2.0))
    acc_lim: list = _p([-1.0, -1.0], "", "accretion limit, one per binary member: -1/-2 10x/1x "
                       "the accretor's thermal rate for MS/HG/CHeB (unlimited for giants), "
                       "-3/-4 10x/1x for all; in [0, 1]: the fraction accreted",
                       length=2, check=_acc_lim)
    smt_periastron_check: int = _p(0, "", "1: check for contact at periastron during stable "
                                   "mass transfer", choices=(0, 1))
    tflag: int = _p(1, "", "1: tidal circularisation", choices=(0, 1))
    st_tide: int = _p(1, "", "tides: 1 StarTrack (Belczynski+2008), 0 BSE (COSMIC's ST_tide)",
                      choices=(0, 1))
    fprimc_array: list = _p([2.0 / 21.0] * 16, "", f"factor of the convective tides (Hurley+"
                            f"2002 Eq. 21) per stellar type ({_SIXTEEN})", lo=0.0,
                            length=16)
    ifflag: int = _p(0, "", "1: initial-final white-dwarf mass relation (Han+1995) (CMC: 0; "
                     "COSMIC: 1)", choices=(0, 1))
    wdflag: int = _p(1, "", "1: modified white-dwarf cooling law", choices=(0, 1))
    epsnov: float = _p(0.001, "", "fraction of accreted matter retained in a nova", lo=0.0,
                       hi=1.0)
    bdecayfac: int = _p(1, "", "pulsar magnetic-field decay: 1 inverse, 0 exponential",
                        choices=(0, 1))
    bconst: float = _p(3000.0, "Myr", "pulsar field decay constant k", lo=0.0, lo_open=True)
    ck: float = _p(1000.0, "Myr", "pulsar field decay time tau_b", lo=0.0, lo_open=True)
    rejuv_fac: float = _p(1.0, "", "mixing factor of main-sequence collisions", lo=0.0, hi=1.0)
    rejuvflag: int = _p(0, "", "mixing of merged main-sequence stars: 0 Hurley+2002 "
                        "Eq. 80, 1 by the ratio of helium-core masses at the base of the "
                        "giant branch",
                        choices=(0, 1))
    bhms_coll_flag: int = _p(0, "", "1: a star more massive than the black hole it collides "
                             "with survives", choices=(0, 1))
    htpmb: int = _p(1, "", "magnetic braking: 1 Ivanova & Taam 2003, 0 BSE, -1 none",
                    choices=(-1, 0, 1))
    st_cr: int = _p(1, "", "convective/radiative boundary: 1 StarTrack, 0 BSE (COSMIC's ST_cr)",
                    choices=(0, 1))
    rtmsflag: int = _p(0, "", "radius at the end of the main sequence: 0 SSE, 1 BoOST, 2 BPASS",
                       choices=(0, 1, 2))


def cosmic_name(key: str) -> str:
    """COSMIC's BSEDict name of our [bse] ``key``."""
    return COSMIC_SPELLING.get(key, key)


def bse_flags(cfg_bse: BseConfig) -> dict[str, Any]:
    """COSMIC's ``BSEDict`` of a [bse] section: every flag under COSMIC's name (our own keys
    left out), ints and floats as the Fortran common blocks hold them, ``alpha1``/``acc_lim``
    as 2-lists, ``qcrit_array``/``fprimc_array`` as 16-lists and ``natal_kick_array`` as a
    2x5 nested list (fresh lists: the caller may change them)."""
    flags: dict[str, Any] = {}
    for f in fields(cfg_bse):
        if f.name in OWN_KEYS:
            continue
        v = getattr(cfg_bse, f.name)
        if f.name == "natal_kick_array":
            v = [list(v[:5]), list(v[5:])]
        elif isinstance(v, list):
            v = list(v)
        flags[cosmic_name(f.name)] = v
    return flags


def bse_problem(cfg_bse: BseConfig) -> str | None:
    """The first cross-key problem of a [bse] section (a one-line message naming the key),
    or None."""
    if cfg_bse.ecsn_mlow > cfg_bse.ecsn:
        return (f"bse.ecsn_mlow: {cfg_bse.ecsn_mlow:g} must not exceed bse.ecsn = "
                f"{cfg_bse.ecsn:g} (COSMIC's error_check)")
    return None
