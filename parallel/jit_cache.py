"""Where numba keeps compiled kernels: one cache folder per version of the kernel sources.

numba's on-disk cache (``cache=True``) is invalidated only when the file that defines a
function changes, not when a function it calls (or inlines) from another file does
(numba issues #1833, #9483).  An update that touches ``physics/potential.py`` alone would
then run ``physics/orbits.py`` kernels with the old potential code inlined: silently wrong
physics.  Keying the cache folder by a hash of every kernel source file rules that out; an
unchanged tree reuses its compiled kernels.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numba

_ROOT = Path(__file__).resolve().parents[1]
#: Packages whose modules define numba kernels.
KERNEL_PACKAGES = ("physics", "parallel")


def kernel_source_hash(root: str | Path = _ROOT) -> str:
    """SHA-1 (first 16 hex digits) of all kernel source files below ``root``, numba's version
    included."""
    h = hashlib.sha1(numba.__version__.encode())
    for pkg in KERNEL_PACKAGES:
        for path in sorted((Path(root) / pkg).glob("*.py")):
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def configure_numba_cache() -> None:
    """Point numba's cache at ``<base>/kernels-<hash>`` before any kernel is defined.

    ``<base>`` is ``$NUMBA_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/henon-cmc`` (default
    ``~/.cache/henon-cmc``), else (not writable) the temporary directory.  Idempotent; called
    by the ``physics`` and ``parallel`` packages.
    """
    if getattr(numba.config, "_cmc_cache_configured", False):
        return
    tag = f"kernels-{kernel_source_hash()}"
    bases = [os.environ.get("NUMBA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "henon-cmc"),
        os.path.join(tempfile.gettempdir(), f"henon-cmc-{os.getuid()}")]
    for base in bases:
        path = os.path.join(base, tag)
        try:
            os.makedirs(path, exist_ok=True)
            tempfile.TemporaryFile(dir=path).close()
        except OSError:
            continue
        numba.config.CACHE_DIR = path
        break
    numba.config._cmc_cache_configured = True
