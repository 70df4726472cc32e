"""``cmc compare RUN [RUN ...]``: Monte Carlo and direct N-body runs side by side (issue 50).

Each run folder's diagnostics.h5 (``cmc run`` or ``cmc nbody``: the same column names and
units) is read; runs of the same kind (Monte Carlo or N-body) and the same N are one ensemble
(their seeds differ), drawn as the median with the range of its runs shaded, against time in
initial half-mass relaxation times (``time_trh``: both modes use the same t_rh0).  Quantities:
the Lagrange radii, r_c / r_h, N_core, the number of binaries and the bound mass.  One PNG, and
one JSON with the ensembles' values on a common time grid, each run's core-collapse time (the
first minimum of r_c / r_h, smoothed) and the table printed by the command.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from cmc.errors import InputError
from cmc.io import read_diagnostics

#: Points of the common time grid of an ensemble.
GRID_POINTS = 200
#: Times [t_rh0] of the printed table (those inside every ensemble's span).
TABLE_TIMES = (0.0, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 50.0)
#: Rows of the running median that smooths r_c / r_h before its minimum is taken.
SMOOTH_ROWS = 25


def _kind(attrs: dict) -> str:
    return "N-body" if str(attrs.get("mode", "")) == "nbody" else "Monte Carlo"


def load_run(outdir: str | Path) -> dict:
    """One run's series: time [t_rh0], Lagrange radii (rows x fractions) and their fractions,
    r_c / r_h, N_core, binaries, bound mass [M0]; its kind and N."""
    path = Path(outdir) / "diagnostics.h5"
    d, attrs = read_diagnostics(path)
    if "time_trh" not in d or d["time_trh"].size == 0:
        raise InputError(f"{path}: no diagnostics rows")
    n = d["time_trh"].size
    return {
        "run": str(outdir), "kind": _kind(attrs), "n0": int(attrs.get("n0", d["N"][0])),
        "t": np.asarray(d["time_trh"], dtype=float),
        "fractions": [float(f) for f in attrs["lagrange_fractions"]],
        "lagrange": np.asarray(d["lagrange_radii"], dtype=float).reshape(n, -1),
        "rc_rh": np.asarray(d["r_c"], dtype=float) / np.asarray(d["r_h"], dtype=float),
        "n_core": np.asarray(d["N_core"], dtype=float),
        "binaries": np.asarray(d["N_binaries"], dtype=float) if "N_binaries" in d
        else np.zeros(n),
        "mass": np.asarray(d["M"], dtype=float),
    }


def collapse_time(run: dict) -> float:
    """The time [t_rh0] of the smallest r_c / r_h, after a running median over
    :data:`SMOOTH_ROWS` rows (the core's noise); nan for fewer rows than that."""
    x = run["rc_rh"]
    if x.size < SMOOTH_ROWS:
        return math.nan
    k = SMOOTH_ROWS
    windows = np.lib.stride_tricks.sliding_window_view(x, k)
    smooth = np.median(windows, axis=1)
    return float(run["t"][int(np.argmin(smooth)) + k // 2])


def _series(run: dict) -> dict[str, np.ndarray]:
    out = {"rc_rh": run["rc_rh"], "n_core": run["n_core"], "binaries": run["binaries"],
           "mass": run["mass"]}
    for j, f in enumerate(run["fractions"]):
        out[f"r_{f:g}"] = run["lagrange"][:, j]
    return out


def ensembles(runs: list[dict]) -> list[dict]:
    """Runs grouped by (kind, N), in the order first met; per ensemble a common time grid
    (from 0 to the shortest run's end) and, per quantity, the runs' values on it (linear
    interpolation), their median, low and high."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["kind"], r["n0"]), []).append(r)
    out = []
    for (kind, n0), members in groups.items():
        fractions = members[0]["fractions"]
        if any(m["fractions"] != fractions for m in members):
            raise InputError(f"the {kind} runs of N = {n0} have different Lagrange fractions")
        t_end = min(float(m["t"][-1]) for m in members)
        grid = np.linspace(0.0, t_end, GRID_POINTS)
        values: dict[str, np.ndarray] = {}
        for m in members:
            for name, y in _series(m).items():
                values.setdefault(name, []).append(np.interp(grid, m["t"], y))
        stats = {name: {"runs": np.array(v), "median": np.median(v, axis=0),
                        "low": np.min(v, axis=0), "high": np.max(v, axis=0)}
                 for name, v in values.items()}
        out.append({"kind": kind, "n0": n0, "runs": [m["run"] for m in members],
                    "fractions": fractions, "t": grid, "stats": stats,
                    "t_collapse": [collapse_time(m) for m in members]})
    return out


def table(ens: list[dict]) -> list[dict]:
    """Rows of the printed table: per ensemble and time of :data:`TABLE_TIMES` within its
    span, the median (and range) of each quantity."""
    rows = []
    for e in ens:
        for t in TABLE_TIMES:
            if t > e["t"][-1] + 1e-12:
                break
            row = {"ensemble": f"{e['kind']} N={e['n0']}", "t_trh0": t}
            for name, s in e["stats"].items():
                row[name] = [float(np.interp(t, e["t"], s[k])) for k in ("median", "low", "high")]
            rows.append(row)
    return rows


def compare_runs(outdirs: list[str | Path], prefix: str | Path = "compare") -> tuple[Path, Path]:
    """Draw ``PREFIX.png`` and write ``PREFIX.json`` for the runs; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not outdirs:
        raise InputError("cmc compare: name at least one run folder")
    ens = ensembles([load_run(o) for o in outdirs])
    prefix = Path(prefix)
    fig, ax = plt.subplots(5, 1, figsize=(8.5, 15), sharex=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, e in enumerate(ens):
        c = colours[k % len(colours)]
        label = f"{e['kind']} N={e['n0']} ({len(e['runs'])} run{'s' * (len(e['runs']) > 1)})"
        for j, f in enumerate(e["fractions"]):
            s = e["stats"][f"r_{f:g}"]
            ax[0].semilogy(e["t"], s["median"], color=c, lw=1.0,
                           label=label if j == 0 else None)
            ax[0].fill_between(e["t"], s["low"], s["high"], color=c, alpha=0.2, lw=0)
        for a, name in zip(ax[1:], ("rc_rh", "n_core", "binaries", "mass"), strict=True):
            s = e["stats"][name]
            a.plot(e["t"], s["median"], color=c, lw=1.0, label=label)
            a.fill_between(e["t"], s["low"], s["high"], color=c, alpha=0.2, lw=0)
    ax[0].set_ylabel("Lagrange radii [r_vir]")
    ax[1].set_yscale("log")
    ax[1].set_ylabel("r_c / r_h")
    ax[2].set_yscale("log")
    ax[2].set_ylabel("N_core")
    ax[3].set_ylabel("binaries")
    ax[4].set_ylabel("bound mass [M0]")
    ax[-1].set_xlabel("t / t_rh0")
    ax[0].legend(fontsize=8)
    fig.suptitle("cmc compare: median of each ensemble, its runs' range shaded")
    fig.tight_layout()
    png = prefix.with_suffix(".png")
    png.parent.mkdir(parents=True, exist_ok=True)
    tmp = png.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(png)
    doc = {"ensembles": [{"kind": e["kind"], "N": e["n0"], "runs": e["runs"],
                          "lagrange_fractions": e["fractions"],
                          "t_collapse_trh0": e["t_collapse"],
                          "t_trh0": e["t"].tolist(),
                          "median": {k: s["median"].tolist() for k, s in e["stats"].items()},
                          "low": {k: s["low"].tolist() for k, s in e["stats"].items()},
                          "high": {k: s["high"].tolist() for k, s in e["stats"].items()}}
                         for e in ens],
           "table": table(ens)}
    js = prefix.with_suffix(".json")
    tmp = js.with_suffix(".tmp.json")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(js)
    return png, js


def summary_lines(js: Path) -> list[str]:
    """The table as text lines (median [low, high]) for the terminal."""
    doc = json.loads(Path(js).read_text())
    lines = []
    for e in doc["ensembles"]:
        tc = [f"{x:.3g}" for x in e["t_collapse_trh0"]]
        lines.append(f"{e['kind']} N={e['N']}: {len(e['runs'])} run(s); smallest r_c/r_h at "
                     f"t/t_rh0 = {', '.join(tc)}")
    for row in doc["table"]:
        r50 = row.get("r_0.5")
        half = f" r_h-Lagrange {r50[0]:.3g} [{r50[1]:.3g}, {r50[2]:.3g}]" if r50 else ""
        lines.append(f"  {row['ensemble']} t = {row['t_trh0']:g}: r_c/r_h "
                     f"{row['rc_rh'][0]:.3g} [{row['rc_rh'][1]:.3g}, {row['rc_rh'][2]:.3g}], "
                     f"N_core {row['n_core'][0]:.3g}{half}")
    return lines
