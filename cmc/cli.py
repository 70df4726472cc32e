"""Command line: ``cmc run | restart | nbody | ic | plot | params | sweep | summary``.

Only this module touches ``MPI.COMM_WORLD`` (through :func:`cmc.launch._world`, which
``cmc sweep`` shares).  Exit codes are those of :mod:`cmc.errors`
(README, "Exit codes"): 0 finished, 2 bad input, 3 physics failure, 4 I/O failure,
75 stopped early but resumable, 1 internal error, 130 interrupted during set-up.

Errors never leave ranks waiting: an error that every rank sees (a bad parameter, a bad
checkpoint read by rank 0 and broadcast) ends every rank with the same code and one line from
rank 0; any other exception on one rank prints one line from that rank and aborts the whole
job (``MPI_Abort``), so no rank spins in a collective until the wall-clock limit.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import time
import traceback
from pathlib import Path

from cmc.config import ConfigError, load_config, parameter_table
from cmc.errors import (
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_IO,
    EXIT_PHYSICS,
    CmcError,
    InputError,
    exit_code_for_stop,
    is_disk_full,
    is_not_writable,
    not_writable,
)
from cmc.launch import _WORLD, _acquire, _err, _set_threads, _warm_kernels, _world
from cmc.log import log_file, log_traceback, setup_logging

log = logging.getLogger("cmc.cli")

#: seconds a rank that fails alone waits between printing its error line and MPI_Abort, so the
#: launcher forwards the line before it kills the job
ABORT_GRACE_S = 0.5


def _on_root(comm, fn):
    """Run ``fn()`` on rank 0 and broadcast its result; an :class:`InputError` or OSError
    there is raised on every rank (collectively, so nobody aborts)."""
    out: object = None
    if comm.Get_rank() == 0:
        try:
            out = ("ok", fn())
        except CmcError as exc:
            out = ("err", exc.exit_code, str(exc))
        except OSError as exc:
            if is_not_writable(exc):  # exit 4, as in every command
                out = ("err", EXIT_IO, str(not_writable(exc.filename or "a file", exc)))
            else:
                code = EXIT_IO if is_disk_full(exc) else EXIT_INPUT
                where = f"{exc.filename}: " if exc.filename else ""
                out = ("err", code, f"{where}{exc.strerror or exc}")
    out = comm.bcast(out, root=0)
    if out[0] == "err":
        exc = InputError(out[2])
        exc.exit_code = out[1]
        exc.collective = True
        raise exc
    return out[1]


def _prepare_run_dir(outdir: Path, cfg, args, lock) -> str:
    """On rank 0: check ``outdir``, take its lock, clear it or find the run to resume.
    Returns ``new``, ``finished`` or the path of the checkpoint to resume from."""
    from cmc.rundir import clear_outputs, run_outputs, run_status

    if outdir.exists() and not outdir.is_dir():
        raise InputError(f"output path {outdir} exists and is not a directory")
    _acquire(lock, outdir)
    status = run_status(outdir)
    outputs = run_outputs(outdir)
    if args.resume and status.kind in ("finished", "resumable", "failed"):
        if (outdir / "config.ini").exists() and not _same_config(outdir / "config.ini", cfg):
            raise InputError(f"{outdir} holds a run with other parameters than {args.config}; "
                             "use another -o, or --overwrite")
        if status.kind == "finished":
            return "finished"
        if status.kind == "failed":
            raise InputError(f"{outdir} holds {status.describe()}; inspect it, or start "
                             "afresh with --overwrite")
        return str(status.checkpoint)
    if args.resume and status.kind == "damaged":
        raise InputError(f"{outdir} holds {status.describe()}; inspect it (cmc restart names "
                         "the damage) or start afresh with --overwrite")
    if outputs and status.kind == "unstarted" and not (args.overwrite or args.resume):
        # nothing to continue: 'cmc restart' would say "no checkpoint"
        raise InputError(f"{outdir} already holds a run that wrote no checkpoint (it failed "
                         "or was killed during set-up; its cmc.log says why): start it afresh "
                         "with --overwrite")
    if outputs and not (args.overwrite or (args.resume and status.kind == "unstarted")):
        raise InputError(f"{outdir} already holds {status.describe()}: continue it with "
                         f"'cmc restart {outdir}' (or cmc run --resume), or replace it with "
                         "--overwrite")
    if outputs:
        n = clear_outputs(outdir)
        log.info("removed %d output(s) of the previous run in %s", n, outdir)
    (outdir / "config.ini").write_text(cfg.to_ini())
    return "new"


def _same_config(path: Path, cfg) -> bool:
    try:
        old = load_config(str(path))
    except ConfigError:
        return False
    return old.to_ini() == cfg.to_ini()


def _is_hdf5(path: str) -> bool:
    """Whether ``path`` is an HDF5 file (by its signature; false for a missing file)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return False
    return head == b"\x89HDF\r\n\x1a\n"


#: Names of HDF5 files: ``cmc run FILE`` with one of these takes FILE as initial conditions.
HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")


def _refuse_false_hdf5(path: str) -> None:
    """Raise :class:`InputError` for ``cmc run FILE.h5`` where FILE.h5 is missing or not HDF5
    (garbage, a cut copy), which would otherwise be read as a parameter file and called
    "parameter file ... not a text (INI) file"."""
    if Path(path).suffix.lower() not in HDF5_SUFFIXES or _is_hdf5(path):
        return
    if not Path(path).exists():
        raise InputError(f"cannot read {path}: no such file (initial conditions to run)")
    raise InputError(f"{path}: not an HDF5 file (no HDF5 signature: damaged, or another "
                     "format); cmc run takes initial conditions in HDF5 (ours or COSMIC's) "
                     "or a parameter file (INI)")


def cmd_run(args) -> int:
    from cmc.rundir import RunLock

    comm = _world()
    overrides = list(args.set or [])
    if args.emulate_ranks is not None:
        overrides.append(f"run.emulate_ranks={args.emulate_ranks}")
    if args.orbit_backend is not None:
        overrides.append(f"run.orbit_backend={args.orbit_backend}")
    if args.overwrite and args.resume:
        raise InputError("--overwrite and --resume exclude each other")
    try:
        from cmc.cosmic import refuse_fits

        refuse_fits(args.config)  # rather than "not a text (INI) file"
        _refuse_false_hdf5(args.config)  # likewise
        if _is_hdf5(args.config):
            # an initial-conditions file (ours or COSMIC's) run with the default parameters
            import h5py

            try:
                h5py.File(args.config, "r").close()
            except OSError as exc:
                raise InputError(f"{args.config}: not a readable HDF5 file (damaged or "
                                 f"truncated?): {exc}") from None
            cfg = load_config(None, ["initial.model=file",
                                     f"initial.file={Path(args.config).resolve()}"] + overrides)
        else:
            cfg = load_config(args.config, overrides)
    except ConfigError as exc:
        exc.collective = True
        raise
    from cmc.processes.orbits import check_orbit_backend

    check_orbit_backend(cfg.run.orbit_backend, comm)  # before anything is written
    outdir = Path(args.output or Path("runs") / Path(args.config).stem)
    lock = RunLock(outdir)
    fresh = not outdir.exists()  # (rank 0's view counts: it makes the folder, and clears it)
    what = sim = None
    undo = False
    try:
        what = _on_root(comm, lambda: _prepare_run_dir(outdir, cfg, args, lock))
        if what == "finished":
            if comm.Get_rank() == 0:
                from cmc.rundir import run_status

                st = run_status(outdir)
                sys.stderr.write(f"cmc: {outdir} holds a finished run ({st.stop_reason} at "
                                 f"step {st.step}); nothing to do (results in {outdir}; "
                                 "--overwrite starts afresh)\n")
            return 0
        setup_logging(comm.Get_rank(), str(outdir / "cmc.log"))
        _set_threads(cfg.run.threads, comm)
        _warm_kernels(comm)
        from cmc.simulation import Simulation

        if what != "new":
            log.info("cmc run --resume: continuing the run in %s from %s", outdir, what)
            sim = Simulation.from_checkpoint(what, comm, outdir=outdir)
        else:
            log.info("cmc run %s on %d rank(s); output in %s", args.config, comm.Get_size(),
                     outdir)
            sim = Simulation.create(cfg, comm, outdir)
        return _finish(sim, outdir)
    except (CmcError, ConfigError, KeyboardInterrupt):
        # a new run whose set-up failed (bad initial conditions, too large for the memory,
        # Ctrl-C) leaves nothing behind: its config.ini and cmc.log would make the folder
        # look like a run killed during set-up and block the next cmc run
        undo = what == "new" and sim is None
        raise
    finally:
        lock.release()
        if undo and comm.Get_rank() == 0:
            _remove_new_run(outdir, fresh)


def _remove_new_run(outdir: Path, fresh: bool) -> None:
    """On rank 0: remove what a new run wrote before its set-up failed (its outputs, and the
    folder with its lock file when the run made it).  The log file is closed first, so that
    nothing writes it again; the error line goes to the terminal."""
    from cmc.rundir import LOCK_NAME, clear_outputs

    setup_logging(0)
    try:
        clear_outputs(outdir)
        if fresh:
            (outdir / LOCK_NAME).unlink(missing_ok=True)
            outdir.rmdir()  # only if nothing else was put there meanwhile
    except OSError:
        pass


def _finish(sim, outdir: Path) -> int:
    reason = sim.run()
    code = exit_code_for_stop(reason)
    if code == EXIT_PHYSICS and sim.rank == 0:
        _err(f"the run stopped with a physics failure ({reason}) at step {sim.state.step}; "
             f"see {outdir / 'cmc.log'}")
    hint = {0: f"plot with: cmc plot {outdir}", 75: f"continue with: cmc restart {outdir}"}
    log.info("done (%s, exit %d); results in %s (diagnostics.h5, snapshots/, checkpoint.h5); "
             "%s", reason, code, outdir, hint.get(code, "see the log above"))
    return code


def _pick_checkpoint(outdir: Path, name: str | None) -> Path:
    """On rank 0: the verified checkpoint to restart from; a damaged one is reported with
    the name of the newest intact older one.  Newer damaged files are set aside."""
    from cmc.io import checkpoint_files, verify_checkpoint

    latest = outdir / "checkpoint.h5"
    files = checkpoint_files(latest)
    if name:
        ck = Path(name) if Path(name).is_absolute() else outdir / name
        if not ck.exists():
            raise InputError(f"no checkpoint {ck}")
    elif not files:
        raise InputError(f"no checkpoint in {outdir} (checkpoint.h5)")
    else:
        ck = files[0]
    try:
        verify_checkpoint(ck)
    except InputError as exc:
        intact = []
        for f in files:
            if f == ck:
                continue
            try:
                verify_checkpoint(f)
                intact.append(f)
            except InputError:
                continue
        if intact:
            import h5py

            with h5py.File(intact[0], "r") as fh:
                step = int(fh["state"].attrs["step"])
            raise InputError(f"{exc}; the checkpoint {intact[0].name} (step {step}) is intact: "
                             f"cmc restart {outdir} --checkpoint {intact[0].name}") from None
        raise
    if ck.parent == outdir and ck != latest and ck in files:
        # going back to an older checkpoint: the newer ones are set aside (not deleted) so
        # that rotation cannot push the one we restart from out of the kept set
        for f in files[: files.index(ck)]:
            f.rename(f.with_name(f.name + ".damaged"))
        ck.rename(latest)
        ck = latest
    return ck


def cmd_restart(args) -> int:
    from cmc.rundir import RunLock

    comm = _world()
    outdir = Path(args.outdir)
    if not outdir.is_dir():
        raise InputError(f"no run directory {outdir}")
    lock = RunLock(outdir)
    try:
        def prepare():
            lock.acquire()
            return str(_pick_checkpoint(outdir, args.checkpoint))

        ck = Path(_on_root(comm, prepare))
        setup_logging(comm.Get_rank(), str(outdir / "cmc.log"))
        from cmc.simulation import Simulation

        overrides = list(args.set or [])
        if args.orbit_backend is not None:
            overrides.append(f"run.orbit_backend={args.orbit_backend}")
        try:
            sim = Simulation.from_checkpoint(ck, comm, overrides=overrides or None,
                                             outdir=outdir)
        except (InputError, ConfigError) as exc:
            exc.collective = True
            raise
        _set_threads(sim.cfg.run.threads, comm)
        if comm.Get_rank() == 0:
            (outdir / "config.ini").write_text(_config_with_history(sim))
        _warm_kernels(comm)
        log.info("restart from %s at step %d (t = %.4f t_rh0)%s", ck, sim.state.step,
                 sim.state.time / sim.state.t_rh0,
                 f" with {' '.join(overrides)}" if overrides else "")
        return _finish(sim, outdir)
    finally:
        lock.release()


def _config_with_history(sim) -> str:
    import json

    lines = [f"# restart at step {s}: --set {ov}" for s, ov in json.loads(sim.state.overrides)]
    return "".join(f"{x}\n" for x in lines) + sim.cfg.to_ini()


def cmd_ic(args) -> int:
    overrides = [f"initial.model={args.model}", f"initial.n={args.n}",
                 f"initial.seed={args.seed}"] + list(args.set or [])
    if args.w0 is not None:
        overrides.append(f"initial.w0={args.w0}")
    if args.model == "file":
        if not args.input:
            raise InputError("cmc ic file: give the file to convert with --input FILE")
        overrides.append(f"initial.file={args.input}")
    elif args.input:
        raise InputError(f"--input: only with the model 'file', not {args.model!r}")
    cfg = load_config(None, overrides)
    import numpy as np

    from cmc import __version__
    from cmc.initial import build_initial_stars, physical_scale
    from cmc.io import write_snapshot

    out = Path(args.output)
    if not out.parent.is_dir():
        raise InputError(f"cannot write {out}: the directory {out.parent} does not exist")
    if out.is_dir():
        raise InputError(f"cannot write {out}: it is a directory (give a file name)")
    if (out.exists() or out.is_symlink()) and not args.overwrite:
        # it may be another model's initial conditions or a run's diagnostics.h5: never
        # replace a file without being asked, as cmc run does with a run's folder
        raise InputError(f"{out} exists: give another -o, or --overwrite to replace it")
    stars, info = build_initial_stars(cfg)
    setup_logging(0)
    if args.format == "cosmic":
        from cmc.cosmic import in_nbody_units, main_sequence_types, write_cosmic
        from cmc.initial import to_henon_units

        if not in_nbody_units(stars):
            # a snapshot of a run (mass lost, energy changed): CMC needs N-body units
            to_henon_units(stars, str(args.input or args.model))
        if args.model != "file":
            # a model drawn here has no stellar types yet: main-sequence stars as COSMIC's
            # sampler types them (BSE k = 0 up to 0.7 Msun, 1 above), for CMC's stellar
            # evolution
            main_sequence_types(stars)
        m_unit, length_pc, _ = physical_scale(cfg, info, float(np.sum(stars["m"])))
        write_cosmic(out, stars, float(np.sum(stars["m"])) * m_unit, length_pc,
                     r_tidal=float(info.get("r_tidal", 0.0)),
                     metallicity=float(info.get("metallicity", args.metallicity)))
        log.info("wrote %d objects (%s) to %s in COSMIC's InitialCMCTable layout", len(stars["r"]),
                 args.model, out)
        return 0
    attrs = {"model": args.model, "r_tidal": info["r_tidal"], "seed": args.seed,
             "cmc_version": __version__, "config": cfg.to_ini()}
    for key in ("unit_length_pc", "metallicity"):
        if key in info:
            attrs[key] = info[key]
    try:
        write_snapshot(out, stars, attrs)
    except OSError as exc:
        if isinstance(exc, CmcError):
            raise
        if is_not_writable(exc):
            raise not_writable(out, exc) from None
        raise InputError(f"cannot write {out}: {exc.strerror or exc}") from None
    log.info("wrote %d stars (%s) to %s", len(stars["r"]), args.model, out)
    return 0


def cmd_convert_ini(args) -> int:
    from cmc.cmc_params import convert_cmc_ini

    conv = convert_cmc_ini(args.cmc_ini)
    text = conv.ini()
    for name, value, why in conv.not_honoured:
        sys.stderr.write(f"cmc convert-ini: not honoured: {name} = {value}: {why}\n")
    sys.stderr.write(f"cmc convert-ini: {len(conv.mapped)} parameter(s) mapped, "
                     f"{len(conv.not_honoured)} not honoured (listed above and as comments in "
                     "the output)\n")
    sys.stdout.write(text)
    return 0


def cmd_export(args) -> int:
    from cmc.export import export_cmc

    setup_logging(0)
    export_cmc(args.outdir, args.output, prefix=args.prefix)
    return 0


def cmd_plot(args) -> int:
    from cmc.plot import plot_run

    try:
        path = plot_run(args.outdir, physical=args.physical)
    except (OSError, KeyError, ValueError) as exc:
        if is_not_writable(exc):
            raise not_writable(exc.filename or args.outdir, exc) from None
        raise InputError(f"cannot plot {args.outdir}: {exc}") from None
    setup_logging(0)
    log.info("wrote %s", path)
    return 0


def cmd_compare(args) -> int:
    from cmc.compare import compare_runs, summary_lines

    try:
        png, js = compare_runs(args.outdirs, args.output)
    except (OSError, KeyError, ValueError) as exc:
        if is_not_writable(exc):
            raise not_writable(exc.filename or args.output, exc) from None
        raise InputError(f"cannot compare {' '.join(args.outdirs)}: {exc}") from None
    setup_logging(0)
    for line in summary_lines(js):
        log.info("%s", line)
    log.info("wrote %s and %s", png, js)
    return 0


def cmd_params(args) -> int:
    sys.stdout.write(parameter_table() + "\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from cmc import __version__, sweep

    p = argparse.ArgumentParser(prog="cmc", description="Hénon Monte Carlo star cluster code")
    p.add_argument("--version", action="version", version=f"cmc (henon-cmc) {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a model from a parameter file")
    r.add_argument("config", help="INI parameter file, or an initial-conditions HDF5 file (ours "
                   "or COSMIC's) to run with the default parameters")
    r.add_argument("-o", "--output", help="output folder (default runs/<config name>)")
    r.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override a parameter (repeatable)")
    r.add_argument("--emulate-ranks", type=int, metavar="P",
                   help="serial run reproducing the random streams of a P-rank MPI run")
    r.add_argument("--orbit-backend", choices=("cpu", "gpu", "gpu-sim"),
                   help="where new orbits are computed (run.orbit_backend): cpu, gpu (CUDA "
                   "through CuPy, the 'gpu' extra) or gpu-sim (the GPU kernel simulated on "
                   "the CPU; slow)")
    r.add_argument("--overwrite", action="store_true",
                   help="remove the outputs of a run already in the folder and start afresh")
    r.add_argument("--resume", action="store_true",
                   help="continue the run in the folder from its checkpoint if it has one "
                   "(a finished run is reported and left alone); else start it")
    r.set_defaults(func=cmd_run)
    rs = sub.add_parser("restart", help="continue a run from OUTDIR/checkpoint.h5")
    rs.add_argument("outdir", help="run folder (written by cmc run)")
    rs.add_argument("--checkpoint", metavar="FILE",
                    help="restart from this checkpoint of OUTDIR (e.g. checkpoint.1.h5)")
    rs.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                    help="change a parameter (e.g. run.max_steps) for the continuation")
    rs.add_argument("--orbit-backend", choices=("cpu", "gpu", "gpu-sim"),
                    help="continue with new orbits on this back end (run.orbit_backend; the "
                    "checkpoint is the same whichever computed it)")
    rs.set_defaults(func=cmd_restart)
    from cmc.cli_nbody import add_nbody_parser  # (it imports this module's helpers)

    add_nbody_parser(sub)
    ic = sub.add_parser("ic", help="write initial conditions to HDF5")
    ic.add_argument("model", choices=("plummer", "king", "file"),
                    help="model to draw, or 'file' to convert --input (a cmc snapshot or a "
                    "COSMIC file)")
    ic.add_argument("--input", metavar="FILE", help="file to convert (with the model 'file')")
    ic.add_argument("--format", choices=("cmc", "cosmic"), default="cmc",
                    help="cmc (our snapshot layout) or cosmic (COSMIC's InitialCMCTable HDF5, "
                    "which CMC-COSMIC reads)")
    ic.add_argument("--metallicity", type=float, default=0.02,
                    help="Z written to a COSMIC file when the input carries none")
    ic.add_argument("--n", type=int, default=10000,
                    help="number of objects to draw (initial.n, at least 40; default 10000)")
    ic.add_argument("--seed", type=int, default=1,
                    help="seed of the random streams (initial.seed; default 1)")
    ic.add_argument("--w0", type=float,
                    help="central potential W0 of a King model (initial.w0, 1-12; default 6)")
    ic.add_argument("--set", action="append", metavar="initial.KEY=VALUE",
                    help="any other [initial] parameter, e.g. initial.mass_function=kroupa "
                    "(repeatable; cmc params lists them)")
    ic.add_argument("-o", "--output", required=True,
                    help="the HDF5 file to write (an existing one only with --overwrite)")
    ic.add_argument("--overwrite", action="store_true",
                    help="replace the output file if it exists (else an existing file is "
                    "refused)")
    ic.set_defaults(func=cmd_ic)
    cv = sub.add_parser("convert-ini", help="a CMC-COSMIC parameter file as ours (to stdout; "
                        "the parameters it cannot honour to stderr)")
    cv.add_argument("cmc_ini", help="CMC-COSMIC INI file ([cmc] and [bse] sections)")
    cv.set_defaults(func=cmd_convert_ini)
    ex = sub.add_parser("export", help="a run's outputs in another code's formats (CMC: "
                        "dyn.dat, lagrad.dat, esc.dat, conv.sh, snapshots)")
    ex.add_argument("outdir", help="run folder")
    ex.add_argument("--format", choices=("cmc",), default="cmc",
                    help="cmc: CMC-COSMIC's files (docs/cmc_formats.md)")
    ex.add_argument("-o", "--output", help="folder for the files (default OUTDIR/cmc)")
    ex.add_argument("--prefix", default="initial",
                    help="file name prefix, CMC's output prefix (default: initial)")
    ex.set_defaults(func=cmd_export)
    pl = sub.add_parser("plot", help="plot r_c/r_h, rho_c and Lagrange radii of a run")
    pl.add_argument("outdir", help="run folder (written by cmc run)")
    pl.add_argument("--physical", action="store_true",
                    help="time in Myr, radii in pc, masses in Msun, drawn to "
                    "OUTDIR/evolution_physical.png (evolution.png is left as it is)")
    pl.set_defaults(func=cmd_plot)
    cp = sub.add_parser("compare", help="Monte Carlo and N-body runs side by side: Lagrange "
                        "radii, r_c/r_h, N_core, binaries, mass against t/t_rh0, ensembles of "
                        "seeds shaded (one PNG, one JSON)")
    cp.add_argument("outdirs", nargs="+", help="run folders (cmc run or cmc nbody)")
    cp.add_argument("-o", "--output", default="compare",
                    help="PREFIX of PREFIX.png and PREFIX.json (default: compare)")
    cp.set_defaults(func=cmd_compare)
    pa = sub.add_parser("params", help="list every parameter with unit and default")
    pa.set_defaults(func=cmd_params)
    if hasattr(sweep, "register"):
        sweep.register(sub)
    return p


def _classify(exc: BaseException) -> tuple[int, str]:
    """Exit code and one-line message of an exception that ended a command."""
    if isinstance(exc, CmcError | ConfigError):
        return getattr(exc, "exit_code", EXIT_INPUT), str(exc)
    if isinstance(exc, OSError | RuntimeError) and is_disk_full(exc):
        return EXIT_IO, f"disk full: {exc}; the last good checkpoint is intact"
    if isinstance(exc, OSError):
        if is_disk_full(exc):
            return EXIT_IO, f"disk full: {exc}; the last good checkpoint is intact"
        if is_not_writable(exc):
            # h5py names the file only inside its message ("name = '...'")
            name = re.search(r"name = '([^']*)'", str(exc))
            return EXIT_IO, str(not_writable(exc.filename or (name and name.group(1))
                                             or "an output", exc))
        where = f"{exc.filename}: " if exc.filename else ""
        return EXIT_IO, f"I/O error: {where}{exc.strerror or exc}"
    if isinstance(exc, MemoryError):
        return EXIT_INTERNAL, "out of memory"
    from cmc.log import log_file

    where = f"the traceback is in {log_file()}" if log_file() else "traceback above"
    return EXIT_INTERNAL, (f"internal error: {type(exc).__name__}: {exc} (a bug; {where}; "
                           "please report it)")


def _append_to_log(text: str) -> None:
    """Append ``text`` to this process's log file, if there is one (never raises)."""
    path = log_file()
    if path:
        try:
            with open(path, "a") as fh:
                fh.write(text)
        except OSError:
            pass


def _unraisable_to_log(unraisable) -> None:
    """Errors raised while objects are freed (HDF5 handles of a file that failed to write)
    go to the log file, not the terminal: the command's one line already says what failed."""
    _append_to_log(f"ignored while freeing {unraisable.object!r}: "
                   f"{type(unraisable.exc_value).__name__}: {unraisable.exc_value}\n")


def _excepthook_to_log(exc_type, exc, tb) -> None:
    _append_to_log("".join(traceback.format_exception(exc_type, exc, tb)))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    sys.unraisablehook = _unraisable_to_log
    # Cython reports an error in a deallocator through sys.excepthook first (h5py, when the
    # disk is full); main catches everything else itself
    sys.excepthook = _excepthook_to_log
    try:
        return args.func(args)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _err("interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:
        code, msg = _classify(exc)
        collective = getattr(exc, "collective", False)
        if code == EXIT_INTERNAL:
            if log_file():
                log_traceback(exc)
            else:
                traceback.print_exc(file=sys.stderr)
        world = _WORLD[0] if _WORLD else None
        size = world.Get_size() if world is not None else 1
        if not collective or size == 1 or world.Get_rank() == 0:
            rank = f"[rank {world.Get_rank()}] " if size > 1 else ""
            _err(f"{rank}{msg}")
        if size > 1 and not collective:
            # this rank alone failed: end every rank now rather than leave them waiting.  The
            # launcher may tear down its output forwarding before it has read this rank's
            # stderr (seen once in CI: MPICH's hydra lost the line); the line also goes to the
            # rank's log file, and the short wait lets the forwarder drain the pipe first
            _append_to_log(f"cmc: error: {rank}{msg}\n")
            time.sleep(ABORT_GRACE_S)
            world.Abort(code)
        return code


def entry() -> None:
    """Console entry point (``cmc``, ``python -m cmc``).  After an I/O failure the process
    ends without the interpreter's teardown: HDF5 objects of a file that could not be written
    can crash while they are freed (a segmentation fault on a full disk)."""
    code = main()
    if code == EXIT_IO:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
