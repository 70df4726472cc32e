"""Rank-aware logging: every line carries the MPI rank; only rank 0 logs INFO and warnings by
default."""

from __future__ import annotations

import logging
import sys

_LOGFILE: list[str] = []
_FMT = "%(asctime)s [rank %(rank)d] %(levelname)s %(name)s: %(message)s"


class _RankFilter(logging.Filter):
    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = self.rank
        return True


def setup_logging(rank: int = 0, logfile: str | None = None, level: int = logging.INFO,
                  all_ranks: bool = False) -> None:
    """Configure the ``cmc`` logger for this process.

    Rank 0 logs at ``level``; other ranks log errors only (unless ``all_ranks``): every
    warning of a run is about the whole run, computed alike on every rank from the same
    reductions (or on rank 0 alone), so the other ranks would only print it again, once per
    rank.  A log file, when given, is appended to by rank 0.
    """
    logger = logging.getLogger("cmc")
    for h in list(logger.handlers):
        logger.removeHandler(h)
        h.close()
    logger.setLevel(level if (rank == 0 or all_ranks) else logging.ERROR)
    logger.propagate = False
    flt = _RankFilter(rank)
    fmt = logging.Formatter(_FMT, datefmt="%H:%M:%S")
    sh = logging.StreamHandler(sys.stderr)
    sh.setFormatter(fmt)
    sh.addFilter(flt)
    logger.addHandler(sh)
    _LOGFILE.clear()
    if logfile:
        # rank 0 logs to the file; any other rank writes only a traceback, to its own file
        _LOGFILE.append(logfile if rank == 0 else f"{logfile.removesuffix('.log')}"
                        f".rank{rank}.log")
    if logfile and rank == 0:
        fh = logging.FileHandler(logfile, mode="a")
        fh.setFormatter(fmt)
        fh.addFilter(flt)
        logger.addHandler(fh)


def log_file() -> str | None:
    """Where this process writes tracebacks: the run's log on rank 0, ``cmc.rankK.log`` on
    rank K; None before a run directory is known."""
    return _LOGFILE[0] if _LOGFILE else None


def log_traceback(exc: BaseException, path: str | None = None) -> None:
    """Append the traceback of ``exc`` to ``path`` (default: this process's log file) only;
    the terminal gets one line."""
    import traceback

    path = path or log_file()
    if not path:
        return
    try:
        with open(path, "a") as fh:
            fh.write("".join(traceback.format_exception(exc)))
    except OSError:
        pass
