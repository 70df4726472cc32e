"""Parameter sweeps: many models, each run in parallel by a group of ranks.

A sweep file names a base parameter file and the values to vary::

    [sweep]
    base = plummer_small.ini      # relative to the sweep file
    ranks_per_model = 1           # ranks that run one model together
    mode = grid                   # grid: every combination; list: i-th values together

    [values]
    initial.n = 1000, 2000
    initial.seed = 1, 2, 3

``mpiexec -n P cmc sweep SWEEP.ini`` splits COMM_WORLD into ``P // ranks_per_model`` groups
and hands models out round-robin.  Each model writes its own folder; a model that fails (bad
parameter, bad input, numerical stop) is reported and the others go on.  ``summary.tsv`` and
``summary.json`` list every model with its status and key results.
"""

from __future__ import annotations

import configparser
import itertools
import json
import logging
from pathlib import Path

from cmc.config import ConfigError, load_config
from cmc.log import setup_logging

log = logging.getLogger("cmc.sweep")


def read_sweep(path: str | Path) -> tuple[Path, int, list[dict[str, str]]]:
    """Base file, ranks per model, and the list of models (dicts of overrides)."""
    path = Path(path)
    cp = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
    cp.optionxform = str
    try:
        with open(path) as fh:
            cp.read_file(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read sweep file {path}: {exc.strerror}") from None
    if "sweep" not in cp or "values" not in cp:
        raise ConfigError(f"{path}: needs [sweep] and [values] sections")
    unknown = set(cp.sections()) - {"sweep", "values"}
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {sorted(unknown)}")
    sw = cp["sweep"]
    for k in sw:
        if k not in ("base", "ranks_per_model", "mode"):
            raise ConfigError(f"sweep.{k}: unknown parameter (known: base, ranks_per_model, mode)")
    base = path.parent / sw.get("base", "")
    try:
        rpm = int(sw.get("ranks_per_model", "1"))
    except ValueError:
        raise ConfigError("sweep.ranks_per_model: not an integer") from None
    if rpm < 1:
        raise ConfigError("sweep.ranks_per_model: must be >= 1")
    mode = sw.get("mode", "grid")
    if mode not in ("grid", "list"):
        raise ConfigError("sweep.mode: must be grid or list")
    keys = list(cp["values"])
    vals = [[v.strip() for v in cp["values"][k].split(",")] for k in keys]
    if mode == "grid":
        combos = list(itertools.product(*vals))
    else:
        if len({len(v) for v in vals}) > 1:
            raise ConfigError("sweep.mode: list needs the same number of values for every key")
        combos = list(zip(*vals))
    return base, rpm, [dict(zip(keys, c)) for c in combos]


def _model_name(i: int, model: dict[str, str]) -> str:
    parts = [f"{k.split('.')[-1]}{v}" for k, v in model.items()]
    safe = "_".join(parts).replace("/", "-").replace(" ", "")
    return f"model{i:03d}_{safe}"[:120]


def run_sweep(path: str | Path, world, output: str | Path | None = None) -> int:
    """Run every model of the sweep; returns 0 if all succeeded, 1 if any failed."""
    from cmc.simulation import Simulation

    base, rpm, models = read_sweep(path)
    size, rank = world.Get_size(), world.Get_rank()
    outdir = Path(output or Path("runs") / Path(path).stem)
    if rank == 0:
        outdir.mkdir(parents=True, exist_ok=True)
    world.Barrier()
    setup_logging(rank, str(outdir / "sweep.log"))
    n_groups = max(1, size // rpm)
    group = rank // rpm
    active = group < n_groups
    comm = world.Split(group if active else n_groups, rank)
    results = []
    if active:
        for i, model in enumerate(models):
            if i % n_groups != group:
                continue
            name = _model_name(i, model)
            mdir = outdir / name
            rec = {"index": i, "name": name, **model}
            try:
                cfg = load_config(str(base), [f"{k}={v}" for k, v in model.items()])
                if comm.Get_rank() == 0:
                    mdir.mkdir(parents=True, exist_ok=True)
                    (mdir / "config.ini").write_text(cfg.to_ini())
                comm.Barrier()
                sim = Simulation.create(cfg, comm, mdir)
                reason = sim.run()
                d = {k: v[-1] for k, v in sim.history.items()}
                rec.update(status="failed" if reason.startswith("error") else "ok",
                           stop_reason=reason, steps=int(d["step"]),
                           t_end_trh=float(d["time_trh"]), dE_rel=float(d["dE_rel"]),
                           r_c=float(d["r_c"]), N=int(d["N"]))
            except (ConfigError, ValueError, OSError, FloatingPointError) as exc:
                rec.update(status="failed", stop_reason=f"{type(exc).__name__}: {exc}")
            if comm.Get_rank() == 0:
                log.info("sweep %s: %s %s", name, rec["status"], rec["stop_reason"])
                results.append(rec)
    gathered = world.gather(results, root=0)
    failed = 0
    if rank == 0:
        allrec = sorted((r for part in gathered for r in part), key=lambda r: r["index"])
        failed = sum(r["status"] != "ok" for r in allrec)
        cols = ["index", "name", "status", "stop_reason", "steps", "t_end_trh", "dE_rel",
                "r_c", "N"]
        lines = ["\t".join(cols)] + ["\t".join(str(r.get(c, "")) for c in cols)
                                      for r in allrec]
        (outdir / "summary.tsv").write_text("\n".join(lines) + "\n")
        (outdir / "summary.json").write_text(json.dumps(allrec, indent=1) + "\n")
        log.info("sweep done: %d model(s), %d failed; summary in %s", len(allrec), failed,
                 outdir / "summary.tsv")
    failed = world.bcast(failed, root=0)
    comm.Free() if hasattr(comm, "Free") and comm is not world else None
    return 1 if failed else 0
