"""Per-rank cost of reading every rank's exact-cut offers, against the number of ranks.

``python bench/gather_cost.py [P ...]`` (one process) emulates the gather of the step's exact
cuts (:func:`parallel.sort_cuts._exact_cuts`) on P ranks, each offering ``OFFERS`` pairs and
its columns of one value (the star table's 11 fields), and times what every rank does with
what it receives, without the network: the offers as numbers (today's two buffer
collectives, :func:`parallel.sort_cuts._offer_heads` and ``_offer_words``, the received
rows parsed by numpy) against pickled objects, one per rank (mpi4py's lowercase
``allgather``, used until 2026-11-27: each rank's tuple of arrays and dict unpacked on every
rank), both followed by
the same :func:`parallel.sort_cuts._own_moves`.  Prints a table and one JSON line,
microseconds per call (the best of ``REPEATS``).  The network's share (latency and bytes)
is the performance model's (:mod:`bench.perf_model`).
"""

from __future__ import annotations

import json
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cmc.fields import STAR_FIELDS  # noqa: E402
from parallel import sort_cuts as ss  # noqa: E402

#: Pairs each rank offers per step (the step's brackets hold a few stars per bound).
OFFERS = 8
REPEATS = 20


class _TiledComm:
    """A communicator of ``p`` ranks that all send what this one sends (collectives only
    as the offers' gather makes them; no network)."""

    def __init__(self, p: int) -> None:
        self.p = p

    def Get_size(self) -> int:  # noqa: N802 (mpi4py's names)
        return self.p

    def Get_rank(self) -> int:  # noqa: N802
        return 0

    def Allgather(self, sendbuf, recvbuf) -> None:  # noqa: N802
        recvbuf[...] = sendbuf[None, ...]

    def Allgatherv(self, sendbuf, recvbuf) -> None:  # noqa: N802
        send = sendbuf[0] if isinstance(sendbuf, (list, tuple)) else sendbuf
        buf = recvbuf[0]
        buf[...] = np.tile(send, (self.p, 1)).reshape(buf.shape)


def _best(fn) -> float:
    """Best time of ``fn()`` over :data:`REPEATS` calls [us]."""
    best = np.inf
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def measure(p: int) -> dict:
    """Both ways of reading ``p`` ranks' offers [us per call]."""
    rng = np.random.default_rng(p)
    k = np.sort(rng.random(OFFERS))
    t = rng.integers(0, 10**9, OFFERS)
    which = np.zeros(OFFERS, dtype=np.int32)
    names = [f.name for f in STAR_FIELDS]  # the star table's fields, as the step sorts them
    sizes = [np.dtype(f.dtype).itemsize for f in STAR_FIELDS]
    same = {"m": np.float64(1e-5).tobytes(), "binind": np.int64(-1).tobytes(),
            "startype": np.int32(1).tobytes(), "rad": np.float64(0.0).tobytes()}
    deficit = np.array([3])
    comm = _TiledComm(p)

    def words() -> tuple:
        n_offers, common = ss._offer_heads(comm, which.size, (names, sizes, same))
        ko, to, cut, owner = ss._offer_words(comm, k, t, which, n_offers)
        return ss._own_moves(ko, to, cut, owner, deficit, 0), common

    blob = pickle.dumps(((k, t, which), same))

    def pickled() -> tuple:
        got = [pickle.loads(blob) for _ in range(p)]
        ko, to, cut, owner = ss._flat_offers([g[0] for g in got])
        common = ss._common_values([g[1] for g in got])
        return ss._own_moves(ko, to, cut, owner, deficit, 0), common

    a, b = words(), pickled()
    if not (np.array_equal(a[0], b[0]) and a[1] == b[1] == same):
        raise RuntimeError(f"the two ways read different offers at P = {p}: {a} {b}")
    return {"P": p, "words_us": _best(words), "pickled_us": _best(pickled)}


def main() -> None:
    ps = [int(x) for x in sys.argv[1:]] or [2, 16, 128, 1024]
    rows = [measure(p) for p in ps]
    print("| P | as numbers (us) | pickled (us) |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r['P']} | {r['words_us']:.0f} | {r['pickled_us']:.0f} |")
    print("GATHER " + json.dumps({"offers_per_rank": OFFERS, "rows": rows}))


if __name__ == "__main__":
    main()
