"""Exit codes and the errors that map to them.

A batch script reads the exit status of ``cmc`` to decide what to do next (README, "Exit
codes"; docs/hpc.md):

==== ==================================================================================
code meaning
==== ==================================================================================
0    finished: a planned stop (``max_time``, ``max_steps``, a core-collapse criterion)
1    internal error (a bug): the traceback is in ``OUTDIR/cmc.log``
2    bad input or usage: parameter, initial conditions, damaged checkpoint, run directory
     that already holds a run or is locked by another command
3    physics failure (energy error beyond ``run.energy_error_max``, numerical failure):
     do not requeue, inspect
4    I/O failure (disk full, output not writable, a truncated or damaged diagnostics.h5 or
     escapers.h5); the last good checkpoint is intact
75   stopped early but resumable (signal, ``run.max_wall_hours``): ``cmc restart OUTDIR``
130  interrupted before the run started (Ctrl-C during set-up)
==== ==================================================================================
"""

from __future__ import annotations

import errno
import os

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INPUT = 2
EXIT_PHYSICS = 3
EXIT_IO = 4
EXIT_RESUMABLE = 75
EXIT_INTERRUPTED = 130

#: Stop reasons of a run that ended as planned (exit 0).
PLANNED_STOPS = ("max_time", "max_steps", "core_collapse_ncore", "core_collapse_rc",
                 "dissolved")
#: Stop reasons after which the run can simply be continued (exit 75).
RESUMABLE_STOPS = ("signal", "wall_clock")

#: errno values that mean the storage is full, not that the path is wrong.
_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG}


class CmcError(Exception):
    """An error with a one-line message and the exit code it ends the command with."""

    exit_code = EXIT_INTERNAL
    #: True when every rank raised it together (no need to abort the others)
    collective = False


class InputError(CmcError, ValueError):
    """Bad input a user can fix: a file, a parameter, a run directory (exit 2)."""

    exit_code = EXIT_INPUT


class OutputError(CmcError, OSError):
    """Outputs cannot be written: disk full, not writable (exit 4)."""

    exit_code = EXIT_IO

    def __str__(self) -> str:
        return str(self.strerror or super().__str__())


class DamagedFileError(CmcError):
    """A run's own output (diagnostics.h5, escapers.h5) exists but cannot be read: truncated
    (a copy cut short, a full disk) or damaged (exit 4, an I/O failure)."""

    exit_code = EXIT_IO


def is_not_writable(exc: BaseException) -> bool:
    """True for an OSError that says the file system refuses the write: permissions (EACCES,
    EPERM: a read-only or foreign folder, an immutable file) or a read-only file system
    (EROFS).  Every command ends with exit 4 for it (README, "Exit codes")."""
    return isinstance(exc, PermissionError) or (isinstance(exc, OSError)
                                                and exc.errno == errno.EROFS)


def not_writable(path: object, exc: OSError) -> OutputError:
    """The one-line error (exit 4) for ``path`` that cannot be written (:func:`is_not_writable`).

    h5py puts HDF5's whole error stack into ``strerror``; the errno's own text is the part a
    user needs."""
    why = os.strerror(exc.errno) if isinstance(exc.errno, int) else (exc.strerror or str(exc))
    return OutputError(exc.errno or errno.EACCES,
                       f"cannot write {path}: {why} (make it writable, or write elsewhere)",
                       str(path))


def exit_code_for_stop(reason: str) -> int:
    """Exit status of a run that stopped for ``reason``."""
    if reason in PLANNED_STOPS:
        return EXIT_OK
    if reason in RESUMABLE_STOPS:
        return EXIT_RESUMABLE
    return EXIT_PHYSICS


def is_disk_full(exc: BaseException) -> bool:
    """True for an error that says the storage is full (or a quota is exceeded): an OSError
    with that errno, or an HDF5 error (h5py raises OSError or RuntimeError) whose text says
    so."""
    if isinstance(exc, OSError) and exc.errno in _FULL:
        return True
    text = str(exc).lower()
    return isinstance(exc, OSError | RuntimeError) and (
        "no space left" in text or "quota" in text or "errno = 28" in text)
