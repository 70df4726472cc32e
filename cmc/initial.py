"""Initial star sets from the [initial] parameters (Plummer, King, or an HDF5 file)."""

from __future__ import annotations

import numpy as np

from cmc.config import Config
from cmc.io import read_snapshot
from parallel.streams import Streams
from physics.initial_conditions import king, plummer, sample_masses


def initial_generator(seed: int) -> np.random.Generator:
    """numpy Generator over the lfsr113 stream reserved for initial conditions."""
    from cmc.simulation import IC_STREAM

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
        stars, attrs = read_snapshot(ini.file)
        n = stars["r"].size
        return stars, {"n": n, "model": "file", "r_tidal": float(attrs.get("r_tidal", 0.0)),
                       "m_total_msun": float(np.sum(stars["m_msun"]))}
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
    return out, {"n": n, "model": ini.model, "r_tidal": r_tidal, "m_total_msun": total}
