"""Direct N-body mode: ``cmc nbody CONFIG`` (issue 50, second slice).

The same initial stars as ``cmc run CONFIG`` (:func:`cmc.initial.build_initial_stars`: the
same ids, masses, radii ``r``, radial and transverse speeds ``vr``, ``vt`` in Hénon units),
placed in 3-D (:func:`place_stars`) and evolved by direct summation with the 4th-order
Hermite integrator of :mod:`physics.nbody` (individual block time steps), or with its
6th-order scheme (Nitadori & Makino 2008; ``--order 6``).  At every output
time (a multiple of ``dt_out``, the integrator's largest step, so every star is synchronised
there) one row of diagnostics is written to ``OUTDIR/diagnostics.h5`` with the Monte Carlo
run's column names and units (:data:`cmc.diagnostics.DIAG_UNITS`), file attribute
``mode = nbody``, the integrator's settings as attributes (``order``, ``eta``, ``eps``,
``dt_out``).

What the columns are here
-------------------------
* ``K``, ``W``: kinetic and potential (pair sum) energy of the stars not escaped, in the frame
  of the integration; ``E_tot`` the whole system's K + W (conserved), ``E_escaped = E_tot - K
  - W`` (the escapers' energy including their interaction with the cluster), ``dE_rel``
  relative to ``E_tot`` at t = 0.  At t = 0, K is the Monte Carlo run's; W is the pair sum of
  this realisation, not the spherical potential of the Monte Carlo run.
* Escapers: a star whose energy ``v^2/2 + phi`` (in the frame of the centre of mass of all
  stars) is positive and that lies beyond :data:`ESCAPE_RADIUS_RH` r_h from the centre is
  counted as escaped from then on (it stays in the integration); ``N``, ``M`` count the others.
  The members of a binary (:func:`cmc.nbody_outputs.find_binaries`) take its centre of mass's
  energy (their mutual potential left out) and radius
  (:func:`cmc.nbody_outputs.escape_energies`), so an escaping binary leaves whole.
  Each is written once, at the output where it left, to ``OUTDIR/escapers.h5`` with the Monte
  Carlo run's columns (kind 1, unbound; :func:`cmc.nbody_outputs.escaper_rows`).
* Binaries: mutual nearest neighbours that are bound and tidally unperturbed at apocentre
  (:func:`cmc.nbody_outputs.find_binaries`) and hard (``|E_b| >= kT``, :data:`HARD_KT`; the
  soft pairs of a dense core are chance neighbours), counted as the Monte Carlo run counts its
  binary rows: ``N_binaries``, ``binary_fraction``, ``binary_fraction_core``, ``E_binding``
  (here part of K + W already).
* Centre: at t = 0 the model's own origin (so the row of t = 0 has the Monte Carlo initial
  model's radii, Lagrange radii, r_h and core, star for star); from the first output on the
  density centre of the bound stars (Casertano & Hut 1985, 6th nearest neighbour), column
  ``centre``.
* ``r_h``, ``lagrange_radii``, ``m_mean_lagrange``, ``r_c``, ``rho_c``, ``N_core``: the Monte
  Carlo run's functions (:mod:`physics.structure`: Casertano-Hut in radial order) on the
  radii of the bound stars about the centre, so the columns mean what they mean in a Monte
  Carlo run.  The 3-D Casertano & Hut core as N-body codes give it is in ``r_c_3d``
  (``sqrt(sum rho_i^2 |x_i - x_d|^2 / sum rho_i^2)``, rho_i from the 6th neighbour distance),
  ``rho_c_3d`` (``sum rho_i^2 / sum rho_i``) and ``N_core_3d`` (stars within ``r_c_3d``).
* Time: ``time_nb`` in N-body units, ``time`` in the Monte Carlo run's unit
  ``t_NB N0 / ln(gamma N0)``, ``time_trh`` in t_rh0 with the Monte Carlo run's definition
  ``0.138 r_h^1.5 / sqrt(M)`` of the same initial stars.

Checkpoints and restarts
------------------------
``OUTDIR/checkpoint.h5`` (:meth:`NBodyRun.write_checkpoint`) holds the whole integrator state
(:mod:`cmc.nbody_checkpoint`; with the close pairs' arrays and scalars: a checkpoint
written before them restarts with none) and the run's own (escapers, centre, ``e0``, output
count, ``t_end``, ``dt_out``), the config text and a sha256 content checksum
(:func:`cmc.io.content_digest`), written to a temporary file and renamed
(:func:`cmc.io.atomic_h5`). It is written at t = 0,
every ``output.checkpoint_every`` outputs or after ``output.checkpoint_minutes`` of wall time
(checked at outputs), at the end and on a clean stop (SIGTERM/SIGINT or ``run.max_wall_hours``:
exit 75), never after a physics failure (the last good one stays). ``cmc nbody --restart OUTDIR
[--t-end T]`` (:func:`resume`) verifies it, truncates diagnostics.h5 to the rows it covers and
continues bit for bit.

Close pairs
-----------
A bound pair of stars with steps at or below ``--pair-dt`` (default ``dt_out / 2^12``) and a
tidal perturbation below ``--pair-gamma`` (default 1e-4; 0 switches the treatment off) is
carried as a Kepler orbit about its centre of mass under the tide of its perturbers, which
feel its reaction (:mod:`physics.nbody_pairs`, :mod:`physics.nbody_perturbed`), until the
perturbation exceeds twice that.  Settings as attributes ``pair_dt``, ``pair_gamma``
(``--pair-gamma`` may change on restart); columns ``nb_pairs_formed``,
``nb_pairs_resolved``, ``nb_pairs``, ``nb_pair_kicks``.  The energies are over all stars
with the pairs' members resolved.  A pair in a close encounter (perturbation above twice
``pair_gamma``), or a triple, takes small Hermite steps, and a step below the integrator's
dt_min stops the run (``close_pair``, exit 3).

MPI
---
Under ``mpiexec -n P`` every rank holds the whole system and computes a share of each large
block's forces (:class:`parallel.nbody_forces.SplitForces`, one Allgatherv): the same bits as
one process.  Rank 0 writes the files and logs; its clock and signals decide when to stop.

GPU: ``--forces gpu`` / ``gpu-sim`` (:func:`use_forces`, :mod:`physics.nbody_gpu`).  Tides:
``tidal.mode = shrinking`` is Hill's field of the Monte Carlo run's orbit (:mod:`physics.
nbody_tidal`; E_tot is Jacobi's energy; escape beyond 2 r_J).  Not yet: regularised multiples,
primordial binaries, stellar evolution, a fixed tidal radius, snapshots.
"""

from __future__ import annotations

import logging
import math
import signal
import time
from pathlib import Path

import numpy as np

from cmc.config import Config
from cmc.errors import InputError
from cmc.nbody_checkpoint import CHECKPOINT, read_checkpoint, restore, write_checkpoint
from cmc.nbody_outputs import density_centre

log = logging.getLogger("cmc.nbody")

#: Largest N the mode accepts (direct summation: the cost grows as N^2 per time unit).
N_MAX = 20000
#: Estimate of the cost of one pair interaction of an integration step on one core [s]: the
#: force kernel alone takes 7.7 ns (physics/nbody_kernels.py, N = 1000); with the prediction
#: of all stars per block and the corrector, cmc nbody measured 17 ns at N = 1000 and 27 ns at
#: N = 200 (one thread, a loaded 2-core machine).
PAIR_SECONDS = 1.6e-8
#: Estimate of the particle steps per star per N-body time unit (Plummer, eta = 0.02,
#: measured: 140 at N = 200, 172 at N = 1000 before core collapse; grows slowly with N).
STEPS_PER_UNIT = 200.0
#: The binaries counted in the diagnostics: internal energy at least this many kT (kT = 2/3
#: of the bound stars' mean kinetic energy).
HARD_KT = 1.0
#: A star with positive energy beyond this many half-mass radii is an escaper.
ESCAPE_RADIUS_RH = 20.0
#: In a galactic tide a star escapes beyond this many Jacobi radii of the bound mass from the
#: density centre (NBODY's 2 r_t; then that replaces the energy test).
TIDAL_ESCAPE_RJ = 2.0
#: Default output interval [N-body time units] (the integrator's largest step).
DT_OUT = 0.125


#: Columns this mode adds to the Monte Carlo run's (units, meanings).
NBODY_UNITS = {"centre": "r_vir", "r_c_3d": "r_vir", "rho_c_3d": "M0 r_vir^-3",
               "N_core_3d": "objects", "nb_steps": "particle steps",
               "wall_s": "s", "nb_pairs_formed": "pairs", "nb_pairs_resolved": "pairs",
               "nb_pairs": "pairs", "nb_pair_kicks": "kicks", "E_tidal_field": "E0"}
NBODY_MEANINGS = {
    "centre": "centre the radii are measured from: the model's origin at t = 0, then the "
              "density centre of the bound stars (Casertano & Hut 1985, 6th neighbour)",
    "r_c_3d": "3-D Casertano-Hut core radius sqrt(sum rho_i^2 |x_i - x_d|^2 / sum rho_i^2)",
    "rho_c_3d": "3-D Casertano-Hut core density sum rho_i^2 / sum rho_i",
    "N_core_3d": "stars within r_c_3d of the density centre",
    "nb_steps": "particle steps of the Hermite integrator since the start",
    "wall_s": "wall-clock time of the integration since the start",
    "nb_pairs_formed": "close pairs taken out of the Hermite integration as Kepler orbits "
                       "under their perturbers' tide since the start",
    "nb_pairs_resolved": "close pairs put back as two stars (perturbation above twice "
                         "pair_gamma) since the start",
    "nb_pairs": "close pairs carried as Kepler orbits now",
    "E_tidal_field": "the galactic tide's potential energy of the bound stars, sum m (-3/2 "
                     "Omega^2 x^2 + 1/2 Omega^2 z^2) (physics.nbody_tidal; part of E_bound "
                     "and E_tot, which are Jacobi's energy; 0 isolated)",
    "nb_pair_kicks": "tidal kicks given to the close pairs' relative orbits since the start "
                     "(physics.nbody_perturbed: each sums over the pair's perturbers)",
    "E_binding": "internal energy -m1 m2 / 2a of the hard binaries (|E_b| >= kT) found by the "
                 "neighbour search (cmc.nbody_outputs.find_binaries); unlike a Monte Carlo "
                 "run's, already part of K + W, so not a term of E_tot",
}


def estimated_seconds(n: int, t_end: float) -> float:
    """A rough estimate of the run time on one core [s]: pair evaluations
    ``N (N - 1) x STEPS_PER_UNIT x t_end`` at :data:`PAIR_SECONDS` each (an estimate, not a
    measurement: close encounters and core collapse take more steps)."""
    return PAIR_SECONDS * n * (n - 1) * STEPS_PER_UNIT * max(t_end, 1.0)


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.0f} days"


def check_supported(cfg: Config) -> None:
    """Refuse (:class:`InputError`, one line naming the key) what this mode cannot run."""
    if cfg.initial.binary_fraction > 0.0:
        raise InputError(f"initial.binary_fraction = {cfg.initial.binary_fraction:g}: cmc "
                         "nbody cannot run primordial binaries yet (only close pairs "
                         "formed in the run are treated); set it to 0")
    if cfg.bse.stellar_evolution:
        raise InputError("bse.stellar_evolution = true: cmc nbody has no stellar evolution; "
                         "set it to false")
    if cfg.tidal.mode == "fixed":
        raise InputError("tidal.mode = fixed: cmc nbody has the galactic tide of a circular "
                         "orbit (tidal.mode = shrinking: r_J shrinks as M^(1/3)), not a fixed "
                         "tidal radius; set tidal.mode = shrinking or isolated")


def check_size(n: int, t_end: float | None, key: str = "initial.n") -> None:
    """Refuse N above :data:`N_MAX`, saying how long the run would take."""
    if n <= N_MAX:
        return
    t = 1.0 if t_end is None else t_end
    to = "per N-body time unit" if t_end is None else f"to t = {t:g} N-body units"
    raise InputError(f"{key} = {n}: too many stars for cmc nbody (at most {N_MAX}): about "
                     f"{_duration(estimated_seconds(n, t))} on one core {to} (an estimate: "
                     f"{PAIR_SECONDS * 1e9:.0f} ns per pair interaction, ~{STEPS_PER_UNIT:.0f} "
                     "steps per star per time unit)")


def place_stars(stars: dict[str, np.ndarray], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions and velocities ``(N, 3)`` of the stars' ``r``, ``vr``, ``vt``.

    Each star at ``r`` times an isotropic direction n, its velocity ``vr n`` plus ``vt``
    along a random direction in the plane normal to n.  The directions are drawn from
    ``numpy.random.default_rng(seed)``: the N-body mode's own draws (three per star: cos
    theta, phi, the azimuth of the transverse velocity), which the Monte Carlo run never
    makes, so its streams are untouched.
    """
    rng = np.random.default_rng(seed)
    n = stars["r"].size
    mu = rng.uniform(-1.0, 1.0, n)
    phi = rng.uniform(0.0, 2.0 * np.pi, n)
    psi = rng.uniform(0.0, 2.0 * np.pi, n)
    s = np.sqrt(np.maximum(1.0 - mu * mu, 0.0))
    cp, sp = np.cos(phi), np.sin(phi)
    rhat = np.column_stack((s * cp, s * sp, mu))
    e_theta = np.column_stack((mu * cp, mu * sp, -s))
    e_phi = np.column_stack((-sp, cp, np.zeros(n)))
    tang = np.cos(psi)[:, None] * e_theta + np.sin(psi)[:, None] * e_phi
    r = np.asarray(stars["r"], dtype=np.float64)[:, None]
    pos = r * rhat
    vel = np.asarray(stars["vr"], dtype=np.float64)[:, None] * rhat \
        + np.asarray(stars["vt"], dtype=np.float64)[:, None] * tang
    return pos, vel


class NBodyRun:
    """A ``cmc nbody`` run: the initial stars, the integrator state and the diagnostics."""

    def __init__(self, cfg: Config, outdir: Path | None, *, t_end: float | None = None,
                 dt_out: float = DT_OUT, eta: float | None = None, eps: float = 0.0,
                 order: int = 4, pair_gamma: float | None = None,
                 pair_dt: float | None = None, eta_close: float | None = None,
                 comm=None) -> None:
        from cmc.diagnostics import half_mass_relaxation_time
        from cmc.initial import build_initial_stars, physical_scale
        from cmc.units import Units
        from physics.nbody import ETA_CLOSE, ETA_DEFAULT, NBodyState
        from physics.structure import lagrange_radii

        check_supported(cfg)
        if cfg.initial.model != "file":
            check_size(cfg.initial.n, t_end)
        if not (dt_out > 0.0 and math.isfinite(dt_out)) or math.frexp(dt_out)[0] != 0.5:
            raise InputError(f"--dt-out {dt_out!r}: must be a power of two (e.g. 0.125)")
        if eta is not None and not eta > 0.0:
            raise InputError(f"--eta {eta!r}: must be positive")
        if order not in (4, 6):
            raise InputError(f"--order {order!r}: must be 4 or 6")
        if t_end is not None and not (t_end > 0.0 and math.isfinite(t_end)):
            raise InputError(f"--t-end {t_end!r}: must be positive")
        _check_pair_options(pair_gamma, pair_dt, dt_out)
        eta_close = ETA_CLOSE[order] if eta_close is None else eta_close
        _check_eta_close(eta_close, ETA_DEFAULT[order] if eta is None else eta)
        self.cfg = cfg
        self.outdir = outdir
        if comm is None:
            from parallel.comm import SerialComm

            comm = SerialComm()
        #: the ranks (every rank holds the whole system; rank 0 writes the files)
        self.comm = comm
        self.rank0 = comm.Get_rank() == 0
        try:
            stars, info = build_initial_stars(cfg)
        except (ValueError, ZeroDivisionError, FloatingPointError) as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError(f"initial model {cfg.initial.model}: {exc}") from None
        if "binind" in stars and np.any(stars["binind"] >= 0):
            raise InputError(f"initial.file {cfg.initial.file}: holds "
                             f"{int(np.count_nonzero(stars['binind'] >= 0))} binaries; cmc "
                             "nbody cannot run binaries yet")
        self.stars = stars
        n = stars["r"].size
        self.n0 = n
        m = np.asarray(stars["m"], dtype=np.float64)
        mtot = float(np.sum(m))
        unit_mass, length_pc, r_t0 = physical_scale(cfg, info, mtot)
        self.units = Units(unit_mass, length_pc, n, cfg.run.gamma)
        self.lnl0 = math.log(cfg.run.gamma * n)
        self.unit_nb = n / self.lnl0  # t_NB per t_rel
        # t_rh0 as Simulation.create: from the model's sorted radii and masses [t_rel]
        r_h0 = float(lagrange_radii(stars["r"], m, np.array([0.5]))[0])
        self.t_rh0 = half_mass_relaxation_time(r_h0, mtot)
        self.t_rh0_nb = self.t_rh0 * self.unit_nb
        if t_end is None:
            t_end = self._t_end_from_config()
        check_size(n, t_end, "initial.n" if cfg.initial.model != "file" else "the model's N")
        self.t_end = float(t_end)
        self.dt_out = float(dt_out)
        pos, vel = place_stars(stars, cfg.initial.seed)
        from physics.nbody_pairs import PAIR_GAMMA
        from physics.nbody_tidal import hill_omega

        # the galactic tide (tidal.mode = shrinking): r_t0 the Jacobi radius of the mass
        omega = hill_omega(r_t0, mtot) if cfg.tidal.mode == "shrinking" else 0.0
        self.nb = NBodyState.create(m, pos, vel, eps=eps, eta=eta, dt_max=self.dt_out,
                                    order=order, pair_dt=pair_dt, omega=omega,
                                    pair_gamma=PAIR_GAMMA if pair_gamma is None else pair_gamma,
                                    eta_close=eta_close)
        if comm.Get_size() > 1:  # each rank a share of every large block's forces
            from parallel.nbody_forces import SplitForces

            self.nb.force_map = SplitForces(comm)
        self.fractions = np.asarray(cfg.output.lagrange_fractions, dtype=np.float64)
        self.escaped = np.zeros(n, dtype=bool)
        self.centre = np.zeros(3)
        self.e0 = 0.0
        self.step = 0
        self.wall = 0.0
        self.history: dict[str, list] = {}
        self.signal_received = 0

    def _t_end_from_config(self) -> float:
        """run.t_max [t_rh0] (and run.t_max_code [t_rel], run.t_max_myr where set) in
        N-body units: the earliest."""
        run = self.cfg.run
        ends = [run.t_max * self.t_rh0_nb]
        if run.t_max_code > 0.0:
            ends.append(run.t_max_code * self.unit_nb)
        if run.t_max_myr > 0.0:
            ends.append(run.t_max_myr / self.units.time_nb_myr)
        return min(ends)

    # ------------------------------------------------------------------ diagnostics
    def diagnostics(self) -> dict:
        """The row of the state's current time (every star synchronised there)."""
        from cmc.nbody_outputs import (
            binary_columns,
            escape_energies,
            escaper_rows,
            find_binaries,
        )
        from physics.nbody import acc_jerk, predicted
        from physics.nbody_kernels import energy_kernel
        from physics.nbody_tidal import jacobi_radius, tidal_energy
        from physics.structure import core_properties, lagrange_mean_masses, lagrange_radii

        st = self.nb
        t = st.time
        pos, vel = predicted(st, t)
        m = st.star_mass
        _, _, pot = acc_jerk(pos, vel, m, None, st.eps2)
        v2 = np.einsum("ic,ic->i", vel, vel)
        k_all = 0.5 * float(m @ v2)
        w_all = 0.5 * float(m @ pot)
        e_tot = k_all + w_all + tidal_energy(pos, m, st.omega)
        if self.step == 0:
            self.e0 = e_tot
        bound = ~self.escaped
        if self.step > 0:
            self.centre, _, _ = density_centre(pos[bound], m[bound])
        rad = np.sqrt(np.einsum("ic,ic->i", pos - self.centre, pos - self.centre))
        # escapers: positive energy in the centre-of-mass frame, beyond 20 r_h
        order = np.argsort(rad[bound], kind="stable")
        rb, mb = rad[bound][order], m[bound][order]
        r_h = float(lagrange_radii(rb, mb, np.array([0.5]))[0])
        ids = np.asarray(self.stars["id"], dtype=np.int64)  # (predicted: in star order)
        v_cm = (m @ vel) / float(np.sum(m))
        dv = vel - v_cm
        e_star = 0.5 * np.einsum("ic,ic->i", dv, dv) + pot
        # a binary leaves as one object: its members take its centre of mass's energy (less
        # their mutual potential) and radius, by which a hard binary escapes whole (alone,
        # each member is held by its companion)
        found = find_binaries(pos[bound], vel[bound], m[bound], ids[bound], st.eps2)
        if st.omega:  # in the tide: beyond twice the Jacobi radius of the bound mass
            new = bound & (rad > TIDAL_ESCAPE_RJ * jacobi_radius(float(np.sum(m[bound])),
                                                                  st.omega))
        else:
            e_esc, r_esc = escape_energies(found, np.flatnonzero(bound), e_star, rad, m, pos,
                                           vel, pot, v_cm, self.centre, st.eps2)
            new = bound & (e_esc > 0.0) & (r_esc > ESCAPE_RADIUS_RH * r_h)
        time_rel = t / self.unit_nb
        self.escaper_rows = escaper_rows(
            new, ids, m, pos, vel, pot, self.centre, v_cm, self.step, time_rel,
            star_fields={k: self.stars[k] for k in ("m_msun", "rad", "startype")
                         if k in self.stars})
        if np.any(new):
            self.escaped |= new
            bound = ~self.escaped
            order = np.argsort(rad[bound], kind="stable")
            rb, mb = rad[bound][order], m[bound][order]
            r_h = float(lagrange_radii(rb, mb, np.array([0.5]))[0])
        if np.any(self.escaped):
            k, w = energy_kernel(np.ascontiguousarray(pos[bound]),
                                 np.ascontiguousarray(vel[bound]), m[bound], st.eps2)
            k, w = float(k), float(w)
        else:
            k, w = k_all, w_all
        mcum = np.cumsum(mb)
        r_c, rho_c, n_core = core_properties(rb, mb, r_h)
        xd, r_c3, rho_c3 = density_centre(pos[bound], m[bound])
        d3 = np.sqrt(np.einsum("ic,ic->i", pos[bound] - xd, pos[bound] - xd))
        if np.any(new):  # (the bound stars changed; else the search above is theirs)
            found = find_binaries(pos[bound], vel[bound], m[bound], ids[bound], st.eps2)
        binaries = found
        # hard ones only: the soft bound neighbours of a dense core come and go (chance
        # pairs), and a Monte Carlo run's binaries are hard (three-body ones: hardness >=
        # binaries.eta_min); kT = 2 K / (3 N) of the bound stars
        k_t = 2.0 * k / (3.0 * max(int(rb.size), 1))
        binaries = binaries.select(binaries.E_b <= -HARD_KT * k_t)
        n_esc = int(np.count_nonzero(self.escaped))
        e_tide = tidal_energy(pos[bound], m[bound], st.omega)
        return {
            "step": self.step, "time": time_rel, "time_nb": t,
            "time_myr": t * self.units.time_nb_myr, "time_trh": time_rel / self.t_rh0,
            "dt": self.dt_out / self.unit_nb if self.step else 0.0,
            "N": int(rb.size), "M": float(mcum[-1]), "K": k, "W": w,
            "E_bound": k + w + e_tide, "E_escaped": e_tot - k - w - e_tide, "E_tot": e_tot,
            "E_tidal_field": e_tide,
            "r_tidal": jacobi_radius(float(mcum[-1]), st.omega) if st.omega else 0.0,
            "dE_rel": (e_tot - self.e0) / abs(self.e0),
            "M_escaped": float(np.sum(m[self.escaped])), "N_escaped": n_esc,
            "r_h": r_h, "r_c": float(r_c), "rho_c": float(rho_c), "N_core": float(n_core),
            "lagrange_radii": lagrange_radii(rb, mb, self.fractions, mcum),
            "m_mean_lagrange": lagrange_mean_masses(mb, self.fractions, mcum),
            "virial_ratio": 2.0 * k / abs(w), "r_max": float(rb[-1]),
            "centre": self.centre.copy(), "r_c_3d": r_c3, "rho_c_3d": rho_c3,
            "N_core_3d": int(np.count_nonzero(d3 <= r_c3)), "nb_steps": st.n_steps,
            "wall_s": self.wall, "nb_pairs_formed": st.n_pair_formed,
            "nb_pairs_resolved": st.n_pair_resolved, "nb_pairs": st.n_pairs_now,
            "nb_pair_kicks": st.n_pair_kicks,
            **binary_columns(binaries, pos[bound], float(r_c), self.centre),
        }

    def attrs(self) -> dict:
        from cmc import __version__
        from cmc.diagnostics import DIAG_UNITS

        return {"mode": "nbody",
                "integrator": f"hermite{self.nb.order} block steps (physics.nbody)",
                "order": self.nb.order, "eta": self.nb.eta, "eps": math.sqrt(self.nb.eps2),
                "dt_out": self.dt_out, "pair_dt": self.nb.pair_dt,
                "pair_gamma": self.nb.pair_gamma, "eta_close": self.nb.eta_close,
                "t_end_nb": self.t_end, "lagrange_fractions": self.fractions,
                "stop_reason": "", "t_rh0": self.t_rh0, "t_rh0_nb": self.t_rh0_nb,
                "n0": self.n0, "e0": self.e0, "m0": float(np.sum(self.nb.star_mass)),
                "time_unit": DIAG_UNITS["time"], "tidal_mode": self.cfg.tidal.mode,
                "escape_radius_rh": ESCAPE_RADIUS_RH, "cmc_version": __version__,
                "config": self.cfg.to_ini(), "mpi_size": 1, **self.units.attrs()}

    # ------------------------------------------------------------------ the run
    def _open_writer(self):
        """diagnostics.h5: a new file with the row of t = 0, or (a restart) the rows up to
        the checkpoint's output rewritten atomically (later rows dropped)."""
        from cmc import io as cio
        from cmc.diagnostics import DIAG_MEANINGS, DIAG_UNITS

        path = self.outdir / "diagnostics.h5"
        if self.step == 0:
            d = self.diagnostics()
            history = {k: [v] for k, v in d.items()}
        else:
            data, _ = cio.read_diagnostics(path, max_step=self.step)
            rows = int(data["step"].size) if "step" in data else 0
            if rows != self.step + 1 or int(data["step"][-1]) != self.step:
                raise InputError(f"{path} holds {rows} rows up to the checkpoint's output "
                                 f"{self.step}, not {self.step + 1}: it does not belong to "
                                 f"{self.outdir / CHECKPOINT}")
            history = data
            for name in ("nb_pairs_formed", "nb_pairs_resolved", "nb_pairs", "nb_pair_kicks"):
                # a run begun before close pairs were treated had none
                history.setdefault(name, np.zeros(rows, dtype=np.int64))
            for name in ("r_tidal", "E_tidal_field"):  # (and was isolated)
                history.setdefault(name, np.zeros(rows))
            for name in ("N_binaries", "binary_fraction", "binary_fraction_core", "E_binding"):
                # a run begun before the binaries were counted: not known for its rows
                history.setdefault(name, np.full(rows, np.nan))
            d = {k: v[-1] for k, v in data.items()}
        writer = cio.DiagnosticsWriter(path, self.attrs(), {**DIAG_UNITS, **NBODY_UNITS},
                                       {**DIAG_MEANINGS, **NBODY_MEANINGS}, history)
        return writer, d

    def run(self) -> str:
        """Evolve to ``t_end``, a row per output; returns the stop reason (``max_time``,
        ``energy_error``, ``close_pair``, ``signal``, ``wall_clock``).  Continues from
        ``self.step`` (a restart, :func:`resume`)."""
        from cmc.nbody_outputs import open_escapers
        from physics.nbody import evolve

        out = self.cfg.output
        writer = escapers = None
        if self.outdir is not None and self.rank0:
            writer, d = self._open_writer()
            escapers = open_escapers(self.outdir / "escapers.h5",
                                     {"mode": "nbody", "n0": self.n0, **self.units.attrs()},
                                     self.step)
            if self.step == 0:  # (a restart's rows to its checkpoint are in the file)
                escapers.append(self.escaper_rows)
        elif self.outdir is None or self.step == 0:
            d = self.diagnostics()  # (as rank 0's writer does: the escapers found go on)
        else:  # a restart's other ranks: the row is rank 0's, read from its file
            d = None
        if d is not None:
            self._progress(d)
        n_out = math.ceil(self.t_end / self.dt_out - 1e-12)
        per_line = max(1, round(1.0 / self.dt_out))
        reason = ""
        start = last_ck = time.monotonic()
        max_wall = 3600.0 * self.cfg.run.max_wall_hours
        from cmc.runloop import install_signal_handlers

        old = install_signal_handlers(self)  # (sets self.signal_received)
        try:
            if writer is not None and self.step == 0:
                self.write_checkpoint()
            for k in range(self.step + 1, n_out + 1):
                t = min(k * self.dt_out, self.t_end)
                w0 = time.perf_counter()
                try:
                    evolve(self.nb, t)
                except FloatingPointError as exc:
                    log.error("t = %.6g t_NB: %s", self.nb.time, exc)
                    reason = "close_pair"
                    break
                finally:
                    self.wall += time.perf_counter() - w0
                self.step = k
                d = self.diagnostics()
                if writer is not None:
                    writer.append({name: [v] for name, v in d.items()})
                    escapers.append(self.escaper_rows)
                if k % per_line == 0 or k == n_out:
                    self._progress(d)
                if abs(d["dE_rel"]) > self.cfg.run.energy_error_max:
                    log.error("|dE/E0| = %.3g exceeds run.energy_error_max = %g",
                              abs(d["dE_rel"]), self.cfg.run.energy_error_max)
                    reason = "energy_error"
                    break
                stop = (self.signal_received, 0.0 < max_wall < time.monotonic() - start)
                if self.comm.Get_size() > 1:  # rank 0's clock and signals decide for all
                    stop = self.comm.bcast(stop, root=0)
                if stop[0]:
                    log.warning("signal %d: stopping at t = %.6g t_NB with a checkpoint",
                                stop[0], self.nb.time)
                    reason = "signal"
                    break
                if stop[1]:
                    reason = "wall_clock"
                    break
                if writer is not None and k < n_out and (
                        k % out.checkpoint_every == 0 or 0.0 < 60.0 * out.checkpoint_minutes
                        < time.monotonic() - last_ck):
                    self.write_checkpoint()
                    last_ck = time.monotonic()
            else:
                reason = "max_time"
            if writer is not None and reason not in ("close_pair", "energy_error"):
                self.write_checkpoint()  # the end, or a clean stop
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)
            if writer is not None:  # (an exception or Ctrl-C: "interrupted")
                writer.close({"stop_reason": reason or "interrupted"})
                escapers.close()
        st = self.nb
        if self.wall > 0.0:
            log.info("timing: %.3f t_NB in %.2f s (%.3g s per N-body time unit), %d particle "
                     "steps (%.0f per star per unit), %.2f ns per pair", st.time, self.wall,
                     self.wall / max(st.time, 1e-300), st.n_steps,
                     st.n_steps / self.n0 / max(st.time, 1e-300),
                     1e9 * self.wall / max(st.n_pairs, 1))
        return reason

    # ------------------------------------------------------------------ checkpoints
    def write_checkpoint(self) -> None:
        """``OUTDIR/checkpoint.h5`` (:func:`cmc.nbody_checkpoint.write_checkpoint`)."""
        write_checkpoint(self)

    def restore(self, ck: dict) -> None:
        """Take the integrator and run state of a checkpoint (:func:`read_checkpoint`)."""
        restore(self, ck)

    def _progress(self, d: dict) -> None:
        log.info("output %d t=%.4f t_rh0 (%.4g t_NB, %.4g Myr) N=%d r_c=%.4g r_h=%.4g "
                 "N_core=%.1f r_c_3d=%.4g dE/E0=%.2e steps=%d pairs=%d", d["step"],
                 d["time_trh"], d["time_nb"], d["time_myr"], d["N"], d["r_c"], d["r_h"],
                 d["N_core"], d["r_c_3d"], d["dE_rel"], d["nb_steps"], d["nb_pairs"])


def use_forces(run: NBodyRun, backend: str | None) -> str:
    """Compute ``run``'s block forces on ``backend`` (``cpu``, ``gpu``, ``gpu-sim``;
    :mod:`physics.nbody_gpu`); returns a one-line description.  The GPU back ends take one
    process (``InputError`` under MPI or when the device is missing)."""
    if backend in (None, "cpu"):
        return "cpu (numba)"
    from physics.nbody_gpu import DeviceForces
    from physics.orbits_gpu import BackendUnavailable

    if run.comm.Get_size() > 1:
        raise InputError(f"--forces {backend}: one process (the GPU takes the whole block); "
                         "MPI splits the block over CPU ranks")
    try:
        run.nb.force_map = DeviceForces(backend)
    except BackendUnavailable as exc:
        raise InputError(f"--forces {backend}: {exc}") from None
    return f"{backend} ({run.nb.force_map.device})"


def _check_pair_options(pair_gamma: float | None, pair_dt: float | None,
                        dt_out: float) -> None:
    """``--pair-gamma`` (>= 0, finite; 0: off) and ``--pair-dt`` (a power of two, at most
    ``--dt-out`` and at least the integrator's dt_min): one-line InputErrors."""
    if pair_gamma is not None and not (pair_gamma >= 0.0 and math.isfinite(pair_gamma)):
        raise InputError(f"--pair-gamma {pair_gamma!r}: must be >= 0 (0 switches close pairs "
                         "off)")
    if pair_dt is not None and not (
            pair_dt > 0.0 and math.isfinite(pair_dt) and math.frexp(pair_dt)[0] == 0.5
            and 2.0 ** -40 <= pair_dt <= dt_out):
        raise InputError(f"--pair-dt {pair_dt!r}: must be a power of two between 2^-40 and "
                         f"--dt-out ({dt_out:g})")


def _check_eta_close(eta_close: float, eta: float) -> None:
    """``--eta-close``: in [0, eta] (0: ``eta`` in close encounters too)."""
    if not 0.0 <= eta_close <= eta:
        raise InputError(f"--eta-close {eta_close!r}: must lie between 0 (off: eta) and "
                         f"--eta ({eta:g})")


def resume(outdir: Path, *, t_end: float | None = None, order: int | None = None,
           eta: float | None = None, dt_out: float | None = None,
           pair_gamma: float | None = None, pair_dt: float | None = None,
           eta_close: float | None = None, comm=None) -> NBodyRun:
    """The run of ``OUTDIR/checkpoint.h5`` ready to continue (``cmc nbody --restart``): to
    its own ``t_end``, or to ``t_end`` when given (later than the checkpoint).  ``order``,
    ``eta``, ``dt_out``, ``pair_dt`` define the run: given, they must be the checkpoint's.
    ``pair_gamma`` and ``eta_close``, numerical settings of close encounters, may change: the
    run goes on with the new value from the checkpoint on (logged, and the attribute of the
    files); a checkpoint from before ``eta_close`` continues with 0 (``eta`` throughout, as
    it ran)."""
    from cmc.config import load_config

    ck = read_checkpoint(outdir / CHECKPOINT)
    nb, run = ck["nbody_attrs"], ck["run_attrs"]
    from physics.nbody_pairs import PAIR_GAMMA, default_pair_dt

    nb.setdefault("pair_gamma", PAIR_GAMMA)  # (a checkpoint from before close pairs)
    nb.setdefault("pair_dt", default_pair_dt(nb["dt_max"]))
    nb.setdefault("eta_close", 0.0)
    for opt, given, have in (("--order", order, nb["order"]), ("--eta", eta, nb["eta"]),
                             ("--dt-out", dt_out, run["dt_out"]),
                             ("--pair-dt", pair_dt, nb["pair_dt"])):
        if given is not None and given != have:
            raise InputError(f"{opt} {given:g}: the run in {outdir} has {have:g}; a restart "
                             "continues it as it is (start a new run to change it)")
    cfg = load_config(text=ck["config"])
    self = NBodyRun(cfg, None, t_end=float(run["t_end"]), dt_out=float(run["dt_out"]),
                    eta=float(nb["eta"]), eps=math.sqrt(nb["eps2"]), order=int(nb["order"]),
                    pair_gamma=float(nb["pair_gamma"]), pair_dt=float(nb["pair_dt"]),
                    eta_close=float(nb["eta_close"]), comm=comm)
    self.restore(ck)
    if pair_gamma is not None and pair_gamma != self.nb.pair_gamma:
        _check_pair_options(pair_gamma, None, self.dt_out)
        log.warning("--pair-gamma %g: the close pairs' threshold changes from %g at t = %.6g "
                    "t_NB", pair_gamma, self.nb.pair_gamma, self.nb.time)
        self.nb.pair_gamma = float(pair_gamma)
    if eta_close is not None and eta_close != self.nb.eta_close:
        _check_eta_close(eta_close, self.nb.eta)
        log.warning("--eta-close %g: the close encounters' accuracy parameter changes from %g "
                    "at t = %.6g t_NB", eta_close, self.nb.eta_close, self.nb.time)
        self.nb.eta_close = float(eta_close)
    if t_end is not None:
        if not (math.isfinite(t_end) and t_end > self.nb.time):
            raise InputError(f"--t-end {t_end:g}: the checkpoint in {outdir} is at t = "
                             f"{self.nb.time:.6g} N-body units; give a later end")
        check_size(self.n0, t_end, "the model's N")
        self.t_end = float(t_end)
    elif self.nb.time >= self.t_end:
        raise InputError(f"the run in {outdir} is finished (t = {self.nb.time:.6g} = its "
                         "t_end): give --t-end T to continue it further")
    return self
