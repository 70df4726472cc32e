"""Collective writes: rank 0 writes, and a failure there ends every rank."""

from __future__ import annotations

from collections.abc import Callable

from cmc.errors import EXIT_INTERNAL, EXIT_IO, CmcError, is_disk_full


def on_root(comm, fn: Callable[[], None]) -> None:
    """Run rank 0's share of a collective write, ``fn()``; if it fails, every rank raises
    (rank 0 the error itself, the others a :class:`CmcError` with its message and exit
    code), marked collective: no rank is left waiting in the next collective, and the
    command line ends every rank without aborting the job."""
    failure = None
    if comm.Get_rank() == 0:
        try:
            fn()
        except Exception as exc:
            if comm.Get_size() == 1:
                raise
            failure = exc
    if comm.Get_size() == 1:
        return
    note = None
    if failure is not None:
        if isinstance(failure, CmcError):
            code = failure.exit_code
        elif isinstance(failure, OSError) or is_disk_full(failure):
            code = EXIT_IO
        else:
            code = EXIT_INTERNAL
        note = (code, f"on rank 0: {type(failure).__name__}: {failure}")
    note = comm.bcast(note, root=0)
    if note is None:
        return
    if failure is None:
        failure = CmcError(note[1])
        failure.exit_code = note[0]
    failure.collective = True
    raise failure

