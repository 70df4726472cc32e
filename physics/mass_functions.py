"""Stellar masses for initial conditions: mass functions, and the samplers' argument checks.

Part of the initial conditions (:mod:`physics.initial_conditions` samples the models and
re-exports :func:`sample_masses`).  :func:`sample_masses` draws masses in solar masses (equal,
a power law, or Kroupa 2001) and returns their sum, which the caller keeps for the conversion to
physical units.  The argument checks (``_check_*``) are shared with the model samplers.

Random numbers
--------------
All randomness comes from the ``numpy.random.Generator`` passed as ``rng`` (one uniform per
star for the non-equal kinds); global numpy random state is never touched.
"""

from __future__ import annotations

import math
import operator

import numpy as np

#: Kroupa (2001) broken power law: slopes of dN/dm ~ m^-alpha and the break masses (Msun).
KROUPA_BREAKS = (0.08, 0.5)
KROUPA_ALPHAS = (0.3, 1.3, 2.3)


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------


def _check_n(n: object) -> int:
    """Return ``n`` as an int >= 2 or raise ValueError naming ``n``."""
    if isinstance(n, bool | np.bool_):
        raise ValueError(f"n must be an integer >= 2, got {n!r}")
    try:
        n_int = operator.index(n)
    except TypeError:
        # Accept integral floats (e.g. 1e5 from a config file) but nothing fractional.
        if isinstance(n, float | np.floating) and math.isfinite(n) and float(n).is_integer():
            n_int = int(n)
        else:
            raise ValueError(f"n must be an integer >= 2, got {n!r}") from None
    if n_int < 2:
        raise ValueError(f"n must be an integer >= 2, got {n!r}")
    return n_int


def _check_rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def _check_positive(name: str, value: object) -> float:
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}") from None
    if not (math.isfinite(x) and x > 0.0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return x


def _check_masses(masses: object, n: int) -> np.ndarray:
    m = np.asarray(masses, dtype=np.float64)
    if m.ndim != 1 or m.size != n:
        raise ValueError(f"masses must be a 1-D array of length n={n}, got shape {m.shape}")
    if not np.all(np.isfinite(m)) or np.any(m <= 0.0):
        raise ValueError("masses must be positive and finite")
    return m


# --------------------------------------------------------------------------------------------
# mass functions
# --------------------------------------------------------------------------------------------


def _segment_integral(lo: float, hi: float, alpha: float) -> float:
    """Integral of m^-alpha from lo to hi, stable for alpha near 1."""
    beta = 1.0 - alpha
    lr = math.log(hi / lo)
    if beta == 0.0:
        return lr
    return lo**beta * math.expm1(beta * lr) / beta


def _power_law_inverse(u: np.ndarray, lo: float, hi: float, alpha: float) -> np.ndarray:
    """Inverse CDF of dN/dm ~ m^-alpha on [lo, hi]; u in [0, 1]. Stable for alpha near 1."""
    beta = 1.0 - alpha
    lr = math.log(hi / lo)
    if beta == 0.0:
        return lo * np.exp(u * lr)
    m = lo * np.exp(np.log1p(u * math.expm1(beta * lr)) / beta)
    return np.clip(m, lo, hi)


def _broken_power_law(
    n: int,
    rng: np.random.Generator,
    m_min: float,
    m_max: float,
    breaks: tuple[float, ...],
    alphas: tuple[float, ...],
) -> np.ndarray:
    """Sample a continuous broken power law restricted to [m_min, m_max], one uniform a star."""
    edges = [m_min] + [b for b in breaks if m_min < b < m_max] + [m_max]
    # Slope of each used segment: the law's slope at the segment's midpoint.
    bounds = np.asarray(breaks)
    seg_alpha = [alphas[int(np.searchsorted(bounds, math.sqrt(a * b)))]
                 for a, b in zip(edges[:-1], edges[1:])]
    # Continuity: coefficient c_k of m^-alpha_k, c_0 = 1, matched at each break.
    coef = [1.0]
    for k in range(1, len(seg_alpha)):
        coef.append(coef[-1] * edges[k] ** (seg_alpha[k] - seg_alpha[k - 1]))
    weights = np.array(
        [c * _segment_integral(a, b, al)
         for c, a, b, al in zip(coef, edges[:-1], edges[1:], seg_alpha)]
    )
    cum = np.concatenate([[0.0], np.cumsum(weights)]) / weights.sum()
    cum[-1] = 1.0
    u = rng.random(n)
    seg = np.clip(np.searchsorted(cum, u, side="right") - 1, 0, len(seg_alpha) - 1)
    out = np.empty(n)
    for k, al in enumerate(seg_alpha):  # loop over <= 3 segments, not stars
        sel = seg == k
        uk = (u[sel] - cum[k]) / (cum[k + 1] - cum[k])
        out[sel] = _power_law_inverse(np.clip(uk, 0.0, 1.0), edges[k], edges[k + 1], al)
    return out


def sample_masses(
    n: int,
    rng: np.random.Generator,
    kind: str = "equal",
    m_min: float = 0.1,
    m_max: float = 100.0,
    alpha: float = 2.35,
    m_equal: float = 1.0,
    brown_dwarf_slope: bool = True,
) -> tuple[np.ndarray, float]:
    """Draw stellar masses (Msun) from a mass function.

    Parameters
    ----------
    n : int
        Number of stars, >= 2.
    rng : numpy.random.Generator
        Source of all random numbers (one uniform per star for the non-equal kinds).
    kind : {'equal', 'power_law', 'kroupa'}
        ``'equal'``: every star has ``m_equal``.  ``'power_law'``: ``dN/dm ~ m^-alpha`` on
        ``[m_min, m_max]`` by inverse CDF (alpha = 1 handled: log-uniform).  ``'kroupa'``:
        Kroupa (2001) continuous broken power law, alpha = 1.3 for 0.08 <= m < 0.5 and 2.3 for
        m >= 0.5, and 0.3 below 0.08 (or 1.3 there too if ``brown_dwarf_slope`` is False),
        restricted to ``[m_min, m_max]``, by inverse CDF of the piecewise law.
    m_min, m_max : float
        Mass range in Msun, ``0 < m_min < m_max`` (ignored for ``'equal'``).
    alpha : float
        Power-law slope for ``'power_law'`` (finite; the Salpeter value 2.35 by default).
    m_equal : float
        Mass of every star for ``'equal'``, Msun (> 0).
    brown_dwarf_slope : bool
        For ``'kroupa'``: use alpha = 0.3 below 0.08 Msun.

    Returns
    -------
    masses : numpy.ndarray
        ``n`` masses in Msun, in random order (i.i.d. draws).
    total : float
        Their sum in Msun: the cluster mass, which sets the physical mass unit once the
        masses are normalised to 1 in Hénon units.

    Raises
    ------
    ValueError
        Naming the bad argument: ``n``, ``kind``, ``m_min``, ``m_max``, ``alpha``,
        ``m_equal``.
    TypeError
        If ``rng`` is not a ``numpy.random.Generator``.
    """
    n = _check_n(n)
    rng = _check_rng(rng)
    kinds = ("equal", "power_law", "kroupa")
    if kind not in kinds:
        raise ValueError(f"kind must be one of {kinds}, got {kind!r}")
    if kind == "equal":
        me = _check_positive("m_equal", m_equal)
        masses = np.full(n, me)
        return masses, float(masses.sum())

    lo = _check_positive("m_min", m_min)
    hi = _check_positive("m_max", m_max)
    if not hi > lo:
        raise ValueError(f"m_max must be greater than m_min, got m_min={lo!r}, m_max={hi!r}")
    if kind == "power_law":
        try:
            a = float(alpha)
        except (TypeError, ValueError):
            raise ValueError(f"alpha must be a finite number, got {alpha!r}") from None
        if not math.isfinite(a):
            raise ValueError(f"alpha must be a finite number, got {alpha!r}")
        masses = _power_law_inverse(rng.random(n), lo, hi, a)
    else:
        alphas = KROUPA_ALPHAS if brown_dwarf_slope else (1.3,) + KROUPA_ALPHAS[1:]
        masses = _broken_power_law(n, rng, lo, hi, KROUPA_BREAKS, alphas)
    return masses, float(masses.sum())
