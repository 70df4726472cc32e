"""L'Ecuyer's combined Tausworthe generator lfsr113 (GSL ``taus113``) with jump-ahead.

The generator's public interface: every name of ``__all__`` is importable from here.  The
recurrence, its ``@njit`` kernels (:func:`taus_uniform`, :func:`fill_uniform`, ...), its
plain-Python reference and the seeding are in :mod:`parallel.taus113`; the jump-ahead by any
distance (GF(2) matrix powers and polynomial arithmetic, tested against each other) in
:mod:`parallel.rng_jump`.  This module fixes the layout of the streams.

Streams and sub-streams
-----------------------
Stream ``k`` of seed ``s`` starts ``k * STREAM_JUMP`` (``2**80``) steps after
:func:`seed_state` ``(s)``: one stream per MPI rank.  A little under ``2**33``
non-overlapping streams fit in the period; ``MAX_STREAMS = 2**32`` are
allowed.  Within a stream, sub-stream ``j`` starts a further
``j * SUBSTREAM_JUMP`` (``2**60``) steps on; there is one
sub-stream per 20-star block, so the random numbers of a star depend on its
block and not on how many draws other blocks made.  ``2**20`` sub-streams of
``2**60`` draws each fill exactly one stream, so nothing overlaps as long as a
stream has at most ``MAX_SUBSTREAMS = 2**20`` sub-streams and no sub-stream
draws ``2**60`` numbers.  A realistic run is far inside both limits:
``N = 1e7`` stars make ``5e5 < 2**20 ~ 1.05e6`` blocks, even on a single
rank, and one block draws about 20 stars x ~10 numbers x ``1e5`` steps
``~ 2e7 << 2**60 ~ 1.2e18`` numbers.

Use :func:`raw_outputs` to obtain the raw 32-bit outputs of stream ``k``,
sub-stream ``j`` of seed ``s`` for comparison with another implementation.
"""

from __future__ import annotations

import numpy as np

from parallel.rng_jump import (
    _check_distance,
    berlekamp_massey,
    component_polynomials,
    jump_matrices,
    jump_state,
    jump_state_poly,
)
from parallel.taus113 import (
    COMPONENT_PARAMS,
    _raw_kernel,
    apply_jump,
    apply_jump_ref,
    apply_jump_tables,
    fill_u32,
    fill_uniform,
    jump_tables,
    reference_outputs,
    reference_uniforms,
    seed_state,
    state_from_components,
    taus_next_u32,
    taus_uniform,
    taus_uniform_z,
    validate_state,
)

__all__ = [
    "COMPONENT_PARAMS",
    "MAX_STREAMS",
    "MAX_SUBSTREAMS",
    "STREAM_JUMP",
    "SUBSTREAM_JUMP",
    "apply_jump",
    "apply_jump_tables",
    "apply_jump_ref",
    "berlekamp_massey",
    "component_polynomials",
    "fill_u32",
    "fill_uniform",
    "jump_matrices",
    "jump_state",
    "jump_state_poly",
    "jump_tables",
    "raw_outputs",
    "reference_outputs",
    "reference_uniforms",
    "seed_state",
    "state_from_components",
    "taus_next_u32",
    "taus_uniform_z",
    "taus_uniform",
    "validate_state",
]

#: Distance between consecutive streams (one per MPI rank).
STREAM_JUMP: int = 2**80
#: Distance between consecutive sub-streams of a stream (one per 20-star block).
SUBSTREAM_JUMP: int = 2**60
#: Sub-streams that fit in one stream without running into the next one.
MAX_SUBSTREAMS: int = STREAM_JUMP // SUBSTREAM_JUMP
#: Streams allowed (conservative): the period, (2**31-1)(2**29-1)(2**28-1)(2**25-1)
#: ~ 2**113, holds a little under 2**33 streams of 2**80 draws.
MAX_STREAMS: int = 2**32


# ---------------------------------------------------------------------------
# Convenience
# ---------------------------------------------------------------------------
def raw_outputs(seed: int, stream: int, substream: int, count: int) -> np.ndarray:
    """Raw 32-bit outputs of stream ``stream``, sub-stream ``substream`` of ``seed``.

    The starting state is :func:`seed_state` ``(seed)`` advanced by
    ``stream * STREAM_JUMP + substream * SUBSTREAM_JUMP`` steps; the first
    returned value is the output of the first step after that.  This is the
    documented definition to compare against other implementations.

    Parameters
    ----------
    seed : int
        Seed, ``0 <= seed < 2**32``.
    stream : int
        Global stream index, ``0 <= stream < MAX_STREAMS``.
    substream : int
        Sub-stream index, ``0 <= substream < MAX_SUBSTREAMS``.
    count : int
        Number of outputs, ``>= 0``.

    Returns
    -------
    ndarray of uint32, shape (count,)
        The outputs.
    """
    stream = _check_distance(stream)
    if stream >= MAX_STREAMS:
        raise ValueError(f"stream must be < {MAX_STREAMS}, got {stream}")
    substream = _check_distance(substream)
    if substream >= MAX_SUBSTREAMS:
        raise ValueError(f"substream must be < {MAX_SUBSTREAMS} (no overlap), got {substream}")
    count = _check_distance(count)
    state = jump_state(seed_state(seed), stream * STREAM_JUMP + substream * SUBSTREAM_JUMP)
    return _raw_kernel(state, count)
