"""The lfsr113 recurrence (L'Ecuyer's combined Tausworthe generator, GSL ``taus113``).

lfsr113 (L'Ecuyer 1999, *Math. Comp.* 68, 261) combines four Tausworthe
components with parameters ``(k, q, s)`` = (31, 6, 18), (29, 2, 2), (28, 13, 7)
and (25, 3, 13).  Each component keeps a 32-bit word ``z`` of which the top
``k`` bits are significant; one step is::

    b = (((z << q) ^ z) >> (k - s))
    z = (((z & mask) << s) ^ b)          # all in 32-bit unsigned arithmetic

and the output is ``z1 ^ z2 ^ z3 ^ z4``.  The period is about ``2**113``.  The
recurrence and the seeding by :func:`seed_state` are exactly those of GSL's
``gsl_rng_taus113``, so outputs can be cross-checked against GSL and against
L'Ecuyer's reference code (:func:`state_from_components`, no discards).

The state of one generator is four ``uint32`` words; the state of many
generators is a C-contiguous ``(n, 4)`` ``uint32`` array whose rows are
advanced in place by the ``@njit`` kernels :func:`taus_next_u32`,
:func:`taus_uniform` and :func:`fill_uniform`.  Uniform doubles are
``(u + 0.5) * 2**-32`` and therefore lie in the *open* interval (0, 1): the
physics draws ``log(X)`` and ``1/X`` without guarding against 0 or 1.

Besides those kernels: the jump kernels :func:`apply_jump` and :func:`apply_jump_tables`,
which apply the matrices of :mod:`parallel.rng_jump`; a plain-Python reference of the
recurrence (:func:`reference_outputs`, for tests and cross-checks); and the seeding and
validation of states (:func:`seed_state`, :func:`state_from_components`,
:func:`validate_state`).  :mod:`parallel.rng` is the generator's public interface.
"""

from __future__ import annotations

import operator

import numpy as np
from numba import njit

#: ``(k, q, s, mask)`` of the four components; ``mask`` clears the low
#: ``32 - k`` bits, which are not part of the component's state.
COMPONENT_PARAMS: tuple[tuple[int, int, int, int], ...] = (
    (31, 6, 18, 4294967294),
    (29, 2, 2, 4294967288),
    (28, 13, 7, 4294967280),
    (25, 3, 13, 4294967168),
)
# Smallest valid word of each component: below it the k significant bits are
# all zero and the component would output zeros forever.
_MIN_WORD = (2, 8, 16, 128)
_U32 = 0xFFFFFFFF

# numba promotes uint32 arithmetic to uint64; the kernels therefore work in
# uint64 and mask back to 32 bits wherever a left shift could carry out.
_M = np.uint64(0xFFFFFFFF)
_C1 = np.uint64(4294967294)
_C2 = np.uint64(4294967288)
_C3 = np.uint64(4294967280)
_C4 = np.uint64(4294967168)
_TWO_M32 = 2.0**-32


# ---------------------------------------------------------------------------
# njit kernels
# ---------------------------------------------------------------------------
@njit(cache=True, inline="always")
def _step4(z1, z2, z3, z4):
    """One lfsr113 step on four uint64-held 32-bit words (GSL ``taus113_get``)."""
    b = (((z1 << 6) & _M) ^ z1) >> 13
    z1 = (((z1 & _C1) << 18) & _M) ^ b
    b = (((z2 << 2) & _M) ^ z2) >> 27
    z2 = (((z2 & _C2) << 2) & _M) ^ b
    b = (((z3 << 13) & _M) ^ z3) >> 21
    z3 = (((z3 & _C3) << 7) & _M) ^ b
    b = (((z4 << 3) & _M) ^ z4) >> 12
    z4 = (((z4 & _C4) << 13) & _M) ^ b
    return z1, z2, z3, z4


@njit(cache=True)
def taus_next_u32(states: np.ndarray, i: int) -> np.uint32:
    """Advance generator ``i`` one step and return its 32-bit output.

    Parameters
    ----------
    states : ndarray of uint32, shape (n, 4)
        Generator states; row ``i`` is updated in place.
    i : int
        Row to advance.

    Returns
    -------
    numpy.uint32
        ``z1 ^ z2 ^ z3 ^ z4`` after the step.
    """
    z1, z2, z3, z4 = _step4(
        np.uint64(states[i, 0]),
        np.uint64(states[i, 1]),
        np.uint64(states[i, 2]),
        np.uint64(states[i, 3]),
    )
    states[i, 0] = np.uint32(z1)
    states[i, 1] = np.uint32(z2)
    states[i, 2] = np.uint32(z3)
    states[i, 3] = np.uint32(z4)
    return np.uint32(z1 ^ z2 ^ z3 ^ z4)


@njit(cache=True)
def taus_uniform(states: np.ndarray, i: int) -> float:
    """Advance generator ``i`` and return a double in the open interval (0, 1).

    Parameters
    ----------
    states : ndarray of uint32, shape (n, 4)
        Generator states; row ``i`` is updated in place.
    i : int
        Row to advance.

    Returns
    -------
    float
        ``(u + 0.5) * 2**-32`` with ``u`` the 32-bit output; never 0 or 1.
    """
    # Via int64: the value fits, and signed int -> double is one instruction
    # where unsigned 64-bit -> double needs a fix-up sequence on x86.
    return (np.float64(np.int64(taus_next_u32(states, i))) + 0.5) * _TWO_M32


@njit(cache=True, inline="always")
def taus_uniform_z(z1, z2, z3, z4):
    """:func:`taus_uniform` on a state held in four uint64 words (a kernel's registers, not a
    row of the states array): returns the advanced words and the double.  The same bits as
    :func:`taus_uniform` on a row holding the same state."""
    z1, z2, z3, z4 = _step4(z1, z2, z3, z4)
    # int64 detour: see taus_uniform.
    return z1, z2, z3, z4, (np.float64(np.int64(z1 ^ z2 ^ z3 ^ z4)) + 0.5) * _TWO_M32


@njit(cache=True)
def fill_uniform(states: np.ndarray, i: int, out: np.ndarray) -> None:
    """Fill ``out`` with consecutive open-(0, 1) doubles of generator ``i``.

    Equivalent to ``out[k] = taus_uniform(states, i)`` for every ``k`` but keeps
    the state in registers during the loop.

    Parameters
    ----------
    states : ndarray of uint32, shape (n, 4)
        Generator states; row ``i`` is updated in place.
    i : int
        Row to draw from.
    out : ndarray of float64, 1-D
        Output buffer.
    """
    z1 = np.uint64(states[i, 0])
    z2 = np.uint64(states[i, 1])
    z3 = np.uint64(states[i, 2])
    z4 = np.uint64(states[i, 3])
    for k in range(out.shape[0]):
        z1, z2, z3, z4 = _step4(z1, z2, z3, z4)
        # int64 detour: see taus_uniform.
        out[k] = (np.float64(np.int64(z1 ^ z2 ^ z3 ^ z4)) + 0.5) * _TWO_M32
    states[i, 0] = np.uint32(z1)
    states[i, 1] = np.uint32(z2)
    states[i, 2] = np.uint32(z3)
    states[i, 3] = np.uint32(z4)


@njit(cache=True)
def fill_u32(states: np.ndarray, i: int, out: np.ndarray) -> None:
    """Fill ``out`` with consecutive raw 32-bit outputs of generator ``i``.

    Parameters
    ----------
    states : ndarray of uint32, shape (n, 4)
        Generator states; row ``i`` is updated in place.
    i : int
        Row to draw from.
    out : ndarray of uint32, 1-D
        Output buffer.
    """
    z1 = np.uint64(states[i, 0])
    z2 = np.uint64(states[i, 1])
    z3 = np.uint64(states[i, 2])
    z4 = np.uint64(states[i, 3])
    for k in range(out.shape[0]):
        z1, z2, z3, z4 = _step4(z1, z2, z3, z4)
        out[k] = np.uint32(z1 ^ z2 ^ z3 ^ z4)
    states[i, 0] = np.uint32(z1)
    states[i, 1] = np.uint32(z2)
    states[i, 2] = np.uint32(z3)
    states[i, 3] = np.uint32(z4)


@njit(cache=True)
def apply_jump(states: np.ndarray, i: int, jm: np.ndarray) -> None:
    """Jump generator ``i`` by the distance encoded in ``jm``, in place.

    Parameters
    ----------
    states : ndarray of uint32, shape (n, 4)
        Generator states; row ``i`` is replaced by its image.
    i : int
        Row to jump.
    jm : ndarray of uint32, shape (4, 32)
        Jump matrices from :func:`jump_matrices`: ``jm[c, b]`` is the image of
        bit ``b`` of component ``c``.
    """
    for c in range(4):
        v = np.uint64(states[i, c])
        acc = np.uint64(0)
        for b in range(32):
            # Branch-free: the bits of a state are random, so a branch would
            # be mispredicted half of the time.
            bit = (v >> np.uint64(b)) & np.uint64(1)
            acc ^= np.uint64(jm[c, b]) & (np.uint64(0) - bit)
        states[i, c] = np.uint32(acc)


@njit(cache=True)
def jump_tables(jm: np.ndarray) -> np.ndarray:
    """Expand jump matrices into byte lookup tables for :func:`apply_jump_tables`.

    Parameters
    ----------
    jm : ndarray of uint32, shape (4, 32)
        Jump matrices from :func:`jump_matrices`.

    Returns
    -------
    ndarray of uint32, shape (4, 4, 256)
        ``jt[c, p, v]`` is the image of byte ``p`` of word ``c`` having value
        ``v`` (XOR of the columns of its set bits).
    """
    jt = np.zeros((4, 4, 256), dtype=np.uint32)
    for c in range(4):
        for p in range(4):
            for v in range(1, 256):
                low = v & (v - 1)  # v without its lowest set bit
                b = 0
                while not (v >> b) & 1:
                    b += 1
                jt[c, p, v] = jt[c, p, low] ^ jm[c, 8 * p + b]
    return jt


@njit(cache=True)
def apply_jump_tables(states: np.ndarray, i: int, jt: np.ndarray) -> None:
    """Same as :func:`apply_jump` with tables from :func:`jump_tables`.

    Sixteen table look-ups instead of 128 column XORs: worth it when one
    distance is applied to many states (building sub-stream tables).

    Parameters
    ----------
    states : ndarray of uint32, shape (n, 4)
        Generator states; row ``i`` is replaced by its image.
    i : int
        Row to jump.
    jt : ndarray of uint32, shape (4, 4, 256)
        Tables from :func:`jump_tables`.
    """
    for c in range(4):
        v = states[i, c]
        states[i, c] = (
            jt[c, 0, v & 0xFF]
            ^ jt[c, 1, (v >> 8) & 0xFF]
            ^ jt[c, 2, (v >> 16) & 0xFF]
            ^ jt[c, 3, (v >> 24) & 0xFF]
        )


@njit(cache=True)
def _raw_kernel(state, count):
    states = state.reshape(1, 4).copy()
    out = np.empty(count, dtype=np.uint32)
    fill_u32(states, 0, out)
    return out


# ---------------------------------------------------------------------------
# Plain-Python reference of the recurrence (for tests and cross-checks)
# ---------------------------------------------------------------------------
def _component_step(c: int, z: int) -> int:
    """One step of component ``c`` on the Python int word ``z``."""
    k, q, s, mask = COMPONENT_PARAMS[c]
    b = (((z << q) & _U32) ^ z) >> (k - s)
    return (((z & mask) << s) & _U32) ^ b


def reference_outputs(state: np.ndarray | list[int], count: int) -> tuple[list[int], list[int]]:
    """Raw outputs of the recurrence in plain Python (slow; for testing).

    Parameters
    ----------
    state : array_like of 4 ints
        Starting state (not modified).
    count : int
        Number of outputs.

    Returns
    -------
    outputs : list of int
        The ``count`` 32-bit outputs.
    final_state : list of int
        The state after the last step.
    """
    z = [int(w) for w in state]
    out = []
    for _ in range(count):
        z = [_component_step(c, z[c]) for c in range(4)]
        out.append(z[0] ^ z[1] ^ z[2] ^ z[3])
    return out, z


def reference_uniforms(state: np.ndarray | list[int], count: int) -> list[float]:
    """Plain-Python reference of :func:`taus_uniform` (slow; for testing).

    Parameters
    ----------
    state : array_like of 4 ints
        Starting state (not modified).
    count : int
        Number of doubles.

    Returns
    -------
    list of float
        ``(u + 0.5) * 2**-32`` for the ``count`` raw outputs ``u``.
    """
    return [(u + 0.5) * 2.0**-32 for u in reference_outputs(state, count)[0]]


def apply_jump_ref(state: np.ndarray | list[int], jm: np.ndarray) -> list[int]:
    """Plain-Python reference of :func:`apply_jump` for a single state.

    Parameters
    ----------
    state : array_like of 4 ints
        State to jump (not modified).
    jm : ndarray of uint32, shape (4, 32)
        Jump matrices from :func:`jump_matrices`.

    Returns
    -------
    list of int
        The jumped state.
    """
    out = []
    for c in range(4):
        v = int(state[c])
        acc = 0
        for b in range(32):
            if (v >> b) & 1:
                acc ^= int(jm[c, b])
        out.append(acc)
    return out


# ---------------------------------------------------------------------------
# Seeding and validation
# ---------------------------------------------------------------------------
def _as_u32_int(x: object, name: str) -> int:
    """Return ``x`` as a Python int in [0, 2**32) or raise ValueError."""
    if isinstance(x, bool | np.bool_):
        raise ValueError(f"{name} must be an integer, got {x!r}")
    try:
        v = operator.index(x)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {x!r}") from None
    if not 0 <= v < 2**32:
        raise ValueError(f"{name} must satisfy 0 <= {name} < 2**32, got {v}")
    return v


def validate_state(state: np.ndarray) -> None:
    """Check that ``state`` holds valid lfsr113 states.

    Parameters
    ----------
    state : ndarray of uint32, shape (..., 4)
        One state (shape (4,)) or any stack of states.

    Raises
    ------
    ValueError
        If ``state`` is not a uint32 array with last axis 4, or a component
        word is below its minimum (2, 8, 16, 128): then the significant bits of
        that component are all zero and it would output zeros forever.
    """
    if not isinstance(state, np.ndarray):
        raise ValueError(f"lfsr113 state must be a numpy array, got {type(state).__name__}")
    if state.dtype != np.uint32:
        raise ValueError(f"lfsr113 state must have dtype uint32, got {state.dtype}")
    if state.ndim < 1 or state.shape[-1] != 4:
        raise ValueError(f"lfsr113 state must have shape (..., 4), got {state.shape}")
    for c, lo in enumerate(_MIN_WORD):
        words = state[..., c]
        if words.size and int(words.min()) < lo:
            bad = np.argwhere(np.asarray(words < lo)).ravel().tolist()[:5]
            raise ValueError(
                f"invalid lfsr113 state: component z{c + 1} must be >= {lo} "
                f"(its significant bits are all zero) at index {bad}"
            )


def state_from_components(z1: int, z2: int, z3: int, z4: int) -> np.ndarray:
    """Build a state from four raw component words (L'Ecuyer's seeding).

    No draws are discarded, so this reproduces L'Ecuyer's ``lfsr113`` code
    started from the seeds ``z1..z4``.

    Parameters
    ----------
    z1, z2, z3, z4 : int
        Component words; must satisfy ``z1 >= 2``, ``z2 >= 8``, ``z3 >= 16``,
        ``z4 >= 128`` and be below ``2**32``.

    Returns
    -------
    ndarray of uint32, shape (4,)
        The state.

    Raises
    ------
    ValueError
        If a word is out of range.
    """
    words = [_as_u32_int(z, f"z{c + 1}") for c, z in enumerate((z1, z2, z3, z4))]
    state = np.array(words, dtype=np.uint32)
    validate_state(state)
    return state


def seed_state(seed: int) -> np.ndarray:
    """Seed a generator exactly like GSL's ``taus113_set``.

    Seed 0 is replaced by 1; the words are successive ``69069 * n mod 2**32``
    values raised to their minimum if needed, then 10 draws are discarded.

    Parameters
    ----------
    seed : int
        Seed, ``0 <= seed < 2**32``.

    Returns
    -------
    ndarray of uint32, shape (4,)
        The seeded state.

    Raises
    ------
    ValueError
        If ``seed`` is not an integer in range.
    """
    s = _as_u32_int(seed, "seed")
    if s == 0:
        s = 1
    words = []
    z = s
    for lo in _MIN_WORD:
        z = (69069 * z) & _U32
        if z < lo:
            z += lo
        words.append(z)
    _, final = reference_outputs(words, 10)
    return np.array(final, dtype=np.uint32)
