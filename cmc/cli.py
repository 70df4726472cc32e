"""Command line: ``cmc run | restart | ic | plot | params | sweep``.

Only this module touches ``MPI.COMM_WORLD``.  Bad input (unknown parameter, value out of
range, unreadable file) ends with exit status 2 and one line naming the problem.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from cmc.config import ConfigError, load_config, parameter_table
from cmc.log import setup_logging

log = logging.getLogger("cmc.cli")


def _world():
    from parallel.comm import get_world_comm

    return get_world_comm()


def _set_threads(cfg_threads: int, comm) -> None:
    import numba

    n = cfg_threads or max(1, (os.cpu_count() or 1) // comm.Get_size())
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


def _fail(msg: str, comm=None) -> int:
    if comm is None or comm.Get_rank() == 0:
        sys.stderr.write(f"cmc: error: {msg}\n")
    return 2


def cmd_run(args) -> int:
    comm = _world()
    overrides = list(args.set or [])
    if args.emulate_ranks is not None:
        overrides.append(f"run.emulate_ranks={args.emulate_ranks}")
    try:
        cfg = load_config(args.config, overrides)
    except ConfigError as exc:
        return _fail(str(exc), comm)
    outdir = Path(args.output or Path("runs") / Path(args.config).stem)
    if comm.Get_rank() == 0:
        if (outdir / "checkpoint.h5").exists() and not args.overwrite:
            exists = True
        else:
            exists = False
            outdir.mkdir(parents=True, exist_ok=True)
            (outdir / "config.ini").write_text(cfg.to_ini())
            for f in ("cmc.log",):
                (outdir / f).unlink(missing_ok=True)
    else:
        exists = None
    exists = comm.bcast(exists, root=0)
    if exists:
        return _fail(f"{outdir} already holds a run (checkpoint.h5): continue it with "
                     f"'cmc restart {outdir}' or pass --overwrite", comm)
    setup_logging(comm.Get_rank(), str(outdir / "cmc.log"))
    _set_threads(cfg.run.threads, comm)
    from cmc.simulation import Simulation

    log.info("cmc run %s on %d rank(s); output in %s", args.config, comm.Get_size(), outdir)
    try:
        sim = Simulation.create(cfg, comm, outdir)
    except (ValueError, OSError) as exc:
        return _fail(str(exc), comm)
    reason = sim.run()
    log.info("done (%s); results in %s (diagnostics.h5, snapshots/, checkpoint.h5); "
             "plot with: cmc plot %s", reason, outdir, outdir)
    return 0 if not reason.startswith("error") else 1


def cmd_restart(args) -> int:
    comm = _world()
    outdir = Path(args.outdir)
    ck = outdir / "checkpoint.h5"
    if not ck.exists():
        return _fail(f"no checkpoint at {ck}", comm)
    setup_logging(comm.Get_rank(), str(outdir / "cmc.log"))
    from cmc.simulation import Simulation

    try:
        sim = Simulation.from_checkpoint(ck, comm, overrides=args.set, outdir=outdir)
    except (ConfigError, ValueError, OSError) as exc:
        return _fail(str(exc), comm)
    _set_threads(sim.cfg.run.threads, comm)
    log.info("restart from %s at step %d (t = %.4f t_rh0)", ck, sim.state.step,
             sim.state.time / sim.state.t_rh0)
    reason = sim.run()
    return 0 if not reason.startswith("error") else 1


def cmd_ic(args) -> int:
    overrides = [f"initial.model={args.model}", f"initial.n={args.n}",
                 f"initial.seed={args.seed}"] + list(args.set or [])
    if args.w0 is not None:
        overrides.append(f"initial.w0={args.w0}")
    try:
        cfg = load_config(None, overrides)
    except ConfigError as exc:
        return _fail(str(exc))
    from cmc.initial import build_initial_stars
    from cmc.io import write_snapshot

    stars, info = build_initial_stars(cfg)
    write_snapshot(args.output, stars, {"model": args.model, "r_tidal": info["r_tidal"],
                                        "seed": args.seed})
    setup_logging(0)
    log.info("wrote %d stars (%s) to %s", len(stars["r"]), args.model, args.output)
    return 0


def cmd_plot(args) -> int:
    from cmc.plot import plot_run

    try:
        path = plot_run(args.outdir)
    except (OSError, ValueError, KeyError) as exc:
        return _fail(str(exc))
    setup_logging(0)
    log.info("wrote %s", path)
    return 0


def cmd_params(args) -> int:
    sys.stdout.write(parameter_table() + "\n")
    return 0


def cmd_sweep(args) -> int:
    from cmc.sweep import run_sweep

    comm = _world()
    try:
        return run_sweep(args.sweep, comm, args.output)
    except ConfigError as exc:
        return _fail(str(exc), comm)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cmc", description="Hénon Monte Carlo star cluster code")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a model from a parameter file")
    r.add_argument("config", help="INI parameter file")
    r.add_argument("-o", "--output", help="output folder (default runs/<config name>)")
    r.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override a parameter (repeatable)")
    r.add_argument("--emulate-ranks", type=int, metavar="P",
                   help="serial run reproducing the random streams of a P-rank MPI run")
    r.add_argument("--overwrite", action="store_true", help="replace an existing run")
    r.set_defaults(func=cmd_run)
    rs = sub.add_parser("restart", help="continue a run from OUTDIR/checkpoint.h5")
    rs.add_argument("outdir")
    rs.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                    help="change a parameter (e.g. run.max_steps) for the continuation")
    rs.set_defaults(func=cmd_restart)
    ic = sub.add_parser("ic", help="write initial conditions to HDF5")
    ic.add_argument("model", choices=("plummer", "king"))
    ic.add_argument("--n", type=int, default=10000)
    ic.add_argument("--seed", type=int, default=1)
    ic.add_argument("--w0", type=float)
    ic.add_argument("--set", action="append", metavar="initial.KEY=VALUE")
    ic.add_argument("-o", "--output", required=True)
    ic.set_defaults(func=cmd_ic)
    pl = sub.add_parser("plot", help="plot r_c/r_h, rho_c and Lagrange radii of a run")
    pl.add_argument("outdir")
    pl.set_defaults(func=cmd_plot)
    pa = sub.add_parser("params", help="list every parameter with unit and default")
    pa.set_defaults(func=cmd_params)
    sw = sub.add_parser("sweep", help="run a grid of models (under mpiexec: in parallel)")
    sw.add_argument("sweep", help="sweep INI file")
    sw.add_argument("-o", "--output", help="output folder (default runs/<sweep name>)")
    sw.set_defaults(func=cmd_sweep)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
