"""Initial star sets from the [initial] parameters (Plummer, King, or an HDF5 file)."""

from __future__ import annotations

import numpy as np

from cmc.config import Config
from cmc.cosmic import is_cosmic_file, refuse_fits
from cmc.errors import InputError
from cmc.io import read_snapshot, validate_stars
from parallel.streams import Streams
from physics.initial_conditions import king, plummer, sample_masses


def initial_generator(seed: int) -> np.random.Generator:
    """numpy Generator over the lfsr113 stream reserved for initial conditions."""
    from cmc.state import IC_STREAM

    streams = Streams.create(seed, 1, 1, first_stream=IC_STREAM)
    # the bit generator holds a reference to the state table it draws from
    return np.random.Generator(streams.bit_generator(0, 0))


def build_initial_stars(cfg: Config) -> tuple[dict[str, np.ndarray], dict]:
    """Global, radially sorted star arrays in Hénon units and model information.

    Returns
    -------
    stars : dict of ndarray
        Fields ``id, m, r, vr, vt, m_msun`` (others take their defaults).
    info : dict
        ``n``, ``model``, ``r_tidal`` (Hénon length, 0 for untruncated models), ``m_total_msun``.
    """
    ini = cfg.initial
    if ini.model == "file":
        refuse_fits(ini.file)
    if ini.model == "file" and is_cosmic_file(ini.file):
        return _cosmic_stars(cfg)
    if ini.model == "file":
        stars, attrs = read_snapshot(ini.file)
        n = stars["r"].size
        check_file_objects(n, ini.file, cfg.run.gamma)
        check_file_radii(stars, ini.file)
        check_file_spread(stars, ini.file)
        if "time_unit" not in attrs:
            # a cmc snapshot is in the units of the run that wrote it (M < 1 after escapes);
            # any other file must be in Hénon units or is rescaled to them
            to_henon_units(stars, ini.file)
        ensure_binary_columns(stars, cfg.binaries.three_body, cfg.bse.stellar_evolution,
                          cfg.binaries.ss_collision or cfg.binaries.bh_capture)
        # a run's snapshot holds its current tidal radius (0 when isolated) and the model's
        r_tidal = float(attrs.get("r_tidal", 0.0)) or float(attrs.get("r_tidal_model", 0.0))
        info = {"n": n, "model": "file", "r_tidal": r_tidal,
                "m_total_msun": float(np.sum(stars["m_msun"]))}
        if float(attrs.get("metallicity", 0.0)) > 0.0:
            info["metallicity"] = float(attrs["metallicity"])
        if "unit_length_pc" in attrs:
            info["unit_length_pc"] = float(attrs["unit_length_pc"])
        _scale_masses(stars, info, cfg.initial.m_total_msun)
        return stars, info
    rng = initial_generator(ini.seed)
    n = ini.n
    if ini.mass_function == "equal":
        masses_msun = np.full(n, ini.m_star)
    else:
        masses_msun = sample_masses(n, rng, kind=ini.mass_function, m_min=ini.m_min,
                                    m_max=ini.m_max, alpha=ini.alpha)
        if isinstance(masses_msun, tuple):
            masses_msun = masses_msun[0]
    total = float(np.sum(masses_msun))
    r_tidal = 0.0
    if ini.model == "plummer":
        stars = plummer(n, rng, r_max=ini.r_max or None,
                        masses=None if ini.mass_function == "equal" else masses_msun)
    else:
        stars, kinfo = king(n, ini.w0, rng,
                            masses=None if ini.mass_function == "equal" else masses_msun)
        r_tidal = float(kinfo["r_tidal"])
    out = {"id": np.arange(n, dtype=np.int64), "m": stars["m"], "r": stars["r"],
           "vr": stars["vr"], "vt": stars["vt"], "m_msun": stars["m"] * total}
    n_bin = 0
    if ini.binary_fraction > 0.0:
        n_bin = add_primordial_binaries(out, rng, ini)
    ensure_binary_columns(out, cfg.binaries.three_body, cfg.bse.stellar_evolution,
                          cfg.binaries.ss_collision or cfg.binaries.bh_capture)
    info = {"n": n, "model": ini.model, "r_tidal": r_tidal, "m_total_msun": total,
            "n_binaries": n_bin}
    _scale_masses(out, info, ini.m_total_msun)
    return out, info


#: Peak memory of a serial run [bytes per object], beyond the Python and numba runtime
#: (:data:`RUNTIME_BYTES`): measured (peak RSS of ``cmc run`` for one step on one thread at
#: N = 2e5 and 1e6, 2026-11-28) 400 for equal-mass single stars (Plummer) and 850 with the
#: binary columns (King, Kroupa, 10 % binaries).
RUN_BYTES_PER_OBJECT = (400, 850)
#: What rank 0 of an MPI run needs to draw the whole model and hand it out [bytes per
#: object]: twice the model's arrays (measured for ``cmc ic``: 150 and 225 with binaries).
SETUP_BYTES_PER_OBJECT = (300, 450)
#: The Python, numpy and numba runtime of one process [bytes] (measured: about 240 MB).
RUNTIME_BYTES = 240e6


def _bytes(x: float) -> str:
    """``x`` bytes in a readable unit."""
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9)):
        if x >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x / 1e6:.3g} MB"


def available_memory() -> float | None:
    """Memory this process can still get [bytes]: the kernel's MemAvailable, or less when its
    cgroup (a batch job's allocation, a container) has a lower limit; None when unknown."""
    from pathlib import Path

    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = float(line.split()[1]) * 1024.0
    except (OSError, ValueError, IndexError):
        pass
    try:  # cgroup v2: the job's limit less what it already uses
        rel = Path("/proc/self/cgroup").read_text().splitlines()[0].split("::", 1)[1]
        cg = Path("/sys/fs/cgroup") / rel.lstrip("/")
        limit = (cg / "memory.max").read_text().strip()
        if limit != "max":
            free = float(limit) - float((cg / "memory.current").read_text())
            avail = free if avail is None else min(avail, free)
    except (OSError, ValueError, IndexError):
        pass
    return avail


def check_memory(cfg: Config, ranks: int = 1, available: float | None = None) -> None:
    """Refuse a drawn model too large for this machine's memory, before anything is
    allocated, saying how much it needs.

    A serial run needs about :data:`RUN_BYTES_PER_OBJECT` per object; under MPI rank 0 draws
    the whole model and hands it out (:data:`SETUP_BYTES_PER_OBJECT`), the rest is spread
    over the ranks and is not checked here.  The figures are measured peaks, so a model
    refused here would have ended in MemoryError (or the kernel's OOM killer) anyway.

    Parameters
    ----------
    cfg : Config
        The run's parameters (``initial.n``; binary columns with ``initial.binary_fraction``
        or ``binaries.three_body = all``).  A model read from a file is not checked (the
        file's size bounds it).
    ranks : int
        MPI ranks of the run.
    available : float, optional
        Bytes available (default :func:`available_memory`; nothing is checked when unknown).

    Raises
    ------
    InputError
        Naming ``initial.n``, the memory needed and the memory available.
    """
    if cfg.initial.model == "file":
        return
    if available is None:
        available = available_memory()
    if available is None:
        return
    se = cfg.bse.stellar_evolution
    binaries = cfg.initial.binary_fraction > 0.0 or cfg.binaries.three_body == "all" or (
        se and cfg.binaries.three_body == "bh")
    per = (SETUP_BYTES_PER_OBJECT if ranks > 1 else RUN_BYTES_PER_OBJECT)[int(binaries)]
    if se:  # its columns, estimated (not measured) as held four times at the peak: the
        # table, the sort's records and their send and receive buffers
        from cmc.fields import SE_BINARY_FIELDS, SE_FIELDS

        per += 4 * 8 * (len(SE_FIELDS) + (len(SE_BINARY_FIELDS) if binaries else 0))
    need = RUNTIME_BYTES + per * float(cfg.initial.n)
    if need > available:
        what = "rank 0 of an MPI run needs" if ranks > 1 else "the run needs"
        raise InputError(f"initial.n = {cfg.initial.n:g}: {what} about {_bytes(need)} of "
                         f"memory ({per} bytes per object{' with binaries' * binaries}), "
                         f"but {_bytes(available)} are available; use fewer objects or a "
                         "machine with more memory")


def _cosmic_stars(cfg: Config) -> tuple[dict[str, np.ndarray], dict]:
    """Stars and model information of a COSMIC ``InitialCMCTable`` file (:mod:`cmc.cosmic`).

    COSMIC writes N-body units (M = 1, K = 1/4, W = -1/2), which are taken as they are (no
    rescaling, so every bit of the positions and velocities is kept); a file that is not in
    them is rescaled with a warning, as other files are.
    """
    from cmc.cosmic import in_nbody_units, read_cosmic

    path = cfg.initial.file
    stars, info = read_cosmic(path)
    check_file_objects(stars["r"].size, path, cfg.run.gamma)
    check_file_radii(stars, path)
    check_file_spread(stars, path)
    validate_stars(stars, path)
    if not in_nbody_units(stars):
        to_henon_units(stars, path)
    ensure_binary_columns(stars, cfg.binaries.three_body, cfg.bse.stellar_evolution,
                          cfg.binaries.ss_collision or cfg.binaries.bh_capture)
    info["model"] = "file"
    _scale_masses(stars, info, cfg.initial.m_total_msun)
    return stars, info


def _scale_masses(stars: dict[str, np.ndarray], info: dict, m_total_msun: float) -> None:
    """Scale the stars' physical masses to a given cluster mass (0: keep them)."""
    if m_total_msun <= 0.0:
        return
    f = m_total_msun / info["m_total_msun"]
    for key in ("m_msun", "bin_m1_msun", "bin_m2_msun"):
        if key in stars:
            stars[key] = stars[key] * f
    info["m_total_msun"] = float(np.sum(stars["m_msun"]))


def physical_scale(cfg: Config, info: dict, m_total: float) -> tuple[float, float, float]:
    """Mass unit [Msun], length unit [pc] and initial tidal radius [Hénon length] of a run.

    The mass unit is the cluster's mass in Msun per Hénon mass (``m_total`` is the model's
    total mass in Hénon units: 1, or less for a snapshot of a run that lost stars).  The length
    unit is ``initial.r_vir_pc``; a snapshot that carries its unit keeps it; with
    ``r_vir_pc = 0`` a King model fills its Jacobi radius at ``tidal.r_gc_kpc``.  The initial
    tidal radius follows ``tidal.r_t0_from`` (0 for isolated runs).

    Raises
    ------
    InputError
        No tidal radius to be had (``r_t0_from = model`` for a file without one).
    """
    import logging

    from cmc.units import jacobi_radius_pc

    td = cfg.tidal
    unit_mass = info["m_total_msun"] / m_total
    length = float(info.get("unit_length_pc", cfg.initial.r_vir_pc))
    r_j_pc = 0.0
    if td.mode != "isolated" and td.r_t0_from == "orbit":
        r_j_pc = jacobi_radius_pc(info["m_total_msun"], td.r_gc_kpc, td.v_c_kms)
    if length == 0.0:  # tidally filling: the King truncation radius is the Jacobi radius
        length = r_j_pc / info["r_tidal"]
        logging.getLogger("cmc.initial").info(
            "tidally filling at R_gc = %g kpc: r_J = %.4g pc, r_vir = %.4g pc", td.r_gc_kpc,
            r_j_pc, length)
    if td.mode == "isolated":
        return unit_mass, length, 0.0
    if td.r_t0_from == "model":
        if info["r_tidal"] <= 0.0:
            raise InputError("tidal.r_t0_from = model: the initial model has no tidal radius "
                             "(a King model or a snapshot with an r_tidal attribute has one)")
        return unit_mass, length, float(info["r_tidal"])
    if td.r_t0_from == "orbit":
        return unit_mass, length, r_j_pc / length
    return unit_mass, length, float(td.r_t0)


#: Relative tolerance on M = 1 and E = -1/4 within which a file is taken as in Hénon units.
HENON_TOL = 1e-6
#: A star this many times the median radius out cannot belong to the cluster.
R_FAR = 1e6


def check_file_objects(n: int, where: str, gamma: float) -> None:
    """Refuse an initial-conditions file with too few objects for a run.

    A run needs at least :data:`cmc.state.MIN_OBJECTS` objects (40, as ``initial.n``
    for drawn models; below it a run counts as dissolved): with fewer the time step comes
    from one or two 20-star windows and is absurd (a bound 20-star file made one step of
    5e4 t_rh0), and the Coulomb logarithm ln(gamma N0) of the clock can be zero or negative.
    """
    from cmc.state import MIN_OBJECTS

    if n < MIN_OBJECTS:
        raise InputError(f"{where}: {n} object(s); a run needs at least {MIN_OBJECTS} (as "
                         "initial.n for drawn models)")
    if gamma * n <= 1.0:
        raise InputError(f"{where}: {n} objects with run.gamma = {gamma:g}: the Coulomb "
                         f"logarithm ln(gamma N0) = ln({gamma * n:g}) must be positive (raise "
                         "run.gamma or use more objects)")


def check_file_radii(stars: dict[str, np.ndarray], where: str) -> None:
    """Refuse stars absurdly far out (they would overflow the local density estimates)."""
    r = stars["r"]
    far = r > R_FAR * float(np.median(r))
    if far.any():
        i = int(np.argmax(far))
        raise InputError(f"{where}: star {i} (id {stars['id'][i]}) is at r = {r[i]:.6g}, more "
                         f"than {R_FAR:.0e} times the median radius: not a cluster member "
                         "(remove it from the file)")


def check_file_spread(stars: dict[str, np.ndarray], where: str) -> None:
    """Refuse stars all at one radius or all at rest: such a set has no relaxation time (no
    velocity dispersion, or no density profile), and the first step failed with 'time step
    is not finite' (exit 3) instead of naming the file."""
    r = stars["r"]
    if r.size and np.all(r == r[0]):
        raise InputError(f"{where}: all {r.size} objects are at one radius (r = "
                         f"{float(r[0]):.6g}): a shell, not a cluster (no density profile to "
                         "relax in)")
    if not (np.any(stars["vr"]) or np.any(stars["vt"])):
        raise InputError(f"{where}: all velocities are zero: a cluster at rest has no "
                         "velocity dispersion, so no relaxation time (give the stars "
                         "velocities, e.g. from an equilibrium model)")


def to_henon_units(stars: dict[str, np.ndarray], where: str) -> None:
    """Rescale an initial-conditions file to Hénon units (G = M = 1, E = -1/4) when it is
    not in them, with a logged note (the physical masses ``m_msun`` are kept).

    Binaries' semi-major axes scale with the length and their member masses with the mass.
    """
    import logging

    from physics.initial_conditions import scale_to_henon_units, shell_energies

    m_tot = float(np.sum(stars["m"]))
    k, w = shell_energies(stars["r"], stars["vr"], stars["vt"], stars["m"])
    if abs(m_tot - 1.0) <= HENON_TOL and abs((k + w) + 0.25) <= 0.25 * 1e-3:
        return
    try:
        scaled, sc = scale_to_henon_units(stars["r"], stars["vr"], stars["vt"], stars["m"])
    except ValueError as exc:
        raise InputError(f"{where}: not in Hénon units and cannot be rescaled: {exc}") from None
    if np.any(sc.order != np.arange(sc.order.size)):
        for key in list(stars):
            stars[key] = stars[key][sc.order]
    stars.update(scaled)
    if "bin_a" in stars:
        stars["bin_a"] = stars["bin_a"] * sc.length
        stars["bin_m1"] = stars["bin_m1"] * sc.mass
        stars["bin_m2"] = stars["bin_m2"] * sc.mass
    logging.getLogger("cmc.initial").warning(
        "%s is not in Hénon units (total mass %.6g, energy %.6g): rescaled to G = M = 1, "
        "E = -1/4 (lengths x %.6g, velocities x %.6g, masses x %.6g)", where, m_tot, k + w,
        sc.length, sc.velocity, sc.mass)


def ensure_binary_columns(stars: dict[str, np.ndarray], three_body: str,
                          stellar_evolution: bool = False, collisions: bool = False) -> None:
    """Give the table its binary columns (all singles) when binaries can form in the run:
    ``three_body = all``, or ``bh`` with black holes (startype 14) present or made by stellar
    evolution; and with single-single collisions or gravitational-wave captures of black
    holes (``collisions``: they are selected in the pairing of runs with binary columns).
    The columns are there exactly when a run has or can form binaries; it then runs on
    through core collapse by default (``run.n_core_stop = -1``)."""
    from cmc.fields import BINARY_FIELDS
    from physics.encounters import BLACK_HOLE

    if "bin_a" in stars:
        return
    n = stars["m"].size
    types = stars.get("startype")
    if collisions or three_body == "all" or (three_body == "bh" and (stellar_evolution or (
            types is not None and np.any(np.asarray(types) == BLACK_HOLE)))):
        for f in BINARY_FIELDS:
            stars[f.name] = np.full(n, f.default, dtype=f.dtype)


def add_primordial_binaries(stars: dict[str, np.ndarray], rng: np.random.Generator,
                            ini) -> int:
    """Make a fraction of the objects binaries (binary columns of :mod:`cmc.fields`).

    Draws from ``rng`` after everything else of the model, so a model without binaries is
    unchanged.  Members get new ids after the objects' ones; ``sigma^2`` is the model's
    one-dimensional velocity dispersion squared, ``2 K / (3 M)``.
    """
    from cmc.fields import BINARY_FIELDS
    from physics.binaries import primordial_binaries

    m = stars["m"]
    n = m.size
    ke = 0.5 * float(np.sum(m * (stars["vr"] ** 2 + stars["vt"] ** 2)))
    sigma2 = 2.0 * ke / (3.0 * float(np.sum(m)))
    b = primordial_binaries(m, rng, ini.binary_fraction, ini.binary_q_min, ini.binary_a_min,
                            ini.binary_a_max, sigma2)
    for f in BINARY_FIELDS:
        stars[f.name] = np.full(n, f.default, dtype=f.dtype)
    idx = b["index"]
    nb = idx.size
    binind = np.full(n, -1, dtype=np.int64)
    binind[idx] = np.arange(nb)
    stars["binind"] = binind
    first = int(stars["id"].max()) + 1 if n else 0
    stars["bin_id1"][idx] = first + 2 * np.arange(nb)
    stars["bin_id2"][idx] = first + 2 * np.arange(nb) + 1
    stars["bin_m1"][idx] = b["m1"]
    stars["bin_m2"][idx] = b["m2"]
    stars["bin_a"][idx] = b["a"]
    stars["bin_e"][idx] = b["e"]
    scale = stars["m_msun"][idx] / m[idx]
    stars["bin_m1_msun"][idx] = b["m1"] * scale
    stars["bin_m2_msun"][idx] = b["m2"] * scale
    return nb
