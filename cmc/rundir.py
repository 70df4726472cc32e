"""Run directories: what a run leaves there, its status, and one writer at a time.

A run directory holds ``config.ini``, ``cmc.log``, ``diagnostics.h5``, ``escapers.h5``,
``checkpoint.h5`` (and the older ``checkpoint.1.h5`` ...), ``snapshots/`` and the lock file
``.lock``.  Nothing here communicates: the CLI calls these functions on rank 0 and broadcasts
the outcome.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cmc.errors import PLANNED_STOPS, RESUMABLE_STOPS, InputError

LOCK_NAME = ".lock"
_FILES = ("config.ini", "cmc.log", "diagnostics.h5", "escapers.h5", "summary.tsv",
          "summary.json")


def run_outputs(outdir: str | os.PathLike) -> list[Path]:
    """The run outputs present in ``outdir`` (empty when it holds no run)."""
    d = Path(outdir)
    if not d.is_dir():
        return []
    found = [d / f for f in _FILES if (d / f).exists()]
    found += sorted(d.glob("checkpoint*.h5")) + sorted(d.glob("*.h5.tmp"))
    if (d / "snapshots").exists():
        found.append(d / "snapshots")
    return found


def clear_outputs(outdir: str | os.PathLike) -> int:
    """Remove every run output of ``outdir`` (not other files); returns how many."""
    found = run_outputs(outdir)
    for p in found:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    return len(found)


def check_writable(folder: str | os.PathLike) -> None:
    """Raise the OSError of creating a file in ``folder`` (a read-only folder, an immutable
    one, a read-only file system), before a command spends minutes on work it cannot save.
    The lock file may exist and be writable where nothing new can be created."""
    try:
        fd, name = tempfile.mkstemp(prefix=".cmc-write-test-", dir=folder)
    except OSError as exc:  # named by the folder, not by the probe's random name
        raise type(exc)(exc.errno, exc.strerror, str(folder)) from None
    os.close(fd)
    os.unlink(name)


@dataclass
class RunStatus:
    """What a run directory holds.

    ``kind`` is ``empty`` (no outputs), ``unstarted`` (outputs but no checkpoint: killed
    during set-up, nothing to continue), ``finished`` (stopped as planned), ``resumable``
    (stopped early by a signal or the wall-clock limit, or killed: continue it), ``failed``
    (physics failure), ``damaged`` (checkpoints, none readable).
    """

    kind: str
    step: int = 0
    stop_reason: str = ""
    checkpoint: Path | None = None

    def describe(self) -> str:
        if self.kind == "empty":
            return "no run"
        if self.kind == "damaged":
            return "a run without a readable checkpoint"
        if self.kind == "unstarted":
            return "a run killed before its first checkpoint"
        why = f" ({self.stop_reason})" if self.stop_reason else " (killed: no stop recorded)"
        return f"a {self.kind} run at step {self.step}{why}"


def run_status(outdir: str | os.PathLike) -> RunStatus:
    """Status of the run in ``outdir`` from its latest checkpoint's state (not verified)."""
    import h5py

    from cmc.io import checkpoint_files

    d = Path(outdir)
    if not run_outputs(d):
        return RunStatus("empty")
    files = checkpoint_files(d / "checkpoint.h5")
    if not files:
        # killed before its first checkpoint (written at step 0): nothing to continue
        return RunStatus("unstarted")
    for ck in files:  # the newest readable one (the latest may be missing or torn)
        try:
            with h5py.File(ck, "r") as fh:
                st = fh["state"].attrs
                step, reason = int(st["step"]), str(st["stop_reason"])
            break
        except (OSError, RuntimeError, KeyError, TypeError, ValueError):
            # h5py reports damaged metadata by any of these (RuntimeError "bad version
            # number for attribute message", TypeError from names that are not UTF-8 ...)
            continue
    else:
        return RunStatus("damaged")
    if reason in PLANNED_STOPS:
        kind = "finished"
    elif reason in RESUMABLE_STOPS or reason == "":
        kind = "resumable"
    else:
        kind = "failed"
    return RunStatus(kind, step, reason, ck)


class RunLock:
    """Advisory lock on a run directory: one command writes a run at a time.

    The lock is ``flock`` on ``OUTDIR/.lock``, which the kernel releases when the holder
    dies, so the lock of a killed process is taken over without a word.  The file names the
    holder (host, pid, command, start) for the message a second command prints.
    """

    def __init__(self, outdir: str | os.PathLike):
        self.path = Path(outdir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`InputError` naming the holder; an OSError when the
        folder cannot be written (:func:`check_writable`)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise InputError(f"{self.path.parent} is in use by another cmc command "
                             f"({holder}); wait for it or stop it first") from None
        text = (f"pid {os.getpid()} on {socket.gethostname()}, "
                f"'{' '.join(['cmc'] + sys.argv[1:])[:200]}' since "
                f"{time.strftime('%Y-%m-%d %H:%M:%S')}")
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode(), 0)
        self._fd = fd
        try:
            check_writable(self.path.parent)
        except OSError:
            self.release()
            raise

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
