"""CMC-COSMIC parameter files to ours (``cmc convert-ini``).

A CMC-COSMIC INI file has a ``[cmc]`` section (dynamics, input, tidal field, stops, output) and
a ``[bse]`` section (stellar evolution).  :func:`convert_cmc_ini` maps every parameter this code
implements onto our keys (:mod:`cmc.config`) and lists, one per line, every parameter it cannot
honour with the reason.  A parameter at a value that asks for nothing (a feature switched off,
or a fixed value equal to ours) is honoured; so is one whose CMC default already matches ours.

The time stops: CMC's ``T_MAX`` is in the code's time unit ``t_NB N0 / ln(gamma N0)`` (our
``run.t_max_code``) and ``T_MAX_PHYS`` in Gyr (our ``run.t_max_myr``); our own ``run.t_max``
(in initial half-mass relaxation times) is set out of the way, so that CMC's stops govern.

Stellar evolution (:mod:`cmc.bse_config`): CMC reads its keys case-insensitively and in any
section, and so does the converter for these: ``STELLAR_EVOLUTION`` is
``bse.stellar_evolution``, ``PTS1_HIGHMASS_CUTOFF`` ``bse.pts1_highmass_cutoff``, and every
COSMIC BSE flag its ``bse.<flag>`` (lower case).  CMC's COSMIC numbers ``kickflag`` as COSMIC
did before 3.5.0: 0, -1, -2, -3 become -1, -2, -3, -4 (:data:`cmc.bse_config.KICKFLAG_FROM_CMC`;
any other value is not honoured).  CMC's scalar ``alpha1`` and ``acc_lim`` hold for both
members (2-lists here); its arrays may keep their brackets.  With stellar evolution on, a BSE
flag the file leaves out gets CMC's C default where that differs from ours
(:data:`CMC_BSE_DEFAULTS`).  ``BSE_IDUM`` changes nothing: the kicks draw from the run's block
streams (seeded by ``initial.seed``).  A key that COSMIC 4.3.3's BSE does not have is not
honoured.
"""

from __future__ import annotations

import configparser
from dataclasses import dataclass, field, fields
from pathlib import Path

from cmc.bse_config import KICKFLAG_FROM_CMC, OWN_KEYS, BseConfig
from cmc.config import ConfigError, load_config
from cmc.errors import InputError

#: ``run.t_max`` of a converted file [t_rh0]: far beyond any CMC stop.
T_MAX_OUT_OF_THE_WAY = 1e9

#: Switches that ask for a process or output this code does not have: honoured when 0.
_OFF_OR_UNSUPPORTED = {
    "TIDAL_CAPTURE": "tidal capture is not implemented",
    "TC_POLYTROPE": "tidal capture is not implemented",
    "BHNS_TDE": "tidal disruptions are not implemented",
    "USE_TT_FILE": "tidal tensors from a file are not implemented (point-mass galaxy only)",
    "USE_DF_CUTOFF": "the dynamical-friction stop is not implemented",
    "BH_SNAPSHOTTING": "black-hole snapshots are not written (the snapshots hold every star)",
    "SNAPSHOT_CORE_COLLAPSE": "extra snapshots around core collapse are not written",
    "WRITE_EXTRA_CORE_INFO": "the extra core files are not written",
    "WRITE_BH_INFO": "the black-hole summary files are not written",
    "WRITE_PULSAR_INFO": "pulsar files are not written",
    "WRITE_MOREPULSAR_INFO": "pulsar files are not written",
    "WRITE_STELLAR_INFO": "stellar-evolution logs are not written",
    "FORCE_RLX_STEP": "a relaxation step without relaxation is not implemented",
    "DT_HARD_BINARIES": "the binary time step counts every binary (CMC's default)",
}

#: Parameters whose value here is fixed: honoured when the file asks for that value.
_FIXED = {
    "AVEKERNEL": (20, "relaxation pairs' local densities use 20 neighbours each side, the "
                      "time step 40-star windows"),
    "MIN_CHUNK_SIZE": (40, "blocks of 20 stars are fixed (the random streams depend on them)"),
    "NUM_CENTRAL_STARS": (300, "the central averages use 300 stars"),
    "TIDAL_TREATMENT": (0, "stars are stripped by their apocentre against R_t (CMC's radial "
                           "criterion, TIDAL_TREATMENT = 0); the Giersz energy criterion (1) "
                           "is not implemented"),
    "SNAPSHOTTING": (1, "the snapshots at start and end are always written"),
}

#: Parameters that change nothing here (bookkeeping of the C code).
_NO_EFFECT = {
    "TIMER": "the parts are always timed (diagnostics and logs)",
    "HARD_BINARY_KT": "used only with DT_HARD_BINARIES = 1",
    "TT_FILE": "used only with USE_TT_FILE = 1",
    "DF_FILE": "used only with USE_DF_CUTOFF = 1",
    "DF_INTEGRATED_CRITERION": "used only with USE_DF_CUTOFF = 1",
    "BH_SNAPSHOT_DELTACOUNT": "used only with BH_SNAPSHOTTING = 1",
    "PULSAR_DELTACOUNT": "used only with the pulsar files",
}

#: CMC's C defaults (cmc_io.c) of BSE flags where they differ from ours (CMC's production
#: values, examples/KingProfile.ini): a converted file with stellar evolution on that leaves
#: one out gets CMC's.
CMC_BSE_DEFAULTS = {"hewind": "1.0", "ussn": "0", "st_tide": "0", "rejuv_fac": "0.1",
                    "rejuvflag": "1"}

#: Why CMC's BSE_IDUM changes nothing here.
BSE_IDUM_WHY = ("seed of BSE's random numbers: the kicks here draw from the run's block "
                "streams (initial.seed)")

#: Our [bse] keys by CMC's (upper-case) name: COSMIC's flags and CMC's own two.
_BSE_KEYS = {**{f.name.upper(): f.name for f in fields(BseConfig) if f.name not in OWN_KEYS},
             "STELLAR_EVOLUTION": "stellar_evolution",
             "PTS1_HIGHMASS_CUTOFF": "pts1_highmass_cutoff"}

@dataclass
class Conversion:
    """Result of :func:`convert_cmc_ini`."""

    overrides: dict[str, str] = field(default_factory=dict)
    #: ``(parameter, value, reason)`` of every parameter that cannot be honoured
    not_honoured: list[tuple[str, str, str]] = field(default_factory=list)
    #: parameters mapped, as ``(cmc parameter, our key(s))``
    mapped: list[tuple[str, str]] = field(default_factory=list)
    #: ``(parameter, value, why)`` of parameters that change nothing here (their feature off)
    ignored: list[tuple[str, str, str]] = field(default_factory=list)

    def ini(self) -> str:
        """Our parameter file: the not-honoured list as comments, then every parameter."""
        cfg = load_config(None, [f"{k}={v}" for k, v in self.overrides.items()])
        head = ["# converted from a CMC-COSMIC parameter file by cmc convert-ini"]
        head += [f"# mapped: {c} -> {ours}" for c, ours in self.mapped]
        head += [f"# no effect: {p} = {v}: {why}" for p, v, why in self.ignored]
        head += [f"# not honoured: {p} = {v}: {why}" for p, v, why in self.not_honoured]
        return "\n".join(head) + "\n" + cfg.to_ini()


class _NotANumber(ValueError):
    """A CMC parameter whose value is not a number (reported with the file's name)."""

    def __init__(self, key: str, text: str, what: str):
        super().__init__(f"{key} = {text!r} is not {what}")


def _number(text: str, key: str) -> float:
    """The number ``text`` of CMC parameter ``key``."""
    try:
        return float(text.strip())
    except ValueError:
        raise _NotANumber(key, text, "a number") from None


def _whole(text: str, key: str) -> int:
    """The integer ``text`` of ``key`` (CMC reads integers with atoi/strtol: ``1e3`` is
    accepted here as 1000, ``2.5`` as 2, as before)."""
    try:
        return int(_number(text, key))
    except OverflowError:  # int(inf)
        raise _NotANumber(key, text, "a finite integer") from None


def _flag(text: str, key: str) -> bool:
    """A CMC switch: 0 off, any other integer on."""
    try:
        return _whole(text, key) != 0
    except _NotANumber:
        raise _NotANumber(key, text, "a switch (0 or 1)") from None


def read_cmc_ini(path: str | Path) -> dict[str, dict[str, str]]:
    """The sections of a CMC-COSMIC INI file (keys as written; ``;`` comments removed)."""
    cp = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";", "#"),
                                   strict=False, comment_prefixes=(";", "#"))
    cp.optionxform = str
    try:
        with open(path, encoding="utf-8") as fh:
            cp.read_file(fh)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (configparser.Error, UnicodeDecodeError) as exc:
        msg = str(exc).splitlines()[0]
        raise InputError(f"{path}: not a CMC parameter file ({msg})") from None
    if not cp.has_section("cmc"):
        raise InputError(f"{path}: no [cmc] section (not a CMC-COSMIC parameter file)")
    return {sec: {k: v.strip().rstrip(";").strip() for k, v in cp.items(sec)}
            for sec in cp.sections()}


def convert_cmc_ini(path: str | Path) -> Conversion:
    """Map a CMC-COSMIC parameter file onto ours.

    Raises
    ------
    InputError
        The file cannot be read, has no ``[cmc]`` section, or a parameter read as a number
        or switch is not one (the message names the file and the parameter).
    """
    sections = read_cmc_ini(path)
    try:
        return _convert(path, sections)
    except _NotANumber as exc:
        raise InputError(f"{path}: {exc}") from None


def _convert(path: str | Path, sections: dict[str, dict[str, str]]) -> Conversion:
    """The body of :func:`convert_cmc_ini` (raises :class:`_NotANumber`)."""
    cmc = dict(sections["cmc"])
    raw = dict(cmc)
    out = Conversion()
    ov = out.overrides

    def put(cmc_key: str, shown: str | None = None, **ours: str) -> None:
        """Set our keys (together), refusing (into the list) values our validation rejects;
        ``shown``: the file's value (default: the [cmc] section's)."""
        new = {key.replace("__", "."): value for key, value in ours.items()}
        try:
            load_config(None, [f"{k}={v}" for k, v in {**ov, **new}.items()])
        except ConfigError as exc:
            out.not_honoured.append((cmc_key, raw.get(cmc_key, "") if shown is None else shown,
                                     f"out of range here ({exc})"))
            return
        ov.update(new)
        out.mapped.append((cmc_key, ", ".join(f"{k} = {v}" for k, v in new.items())))

    def pop(key: str) -> str | None:
        return cmc.pop(key, None)

    if (v := pop("INPUT_FILE")) is not None:
        f = Path(v).expanduser()
        if not f.is_absolute():
            f = (Path(path).resolve().parent / f).resolve()
        put("INPUT_FILE", initial__model="file", initial__file=str(f))
    if (v := pop("IDUM")) is not None:
        put("IDUM", initial__seed=str(abs(_whole(v, "IDUM"))))
    perturb = pop("PERTURB")
    if (v := pop("RELAXATION")) is not None:
        put("RELAXATION", run__relaxation="true" if _flag(v, "RELAXATION") else "false")
    if (v := pop("THETASEMAX")) is not None:
        put("THETASEMAX", run__theta_max=str(_number(v, "THETASEMAX")))
    # CMC-COSMIC's time step is the minimum over windows of 2 AVEKERNEL stars (its
    # simul_relax_new; AVEKERNEL = 20 by default): the same 40-star windows here (our own
    # default is 20; docs/performance.md, "Time to solution").  Another AVEKERNEL is refused
    # below (the pairs' densities use 20 neighbours each side).
    kernel = cmc.get("AVEKERNEL")
    if kernel is None or _number(kernel, "AVEKERNEL") == _FIXED["AVEKERNEL"][0]:
        put("AVEKERNEL", run__dt_window=str(2 * _FIXED["AVEKERNEL"][0]))
    if (v := pop("CMC_GAMMA")) is not None:
        put("CMC_GAMMA", run__gamma=str(_number(v, "CMC_GAMMA")))
    # stops: CMC's decide; ours in t_rh0 is set out of the way
    ov["run.t_max"] = str(T_MAX_OUT_OF_THE_WAY)
    # absent, CMC's defaults apply (T_MAX = 100, T_MAX_PHYS = 13.8 Gyr)
    put("T_MAX", run__t_max_code=str(_number(pop("T_MAX") or "100", "T_MAX")))
    put("T_MAX_PHYS",
        run__t_max_myr=str(1e3 * _number(pop("T_MAX_PHYS") or "13.8", "T_MAX_PHYS")))
    if (v := pop("T_MAX_COUNT")) is not None:
        put("T_MAX_COUNT", run__max_steps=str(_whole(v, "T_MAX_COUNT")))
    if (v := pop("MAX_WCLOCK_TIME")) is not None:
        put("MAX_WCLOCK_TIME", run__max_wall_hours=str(_number(v, "MAX_WCLOCK_TIME") / 3600.0))
    if (v := pop("TERMINAL_ENERGY_DISPLACEMENT")) is not None:
        put("TERMINAL_ENERGY_DISPLACEMENT",
            run__energy_error_max=str(_number(v, "TERMINAL_ENERGY_DISPLACEMENT")))
    if (v := pop("STOPATCORECOLLAPSE")) is not None:
        # CMC stops on N_core <= 100 alone (cmc_utils.c); here the median over 10 steps
        if _flag(v, "STOPATCORECOLLAPSE"):
            put("STOPATCORECOLLAPSE", run__n_core_stop="100", run__rc_rh_drop="1")
        else:
            put("STOPATCORECOLLAPSE", run__n_core_stop="0")
    else:
        ov["run.n_core_stop"] = "0"  # CMC's default: no stop at core collapse
    if (v := pop("CHECKPOINT_INTERVAL")) is not None:
        put("CHECKPOINT_INTERVAL",
            output__checkpoint_minutes=str(_number(v, "CHECKPOINT_INTERVAL") / 60.0))
    if (v := pop("CHECKPOINTS_TO_KEEP")) is not None:
        put("CHECKPOINTS_TO_KEEP",
            output__checkpoints_to_keep=str(_whole(v, "CHECKPOINTS_TO_KEEP")))
    if (v := pop("SAMPLESIZE")) is not None:
        put("SAMPLESIZE", run__sample_size=str(_whole(v, "SAMPLESIZE")))
    if (v := pop("MASS_PC")) is not None:
        put("MASS_PC", output__lagrange_fractions=v)
    if (v := pop("SNAPSHOT_DELTACOUNT")) is not None:
        put("SNAPSHOT_DELTACOUNT", output__snapshot_every=str(_whole(v, "SNAPSHOT_DELTACOUNT")))
    for key in ("SNAPSHOT_WINDOWS", "SNAPSHOT_WINDOW_UNITS"):
        if (v := pop(key)) is not None:
            out.not_honoured.append((key, v, "snapshots in windows of physical time are not "
                                     "written; output.snapshot_every counts steps"))
    if (v := pop("MASS_BINS")) is not None:
        out.not_honoured.append(("MASS_BINS", v, "Lagrange radii per mass bin are not "
                                 "computed (m_mean_lagrange gives the mean mass inside each "
                                 "Lagrange radius)"))
    # tidal field: CMC strips in a point-mass galaxy with R_t from the input file's RTID
    if (v := pop("TIDALLY_STRIP_STARS")) is not None:
        if _flag(v, "TIDALLY_STRIP_STARS"):
            put("TIDALLY_STRIP_STARS", tidal__mode="shrinking", tidal__r_t0_from="model")
        else:
            put("TIDALLY_STRIP_STARS", tidal__mode="isolated")
    # binaries
    if (v := pop("BINBIN")) is not None:
        put("BINBIN", binaries__binary_binary="true" if _flag(v, "BINBIN") else "false")
    if (v := pop("BINSINGLE")) is not None:
        put("BINSINGLE", binaries__binary_single="true" if _flag(v, "BINSINGLE") else "false")
    three = pop("THREEBODYBINARIES")
    only_bh = pop("ONLY_FORM_BH_THREEBODYBINARIES")
    if three is not None or only_bh is not None:
        on = _flag(three, "THREEBODYBINARIES") if three is not None else True
        bh = _flag(only_bh, "ONLY_FORM_BH_THREEBODYBINARIES") if only_bh is not None else True
        put("THREEBODYBINARIES" if three is not None else "ONLY_FORM_BH_THREEBODYBINARIES",
            binaries__three_body="off" if not on else ("bh" if bh else "all"))
    if (v := pop("BH_AVEKERNEL")) is not None:
        put("BH_AVEKERNEL", binaries__three_body_neighbours=str(_whole(v, "BH_AVEKERNEL")))
    hardness = pop("MIN_BINARY_HARDNESS")
    if hardness is not None:
        put("MIN_BINARY_HARDNESS", binaries__eta_min=str(_number(hardness, "MIN_BINARY_HARDNESS")))
    breaking_min = pop("BINARY_BREAKING_MIN")
    distance = pop("BINARY_DISTANCE_BREAKING")
    if breaking_min is not None and _flag(breaking_min, "BINARY_BREAKING_MIN"):
        put("BINARY_BREAKING_MIN", binaries__wide_factor="0",
            binaries__wide_hardness_min=str(_number(hardness or "5", "MIN_BINARY_HARDNESS")))
        if distance is not None:
            out.not_honoured.append(("BINARY_DISTANCE_BREAKING", distance,
                                     "unused with BINARY_BREAKING_MIN = 1"))
    elif distance is not None:
        put("BINARY_DISTANCE_BREAKING",
            binaries__wide_factor=str(_number(distance, "BINARY_DISTANCE_BREAKING")))
    if perturb is not None and not _flag(perturb, "PERTURB"):
        # no dynamics at all: this wins over the relaxation and binary switches above
        put("PERTURB", run__relaxation="false", binaries__binary_single="false",
            binaries__binary_binary="false", binaries__three_body="off")
    # stellar evolution: its keys in any section, case-insensitively (as CMC reads them)
    known = {*_BSE_KEYS, "BSE_IDUM"}
    bse = {k: v for k, v in cmc.items() if k.upper() in known}
    for k in bse:
        del cmc[k]
    bse.update({k: v for k, v in sections.get("bse", {}).items() if k.upper() in known})
    _convert_bse(bse, out, put)
    # switches that are fine off, fixed values, bookkeeping
    # collisions (after [bse]: single-single collisions need the stars' radii; without stellar
    # evolution the validation refuses them, and the key is listed with that reason)
    if (v := pop("SS_COLLISION")) is not None:
        put("SS_COLLISION", binaries__ss_collision="true" if _flag(v, "SS_COLLISION")
            else "false")
    # gravitational-wave capture of single black holes: CMC-COSMIC evaluates it in its
    # single-single branch, which only SS_COLLISION = 1 enters (cmc_dynamics.c); the 2.5PN
    # term in encounters with two or more black holes it turns on with BH_CAPTURE alone
    # (cmc_binsingle.c, cmc_binbin.c)
    if (v := pop("BH_CAPTURE")) is not None:
        on = "true" if _flag(v, "BH_CAPTURE") else "false"
        ss = raw.get("SS_COLLISION")
        if on == "true" and not (ss is not None and _flag(ss, "SS_COLLISION")):
            put("BH_CAPTURE", binaries__pn25=on)  # the capture in the pairing stays off
        else:
            put("BH_CAPTURE", binaries__bh_capture=on, binaries__pn25=on)
    if (v := pop("COLL_FACTOR")) is not None:
        put("COLL_FACTOR", binaries__coll_factor=str(_number(v, "COLL_FACTOR")))
    if (v := pop("BH_RADIUS_MULTIPLYER")) is not None:
        put("BH_RADIUS_MULTIPLYER",
            binaries__bh_radius_multiplier=str(_number(v, "BH_RADIUS_MULTIPLYER")))
    for key, why in _OFF_OR_UNSUPPORTED.items():
        if (v := pop(key)) is not None and _flag(v, key):
            out.not_honoured.append((key, v, why))
    for key, (ours, why) in _FIXED.items():
        if (v := pop(key)) is not None and _number(v, key) != ours:
            out.not_honoured.append((key, v, why))
    for key, why in _NO_EFFECT.items():
        if (v := pop(key)) is not None:
            out.ignored.append((key, v, why))
    for key, v in cmc.items():
        out.not_honoured.append((key, v, "not known to this converter"))
    for sec, items in sections.items():
        if sec == "cmc":
            continue
        if sec == "bse":
            for key, v in items.items():
                if key.upper() not in _BSE_KEYS and key.upper() != "BSE_IDUM":
                    out.not_honoured.append((f"[bse] {key}", v, "not a flag of COSMIC "
                                             "4.3.3's BSE"))
        else:
            for key, v in items.items():
                out.not_honoured.append((f"[{sec}] {key}", v, "unknown section"))
    return out


def _numbers(text: str, key: str) -> list[float]:
    """The numbers of CMC list parameter ``key`` (separated by commas, semicolons or spaces;
    brackets ignored, as CMC's strtok reads them)."""
    parts = text.translate(str.maketrans(",;[]", "    ")).split()
    return [_number(x, key) for x in parts]


def _convert_bse(items: dict[str, str], out: Conversion, put) -> None:
    """Map CMC's stellar-evolution keys (as written -> value) with ``put`` (:func:`_convert`'s);
    a key not honoured is listed under its name (unknown keys of [bse] are listed by
    :func:`_convert` as ``[bse] key``)."""
    types = {f.name: f.type for f in fields(BseConfig)}
    todo: dict[str, tuple[str, str, str]] = {}  # our key -> (CMC key, its value, ours)
    for key, v in items.items():
        upper = key.upper()
        if upper == "BSE_IDUM":
            out.ignored.append((key, v, BSE_IDUM_WHY))
            continue
        ours = _BSE_KEYS[upper]
        kind = types[ours]
        if ours == "kickflag":
            old = _whole(v, key)
            if old not in KICKFLAG_FROM_CMC:
                out.not_honoured.append((key, v, "CMC-COSMIC's kickflag is 0, "
                                         "-1, -2 or -3 (COSMIC before 3.5.0)"))
                continue
            text = str(KICKFLAG_FROM_CMC[old])
        elif ours == "stellar_evolution":
            text = "true" if _flag(v, key) else "false"
        elif kind == "list":
            nums = _numbers(v, key)
            if ours in ("alpha1", "acc_lim") and len(nums) == 1:
                nums *= 2  # CMC's scalar: the same for both members
            text = ", ".join(repr(x) for x in nums)
        elif kind == "int":
            text = str(_whole(v, key))
        else:
            text = repr(_number(v, key))
        todo[ours] = (key, v, text)
    if todo.get("stellar_evolution", ("", "", "false"))[2] == "true":
        for ours, text in CMC_BSE_DEFAULTS.items():
            todo.setdefault(ours, (f"{ours} (CMC's default)", text, text))
    order = list(todo)
    if "ecsn" in todo and "ecsn_mlow" in todo:
        # ecsn_mlow <= ecsn is checked at each put: set first the one that keeps it with the
        # other's old value (if the new pair breaks it, the second is refused)
        first = "ecsn_mlow" if float(todo["ecsn_mlow"][2]) <= BseConfig.ecsn else "ecsn"
        order.remove(first)
        order.insert(order.index("ecsn" if first == "ecsn_mlow" else "ecsn_mlow"), first)
    for ours in order:
        key, v, text = todo[ours]
        put(key, shown=v, **{f"bse__{ours}": text})
