"""Parameter sweeps: many models, each run by a group of ranks, that never lose work.

A sweep file names a base parameter file and the values to vary::

    [sweep]
    base = plummer_small.ini      # relative to the sweep file
    ranks_per_model = 1           # ranks that run one model together
    mode = grid                   # grid: every combination; list: i-th values together

    [values]
    initial.n = 1000, 2000
    initial.seed = 1, 2, 3

Model ``i`` writes the folder ``OUT/model<iii>_<values>`` (``OUT`` is ``-o``, default
``runs/<sweep file stem>``), an ordinary run directory (``config.ini``, ``cmc.log``,
``diagnostics.h5``, ``checkpoint.h5``, ``snapshots/``) plus ``result.json``, the model's row of
the summary.

Dynamic dispatch
    ``mpiexec -n P cmc sweep SWEEP.ini`` splits the P ranks into ``P // ranks_per_model``
    groups (ranks beyond the last full group stay idle).  A group that is free takes the next
    model from a counter shared by every rank (an MPI one-sided window on world rank 0,
    incremented atomically with ``Fetch_and_op``), so long and short models share the
    allocation without a fixed assignment.  Every group leaves the loop once the counter has
    passed the number of models; then all ranks meet and rank 0 writes the summary.  A serial
    run (one rank) takes the models in order.

Array tasks: ``--index`` and ``SLURM_ARRAY_TASK_ID``
    ``cmc sweep SWEEP.ini --index I`` runs model ``I`` alone on all ranks of the command
    (0 <= I < number of models).  Without ``--index``, ``SLURM_ARRAY_TASK_ID`` is used when it
    is set, so one line serves every task of a SLURM job array (docs/hpc.md).

Running a sweep again
    Every model is looked at under the run directory's lock (:class:`cmc.rundir.RunLock`): a
    finished model is skipped (its old results are reported again, ``skipped``); a model that
    stopped early (signal, ``run.max_wall_hours``) or was killed is continued from its
    checkpoint with the parameters stored there; a folder with outputs but no readable
    checkpoint is cleared and the model started afresh; a model that failed (a physics
    failure recorded in its checkpoint) is skipped and reported failed again, since it would
    fail the same way (remove its folder to run it again); a model whose folder another
    command holds is reported ``busy`` and left alone.  Every model's parameters are
    validated before any model runs: a value that :mod:`cmc.config` refuses refuses the whole
    sweep (exit 2).  An exception in one model (unreadable initial conditions, full disk) is
    recorded as that model's failure and the group takes the next model.  On SIGTERM/SIGINT
    the running models stop with a checkpoint and no group takes another model.

Summary
    ``OUT/summary.json`` and ``OUT/summary.tsv`` are rebuilt from every ``result.json`` present
    (models without one are ``pending``) after each model and at the end, atomically and one
    writer at a time, so concurrent array tasks never lose each other's rows.
    ``cmc summary OUT`` prints the table.  Statuses: ``finished`` (a planned stop),
    ``resumable`` (stopped by a signal or the wall-clock limit: run the sweep again),
    ``failed``, ``busy``, ``pending``.

Exit status of ``cmc sweep``: 0 when every model it looked at is finished, 3 when any failed,
else 75 (some model is resumable or was not reached: run the same command again), 2 for a
bad sweep file (a value that any model refuses included), ``--index`` or output folder.

Modules: :mod:`cmc.sweep_file` reads the sweep file, :mod:`cmc.sweep_summary` writes the
models' records and the summary; this one hands out the models, runs each in its folder and
holds the commands ``cmc sweep`` and ``cmc summary``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from cmc.config import ConfigError, load_config
from cmc.errors import (
    EXIT_INPUT,
    EXIT_IO,
    EXIT_OK,
    CmcError,
    InputError,
    is_not_writable,
    not_writable,
)
from cmc.launch import _err, _warm_kernels, _world
from cmc.log import log_traceback, setup_logging
from cmc.sweep_file import check_models, read_sweep
from cmc.sweep_summary import (
    RESULT_NAME,
    _pending,
    _read_result,
    _results_of,
    _status_of_stop,
    _try_rebuild,
    format_summary,
    read_summary,
    sweep_exit_code,
    write_result,
)

log = logging.getLogger("cmc.sweep")

#: Seconds between two progress polls of the dispatch counter's host (world rank 0).
_POLL_S = 0.02


# ---------------------------------------------------------------------------- dispatch
class _LocalCounter:
    """Hands out 0, 1, 2, ... (one group: no communication)."""

    def __init__(self) -> None:
        self._next = 0

    def next(self) -> int:
        i = self._next
        self._next += 1
        return i

    def free(self) -> None:
        pass


class _SharedCounter:
    """A counter on world rank 0 that any rank increments atomically (MPI one-sided).

    Creation and :meth:`free` are collective over ``world``.  MPICH and others progress
    passive-target operations only when the target rank is inside MPI; world rank 0 is busy
    with its own models, so (with ``MPI_THREAD_MULTIPLE``) a thread there polls
    ``Iprobe`` every few milliseconds to let the other groups' fetches through.
    """

    def __init__(self, world: Any):
        from mpi4py import MPI

        self._MPI = MPI
        self.rank = world.Get_rank()
        self.win = MPI.Win.Allocate(8 if self.rank == 0 else 0, 8, comm=world)
        if self.rank == 0:
            self.win.Lock(0)
            self.win.Put(np.zeros(1, dtype=np.int64), 0)
            self.win.Unlock(0)
        self._poll_comm = world.Dup()
        self._stop = threading.Event()
        self._thread = None
        if self.rank == 0 and MPI.Query_thread() == MPI.THREAD_MULTIPLE:
            self._thread = threading.Thread(target=self._poll, name="cmc-sweep-progress",
                                            daemon=True)
            self._thread.start()
        world.Barrier()

    def _poll(self) -> None:
        while not self._stop.wait(_POLL_S):
            self._poll_comm.Iprobe(self._MPI.ANY_SOURCE, self._MPI.ANY_TAG)

    def next(self) -> int:
        one = np.ones(1, dtype=np.int64)
        got = np.zeros(1, dtype=np.int64)
        self.win.Lock(0)
        self.win.Fetch_and_op(one, got, 0, op=self._MPI.SUM)
        self.win.Unlock(0)
        return int(got[0])

    def free(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        self._poll_comm.Free()
        self.win.Free()


class _Signals:
    """SIGTERM/SIGINT between models: note them (the sweep takes no further model).

    While a model runs, the simulation's own handlers take over and it stops with a
    checkpoint (stop reason ``signal``).  A second SIGINT raises KeyboardInterrupt.
    """

    def __init__(self) -> None:
        self.signum = 0
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        if self.signum and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    def __enter__(self) -> _Signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._old[sig] = signal.signal(sig, self._handler)
            except ValueError:  # not the main thread
                pass
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, h in self._old.items():
            signal.signal(sig, h)


def _any_flag(comm: Any, flag: bool) -> bool:
    if comm.Get_size() == 1:
        return bool(flag)
    from parallel.comm import allreduce_max

    return bool(allreduce_max(comm, 1.0 if flag else 0.0))


# ---------------------------------------------------------------------------- logging
def _setup_logging(world_rank: int, leader: bool, logfile: Path) -> logging.Handler | None:
    """Group leaders log INFO to stderr and the ``cmc.sweep`` lines to ``OUT/sweep.log``."""
    setup_logging(world_rank, None, all_ranks=leader)
    if not leader:
        return None
    logger = logging.getLogger("cmc")
    fh = logging.FileHandler(logfile, mode="a")
    _copy_format(logger, fh)
    fh.addFilter(lambda rec: rec.name == log.name)
    logger.addHandler(fh)
    return fh


def _copy_format(logger: logging.Logger, handler: logging.Handler) -> None:
    for h in logger.handlers:
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
            handler.setFormatter(h.formatter)
            for f in h.filters:
                handler.addFilter(f)
            return


@contextlib.contextmanager
def _model_log(mdir: Path, leader: bool) -> Iterator[None]:
    """Every ``cmc`` log line of the model also goes to ``MDIR/cmc.log`` (leader)."""
    if not leader:
        yield
        return
    logger = logging.getLogger("cmc")
    fh = logging.FileHandler(mdir / "cmc.log", mode="a")
    _copy_format(logger, fh)
    logger.addHandler(fh)
    try:
        yield
    finally:
        logger.removeHandler(fh)
        fh.close()


# ---------------------------------------------------------------------------- one model
def _plan(mdir: Path, rec: dict, base: Path, model: dict[str, str]) -> tuple[str, Any]:
    """On the group leader, holding the lock: what to do with the model's folder.

    Returns ``(action, payload)``: ``("create", None)``, ``("resume", checkpoint)``,
    ``("skip", None)`` (``rec`` filled in) or ``("error", message)``.
    """
    from cmc.rundir import clear_outputs, run_status

    st = run_status(mdir)
    if st.kind in ("finished", "failed"):
        old = _read_result(mdir) or {}
        res = {k: old.get(k) for k in ("steps", "t_end_trh", "dE_rel", "r_c", "N")}
        if old.get("stop_reason") != st.stop_reason or old.get("steps") != st.step:
            res = _results_from_diagnostics(mdir, st.step) or {"steps": st.step}
        rec.update(res, status=st.kind, stop_reason=st.stop_reason, skipped=True)
        if st.kind == "finished":
            log.info("%s: finished before (%s at step %d); skipped", mdir.name,
                     st.stop_reason, st.step)
        else:
            log.warning("%s: failed before (%s at step %d); skipped, since it would fail the "
                        "same way (remove the folder to run it again)", mdir.name,
                        st.stop_reason, st.step)
        return "skip", None
    if st.kind == "resumable":
        log.info("%s: continuing from %s at step %d (%s)", mdir.name, st.checkpoint, st.step,
                 st.stop_reason or "killed: no stop recorded")
        return "resume", str(st.checkpoint)
    if st.kind == "damaged":
        n = clear_outputs(mdir)
        log.warning("%s: outputs without a readable checkpoint; removed %d and starting afresh",
                    mdir.name, n)
    cfg = load_config(str(base), [f"{k}={v}" for k, v in model.items()])
    (mdir / "config.ini").write_text(cfg.to_ini())
    log.info("%s: starting", mdir.name)
    return "create", None


def _results_from_diagnostics(mdir: Path, step: int) -> dict | None:
    try:
        from cmc import io as cio

        data, _ = cio.read_diagnostics(mdir / "diagnostics.h5", max_step=step)
        if not len(data.get("step", ())):
            return None
        return _results_of({k: v[-1] for k, v in data.items()})
    except Exception:  # any trouble: the record just has fewer fields
        return None


def run_model(i: int, model: dict[str, str], base: Path, comm: Any, outdir: Path,
              signals: _Signals | None = None) -> dict | None:
    """Run (or skip, or continue) model ``i`` on the ranks of ``comm`` (collective).

    Returns the model's record on rank 0 of ``comm`` (also written to ``result.json``),
    ``None`` on the others.  Exceptions of the model are caught and recorded.
    """
    from cmc.rundir import RunLock
    from cmc.simulation import Simulation

    leader = comm.Get_rank() == 0
    t0 = time.monotonic()
    rec = _pending(i, model)
    mdir = outdir / rec["name"]
    lock = RunLock(mdir)
    plan: tuple[str, Any] = ("error", "not planned")
    if leader:
        try:
            lock.acquire()
        except InputError as exc:
            plan = ("busy", str(exc))
        except OSError as exc:
            plan = ("error", f"{type(exc).__name__}: {exc}")
        else:
            try:
                plan = _plan(mdir, rec, base, model)
            except Exception as exc:
                plan = ("error", f"{type(exc).__name__}: {exc}")
    try:
        action, payload = comm.bcast((plan[0], plan[1] if plan[0] != "skip" else None),
                                     root=0)
        if action in ("create", "resume"):
            with _model_log(mdir, leader):
                if _any_flag(comm, bool(signals and signals.signum)):
                    rec.update(status="resumable", stop_reason="signal")
                    log.info("%s: not started (signal)", mdir.name)
                else:
                    _run_sim(action, payload, model, base, comm, mdir, rec, Simulation)
                    if rec["stop_reason"] == "signal" and signals is not None:
                        signals.signum = signals.signum or signal.SIGTERM
        elif action == "busy":
            rec.update(status="busy", stop_reason=payload)
            log.warning("%s: %s; left alone", mdir.name, payload)
        elif action == "error":
            rec.update(status="failed", stop_reason=payload)
            log.warning("%s: failed: %s", mdir.name, payload)
        rec["wall_s"] = round(time.monotonic() - t0, 3)
        if leader and action != "busy":
            try:
                write_result(mdir, rec)
            except OSError as exc:
                log.error("%s: cannot write %s: %s", mdir.name, RESULT_NAME, exc)
    finally:
        if leader:
            lock.release()
    return rec if leader else None


def _run_sim(action: str, payload: Any, model: dict[str, str], base: Path, comm: Any,
             mdir: Path, rec: dict, Simulation: Any) -> None:
    from parallel.comm import set_numba_threads

    leader = comm.Get_rank() == 0
    sim = None
    try:
        if action == "create":
            cfg = load_config(str(base), [f"{k}={v}" for k, v in model.items()])
            set_numba_threads(cfg.run.threads, comm.Get_size())
            sim = Simulation.create(cfg, comm, mdir)
        else:
            sim = Simulation.from_checkpoint(payload, comm, overrides=None, outdir=mdir)
            set_numba_threads(sim.cfg.run.threads, comm.Get_size())
            rec["resumed"] = True
        reason = sim.run()
        rec.update(_results_of(sim.last), status=_status_of_stop(reason), stop_reason=reason)
        (log.info if rec["status"] != "failed" else log.warning)(
            "%s: %s (%s) after step %s", mdir.name, rec["status"], reason, rec["steps"])
    except Exception as exc:
        if sim is not None:
            rec.update(_results_of(getattr(sim, "last", None)))
        rec.update(status="failed", stop_reason=f"{type(exc).__name__}: {exc}")
        log.warning("%s: failed: %s", mdir.name, rec["stop_reason"])
        if leader and not isinstance(exc, CmcError | ConfigError):
            log_traceback(exc, str(mdir / "cmc.log"))


# ---------------------------------------------------------------------------- the sweep
def run_sweep(path: str | Path, world: Any, output: str | Path | None = None,
              index: int | None = None) -> int:
    """Run the models of a sweep (collective over ``world``).

    Parameters
    ----------
    path : str or Path
        The sweep file (:func:`read_sweep`).
    world : mpi4py communicator or parallel.comm.SerialComm
        All ranks of the command.
    output : str or Path, optional
        Output folder; default ``runs/<sweep file stem>``.
    index : int, optional
        Run model ``index`` alone on all ranks of ``world`` (an array task); the summary is
        rebuilt afterwards with the other models as they are (``pending`` without a result).

    Returns
    -------
    int
        0 if every model looked at is finished, 3 if any failed, else 75 (resumable models,
        or models not reached because of a signal): run the same command again.

    Raises
    ------
    ConfigError
        Bad sweep file, base file or ``index`` (on every rank).
    InputError
        The output folder cannot be created (on every rank).
    """
    base, rpm, models = read_sweep(path)
    n = len(models)
    if index is not None and not 0 <= index < n:
        raise ConfigError(f"sweep --index {index}: out of range; {path} has {n} model(s), "
                          f"valid indices are 0 to {n - 1}")
    load_config(str(base))  # a bad base file is bad input for the whole sweep
    check_models(path, base, models)
    size, rank = world.Get_size(), world.Get_rank()
    outdir = Path(output or Path("runs") / Path(path).stem)
    err = None
    if rank == 0:
        from cmc.rundir import check_writable

        try:
            outdir.mkdir(parents=True, exist_ok=True)
            check_writable(outdir)  # sweep.log, every model's folder: before any work
        except OSError as exc:
            err = ((EXIT_IO, str(not_writable(outdir, exc))) if is_not_writable(exc) else
                   (EXIT_INPUT, f"cannot create output folder {outdir}: {exc.strerror or exc}"))
    err = world.bcast(err, root=0)
    if err:
        fail = InputError(err[1])
        fail.exit_code = err[0]  # 4 for a folder that cannot be written, as in every command
        raise fail

    if index is not None:
        comm, n_groups, group, active = world, 1, 0, True
    else:
        n_groups = max(1, size // rpm)
        group = rank // rpm
        active = group < n_groups
        comm = world.Split(group if active else n_groups, rank) if size > 1 else world
    leader = active and comm.Get_rank() == 0
    fh = _setup_logging(rank, leader, outdir / "sweep.log")
    records: list[dict] = []
    counter: _LocalCounter | _SharedCounter | None = None
    try:
        if rank == 0:
            if index is not None:
                log.info("sweep %s: model %d of %d (array task) on %d rank(s); output in %s",
                         path, index, n, size, outdir)
            else:
                log.info("sweep %s: %d model(s), %d group(s) of %d rank(s)%s; output in %s",
                         path, n, n_groups, comm.Get_size(),
                         f", {size - n_groups * rpm} rank(s) idle"
                         if size > n_groups * rpm else "", outdir)
                if rpm > size:
                    log.warning("sweep.ranks_per_model = %d but only %d rank(s): one group of "
                                "%d", rpm, size, size)
        with _Signals() as signals:
            if index is not None:
                rec = run_model(index, models[index], base, comm, outdir, signals)
                if rec is not None:
                    records.append(rec)
                    _try_rebuild(outdir, models, {index: rec})
            else:
                counter = _SharedCounter(world) if n_groups > 1 else _LocalCounter()
                while active:
                    stop = _any_flag(comm, bool(signals.signum))
                    i = (n if stop else counter.next()) if leader else None
                    i = comm.bcast(i, root=0)
                    if i >= n:
                        if stop:
                            log.warning("signal: taking no further model")
                        break
                    rec = run_model(i, models[i], base, comm, outdir, signals)
                    if rec is not None:
                        records.append(rec)
                        _try_rebuild(outdir, models, {i: rec})
                gathered = world.gather(records, root=0)
                code = None
                if rank == 0:
                    allrec = sorted((r for part in gathered for r in part),
                                    key=lambda r: r["index"])
                    _try_rebuild(outdir, models, {r["index"]: r for r in allrec})
                    code = sweep_exit_code(allrec, n)
                    counts = {s: sum(r["status"] == s for r in allrec)
                              for s in ("finished", "resumable", "failed", "busy")}
                    log.info("sweep done: %d of %d model(s) looked at (%s); summary in %s",
                             len(allrec), n,
                             ", ".join(f"{v} {k}" for k, v in counts.items() if v),
                             outdir / "summary.tsv")
                return int(world.bcast(code, root=0))
        code = sweep_exit_code(records, 1) if rank == 0 else None
        return int(world.bcast(code, root=0))
    finally:
        if counter is not None:
            counter.free()
        if comm is not world:
            comm.Free()
        if fh is not None:
            logging.getLogger("cmc").removeHandler(fh)
            fh.close()


# ---------------------------------------------------------------------------- command line
def _error(msg: str, world: Any = None) -> None:
    if world is None or world.Get_rank() == 0:
        _err(msg)


def cmd_sweep(args: argparse.Namespace) -> int:
    """``cmc sweep SWEEP.ini [-o OUT] [--index I]``."""
    world = _world()
    _warm_kernels(world)
    index = args.index
    if index is None and os.environ.get("SLURM_ARRAY_TASK_ID", "").strip():
        raw = os.environ["SLURM_ARRAY_TASK_ID"].strip()
        try:
            index = int(raw)
        except ValueError:
            _error(f"SLURM_ARRAY_TASK_ID={raw!r} is not a model index; pass --index", world)
            return EXIT_INPUT
        setup_logging(world.Get_rank())
        log.info("array task: --index %d from SLURM_ARRAY_TASK_ID", index)
    try:
        return run_sweep(args.sweep, world, args.output, index=index)
    except ConfigError as exc:
        _error(str(exc), world)
        return EXIT_INPUT
    except CmcError as exc:
        _error(str(exc), world)
        return exc.exit_code


def cmd_summary(args: argparse.Namespace) -> int:
    """``cmc summary OUTDIR``: print the sweep's summary table."""
    try:
        rows = read_summary(args.outdir)
    except InputError as exc:
        _error(str(exc))
        return EXIT_INPUT
    sys.stdout.write(format_summary(rows) + "\n")
    return EXIT_OK


def register(subparsers: Any) -> None:
    """Add the ``sweep`` and ``summary`` subcommands to an argparse subparsers object."""
    sw = subparsers.add_parser(
        "sweep", help="run a grid of models (under mpiexec: in parallel)",
        description="Run every model of a sweep file, or one with --index.  Running the same "
        "command again skips finished models and continues unfinished ones.")
    sw.add_argument("sweep", help="sweep INI file")
    sw.add_argument("-o", "--output", help="output folder (default runs/<sweep name>)")
    sw.add_argument("--index", type=int, metavar="I",
                    help="run model I alone, on all ranks (an array task); default "
                    "$SLURM_ARRAY_TASK_ID when set, else every model")
    sw.set_defaults(func=cmd_sweep)
    sm = subparsers.add_parser("summary", help="print the summary table of a sweep",
                               description="Print OUTDIR/summary.json as a table: model, "
                               "parameters, status, stop reason, wall time.")
    sm.add_argument("outdir", help="the sweep's output folder")
    sm.set_defaults(func=cmd_summary)
