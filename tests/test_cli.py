"""Command line and parameter validation: clear one-line errors, exit status 2."""

from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest

from cmc.cli import main
from cmc.config import ConfigError, load_config


@pytest.mark.parametrize("text, key", [
    ("[run]\nthetamax = 1\n", "run.thetamax"),
    ("[run]\ntheta_max = 2.0\n", "run.theta_max"),
    ("[initial]\nn = ten\n", "initial.n"),
    ("[initial]\nmodel = hernquist\n", "initial.model"),
    ("[nope]\nx = 1\n", "nope"),
    ("[initial]\nw0 = 13\n", "initial.w0"),
    ("[output]\nlagrange_fractions = 0.5, 1.5\n", "output.lagrange_fractions"),
])
def test_bad_parameters_name_the_key(text, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(text=text)


def test_cli_bad_key_exit_2_no_traceback(tmp_path):
    ini = tmp_path / "bad.ini"
    ini.write_text("[run]\ntheta_max = -1\n")
    p = subprocess.run([sys.executable, "-m", "cmc.cli", "run", str(ini), "-o",
                        str(tmp_path / "o")], capture_output=True, text=True)
    assert p.returncode == 2
    assert "run.theta_max" in p.stderr
    assert "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_ic_roundtrip_and_bad_input(tmp_path):
    out = tmp_path / "ic.h5"
    assert main(["ic", "plummer", "--n", "500", "--seed", "2", "-o", str(out)]) == 0
    with h5py.File(out, "r") as fh:
        r = fh["stars/r"][...]
        assert fh["stars/r"].attrs["unit"] == "r_vir"
    assert np.all(np.diff(r) >= 0)
    # unsorted input is sorted on load; a bad radius is refused with a clear message
    bad = tmp_path / "bad.h5"
    with h5py.File(bad, "w") as fh:
        g = fh.create_group("stars")
        g["r"] = np.array([1.0, 0.5, -2.0, 3.0])
        g["m"] = np.full(4, 0.25)
        g["vr"] = np.zeros(4)
        g["vt"] = np.ones(4)
    ini = tmp_path / "f.ini"
    ini.write_text(f"[initial]\nmodel = file\nfile = {bad}\n")
    assert main(["run", str(ini), "-o", str(tmp_path / "o")]) == 2


def test_ic_refuses_to_overwrite_a_file(tmp_path, capsys):
    """cmc ic -o FILE never replaces an existing file (another model's initial conditions, a
    run's diagnostics.h5) unless --overwrite (issue 46, item 2: it did, silently, exit 0)."""
    out = tmp_path / "diagnostics.h5"
    out.write_bytes(b"a run's results")
    assert main(["ic", "plummer", "--n", "100", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert str(out) in err and "--overwrite" in err, err
    assert out.read_bytes() == b"a run's results"
    assert main(["ic", "plummer", "--n", "100", "-o", str(out), "--overwrite"]) == 0
    with h5py.File(out, "r") as fh:
        assert fh["stars/r"].shape == (100,)


def test_every_argument_has_help():
    """cmc SUBCOMMAND --help explains every option and argument (issue 46, item 11: cmc ic
    --n, --seed and --w0 had none)."""
    import argparse

    from cmc.cli import build_parser

    sub = next(a for a in build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    missing = [f"cmc {name} {a.option_strings or a.dest}" for name, p in sub.choices.items()
               for a in p._actions if a.dest != "help" and not a.help]
    assert missing == []


def test_refuses_to_overwrite_a_run(tmp_path):
    ini = tmp_path / "m.ini"
    ini.write_text("[initial]\nn = 200\n[run]\nmax_steps = 2\n")
    assert main(["run", str(ini), "-o", str(tmp_path / "o")]) == 0
    assert main(["run", str(ini), "-o", str(tmp_path / "o")]) == 2
    assert main(["plot", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "evolution.png").stat().st_size > 1000


def test_plot_legends_and_r_c_hide_no_lagrange_radius(tmp_path, monkeypatch):
    """Every legend of evolution.png stands beside its panel, and r_c is drawn under the
    Lagrange radii (after a collapse it lies on r(0.1 %)): neither hides a curve (issue 46,
    item 11: the legend hid the 0.1 % curve of a King model)."""
    import matplotlib.pyplot as plt

    closed = []
    monkeypatch.setattr(plt, "close", closed.append)
    ini = tmp_path / "k.ini"
    ini.write_text("[initial]\nmodel = king\nn = 400\nbinary_fraction = 0.1\n"
                   "[tidal]\nmode = fixed\n[run]\nmax_steps = 3\nn_core_stop = 0\n")
    assert main(["run", str(ini), "-o", str(tmp_path / "o")]) == 0
    assert main(["plot", str(tmp_path / "o")]) == 0
    fig = closed[-1]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = [(ax, ax.get_legend()) for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 3  # radii, mass (tidal), binary fraction
    for ax, leg in legends:
        assert leg.get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1
    lines = {ln.get_label(): ln for ln in fig.axes[2].get_lines()}
    assert lines["r_c"].get_zorder() < lines["0.1 %"].get_zorder()


def test_parameter_doc_is_current():
    """docs/parameters.md holds the table generated from the declarations (no drift)."""
    from pathlib import Path

    from cmc.config import parameter_table

    doc = (Path(__file__).resolve().parents[1] / "docs" / "parameters.md").read_text()
    assert parameter_table() in doc
