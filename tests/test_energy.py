"""Energy correction: debts are settled, never dropped."""

from __future__ import annotations

import numpy as np
import pytest

from physics.energy import block_sums, settle_debts


def settle_reference(debts, kinetic, fraction):
    pay = np.zeros_like(debts)
    carry = 0.0
    for b in range(len(debts)):
        take = min(carry, fraction * kinetic[b])
        pay[b] = take
        carry = carry - take + debts[b]
    return pay, carry


def test_settle_debts_matches_reference_and_conserves():
    gen = np.random.default_rng(4)
    for _ in range(50):
        nb = int(gen.integers(1, 60))
        debts = np.where(gen.random(nb) < 0.2, gen.exponential(0.3, nb), 0.0)
        kinetic = gen.exponential(1.0, nb)
        pay, left = settle_debts(debts, kinetic, 0.8)
        rp, rl = settle_reference(debts, kinetic, 0.8)
        np.testing.assert_allclose(pay, rp, rtol=1e-14, atol=1e-300)
        assert left == pytest.approx(rl, rel=1e-12, abs=1e-15)
        assert pay.sum() + left == pytest.approx(debts.sum(), rel=1e-12, abs=1e-15)
        assert np.all(pay <= 0.8 * kinetic + 1e-15)
        # a debt is only paid by blocks further out
        if debts.sum() > 0:
            first = int(np.argmax(debts > 0))
            assert np.all(pay[: first + 1] == 0)


def test_block_sums_fixed_order():
    x = np.arange(45, dtype=float)
    np.testing.assert_array_equal(block_sums(x, 20), [x[:20].sum(), x[20:40].sum(), x[40:].sum()])
