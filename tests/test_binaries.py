"""Binary-process rates and kinematics (physics/binaries.py) against their derivations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from physics import binaries as pb
from tests.conftest import rng_states


def test_binary_binary_timescale_is_the_maxwellian_average_of_the_cross_section():
    """Eq. (9) for equal binaries = n_b <S W> over relative speeds with dispersion sqrt(2) sigma
    (Monte Carlo average, 4e5 samples)."""
    n_b, sigma, a, m_bin, x = 30.0, 0.4, 2e-3, 2e-5, 2.0
    t_bb = pb.binary_binary_timescale(n_b, sigma, a * a, m_bin * a, x)
    gen = np.random.default_rng(2)
    w = np.linalg.norm(gen.normal(0.0, math.sqrt(2.0) * sigma, (400_000, 3)), axis=1)
    s = pb.strong_encounter_cross_section(x * 2 * a, 2 * m_bin, w)
    rate = n_b * np.mean(s * w)
    assert rate * t_bb == pytest.approx(1.0, rel=0.01)


def test_binary_single_timescale_limits():
    """Eq. (10): without focusing (fast stars) the Maxwellian average of pi r_p^2 W; the focused
    term scales as <M><a>/sigma."""
    n_s, a, x = 100.0, 1e-3, 2.0
    sigma = 50.0  # focusing negligible
    t_bs = pb.binary_single_timescale(n_s, sigma, a, a * a, 1e-5, x)
    mean_w = 4.0 * sigma / math.sqrt(math.pi)  # Maxwellian with 1-D dispersion sqrt(2) sigma
    assert t_bs * n_s * math.pi * (x * a) ** 2 * mean_w == pytest.approx(1.0, rel=1e-5)
    slow = pb.binary_single_timescale(n_s, 1e-3, a, a * a, 1e-2, x)
    focus = 4 * math.sqrt(math.pi) * n_s * 1e-2 * a * x / 1e-3
    assert 1.0 / slow == pytest.approx(focus, rel=1e-2)
    assert pb.binary_single_timescale(0.0, 1.0, a, a * a, 1.0) == math.inf


def test_strong_encounter_probability_units():
    """P = n W S dt N / ln(gamma N): doubling dt or n doubles P; gravitational focusing
    dominates at low speed (S ~ 2 pi G m r_p / W^2)."""
    p = pb.strong_encounter_probability(1e4, 0.5, 1e-4, 2e-5, 1e-3, 1e5, math.log(1e4))
    assert pb.strong_encounter_probability(2e4, 0.5, 1e-4, 2e-5, 1e-3, 1e5,
                                           math.log(1e4)) == pytest.approx(2 * p)
    assert pb.strong_encounter_probability(1e4, 0.5, 1e-4, 2e-5, 2e-3, 1e5,
                                           math.log(1e4)) == pytest.approx(2 * p)
    s = pb.strong_encounter_cross_section(1e-4, 1.0, 1e-3)
    assert s == pytest.approx(2 * math.pi * 1.0 * 1e-4 / 1e-6, rel=1e-3)


def test_three_body_rate_scaling():
    """Morscher et al.: Gamma ∝ n^2 v^-9 M12^5 eta_min^-5.5 (...)."""
    g = pb.three_body_rate(1e5, 0.3, 1e-5, 1e-5, 1e-5, 5.0)
    assert pb.three_body_rate(2e5, 0.3, 1e-5, 1e-5, 1e-5, 5.0) == pytest.approx(4 * g)
    assert pb.three_body_rate(1e5, 0.6, 1e-5, 1e-5, 1e-5, 5.0) == pytest.approx(g / 512)
    ref = (0.5 * math.sqrt(2) * math.pi ** 2 * 1e10 * 0.3 ** -9 * (2e-5) ** 5 * 5 ** -5.5
           * 11 * (1 + 2 * 1.5 * 5))
    assert g == pytest.approx(ref, rel=1e-12)


def test_three_body_hardness_distribution():
    """Drawn eta follow d Gamma / d eta on [5, 50] (KS against the numerically integrated CDF)."""
    from scipy.stats import kstest

    states = rng_states(1, seed=13)
    k = 3.0
    eta = np.array([pb.sample_three_body_hardness(k, 5.0, 50.0, states, 0)
                    for _ in range(20000)])
    assert eta.min() >= 5.0 and eta.max() <= 50.0
    grid = np.linspace(5.0, 50.0, 20001)
    dens = 5.5 * grid ** -6.5 + (4.5 * k + 9) * grid ** -5.5 + 7 * k * grid ** -4.5
    cdf = np.concatenate([[0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(grid))])
    cdf /= cdf[-1]
    assert kstest(eta, lambda e: np.interp(e, grid, cdf)).pvalue > 0.01


def test_three_body_binary_kinematics_conserves_momentum_and_energy():
    gen = np.random.default_rng(5)
    for _ in range(200):
        m = gen.uniform(0.5, 2.0, 3)
        v = gen.normal(size=(3, 3))
        e_bind = -gen.uniform(0.1, 5.0)
        out = np.empty((2, 3))
        w = pb.three_body_binary_kinematics(m, v, e_bind, gen.uniform(), gen.uniform(), out)
        p0 = m @ v
        p1 = (m[0] + m[1]) * out[0] + m[2] * out[1]
        assert np.allclose(p0, p1, atol=1e-12)
        ke0 = 0.5 * np.sum(m * np.sum(v * v, axis=1))
        ke1 = 0.5 * (m[0] + m[1]) * out[0] @ out[0] + 0.5 * m[2] * out[1] @ out[1]
        # the binding energy released goes into the motion of binary and single
        assert ke1 == pytest.approx(ke0 - e_bind, rel=1e-12)
        assert np.linalg.norm(out[1] - out[0]) == pytest.approx(w, rel=1e-12)
