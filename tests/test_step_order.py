"""The step's processes (cmc/step.py): their order is the one docs/architecture.md gives, and
only the processes that say they draw random numbers touch the blocks' streams."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cmc.config import load_config
from cmc.processes.base import Process
from cmc.simulation import Simulation
from cmc.state import PARTS
from cmc.step import STEP_ORDER
from parallel.comm import SerialComm

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def _doc_table() -> list[list[str]]:
    """Rows of the table under "## The step" in docs/architecture.md: (#, process class,
    module, timer, draws)."""
    text = DOC.read_text()
    section = text.split("## The step", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip().strip("`") for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|")]
    return [r for r in rows[2:] if r and r[0].isdigit()]  # past the header and its rule


def test_step_order_is_the_documented_one():
    rows = _doc_table()
    order = STEP_ORDER
    assert [r[1] for r in rows] == [p.__name__ for p in order], \
        "docs/architecture.md's step table and cmc.step.STEP_ORDER differ"
    for row, p in zip(rows, order, strict=True):
        assert row[2] == p.__module__, (p.__name__, row[2])
        assert row[3] == p.timer, (p.__name__, row[3])
        assert (row[4] != "none") == bool(p.draws), (p.__name__, row[4], p.draws)
    for p in order:
        assert issubclass(p, Process) and p.name and p.reads and p.changes
        assert p.timer in PARTS, p


def _stream_changes(sets: list[str], steps: int = 12) -> tuple[dict[str, int], float]:
    """Per process, in how many of ``steps`` steps it changed the blocks' generator states;
    and the number of strong encounters."""
    sim = Simulation.create(load_config(None, sets), SerialComm())
    drew: dict[str, int] = {}

    def watch(process) -> None:
        run, name = process.run, type(process).__name__

        def watched(work) -> None:
            before = work.states.copy()
            run(work)
            drew[name] = drew.get(name, 0) + int(not np.array_equal(before, work.states))

        process.run = watched

    for process in sim.step.processes:
        watch(process)
    events = 0.0
    for _ in range(steps):
        d = sim.step()
        events += d["n_binary_single"] + d["n_binary_binary"]
    return drew, events


def test_only_the_processes_that_draw_touch_the_streams():
    """Each process's change of the blocks' generator states over a few steps of a run with
    binaries and three-body binaries (encounters happen), and of one with stellar evolution
    of a Kroupa spectrum (its massive stars are evolved every step): none for the processes
    that declare no draws, and some for relaxation, the binary events, stellar evolution and
    the orbits."""
    drew, events = _stream_changes(["initial.n=2000", "initial.seed=5",
                                    "initial.binary_fraction=0.1", "binaries.three_body=all",
                                    "run.n_core_stop=0"])
    assert events > 0  # (the binary events drew)
    # (tight tolerances: the massive stars are due within the 12 short steps)
    drew_se, _ = _stream_changes(["initial.n=2000", "initial.seed=5", "run.n_core_stop=0",
                                  "initial.mass_function=kroupa", "bse.stellar_evolution=true",
                                  "bse.tolerance=0.001", "bse.ms_age_tolerance=0.001"])
    assert drew_se["StellarEvolution"] > 0
    assert drew["StellarEvolution"] == 0  # (off)
    for name, n in drew_se.items():
        drew[name] = drew.get(name, 0) + n
    declared = {p.__name__: bool(p.draws) for p in STEP_ORDER}
    assert {k for k, v in drew.items() if v} == {k for k, v in declared.items() if v}, drew
