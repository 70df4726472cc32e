"""The records of a sweep's models and its summary: ``result.json``, ``summary.json|tsv``.

Each model's folder holds ``result.json``, its row of the summary (:func:`write_result`);
:func:`rebuild_summary` rewrites ``OUT/summary.json`` and ``OUT/summary.tsv`` from every
``result.json`` present, atomically and one writer at a time (``flock`` on
``OUT/.summary.lock``), so that concurrent array tasks never lose each other's rows;
:func:`read_summary` and :func:`format_summary` give ``cmc summary OUT`` its table, and
:func:`sweep_exit_code` the exit status of ``cmc sweep`` from the records it looked at
(statuses and exit codes: :mod:`cmc.sweep`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cmc.errors import (
    EXIT_OK,
    EXIT_PHYSICS,
    EXIT_RESUMABLE,
    InputError,
    exit_code_for_stop,
)
from cmc.sweep_file import _model_name

# the sweep's logger: OUT/sweep.log takes the lines of this name (cmc.sweep._setup_logging)
log = logging.getLogger("cmc.sweep")

#: File of a model's folder holding its summary row.
RESULT_NAME = "result.json"
#: Columns of ``summary.tsv`` around the swept parameters (which come after ``name``).
RESULT_COLUMNS = ("status", "stop_reason", "steps", "t_end_trh", "dE_rel", "r_c", "N",
                  "wall_s", "skipped", "resumed")
#: Seconds to wait for the summary's lock before writing without it.
_SUMMARY_LOCK_WAIT_S = 60.0


# ---------------------------------------------------------------------------- records
def _pending(i: int, model: dict[str, str]) -> dict[str, Any]:
    return {"index": i, "name": _model_name(i, model), "params": dict(model),
            "status": "pending", "stop_reason": "", "steps": None, "t_end_trh": None,
            "dE_rel": None, "r_c": None, "N": None, "wall_s": None, "skipped": False,
            "resumed": False}


def _status_of_stop(reason: str) -> str:
    code = exit_code_for_stop(reason)
    return "finished" if code == EXIT_OK else "resumable" if code == EXIT_RESUMABLE else "failed"


def _results_of(row: dict | None) -> dict[str, Any]:
    """The result fields of a diagnostics row (``sim.last``), as plain Python numbers."""
    if not row:
        return {}

    def num(key: str, kind: type) -> Any:
        v = row.get(key)
        try:
            return kind(v) if v is not None else None
        except (TypeError, ValueError):
            return None

    return {"steps": num("step", int), "t_end_trh": num("time_trh", float),
            "dE_rel": num("dE_rel", float), "r_c": num("r_c", float), "N": num("N", int)}


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _read_result(mdir: Path) -> dict | None:
    try:
        rec = json.loads((mdir / RESULT_NAME).read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def write_result(mdir: str | Path, rec: dict) -> None:
    """Write a model's record to ``MDIR/result.json`` (temporary file, then renamed)."""
    rec = {k: _jsonable(v) for k, v in rec.items()}
    _atomic_write(Path(mdir) / RESULT_NAME, json.dumps(rec, indent=1) + "\n")


@contextlib.contextmanager
def _summary_lock(outdir: Path) -> Iterator[None]:
    """One summary writer at a time (``flock`` on ``OUT/.summary.lock``, best effort)."""
    fd = None
    try:
        fd = os.open(outdir / ".summary.lock", os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + _SUMMARY_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline:
                    log.warning("summary of %s: lock still held after %.0f s; writing anyway",
                                outdir, _SUMMARY_LOCK_WAIT_S)
                    break
                time.sleep(0.05)
    except OSError:
        pass  # no lock on this filesystem: the rename keeps each file whole
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def rebuild_summary(outdir: str | Path, models: list[dict[str, str]],
                    fresh: dict[int, dict] | None = None) -> list[dict]:
    """Rewrite ``summary.json`` and ``summary.tsv`` of a sweep from its ``result.json`` files.

    Parameters
    ----------
    outdir : str or Path
        The sweep's output folder.
    models : list of dict
        The models of the sweep (:func:`read_sweep`).
    fresh : dict, optional
        Records by model index that take precedence over the files (this process's own).

    Returns
    -------
    list of dict
        The rows written, one per model; a model without ``result.json`` is ``pending``.
    """
    outdir = Path(outdir)
    fresh = fresh or {}
    keys = list(dict.fromkeys(k for m in models for k in m))
    with _summary_lock(outdir):
        rows = []
        for i, model in enumerate(models):
            row = _pending(i, model)
            got = fresh.get(i) or _read_result(outdir / row["name"])
            if got:
                row.update({k: v for k, v in got.items() if k in row})
                row["params"] = dict(model)
            rows.append(row)
        _atomic_write(outdir / "summary.json",
                      json.dumps([{k: _jsonable(v) for k, v in r.items()} for r in rows],
                                 indent=1) + "\n")
        cols = ["index", "name", *keys, *RESULT_COLUMNS]
        lines = ["\t".join(cols)]
        for r in rows:
            flat = {**r, **r["params"]}
            lines.append("\t".join("" if flat.get(c) is None else str(flat.get(c))
                                   for c in cols))
        _atomic_write(outdir / "summary.tsv", "\n".join(lines) + "\n")
    return rows


def _try_rebuild(outdir: Path, models: list[dict[str, str]],
                 fresh: dict[int, dict] | None = None) -> None:
    try:
        rebuild_summary(outdir, models, fresh)
    except OSError as exc:
        log.error("cannot write the summary in %s: %s (the models' result.json are intact)",
                  outdir, exc)


def sweep_exit_code(records: list[dict], n_expected: int) -> int:
    """Exit status of a sweep invocation from the records of the models it looked at.

    3 if any failed; else 75 if any is resumable or busy, or fewer than ``n_expected`` models
    were reached (interrupted); else 0.
    """
    status = [r.get("status") for r in records]
    if "failed" in status:
        return EXIT_PHYSICS
    if any(s != "finished" for s in status) or len(records) < n_expected:
        return EXIT_RESUMABLE
    return EXIT_OK


# ---------------------------------------------------------------------------- summary
def format_summary(rows: list[dict]) -> str:
    """The summary rows as an aligned text table: model, parameters, status, stop reason,
    wall time."""
    keys = list(dict.fromkeys(k for r in rows for k in (r.get("params") or {})))
    head = ["model", *keys, "status", "stop reason", "wall [s]"]
    table = [head]
    for r in rows:
        wall = r.get("wall_s")
        status = str(r.get("status", ""))
        if r.get("skipped"):
            status += " (skipped)"
        elif r.get("resumed"):
            status += " (resumed)"
        table.append([str(r.get("name", "")),
                      *(str((r.get("params") or {}).get(k, "")) for k in keys),
                      status, str(r.get("stop_reason") or ""),
                      "" if wall is None else f"{float(wall):.1f}"])
    widths = [max(len(row[c]) for row in table) for c in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
             for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def read_summary(outdir: str | Path) -> list[dict]:
    """Rows of ``OUTDIR/summary.json``, each updated from its model's newer ``result.json``.

    Raises
    ------
    InputError
        No readable ``summary.json``.
    """
    outdir = Path(outdir)
    path = outdir / "summary.json"
    try:
        rows = json.loads(path.read_text())
    except OSError:
        raise InputError(f"no sweep summary at {path} (run 'cmc sweep SWEEP.ini -o "
                         f"{outdir}' first)") from None
    except ValueError as exc:
        raise InputError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(rows, list):
        raise InputError(f"{path} is not a sweep summary")
    for r in rows:
        got = _read_result(outdir / str(r.get("name", "")))
        if got:
            r.update({k: v for k, v in got.items() if k != "params"})
    return rows
