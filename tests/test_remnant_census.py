"""The remnant census of runs with stellar evolution (diagnostics columns N_bh, N_ns, N_wd,
N_bh_binaries, N_bbh, M_bh: :func:`cmc.diagnostics.remnant_sums`)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from cmc.diagnostics import REMNANT_COLUMNS, remnant_sums
from cmc.stars import StarTable


def _table() -> StarTable:
    # singles: BH, NS, WD, MS, BH; binaries: BH-BH, BH-MS, NS-WD, MS-MS
    single_k = [14, 13, 11, 1, 14]
    single_m = [20.0, 1.3, 0.6, 1.0, 8.0]
    bk1, bk2 = [14, 1, 13, 0], [14, 14, 10, 1]
    bm1, bm2 = [10.0, 2.0, 1.2, 0.5], [7.0, 15.0, 0.5, 0.9]
    n = len(single_k) + len(bk1)
    binary = np.arange(n) >= len(single_k)
    t = StarTable.empty(n, binaries=True, stellar_evolution=True)
    t.binind = np.where(binary, np.arange(n), -1)
    t.startype = np.array(single_k + [0] * len(bk1))
    t.m_msun = np.array(single_m + [a + b for a, b in zip(bm1, bm2, strict=True)])
    t.bin_startype1 = np.array([0] * len(single_k) + bk1)
    t.bin_startype2 = np.array([0] * len(single_k) + bk2)
    t.bin_m1_msun = np.array([0.0] * len(single_k) + bm1)
    t.bin_m2_msun = np.array([0.0] * len(single_k) + bm2)
    return t


def test_remnant_census_counts_singles_and_binary_members():
    t = _table()
    sim = SimpleNamespace(stars=t, star_segments=lambda: np.array([0, t.n]))
    got = dict(zip(REMNANT_COLUMNS, remnant_sums(sim)[0], strict=True))
    assert got == {"N_bh": 5, "N_ns": 2, "N_wd": 2, "N_bh_binaries": 2, "N_bbh": 1,
                   "M_bh": 20.0 + 8.0 + 10.0 + 7.0 + 15.0}


def test_remnant_census_per_segment_adds_up():
    t = _table()
    whole = remnant_sums(SimpleNamespace(stars=t, star_segments=lambda: np.array([0, t.n])))
    cut = remnant_sums(SimpleNamespace(stars=t, star_segments=lambda: np.array([0, 3, 6, t.n])))
    assert cut.shape == (3, len(REMNANT_COLUMNS))
    np.testing.assert_array_equal(cut.sum(axis=0), whole[0])
    assert cut[0].tolist() == [1, 1, 1, 0, 0, 20.0]  # rows 0-2: BH, NS, WD singles
