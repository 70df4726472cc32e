"""Run parameters: typed, validated dataclasses read from an INI file.

Every parameter is declared once here, [bse] in :mod:`cmc.bse_config` (type, default, unit,
meaning, allowed range); the INI reader, ``--set`` overrides, ``cmc params`` and
docs/parameters.md all come from these declarations.  An unknown section or key, or a value
of the wrong type or out of range, raises :class:`ConfigError` naming ``section.key``.
"""

from __future__ import annotations

import configparser
import dataclasses
import io
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cmc.bse_config import BseConfig, bse_problem


class ConfigError(ValueError):
    """A bad parameter: the message names the key."""


def _p(default: Any, unit: str, doc: str, lo: float | None = None, hi: float | None = None,
       choices: tuple[str, ...] | None = None, lo_open: bool = False):
    """Declare a parameter with its unit, meaning and allowed range."""
    meta = {"unit": unit, "doc": doc, "lo": lo, "hi": hi, "choices": choices,
            "lo_open": lo_open}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class InitialConfig:
    """[initial]: the initial cluster model."""

    model: str = _p("plummer", "", "initial model: plummer, king, or file (an HDF5 snapshot)",
                    choices=("plummer", "king", "file"))
    n: int = _p(10000, "stars", "number of stars", lo=40)
    seed: int = _p(1, "", "seed of the lfsr113 random streams (GSL taus113 seeding)", lo=0,
                   hi=2**32 - 1)
    w0: float = _p(6.0, "", "King model central potential W0", lo=1.0, hi=12.0)
    r_max: float = _p(0.0, "r_vir", "outer cut-off radius of a Plummer model (0: none)", lo=0.0)
    mass_function: str = _p("equal", "", "equal, power_law or kroupa",
                            choices=("equal", "power_law", "kroupa"))
    m_min: float = _p(0.1, "Msun", "lower mass limit of the mass function", lo=0.0,
                      lo_open=True)
    m_max: float = _p(100.0, "Msun", "upper mass limit of the mass function", lo=0.0,
                      lo_open=True)
    alpha: float = _p(2.35, "", "power-law slope dN/dm ~ m^-alpha", lo=0.0)
    m_star: float = _p(0.5, "Msun", "mass of each star for equal masses (physical units only)",
                       lo=0.0, lo_open=True)
    file: str = _p("", "", "initial-conditions HDF5 file when model = file")
    binary_fraction: float = _p(0.0, "", "fraction of the objects that are primordial binaries "
                                "(exactly round(f N) of them, chosen by the seed; the "
                                "object's mass is split between two members)", lo=0.0,
                                hi=1.0)
    binary_q_min: float = _p(0.1, "", "smallest mass ratio m2/m1 of a primordial binary "
                             "(q uniform in [q_min, 1])", lo=0.0, hi=1.0, lo_open=True)
    binary_a_min: float = _p(0.01, "a_hs", "smallest semi-major axis, in units of the binary's "
                             "hard/soft boundary a_hs = G m1 m2 / (<m> sigma^2)", lo=0.0,
                             lo_open=True)
    binary_a_max: float = _p(1.0, "a_hs", "largest semi-major axis (a log-uniform in between), "
                             "units of a_hs", lo=0.0, lo_open=True)
    r_vir_pc: float = _p(1.0, "pc", "initial virial radius: the length unit (0: tidally "
                         "filling, r_vir from tidal.r_gc_kpc and tidal.v_c_kms; King models "
                         "with tidal.r_t0_from = orbit)", lo=0.0)
    m_total_msun: float = _p(0.0, "Msun", "initial cluster mass: the mass unit (0: the sum of "
                             "the stars' masses in Msun)", lo=0.0)


@dataclass
class RunConfig:
    """[run]: the evolution and its stop conditions."""

    theta_max: float = _p(1.0, "rad", "largest representative deflection per step "
                          "(CMC-COSMIC's THETASEMAX, whose default is 1.412)", lo=0.0,
                          hi=math.pi / 2, lo_open=True)
    dt_window: int = _p(40, "stars", "stars per window whose relaxation time sets the step "
                        "(dt = (2 theta_max/pi)^2 min over windows); a multiple of 20; "
                        "CMC-COSMIC: 40 (2 AVEKERNEL), the CMC paper's MPI code: 20",
                        lo=20, hi=2000)
    zones: int = _p(8, "", "radial time-step zones: the cluster is cut at window bounds into "
                    "zones whose steps are 1, 2, 4, ... times the innermost step, each as long "
                    "as its own windows' relaxation times allow; a zone's stars get relaxation "
                    "and new orbits only when its step comes due (docs/method.md, 'Time-step "
                    "zones'); 1: one shared step for all stars", lo=1, hi=16)
    zone_theta_max: float = _p(0.5, "rad", "time-step zones: a window is in zone z > 0 only if "
                               "2^z dt is within the step that gives its pairs this largest "
                               "deflection, (2 zone_theta_max / pi)^2 T_rel (the shared step "
                               "gives the innermost window theta_max and the others less; "
                               "Henon's deflections are not additive when large)", lo=0.0,
                               hi=math.pi / 2, lo_open=True)
    zone_dt_max: float = _p(0.001, "t_rh0", "time-step zones: no zone's step is longer than "
                            "this (the outer stars' radii are not redrawn for up to a zone's "
                            "step, and the halo's structure follows the cluster's evolution, "
                            "not its own relaxation time)", lo=0.0, lo_open=True)
    gamma: float = _p(0.1, "", "Coulomb logarithm ln(gamma N) factor", lo=0.0, hi=1.0,
                      lo_open=True)
    dt_growth_max: float = _p(2.0, "", "largest factor by which dt may grow per step", lo=1.0)
    relaxation: bool = _p(True, "", "apply two-body relaxation (off: orbits only)")
    t_max: float = _p(30.0, "t_rh0", "stop at this time (initial half-mass relaxation times)",
                      lo=0.0, lo_open=True)
    t_max_myr: float = _p(0.0, "Myr", "also stop at this physical time; 0: off", lo=0.0)
    t_max_code: float = _p(0.0, "t_rel", "also stop at this time in the code's time unit "
                           "t_NB N0 / ln(gamma N0) (the diagnostics' time; CMC's T_MAX); 0: off",
                           lo=0.0)
    n_min_fraction: float = _p(0.005, "N0", "dissolved: stop when fewer than this fraction of "
                               "the initial objects remain (CMC: 0.005), or fewer than 40",
                               lo=0.0, hi=1.0)
    coulomb_n: str = _p("initial", "", "N in the Coulomb logarithm ln(gamma N): initial (N0, "
                        "CMC) or current (N(t))", choices=("initial", "current"))
    max_steps: int = _p(1000000, "", "stop after this many steps", lo=1)
    max_wall_hours: float = _p(0.0, "h", "stop (with a checkpoint) after this wall time of one "
                               "invocation (run or restart); 0: off",
                               lo=0.0)
    n_core_stop: float = _p(-1.0, "stars", "core collapse: stop when N_core, the median over "
                            "the last 10 steps, falls below this (and r_c/r_h has fallen by "
                            "run.rc_rh_drop); 0: off; -1: 100 for a run that cannot form "
                            "binaries, off for one that can (binaries present, or "
                            "binaries.three_body = all)", lo=-1.0)
    rc_rh_drop: float = _p(10.0, "", "the N_core stop also needs r_c/r_h (the median over the "
                           "last 10 steps) below its initial value over this factor: at small "
                           "N, N_core < 100 holds long before the collapse; 1: N_core alone "
                           "(CMC)", lo=1.0)
    rc_stop_fraction: float = _p(0.0, "r_c0", "stop when r_c < this * initial r_c; 0: off",
                                 lo=0.0, hi=1.0)
    energy_error_max: float = _p(0.05, "", "stop when |E - E0|/|E0| exceeds this", lo=0.0,
                                 lo_open=True)
    emulate_ranks: int = _p(0, "ranks", "serial run that reproduces the random streams of a "
                            "P-rank MPI run (0: off)", lo=0)
    threads: int = _p(0, "", "numba threads per process (0: cores / MPI ranks)", lo=0)
    sample_size: int = _p(0, "", "Sample Sort samples per rank (0: none, the splitters "
                               "guessed from the last step's radii; the result is the same)",
                          lo=0)
    orbit_backend: str = _p("cpu", "", "where new orbits are computed: cpu (numba, all cores), "
                            "gpu (a CUDA device through CuPy: pip install 'henon-cmc[gpu]') or "
                            "gpu-sim (the GPU kernel in numba's CUDA simulator: slow, for "
                            "tests)", choices=("cpu", "gpu", "gpu-sim"))
    shared_memory: str = _p("auto", "", "MPI runs: auto holds the arrays of all stars that "
                            "every rank reads (radii, masses, potential) once per node in "
                            "MPI-3 shared memory where the ranks of each node are consecutive; "
                            "off: a private copy on every rank.  The same results either way",
                            choices=("auto", "off"))
    orbit_balance: str = _p("auto", "", "MPI runs with orbit_backend = cpu: auto moves blocks "
                            "of the orbit kernel's work between neighbouring ranks by their "
                            "measured cost (outer stars cost more); off: each rank its own.  "
                            "The same results either way", choices=("auto", "off"))


@dataclass
class TidalConfig:
    """[tidal]: the galaxy's tidal field (see docs/method.md, "Tidal field")."""

    mode: str = _p("isolated", "", "isolated (no tidal cut), fixed (a constant tidal radius) or "
                   "shrinking (R_t = R_t0 (M/M0)^(1/3): a circular orbit in a point-mass "
                   "galaxy, as CMC)", choices=("isolated", "fixed", "shrinking"))
    r_t0_from: str = _p("model", "", "initial tidal radius: model (the King model's truncation "
                        "radius: tidally filling), orbit (the Jacobi radius at r_gc_kpc with "
                        "v_c_kms) or value (tidal.r_t0)", choices=("model", "orbit", "value"))
    r_t0: float = _p(0.0, "r_vir", "initial tidal radius when r_t0_from = value", lo=0.0)
    r_gc_kpc: float = _p(8.0, "kpc", "galactocentric radius of the circular orbit", lo=0.0,
                         lo_open=True)
    v_c_kms: float = _p(220.0, "km/s", "circular speed of the galaxy at r_gc_kpc", lo=0.0,
                        lo_open=True)
    dm_fraction_max: float = _p(0.01, "M0", "after a step that stripped more than this "
                                "fraction of the initial mass, the step is 0.8 times the last "
                                "one (CMC's calc_timestep); 0: never", lo=0.0, hi=1.0)


@dataclass
class BinariesConfig:
    """[binaries]: strong encounters, three-body binaries and wide binaries (runs with
    binaries; see docs/method.md)."""

    binary_single: bool = _p(True, "", "strong binary-single encounters through the few-body "
                             "integrator")
    binary_binary: bool = _p(True, "", "strong binary-binary encounters")
    x_bs: float = _p(2.0, "a", "pericentre cap of a binary-single encounter (CMC's XBS)",
                     lo=0.0, lo_open=True)
    x_bb: float = _p(2.0, "a1+a2", "pericentre cap of a binary-binary encounter (CMC's XBB)",
                     lo=0.0, lo_open=True)
    dt_fraction_bs: float = _p(0.005, "T_bs", "the step is at most this fraction of the "
                               "binary-single time scale of the central 300 stars (eq 10)",
                               lo=0.0, lo_open=True)
    dt_fraction_bb: float = _p(0.005, "T_bb", "the step is at most this fraction of the "
                               "binary-binary time scale (eq 9)", lo=0.0, lo_open=True)
    three_body: str = _p("bh", "", "three-body binary formation: off, bh (black holes, "
                         "startype 14, only: CMC's default) or all (any single stars)",
                         choices=("off", "bh", "all"))
    eta_min: float = _p(5.0, "", "smallest hardness of a three-body binary", lo=1.0)
    eta_max: float = _p(50.0, "", "largest hardness of a three-body binary", lo=1.0)
    three_body_neighbours: int = _p(10, "stars", "radial neighbours on each side for the "
                                    "local density of a three-body triplet (CMC's "
                                    "BH_AVEKERNEL; its velocity dispersion is its 20-star "
                                    "block's)", lo=1, hi=1000)
    wide_factor: float = _p(0.1, "n^-1/3", "break binaries whose apocentre exceeds this times "
                            "the local interparticle distance (CMC: 0.1); 0: never", lo=0.0)
    wide_hardness_min: float = _p(0.0, "", "also break binaries whose hardness m1 m2 / (a <m> "
                                  "sigma^2) (sigma: mass-weighted 3-D dispersion of their "
                                  "20-star block) is below this; 0: never", lo=0.0)
    integrator: str = _p("ar", "", "few-body integrator: ar (ours) or ias15 (REBOUND)",
                         choices=("ar", "ias15"))
    energy_tol: float = _p(1e-3, "", "discard an encounter whose relative energy error "
                           "exceeds this", lo=0.0, lo_open=True)
    max_steps: int = _p(200000, "", "discard an encounter unresolved after this many "
                        "integrator steps (a deterministic stand-in for CMC's CPU-time limit; "
                        "about 2 s)", lo=1000)
    collapse_tol: float = _p(1e-7, "", "tidal perturbation below which an isolated binary "
                             "inside an encounter is integrated as one body on a Kepler orbit "
                             "(Fewbody's collapse of isolated binaries); 0: never", lo=0.0,
                             hi=1e-5)
    t_max_periods: float = _p(1e5, "periods", "discard an encounter unresolved after this "
                              "time, in periods of its widest binary", lo=1.0)
    ss_collision: bool = _p(False, "", "single stars that pass within the sum of their radii "
                            "in the relaxation's pairing merge (sticky spheres, CMC's "
                            "SS_COLLISION; needs bse.stellar_evolution for the radii)")
    coll_factor: float = _p(1.0, "R1+R2", "sticky-sphere pericentre of a single-single "
                            "collision in units of the sum of the radii (CMC's COLL_FACTOR)",
                            lo=0.0, lo_open=True)
    dt_fraction_coll: float = _p(0.005, "T_coll", "with ss_collision, the step is at most this "
                                 "fraction of the central single stars' collision time scale "
                                 "(CMC's, Freitag & Benz 2002)", lo=0.0, lo_open=True)
    bh_radius_multiplier: float = _p(5.0, "", "black holes' radii inside few-body encounters "
                                     "are this many times BSE's (CMC's BH_RADIUS_MULTIPLYER)",
                                     lo=1.0)
    bh_capture: bool = _p(False, "", "two single black holes in the relaxation's pairing "
                          "that pass within the pericentre where their gravitational waves "
                          "take their kinetic energy form a binary (CMC's BH_CAPTURE, Quinlan "
                          "& Shapiro 1989; needs bse.stellar_evolution for the black holes)")
    pn25: bool = _p(False, "", "the 2.5 post-Newtonian term (gravitational-wave reaction) "
                    "between black holes in few-body encounters with two or more of them, and "
                    "their mergers with general relativity's mass loss and recoil (CMC-COSMIC "
                    "turns it on with BH_CAPTURE; needs bse.stellar_evolution and "
                    "integrator = ar)")


@dataclass
class OutputConfig:
    """[output]: what is written and how often."""

    snapshot_every: int = _p(0, "steps", "write a snapshot of all stars every so many steps"
                             " (0: only at start and end)", lo=0)
    checkpoint_every: int = _p(200, "steps", "write the checkpoint every so many steps", lo=1)
    checkpoint_minutes: float = _p(10.0, "min", "also write it after this much wall time",
                                   lo=0.0)
    checkpoints_to_keep: int = _p(2, "", "checkpoints kept: checkpoint.h5 (latest) and the "
                                  "older checkpoint.1.h5 ...", lo=1, hi=100)
    diagnostics_every: int = _p(50, "steps", "flush diagnostics.h5 every so many steps", lo=1)
    progress_every: int = _p(50, "steps", "progress line in the log every so many steps",
                             lo=1)
    lagrange_fractions: list = _p([0.001, 0.01, 0.1, 0.5, 0.9], "",
                                  "mass fractions of the Lagrange radii")


@dataclass
class Config:
    """The whole parameter set of a run."""

    initial: InitialConfig = field(default_factory=InitialConfig)
    run: RunConfig = field(default_factory=RunConfig)
    tidal: TidalConfig = field(default_factory=TidalConfig)
    binaries: BinariesConfig = field(default_factory=BinariesConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    bse: BseConfig = field(default_factory=BseConfig)

    SECTIONS = ("initial", "run", "tidal", "binaries", "output", "bse")

    def to_ini(self) -> str:
        """The parameters as INI text (round-trips through :func:`load_config`)."""
        cp = configparser.ConfigParser(interpolation=None)
        for sec in self.SECTIONS:
            obj = getattr(self, sec)
            cp[sec] = {f.name: _format(getattr(obj, f.name)) for f in fields(obj)}
        buf = io.StringIO()
        cp.write(buf)
        return buf.getvalue()

    def set(self, dotted: str, value: str) -> None:
        """Set ``section.key`` from its text value, validated."""
        if "." not in dotted:
            raise ConfigError(f"{dotted}: expected section.key=value")
        sec, key = dotted.split(".", 1)
        if (sec, key) == ("run", "r_tidal"):
            self._legacy_r_tidal(value)
            return
        if sec not in self.SECTIONS:
            raise ConfigError(f"{dotted}: unknown section [{sec}] "
                              f"(known: {', '.join(self.SECTIONS)})")
        if sec == "bse":  # COSMIC spells a few flags in capitals (ST_tide): ours are lower case
            key = key.lower()
        obj = getattr(self, sec)
        fmap = {f.name: f for f in fields(obj)}
        if key not in fmap:
            raise ConfigError(f"{sec}.{key}: unknown parameter (known: {', '.join(fmap)})")
        setattr(obj, key, _parse(f"{sec}.{key}", fmap[key], value))

    def _legacy_r_tidal(self, value: str) -> None:
        """``run.r_tidal`` of older parameter files (now [tidal]): 0 isolated, -1 the King
        model's tidal radius, r > 0 that radius, both fixed."""
        try:
            r = float(value)
        except ValueError:
            raise ConfigError(f"run.r_tidal: {value.strip()!r} is not a valid float") from None
        if r == 0.0:
            self.tidal.mode = "isolated"
        elif r == -1.0:
            self.tidal.mode, self.tidal.r_t0_from = "fixed", "model"
        elif r > 0.0 and math.isfinite(r):
            self.tidal.mode, self.tidal.r_t0_from, self.tidal.r_t0 = "fixed", "value", r
        else:
            raise ConfigError(f"run.r_tidal: {value.strip()} must be -1, 0 or positive (it is "
                              "now tidal.mode and tidal.r_t0)")

    def validate(self) -> None:
        """Check cross-parameter constraints."""
        ini = self.initial
        if ini.mass_function != "equal" and ini.m_min >= ini.m_max:
            raise ConfigError("initial.m_min: must be below initial.m_max")
        if ini.model == "file" and not ini.file:
            raise ConfigError("initial.file: required when initial.model = file")
        for x in self.output.lagrange_fractions:
            if not 0.0 < x < 1.0:
                raise ConfigError(f"output.lagrange_fractions: {x} is not in (0, 1)")
        if not self.output.lagrange_fractions:
            raise ConfigError("output.lagrange_fractions: needs at least one fraction")
        td = self.tidal
        if td.mode != "isolated":
            if td.r_t0_from == "model" and ini.model not in ("king", "file"):
                raise ConfigError("tidal.r_t0_from: model (the King truncation radius) needs "
                                  "initial.model = king or file; use orbit or value")
            if td.r_t0_from == "value" and td.r_t0 <= 0.0:
                raise ConfigError("tidal.r_t0: must be positive when tidal.r_t0_from = value")
        if ini.r_vir_pc == 0.0 and not (td.mode != "isolated" and td.r_t0_from == "orbit"
                                        and ini.model == "king"):
            raise ConfigError("initial.r_vir_pc: 0 (tidally filling) needs initial.model = "
                              "king, tidal.mode fixed or shrinking and tidal.r_t0_from = orbit")
        if ini.model != "file" and self.run.gamma * ini.n <= 1.0:
            # the clock's unit t_NB N0 / ln(gamma N0) needs a positive logarithm (a file's
            # N0 is checked when it is read: cmc.initial.check_file_objects)
            raise ConfigError(f"run.gamma: ln(gamma N) must be positive, but run.gamma * "
                              f"initial.n = {self.run.gamma * ini.n:g} (raise run.gamma or "
                              "initial.n)")
        if -1.0 < self.run.n_core_stop < 0.0:
            raise ConfigError("run.n_core_stop: must be -1 (auto), 0 (off) or positive")
        if self.run.dt_window % 20:
            raise ConfigError("run.dt_window: must be a multiple of 20 (the 20-star blocks)")
        if self.binaries.eta_max <= self.binaries.eta_min:
            raise ConfigError("binaries.eta_max: must be above binaries.eta_min")
        if (msg := bse_problem(self.bse)) is not None:
            raise ConfigError(msg)
        if self.binaries.ss_collision and not self.bse.stellar_evolution:
            raise ConfigError("binaries.ss_collision: needs bse.stellar_evolution = true (the "
                              "stars' radii)")
        if self.binaries.bh_capture and not self.bse.stellar_evolution:
            raise ConfigError("binaries.bh_capture: needs bse.stellar_evolution = true (the "
                              "black holes and their radii)")
        if self.binaries.pn25 and not self.bse.stellar_evolution:
            raise ConfigError("binaries.pn25: needs bse.stellar_evolution = true (the black "
                              "holes and the physical scale)")
        if self.binaries.pn25 and self.binaries.integrator != "ar":
            raise ConfigError("binaries.pn25: needs binaries.integrator = ar (IAS15 has no "
                              "2.5PN term here)")


def _format(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ", ".join(repr(x) for x in v)
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _parse(key: str, f: dataclasses.Field, text: str) -> Any:
    t = f.type if isinstance(f.type, str) else f.type.__name__
    text = text.strip()
    meta = f.metadata
    try:
        if t == "bool":
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if t == "int":
            fv = float(text)
            if not fv.is_integer():
                raise ValueError
            val: Any = int(fv)
        elif t == "float":
            val = float(text)
            if not math.isfinite(val):
                raise ValueError
        elif t == "list":  # brackets ignored: COSMIC's and CMC's [a, b] read too
            val = [float(x) for x in text.translate(_LIST_PUNCTUATION).split()]
            if not all(math.isfinite(x) for x in val):
                raise ValueError
        else:
            val = text
    except ValueError:
        raise ConfigError(f"{key}: {text!r} is not a valid {t}") from None
    if meta.get("choices") and val not in meta["choices"]:
        raise ConfigError(f"{key}: {text!r} is not one of "
                          f"{', '.join(str(c) for c in meta['choices'])}")
    if isinstance(val, list) and meta.get("length") and len(val) != meta["length"]:
        raise ConfigError(f"{key}: needs {meta['length']} numbers, got {len(val)}")
    lo, hi = meta.get("lo"), meta.get("hi")
    for x in val if isinstance(val, list) else [val]:
        if isinstance(x, int | float) and not isinstance(x, bool):
            shown = f"{x:g}" if isinstance(val, list) else text
            if lo is not None and (x < lo or (meta.get("lo_open") and x == lo)):
                rel = ">" if meta.get("lo_open") else ">="
                raise ConfigError(f"{key}: {shown} out of range (must be {rel} {lo})")
            if hi is not None and x > hi:
                raise ConfigError(f"{key}: {shown} out of range (must be <= {hi})")
    if meta.get("check") and (why := meta["check"](val)) is not None:
        raise ConfigError(f"{key}: {text}: {why}")
    return val


#: Characters of a list value read as separators.
_LIST_PUNCTUATION = str.maketrans({",": " ", "[": " ", "]": " ", ";": " "})


def load_config(path: str | None = None, overrides: list[str] | None = None,
                text: str | None = None) -> Config:
    """Read an INI file (or text), apply ``section.key=value`` overrides, validate.

    Raises
    ------
    ConfigError
        Naming the offending ``section.key``.
    """
    cfg = Config()
    # no interpolation: a '%' in a value (a file name, a comment) is just a character
    cp = configparser.ConfigParser(inline_comment_prefixes=("#", ";"), interpolation=None,
                                   default_section="\x00no-default")
    where = path if path is not None else "parameter text"
    try:
        if text is not None:
            cp.read_string(text)
        elif path is not None:
            with open(path, encoding="utf-8") as fh:
                cp.read_file(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read parameter file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"parameter file {path}: not a text (INI) file") from None
    except configparser.Error as exc:
        msg = getattr(exc, "message", str(exc)).splitlines()[0]
        raise ConfigError(f"parameter file {where}: {msg}") from None
    for sec in cp.sections():
        if sec.upper() == "DEFAULT":
            raise ConfigError(f"parameter file {where}: a [{sec}] section is not supported; "
                              "put each key in its section (known: "
                              f"{', '.join(Config.SECTIONS)})")
        for key, value in cp[sec].items():
            cfg.set(f"{sec}.{key}", value)
    if path is not None and cfg.initial.file and cp.has_option("initial", "file"):
        # a file named in a parameter file is relative to that file, not to the working
        # directory (an override on the command line stays relative to the working directory)
        f = Path(cfg.initial.file).expanduser()
        if not f.is_absolute():
            cfg.initial.file = str(Path(path).resolve().parent / f)
    for ov in overrides or []:
        if "=" not in ov:
            raise ConfigError(f"{ov}: expected section.key=value")
        k, v = ov.split("=", 1)
        cfg.set(k.strip(), v)
    cfg.validate()
    return cfg


def parameter_table() -> str:
    """Markdown table of every parameter (the one place where they are documented)."""
    lines = ["| parameter | default | unit | meaning |", "|---|---|---|---|"]
    for sec in Config.SECTIONS:
        obj = getattr(Config(), sec)
        for f in fields(obj):
            lines.append(f"| `{sec}.{f.name}` | `{_format(getattr(obj, f.name))}` | "
                         f"{f.metadata['unit']} | {f.metadata['doc']} |")
    return "\n".join(lines)
