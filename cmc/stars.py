"""Structure-of-arrays star container driven by :mod:`cmc.fields`."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from cmc.fields import (
    BINARY_NAMES,
    FIELD_BY_NAME,
    ZONE_FIELDS,
    ZONE_NAMES,
    saved_names,
    table_fields,
)
from parallel.sort_records import uniform_value


class StarTable:
    """Local stars as one contiguous numpy array per field.

    Attributes are the field names of :data:`cmc.fields.STAR_FIELDS` (``stars.r`` etc.) and,
    in runs with binaries, of :data:`cmc.fields.BINARY_FIELDS` (present when any of them is
    given; then all are), and with stellar evolution of :data:`cmc.fields.SE_FIELDS` (present
    when ``se_tphys`` is given; with binaries also :data:`cmc.fields.SE_BINARY_FIELDS`), and
    with time-step zones of :data:`cmc.fields.ZONE_FIELDS` (present when ``t_last`` is given).
    """

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, np.ndarray]):
        n = None
        clean: dict[str, np.ndarray] = {}
        with_binaries = any(name in data for name in BINARY_NAMES)
        for f in table_fields(with_binaries, "se_tphys" in data, ZONE_NAMES[0] in data):
            if f.name in data:
                arr = np.ascontiguousarray(data[f.name], dtype=f.dtype)
            else:
                if n is None:
                    n = len(next(iter(data.values()))) if data else 0
                arr = np.full(n, f.default, dtype=f.dtype)
            if arr.ndim != 1:
                raise ValueError(f"star field {f.name!r} must be one-dimensional")
            clean[f.name] = arr
        lengths = {len(a) for a in clean.values()}
        if len(lengths) > 1:
            raise ValueError(f"star fields have different lengths: {sorted(lengths)}")
        unknown = set(data) - set(FIELD_BY_NAME)
        if unknown:
            raise ValueError(f"unknown star fields: {sorted(unknown)}")
        object.__setattr__(self, "_data", clean)

    @classmethod
    def empty(cls, n: int, binaries: bool = False, stellar_evolution: bool = False,
              zones: bool = False) -> StarTable:
        """Table of ``n`` stars with every field at its default."""
        return cls({f.name: np.full(n, f.default, dtype=f.dtype)
                    for f in table_fields(binaries, stellar_evolution, zones)})

    @property
    def has_binary_fields(self) -> bool:
        """Whether the table carries the binary columns (a run with binaries)."""
        return "bin_a" in self._data

    @property
    def has_se_fields(self) -> bool:
        """Whether the table carries the stellar-evolution columns (stellar evolution on)."""
        return "se_tphys" in self._data

    @property
    def has_zone_fields(self) -> bool:
        """Whether the table carries the time-step zones' clock (``run.zones`` > 1)."""
        return ZONE_NAMES[0] in self._data

    def with_zone_fields(self, on: bool) -> StarTable:
        """This table with the zones' fields at their defaults (every star in zone 0, its
        clock NaN: started by the next step's plan at that step's start) when ``on``,
        without them otherwise (the same table when nothing changes)."""
        if on == self.has_zone_fields:
            return self
        data = dict(self._data)
        if on:
            data.update({f.name: np.full(len(self), f.default, dtype=f.dtype)
                         for f in ZONE_FIELDS})
        else:
            for name in ZONE_NAMES:
                del data[name]
        return StarTable(data)

    def __len__(self) -> int:
        return len(self._data["id"])

    @property
    def n(self) -> int:
        """Number of stars."""
        return len(self)

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value) -> None:
        if name not in self._data:
            raise AttributeError(f"no star field {name!r}")
        arr = np.ascontiguousarray(value, dtype=FIELD_BY_NAME[name].dtype)
        if arr.shape != (len(self),):
            raise ValueError(f"field {name!r} needs shape ({len(self)},), got {arr.shape}")
        self._data[name] = arr

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def as_dict(self) -> dict[str, np.ndarray]:
        """The field arrays (not copies)."""
        return self._data

    def saved_dict(self) -> dict[str, np.ndarray]:
        """The fields written to snapshots and checkpoints (with the binary columns if any)."""
        names = saved_names(self.has_binary_fields, self.has_se_fields, self.has_zone_fields)
        return {k: self._data[k] for k in names}

    def idle_binary_columns(self) -> dict[str, bytes] | None:
        """With no binary among these rows: every binary column (``bin_*``, the members'
        BSE state included) with the bytes of its default, which every such column then
        holds (the sort takes them so without scanning them: 40 columns in a run with
        stellar evolution: 4.6 -> 0.4 ms per sort at N = 1e5); else None.

        It holds because a single star's row carries the binary columns at their defaults
        wherever one is made: the initial models and COSMIC files, and every product of a
        binary (:func:`physics.encounter_events._single_record`,
        :func:`cmc.processes.stellar_evolution._as_single`); tests/test_binary_table.py
        checks it through runs with encounters, disruptions and mergers.
        """
        if not self.has_binary_fields or len(self) == 0:
            return None
        binind = self._data["binind"]
        if binind[0] != -1 or uniform_value(binind) is None:
            return None
        return {name: np.array([FIELD_BY_NAME[name].default], dtype=FIELD_BY_NAME[name].dtype)
                .tobytes() for name in self._data if name.startswith("bin_")}

    def take(self, index: np.ndarray) -> StarTable:
        """New table with the selected stars (boolean mask or integer index)."""
        return StarTable({k: v[index] for k, v in self._data.items()})
