"""Command line of the direct N-body mode: ``cmc nbody CONFIG -o OUTDIR`` and ``cmc nbody
--restart OUTDIR`` (:mod:`cmc.nbody`; its parser is added to ``cmc``'s by
:func:`add_nbody_parser`, from :func:`cmc.cli.build_parser`)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from cmc.config import ConfigError, load_config
from cmc.errors import EXIT_PHYSICS, InputError, exit_code_for_stop
from cmc.launch import _acquire, _err, _set_threads, _world
from cmc.log import setup_logging

log = logging.getLogger("cmc.cli")


def cmd_nbody(args) -> int:
    """``cmc nbody CONFIG -o OUTDIR``: the same initial stars by direct N-body
    (:mod:`cmc.nbody`); numba threads, and under ``mpiexec`` every rank a share of each
    block's forces (:mod:`parallel.nbody_forces`: the same bits).  ``cmc nbody --restart
    OUTDIR``: continue it from OUTDIR/checkpoint.h5."""
    from cmc.nbody import DT_OUT, NBodyRun, resume, use_forces
    from cmc.nbody_checkpoint import CHECKPOINT
    from cmc.rundir import RunLock

    comm = _world()
    rank0 = comm.Get_rank() == 0
    try:  # (every rank reads the same input and fails alike)
        if args.restart:
            if args.config or args.output or args.set or args.overwrite:
                raise InputError("cmc nbody --restart OUTDIR: no CONFIG, -o, --set or "
                                 "--overwrite (the run continues as its checkpoint holds it)")
            outdir = Path(args.restart)
            if not outdir.is_dir():
                raise InputError(f"no run directory {outdir}")
        elif args.config is None or args.output is None:
            raise InputError("cmc nbody: give CONFIG -o OUTDIR, or --restart OUTDIR")
        else:
            cfg = load_config(args.config, list(args.set or []))
            outdir = Path(args.output)
            if outdir.exists() and not outdir.is_dir():
                raise InputError(f"output path {outdir} exists and is not a directory")
            if (outdir / "diagnostics.h5").exists() and not args.overwrite:
                raise InputError(f"{outdir} already holds a run (diagnostics.h5): give another "
                                 f"-o, --overwrite to replace it, or cmc nbody --restart "
                                 f"{outdir}")
            _set_threads(cfg.run.threads, comm)
            run = NBodyRun(cfg, None, t_end=args.t_end,
                           dt_out=DT_OUT if args.dt_out is None else args.dt_out,
                           eta=args.eta, order=4 if args.order is None else args.order,
                           pair_gamma=args.pair_gamma, pair_dt=args.pair_dt,
                           eta_close=args.eta_close, comm=comm)
    except (InputError, ConfigError) as exc:
        exc.collective = True
        raise
    comm.Barrier()  # (rank 0 looks at the folder next; the others have read it)
    lock = RunLock(outdir) if rank0 else None
    if lock is not None:
        _acquire(lock, outdir)
    try:
        if args.restart:
            try:
                run = resume(outdir, t_end=args.t_end, order=args.order, eta=args.eta,
                             dt_out=args.dt_out, pair_gamma=args.pair_gamma,
                             pair_dt=args.pair_dt, eta_close=args.eta_close, comm=comm)
            except InputError as exc:
                exc.collective = True
                raise
            _set_threads(run.cfg.run.threads, comm)
        elif rank0:
            (outdir / "diagnostics.h5").unlink(missing_ok=True)
            (outdir / CHECKPOINT).unlink(missing_ok=True)
            (outdir / "config.ini").write_text(cfg.to_ini())
        try:
            forces = use_forces(run, args.forces)
        except InputError as exc:
            exc.collective = True
            raise
        setup_logging(comm.Get_rank(), str(outdir / "cmc.log"))
        log.info("cmc nbody %s: N = %d, from t = %.6g to %.6g N-body units (%.4g t_rh0), "
                 "outputs every %g, Hermite order %d, eta = %g (%g below pair_dt), close pairs: "
                 "pair_gamma = %g, pair_dt = %g, %d rank(s), forces on %s; output in %s",
                 f"--restart {outdir}" if args.restart else args.config, run.n0, run.nb.time,
                 run.t_end, run.t_end / run.t_rh0_nb, run.dt_out, run.nb.order, run.nb.eta,
                 run.nb.eta_close or run.nb.eta,
                 run.nb.pair_gamma, run.nb.pair_dt, comm.Get_size(), forces, outdir)
        run.outdir = outdir
        reason = run.run()
    finally:
        if lock is not None:
            lock.release()
    code = exit_code_for_stop(reason)
    if code == EXIT_PHYSICS and rank0:
        _err(f"the N-body run stopped with a physics failure ({reason}) at t = "
             f"{run.nb.time:.6g} N-body units; see {outdir / 'cmc.log'}")
    log.info("done (%s, exit %d); results in %s (diagnostics.h5, checkpoint.h5)%s", reason,
             code, outdir, f"; continue with: cmc nbody --restart {outdir}" if code == 75 else "")
    return code



def add_nbody_parser(sub) -> argparse.ArgumentParser:
    """The ``nbody`` sub-command's parser, added to ``sub`` (the ``cmc`` sub-parsers)."""
    nb = sub.add_parser("nbody", help="the same initial stars as cmc run, by direct N-body "
                        "(Hermite, block time steps; single stars, isolated)")
    nb.add_argument("config", nargs="?", help="INI parameter file (as for cmc run)")
    nb.add_argument("-o", "--output", help="output folder")
    nb.add_argument("--restart", metavar="OUTDIR",
                    help="continue the run in OUTDIR from its checkpoint.h5 (with --t-end: to "
                    "a later end)")
    nb.add_argument("--t-end", type=float, metavar="T",
                    help="end time in N-body units (default: run.t_max in t_rh0 converted)")
    nb.add_argument("--dt-out", type=float, metavar="D",
                    help="output interval in N-body units, a power of two (default 0.125)")
    nb.add_argument("--order", type=int, choices=(4, 6),
                    help="order of the Hermite integrator: 4 (default) or 6 (Nitadori & "
                    "Makino 2008)")
    nb.add_argument("--eta", type=float,
                    help="accuracy parameter of the time-step criterion (default 0.02 for "
                    "--order 4, Aarseth's; 0.4 for --order 6, Nitadori & Makino's)")
    nb.add_argument("--eta-close", type=float, metavar="E",
                    help="accuracy parameter of the steps below --pair-dt, the bodies of a "
                    "strong encounter (default eta/2 at --order 6, eta/4 at 4; 0: eta; may "
                    "change on --restart)")
    nb.add_argument("--pair-gamma", type=float, metavar="G",
                    help="tidal perturbation below which a bound close pair is carried as a "
                    "Kepler orbit under its perturbers' tide (default 1e-4; 0: no close-pair "
                    "treatment; may change on --restart)")
    nb.add_argument("--pair-dt", type=float, metavar="D",
                    help="step at or below which a star may form a close pair, a power of "
                    "two (default dt-out / 2^12)")
    nb.add_argument("--forces", choices=("cpu", "gpu", "gpu-sim"),
                    help="where the block forces are summed: cpu (default; numba threads, MPI "
                    "ranks), gpu (CUDA device, the gpu extra), gpu-sim (its kernel in numba's "
                    "CUDA simulator; slow, for checks); may change on --restart")
    nb.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                    help="override a parameter (repeatable)")
    nb.add_argument("--overwrite", action="store_true",
                    help="replace the diagnostics of a run already in the folder")
    nb.set_defaults(func=cmd_nbody)
    return nb
