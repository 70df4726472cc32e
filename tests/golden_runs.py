"""Golden hashes: short runs that exercise every process of the step, hashed column by column.

The step's code may be reorganised (issue 47: the step as a pipeline of processes) but its
results must not change in a single bit.  Each case below is a short run through the CLI;
:func:`run_hashes` hashes every deterministic column of its diagnostics, its escaper table,
the final stars (and binaries) and the random streams of its last checkpoint.  The hashes of
the code they were recorded with are in ``tests/data/golden_hashes.json``; tests/test_golden.py
(serial, one and two threads, ``--emulate-ranks 3``) and tests/mpi/test_golden_mpi.py
(``mpiexec -n 3``) compare against them.

Record (only when a change is meant to change results, and say so in the commit)::

    .venv/bin/python tests/golden_runs.py record

Bits depend on the floating-point code numpy picks for this CPU (its SIMD transcendental
functions), so the file also stores the CPU features numpy dispatches on; the tests compare
hashes only on a machine with the same ones and say so when they skip.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import h5py
import numpy as np

HERE = Path(__file__).resolve().parent
GOLDEN_FILE = HERE / "data" / "golden_hashes.json"
COLLAPSED_CORE = HERE / "data" / "collapsed_core_n2000.h5"

#: Diagnostics columns that measure the machine, not the cluster (wall clock, timers).
NOT_DETERMINISTIC = ("wall", "timer_", "t_wall", "rss", "memory")

#: name -> (ini text, steps).  Together they run every process of the step: relaxation,
#: time-step limits (relaxation, binaries, tidal mass loss), strong binary-single and
#: binary-binary encounters, three-body binaries, wide-binary breaking, tidal stripping and
#: escape, orbits, the sort, the potential and the energy correction, a Kroupa spectrum in
#: physical units, COSMIC file input, and time-step zones that act (``zones``: every other
#: case runs the default zones, capped so that they never act in so short a run).
CASES: dict[str, tuple[str, int]] = {
    "single_mass": ("[initial]\nn = 2000\nseed = 7\n[run]\nn_core_stop = 0\n"
                    "[output]\ncheckpoint_every = 10\n", 30),
    "kroupa_tidal": ("[initial]\nmodel = king\nw0 = 3\nn = 2000\nmass_function = kroupa\n"
                     "m_min = 0.08\nm_max = 1\nseed = 2\nr_vir_pc = 0\n[run]\ngamma = 0.01\n"
                     "n_core_stop = 0\n[tidal]\nmode = shrinking\nr_t0_from = orbit\n"
                     "r_gc_kpc = 8\nv_c_kms = 220\n[output]\ncheckpoint_every = 10\n", 30),
    "binaries": ("[initial]\nn = 2000\nseed = 5\nbinary_fraction = 0.1\n[run]\nn_core_stop = 0\n"
                 "[binaries]\nthree_body = all\n[output]\ncheckpoint_every = 10\n", 30),
    "three_body": (f"[initial]\nmodel = file\nfile = {COLLAPSED_CORE}\nseed = 12\n"
                   "[run]\nn_core_stop = 0\ntheta_max = 1.0\ndt_window = 40\n"
                   "[binaries]\nthree_body = all\neta_min = 3\n"
                   "[output]\ncheckpoint_every = 10\n", 40),
    "zones": (f"[initial]\nmodel = file\nfile = {COLLAPSED_CORE}\nseed = 4\n"
              "[run]\nn_core_stop = 0\nzones = 4\nzone_dt_max = 1000\n"
              "[output]\ncheckpoint_every = 10\n", 40),
    "cosmic_file": ("[initial]\nmodel = file\nfile = {cosmic}\nseed = 3\n[run]\nn_core_stop = 0\n"
                    "[output]\ncheckpoint_every = 10\n", 30),
}


def platform_key() -> dict:
    """The CPU features numpy's float64 loops dispatch on (they can change the last bit)."""
    from numpy._core._multiarray_umath import __cpu_features__ as feats

    keep = ("AVX2", "FMA3", "AVX512F", "AVX512_SKX", "AVX512_ICL", "AVX512_SPR")
    return {k: bool(feats.get(k, False)) for k in keep}


def cosmic_file(directory: Path) -> Path:
    """A 400-object COSMIC ``InitialCMCTable`` (King W0 = 5, Kroupa, 20 % binaries)."""
    path = directory / "cosmic_ic.hdf5"
    if not path.exists():
        from cosmic.sample.initialcmctable import InitialCMCTable

        s, b = InitialCMCTable.sampler("cmc", binfrac_model=0.2, primary_model="kroupa01",
                                       ecc_model="thermal", porb_model="log_uniform", qmin=0.1,
                                       cluster_profile="king", met=0.014, size=400, w_0=5,
                                       seed=5, virial_radius=2.0, tidal_radius=30.0)
        InitialCMCTable.write(s, b, filename=str(path))
    return path


def _sha(a: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def hash_run(outdir: Path) -> dict[str, str]:
    """Hashes of a finished run directory: diagnostics and escaper columns, the last
    checkpoint's stars, binaries and stream states."""
    out: dict[str, str] = {}
    with h5py.File(outdir / "diagnostics.h5", "r") as fh:
        for k in sorted(fh):
            if isinstance(fh[k], h5py.Dataset) and not any(w in k for w in NOT_DETERMINISTIC):
                out[f"diagnostics/{k}"] = _sha(fh[k][...])
    esc = outdir / "escapers.h5"
    if esc.exists():
        with h5py.File(esc, "r") as fh:
            for k in sorted(fh):
                if isinstance(fh[k], h5py.Dataset):
                    out[f"escapers/{k}"] = _sha(fh[k][...])
    with h5py.File(outdir / "checkpoint.h5", "r") as fh:
        for group in ("stars", "binaries"):
            if group in fh:
                for k in sorted(fh[group]):
                    out[f"{group}/{k}"] = _sha(fh[group][k][...])
        out["streams"] = _sha(fh["streams"]["states"][...])
        out["step"] = str(int(fh["state"].attrs["step"]))
    return out


def write_case(name: str, workdir: Path) -> Path:
    """Write case ``name``'s ini file (and its COSMIC file) into ``workdir``; return it."""
    text, _ = CASES[name]
    workdir.mkdir(parents=True, exist_ok=True)
    if "{cosmic}" in text:
        text = text.format(cosmic=cosmic_file(workdir))
    ini = workdir / f"{name}.ini"
    ini.write_text(text)
    return ini


def run_case(name: str, workdir: Path, emulate: int = 0, threads: int = 1) -> Path:
    """Run case ``name`` in ``workdir`` through the CLI; returns the run directory.  Under
    MPI every rank calls it with the same ``workdir`` after one rank's :func:`write_case`."""
    from cmc.cli import main

    ini = workdir / f"{name}.ini"
    if not ini.exists():
        write_case(name, workdir)
    out = workdir / f"{name}-e{emulate}-t{threads}"
    rc = main(["run", str(ini), "-o", str(out), "--set", f"run.max_steps={CASES[name][1]}",
               "--set", f"run.emulate_ranks={emulate}", "--set", f"run.threads={threads}"])
    if rc != 0:
        raise RuntimeError(f"golden case {name} exited {rc}")
    return out


def run_hashes(name: str, workdir: Path, emulate: int = 0, threads: int = 1) -> dict[str, str]:
    """Hashes of case ``name`` run serially."""
    return hash_run(run_case(name, workdir, emulate, threads))


def load_golden() -> dict:
    return json.loads(GOLDEN_FILE.read_text())


def record(workdir: Path) -> None:
    """Run every case serially (no emulation and ``--emulate-ranks 3``) and write the file."""
    runs = {f"{name}/emulate{e}": run_hashes(name, workdir, e) for name in CASES for e in (0, 3)}
    GOLDEN_FILE.write_text(json.dumps({"platform": platform_key(), "runs": runs}, indent=1,
                                      sort_keys=True) + "\n")


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["record"]:
        sys.exit("usage: python tests/golden_runs.py record")
    with tempfile.TemporaryDirectory() as tmp:
        record(Path(tmp))
    print(f"wrote {GOLDEN_FILE}")
