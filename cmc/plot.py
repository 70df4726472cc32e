"""Plots of a run: r_c/r_h, rho_c, Lagrange radii, (with a tidal field) the mass and the tidal
radius, and (with binaries) the binary fraction overall and in the core, against t/t_rh0 or,
in physical units, against Myr with radii in pc (PNG)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cmc.io import read_diagnostics


def plot_run(outdir: str | Path, physical: bool = False) -> Path:
    """Draw ``OUTDIR/evolution.png`` from ``OUTDIR/diagnostics.h5``; returns its path.

    ``physical``: time in Myr, radii in pc, densities in Msun/pc^3, masses in Msun (the
    conversion factors the file carries, :class:`cmc.units.Units`), drawn to
    ``OUTDIR/evolution_physical.png``: a file of its own, so that the plot in code units
    (which ``make run`` draws) is never replaced by the other.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir = Path(outdir)
    d, attrs = read_diagnostics(outdir / "diagnostics.h5")
    t = d["time_trh"]
    length, mass, t_label, l_unit = 1.0, 1.0, "t / t_rh0", "r_vir"
    rho_label = r"$\rho_c$ [M$_0$ r$_{vir}^{-3}$]"
    if physical:
        from cmc.units import Units

        u = Units.from_attrs(attrs)
        length, mass, t, t_label, l_unit = u.length_pc, u.mass_msun, d["time_myr"], \
            "t [Myr]", "pc"
        rho_label = r"$\rho_c$ [M$_\odot$ pc$^{-3}$]"
    binaries = "binary_fraction" in d and np.any(np.asarray(d["N_binaries"]) > 0)
    tidal = "r_tidal" in d and np.any(np.asarray(d["r_tidal"]) > 0)
    rows = 3 + int(binaries) + int(tidal)
    fig, ax = plt.subplots(rows, 1, figsize=(8.2, 3.3 * rows), sharex=True)
    # legends beside the panels, never over a curve (inside, matplotlib's "best" place hid
    # the 0.1 % Lagrange radius of King models, whose curves fill the whole panel)
    beside = {"fontsize": 8, "loc": "upper left", "bbox_to_anchor": (1.01, 1.0),
              "borderaxespad": 0.0}
    ax[0].semilogy(t, d["r_c"] / d["r_h"])
    ax[0].set_ylabel("r_c / r_h")
    ax[1].semilogy(t, d["rho_c"] * mass / length ** 3)
    ax[1].set_ylabel(rho_label)
    lr = d["lagrange_radii"]
    for j, f in enumerate(attrs["lagrange_fractions"]):
        ax[2].semilogy(t, lr[:, j] * length, label=f"{100 * f:g} %")
    # r_c under the Lagrange radii, thinner: after a collapse it lies on r(0.1 %)
    ax[2].semilogy(t, d["r_c"] * length, "k--", lw=0.8, zorder=1.5, label="r_c")
    if tidal:
        ax[2].semilogy(t, d["r_tidal"] * length, "k:", label="r_tidal")
    ax[2].set_ylabel(f"radius [{l_unit}]")
    ax[2].legend(**beside)
    row = 3
    if tidal:
        m_unit = "Msun" if physical else "M0"
        ax[row].plot(t, d["M"] * mass, label="bound")
        ax[row].plot(t, d["M_stripped"] * mass, label="stripped")
        ax[row].plot(t, d["M_escaped"] * mass, label="other escapers")
        ax[row].set_ylabel(f"mass [{m_unit}]")
        ax[row].legend(**beside)
        row += 1
    if binaries:
        ax[row].plot(t, d["binary_fraction"], label="all")
        ax[row].plot(t, d["binary_fraction_core"], label="core (r < r_c)")
        ax[row].set_ylabel("binary fraction")
        ax[row].legend(**beside)
    ax[-1].set_xlabel(t_label)
    fig.suptitle(f"{outdir.name}: stop = {attrs.get('stop_reason', '')}")
    fig.tight_layout()
    name = "evolution_physical" if physical else "evolution"
    path = outdir / f"{name}.png"
    tmp = outdir / f"{name}.tmp.png"
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)
    return path
