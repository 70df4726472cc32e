"""The numba cache folder follows every kernel source file (numba alone would not)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numba

from parallel.jit_cache import kernel_source_hash

ROOT = Path(__file__).resolve().parents[1]


def test_cache_folder_is_keyed_by_all_kernel_sources(tmp_path):
    for pkg in ("physics", "parallel"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    before = kernel_source_hash(tmp_path)
    assert before == kernel_source_hash(ROOT)
    assert numba.config.CACHE_DIR.endswith(f"kernels-{before}")
    # a change to a file whose functions other kernels inline must move the cache
    pot = tmp_path / "physics" / "potential.py"
    pot.write_text(pot.read_text() + "\n# changed\n")
    assert kernel_source_hash(tmp_path) != before
