"""Initial conditions for Hénon Monte Carlo runs: Plummer and King models, mass functions.

This module samples the models (:func:`plummer`, :func:`king` with :func:`solve_king`); its
parts are :mod:`physics.henon_units` (the shells' potential and energy, and
:func:`scale_to_henon_units`) and :mod:`physics.mass_functions` (:func:`sample_masses` and the
argument checks), whose names it re-exports.

Units
-----
Everything returned by :func:`plummer`, :func:`king` and :func:`scale_to_henon_units` is in
Hénon (N-body) units: G = 1, total mass M = 1, total energy E0 = -1/4, so the virial radius
``r_v = G M^2 / (2 |W|)`` is 1 for a system in virial equilibrium.  :func:`sample_masses`
returns masses in solar masses; the caller keeps their sum for the conversion to physical units.

Star sets are dicts of float64 arrays ``{'r', 'vr', 'vt', 'm'}`` sorted by increasing ``r``:
``vr`` is the radial velocity, ``vt >= 0`` the transverse speed.

Energy convention
-----------------
The potential energy is that of the spherical shells the stars stand for (CMC paper, eqs 1-5;
:mod:`physics.henon_units` says how the star's own shell is counted).

Random numbers
--------------
All randomness comes from the ``numpy.random.Generator`` passed as ``rng``; global numpy random
state is never touched, so a run is reproducible from the caller's streams.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp
from scipy.interpolate import PchipInterpolator
from scipy.special import erf, gammainc

from physics.henon_units import (
    HenonScaling,
    scale_to_henon_units,
    shell_energies,
    shell_potential,
)
from physics.mass_functions import (
    _check_masses,
    _check_n,
    _check_positive,
    _check_rng,
    sample_masses,
)

__all__ = [
    "HenonScaling",
    "KingModel",
    "king",
    "plummer",
    "plummer_scale_radius",
    "sample_masses",
    "scale_to_henon_units",
    "shell_energies",
    "shell_potential",
    "solve_king",
]

#: Plummer scale radius in Hénon units, a = 3 pi / 16 (virial radius 1).
PLUMMER_A_HENON = 3.0 * math.pi / 16.0


def plummer_scale_radius() -> float:
    """Plummer scale radius in Hénon units.

    Returns
    -------
    float
        ``a = 3 pi / 16`` (N-body length units), the scale radius of a Plummer sphere with
        G = M = 1 and E = -1/4.
    """
    return PLUMMER_A_HENON


# --------------------------------------------------------------------------------------------
# isotropic directions
# --------------------------------------------------------------------------------------------


def _isotropic_split(v: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Split speeds into (vr, vt) for isotropic directions: cos(theta) uniform in [-1, 1]."""
    mu = 2.0 * rng.random(v.size) - 1.0
    vr = v * mu
    vt = v * np.sqrt(np.maximum(0.0, 1.0 - mu * mu))
    return vr, vt


# --------------------------------------------------------------------------------------------
# Plummer
# --------------------------------------------------------------------------------------------


def _plummer_q(n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw n values of q = v/v_esc from g(q) ~ q^2 (1-q^2)^(7/2) by von Neumann rejection.

    Batched: acceptance is ~0.43, so each batch is sized to finish in about one round.
    """
    out = np.empty(n)
    filled = 0
    while filled < n:
        need = n - filled
        k = int(2.5 * need) + 16
        q = rng.random(k)
        y = 0.1 * rng.random(k)  # max of g is 0.0920 < 0.1 (Aarseth, Hénon & Wielen 1974)
        acc = q[y < q * q * (1.0 - q * q) ** 3.5]
        take = min(acc.size, need)
        out[filled : filled + take] = acc[:take]
        filled += take
    return out


def plummer(
    n: int,
    rng: np.random.Generator,
    r_max: float | None = None,
    masses: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Sample a Plummer sphere and return it in Hénon units.

    Radii come from the inverse of the cumulative mass ``M(<r) = r^3 / (r^2 + a^2)^(3/2)``,
    speeds from the isotropic Plummer DF by rejection on ``q^2 (1-q^2)^(7/2)`` with
    ``q = v / v_esc`` (Aarseth, Hénon & Wielen 1974), directions isotropic.  The sample is then
    passed to :func:`scale_to_henon_units`, so its exact shell energy is -1/4; in these units
    ``a = 3 pi / 16`` and the half-mass radius is 0.7686 (up to sampling noise).

    Parameters
    ----------
    n : int
        Number of stars, >= 2.
    rng : numpy.random.Generator
        Source of all random numbers.
    r_max : float, optional
        Outer cut-off in units of the virial radius of the *untruncated* model (> 0).  Radii
        are drawn only from the mass fraction inside it (no star is drawn beyond it); the
        speeds still follow the untruncated DF.  Because the truncated sample is rescaled to
        E = -1/4, the cut-off ends up at ``r_max`` times a factor that tends to 1 for large
        ``r_max`` (about 1.14 for 3, 1.06 for 5, 1.016 for 10); the ratio of the cut-off to
        the half-mass radius is that of the truncated model.  ``None``: no cut-off.
    masses : numpy.ndarray, optional
        Stellar masses (any unit, > 0, length ``n``); normalised to total 1.  They are attached
        to independently drawn positions, so the assignment is random (no mass segregation)
        whatever their order.  ``None``: equal masses ``1/n``.

    Returns
    -------
    dict of numpy.ndarray
        ``{'r', 'vr', 'vt', 'm'}`` in Hénon units, sorted by increasing ``r``.

    Raises
    ------
    ValueError
        If ``n`` is not an integer >= 2, ``r_max`` is not positive and finite, or ``masses``
        has the wrong length or non-positive entries.
    TypeError
        If ``rng`` is not a ``numpy.random.Generator``.
    """
    n = _check_n(n)
    rng = _check_rng(rng)
    if masses is None:
        m = np.full(n, 1.0 / n)
    else:
        m = _check_masses(masses, n)
        m = m / m.sum()

    # Model units: G = M = a = 1, where the virial radius is 16/(3 pi).
    if r_max is None:
        x_max = 1.0
    else:
        r_cut = _check_positive("r_max", r_max) * 16.0 / (3.0 * math.pi)
        x_max = (r_cut * r_cut / (1.0 + r_cut * r_cut)) ** 1.5
    x = x_max * rng.random(n)
    # X = 0 would put a star at r = 0 (probability 2^-53 per draw): redraw those.
    bad = x <= 0.0
    while np.any(bad):
        x[bad] = x_max * rng.random(int(bad.sum()))
        bad = x <= 0.0
    r = 1.0 / np.sqrt(x ** (-2.0 / 3.0) - 1.0)

    v_esc = math.sqrt(2.0) * (1.0 + r * r) ** -0.25
    v = _plummer_q(n, rng) * v_esc
    vr, vt = _isotropic_split(v, rng)

    stars, _ = scale_to_henon_units(r, vr, vt, m)
    return stars


# --------------------------------------------------------------------------------------------
# King (1966)
# --------------------------------------------------------------------------------------------


def _rho_hat(w: np.ndarray | float) -> np.ndarray:
    """King density in units of the DF normalisation: e^W erf(sqrt W) - sqrt(4W/pi)(1+2W/3)."""
    w = np.maximum(np.asarray(w, dtype=np.float64), 0.0)
    sw = np.sqrt(w)
    return np.exp(w) * erf(sw) - np.sqrt(4.0 * w / math.pi) * (1.0 + 2.0 * w / 3.0)


def _rho_hat_prime(w: float) -> float:
    """d rho_hat / dW = e^W erf(sqrt W) - 2 sqrt(W/pi)."""
    return math.exp(w) * math.erf(math.sqrt(w)) - 2.0 * math.sqrt(w / math.pi)


@dataclass(frozen=True)
class KingModel:
    """Solution of the King (1966) model in King units.

    King units: G = 1, velocity parameter sigma = 1 of the lowered Maxwellian
    ``f(E) ~ exp(W - v^2/2) - 1``, King radius ``r_0 = sqrt(9 sigma^2 / (4 pi G rho_0)) = 1``,
    hence central density ``rho_0 = 9 / (4 pi)``.  The potential is ``Phi = -W`` (plus a
    constant) and the cumulative mass is ``M(x) = -x^2 dW/dx``.

    Attributes
    ----------
    w0 : float
        Central dimensionless potential.
    x_tidal : float
        Tidal radius (W = 0) in units of r_0.
    mass_total : float
        Total mass in King units.
    concentration : float
        ``c = log10(x_tidal)``.
    """

    w0: float
    x_tidal: float
    mass_total: float
    concentration: float
    _x0: float
    _b4: float
    _sol: Callable[[np.ndarray], np.ndarray]
    _x_of_u: PchipInterpolator

    def potential(self, x: np.ndarray | float) -> np.ndarray:
        """Dimensionless potential W at radius x (units of r_0); 0 beyond the tidal radius."""
        x = np.atleast_1d(np.asarray(x, dtype=np.float64))
        w = np.zeros_like(x)
        inner = x < self._x0
        mid = ~inner & (x < self.x_tidal)
        w[inner] = self.w0 - 1.5 * x[inner] ** 2 + self._b4 * x[inner] ** 4
        if np.any(mid):
            w[mid] = self._sol(x[mid])[0]
        return np.maximum(w, 0.0)

    def mass(self, x: np.ndarray | float) -> np.ndarray:
        """Mass inside radius x (King units), ``-x^2 dW/dx``; constant beyond x_tidal."""
        x = np.atleast_1d(np.asarray(x, dtype=np.float64))
        out = np.full_like(x, self.mass_total)
        inner = x < self._x0
        mid = ~inner & (x < self.x_tidal)
        xi = x[inner]
        out[inner] = -(xi**2) * (-3.0 * xi + 4.0 * self._b4 * xi**3)
        if np.any(mid):
            out[mid] = -(x[mid] ** 2) * self._sol(x[mid])[1]
        out[x <= 0.0] = 0.0
        return np.minimum(out, self.mass_total)

    def mass_fraction(self, x: np.ndarray | float) -> np.ndarray:
        """Cumulative mass fraction M(<x)/M_total (usable as a CDF, e.g. for a KS test)."""
        return self.mass(x) / self.mass_total

    def density(self, x: np.ndarray | float) -> np.ndarray:
        """Density in King units, ``(9/4pi) rho_hat(W) / rho_hat(W0)``."""
        return 9.0 / (4.0 * math.pi) * _rho_hat(self.potential(x)) / _rho_hat(self.w0)

    def radius_of_mass_fraction(self, f: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`mass_fraction` (units of r_0), by monotone interpolation."""
        u = np.cbrt(np.clip(np.asarray(f, dtype=np.float64), 0.0, 1.0))
        return np.clip(self._x_of_u(u), 0.0, self.x_tidal)


@functools.lru_cache(maxsize=32)
def solve_king(w0: float) -> KingModel:
    """Integrate the King (1966) Poisson equation for central potential ``w0``.

    Solves ``(1/x^2) d/dx(x^2 dW/dx) = -9 rho_hat(W)/rho_hat(W0)`` outward from a fourth-order
    series start ``W = W0 - 3x^2/2 + b x^4`` at ``x = 1e-3`` (the series is exact to
    O(x^6) ~ 1e-18 there) until ``W = 0`` (tidal radius), with ``solve_ivp`` (DOP853,
    rtol 1e-11).

    Parameters
    ----------
    w0 : float
        Central dimensionless potential, in [1, 12].

    Returns
    -------
    KingModel
        The model in King units (see :class:`KingModel`).

    Raises
    ------
    ValueError
        If ``w0`` is outside [1, 12] or not finite.
    """
    w0 = float(w0)
    if not (math.isfinite(w0) and 1.0 <= w0 <= 12.0):
        raise ValueError(f"w0 must be in [1, 12], got {w0!r}")
    rho0 = float(_rho_hat(w0))
    b4 = 0.675 * _rho_hat_prime(w0) / rho0  # from -9 rho(W)/rho0 ~ -9 (1 + rho'/rho0 dW)
    x0 = 1e-3

    def rhs(x: float, y: np.ndarray) -> list[float]:
        w, dw = y
        return [dw, -9.0 * float(_rho_hat(w)) / rho0 - 2.0 * dw / x]

    def hit_zero(x: float, y: np.ndarray) -> float:
        return y[0]

    hit_zero.terminal = True  # type: ignore[attr-defined]
    hit_zero.direction = -1  # type: ignore[attr-defined]

    y0 = [w0 - 1.5 * x0**2 + b4 * x0**4, -3.0 * x0 + 4.0 * b4 * x0**3]
    sol = solve_ivp(
        rhs, (x0, 1e6), y0, method="DOP853", rtol=1e-11, atol=1e-14,
        events=hit_zero, dense_output=True,
    )
    if sol.status != 1 or sol.t_events[0].size == 0:
        raise RuntimeError(f"King integration for w0={w0} did not reach W = 0: {sol.message}")
    x_t = float(sol.t_events[0][0])
    dw_t = float(sol.y_events[0][0][1])
    m_tot = -x_t * x_t * dw_t

    # Inverse of the cumulative mass on a dense grid, interpolated in u = (M/M_t)^(1/3):
    # near the centre x is then linear in u, and the grid is denser towards both ends.
    grid = np.unique(
        np.concatenate(
            [
                np.geomspace(x0, x_t, 6000),
                np.linspace(x0, x_t, 6000),
                x_t * (1.0 - np.geomspace(1e-8, 1.0, 2000, endpoint=False)),
            ]
        )
    )
    grid = grid[(grid >= x0) & (grid < x_t)]
    m_grid = -(grid**2) * sol.sol(grid)[1]
    u = np.cbrt(np.concatenate([[0.0], np.clip(m_grid / m_tot, 0.0, 1.0), [1.0]]))
    xs = np.concatenate([[0.0], grid, [x_t]])
    # Pchip needs strictly increasing u; the mass saturates (to rounding) just inside x_t.
    prev_max = np.maximum.accumulate(np.concatenate([[-1.0], u[:-1]]))
    keep = u > prev_max
    x_of_u = PchipInterpolator(u[keep], xs[keep])

    return KingModel(
        w0=w0,
        x_tidal=x_t,
        mass_total=m_tot,
        concentration=math.log10(x_t),
        _x0=x0,
        _b4=b4,
        _sol=sol.sol,
        _x_of_u=x_of_u,
    )


def _king_speed_fraction(w: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Invert the King speed CDF: s = v / sqrt(2W) with P(<s) = u, vectorised.

    The speed density at fixed W is ``v^2 (exp(W - v^2/2) - 1)`` on ``[0, sqrt(2W)]``; its
    CDF is ``F(v) = e^W sqrt(pi/2) P(3/2, v^2/2) - v^3/3`` (P: regularised lower incomplete
    gamma), used here in s with a bracketed Newton iteration.  For W < 1e-6 (at the tidal
    radius) the W -> 0 limit ``P(<s) = (5 s^3 - 3 s^5)/2`` avoids cancellation.
    """
    w = np.asarray(w, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64)
    small = w < 1e-6
    ws = np.where(small, 1.0, w)  # placeholder W for the limit branch, keeps formulas finite
    ew = np.exp(ws)
    c = math.sqrt(math.pi / 2.0)
    k3 = (2.0 * ws) ** 1.5 / 3.0
    f_e = ew * c * gammainc(1.5, ws) - k3

    def cdf_pdf(s: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s2 = s * s
        wi, ki, fi = ws[idx], k3[idx], f_e[idx]
        cdf = (ew[idx] * c * gammainc(1.5, wi * s2) - ki * s2 * s) / fi
        pdf = 3.0 * ki * s2 * np.expm1(wi * (1.0 - s2)) / fi
        lim = small[idx]
        cdf = np.where(lim, 2.5 * s2 * s - 1.5 * s2 * s2 * s, cdf)
        pdf = np.where(lim, 7.5 * s2 * (1.0 - s2), pdf)
        return cdf, pdf

    lo = np.zeros_like(u)
    hi = np.ones_like(u)
    s = 0.7 * np.cbrt(u)  # rough start near the bulk; Newton + bisection does the rest
    active = np.arange(u.size)
    # Iterate only on unconverged stars; the bracket guarantees progress where Newton fails.
    for _ in range(200):
        sa = s[active]
        g, dg = cdf_pdf(sa, active)
        resid = g - u[active]
        lo[active] = np.where(resid < 0.0, sa, lo[active])
        hi[active] = np.where(resid > 0.0, sa, hi[active])
        with np.errstate(divide="ignore", invalid="ignore"):
            s_new = sa - resid / dg
        bad = ~np.isfinite(s_new) | (s_new <= lo[active]) | (s_new >= hi[active])
        s_new = np.where(bad, 0.5 * (lo[active] + hi[active]), s_new)
        s[active] = s_new
        moving = (np.abs(s_new - sa) > 1e-14) & (resid != 0.0)
        moving &= hi[active] - lo[active] > 4e-16
        active = active[moving]
        if active.size == 0:
            break
    return np.clip(s, 0.0, 1.0)


def king(
    n: int,
    w0: float,
    rng: np.random.Generator,
    masses: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Sample a King (1966) model and return it in Hénon units.

    Radii are drawn from the model's cumulative mass by inverse interpolation
    (:func:`solve_king`); at each radius the speed is drawn by inverse CDF from the lowered
    Maxwellian ``f ~ exp(W - v^2/2) - 1`` truncated at the escape speed ``sqrt(2W)``;
    directions are isotropic.  The sample is then passed to :func:`scale_to_henon_units`.

    Parameters
    ----------
    n : int
        Number of stars, >= 2.
    w0 : float
        Central dimensionless potential W0, in [1, 12].
    rng : numpy.random.Generator
        Source of all random numbers.
    masses : numpy.ndarray, optional
        Stellar masses (any unit, > 0, length ``n``), normalised to total 1 and attached to
        independently drawn positions (random assignment, no mass segregation).  ``None``:
        equal masses ``1/n``.

    Returns
    -------
    stars : dict of numpy.ndarray
        ``{'r', 'vr', 'vt', 'm'}`` in Hénon units, sorted by increasing ``r``; every
        ``r <= info['r_tidal']``.
    info : dict of float
        ``'r_tidal'``: tidal radius (Hénon length units); ``'r0'``: King radius (Hénon length
        units); ``'w0'``; ``'c'``: concentration ``log10(r_tidal / r0)``; ``'r_scale'`` and
        ``'v_scale'``: Hénon length and velocity per King unit (r_0 = sigma = G = 1, mass in
        units of the model's total mass).

    Raises
    ------
    ValueError
        If ``n`` is not an integer >= 2, ``w0`` is outside [1, 12], or ``masses`` is invalid.
    TypeError
        If ``rng`` is not a ``numpy.random.Generator``.
    """
    n = _check_n(n)
    try:
        w0f = float(w0)
    except (TypeError, ValueError):
        raise ValueError(f"w0 must be a number in [1, 12], got {w0!r}") from None
    if not (math.isfinite(w0f) and 1.0 <= w0f <= 12.0):
        raise ValueError(f"w0 must be in [1, 12], got {w0!r}")
    rng = _check_rng(rng)
    model = solve_king(w0f)
    m_frac = np.full(n, 1.0 / n) if masses is None else _check_masses(masses, n)
    m_frac = m_frac / m_frac.sum()

    # u in (0, 1]: u = 0 would give r = 0, where the shell potential diverges.
    u = 1.0 - rng.random(n)
    x = model.radius_of_mass_fraction(u)
    bad = x <= 0.0
    while np.any(bad):
        x[bad] = model.radius_of_mass_fraction(1.0 - rng.random(int(bad.sum())))
        bad = x <= 0.0
    w = model.potential(x)
    s = _king_speed_fraction(w, rng.random(n))
    v = s * np.sqrt(2.0 * w)
    vr, vt = _isotropic_split(v, rng)

    # Masses in King units so that (r, v, m) is a self-consistent G = 1 equilibrium.
    stars, scaling = scale_to_henon_units(x, vr, vt, m_frac * model.mass_total)
    info = {
        "r_tidal": model.x_tidal * scaling.length,
        "r0": scaling.length,
        "w0": w0f,
        "c": model.concentration,
        "r_scale": scaling.length,
        "v_scale": scaling.velocity,
    }
    # Rounding in the product could in principle push the outermost star a hair past r_t.
    stars["r"] = np.minimum(stars["r"], info["r_tidal"])
    return stars, info


