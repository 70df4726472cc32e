"""What a restart may change: the parameters that define a run are fixed
(:data:`FIXED_ON_RESTART`), and checkpoints of older versions get the scale they imply."""

from __future__ import annotations

from dataclasses import fields

from cmc.bse_config import CHANGEABLE_ON_RESTART, BseConfig
from cmc.config import Config
from cmc.errors import InputError
from cmc.state import RunState

#: Parameters that define what a run is; a restart cannot change them (``run.zones``: the
#: stars' clocks and the diagnostics' zone columns exist from the start).  Of [bse], all but the
#: accuracy controls of the time steps (:data:`cmc.bse_config.CHANGEABLE_ON_RESTART`): the
#: switch ``bse.stellar_evolution`` (the star table's fields depend on it) and every BSE flag
#: (the stellar physics of the model).
FIXED_ON_RESTART = ("initial.*", "run.gamma", "run.coulomb_n", "run.emulate_ranks", "run.zones",
                    "tidal.*",
                    "output.lagrange_fractions",
                    *(f"bse.{f.name}" for f in fields(BseConfig)
                      if f.name not in CHANGEABLE_ON_RESTART))


def check_restart_overrides(old: Config, new: Config, overrides: list[str]) -> None:
    """Raise :class:`InputError` naming the first override of a parameter that a restart
    cannot change (:data:`FIXED_ON_RESTART`) to a different value."""
    for ov in overrides:
        key = ov.split("=", 1)[0].strip()
        sec, _, name = key.partition(".")
        if sec == "bse":  # case-insensitive there, as Config.set reads it
            name = name.lower()
            key = f"{sec}.{name}"
        if f"{sec}.*" in FIXED_ON_RESTART or key in FIXED_ON_RESTART:
            if getattr(getattr(old, sec), name) != getattr(getattr(new, sec), name):
                raise InputError(f"{key}: cannot change on restart (it defines the run); "
                                 "start a new run instead")


def legacy_zones(cfg_text: str, old: Config, new: Config, overrides: list[str]) -> None:
    """A checkpoint whose configuration has no ``run.zones`` (written before the zones existed,
    when every run had one shared step) is a run with ``run.zones = 1``: its star table has no
    clocks (the default is now 8).  ``old``, and ``new`` unless ``overrides`` set the key (which
    :func:`check_restart_overrides` then refuses), get it."""
    import configparser

    parser = configparser.ConfigParser()
    parser.read_string(cfg_text)
    if parser.has_option("run", "zones"):
        return
    old.run.zones = 1
    if not any(ov.split("=", 1)[0].strip() == "run.zones" for ov in overrides):
        new.run.zones = 1


def legacy_scale(state: RunState, cfg: Config, unit_mass_msun: float) -> None:
    """Scale and tidal radius for a checkpoint written before physical units and [tidal]:
    the mass unit from the stars' masses, lengths in pc as the default (1 pc per r_vir), and
    the fixed tidal radius its parameters gave (``run.r_tidal`` there, now ``tidal.r_t0``)."""
    state.unit_mass_msun = unit_mass_msun
    state.m0 = 1.0
    if cfg.tidal.mode == "fixed" and cfg.tidal.r_t0_from == "value":
        state.r_t0 = state.r_tidal = cfg.tidal.r_t0
