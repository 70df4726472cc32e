"""[bse] (cmc/bse_config.py): COSMIC's BSE flags and our stellar-evolution keys in the config.

The declarations are checked against COSMIC 4.3.3 itself where it is installed: the key set
against ``cosmic-settings.json`` and ``cosmic.consts.GROUPED_SETTINGS``, the defaults and the
allowed values against ``cosmic.utils.error_check``.
"""

from __future__ import annotations

import copy
import json
import warnings
from dataclasses import fields
from importlib.resources import files

import pytest

from cmc.bse_config import (
    CHANGEABLE_ON_RESTART,
    COSMIC_SPELLING,
    KICKFLAG_FROM_CMC,
    OWN_KEYS,
    BseConfig,
    bse_flags,
)
from cmc.config import ConfigError, load_config
from cmc.errors import InputError
from cmc.restart import FIXED_ON_RESTART, check_restart_overrides


def _cosmic_settings() -> list[dict]:
    pytest.importorskip("cosmic")
    text = files("cosmic.data").joinpath("cosmic-settings.json").read_text(encoding="utf-8")
    cat = next(c for c in json.loads(text) if c["category"] == "bse")
    return cat["settings"]


def _error_check(flags: dict) -> list[str]:
    """Run COSMIC's error_check on a copy; the warnings it gave (it raises ValueError)."""
    from cosmic.utils import error_check

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        error_check(copy.deepcopy(flags), {"stellar_engine": "sse"})
    return [str(w.message) for w in caught]


def test_defaults_are_cmc_cosmic_production():
    """CMC-COSMIC's examples/KingProfile.ini [bse] where it differs from COSMIC; kickflag 0
    there is -1 here (COSMIC >= 3.5 numbering)."""
    b = load_config().bse
    assert b.stellar_evolution is False
    assert (b.pts1_highmass_cutoff, b.tolerance, b.dt_mass_fraction) == (5.0, 0.01, 1e-3)
    assert (b.pts1, b.hewind, b.beta, b.alpha1, b.ceflag, b.cemergeflag, b.qcflag) == \
        (0.05, 0.5, -1.0, [1.0, 1.0], 1, 0, 1)
    assert (b.kickflag, b.ecsn, b.ecsn_mlow, b.ussn, b.eddfac, b.acc_lim) == \
        (KICKFLAG_FROM_CMC[0], 2.5, 1.4, 1, 1.0, [-1.0, -1.0])
    assert (b.st_tide, b.ifflag, b.rejuv_fac, b.rejuvflag) == (1, 0, 1.0, 0)
    assert b.natal_kick_array == [-100.0, -100.0, -100.0, -100.0, 0.0] * 2
    assert b.fprimc_array == [2.0 / 21.0] * 16 and b.qcrit_array == [0.0] * 16


def test_cosmic_only_keys_take_cosmics_defaults():
    settings = _cosmic_settings()
    cmc_differs = {"pts1", "hewind", "beta", "ceflag", "cemergeflag", "qcflag", "kickflag",
                   "ecsn", "ecsn_mlow", "eddfac", "ifflag"}
    flags = bse_flags(BseConfig())
    for s in settings:
        default = next(o["name"] for o in s["options"] if o.get("default"))
        if s["name"] in cmc_differs or isinstance(default, str):
            continue  # CMC's value, or a list written as text (checked elsewhere)
        assert flags[s["name"]] == default, s["name"]


def test_bse_flags_is_cosmics_bsedict():
    """Exactly COSMIC's BSEDict names (its spelling: LBV_flag, ST_tide, ST_cr), ours left
    out, lists as COSMIC takes them, fresh on each call."""
    settings = _cosmic_settings()
    from cosmic.consts import GROUPED_SETTINGS

    flags = bse_flags(BseConfig())
    names = {s["name"] for s in settings}
    assert len(names) == 71 and set(flags) == names
    grouped = {n for group in GROUPED_SETTINGS.values() for n in group} - {"randomseed"}
    assert set(flags) == grouped
    assert not set(flags) & set(OWN_KEYS)
    assert {f.name for f in fields(BseConfig)} == {n.lower() for n in names} | set(OWN_KEYS)
    assert set(COSMIC_SPELLING.values()) <= names
    nk = flags["natal_kick_array"]
    assert [len(row) for row in nk] == [5, 5] and nk[0] == [-100.0] * 4 + [0.0]
    assert len(flags["alpha1"]) == 2 and len(flags["acc_lim"]) == 2
    assert len(flags["qcrit_array"]) == 16 and len(flags["fprimc_array"]) == 16
    assert isinstance(flags["kickflag"], int) and isinstance(flags["pisn"], float)
    flags["alpha1"][0] = 9.0
    assert bse_flags(BseConfig())["alpha1"] == [1.0, 1.0]


def test_defaults_pass_cosmics_error_check():
    """Every default passes COSMIC's own check.  Its one warning is the stale kickflag check
    (-1 and -2 were Giacobbo & Mapelli's before 3.5.0), which moves ecsn/ecsn_mlow: on a copy
    here, so the flags are untouched."""
    pytest.importorskip("cosmic.utils")
    flags = bse_flags(BseConfig())
    msgs = _error_check(flags)
    assert all("ECSN" in m for m in msgs), msgs
    assert flags["ecsn"] == 2.5
    # with kickflag 1 (the same kicks with the new orbit update) COSMIC has nothing to say
    assert _error_check({**flags, "kickflag": 1}) == []


def test_choices_are_cosmics():
    """A dropdown's choices are COSMIC's options; kickflag's the numbers it lists."""
    settings = _cosmic_settings()
    meta = {f.name: f.metadata for f in fields(BseConfig)}
    for s in settings:
        choices = meta[s["name"].lower()]["choices"]
        numeric = {o["name"] for o in s["options"] if not isinstance(o["name"], str)}
        if s["type"] == "dropdown" or s["name"] == "kickflag":
            assert choices is not None and set(choices) == numeric, s["name"]


#: Values tried on every scalar flag (ints only on int flags).
PROBES = (-200.0, -100.0, -5.0, -4.0, -3.5, -3.0, -2.0, -1.0, -0.5, 0.0, 1e-3, 0.5, 1.0,
          1.5, 2.0, 2.25, 3.0, 5.0, 10.0, 90.0, 91.0, 265.0, 400.0)


def _ours_accepts(key: str, text: str, base: list[str]) -> bool:
    try:
        load_config(None, [*base, f"bse.{key}={text}"])
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(f"bse.{key}"), exc
        return False
    return True


def _cosmic_accepts(flags: dict) -> bool:
    try:
        _error_check(flags)
    except ValueError:
        return False
    return True


def test_scalar_ranges_agree_with_error_check():
    """On every scalar flag but kickflag (COSMIC takes any negative one; the listed -1..-6
    here), our validation and COSMIC's error_check accept the same probe values; kickflag
    1 in both, since COSMIC's check moves ecsn for -1."""
    pytest.importorskip("cosmic.utils")
    base = bse_flags(BseConfig())
    base["kickflag"] = 1
    for f in fields(BseConfig):
        if f.name in OWN_KEYS or f.type == "list" or f.name == "kickflag":
            continue
        for x in PROBES:
            if f.type == "int" and not x.is_integer():
                continue
            val = int(x) if f.type == "int" else x
            ours = _ours_accepts(f.name, repr(val), ["bse.kickflag=1"])
            cosmic = _cosmic_accepts({**base, COSMIC_SPELLING.get(f.name, f.name): val})
            assert ours == cosmic, (f.name, val, ours, cosmic)


@pytest.mark.parametrize("key, text", [
    ("alpha1", "0.5, 2"), ("alpha1", "-1, 1"), ("alpha1", "1"), ("acc_lim", "0.5, -3"),
    ("acc_lim", "1.5, -1"), ("acc_lim", "-5, -1"), ("acc_lim", "-1"),
    ("qcrit_array", ", ".join(["1.0"] * 16)), ("qcrit_array", ", ".join(["-1.0"] * 16)),
    ("qcrit_array", "1, 2"), ("fprimc_array", ", ".join(["0.5"] * 16)),
    ("fprimc_array", ", ".join(["-0.5"] * 16)),
    ("natal_kick_array", "300, 45, 100, 200, 5, -100, -100, -100, -100, 0"),
    ("natal_kick_array", "300, 95, 100, 200, 5, -100, -100, -100, -100, 0"),
    ("natal_kick_array", "-100, -100, -100, -100, 0, -5, -100, -100, -100, 0"),
    ("natal_kick_array", "-100, -100, -100, 400, 0, -100, -100, -100, -100, 0"),
    ("natal_kick_array", "1, 2, 3, 4, 5"),
])
def test_list_values_agree_with_error_check(key, text):
    pytest.importorskip("cosmic.utils")
    nums = [float(x) for x in text.split(",")]
    value = [nums[:5], nums[5:]] if key == "natal_kick_array" and len(nums) == 10 else nums
    if key == "natal_kick_array" and len(nums) != 10:
        value = [nums]  # shape (1, 5): COSMIC refuses it, we want 10 numbers
    cosmic = _cosmic_accepts({**bse_flags(BseConfig()), key: value})
    assert _ours_accepts(key, text, []) == cosmic


@pytest.mark.parametrize("override, key", [
    ("bse.windflagg=3", "bse.windflagg"), ("bse.kickflag=0", "bse.kickflag"),
    ("bse.kickflag=1.5", "bse.kickflag"), ("bse.hewind=2", "bse.hewind"),
    ("bse.alpha1=1,1,1", "bse.alpha1"), ("bse.natal_kick_array=1,2,3", "bse.natal_kick_array"),
    ("bse.acc_lim=2,2", "bse.acc_lim"), ("bse.beta=0", "bse.beta"), ("bse.pisn=-7", "bse.pisn"),
    ("bse.sigma=nan", "bse.sigma"), ("bse.qcrit_array=a,b", "bse.qcrit_array"),
    ("bse.ecsn=1.0", "bse.ecsn_mlow"), ("bse.tolerance=0", "bse.tolerance"),
    ("bse.stellar_evolution=maybe", "bse.stellar_evolution"), ("bse.metallicity=0.5",
                                                               "bse.metallicity"),
])
def test_bad_key_or_value_is_one_line_naming_it(override, key):
    with pytest.raises(ConfigError) as exc:
        load_config(None, [override])
    msg = str(exc.value)
    assert msg.startswith(f"{key}:") and "\n" not in msg, msg


def test_ini_file_errors_and_case(tmp_path):
    """In a file: COSMIC's spelling (ST_tide) and brackets read; an unknown key is named."""
    p = tmp_path / "p.ini"
    p.write_text("[bse]\nST_tide = 0\nLBV_flag = 2\nalpha1 = [0.5, 0.25]\n"
                 "natal_kick_array = [[-100.0,-100.0,-100.0,-100.0,0],[10,0,0,0,0]]\n")
    cfg = load_config(str(p))
    assert cfg.bse.st_tide == 0 and cfg.bse.lbv_flag == 2 and cfg.bse.alpha1 == [0.5, 0.25]
    assert bse_flags(cfg.bse)["natal_kick_array"][1] == [10.0, 0.0, 0.0, 0.0, 0.0]
    assert bse_flags(cfg.bse)["ST_tide"] == 0
    p.write_text("[bse]\nnsflag = 3\n")
    with pytest.raises(ConfigError, match=r"^bse\.nsflag: unknown parameter"):
        load_config(str(p))


def test_lists_round_trip():
    cfg = load_config(None, [
        "bse.alpha1=0.5, 2.0", "bse.acc_lim=0.3, -2", "bse.qcrit_array=" + ", ".join(
            str(i / 7) for i in range(16)), "bse.fprimc_array=" + ", ".join(["0.1"] * 16),
        "bse.natal_kick_array=100, 10, 20, 30, 7, -100, -100, -100, -100, 0",
        "bse.stellar_evolution=true", "bse.kickflag=5", "bse.ST_cr=0"])
    again = load_config(text=cfg.to_ini())
    assert again == cfg and again.bse.qcrit_array[1] == 1 / 7
    assert again.bse.natal_kick_array[:5] == [100.0, 10.0, 20.0, 30.0, 7.0]
    assert load_config(text=load_config().to_ini()) == load_config()
    assert "[bse]" in cfg.to_ini() and "natal_kick_array = 100.0, 10.0" in cfg.to_ini()


def test_restart_fixes_the_switch_and_the_physics():
    """bse.stellar_evolution (the star table's fields) and every BSE flag define the run; the
    accuracy controls of the steps may change on a restart."""
    assert "bse.stellar_evolution" in FIXED_ON_RESTART and "bse.windflag" in FIXED_ON_RESTART
    assert "bse.metallicity" in FIXED_ON_RESTART
    for key in CHANGEABLE_ON_RESTART:
        assert f"bse.{key}" not in FIXED_ON_RESTART
    old = load_config()
    for ov in ("bse.stellar_evolution=true", "bse.windflag=0", "bse.ST_tide=0"):
        with pytest.raises(InputError, match=r"^bse\.[a-z_]+: cannot change on restart"):
            check_restart_overrides(old, load_config(None, [ov]), [ov])
    ovs = ["bse.pts1=0.01", "bse.tolerance=0.05", "bse.dt_mass_fraction=0",
           "bse.windflag=3"]  # windflag at its value: fine
    check_restart_overrides(old, load_config(None, ovs), ovs)
