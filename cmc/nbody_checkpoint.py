"""The N-body mode's checkpoint (``OUTDIR/checkpoint.h5`` of ``cmc nbody``, :mod:`cmc.nbody`):
what it holds, :func:`write_checkpoint`, :func:`read_checkpoint` (verified: checksum, shapes,
finite values) and :func:`restore`.

Group ``nbody``: the integrator's arrays and scalars (:class:`physics.nbody.NBodyState`,
:data:`STATE_ARRAYS`, :data:`STATE_SCALARS`, the close pairs' :data:`PAIR_ARRAYS`,
:data:`PAIR_SCALARS`); group ``run``: the run's (escapers, centre, :data:`RUN_SCALARS`); file
attributes ``mode = nbody``, the config text and a sha256 content checksum
(:func:`cmc.io.content_digest`).  Written to a temporary file and renamed
(:func:`cmc.io.atomic_h5`).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from cmc.errors import InputError

log = logging.getLogger("cmc.nbody")

#: The checkpoint's name in the output folder.
CHECKPOINT = "checkpoint.h5"
#: NBodyState's arrays and scalars that a checkpoint holds.
STATE_ARRAYS = ("mass", "pos", "vel", "acc", "jerk", "snap", "crackle", "t", "dt")
STATE_SCALARS = ("time", "eps2", "eta", "eta_s", "dt_max", "dt_min", "order", "n_blocks",
                 "n_steps", "n_pairs")
#: The close pairs' arrays and scalars (:mod:`physics.nbody_pairs`); a checkpoint without
#: them (the format before close pairs) restarts with no pairs and the default settings.
PAIR_ARRAYS = ("ids", "star_mass", "pair_i", "pair_j", "pair_r", "pair_w", "pair_t0")
PAIR_SCALARS = ("pair_dt", "pair_gamma", "eta_close", "n_pair_formed", "n_pair_resolved",
                "n_pair_kicks",
                "omega")  # (and the tide's orbital frequency, physics.nbody_tidal)
#: NBodyRun's scalars that a checkpoint holds (group ``run``; arrays ``escaped``, ``centre``).
RUN_SCALARS = ("step", "e0", "wall", "t_end", "dt_out", "t_rh0", "n0", "diag_rows")


def write_checkpoint(run) -> None:
    """``run.outdir/checkpoint.h5`` of a :class:`cmc.nbody.NBodyRun`: everything needed to
    continue bit for bit, with the config text and a sha256 content checksum; written to a
    temporary file, fsynced and renamed over the previous one (:func:`cmc.io.atomic_h5`)."""
    from cmc import io as cio

    if not run.rank0:  # (every rank holds the same state)
        return
    path = run.outdir / CHECKPOINT
    st = run.nb
    cio.check_free_space(path, 8 * st.n_stars * 26 + 65536)
    with cio.atomic_h5(path) as fh:
        fh.attrs["mode"] = "nbody"
        fh.attrs["config"] = run.cfg.to_ini()
        g = fh.create_group("nbody")
        for name in STATE_ARRAYS:
            g.create_dataset(name, data=getattr(st, name))
        for name in STATE_SCALARS:
            g.attrs[name] = getattr(st, name)
        for name in PAIR_ARRAYS:
            g.create_dataset(name, data=getattr(st, name))
        for name in PAIR_SCALARS:
            g.attrs[name] = getattr(st, name)
        r = fh.create_group("run")
        r.create_dataset("escaped", data=run.escaped)
        r.create_dataset("centre", data=run.centre)
        for name, v in (("step", run.step), ("e0", run.e0), ("wall", run.wall),
                        ("t_end", run.t_end), ("dt_out", run.dt_out),
                        ("t_rh0", run.t_rh0), ("n0", run.n0),
                        ("diag_rows", run.step + 1)):
            r.attrs[name] = v
        fh.flush()
        fh.attrs["sha256"] = cio.content_digest(fh)
    log.debug("checkpoint at output %d (t = %.6g t_NB)", run.step, st.time)

def restore(nbody_run, ck: dict) -> None:
    """Give ``nbody_run`` (a :class:`cmc.nbody.NBodyRun` of the checkpoint's config) the
    integrator and run state of a checkpoint (:func:`read_checkpoint`)."""
    from physics.nbody import NBodyState
    from physics.nbody_pairs import anchor_pairs, init_pairs

    arrays, scalars, run = ck["nbody"], ck["nbody_attrs"], ck["run_attrs"]
    star_mass = arrays.get("star_mass", arrays["mass"])
    if not np.array_equal(star_mass, nbody_run.nb.star_mass) or run["n0"] != nbody_run.n0:
        raise InputError(f"{ck['path']}: its stars are not the initial model's of its "
                         "config (the model file changed?)")
    st = NBodyState(**{k: np.array(arrays[k]) for k in STATE_ARRAYS},
                    **{k: scalars[k] for k in STATE_SCALARS})
    if "pair_i" in arrays:  # else: the format before close pairs, no pairs
        for k in PAIR_ARRAYS:
            setattr(st, k, np.array(arrays[k]))
        st.ids, st.pair_i, st.pair_j = (np.array(x, dtype=np.int64)
                                        for x in (st.ids, st.pair_i, st.pair_j))
        st.pair_r, st.pair_w = st.pair_r.reshape(-1, 3), st.pair_w.reshape(-1, 3)
    for k in PAIR_SCALARS:  # the settings this run was created with, when not stored
        setattr(st, k, scalars.get(k, getattr(nbody_run.nb, k)))
    st.pair_dt, st.pair_gamma = float(st.pair_dt), float(st.pair_gamma)
    st.eta_close = float(st.eta_close)
    st.n_pair_formed, st.n_pair_resolved = int(st.n_pair_formed), int(st.n_pair_resolved)
    st.n_pair_kicks = int(st.n_pair_kicks)
    init_pairs(st)
    anchor_pairs(st)
    st.order = int(st.order)
    for name in ("n_blocks", "n_steps", "n_pairs"):
        setattr(st, name, int(getattr(st, name)))
    for name in ("time", "eps2", "eta", "eta_s", "dt_max", "dt_min"):
        setattr(st, name, float(getattr(st, name)))
    st._ppos, st._pvel, st._pacc = (np.empty((st.n, 3)) for _ in range(3))
    nbody_run.nb = st
    nbody_run.escaped = np.array(ck["run"]["escaped"], dtype=bool)
    nbody_run.centre = np.array(ck["run"]["centre"], dtype=np.float64)
    nbody_run.step, nbody_run.e0 = int(run["step"]), float(run["e0"])
    nbody_run.wall = float(run["wall"])
    nbody_run.t_end, nbody_run.dt_out = float(run["t_end"]), float(run["dt_out"])


def read_checkpoint(path: Path) -> dict:
    """Verify and read an N-body checkpoint: a file that cannot be opened, of another
    format or mode, whose checksum does not match its content, or with inconsistent arrays
    raises a one-line :class:`InputError` naming it (exit 2, as ``cmc restart``)."""
    from cmc import io as cio

    if not path.exists():
        raise InputError(f"no checkpoint {path}")
    with cio.open_checkpoint(path) as fh:
        try:
            mode = str(fh.attrs.get("mode", ""))
            if mode != "nbody":
                raise InputError(f"{path} is not a cmc nbody checkpoint (a cmc run one? "
                                 "continue it with cmc restart)")
            cio.verify_checksum(fh, path, ("nbody", "run"))
            g = fh["nbody"]
            ck = {"path": path, "config": str(fh.attrs["config"]),
                  "nbody": {k: g[k][...] for k in STATE_ARRAYS + PAIR_ARRAYS
                            if k in STATE_ARRAYS or k in g},
                  "nbody_attrs": {k: g.attrs[k].item() for k in STATE_SCALARS + PAIR_SCALARS
                                  if k in STATE_SCALARS or k in g.attrs},
                  "run": {k: fh["run"][k][...] for k in ("escaped", "centre")},
                  "run_attrs": {k: fh["run"].attrs[k].item() for k in RUN_SCALARS}}
        except InputError:
            raise
        except Exception as exc:  # damaged metadata: many exception types (cmc.io)
            raise InputError(f"checkpoint {path} is damaged: unreadable HDF5 metadata "
                             f"({type(exc).__name__}: {exc})") from None
    a = ck["nbody"]
    n = a["mass"].size
    nstar = a["star_mass"].size if "star_mass" in a else n
    shapes_ok = all(a[k].shape == (n, 3) for k in STATE_ARRAYS[1:7]) \
        and a["t"].shape == a["dt"].shape == (n,) \
        and ck["run"]["escaped"].shape == (nstar,) and ck["run"]["centre"].shape == (3,)
    if "pair_i" in a:
        npair = a["pair_i"].size
        shapes_ok = shapes_ok and a["ids"].shape == (n,) and n + npair == nstar \
            and a["pair_j"].shape == a["pair_t0"].shape == (npair,) \
            and a["pair_r"].size == a["pair_w"].size == 3 * npair
    finite = all(np.all(np.isfinite(v)) for v in ck["nbody"].values()) \
        and all(math.isfinite(v) for v in ck["nbody_attrs"].values())
    if not (shapes_ok and finite and n >= 2):
        raise InputError(f"checkpoint {path} is damaged: inconsistent or non-finite state")
    return ck
