"""HDF5 input and output: snapshots, diagnostics, checkpoints.

Every file is written to ``NAME.tmp`` and renamed over ``NAME`` only when complete, so a run
killed at any moment leaves either the previous file or the new one, never a torn file.
Star columns come from :data:`cmc.fields.STAR_FIELDS` and carry their unit and meaning as
attributes; binary columns (:data:`cmc.fields.BINARY_FIELDS`) go to a ``binaries`` group.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import re
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np

from cmc.errors import DamagedFileError, InputError, OutputError, is_disk_full
from cmc.fields import (
    BINARY_FIELDS,
    FIELD_BY_NAME,
    SAVED_FIELDS,
    SE_BINARY_FIELDS,
    SE_FIELDS,
    ZONE_FIELDS,
)

#: Layout version of every file this module writes.  2: checkpoints carry a checksum and no
#: diagnostics history (that lives in diagnostics.h5 alone).
FORMAT_VERSION = 2
#: Environment variable for fault-injection tests: ``enospc:N`` makes the N-th file write of
#: this process fail as if the disk were full (never set it in production).
FAULT_ENV = "CMC_INJECT_WRITE_ERROR"
_writes = [0]


def _injected_write_error(path: Path) -> None:
    spec = os.environ.get(FAULT_ENV, "")
    if not spec.startswith("enospc:"):
        return
    _writes[0] += 1
    if _writes[0] == int(spec.split(":", 1)[1]):
        raise OSError(errno.ENOSPC, "No space left on device (injected)", str(path))


#: Test hook: set to 1 to skip :func:`check_free_space`, so that a test on a tiny file system
#: reaches HDF5's own failure on a full disk.
SKIP_SPACE_CHECK_ENV = "CMC_SKIP_SPACE_CHECK"


def check_free_space(path: str | os.PathLike, nbytes: int) -> None:
    """Raise :class:`OutputError` when the file system of ``path`` has less room than a file
    of about ``nbytes`` needs (with a margin of half its size and 256 kB for HDF5's own
    overhead).  HDF5 does not always fail cleanly on a full disk, so the check comes before
    the write."""
    if os.environ.get(SKIP_SPACE_CHECK_ENV) == "1":
        return
    try:
        free = shutil.disk_usage(Path(path).parent).free
    except OSError:
        return
    need = int(1.5 * nbytes) + (256 << 10)
    if free < need:
        raise OutputError(errno.ENOSPC, f"disk full: {free / 1e6:.2f} MB free where {path} "
                          f"needs {need / 1e6:.2f} MB; the last good checkpoint is intact")


@contextmanager
def atomic_h5(path: str | os.PathLike, libver: str | None = None):
    """Open ``path + '.tmp'`` for writing; on success fsync and rename over ``path``.

    On a failure the temporary file is removed and ``path`` is left as it was; a full disk
    raises :class:`OutputError`.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        _injected_write_error(path)
        fh = h5py.File(tmp, "w", libver=libver)
        try:
            fh.attrs["format_version"] = FORMAT_VERSION
            yield fh
            fh.flush()
        finally:
            _quiet_close(fh)
        with open(tmp, "rb") as raw:
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        full = is_disk_full(exc) or _nearly_full(tmp)
        if tmp.exists():
            tmp.unlink()
        if full and not isinstance(exc, OutputError):
            raise OutputError(errno.ENOSPC, f"disk full while writing {path}; the previous "
                              "file is intact") from None
        raise


def _quiet_close(fh: h5py.File) -> None:
    """Close an HDF5 file; h5py prints tracebacks of its handles' failed releases (a full
    disk) to stderr itself: keep them off the terminal (the caller reports one line)."""
    import io

    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        try:
            fh.close()
        finally:
            import gc

            gc.collect()


def _nearly_full(path: Path) -> bool:
    """After a failed write: is the file system of ``path`` (nearly) full?  HDF5 does not
    always pass the errno on (a full disk can surface as "Can't destroy cache")."""
    try:
        free = shutil.disk_usage(path.parent).free
        size = path.stat().st_size if path.exists() else 0
    except OSError:
        return False
    return free < max(1 << 20, size)


def write_star_group(group: h5py.Group, stars: dict[str, np.ndarray]) -> None:
    """Write the saved star fields as columns with unit and meaning attributes.

    With binary columns present, the binaries go to a sibling group ``binaries``: one row per
    star with ``binind >= 0``, in star order, with ``star_row`` (row of the star group) and
    ``binind``.
    """
    n = len(stars["r"])
    se = "se_tphys" in stars
    for name in SAVED_FIELDS + (tuple(f.name for f in SE_FIELDS) if se else ()) \
            + tuple(f.name for f in ZONE_FIELDS if f.name in stars):
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
    for f in BINARY_FIELDS + (SE_BINARY_FIELDS if se else ()):
        ds = bg.create_dataset(f.name, data=np.asarray(stars[f.name], dtype=f.dtype)[rows])
        ds.attrs["unit"] = f.unit
        ds.attrs["meaning"] = f.meaning


def read_star_group(group: h5py.Group) -> dict[str, np.ndarray]:
    """Read star columns; fields missing from the file take their defaults."""
    out: dict[str, np.ndarray] = {}
    if "r" not in group:
        raise InputError(f"{group.file.filename}: no star column 'r' in group {group.name}")
    n = group["r"].shape[0]
    for name in SAVED_FIELDS:
        f = FIELD_BY_NAME[name]
        if name in group:
            arr = group[name][...].astype(f.dtype)
            if arr.shape != (n,):
                raise InputError(f"{group.file.filename}: column {name!r} has shape "
                                 f"{arr.shape}, expected ({n},)")
            out[name] = arr
        elif name == "id":
            out[name] = np.arange(n, dtype=np.int64)
        else:
            out[name] = np.full(n, f.default, dtype=f.dtype)
    se = "se_tphys" in group
    if se:  # a run with stellar evolution: all of its columns, or the file is damaged
        for f in SE_FIELDS:
            if f.name not in group or group[f.name].shape != (n,):
                raise InputError(f"{group.file.filename}: stellar-evolution column "
                                 f"{f.name!r} is missing or has the wrong shape")
            out[f.name] = group[f.name][...].astype(f.dtype)
    for f in ZONE_FIELDS:  # a run with time-step zones
        if f.name in group:
            if group[f.name].shape != (n,):
                raise InputError(f"{group.file.filename}: column {f.name!r} has shape "
                                 f"{group[f.name].shape}, expected ({n},)")
            out[f.name] = group[f.name][...].astype(f.dtype)
    if "binaries" in group.parent:
        bg = group.parent["binaries"]
        rows = bg["star_row"][...].astype(np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= n or np.unique(rows).size != rows.size
                          or np.any(out["binind"][rows] < 0)):
            raise InputError(f"{group.file.filename}: {bg.name}/star_row does not match the "
                             "stars with binind >= 0")
        if np.count_nonzero(out["binind"] >= 0) != rows.size:
            raise InputError(f"{group.file.filename}: {np.count_nonzero(out['binind'] >= 0)} "
                             f"stars have binind >= 0 but {bg.name} has {rows.size} rows")
        for f in BINARY_FIELDS + (SE_BINARY_FIELDS if se else ()):
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
        raise InputError(f"cannot open {path}: {exc}") from None
    with fh:
        if "stars" not in fh:
            raise InputError(f"{path}: no 'stars' group (not a cmc snapshot)")
        stars = read_star_group(fh["stars"])
        attrs = dict(fh.attrs)
    validate_stars(stars, str(path))
    order = np.lexsort((stars["id"], stars["r"]))
    if np.any(order != np.arange(order.size)):
        stars = {k: v[order] for k, v in stars.items()}
    return stars, attrs


def validate_stars(stars: dict[str, np.ndarray], where: str) -> None:
    """Raise :class:`InputError` (a ValueError) for non-finite or non-positive radii or
    masses, bad velocities, duplicate ids or invalid binaries, naming the star."""
    r, m = stars["r"], stars["m"]
    if r.size < 2:
        raise InputError(f"{where}: needs at least 2 stars, found {r.size}")
    for name, arr in (("r", r), ("m", m)):
        bad = ~np.isfinite(arr) | (arr <= 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise InputError(f"{where}: star {i} has invalid {name} = {float(arr[i])!r} "
                             f"({int(bad.sum())} bad values; must be finite and > 0)")
    for name in ("vr", "vt"):
        bad = ~np.isfinite(stars[name])
        if bad.any():
            raise InputError(f"{where}: {int(bad.sum())} non-finite values of {name}")
    if np.any(stars["vt"] < 0):
        raise InputError(f"{where}: vt must be >= 0")
    if np.unique(stars["id"]).size != stars["id"].size:
        raise InputError(f"{where}: star ids are not unique")
    if "bin_a" in stars:
        b = stars["binind"] >= 0
        m1, m2, a, e = (stars[k][b] for k in ("bin_m1", "bin_m2", "bin_a", "bin_e"))
        bad = ~(np.isfinite(a) & (a > 0) & (m1 > 0) & (m2 > 0) & (e >= 0) & (e < 1)
                & (np.abs(m1 + m2 - m[b]) <= 1e-12 * m[b]))
        if bad.any():
            i = int(np.flatnonzero(b)[np.argmax(bad)])
            raise InputError(f"{where}: binary of star {i} (id {stars['id'][i]}) is invalid: "
                             "needs a > 0, 0 <= e < 1, member masses > 0 summing to m")
        ids = np.concatenate([stars["id"], stars["bin_id1"][b], stars["bin_id2"][b]])
        if np.unique(ids).size != ids.size:
            raise InputError(f"{where}: star and binary member ids are not unique")


def _name_key(name: str | bytes) -> bytes:
    """Sort key of an HDF5 attribute or link name.  h5py returns a name that is not valid
    UTF-8 (a damaged file) as bytes, which cannot be compared with the others' str; as bytes
    all compare, and valid names keep their order (UTF-8 preserves code-point order)."""
    return name if isinstance(name, bytes) else name.encode("utf-8", "surrogateescape")


def content_digest(fh: h5py.File) -> str:
    """SHA-256 of every dataset (name, dtype, shape, bytes) and attribute of the file except
    the root attribute ``sha256`` itself, in a fixed (sorted) order."""
    h = hashlib.sha256()

    def attrs(obj) -> None:
        for k in sorted(obj.attrs, key=_name_key):
            if obj.name == "/" and k == "sha256":
                continue
            v = np.asarray(obj.attrs[k])
            h.update(f"@{obj.name}/{k}:{v.dtype.str}:{v.shape}".encode())
            h.update(v.tobytes() if v.dtype.kind not in "OUS" else repr(v.tolist()).encode())

    def visit(group) -> None:
        attrs(group)
        for name in sorted(group, key=_name_key):
            obj = group[name]
            if isinstance(obj, h5py.Group):
                visit(obj)
            else:
                data = np.ascontiguousarray(obj[...])
                h.update(f"{obj.name}:{data.dtype.str}:{data.shape}".encode())
                h.update(data.tobytes())
                attrs(obj)

    visit(fh)
    return h.hexdigest()


#: How long a reader waits while the run holds diagnostics.h5 open for writing without SWMR
#: (between opening it and switching SWMR on, and while it sets the final attributes) [s].
OPEN_FOR_WRITE_WAIT_S = 5.0


#: Attempts a SWMR reader makes at a piece of metadata whose checksum fails (it may have
#: caught the writer in the middle of writing it).  HDF5's default, 100, sleeps 2^k ns before
#: the k-th: a truncated or damaged file then holds the reader for ever (the 40th sleep alone
#: is 18 minutes), inside one HDF5 call that holds the GIL, so no Python signal handler runs
#: (SIGTERM to ``cmc restart``, Ctrl-C).  30 attempts give up after about 1 s in all; a
#: writer's metadata write takes microseconds.
SWMR_READ_ATTEMPTS = 30
#: A file shorter than the end of file its superblock records by more than this is truncated
#: [bytes].  HDF5 allocates metadata and small data in 2 kB blocks whose unused tail a writer
#: killed in the middle of a flush may not have written yet (SWMR readers skip HDF5's own
#: check for that reason); a cut file (a copy interrupted, a full disk) misses more.  While a
#: run appends, the file was never seen shorter than its superblock's end of file (4.6e5
#: samples of a run flushing every step).
TRUNCATED_SLACK = 16 << 10
_HDF5_LIB: list = []


def _hdf5_library() -> ctypes.CDLL | None:
    """The HDF5 library that h5py runs on (ctypes), for the calls h5py does not wrap; None
    where it cannot be found (not Linux or macOS, an unusual build)."""
    if _HDF5_LIB:
        return _HDF5_LIB[0]
    paths: list[str] = []
    try:  # Linux: the library as loaded, wherever it came from (wheel, conda, system)
        with open("/proc/self/maps") as fh:
            paths = [ln.split(None, 5)[5].strip() for ln in fh if len(ln.split(None, 5)) == 6]
    except OSError:
        pass
    # macOS wheels keep it next to h5py
    paths += [str(p) for p in Path(h5py.__file__).parent.glob(".dylibs/libhdf5*.dylib")]
    lib = None
    for path in dict.fromkeys(paths):
        name = os.path.basename(path)
        if not name.startswith("libhdf5") or "_hl" in name:
            continue
        try:
            cand = ctypes.CDLL(path)  # the loaded copy: the same handle h5py uses
        except OSError:
            continue
        if hasattr(cand, "H5Pset_metadata_read_attempts"):
            lib = cand
            break
    _HDF5_LIB.append(lib)
    return lib


def _open_swmr_reader(path: str | os.PathLike) -> h5py.File:
    """``h5py.File(path, "r", swmr=True, locking=False)`` with at most
    :data:`SWMR_READ_ATTEMPTS` attempts per piece of metadata (h5py has no keyword for it)."""
    lib = _hdf5_library()
    if lib is None:
        return h5py.File(path, "r", swmr=True, locking=False)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_EARLIEST, h5py.h5f.LIBVER_LATEST)  # as h5py.File
    fapl.set_file_locking(False, ignore_when_disabled=False)
    lib.H5Pset_metadata_read_attempts.argtypes = [ctypes.c_int64, ctypes.c_uint]
    if lib.H5Pset_metadata_read_attempts(fapl.id, SWMR_READ_ATTEMPTS) < 0:
        return h5py.File(path, "r", swmr=True, locking=False)
    fid = h5py.h5f.open(os.fsencode(path), h5py.h5f.ACC_RDONLY | h5py.h5f.ACC_SWMR_READ,
                        fapl=fapl)
    return h5py.File(fid)


def hdf5_truncation(path: str | os.PathLike) -> tuple[int, int] | None:
    """``(size, stored_eof)`` when the HDF5 file ``path`` is shorter than the end of file its
    superblock records by more than :data:`TRUNCATED_SLACK`; else None (also for a file that
    is not HDF5 or cannot be read)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(96)
            size = os.fstat(fh.fileno()).st_size
    except OSError:
        return None
    if head[:8] != b"\x89HDF\r\n\x1a\n" or len(head) < 16:
        return None  # (a user block would move the superblock: none in our files)
    version = head[8]
    if version in (0, 1):
        offsets = head[13]
        # base, free-space and end-of-file addresses follow 16 (24 for version 1) bytes
        at = 24 + (4 if version == 1 else 0) + 2 * offsets
    elif version in (2, 3):
        offsets = head[9]
        at = 12 + 2 * offsets  # after the base and superblock-extension addresses
    else:
        return None
    if offsets not in (4, 8) or len(head) < at + offsets:
        return None
    eof = int.from_bytes(head[at:at + offsets], "little")
    return (size, eof) if size + TRUNCATED_SLACK < eof else None


def _unreadable(path: Path, exc: BaseException) -> DamagedFileError:
    """The error for a run's HDF5 output that exists but cannot be read."""
    cut = hdf5_truncation(path)
    what = (f"is truncated ({cut[0]:,} of {cut[1]:,} bytes: a copy cut short, or a full disk)"
            if cut else f"cannot be read (damaged: {type(exc).__name__}: {exc})")
    return DamagedFileError(f"{path} {what}; restore it from a whole copy")


def _open_diagnostics(path: str | os.PathLike) -> h5py.File:
    """Open diagnostics.h5 for reading, also while a run appends to it (SWMR).

    The writer holds the file open without SWMR for a moment twice (after opening it, before
    switching SWMR on; when it sets the final attributes); a reader that comes then is
    refused ("already open for write") and tries again for up to ``OPEN_FOR_WRITE_WAIT_S``.
    """
    deadline = time.monotonic() + OPEN_FOR_WRITE_WAIT_S
    while True:
        try:
            return _open_swmr_reader(path)
        except OSError:
            try:
                return h5py.File(path, "r", locking=False)
            except OSError as exc:
                if "already open for write" not in str(exc) or time.monotonic() > deadline:
                    raise
        time.sleep(0.02)


def read_diagnostics(path: str | os.PathLike, max_step: int | None = None
                     ) -> tuple[dict[str, np.ndarray], dict]:
    """Datasets and attributes of diagnostics.h5 (or escapers.h5); with ``max_step``, only
    rows up to that step.  Safe while a run is appending to the file (SWMR read).

    Raises
    ------
    InputError
        ``path`` does not exist or is held open for writing.
    DamagedFileError
        ``path`` is truncated or damaged (exit 4).  This is found out within about a
        second: a truncated file is refused from its size before HDF5 reads it (HDF5 would
        read zeros past the end), and HDF5's retries of damaged metadata are bounded
        (:data:`SWMR_READ_ATTEMPTS`).
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"cannot read {path}: no such file")
    cut = hdf5_truncation(path)
    if cut is not None:
        time.sleep(0.2)  # a writer that is extending it has done so by now
        if hdf5_truncation(path) is not None:
            raise _unreadable(path, OSError("truncated"))
    try:
        fh = _open_diagnostics(path)
    except OSError as exc:
        if "already open for write" in str(exc):
            raise InputError(f"cannot read {path}: {exc}") from None
        raise _unreadable(path, exc) from None
    try:
        with fh:
            attrs = dict(fh.attrs)
            # a SWMR reader refreshes to see rows appended since it opened the file: "step"
            # first, so that every column refreshed after it holds at least its rows
            datasets = sorted((ds for ds in fh.values() if isinstance(ds, h5py.Dataset)),
                              key=lambda ds: ds.name != "/step")
            if fh.swmr_mode:
                for ds in datasets:
                    ds.refresh()
            n = fh["step"].shape[0] if "step" in fh else 0
            if max_step is not None and n:
                n = int(np.searchsorted(fh["step"][:n], max_step, side="right"))
            data = {ds.name.lstrip("/"): ds[:n] for ds in datasets}
    except (OSError, RuntimeError, KeyError, TypeError, ValueError) as exc:
        # HDF5 reports damaged metadata by any of these
        raise _unreadable(path, exc) from None
    return data, attrs


class DiagnosticsWriter:
    """diagnostics.h5 grown by appending rows (chunked, resizable datasets, SWMR).

    A flush writes only the new rows, so output per step does not grow with the length of
    the run; readers (``cmc plot``) may open the file while the run writes it.  HDF5 keeps a
    SWMR file readable if the writer is killed; :meth:`create` (on restart) rewrites the rows
    that the checkpoint covers into a fresh file atomically and appends from there.
    """

    def __init__(self, path: str | os.PathLike, attrs: dict, units: dict[str, str],
                 meanings: dict[str, str], history: dict[str, list]):
        self.path = Path(path)
        self._fh: h5py.File | None = None
        self.rows = len(history.get("step", []))
        with atomic_h5(self.path, libver="latest") as fh:
            for k, v in attrs.items():
                fh.attrs[k] = v
            for name, values in history.items():
                arr = np.asarray(values)
                ds = fh.create_dataset(name, data=arr, maxshape=(None,) + arr.shape[1:],
                                       chunks=(256,) + arr.shape[1:])
                if name in units:
                    ds.attrs["unit"] = units[name]
                if name in meanings:
                    ds.attrs["meaning"] = meanings[name]
        self._attrs = attrs
        self._units = units
        self._meanings = meanings

    def _open(self) -> h5py.File:
        if self._fh is None:
            self._fh = h5py.File(self.path, "a", libver="latest", locking=False)
            self._fh.swmr_mode = True
        return self._fh

    def append(self, rows: dict[str, list]) -> None:
        """Append the rows of ``rows`` (one list per dataset, equal lengths) and flush."""
        n_new = len(rows.get("step", []))
        if not n_new:
            return
        _injected_write_error(self.path)
        try:
            fh = self._open()
            for name, values in rows.items():
                ds = fh[name]
                arr = np.asarray(values)
                ds.resize(self.rows + n_new, axis=0)
                ds[self.rows:] = arr
            fh.flush()
        except (OSError, RuntimeError) as exc:
            if self._fh is not None:
                with contextlib.suppress(Exception):
                    _quiet_close(self._fh)
                self._fh = None
            if is_disk_full(exc) or _nearly_full(self.path):
                raise OutputError(errno.ENOSPC, f"disk full while appending to {self.path}; "
                                  "the last good checkpoint is intact") from None
            raise
        self.rows += n_new

    def close(self, final_attrs: dict | None = None) -> None:
        """Close the SWMR writer; then set ``final_attrs`` (e.g. the stop reason)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if final_attrs:
            with h5py.File(self.path, "a", locking=False) as fh:
                for k, v in final_attrs.items():
                    fh.attrs[k] = v


def _checkpoint_names(path: Path, keep: int) -> list[Path]:
    """``checkpoint.h5, checkpoint.1.h5, ...``: the latest first, ``keep`` in all."""
    stem, suffix = path.name[: -len(path.suffix)], path.suffix
    return [path] + [path.with_name(f"{stem}.{i}{suffix}") for i in range(1, keep)]


def checkpoint_files(path: str | os.PathLike) -> list[Path]:
    """Existing checkpoints next to ``path`` (``checkpoint.h5``), the latest first:
    ``checkpoint.h5, checkpoint.1.h5, checkpoint.2.h5, ...``."""
    path = Path(path)
    stem, suffix = path.name[: -len(path.suffix)], path.suffix
    older = re.compile(rf"{re.escape(stem)}\.(\d+){re.escape(suffix)}")
    numbered = sorted((int(m.group(1)), p) for p in path.parent.glob(f"{stem}.*{suffix}")
                      if (m := older.fullmatch(p.name)))
    return ([path] if path.exists() else []) + [p for _, p in numbered]


def write_checkpoint(path: str | os.PathLike, stars: dict[str, np.ndarray], state: dict,
                     write_streams: Callable[[h5py.Group], None], config_text: str,
                     keep: int = 2, extra_attrs: dict | None = None) -> None:
    """Everything needed to continue the run bit for bit, with a checksum of the content.

    Written to a temporary file, checksummed, fsynced; then the older checkpoints shift
    (``checkpoint.h5`` becomes ``checkpoint.1.h5`` ...; ``keep`` files in all) and the new
    one takes the name.  The diagnostics history is not copied: the state records how many
    rows of diagnostics.h5 the checkpoint covers (``diag_rows``).
    """
    path = Path(path)
    n = len(stars["r"])
    check_free_space(path, 8 * n * (len(stars) + 4) + 65536)
    names = _checkpoint_names(path, keep)
    tmp = path.with_name(path.name + ".new")
    with atomic_h5(tmp) as fh:
        fh.attrs["config"] = config_text
        for k, v in (extra_attrs or {}).items():
            fh.attrs[k] = v
        write_star_group(fh.create_group("stars"), stars)
        sg = fh.create_group("state")
        for k, v in state.items():
            sg.attrs[k] = v
        write_streams(fh.create_group("streams"))
        fh.flush()
        fh.attrs["sha256"] = content_digest(fh)
    # shift the older ones; the latest is linked (not moved) to its new name, so that a
    # checkpoint.h5 exists at every moment, even if the process is killed in between
    for older, newer in zip(reversed(names[1:]), reversed(names[:-1])):
        if newer == path and path.exists():
            link = older.with_name(older.name + ".link")
            link.unlink(missing_ok=True)
            try:
                os.link(path, link)
            except OSError:  # no hard links on this file system
                shutil.copy2(path, link)
            os.replace(link, older)
        elif newer.exists():
            os.replace(newer, older)
    os.replace(tmp, path)
    for stale in checkpoint_files(path)[keep:]:
        stale.unlink()


def open_checkpoint(path: str | os.PathLike) -> h5py.File:
    """``path`` opened for reading; a file HDF5 cannot open: a one-line :class:`InputError`
    naming it (its content is checked by the caller: :func:`verify_checksum`)."""
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise InputError(f"checkpoint {path} cannot be opened ({exc})") from None


def verify_checkpoint(path: str | os.PathLike) -> None:
    """Raise :class:`InputError` unless ``path`` is a complete, undamaged checkpoint.

    Checks: it opens; the format version is this code's; the checksum matches the content;
    the groups are there; stars have finite positive masses and radii, unique ids, radial
    order; the run state is finite; every random-stream word is a valid lfsr113 state.
    """
    from parallel.taus113 import _MIN_WORD

    fh = open_checkpoint(path)
    with fh:
        try:
            verify_checksum(fh, path)
        except InputError:
            raise
        except Exception as exc:
            # until the checksum matches, every byte read may be damaged, and HDF5 and h5py
            # report damaged metadata by many exception types (RuntimeError "bad version
            # number for attribute message", OSError, KeyError, TypeError from names that are
            # not UTF-8 ...): all of them mean a damaged file, never a bug of the run
            raise InputError(f"checkpoint {path} is damaged: unreadable HDF5 metadata "
                             f"({type(exc).__name__}: {exc})") from None
        # from here on the content is as written (checksum): an error is a bug, not damage
        stars = read_star_group(fh["stars"])
        state = dict(fh["state"].attrs)
        states = fh["streams/states"][...] if "states" in fh["streams"] else None
    validate_stars(stars, f"checkpoint {path}")
    if np.any(np.diff(stars["r"]) < 0):
        raise InputError(f"checkpoint {path} is damaged: stars are not in radial order")
    for k, v in state.items():
        if isinstance(v, float | np.floating) and not np.isfinite(v) and k != "dt_prev":
            raise InputError(f"checkpoint {path} is damaged: state {k} = {v}")
    if int(state.get("step", -1)) < 0 or int(state.get("n0", 0)) < 2:
        raise InputError(f"checkpoint {path} is damaged: invalid step or n0")
    if states is None or states.ndim != 3 or states.shape[-1] != 4:
        raise InputError(f"checkpoint {path} is damaged: no valid random-stream table")
    for c, lo in enumerate(_MIN_WORD):
        w = states[..., c]
        if np.any(w < lo) or np.any(w > 0xFFFFFFFF):
            raise InputError(f"checkpoint {path} is damaged: random-stream word {c} holds "
                             "an invalid lfsr113 state")


def verify_checksum(fh: h5py.File, path: str | os.PathLike,
                     groups: tuple[str, ...] = ("stars", "state", "streams")) -> None:
    """The format version, ``groups`` and checksum of an open checkpoint
    (:func:`verify_checkpoint`; the N-body mode's with its own groups); raises
    :class:`InputError` for a mismatch, and whatever HDF5 raises for damaged metadata."""
    version = int(fh.attrs.get("format_version", 0))
    if version != FORMAT_VERSION:
        raise InputError(f"checkpoint {path} has format version {version}; this cmc reads "
                         f"version {FORMAT_VERSION} (finish the run with the cmc version "
                         "that wrote it)")
    for g in groups:
        if g not in fh:
            raise InputError(f"checkpoint {path} is damaged: group '{g}' is missing")
    if "sha256" not in fh.attrs:
        raise InputError(f"checkpoint {path} is damaged: it has no checksum")
    if content_digest(fh) != fh.attrs["sha256"]:
        raise InputError(f"checkpoint {path} is damaged: checksum mismatch (the content "
                         "changed after it was written)")


def read_checkpoint(path: str | os.PathLike):
    """Verify (:func:`verify_checkpoint`) and return (stars, state, config_text, attrs)."""
    verify_checkpoint(path)
    with h5py.File(path, "r") as fh:
        stars = read_star_group(fh["stars"])
        state = {k: (v.item() if hasattr(v, "item") else v)
                 for k, v in fh["state"].attrs.items()}
        config_text = str(fh.attrs["config"])
        attrs = {k: v for k, v in fh.attrs.items() if k not in ("config", "sha256")}
    return stars, state, config_text, attrs
