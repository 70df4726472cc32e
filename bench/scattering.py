"""Ensembles of binary-single and binary-binary scattering experiments (shared by the few-body
validation and benchmark).

Encounter ``i`` of an ensemble draws from sub-stream ``i`` of stream 0 of ``seed``, so an
ensemble is the same whatever the number of worker processes.  Units: G = 1, binary members of
mass 1 and a = 1 unless given.
"""

from __future__ import annotations

import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIELDS = ("kind", "hierarchy", "status", "valid", "b", "r_peri", "de_rel", "dl_rel",
          "t_end_periods", "n_steps", "seconds", "eb_in", "eb_out", "e_out", "de_internal",
          "exchanges", "ionisations")


def _objects(kind: str):
    from physics import fewbody as fb

    if kind == "bs":
        return fb.binary((0, 1), (1.0, 1.0), 1.0, 0.0), fb.single(2, 1.0)
    if kind == "bb":
        return fb.binary((0, 1), (1.0, 1.0), 1.0, 0.0), fb.binary((2, 3), (1.0, 1.0), 1.0, 0.0)
    raise ValueError(kind)


def _run_chunk(args) -> list[dict]:
    kind, v_over_vc, rp_max, seed, first, count, settings_kw, thermal = args
    from parallel.rng import taus_uniform
    from parallel.streams import Streams
    from physics import fewbody as fb

    settings = fb.EncounterSettings(**settings_kw)
    obj1, obj2 = _objects(kind)
    vc = fb.critical_velocity(obj1, obj2)
    table = Streams.create(seed, 1, first + count).states[0]
    out = []
    for i in range(first, first + count):
        states = np.ascontiguousarray(table[i:i + 1])
        o1, o2 = obj1, obj2
        if thermal:
            # thermal initial eccentricity, drawn after the encounter's own numbers
            e = math.sqrt(taus_uniform(states, 0))
            o1 = fb.binary(obj1.ids, obj1.masses, obj1.a, e)
        t0 = time.perf_counter()
        o = fb.scatter(o1, o2, v_over_vc * vc, rp_max, states, 0, settings)
        dt = time.perf_counter() - t0
        bins = o.binaries()
        eb_out = sum(c.internal_energy for c in bins)
        out.append({
            "kind": o.kind, "hierarchy": o.hierarchy, "status": o.status, "valid": o.valid,
            "b": o.initial.b, "r_peri": o.initial.r_peri, "de_rel": o.de_rel,
            "dl_rel": o.dl_rel, "t_end_periods": o.t_end_periods, "n_steps": o.n_steps,
            "seconds": dt, "eb_in": o1.binding_energy + o2.binding_energy, "eb_out": eb_out,
            "e_out": bins[0].e if len(bins) == 1 else float("nan"),
            "de_internal": o.de_internal, "exchanges": o.exchanges,
            "ionisations": o.ionisations,
        })
    return out


def run_ensemble(kind: str, v_over_vc: float, rp_max: float, n: int, seed: int = 1,
                 workers: int = 0, settings: dict | None = None, thermal: bool = False
                 ) -> dict[str, np.ndarray]:
    """Run ``n`` encounters; return one array per field of :data:`FIELDS`."""
    workers = workers or os.cpu_count() or 1
    settings = settings or {}
    # warm the compiled kernels once in this process so workers load them from the cache
    _run_chunk((kind, v_over_vc, rp_max, seed + 1000, 0, 1, settings, thermal))
    chunk = max(1, min(50, n // (4 * workers) or 1))
    jobs = [(kind, v_over_vc, rp_max, seed, s, min(chunk, n - s), settings, thermal)
            for s in range(0, n, chunk)]
    rows: list[dict] = []
    if workers == 1:
        for j in jobs:
            rows += _run_chunk(j)
    else:
        with ProcessPoolExecutor(workers) as ex:
            for r in ex.map(_run_chunk, jobs):
                rows += r
    return {k: np.array([r[k] for r in rows]) for k in FIELDS}


def cost_summary(res: dict[str, np.ndarray]) -> dict[str, float]:
    """Mean, median and 99th percentile seconds per encounter; fraction unfinished."""
    s = res["seconds"]
    return {"n": int(s.size), "mean_s": float(s.mean()), "median_s": float(np.median(s)),
            "p99_s": float(np.percentile(s, 99)), "max_s": float(s.max()),
            "encounters_per_s": float(1.0 / s.mean()),
            "time_limit_fraction": float(np.mean(res["status"] != "done"))}
