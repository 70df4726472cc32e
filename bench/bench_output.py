"""``make bench`` (output): the cost of writing diagnostics and checkpoints per step does not
grow with the length of the run.

Measures, for a history of 1e3 and of 1e5 steps already in diagnostics.h5: the time of one
diagnostics flush (``output.diagnostics_every`` = 50 rows, the default) per step, and the
time of one checkpoint of an N = 1e4 model (checkpoints no longer copy the history).  The
rows are real diagnostics rows of a small run (every column, Lagrange radii included).
Prints a table and writes runs/bench_output.json.  ``--quick``: 10 flushes instead of 40.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from cmc import io as cio  # noqa: E402
from cmc.config import Config  # noqa: E402
from cmc.diagnostics import DIAG_MEANINGS, DIAG_UNITS  # noqa: E402
from cmc.simulation import Simulation  # noqa: E402
from parallel.comm import SerialComm  # noqa: E402

ROWS_PER_FLUSH = 50


class _NoDiagnostics:
    def append(self, rows: dict) -> None:
        pass


def main() -> None:
    flushes = 10 if "--quick" in sys.argv else 40
    cfg = Config()
    cfg.initial.n = 10_000
    sim = Simulation.create(cfg, SerialComm(), None)
    sim.step()
    row = sim.last
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for history in (1_000, 100_000):
            hist = {k: [v] * history for k, v in row.items()}
            hist["step"] = list(range(history))
            path = Path(tmp) / f"diag_{history}.h5"
            w = cio.DiagnosticsWriter(path, {"x": 1}, DIAG_UNITS, DIAG_MEANINGS, hist)
            block = {k: [v] * ROWS_PER_FLUSH for k, v in row.items()}
            t0 = time.perf_counter()
            for _ in range(flushes):
                w.append(block)
            dt = (time.perf_counter() - t0) / (flushes * ROWS_PER_FLUSH)
            w.close()
            sim.outdir = Path(tmp) / f"run_{history}"
            sim.outdir.mkdir()
            sim.n_rows = history  # the checkpoint records only this count
            sim.output.diag = _NoDiagnostics()  # measured above; here the checkpoint alone
            t0 = time.perf_counter()
            for _ in range(3):
                sim.write_checkpoint()
            ck = (time.perf_counter() - t0) / 3
            size = (sim.outdir / "checkpoint.h5").stat().st_size
            out.append({"history_steps": history, "diagnostics_us_per_step": dt * 1e6,
                        "checkpoint_s": ck, "checkpoint_bytes": size,
                        "diagnostics_file_bytes": path.stat().st_size})
    print(f"\nOutput cost against the length of the history (machine: {os.uname().nodename}; "
          f"flush of {ROWS_PER_FLUSH} rows, checkpoint of N = {cfg.initial.n})")
    print(f"{'history (steps)':>16s} | {'diagnostics us/step':>20s} | {'checkpoint s':>12s} | "
          f"{'checkpoint MB':>13s}")
    for r in out:
        print(f"{r['history_steps']:>16d} | {r['diagnostics_us_per_step']:20.1f} | "
              f"{r['checkpoint_s']:12.4f} | {r['checkpoint_bytes'] / 1e6:13.2f}")
    ratio = out[1]["diagnostics_us_per_step"] / out[0]["diagnostics_us_per_step"]
    print(f"diagnostics cost ratio 1e5 / 1e3 steps of history: {ratio:.2f} (flat: about 1)")
    path = ROOT / "runs" / "bench_output.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"machine": os.uname().nodename, "rows": out,
                                "ratio": float(np.round(ratio, 3))}, indent=1))
    print(f"JSON: {path}")


if __name__ == "__main__":
    main()
