"""Numba compilation made visible: whenever numba compiles (not when it loads a kernel from
its cache) cmc says so, with progress, holds a Ctrl-C until the function at hand is compiled,
and counts the seconds, so that step timings can leave compilation out.

Compilation happens after an install or an update (the cache is keyed by the kernel sources,
:mod:`parallel.jit_cache`), in a checkout at a new path (numba's cache is per source path),
and at the first use of kernels the set-up's warm-up step does not reach (binary encounters,
code that only runs with several ranks): a minute or two in which nothing else is printed.
Numba announces each compilation (event ``numba:compile``, sent only on a cache miss); one
:class:`CompileWatch`, registered when this module is imported, listens.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from numba.core import event

from cmc.errors import EXIT_INTERRUPTED

log = logging.getLogger("cmc.compiling")

#: seconds between progress lines while kernels compile
PROGRESS_EVERY_S = 15.0
#: a compilation that starts this long after the previous one ended is announced anew [s]
EPISODE_GAP_S = 5.0
#: packages whose functions are this code's kernels (numba also compiles its own overloads
#: of numpy and builtins, one per type, which say nothing to a user)
OWN_PACKAGES = ("physics.", "parallel.", "cmc.")


def _name(ev: event.Event) -> str:
    """``module.function`` of the dispatcher an event is about."""
    fn = getattr(ev.data.get("dispatcher"), "py_func", None) if ev.data else None
    if fn is None:
        return "a kernel"
    return f"{fn.__module__}.{fn.__qualname__}"


class CompileWatch(event.Listener):
    """Listener of numba's ``numba:compile`` events (one per process: :data:`WATCH`).

    Attributes
    ----------
    kernels : int
        This code's functions compiled in this process (:data:`OWN_PACKAGES`; nested ones
        included).
    seconds : float
        Wall seconds spent in outermost compilations (numba's own overloads included).
    """

    def __init__(self) -> None:
        self.kernels = 0
        self.seconds = 0.0
        self._depth = 0
        self._t0 = 0.0
        self._episode_t0 = 0.0
        self._episode_kernels = 0
        self._last_end = -float("inf")
        self._last_line = 0.0
        self._current = ""
        self._announced = False
        self._ticker: threading.Thread | None = None
        self._held: list = []  # the SIGINT handler replaced while compiling
        self._noted: list[int] = []

    # ------------------------------------------------------------------ numba's events
    def on_start(self, ev: event.Event) -> None:
        now = time.perf_counter()
        self._depth += 1
        name = _name(ev)
        if name.startswith(OWN_PACKAGES):
            self.kernels += 1
            self._episode_kernels += 1
            self._current = name
        if self._depth > 1:
            return
        self._t0 = now
        # before the line: a Ctrl-C the line prompts must find the handler in place
        self._hold_sigint()
        if now - self._last_end > EPISODE_GAP_S:
            self._episode_t0, self._last_line = now, now
            self._episode_kernels = int(name.startswith(OWN_PACKAGES))
            if not self._announced:
                import numba

                log.info("compiling kernels (after an install or update, or in a new checkout: "
                         "a minute or two; later runs load them from %s)",
                         numba.config.CACHE_DIR)
                self._announced = True
            else:
                log.info("compiling kernels (first use of %s)", name)
        if self._ticker is None or not self._ticker.is_alive():
            self._ticker = threading.Thread(target=self._tick, name="cmc-compile-progress",
                                            daemon=True)
            self._ticker.start()

    def on_end(self, ev: event.Event) -> None:
        self._depth -= 1
        if self._depth > 0:
            return
        now = time.perf_counter()
        self.seconds += now - self._t0
        self._last_end = now
        self._release_sigint()

    def end_episode(self) -> None:
        """The compilations so far were reported as done: the next one is announced anew
        (with the kernel it is for), however soon it comes."""
        self._last_end = -float("inf")

    # ------------------------------------------------------------------ progress
    def _tick(self) -> None:
        """Progress lines while a compilation lasts (a thread: LLVM's long optimisation of
        one function sends no event, but releases the GIL)."""
        while self._depth > 0:
            time.sleep(0.5)
            now = time.perf_counter()
            if self._depth > 0 and now - self._last_line >= PROGRESS_EVERY_S:
                self._last_line = now
                log.info("compiling kernels: %d so far, %.0f s (now %s)",
                         self._episode_kernels, now - self._episode_t0, self._current)

    # ------------------------------------------------------------------ Ctrl-C
    def _hold_sigint(self) -> None:
        """Replace Python's default SIGINT handler (KeyboardInterrupt) by one that notes the
        Ctrl-C: raised inside numba, KeyboardInterrupt can be swallowed by LLVM's callbacks
        and leave numba broken.  A handler someone installed (the run's, which sets a flag)
        is left alone; so is any outside the main thread, where none can be set."""
        if (threading.current_thread() is not threading.main_thread()
                or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
            return
        self._held.append(signal.signal(signal.SIGINT, self._on_sigint))

    def _release_sigint(self) -> None:
        """Put the default handler back; a Ctrl-C noted meanwhile is raised now."""
        if not self._held:
            return
        signal.signal(signal.SIGINT, self._held.pop())
        if self._noted:
            self._noted.clear()
            raise KeyboardInterrupt

    def _on_sigint(self, signum: int, frame: object) -> None:
        if self._noted:  # a second Ctrl-C: stop now, numba's state no longer matters
            sys.stderr.write("cmc: error: interrupted\n")
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)
        self._noted.append(signum)
        sys.stderr.write("cmc: interrupt noted: stopping once the function being compiled is "
                         "done (Ctrl-C again to stop now)\n")
        sys.stderr.flush()


#: The process's one watch, listening from the import of this module on.
WATCH = CompileWatch()
event.register("numba:compile", WATCH)
