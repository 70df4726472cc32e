"""Plots of a run: r_c/r_h, rho_c, Lagrange radii and (with binaries) the binary fraction
overall and in the core against t/t_rh0 (PNG)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cmc.io import read_diagnostics


def plot_run(outdir: str | Path) -> Path:
    """Draw ``OUTDIR/evolution.png`` from ``OUTDIR/diagnostics.h5``; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir = Path(outdir)
    d, attrs = read_diagnostics(outdir / "diagnostics.h5")
    t = d["time_trh"]
    binaries = "binary_fraction" in d and np.any(np.asarray(d["N_binaries"]) > 0)
    fig, ax = plt.subplots(4 if binaries else 3, 1, figsize=(7, 13 if binaries else 10),
                           sharex=True)
    ax[0].semilogy(t, d["r_c"] / d["r_h"])
    ax[0].set_ylabel("r_c / r_h")
    ax[1].semilogy(t, d["rho_c"])
    ax[1].set_ylabel(r"$\rho_c$ [M$_0$ r$_{vir}^{-3}$]")
    lr = d["lagrange_radii"]
    for j, f in enumerate(attrs["lagrange_fractions"]):
        ax[2].semilogy(t, lr[:, j], label=f"{100 * f:g} %")
    ax[2].semilogy(t, d["r_c"], "k--", label="r_c")
    ax[2].set_ylabel("radius [r_vir]")
    ax[2].legend(fontsize=8, ncol=3)
    if binaries:
        ax[3].plot(t, d["binary_fraction"], label="all")
        ax[3].plot(t, d["binary_fraction_core"], label="core (r < r_c)")
        ax[3].set_ylabel("binary fraction")
        ax[3].legend(fontsize=8)
    ax[-1].set_xlabel("t / t_rh0")
    fig.suptitle(f"{outdir.name}: stop = {attrs.get('stop_reason', '')}")
    fig.tight_layout()
    path = outdir / "evolution.png"
    tmp = outdir / "evolution.tmp.png"
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)
    return path
