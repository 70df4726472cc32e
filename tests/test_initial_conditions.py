"""Tests for physics.initial_conditions (Plummer, King), physics.mass_functions and
physics.henon_units (Hénon scaling)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats
from scipy.special import gammainc

from physics.henon_units import scale_to_henon_units, shell_energies, shell_potential
from physics.initial_conditions import king, plummer, plummer_scale_radius, solve_king
from physics.mass_functions import KROUPA_ALPHAS, KROUPA_BREAKS, sample_masses

A_PL = 3.0 * math.pi / 16.0
LAGRANGE_TABLE = {0.001: 0.0592, 0.01: 0.1300, 0.1: 0.3087, 0.5: 0.7686, 0.9: 2.184}
N_PL = 100_000


def _direct_energy(st: dict[str, np.ndarray]) -> tuple[float, float]:
    """Independent energy: W = -sum m_i M(<i)/r_i - sum m_i^2/(2 r_i) (pair + shell self)."""
    r, m = st["r"], st["m"]
    m_inside = np.concatenate([[0.0], np.cumsum(m)[:-1]])
    w = -np.sum(m * m_inside / r) - np.sum(m * m / (2.0 * r))
    k = 0.5 * np.sum(m * (st["vr"] ** 2 + st["vt"] ** 2))
    return float(k), float(w)


def _lagrange(st: dict[str, np.ndarray], f: float) -> float:
    cm = np.cumsum(st["m"])
    return float(st["r"][np.searchsorted(cm, f * cm[-1])])


def _check_star_set(st: dict[str, np.ndarray], n: int) -> None:
    assert set(st) == {"r", "vr", "vt", "m"}
    for a in st.values():
        assert a.dtype == np.float64 and a.shape == (n,)
        assert np.all(np.isfinite(a))
    assert np.all(np.diff(st["r"]) >= 0.0)
    assert np.all(st["r"] > 0.0)
    assert np.all(st["vt"] >= 0.0)
    assert np.all(st["m"] > 0.0)
    assert math.isclose(float(np.sum(st["m"])), 1.0, rel_tol=1e-13)


@pytest.fixture(scope="module")
def pl() -> dict[str, np.ndarray]:
    return plummer(N_PL, np.random.default_rng(12345))


# ------------------------------------------------------------------------------------------
# shell potential and scaling
# ------------------------------------------------------------------------------------------


def test_shell_potential_two_stars_by_hand() -> None:
    r = np.array([1.0, 2.0])
    m = np.array([1.0, 1.0])
    phi = shell_potential(r, m)
    np.testing.assert_allclose(phi, [-1.5, -1.0])
    k, w = shell_energies(r, np.zeros(2), np.zeros(2), m)
    # pair -m0 m1/r1 = -0.5, shell self energies -1/2 and -1/4
    assert k == 0.0 and math.isclose(w, -1.25)


def test_shell_potential_rejects_unsorted() -> None:
    with pytest.raises(ValueError, match="sorted"):
        shell_potential(np.array([2.0, 1.0]), np.array([1.0, 1.0]))


def test_scale_sorts_and_keeps_virial_ratio() -> None:
    rng = np.random.default_rng(7)
    n = 5000
    r = rng.uniform(0.1, 3.0, n)
    m = rng.uniform(0.5, 2.0, n)  # arbitrary mass unit, total ~ 6250
    _, w_in = shell_energies(np.sort(r), np.zeros(n), np.zeros(n), m[np.argsort(r)])
    # Choose speeds giving virial ratio exactly 0.5 in the input's own G = 1 units.
    v = np.ones(n)
    v *= math.sqrt(0.5 * abs(w_in) / np.sum(m * v * v))
    vr, vt = 0.6 * v, 0.8 * v
    st, sc = scale_to_henon_units(r, vr, vt, m)
    _check_star_set(st, n)
    k, w = shell_energies(st["r"], st["vr"], st["vt"], st["m"])
    assert math.isclose(k + w, -0.25, rel_tol=1e-12)
    assert math.isclose(2 * k / abs(w), 0.5, rel_tol=1e-12)
    assert math.isclose(sc.virial_ratio, 0.5, rel_tol=1e-12)
    np.testing.assert_allclose(st["r"], sc.length * r[sc.order], rtol=1e-15)
    np.testing.assert_allclose(st["m"], sc.mass * m[sc.order], rtol=1e-15)
    np.testing.assert_allclose(st["vr"], sc.velocity * vr[sc.order], rtol=1e-15)
    # Consistent G = 1 units: velocity factor^2 = 1 / (mass_in * length factor).
    assert math.isclose(sc.velocity**2, sc.mass / sc.length, rel_tol=1e-12)


def test_scale_is_unit_independent(pl: dict[str, np.ndarray]) -> None:
    # Same cluster expressed with M = 1e5 and r in "pc" (G = 1): identical Hénon result.
    mfac, rfac = 1e5, 3.7
    vfac = math.sqrt(mfac / rfac)
    st, _ = scale_to_henon_units(pl["r"] * rfac, pl["vr"] * vfac, pl["vt"] * vfac,
                                 pl["m"] * mfac)
    for key in pl:
        np.testing.assert_allclose(st[key], pl[key], rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(r=[1.0, 2.0], vr=[0.0], vt=[0.0, 0.0], m=[1.0, 1.0]), "same length"),
        (dict(r=[1.0], vr=[0.0], vt=[0.0], m=[1.0]), "n >= 2"),
        (dict(r=[0.0, 2.0], vr=[0.0, 0.0], vt=[0.0, 0.0], m=[1.0, 1.0]), "r must"),
        (dict(r=[1.0, 2.0], vr=[0.0, 0.0], vt=[-1.0, 0.0], m=[1.0, 1.0]), "vt must"),
        (dict(r=[1.0, 2.0], vr=[0.0, 0.0], vt=[0.0, 0.0], m=[1.0, -1.0]), "m must"),
        (dict(r=[1.0, np.nan], vr=[0.0, 0.0], vt=[0.0, 0.0], m=[1.0, 1.0]), "r must"),
        (dict(r=[1.0, 2.0], vr=[10.0, 0.0], vt=[0.0, 10.0], m=[1.0, 1.0]), "unbound"),
    ],
)
def test_scale_validation(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        scale_to_henon_units(**{k: np.asarray(v, float) for k, v in kwargs.items()})


# ------------------------------------------------------------------------------------------
# Plummer
# ------------------------------------------------------------------------------------------


def test_plummer_analytic_table() -> None:
    assert plummer_scale_radius() == A_PL
    for f, r_tab in LAGRANGE_TABLE.items():
        r = A_PL / math.sqrt(f ** (-2.0 / 3.0) - 1.0)
        assert abs(r / r_tab - 1.0) < 1e-3


def test_plummer_units_and_energy(pl: dict[str, np.ndarray]) -> None:
    _check_star_set(pl, N_PL)
    np.testing.assert_array_equal(pl["m"], np.full(N_PL, 1.0 / N_PL))
    k, w = shell_energies(pl["r"], pl["vr"], pl["vt"], pl["m"])
    assert abs((k + w) / -0.25 - 1.0) < 1e-12
    assert abs(2.0 * k / abs(w) - 1.0) < 0.01
    # Independent evaluation of the same shell energy (plain cumsum: looser tolerance).
    k2, w2 = _direct_energy(pl)
    assert math.isclose(k2, k, rel_tol=1e-12)
    assert math.isclose(w2, w, rel_tol=1e-10)


def test_plummer_lagrange_radii(pl: dict[str, np.ndarray]) -> None:
    for f, r_tab in LAGRANGE_TABLE.items():
        r_an = A_PL / math.sqrt(f ** (-2.0 / 3.0) - 1.0)
        # Binomial scatter of the enclosed fraction mapped to ln r, plus ~0.5 % from the
        # sample's own energy rescaling; 4 sigma.
        sig_lnm = math.sqrt((1.0 - f) / (N_PL * f))
        dlnm_dlnr = 3.0 * A_PL**2 / (r_an**2 + A_PL**2)
        tol = 4.0 * math.hypot(sig_lnm / dlnm_dlnr, 0.005)
        r_s = _lagrange(pl, f)
        assert abs(math.log(r_s / r_tab)) < tol, (f, r_s, r_tab, tol)


def test_plummer_potential_matches_analytic(pl: dict[str, np.ndarray]) -> None:
    phi = shell_potential(pl["r"], pl["m"])
    phi_an = -1.0 / np.sqrt(pl["r"] ** 2 + A_PL**2)
    bulk = slice(N_PL // 100, N_PL - N_PL // 100)
    assert np.max(np.abs(phi[bulk] / phi_an[bulk] - 1.0)) < 0.01


def test_plummer_isotropy_and_dispersion(pl: dict[str, np.ndarray]) -> None:
    vr2 = np.mean(pl["vr"] ** 2)
    vt2 = np.mean(pl["vt"] ** 2)
    assert abs(vr2 / (0.5 * vt2) - 1.0) < 0.03
    v2 = pl["vr"] ** 2 + pl["vt"] ** 2
    # <v^2> = 3 sigma^2 = 1 / (2 sqrt(r^2 + a^2)) in Hénon units, in 10 equal-count bins.
    model = 0.5 / np.sqrt(pl["r"] ** 2 + A_PL**2)
    for b in np.array_split(np.arange(N_PL), 10):
        assert abs(np.mean(v2[b]) / np.mean(model[b]) - 1.0) < 0.05
    # Speeds never exceed the local escape speed of the analytic potential (by > 2 %).
    assert np.all(np.sqrt(v2) < 1.02 * np.sqrt(2.0) * (pl["r"] ** 2 + A_PL**2) ** -0.25)


def test_plummer_speed_distribution_ks(pl: dict[str, np.ndarray]) -> None:
    # q = v / v_esc follows q^2 (1 - q^2)^(7/2) at every radius.
    v = np.hypot(pl["vr"], pl["vt"])
    q = v / (math.sqrt(2.0) * (pl["r"] ** 2 + A_PL**2) ** -0.25)
    norm = integrate.quad(lambda x: x * x * (1 - x * x) ** 3.5, 0, 1)[0]

    def cdf(x: np.ndarray) -> np.ndarray:
        return np.array([integrate.quad(lambda t: t * t * (1 - t * t) ** 3.5, 0, min(xi, 1.0))[0]
                         for xi in np.atleast_1d(x)]) / norm

    grid = np.linspace(0.0, 1.0, 2001)
    cgrid = cdf(grid)
    # Energy rescaling moves q by ~1e-3; the KS distance must still be small.
    res = stats.kstest(np.clip(q, 0, 1), lambda x: np.interp(x, grid, cgrid))
    assert res.statistic < 0.01


def test_plummer_reproducible_and_rng_checked() -> None:
    a = plummer(1000, np.random.default_rng(3))
    b = plummer(1000, np.random.default_rng(3))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    with pytest.raises(TypeError, match="rng"):
        plummer(1000, 3)  # type: ignore[arg-type]


def test_plummer_truncated() -> None:
    n = 20000
    r_max = 3.0
    st = plummer(n, np.random.default_rng(5), r_max=r_max)
    _check_star_set(st, n)
    k, w = shell_energies(st["r"], st["vr"], st["vt"], st["m"])
    assert math.isclose(k + w, -0.25, rel_tol=1e-12)
    # Cut at r_max virial radii of the untruncated model, then rescaled: the ratio of the
    # outermost star to the half-mass radius is bounded by that of the truncated model.
    x_cut = r_max * 16.0 / (3.0 * math.pi)  # model units a = 1
    f_cut = (x_cut**2 / (1.0 + x_cut**2)) ** 1.5
    x_half = 1.0 / math.sqrt((0.5 * f_cut) ** (-2.0 / 3.0) - 1.0)
    ratio = st["r"][-1] / _lagrange(st, 0.5)
    assert 0.95 * x_cut / x_half < ratio < 1.03 * x_cut / x_half
    assert 1.0 < st["r"][-1] / r_max < 1.2  # rescaling factor ~1.14 for r_max = 3


def test_plummer_with_masses_no_segregation() -> None:
    n = 50000
    rng = np.random.default_rng(11)
    masses, total = sample_masses(n, rng, kind="kroupa")
    st = plummer(n, rng, masses=masses)
    _check_star_set(st, n)
    np.testing.assert_allclose(np.sort(st["m"]), np.sort(masses / total), rtol=1e-13)
    k, w = shell_energies(st["r"], st["vr"], st["vt"], st["m"])
    assert math.isclose(k + w, -0.25, rel_tol=1e-12)
    # Random assignment: mean mass of the inner and outer halves (by number) agree.
    half = n // 2
    m_in, m_out = st["m"][:half], st["m"][half:]
    se = math.sqrt(np.var(st["m"]) * 2.0 / half)
    assert abs(m_in.mean() - m_out.mean()) < 4.0 * se


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n=1), "n must"),
        (dict(n=2.5), "n must"),
        (dict(n=True), "n must"),
        (dict(n="10"), "n must"),
        (dict(n=10, r_max=0.0), "r_max"),
        (dict(n=10, r_max=-1.0), "r_max"),
        (dict(n=10, r_max=np.inf), "r_max"),
        (dict(n=10, masses=np.ones(9)), "masses"),
        (dict(n=10, masses=-np.ones(10)), "masses"),
    ],
)
def test_plummer_validation(kwargs: dict, match: str) -> None:
    n = kwargs.pop("n")
    with pytest.raises(ValueError, match=match):
        plummer(n, np.random.default_rng(0), **kwargs)


def test_plummer_accepts_integral_float_n() -> None:
    assert plummer(100.0, np.random.default_rng(0))["r"].size == 100  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# King
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("w0, c_tab", [(3.0, 0.67), (5.0, 1.03), (6.0, 1.26), (7.0, 1.53),
                                       (9.0, 2.12)])
def test_king_concentration(w0: float, c_tab: float) -> None:
    # Tabulated King (1966) concentrations c = log10(r_t / r_0).  (c = 1.03 belongs to W0 = 5;
    # W0 = 6 has c = 1.26.)
    assert abs(solve_king(w0).concentration - c_tab) < 0.05


@pytest.mark.parametrize("w0", [1.0, 6.0, 12.0])
def test_king_model_consistency(w0: float) -> None:
    mod = solve_king(w0)
    # Mass from Gauss's law (-x^2 W') equals the integral of the density.
    m_int = integrate.quad(lambda x: 4 * math.pi * x * x * mod.density(x)[0], 0, mod.x_tidal,
                           limit=400, points=[1.0])[0]
    assert math.isclose(m_int, mod.mass_total, rel_tol=1e-6)
    assert math.isclose(mod.density(0.0)[0], 9.0 / (4.0 * math.pi), rel_tol=1e-12)
    assert abs(mod.potential(mod.x_tidal * (1 - 1e-12))[0]) < 1e-8
    f = np.linspace(0.01, 0.99, 50)
    np.testing.assert_allclose(mod.mass_fraction(mod.radius_of_mass_fraction(f)), f,
                               rtol=1e-6)


def _king_mean_v2(w: np.ndarray) -> np.ndarray:
    """<v^2> of f ~ exp(W - v^2/2) - 1 below v_esc = sqrt(2W), in King units."""
    c = math.sqrt(math.pi / 2.0)
    num = np.exp(w) * 3 * c * gammainc(2.5, w) - (2 * w) ** 2.5 / 5
    den = np.exp(w) * c * gammainc(1.5, w) - (2 * w) ** 1.5 / 3
    return num / den


@pytest.mark.parametrize("w0", [1.0, 3.0, 6.0, 9.0, 12.0])
def test_king_sample(w0: float) -> None:
    n = 50000
    st, info = king(n, w0, np.random.default_rng(int(w0 * 10)))
    _check_star_set(st, n)
    assert np.all(st["r"] <= info["r_tidal"])
    assert info["w0"] == w0
    mod = solve_king(w0)
    assert math.isclose(info["c"], math.log10(info["r_tidal"] / info["r0"]), rel_tol=1e-12)
    k, w = shell_energies(st["r"], st["vr"], st["vt"], st["m"])
    assert abs((k + w) / -0.25 - 1.0) < 1e-12
    assert abs(2.0 * k / abs(w) - 1.0) < 0.02
    # Radii against the integrated model's cumulative mass.
    x = st["r"] / info["r0"]
    assert stats.kstest(x, mod.mass_fraction).pvalue > 1e-3
    # Speeds: mean v^2 in equal-count radial bins against the DF's second moment.
    v2 = (st["vr"] ** 2 + st["vt"] ** 2) / info["v_scale"] ** 2
    model_v2 = _king_mean_v2(mod.potential(x))
    for b in np.array_split(np.arange(n), 8):
        assert abs(np.mean(v2[b]) / np.mean(model_v2[b]) - 1.0) < 0.05
    assert np.all(v2 <= 2.0 * mod.potential(x) * (1 + 1e-9) + 1e-300)
    assert abs(np.mean(st["vr"] ** 2) / (0.5 * np.mean(st["vt"] ** 2)) - 1.0) < 0.05


def test_king_with_masses() -> None:
    n = 20000
    rng = np.random.default_rng(21)
    masses, total = sample_masses(n, rng, kind="power_law")
    st, info = king(n, 7.0, rng, masses=masses)
    _check_star_set(st, n)
    np.testing.assert_allclose(np.sort(st["m"]), np.sort(masses / total), rtol=1e-13)
    k, w = shell_energies(st["r"], st["vr"], st["vt"], st["m"])
    assert math.isclose(k + w, -0.25, rel_tol=1e-12)
    assert np.all(st["r"] <= info["r_tidal"])


@pytest.mark.parametrize("w0", [0.5, 12.5, np.nan, "x"])
def test_king_validation(w0: object) -> None:
    with pytest.raises(ValueError, match="w0"):
        king(100, w0, np.random.default_rng(0))  # type: ignore[arg-type]
    if isinstance(w0, float) and math.isfinite(w0):
        with pytest.raises(ValueError, match="w0"):
            solve_king(w0)


def test_king_validation_other() -> None:
    with pytest.raises(ValueError, match="n must"):
        king(1, 6.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="masses"):
        king(10, 6.0, np.random.default_rng(0), masses=np.ones(3))
    with pytest.raises(TypeError, match="rng"):
        king(10, 6.0, None)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# mass functions
# ------------------------------------------------------------------------------------------


def _mle_alpha(m: np.ndarray, lo: float, hi: float) -> float:
    """MLE slope of a power law dN/dm ~ m^-alpha truncated to [lo, hi]."""
    s = np.sum(np.log(m))
    n = m.size

    def nll(a: float) -> float:
        b = 1.0 - a
        norm = math.log(hi / lo) if abs(b) < 1e-12 else math.log(abs((hi**b - lo**b) / b))
        return n * norm + a * s

    return optimize.minimize_scalar(nll, bounds=(-3.0, 6.0), method="bounded",
                                    options={"xatol": 1e-8}).x


@pytest.mark.parametrize("alpha", [2.35, 1.0, 0.5, 3.0])
def test_power_law_slope(alpha: float) -> None:
    m, total = sample_masses(100_000, np.random.default_rng(1), kind="power_law",
                             m_min=0.2, m_max=50.0, alpha=alpha)
    assert m.dtype == np.float64 and m.shape == (100_000,)
    assert np.all((m >= 0.2) & (m <= 50.0))
    assert math.isclose(total, float(np.sum(m)))
    assert abs(_mle_alpha(m, 0.2, 50.0) - alpha) < 0.05


def test_power_law_near_one_is_continuous() -> None:
    a = sample_masses(1000, np.random.default_rng(2), kind="power_law", alpha=1.0)[0]
    b = sample_masses(1000, np.random.default_rng(2), kind="power_law", alpha=1.0 + 1e-12)[0]
    np.testing.assert_allclose(a, b, rtol=1e-9)


def _kroupa_fraction_below(x: float, lo: float, hi: float, alphas: tuple) -> float:
    def pdf(m: float) -> float:
        # continuous broken power law with coefficient 1 on the lowest segment
        a0, a1, a2 = alphas
        b1, b2 = KROUPA_BREAKS
        if m < b1:
            return m**-a0
        c1 = b1 ** (a1 - a0)
        if m < b2:
            return c1 * m**-a1
        return c1 * b2 ** (a2 - a1) * m**-a2

    pts = [p for p in KROUPA_BREAKS if lo < p < hi]
    tot = integrate.quad(pdf, lo, hi, points=pts, limit=200)[0]
    return integrate.quad(pdf, lo, x, points=[p for p in pts if p < x], limit=200)[0] / tot


def test_kroupa_breaks_and_slopes() -> None:
    n = 200_000
    m, _ = sample_masses(n, np.random.default_rng(4), kind="kroupa", m_min=0.1, m_max=100.0)
    assert np.all((m >= 0.1) & (m <= 100.0))
    f_an = _kroupa_fraction_below(0.5, 0.1, 100.0, KROUPA_ALPHAS)
    f = np.mean(m < 0.5)
    assert abs(f - f_an) < 4.0 * math.sqrt(f_an * (1 - f_an) / n)
    low, high = m[m < 0.5], m[m >= 0.5]
    assert abs(_mle_alpha(low, 0.1, 0.5) - 1.3) < 0.05
    assert abs(_mle_alpha(high, 0.5, 100.0) - 2.3) < 0.05


def test_kroupa_brown_dwarf_segment() -> None:
    n = 200_000
    m, _ = sample_masses(n, np.random.default_rng(6), kind="kroupa", m_min=0.01, m_max=50.0)
    assert np.all((m >= 0.01) & (m <= 50.0))
    for x in (0.08, 0.5):
        f_an = _kroupa_fraction_below(x, 0.01, 50.0, KROUPA_ALPHAS)
        assert abs(np.mean(m < x) - f_an) < 4.0 * math.sqrt(f_an * (1 - f_an) / n)
    assert abs(_mle_alpha(m[m < 0.08], 0.01, 0.08) - 0.3) < 0.05
    # Without the brown-dwarf slope, 1.3 continues below 0.08.
    m2, _ = sample_masses(n, np.random.default_rng(6), kind="kroupa", m_min=0.01, m_max=50.0,
                          brown_dwarf_slope=False)
    assert abs(_mle_alpha(m2[m2 < 0.5], 0.01, 0.5) - 1.3) < 0.05


def test_kroupa_range_within_one_segment() -> None:
    m, _ = sample_masses(50_000, np.random.default_rng(8), kind="kroupa", m_min=1.0, m_max=20.0)
    assert np.all((m >= 1.0) & (m <= 20.0))
    assert abs(_mle_alpha(m, 1.0, 20.0) - 2.3) < 0.05


def test_equal_masses() -> None:
    m, total = sample_masses(10, np.random.default_rng(0), kind="equal", m_equal=0.5)
    np.testing.assert_array_equal(m, np.full(10, 0.5))
    assert total == 5.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n=1), "n must"),
        (dict(n=10, kind="salpeter"), "kind"),
        (dict(n=10, kind="power_law", m_min=0.0), "m_min"),
        (dict(n=10, kind="power_law", m_min=-1.0), "m_min"),
        (dict(n=10, kind="power_law", m_max=np.nan), "m_max"),
        (dict(n=10, kind="kroupa", m_min=5.0, m_max=1.0), "m_max"),
        (dict(n=10, kind="power_law", alpha=np.inf), "alpha"),
        (dict(n=10, kind="power_law", alpha="x"), "alpha"),
        (dict(n=10, kind="equal", m_equal=0.0), "m_equal"),
    ],
)
def test_sample_masses_validation(kwargs: dict, match: str) -> None:
    n = kwargs.pop("n")
    with pytest.raises(ValueError, match=match):
        sample_masses(n, np.random.default_rng(0), **kwargs)


def test_sample_masses_rng_checked() -> None:
    with pytest.raises(TypeError, match="rng"):
        sample_masses(10, np.random.RandomState(0), kind="kroupa")  # type: ignore[arg-type]
