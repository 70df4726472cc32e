"""Gürkan, Freitag & Rasio's (2004) fiducial model at two N: the innermost Lagrange radii.

King W0 = 3, Salpeter 0.2-120 Msun, gamma = 0.01, the default step, run by hand (each takes
from 20 minutes at N0 = 1e5 to hours at 1e6 on two cores; see docs/validation_tidal.md)::

    cmc run runs/conv/defaults.ini -o RUN --set initial.model=king --set initial.w0=3 \\
        --set initial.mass_function=power_law --set initial.alpha=2.35 \\
        --set initial.m_min=0.2 --set initial.m_max=120 --set run.gamma=0.01 \\
        --set run.n_core_stop=100 --set run.t_max=0.8 --set initial.n=N --set initial.seed=1

then ``python bench/plot_fiducial.py RUN_1e5 RUN_3e5 RUN_1e6`` writes
docs/validation_tidal_fiducial.png and prints, for each run, when the running medians of
r(0.1 %) and r(1 %) fall below fractions of their initial values; the right panel has the
mean mass inside r(1 %) and r(10 %).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from validate_tidal import SMOOTH_ROWS, analyse_segregation, crossing, running_median  # noqa: E402

#: fractions of the initial radius whose crossing times are printed
LEVELS = (0.5, 0.3, 0.2, 0.1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("-o", type=Path, default=ROOT / "docs" / "validation_tidal_fiducial.png")
    a = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4.5))
    for run, color in zip(a.runs, ("C0", "C1", "C2", "C3")):
        s = analyse_segregation(run)
        t = np.asarray(s["t"])
        label = f"N0 = {s['N0']:.0e}"
        for key, name, ls in (("r0.1", "0.1 %", "-"), ("r1", "1 %", "--")):
            y = running_median(np.asarray(s[key]), SMOOTH_ROWS)
            ax[0].semilogy(t, y, ls, color=color, label=f"r({name}), {label}")
            print(f"{run}: N0 {s['N0']}, r({name}) below " + ", ".join(
                f"{lev:g} at {crossing(t, y, lev):.3f}" for lev in LEVELS)
                + f" t_rh0; end t = {t[-1]:.4f}, {y[-1]:.3f}")
        for key, name, ls in (("mm1", "1 %", "-"), ("mm10", "10 %", "--")):
            ax[1].semilogy(t, running_median(np.asarray(s[key]), SMOOTH_ROWS), ls, color=color,
                           label=f"inside r({name}), {label}")
        print(f"{run}: {s['steps']} steps, E_deficit {s['E_deficit_over_E0']:.4f} abs(E0), "
              f"mass lost {s['mass_lost']:.2%}, dt_tcross median {s['dt_tcross_median']:.3f}")
    ax[0].axvspan(0.1, 0.2, color="0.9", label="the issue: 0.1-0.2 (Gürkan et al. 2004: ~0.1)")
    ax[0].axhline(0.1, color="k", lw=0.5)
    ax[0].set_xlabel("t / t_rh0")
    ax[0].set_ylabel(f"Lagrange radius / initial (running median, {SMOOTH_ROWS} steps)")
    ax[0].set_title("King W0 = 3, Salpeter 0.2-120 Msun")
    ax[0].legend(fontsize=8)
    ax[1].set_xlabel("t / t_rh0")
    ax[1].set_ylabel(f"mean mass / initial mean mass (running median, {SMOOTH_ROWS} steps)")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.o, dpi=110)
    print(f"wrote {a.o}")


if __name__ == "__main__":
    main()
