"""What every command of ``cmc`` does at launch: the MPI world, its check, the error line.

:func:`_world` is the command's communicator (``MPI.COMM_WORLD`` through
:func:`parallel.comm.get_world_comm`, or a serial one), made once per process and kept in
:data:`_WORLD`, where :func:`cmc.cli.main` finds it to end every rank after an error; with one
rank it checks that the launcher did not start several tasks that each see one
(:func:`_check_launcher`).  :func:`_err` writes the one line ``cmc: error: ...`` of a failed
command, :func:`_set_threads` the run's numba threads, :func:`_acquire` takes a run folder's
lock, and :func:`_warm_kernels` compiles the step's kernels on rank 0 before the other ranks
load them.  :mod:`cmc.cli`, :mod:`cmc.cli_nbody` and :mod:`cmc.sweep` (``cmc sweep``) use
them, which is why they live below all three.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from cmc.errors import InputError, is_not_writable, not_writable

# the lines of cmc.cli they were (``kernels compiled``): log lines name their logger
log = logging.getLogger("cmc.cli")
_WORLD: list = []

#: Launcher variables that give the number of tasks it started; one of them above 1 while
#: MPI sees a single rank means mpi4py is linked to another MPI library than the launcher's.
_LAUNCHER_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE",
                       "MPI_LOCALNRANKS")


def _world():
    if not _WORLD:
        from parallel.comm import get_world_comm

        comm = get_world_comm()
        _WORLD.append(comm)
        if comm.Get_size() == 1:
            _check_launcher(os.environ)
    return _WORLD[0]


def _check_launcher(env) -> None:
    """Stop when a launcher started several tasks but MPI sees one rank each."""
    sizes = {k: env.get(k) for k in _LAUNCHER_SIZE_VARS}
    step = env.get("SLURM_STEP_ID", "")
    if step.isdigit() and int(step) < 4294967290:  # an srun step, not the batch script
        sizes["SLURM_STEP_NUM_TASKS"] = env.get("SLURM_STEP_NUM_TASKS")
    for k, v in sizes.items():
        if v and v.isdigit() and int(v) > 1:
            raise InputError(f"the launcher started {v} tasks ({k}) but MPI sees 1 rank in "
                             "each: mpi4py is built against another MPI library than the "
                             "launcher's; reinstall it against the site's MPI (module load "
                             "<mpi>; pip install --no-binary=mpi4py --force-reinstall mpi4py) "
                             "or use the mpiexec that comes with it")


def _err(msg: str) -> None:
    sys.stderr.write(f"cmc: error: {msg}\n")
    sys.stderr.flush()


def _warm_kernels(comm) -> None:
    """Load the step's numba kernels on rank 0 alone, compiling them where the cache has none
    (after an install or update, in a new checkout), before the other ranks load them from
    the cache: ranks that compile the same kernels at once each take the minute.

    Whether anything compiles is numba's to say, not a guess from the cache folder (which
    holds other checkouts' kernels: numba keys its cache by source path): :mod:`cmc.compiling`
    logs "compiling kernels" at numba's first compilation, progress every
    ``PROGRESS_EVERY_S``, and holds a Ctrl-C until the function at hand is compiled.
    """
    if comm.Get_rank() == 0:
        from cmc.compiling import WATCH
        from cmc.config import Config
        from cmc.simulation import Simulation
        from parallel.comm import SerialComm

        kernels, seconds = WATCH.kernels, WATCH.seconds
        cfg = Config()
        cfg.initial.n = 200
        Simulation.create(cfg, SerialComm(), None).step()
        if WATCH.seconds > seconds:
            log.info("kernels compiled: %d in %.0f s", WATCH.kernels - kernels,
                     WATCH.seconds - seconds)
            WATCH.end_episode()
    comm.Barrier()


def _set_threads(cfg_threads: int, comm) -> None:
    from parallel.comm import set_numba_threads
    from parallel.memory import keep_freed_memory

    set_numba_threads(cfg_threads, comm.Get_size())
    keep_freed_memory()


def _acquire(lock, outdir: Path) -> None:
    """Take the run folder's lock; an unwritable folder or another error: one-line input
    errors."""
    try:
        lock.acquire()
    except OSError as exc:
        if is_not_writable(exc):
            raise not_writable(outdir, exc) from None
        raise InputError(f"cannot use output directory {outdir}: {exc.strerror}") from None
