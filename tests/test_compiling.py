"""Numba compilation is announced whenever it happens, with progress; a Ctrl-C waits for the
function being compiled; steps that compiled are left out of the timing (issue 46, item 9).

Real compilations of the step's kernels take minutes, so these tests compile small functions
of their own, or send numba's ``numba:compile`` event themselves (the event is numba's public
API: :mod:`numba.core.event`).
"""

from __future__ import annotations

import logging
import signal
import time

import numba
import pytest
from numba.core import event

import cmc.compiling as compiling
from cmc.compiling import WATCH

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def cmc_log(caplog, monkeypatch):
    """INFO records of the ``cmc`` logger (which does not propagate); a compilation in this
    test is announced as a new one, however recently another test compiled."""
    logger = logging.getLogger("cmc")
    monkeypatch.setattr(WATCH, "_last_end", -float("inf"))
    caplog.set_level(logging.INFO, logger="cmc")
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)


def _fresh_kernel():
    """A jitted function never compiled before (not cached): calling it compiles it."""
    @numba.njit(cache=False)
    def add_one(x):
        return x + 1

    return add_one


def test_warm_up_says_compiling_when_another_checkout_has_a_cache(tmp_path, monkeypatch,
                                                                   cmc_log):
    """The issue's case: the cache folder holds another checkout's compiled kernels (numba
    keys its cache by source path), this one compiles.  The old check, ``rglob("orbits*.nbi")``
    in the cache folder, found the other's files and said nothing for minutes; now numba's
    own compile event brings the line, whatever the cache folder holds."""
    import cmc.cli as cli
    import cmc.simulation as simulation
    from parallel.comm import SerialComm

    other = tmp_path / "work" / "other_checkout" / "physics"
    other.mkdir(parents=True)
    (other / "orbits.new_orbits_rows-412.py311.nbi").write_bytes(b"another checkout's")
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    kernel = _fresh_kernel()

    class Compiles:  # the warm-up step, whose kernels this checkout has not compiled
        def step(self):
            assert kernel(1) == 2

    monkeypatch.setattr(simulation.Simulation, "create",
                        classmethod(lambda cls, cfg, comm, outdir=None: Compiles()))
    cli._warm_kernels(SerialComm())
    lines = [r.getMessage() for r in cmc_log.records]
    assert any(m.startswith("compiling kernels") for m in lines), lines
    assert any(m.startswith("kernels compiled") for m in lines), lines


def test_every_compilation_is_counted_and_announced(cmc_log):
    """A compilation after set-up (a kernel's first use in the run: binary encounters) is
    announced too, and its seconds counted."""
    seconds = WATCH.seconds
    assert _fresh_kernel()(2) == 3
    assert WATCH.seconds > seconds
    assert any(r.getMessage().startswith("compiling kernels") for r in cmc_log.records)


def test_progress_lines_while_a_compilation_lasts(cmc_log, monkeypatch):
    """Progress every PROGRESS_EVERY_S, also inside one long compilation (LLVM optimising a
    big kernel sends no event): a thread writes them."""
    monkeypatch.setattr(compiling, "PROGRESS_EVERY_S", 0.2)
    with event.trigger_event("numba:compile", data={"dispatcher": None}):
        time.sleep(1.5)
    progress = [r.getMessage() for r in cmc_log.records
                if r.getMessage().startswith("compiling kernels: ")]
    assert len(progress) >= 2, progress


@pytest.fixture
def default_sigint():
    """Python's own SIGINT handler (KeyboardInterrupt), also where pytest runs with SIGINT
    ignored (a background job)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_one_ctrl_c_while_compiling_stops_after_it(default_sigint, capsys):
    """One Ctrl-C while a function compiles is noted on stderr; the compilation goes on to its
    end (KeyboardInterrupt inside LLVM's callbacks can be swallowed and leave numba broken),
    then KeyboardInterrupt (exit 130 in the CLI), and Python's handler is back."""
    done = []
    with pytest.raises(KeyboardInterrupt):
        with event.trigger_event("numba:compile", data={"dispatcher": None}):
            signal.raise_signal(signal.SIGINT)  # the user's Ctrl-C, mid-compilation
            done.append("compiled")  # the compilation was not cut short
    assert done == ["compiled"]
    assert "interrupt noted" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_handler_of_the_run_is_left_alone(default_sigint):
    """During a run, SIGINT has the run's handler (it sets a flag and the run stops with a
    checkpoint): a compilation then neither replaces it nor raises."""
    got = []
    signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    with event.trigger_event("numba:compile", data={"dispatcher": None}):
        signal.raise_signal(signal.SIGINT)
    assert got == [signal.SIGINT]


def test_a_step_that_compiles_is_left_out_of_the_timing(monkeypatch, cmc_log):
    """A step in which kernels compile (here 1.5 s of it) is left out of the run's timing
    summary whole: steps counts the others, wall_s and every part hold no compilation, and
    the log says so.  Before, the summary averaged the compilation into the steps (the issue's
    297 ms per step where steady steps took 40)."""
    from cmc.config import Config
    from cmc.simulation import Simulation
    from cmc.step import Step
    from parallel.comm import SerialComm

    step = Step.__call__

    def step_that_compiles_once(self):
        d = step(self)
        if self.sim.state.step == 3:
            with event.trigger_event("numba:compile", data={"dispatcher": None}):
                time.sleep(1.5)
        return d

    monkeypatch.setattr(Step, "__call__", step_that_compiles_once)
    cfg = Config()
    cfg.initial.n = 300
    cfg.run.max_steps = 8
    cfg.run.n_core_stop = 0
    sim = Simulation.create(cfg, SerialComm(), None)
    sim.run()
    t = sim.timing
    assert t["steps"] == 7 and t["steps_compiling"] == 1, t
    assert t["compile_s"] >= 1.5
    assert t["wall_s"] < 1.5 and t["step_s"] < 1.5, t  # 7 steps of 300 stars: far less
    assert 6 * 250 <= t["star_steps"] <= 7 * 300
    messages = [r.getMessage() for r in cmc_log.records]
    assert any("step 3 compiled kernels" in m for m in messages), messages
    assert any(m.startswith("timing: 7 steps") and "1 step(s) that compiled kernels" in m
               for m in messages), messages
