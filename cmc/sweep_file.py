"""The sweep file of ``cmc sweep``: its models and their folders' names.

A sweep file (format in :mod:`cmc.sweep`) names a base parameter file, the ranks that run one
model together and the values to vary, as a grid of every combination or a list.
:func:`read_sweep` turns it into one dict of overrides per model, :func:`check_models`
validates every model's parameters before any model runs, and :func:`_model_name` names each
model's folder (``model<iii>_<values>``).
"""

from __future__ import annotations

import configparser
import itertools
from pathlib import Path

from cmc.config import ConfigError, load_config


def read_sweep(path: str | Path) -> tuple[Path, int, list[dict[str, str]]]:
    """Read a sweep file.

    Parameters
    ----------
    path : str or Path
        The sweep INI file.

    Returns
    -------
    base : Path
        The base parameter file (relative paths are relative to the sweep file).
    ranks_per_model : int
        Ranks that run one model together.
    models : list of dict
        One dict ``{"section.key": value}`` of overrides per model, in model order.

    Raises
    ------
    ConfigError
        Unreadable file, unknown section or parameter, bad value.
    """
    path = Path(path)
    cp = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
    cp.optionxform = str
    try:
        with open(path) as fh:
            cp.read_file(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read sweep file {path}: {exc.strerror}") from None
    except configparser.Error as exc:
        raise ConfigError(f"{path}: not a valid INI file ({exc.message.splitlines()[0]})"
                          ) from None
    if "sweep" not in cp or "values" not in cp:
        raise ConfigError(f"{path}: needs [sweep] and [values] sections")
    unknown = set(cp.sections()) - {"sweep", "values"}
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {sorted(unknown)}")
    sw = cp["sweep"]
    for k in sw:
        if k not in ("base", "ranks_per_model", "mode"):
            raise ConfigError(f"sweep.{k}: unknown parameter (known: base, ranks_per_model, mode)")
    base = path.parent / sw.get("base", "")
    try:
        rpm = int(sw.get("ranks_per_model", "1"))
    except ValueError:
        raise ConfigError("sweep.ranks_per_model: not an integer") from None
    if rpm < 1:
        raise ConfigError("sweep.ranks_per_model: must be >= 1")
    mode = sw.get("mode", "grid")
    if mode not in ("grid", "list"):
        raise ConfigError("sweep.mode: must be grid or list")
    keys = list(cp["values"])
    vals = [[v.strip() for v in cp["values"][k].split(",")] for k in keys]
    if mode == "grid":
        combos = list(itertools.product(*vals))
    else:
        if len({len(v) for v in vals}) > 1:
            raise ConfigError("sweep.mode: list needs the same number of values for every key")
        combos = list(zip(*vals))
    return base, rpm, [dict(zip(keys, c)) for c in combos]


def check_models(path: str | Path, base: Path, models: list[dict[str, str]]) -> None:
    """Validate every model's parameters before any model runs.

    A value that :mod:`cmc.config` refuses (``initial.n = -5``) is a mistake in the sweep
    file: the whole grid is refused (exit 2) rather than run with that model recorded as a
    failure, which a batch script would read as a physics failure (exit 3) after the other
    models' hours.

    Raises
    ------
    ConfigError
        Naming the sweep file, the model and the key.
    """
    for i, model in enumerate(models):
        try:
            load_config(str(base), [f"{k}={v}" for k, v in model.items()])
        except ConfigError as exc:
            values = ", ".join(f"{k} = {v}" for k, v in model.items())
            raise ConfigError(f"{path}: model {i} ({values}): {exc}") from None


def _model_name(i: int, model: dict[str, str]) -> str:
    parts = [f"{k.split('.')[-1]}{v}" for k, v in model.items()]
    safe = "_".join(parts).replace("/", "-").replace(" ", "")
    return f"model{i:03d}_{safe}"[:120]
