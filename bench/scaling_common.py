"""What the scaling scripts share: the machine's description, a row's slowest rank, the fit.

``bench/scaling.py`` (threads and ranks on a many-core machine) and ``bench/compute_scaling.py``
(what each rank computes) both record :func:`machine` with their measurements;
``bench/compute_scaling.py`` and :mod:`bench.perf_model` both read a compute-scaling row's
slowest rank (:func:`slowest`) and fit per-star step costs to ``a / P + b``
(:func:`fit_scaling`).  Kept here, below the three scripts, so that none of them imports
another that imports it back.
"""

from __future__ import annotations

import os
import platform
import subprocess

import numpy as np


def machine() -> dict:
    """CPU model, logical CPUs, caches (lscpu) of this machine."""
    info = {"cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version()}
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
        keep = ("Model name", "Thread(s) per core", "Core(s) per socket", "Socket(s)",
                "L2 cache", "L3 cache", "NUMA node(s)")
        info["lscpu"] = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)
                         if k.strip() in keep}
    except OSError:
        pass
    import numba
    import numpy

    info["numba"], info["numpy"] = numba.__version__, numpy.__version__
    return info


def slowest(row: dict, part: str | None = None) -> float:
    """The slowest rank's compute per step [ms]: of one part, or of the whole step's parts
    (a part a file's rows lack, e.g. stellar_evolution in files older than it, took 0)."""
    if part is None:
        return max(sum(r["parts_ms"].values()) for r in row["ranks"])
    return max(r["parts_ms"].get(part, 0.0) for r in row["ranks"])


def fit_scaling(ps: list[int], us: list[float]) -> tuple[float, float]:
    """Least-squares fit of measured per-star step costs ``us`` at ``ps`` ranks to
    ``a / P + b`` (relative residuals, ``a, b >= 0``): ``a`` the work that divides, ``b`` what
    each rank pays whatever P (repeated passes, shared-memory communication, waits) [us]."""
    p = np.asarray(ps, dtype=float)
    y = np.asarray(us, dtype=float)
    basis = np.column_stack((1.0 / p, np.ones_like(p))) / y[:, None]
    a, b = np.linalg.lstsq(basis, np.ones_like(y), rcond=None)[0]
    if b < 0.0:
        a, b = float(np.sum(y / p) / np.sum(1.0 / p**2)), 0.0
    if a < 0.0:
        a, b = 0.0, float(np.mean(y))
    return float(a), float(b)
