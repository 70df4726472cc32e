"""Jump-ahead of the lfsr113 generator (:mod:`parallel.taus113`) by any distance.

Every component is linear over GF(2) on its 32-bit word, so ``n`` steps are
the matrix power ``T_c**n`` (a 32x32 bit matrix).  Two independent routes are
implemented and tested against each other:

* matrix exponentiation by squaring (:func:`jump_matrices`), whose result --
  the images of the 32 unit vectors, one ``uint32`` column per bit -- is
  applied to any number of states by the ``@njit`` kernel :func:`apply_jump`;
* polynomial arithmetic (:func:`jump_state_poly`): the characteristic
  polynomial ``x**(32-k) P_c(x)`` of each component is found by
  Berlekamp-Massey on the component's output bits (``P_c`` is the primitive
  degree-``k`` polynomial of the decimated trinomial ``x**k + x**q + 1``),
  then ``x**n mod`` it gives coefficients ``c_i`` with
  ``T**n z = sum_i c_i T**i z``.

Both cost O(log n) and accept any ``n >= 0``.
"""

from __future__ import annotations

import operator
from functools import cache, lru_cache

import numpy as np

from parallel.taus113 import COMPONENT_PARAMS, _component_step, apply_jump, validate_state


# ---------------------------------------------------------------------------
# Jump-ahead, method (a): GF(2) matrix powers
# ---------------------------------------------------------------------------
def _check_distance(n: object) -> int:
    if isinstance(n, bool | np.bool_):
        raise ValueError(f"jump distance must be an integer, got {n!r}")
    try:
        v = operator.index(n)
    except TypeError:
        raise ValueError(f"jump distance must be an integer, got {n!r}") from None
    if v < 0:
        raise ValueError(f"jump distance must be >= 0, got {v}")
    return v


def _transition_bits() -> np.ndarray:
    """One-step matrices as 0/1 arrays, shape (4, 32, 32): ``M[c, row, col]``."""
    m = np.zeros((4, 32, 32), dtype=np.int64)
    for c in range(4):
        for b in range(32):
            img = _component_step(c, 1 << b)
            m[c, :, b] = (img >> np.arange(32)) & 1
    return m


@cache
def _power_of_two_bits(j: int) -> np.ndarray:
    """``T**(2**j)`` as 0/1 arrays, shape (4, 32, 32); cached because every
    jump distance reuses the same squarings."""
    if j == 0:
        out = _transition_bits()
    else:
        p = _power_of_two_bits(j - 1)
        out = (p @ p) & 1
    out.setflags(write=False)
    return out


def _bits_to_columns(m: np.ndarray) -> np.ndarray:
    weights = np.uint64(1) << np.arange(32, dtype=np.uint64)
    cols = (m.astype(np.uint64) * weights[None, :, None]).sum(axis=1)
    return cols.astype(np.uint32)


@lru_cache(maxsize=256)
def _jump_matrices_cached(n: int) -> np.ndarray:
    result = np.broadcast_to(np.eye(32, dtype=np.int64), (4, 32, 32)).copy()
    j = 0
    while n:
        if n & 1:
            result = (_power_of_two_bits(j) @ result) & 1
        n >>= 1
        j += 1
    cols = _bits_to_columns(result)
    cols.setflags(write=False)
    return cols


def jump_matrices(n: int) -> np.ndarray:
    """Jump matrices for a distance of ``n`` steps (GF(2) matrix power).

    Parameters
    ----------
    n : int
        Jump distance, any ``n >= 0`` (e.g. ``2**80``); costs O(log n).

    Returns
    -------
    ndarray of uint32, shape (4, 32)
        Column ``b`` of component ``c`` is the image of bit ``b`` of word
        ``z_{c+1}`` after ``n`` steps; pass to :func:`apply_jump`.

    Raises
    ------
    ValueError
        If ``n`` is negative or not an integer.
    """
    return _jump_matrices_cached(_check_distance(n)).copy()


def jump_state(state: np.ndarray, n: int, method: str = "matrix") -> np.ndarray:
    """Return ``state`` advanced by ``n`` steps.

    Parameters
    ----------
    state : ndarray of uint32, shape (4,)
        Starting state (not modified).
    n : int
        Jump distance, ``n >= 0``.
    method : {"matrix", "poly"}
        GF(2) matrix powers (:func:`jump_matrices`) or polynomial arithmetic
        (:func:`jump_state_poly`); both give identical results.

    Returns
    -------
    ndarray of uint32, shape (4,)
        The jumped state.
    """
    state = np.asarray(state)
    validate_state(state)
    if state.shape != (4,):
        raise ValueError(f"jump_state takes one state of shape (4,), got {state.shape}")
    if method == "poly":
        return jump_state_poly(state, n)
    if method != "matrix":
        raise ValueError(f"unknown jump method {method!r}; use 'matrix' or 'poly'")
    jm = _jump_matrices_cached(_check_distance(n))
    out = np.ascontiguousarray(state.reshape(1, 4)).copy()
    apply_jump(out, 0, jm)
    return out[0]


# ---------------------------------------------------------------------------
# Jump-ahead, method (b): polynomial arithmetic over GF(2)
# ---------------------------------------------------------------------------
def berlekamp_massey(bits: list[int]) -> tuple[int, int]:
    """Shortest linear recurrence over GF(2) generating ``bits``.

    Parameters
    ----------
    bits : list of int
        Sequence of 0/1 values.

    Returns
    -------
    connection : int
        Connection polynomial ``C(x) = 1 + c_1 x + ... + c_L x**L`` as a bit
        mask (bit ``i`` = coefficient of ``x**i``); the sequence satisfies
        ``s_t = sum_i c_i s_{t-i}``.
    length : int
        The linear complexity ``L``.
    """
    c, b = 1, 1
    length, m = 0, 1
    for t, s in enumerate(bits):
        d = s
        for i in range(1, length + 1):
            d ^= ((c >> i) & 1) & bits[t - i]
        if d == 0:
            m += 1
        elif 2 * length <= t:
            c, b = c ^ (b << m), c
            length, m = t + 1 - length, 1
        else:
            c ^= b << m
            m += 1
    return c, length


def _reverse_poly(p: int, degree: int) -> int:
    return int(format(p, f"0{degree + 1}b")[::-1], 2)


@cache
def component_polynomials() -> tuple[int, ...]:
    """Minimal polynomials ``P_c`` (degree ``k``) of the four components.

    Found by Berlekamp-Massey on the top output bit of each component, so they
    depend only on the recurrence, not on the matrix code.

    Returns
    -------
    tuple of int
        ``P_c`` as bit masks (bit ``i`` = coefficient of ``x**i``).
    """
    polys = []
    for c, (k, _q, _s, _mask) in enumerate(COMPONENT_PARAMS):
        z = 0x9E3779B9 | 0xFFFF0000
        # Warm up past the nilpotent transient (at most 32 - k steps) so the
        # word lies in the P_c-invariant subspace.
        for _ in range(40):
            z = _component_step(c, z)
        bits = []
        for _ in range(4 * k):
            z = _component_step(c, z)
            bits.append(z >> 31)
        conn, length = berlekamp_massey(bits)
        if length != k:  # pragma: no cover - would mean a broken recurrence
            raise RuntimeError(f"component {c + 1}: linear complexity {length} != {k}")
        polys.append(_reverse_poly(conn, k))
    return tuple(polys)


def _poly_mulmod(a: int, b: int, mod: int, deg: int) -> int:
    """``a * b mod mod`` over GF(2); ``mod`` has degree ``deg``."""
    prod = 0
    while b:
        if b & 1:
            prod ^= a
        a <<= 1
        b >>= 1
    for i in range(prod.bit_length() - 1, deg - 1, -1):
        if (prod >> i) & 1:
            prod ^= mod << (i - deg)
    return prod


def _x_pow_mod(n: int, mod: int, deg: int) -> int:
    """``x**n mod mod`` over GF(2) by square-and-multiply."""
    result = 1
    base = _poly_mulmod(2, 1, mod, deg)  # x reduced (deg >= 2 here)
    while n:
        if n & 1:
            result = _poly_mulmod(result, base, mod, deg)
        base = _poly_mulmod(base, base, mod, deg)
        n >>= 1
    return result


def jump_state_poly(state: np.ndarray, n: int) -> np.ndarray:
    """Advance ``state`` by ``n`` steps using polynomial arithmetic.

    For each component the characteristic polynomial of its 32x32 transition
    is ``Q_c(x) = x**(32-k) P_c(x)`` (the low ``32 - k`` bits are a nilpotent
    part that the next step discards), so ``T**n = r(T)`` with
    ``r = x**n mod Q_c`` by Cayley-Hamilton, and ``T**i z`` for ``i < 32`` is
    obtained by stepping the recurrence.  Independent of :func:`jump_matrices`.

    Parameters
    ----------
    state : ndarray of uint32, shape (4,)
        Starting state (not modified).
    n : int
        Jump distance, ``n >= 0``.

    Returns
    -------
    ndarray of uint32, shape (4,)
        The jumped state.
    """
    n = _check_distance(n)
    polys = component_polynomials()
    out = []
    for c, (k, _q, _s, _mask) in enumerate(COMPONENT_PARAMS):
        q_c = polys[c] << (32 - k)
        r = _x_pow_mod(n, q_c, 32)
        z = int(state[c])
        acc = 0
        for i in range(32):
            if (r >> i) & 1:
                acc ^= z
            z = _component_step(c, z)
        out.append(acc)
    return np.array(out, dtype=np.uint32)
