"""HDF5 input and output: snapshots, diagnostics, checkpoints.

Every file is written to ``NAME.tmp`` and renamed over ``NAME`` only when complete, so a run
killed at any moment leaves either the previous file or the new one, never a torn file.
Star columns come from :data:`cmc.fields.STAR_FIELDS` and carry their unit and meaning as
attributes; binary columns (:data:`cmc.fields.BINARY_FIELDS`) go to a ``binaries`` group.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np

from cmc.fields import BINARY_FIELDS, FIELD_BY_NAME, SAVED_FIELDS

FORMAT_VERSION = 1


@contextmanager
def atomic_h5(path: str | os.PathLike):
    """Open ``path + '.tmp'`` for writing; on success fsync and rename over ``path``."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with h5py.File(tmp, "w") as fh:
            fh.attrs["format_version"] = FORMAT_VERSION
            yield fh
            fh.flush()
        with open(tmp, "rb") as raw:
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise


def write_star_group(group: h5py.Group, stars: dict[str, np.ndarray]) -> None:
    """Write the saved star fields as columns with unit and meaning attributes.

    With binary columns present, the binaries go to a sibling group ``binaries``: one row per
    star with ``binind >= 0``, in star order, with ``star_row`` (row of the star group) and
    ``binind``.
    """
    n = len(stars["r"])
    for name in SAVED_FIELDS:
        f = FIELD_BY_NAME[name]
        data = stars[name] if name in stars else np.full(n, f.default)
        ds = group.create_dataset(name, data=np.asarray(data, dtype=f.dtype))
        ds.attrs["unit"] = f.unit
        ds.attrs["meaning"] = f.meaning
    if "bin_a" not in stars:
        return
    rows = np.flatnonzero(np.asarray(stars["binind"]) >= 0)
    bg = group.parent.create_group("binaries")
    ds = bg.create_dataset("star_row", data=rows.astype(np.int64))
    ds.attrs["meaning"] = "row of this binary's centre of mass in the star group"
    bg.create_dataset("binind", data=np.asarray(stars["binind"])[rows])
    for f in BINARY_FIELDS:
        ds = bg.create_dataset(f.name, data=np.asarray(stars[f.name], dtype=f.dtype)[rows])
        ds.attrs["unit"] = f.unit
        ds.attrs["meaning"] = f.meaning


def read_star_group(group: h5py.Group) -> dict[str, np.ndarray]:
    """Read star columns; fields missing from the file take their defaults."""
    out: dict[str, np.ndarray] = {}
    if "r" not in group:
        raise ValueError(f"{group.file.filename}: no star column 'r' in group {group.name}")
    n = group["r"].shape[0]
    for name in SAVED_FIELDS:
        f = FIELD_BY_NAME[name]
        if name in group:
            arr = group[name][...].astype(f.dtype)
            if arr.shape != (n,):
                raise ValueError(f"{group.file.filename}: column {name!r} has shape "
                                 f"{arr.shape}, expected ({n},)")
            out[name] = arr
        elif name == "id":
            out[name] = np.arange(n, dtype=np.int64)
        else:
            out[name] = np.full(n, f.default, dtype=f.dtype)
    if "binaries" in group.parent:
        bg = group.parent["binaries"]
        rows = bg["star_row"][...].astype(np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= n or np.unique(rows).size != rows.size
                          or np.any(out["binind"][rows] < 0)):
            raise ValueError(f"{group.file.filename}: {bg.name}/star_row does not match the "
                             "stars with binind >= 0")
        if np.count_nonzero(out["binind"] >= 0) != rows.size:
            raise ValueError(f"{group.file.filename}: {np.count_nonzero(out['binind'] >= 0)} "
                             f"stars have binind >= 0 but {bg.name} has {rows.size} rows")
        for f in BINARY_FIELDS:
            col = np.full(n, f.default, dtype=f.dtype)
            if f.name in bg:
                col[rows] = bg[f.name][...].astype(f.dtype)
            out[f.name] = col
    return out


def write_snapshot(path: str | os.PathLike, stars: dict[str, np.ndarray],
                   attrs: dict | None = None) -> None:
    """Snapshot of all stars (global radial order) plus run attributes."""
    with atomic_h5(path) as fh:
        g = fh.create_group("stars")
        write_star_group(g, stars)
        for k, v in (attrs or {}).items():
            fh.attrs[k] = v


def read_snapshot(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict]:
    """Stars and attributes of a snapshot or initial-conditions file.

    Radii are validated (finite, positive), velocities and masses finite, masses positive;
    the stars are returned sorted by radius.
    """
    try:
        fh = h5py.File(path, "r")
    except OSError as exc:
        raise ValueError(f"cannot open {path}: {exc}") from None
    with fh:
        if "stars" not in fh:
            raise ValueError(f"{path}: no 'stars' group (not a cmc snapshot)")
        stars = read_star_group(fh["stars"])
        attrs = dict(fh.attrs)
    validate_stars(stars, str(path))
    order = np.lexsort((stars["id"], stars["r"]))
    if np.any(order != np.arange(order.size)):
        stars = {k: v[order] for k, v in stars.items()}
    return stars, attrs


def validate_stars(stars: dict[str, np.ndarray], where: str) -> None:
    """Raise ValueError for non-finite or non-positive radii or masses, bad velocities."""
    r, m = stars["r"], stars["m"]
    if r.size < 2:
        raise ValueError(f"{where}: needs at least 2 stars, found {r.size}")
    for name, arr in (("r", r), ("m", m)):
        bad = ~np.isfinite(arr) | (arr <= 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{where}: star {i} has invalid {name} = {arr[i]!r} "
                             f"({int(bad.sum())} bad values; must be finite and > 0)")
    for name in ("vr", "vt"):
        bad = ~np.isfinite(stars[name])
        if bad.any():
            raise ValueError(f"{where}: {int(bad.sum())} non-finite values of {name}")
    if np.any(stars["vt"] < 0):
        raise ValueError(f"{where}: vt must be >= 0")
    if np.unique(stars["id"]).size != stars["id"].size:
        raise ValueError(f"{where}: star ids are not unique")
    if "bin_a" in stars:
        b = stars["binind"] >= 0
        m1, m2, a, e = (stars[k][b] for k in ("bin_m1", "bin_m2", "bin_a", "bin_e"))
        bad = ~(np.isfinite(a) & (a > 0) & (m1 > 0) & (m2 > 0) & (e >= 0) & (e < 1)
                & (np.abs(m1 + m2 - m[b]) <= 1e-12 * m[b]))
        if bad.any():
            i = int(np.flatnonzero(b)[np.argmax(bad)])
            raise ValueError(f"{where}: binary of star {i} (id {stars['id'][i]}) is invalid: "
                             "needs a > 0, 0 <= e < 1, member masses > 0 summing to m")
        ids = np.concatenate([stars["id"], stars["bin_id1"][b], stars["bin_id2"][b]])
        if np.unique(ids).size != ids.size:
            raise ValueError(f"{where}: star and binary member ids are not unique")


def write_diagnostics(path: str | os.PathLike, history: dict[str, list],
                      attrs: dict, units: dict[str, str]) -> None:
    """Write one dataset per diagnostic quantity over steps (atomic)."""
    with atomic_h5(path) as fh:
        for k, v in attrs.items():
            fh.attrs[k] = v
        for name, values in history.items():
            ds = fh.create_dataset(name, data=np.asarray(values))
            if name in units:
                ds.attrs["unit"] = units[name]


def read_diagnostics(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict]:
    """Datasets and attributes of diagnostics.h5."""
    with h5py.File(path, "r") as fh:
        data = {k: fh[k][...] for k in fh.keys()}
        attrs = dict(fh.attrs)
    return data, attrs


def write_checkpoint(path: str | os.PathLike, stars: dict[str, np.ndarray], state: dict,
                     history: dict[str, list], write_streams: Callable[[h5py.Group], None],
                     config_text: str) -> None:
    """Everything needed to continue the run bit for bit (atomic)."""
    with atomic_h5(path) as fh:
        fh.attrs["config"] = config_text
        write_star_group(fh.create_group("stars"), stars)
        sg = fh.create_group("state")
        for k, v in state.items():
            sg.attrs[k] = v
        hg = fh.create_group("history")
        for k, v in history.items():
            hg.create_dataset(k, data=np.asarray(v))
        write_streams(fh.create_group("streams"))


def read_checkpoint(path: str | os.PathLike):
    """Return (stars, state, history, streams_group_reader, config_text)."""
    try:
        fh = h5py.File(path, "r")
    except OSError as exc:
        raise ValueError(f"cannot open checkpoint {path}: {exc}") from None
    with fh:
        stars = read_star_group(fh["stars"])
        state = {k: (v.item() if hasattr(v, "item") else v)
                 for k, v in fh["state"].attrs.items()}
        history = {k: list(fh["history"][k][...]) for k in fh["history"].keys()}
        config_text = str(fh.attrs["config"])
    return stars, state, history, config_text
