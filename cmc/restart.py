"""What a restart may change: the parameters that define a run are fixed
(:data:`FIXED_ON_RESTART`), and checkpoints of older versions get the scale they imply."""

from __future__ import annotations

from cmc.config import Config
from cmc.errors import InputError
from cmc.state import RunState

#: Parameters that define what a run is; a restart cannot change them.
FIXED_ON_RESTART = ("initial.*", "run.gamma", "run.coulomb_n", "run.emulate_ranks", "tidal.*",
                    "output.lagrange_fractions")


def check_restart_overrides(old: Config, new: Config, overrides: list[str]) -> None:
    """Raise :class:`InputError` naming the first override of a parameter that a restart
    cannot change (:data:`FIXED_ON_RESTART`) to a different value."""
    for ov in overrides:
        key = ov.split("=", 1)[0].strip()
        sec, _, name = key.partition(".")
        if f"{sec}.*" in FIXED_ON_RESTART or key in FIXED_ON_RESTART:
            if getattr(getattr(old, sec), name) != getattr(getattr(new, sec), name):
                raise InputError(f"{key}: cannot change on restart (it defines the run); "
                                 "start a new run instead")


def legacy_scale(state: RunState, cfg: Config, unit_mass_msun: float) -> None:
    """Scale and tidal radius for a checkpoint written before physical units and [tidal]:
    the mass unit from the stars' masses, lengths in pc as the default (1 pc per r_vir), and
    the fixed tidal radius its parameters gave (``run.r_tidal`` there, now ``tidal.r_t0``)."""
    state.unit_mass_msun = unit_mass_msun
    state.m0 = 1.0
    if cfg.tidal.mode == "fixed" and cfg.tidal.r_t0_from == "value":
        state.r_t0 = state.r_tidal = cfg.tidal.r_t0
