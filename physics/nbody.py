"""Direct N-body integration: 4th- or 6th-order Hermite with individual block time steps (library
core).

The first slices of issue 50 (a direct N-body mode next to the Monte Carlo method): the
integrator core as a library, with unperturbed close pairs, without command line or files.

Units: N-body (Hénon) units, G = 1; masses, positions and velocities are whatever the caller
gives (for a cluster: total mass 1, energy -1/4, so the crossing time is 2 sqrt(2)).  Plummer
softening ``eps`` (pair potential ``-m_i m_j / sqrt(r^2 + eps^2)``), default 0.

Method
------
* Forces: acceleration, jerk and potential by direct summation over all pairs
  (:func:`acc_jerk`; kernels and their numpy twins in :mod:`physics.nbody_kernels`), numba
  threads over the active particles, each particle's sum over ``j`` in index order, so the
  bits do not depend on the thread count.
* Integrator: the Hermite scheme of Makino & Aarseth (1992) -- predictor of every particle
  to the block time (positions to 3rd, velocities to 2nd order), forces on the block,
  corrector with the snap and crackle from the Hermite interpolation of the acceleration and
  jerk -- with individual block time steps (as in HiGPUs, Capuzzo-Dolcetta, Spera & Punzo
  2013): every step ``dt_max / 2^k``, every particle's time a multiple of its step, the
  particles due at the smallest ``t_i + dt_i`` advanced together.  Aarseth's criterion
  ``dt = sqrt(eta (|a||a2| + |j|^2) / (|j||a3| + |a2|^2))`` (``eta`` 0.02), the first step
  ``eta_s |a| / |j|`` (``eta_s`` 0.01).  A step may halve as often as needed, and doubles at
  most once per step, when twice the step divides the current time.
* 6th order (``order=6``): the scheme of Nitadori & Makino (2008, New Astron. 13, 498), as
  in HiGPUs.  The force kernel adds the snap, from the predicted accelerations of all
  particles (:func:`acc_jerk_snap`; at the start a second pass with the accelerations of the
  first); the predictor takes positions to 5th, velocities to 4th, accelerations to 3rd order
  with the last step's crackle; the corrector is their 6th-order one (x and v from the
  acceleration, jerk and snap at both ends); crackle, pop and the 5th derivative come from
  the quintic Hermite interpolant; the step is their generalised Aarseth criterion
  ``dt = eta ((|a||s| + |j|^2) / (|a3||a5| + |a4|^2))^(1/6)`` (``eta`` :data:`ETA6`), with
  the same first step and the same block scheme as the 4th order.
* Diagnostics: :func:`energy` (direct sum, numba, with a numpy twin), :func:`angular_momentum`,
  :func:`momentum`, all at the state's time (prediction with the last step's snap and crackle
  of the particles not at that time).

* Close pairs (:mod:`physics.nbody_pairs`, ``pair_gamma > 0``; off by default here, on in
  ``cmc nbody``): a bound pair whose steps fall to ``pair_dt`` (default ``dt_max / 2^12``) and
  whose tidal perturbation is below ``pair_gamma`` is integrated as its centre of mass, its
  relative orbit carried as a Kepler orbit under its perturbers' tide
  (:mod:`physics.nbody_perturbed`) until the perturbation exceeds twice ``pair_gamma``.  The
  arrays then hold only the integrated bodies (``ids``: their original indices);
  :func:`predicted`, :func:`energy`, :func:`momentum`, :func:`angular_momentum` give every
  star, the pairs resolved in a copy.
* Strong encounters (a pair perturbed above that, a triple): Hermite steps, with the
  accuracy parameter ``eta_close`` (``cmc nbody``: :data:`ETA_CLOSE`, half the 6th order's
  step) wherever the criterion asks for a step below ``pair_dt``: the error of a resonant
  encounter falls ~100-fold for ~2x the steps of its few bodies (tests/test_nbody_fewbody.py).
  Not regularised (KS or chain): a step below ``dt_min`` stops the integration.

(``cmc nbody``, its checkpoints and ``cmc compare`` are in :mod:`cmc.nbody`,
:mod:`cmc.compare`; MPI over i-particles in :mod:`parallel.nbody_forces`, the GPU kernel in
:mod:`physics.nbody_gpu`.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from physics.nbody_kernels import (
    acc_jerk_parallel,
    acc_jerk_reference,
    acc_jerk_serial,
    acc_jerk_snap_parallel,
    acc_jerk_snap_reference,
    acc_jerk_snap_serial,
    correct_block,
    correct_block6,
    energy_kernel,
    energy_reference,
    predict_all,
    predict_all6,
    predict_taylor,
    quantise_down,
)
from physics.nbody_pairs import default_pair_dt, expand, init_pairs, update_pairs
from physics.nbody_tidal import add_hill_field

__all__ = [
    "NBodyState",
    "acc_jerk",
    "acc_jerk_reference",
    "acc_jerk_snap",
    "acc_jerk_snap_reference",
    "angular_momentum",
    "energy",
    "energy_reference",
    "evolve",
    "momentum",
    "predicted",
]

#: Below this many pair interactions (block size x N) a force evaluation stays on one thread:
#: a parallel region costs ~0.1 ms with numba's workqueue layer.  The bits are the same.
PARALLEL_MIN_PAIRS = 32768
#: Default accuracy parameter of the 4th order: Aarseth's criterion, ``eta`` under the root.
ETA4 = 0.02
#: Default accuracy parameter of the 6th order (Nitadori & Makino's criterion, ``eta`` in front
#: of the 1/6 power; the sample run of Nitadori's public code uses 0.5): fewer steps than the
#: 4th order at its default and a smaller energy error; see :meth:`NBodyState.create`.
ETA6 = 0.4
#: Default ``eta`` by order.
ETA_DEFAULT = {4: ETA4, 6: ETA6}
#: ``cmc nbody``'s default accuracy parameter of the steps below ``pair_dt`` (the few bodies
#: of a strong encounter), by order: half the 6th order's step (error / 64) and half the 4th
#: order's (``eta`` under the root: / 4); see docs/validation_nbody.md, "Strong encounters".
ETA_CLOSE = {4: ETA4 / 4.0, 6: ETA6 / 2.0}
#: (no snap rows: the 4th order's force)
_NO_SNAP = np.zeros((0, 3))


def acc_jerk(pos, vel, mass, active=None, eps2=0.0):
    """Acceleration, jerk and potential of the ``active`` particles from all the others.

    Parameters
    ----------
    pos, vel : numpy.ndarray
        ``(N, 3)`` positions and velocities (float64, C order).
    mass : numpy.ndarray
        ``(N,)`` masses.
    active : numpy.ndarray of int, optional
        Indices of the particles whose field is wanted; ``None``: all.
    eps2 : float
        Square of the Plummer softening length.

    Returns
    -------
    acc, jerk : numpy.ndarray
        ``(nb, 3)``: ``sum_j m_j r_ij / (r_ij^2 + eps2)^(3/2)`` and its time derivative.
    pot : numpy.ndarray
        ``(nb,)``: ``-sum_j m_j / sqrt(r_ij^2 + eps2)``.
    """
    pos, vel, mass, active = _kernel_inputs(pos, vel, mass, active)
    kernel = acc_jerk_parallel if active.size * pos.shape[0] >= PARALLEL_MIN_PAIRS \
        else acc_jerk_serial
    return kernel(pos, vel, mass, active, float(eps2))


def _kernel_inputs(pos, vel, mass, active):
    """The force kernels' inputs as contiguous float64 (int64 ``active``; all if None)."""
    pos = np.ascontiguousarray(pos, dtype=np.float64)
    vel = np.ascontiguousarray(vel, dtype=np.float64)
    mass = np.ascontiguousarray(mass, dtype=np.float64)
    if active is None:
        return pos, vel, mass, np.arange(pos.shape[0], dtype=np.int64)
    return pos, vel, mass, np.ascontiguousarray(active, dtype=np.int64)


def acc_jerk_snap(pos, vel, acc, mass, active=None, eps2=0.0):
    """Acceleration, jerk, snap and potential of the ``active`` particles from all the others.

    As :func:`acc_jerk`, with ``acc`` ``(N, 3)`` the accelerations of all particles at the
    same time (the snap of a pair needs the relative acceleration).  Returns ``(acc, jerk,
    snap, pot)``; the acceleration, jerk and potential are the bits of :func:`acc_jerk`.
    """
    pos, vel, mass, active = _kernel_inputs(pos, vel, mass, active)
    acc = np.ascontiguousarray(acc, dtype=np.float64)
    kernel = acc_jerk_snap_parallel if active.size * pos.shape[0] >= PARALLEL_MIN_PAIRS \
        else acc_jerk_snap_serial
    return kernel(pos, vel, acc, mass, active, float(eps2))


def _check_power_of_two(name: str, x: float) -> float:
    x = float(x)
    if not (x > 0.0 and math.isfinite(x)) or math.frexp(x)[0] != 0.5:
        raise ValueError(f"{name} must be a positive power of two, got {x!r}")
    return x


@dataclass
class NBodyState:
    """A system under direct integration: structure of arrays and the integrator's settings.

    Build it with :meth:`create`.  Per particle: ``pos``, ``vel``, ``acc``, ``jerk`` (at the
    particle's own time ``t``), ``snap``, ``crackle`` (estimates from its last step, for the
    time step and for output; at order 6 the snap is computed and the crackle the estimate),
    its time ``t`` and step ``dt``.  ``order`` is the Hermite scheme's, 4 or 6.  ``time`` is
    the system's time (the last block time reached, or the ``t_end`` of :func:`evolve`).

    The per-body arrays hold the integrated bodies: the stars, except that each close pair
    is one body (its centre of mass, in its first member's place) while the pair's
    relative orbit is in ``pair_i``, ``pair_j``, ``pair_r``, ``pair_w``, ``pair_t0``
    (:mod:`physics.nbody_pairs`); ``ids`` maps bodies to stars, ``star_mass`` holds every
    star's mass.  Without pairs the layout is the stars' own.
    """

    mass: np.ndarray
    pos: np.ndarray
    vel: np.ndarray
    acc: np.ndarray
    jerk: np.ndarray
    snap: np.ndarray
    crackle: np.ndarray
    t: np.ndarray
    dt: np.ndarray
    time: float = 0.0
    eps2: float = 0.0
    eta: float = 0.02
    eta_s: float = 0.01
    #: accuracy parameter of the steps below ``pair_dt`` (close encounters); 0: ``eta``
    eta_close: float = 0.0
    dt_max: float = 0.125
    dt_min: float = 2.0 ** -40
    order: int = 4
    #: counters: block steps, particle steps, pair interactions
    n_blocks: int = 0
    n_steps: int = 0
    n_pairs: int = 0
    #: close pairs (:mod:`physics.nbody_pairs`): settings, counters, the original index of
    #: each integrated body, the masses of all stars and the pairs' structure of arrays
    pair_dt: float = 0.0
    pair_gamma: float = 0.0
    n_pair_formed: int = 0
    n_pair_resolved: int = 0
    #: tidal kicks given to the pairs' relative orbits (physics.nbody_perturbed)
    n_pair_kicks: int = 0
    #: orbital frequency of the galactic tide in Hill's approximation (physics.nbody_tidal);
    #: 0: isolated
    omega: float = 0.0
    ids: np.ndarray = field(default=None, repr=False)
    star_mass: np.ndarray = field(default=None, repr=False)
    pair_i: np.ndarray = field(default=None, repr=False)
    pair_j: np.ndarray = field(default=None, repr=False)
    pair_r: np.ndarray = field(default=None, repr=False)
    pair_w: np.ndarray = field(default=None, repr=False)
    pair_t0: np.ndarray = field(default=None, repr=False)
    _ppos: np.ndarray = field(default=None, repr=False)
    _pvel: np.ndarray = field(default=None, repr=False)
    _pacc: np.ndarray = field(default=None, repr=False)
    #: how a block's forces are computed: ``force_map(kernel, inputs, active, eps2)`` returns
    #: ``kernel(*inputs, active, eps2)``, the forces on the ``active`` bodies (None: so, here).
    #: Under MPI (:class:`parallel.nbody_forces.SplitForces`) every rank computes a share of
    #: the block and the shares are gathered: each body's force is the same sum whoever
    #: computes it, so the bits do not depend on the ranks.  Not part of the state (not
    #: checkpointed).
    force_map: Callable | None = field(default=None, repr=False, compare=False)

    @property
    def n(self) -> int:
        """Number of integrated bodies (stars, and one centre of mass per close pair)."""
        return self.mass.size

    @property
    def n_stars(self) -> int:
        """Number of stars (the particles given to :meth:`create`)."""
        return self.star_mass.size

    @property
    def n_pairs_now(self) -> int:
        """Number of close pairs now."""
        return int(self.pair_i.size)

    @classmethod
    def create(cls, mass, pos, vel, *, eps=0.0, eta=None, eta_s=0.01, dt_max=0.125,
               dt_min=2.0 ** -40, time=0.0, order=4, pair_dt=None,
               pair_gamma=0.0, omega=0.0, eta_close=0.0) -> NBodyState:
        """Initial state: forces of all particles at ``time``, first steps ``eta_s |a|/|j|``.

        Parameters
        ----------
        mass, pos, vel : array_like
            ``(N,)``, ``(N, 3)``, ``(N, 3)``; N >= 2, masses > 0.
        eps : float
            Plummer softening length (>= 0).
        eta, eta_s : float
            Accuracy parameters of the time-step criterion and of the first step.  ``eta``
            defaults to :data:`ETA4` (0.02, under the square root of Aarseth's criterion) at
            order 4 and :data:`ETA6` (0.4, the factor in front of Nitadori & Makino's 1/6
            power) at order 6: on a Plummer sphere the 6th order at 0.4 takes fewer particle
            steps than the 4th order at 0.02 (0.63x at N = 256 over 2 time units, 0.68x at
            N = 1000 over 1) for a smaller energy error (1.2e-8 against 3.6e-7, 9.5e-10
            against 8.0e-9); at 0.2 the errors are 8e-10 and 8e-12.
        dt_max, dt_min : float
            Largest and smallest step, powers of two; ``time`` must be a multiple of
            ``dt_max``.  A step below ``dt_min`` stops :func:`evolve` with an error (a close
            pair not taken out as an unperturbed pair: pairs off, perturbed, or a multiple).
        order : int
            4: Hermite of Makino & Aarseth (1992); 6: Nitadori & Makino (2008).
        pair_dt : float, optional
            Close pairs (:mod:`physics.nbody_pairs`): a body whose step falls to or below
            ``pair_dt`` (a power of two in ``[dt_min, dt_max]``; default ``dt_max / 2^12``,
            :data:`physics.nbody_pairs.PAIR_DT_LEVELS`) may become part of an unperturbed pair.
            When that default is below ``dt_min`` (fixed steps), there are no close pairs.
        pair_gamma : float
            Tidal perturbation below which a bound close pair is carried as a Kepler orbit
            under its perturbers' tide (:mod:`physics.nbody_perturbed`); 0 (the default
            here: the integrator as it was, bit for bit) switches the treatment off; ``cmc
            nbody`` uses :data:`physics.nbody_pairs.PAIR_GAMMA` (1e-4).
            No pair is formed with softening (``eps > 0``).
        omega : float
            Orbital frequency of a galactic tide (:mod:`physics.nbody_tidal`; the frame
            rotates with the orbit); 0: isolated.
        eta_close : float
            Accuracy parameter (as ``eta``) of the steps the criterion sets below
            ``pair_dt``: the bodies of a strong encounter or a close pair not carried as one.
            0 (the default here: the integrator as it was, bit for bit) means ``eta``; ``cmc
            nbody`` uses :data:`ETA_CLOSE`.
        """
        mass = np.array(mass, dtype=np.float64).reshape(-1)
        n = mass.size
        pos = np.array(pos, dtype=np.float64).reshape(n, 3)
        vel = np.array(vel, dtype=np.float64).reshape(n, 3)
        if n < 2 or not np.all(mass > 0.0):
            raise ValueError("need N >= 2 particles of positive mass")
        if not (np.all(np.isfinite(pos)) and np.all(np.isfinite(vel))):
            raise ValueError("positions and velocities must be finite")
        if order not in ETA_DEFAULT:
            raise ValueError(f"order must be 4 or 6, got {order!r}")
        eta = ETA_DEFAULT[order] if eta is None else eta
        if not (eps >= 0.0 and eta > 0.0 and eta_s > 0.0):
            raise ValueError("need eps >= 0, eta > 0, eta_s > 0")
        if not (0.0 <= eta_close <= eta):
            raise ValueError(f"eta_close must lie in [0, eta], got {eta_close!r}")
        dt_max = _check_power_of_two("dt_max", dt_max)
        dt_min = _check_power_of_two("dt_min", dt_min)
        if dt_min > dt_max:
            raise ValueError("dt_min > dt_max")
        if math.fmod(time, dt_max) != 0.0:
            raise ValueError("the starting time must be a multiple of dt_max")
        if pair_dt is None:
            pair_dt = default_pair_dt(dt_max)
            if pair_dt < dt_min:  # steps never get that small: no close pairs
                pair_dt, pair_gamma = dt_min, 0.0
        pair_dt = _check_power_of_two("pair_dt", pair_dt)
        if not dt_min <= pair_dt <= dt_max:
            raise ValueError(f"pair_dt = {pair_dt!r} must lie in [dt_min, dt_max]")
        if not (pair_gamma >= 0.0 and math.isfinite(pair_gamma)):
            raise ValueError(f"pair_gamma must be >= 0 and finite, got {pair_gamma!r}")
        if not (omega >= 0.0 and math.isfinite(omega)):
            raise ValueError(f"omega must be >= 0 and finite, got {omega!r}")
        acc, jerk, _ = acc_jerk(pos, vel, mass, None, eps * eps)
        snap = np.zeros((n, 3))
        if omega:
            add_hill_field(pos, vel, acc, jerk, _NO_SNAP, float(omega))
        if order == 6:  # a second pass with the accelerations of the first for the snap
            acc, jerk, snap, _ = acc_jerk_snap(pos, vel, acc, mass, None, eps * eps)
            if omega:
                add_hill_field(pos, vel, acc, jerk, snap, float(omega))
        amod = np.sqrt(np.einsum("ic,ic->i", acc, acc))
        jmod = np.sqrt(np.einsum("ic,ic->i", jerk, jerk))
        with np.errstate(divide="ignore", invalid="ignore"):
            want = np.where(jmod > 0.0, eta_s * amod / jmod, dt_max)
        # a particle with no net force (the centre of a symmetric system) has no time scale
        # of its own: it takes the shortest step of the others
        ok = want > 0.0
        want[~ok] = want[ok].min() if np.any(ok) else dt_max
        dt = np.array([quantise_down(w, dt_max) for w in want])  # once, at the start
        if np.any(dt < dt_min):
            raise ValueError("a first step falls below dt_min")
        state = cls(mass=mass, pos=pos, vel=vel, acc=acc, jerk=jerk, snap=snap,
                    crackle=np.zeros((n, 3)), t=np.full(n, float(time)), dt=dt,
                    time=float(time), eps2=float(eps) ** 2, eta=float(eta),
                    eta_s=float(eta_s), dt_max=dt_max, dt_min=dt_min, order=int(order),
                    pair_dt=pair_dt, pair_gamma=float(pair_gamma), omega=float(omega),
                    eta_close=float(eta_close))
        init_pairs(state)
        state.n_pairs = n * (n - 1) * (2 if order == 6 else 1)
        state._ppos = np.empty((n, 3))
        state._pvel = np.empty((n, 3))
        state._pacc = np.empty((n, 3))
        return state

    def levels(self) -> np.ndarray:
        """Each particle's step level ``k``, ``dt = dt_max / 2^k``."""
        return np.rint(np.log2(self.dt_max / self.dt)).astype(np.int64)


def _block_step(state: NBodyState, tnow: float, active: np.ndarray) -> None:
    """Advance the block ``active``, due at ``tnow`` (the smallest ``t_i + dt_i``)."""
    parallel = active.size * state.n >= PARALLEL_MIN_PAIRS
    forces = state.force_map or local_forces
    if state.order == 6:
        predict_all6(state.pos, state.vel, state.acc, state.jerk, state.snap, state.crackle,
                     state.t, tnow, state._ppos, state._pvel, state._pacc)
        kernel = acc_jerk_snap_parallel if parallel else acc_jerk_snap_serial
        anew, jnew, snew, _ = forces(kernel, (state._ppos, state._pvel, state._pacc,
                                              state.mass), active, state.eps2)
        if state.omega:
            add_hill_field(state._ppos[active], state._pvel[active], anew, jnew, snew,
                           state.omega)
        bad = correct_block6(active, tnow, anew, jnew, snew, state.pos, state.vel, state.acc,
                             state.jerk, state.snap, state.crackle, state.t, state.dt,
                             state.eta, state.dt_max, state.dt_min, state.eta_close,
                             state.pair_dt)
    else:
        predict_all(state.pos, state.vel, state.acc, state.jerk, state.t, tnow, state._ppos,
                    state._pvel)
        kernel = acc_jerk_parallel if parallel else acc_jerk_serial
        anew, jnew, _ = forces(kernel, (state._ppos, state._pvel, state.mass), active,
                               state.eps2)
        if state.omega:
            add_hill_field(state._ppos[active], state._pvel[active], anew, jnew, _NO_SNAP,
                           state.omega)
        bad = correct_block(active, tnow, state._ppos, state._pvel, anew, jnew, state.pos,
                            state.vel, state.acc, state.jerk, state.snap, state.crackle,
                            state.t, state.dt, state.eta, state.dt_max, state.dt_min,
                            state.eta_close, state.pair_dt)
    state.time = tnow
    state.n_blocks += 1
    state.n_steps += active.size
    state.n_pairs += active.size * (state.n - 1)
    pairs = state.pair_gamma > 0.0 and state.eps2 == 0.0
    if pairs and update_pairs(state, tnow, active, _fresh_forces(state)) and bad:
        # the bodies whose step fell below dt_min and were not taken into a pair
        left = state.t == tnow
        left &= state.dt <= state.dt_min
        if state.n_pairs_now:
            left[np.searchsorted(state.ids, state.pair_i)] = False
        bad = int(np.count_nonzero(left))
    if bad:
        raise FloatingPointError(
            f"{bad} particle(s) need a step below dt_min = {state.dt_min:g} at t = {tnow!r} "
            "(a close pair not taken out as an unperturbed pair: pairs off, perturbed, or a "
            "multiple)")


def local_forces(kernel, inputs: tuple, active: np.ndarray, eps2: float) -> tuple:
    """The forces of a block in this process: ``kernel(*inputs, active, eps2)`` (the
    default of :attr:`NBodyState.force_map`)."""
    return kernel(*inputs, active, eps2)


def _fresh_forces(state: NBodyState):
    """The force of the pairs' bodies (:func:`physics.nbody_pairs.update_pairs`): acceleration,
    jerk and (order 6: a second pass with the accelerations of the first) snap of ``rows``."""
    def force(pos, vel, acc, rows):
        a, j, _ = acc_jerk(pos, vel, state.mass, rows, state.eps2)
        if state.omega:
            add_hill_field(pos[rows], vel[rows], a, j, _NO_SNAP, state.omega)
        if state.order != 6:
            return a, j, np.zeros_like(a)
        acc = acc.copy()
        acc[rows] = a
        a, j, s, _ = acc_jerk_snap(pos, vel, acc, state.mass, rows, state.eps2)
        if state.omega:
            add_hill_field(pos[rows], vel[rows], a, j, s, state.omega)
        return a, j, s
    return force


def evolve(state: NBodyState, t_end: float) -> NBodyState:
    """Integrate ``state`` (in place) by block steps up to ``t_end``; returns it.

    The scheme is the state's ``order`` (4 or 6, chosen at :meth:`NBodyState.create`).

    Every block time up to ``t_end`` is done; then ``state.time = t_end``.  If ``t_end`` is a
    multiple of ``dt_max`` every particle is exactly at ``t_end`` (synchronised); otherwise
    the diagnostics predict the particles behind it with their snap and crackle
    (:func:`predicted`).  Deterministic: the same input gives the same bits, for any number
    of numba threads.
    """
    t_end = float(t_end)
    if t_end < state.time:
        raise ValueError("t_end is before the state's time")
    tnext = np.empty(state.n)
    while True:
        if tnext.size != state.n:  # a pair formed or resolved
            tnext = np.empty(state.n)
        np.add(state.t, state.dt, out=tnext)
        tnow = float(tnext.min())
        if tnow > t_end:
            break
        _block_step(state, tnow, np.flatnonzero(tnext == tnow))
    state.time = t_end
    return state


def predicted(state: NBodyState, time: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Positions and velocities of all particles at ``time`` (default ``state.time``):
    ``(N, 3)``, every star in the order given to :meth:`NBodyState.create`, the members of
    the close pairs from their centre of mass and relative Kepler orbit.

    Particles at that time are returned as they are; the others are extrapolated from their
    own time by the Taylor series with the last step's snap and crackle (5th order in
    position), which between a particle's block times is the Hermite interpolant of the 4th
    order, and the 6th order's predictor.
    """
    time = state.time if time is None else float(time)
    ppos = np.empty_like(state.pos)
    pvel = np.empty_like(state.vel)
    predict_taylor(state.pos, state.vel, state.acc, state.jerk, state.snap, state.crackle,
                   state.t, time, ppos, pvel)
    return expand(state, ppos, pvel, time)


def energy(state: NBodyState, time: float | None = None) -> tuple[float, float]:
    """Kinetic and potential energy ``(K, W)`` at ``time`` (default ``state.time``), by direct
    summation over the pairs with the state's softening."""
    pos, vel = predicted(state, time)
    k, w = energy_kernel(pos, vel, state.star_mass, state.eps2)
    return float(k), float(w)


def momentum(state: NBodyState, time: float | None = None) -> np.ndarray:
    """Total linear momentum at ``time`` (default ``state.time``)."""
    _, vel = predicted(state, time)
    return state.star_mass @ vel


def angular_momentum(state: NBodyState, time: float | None = None) -> np.ndarray:
    """Total angular momentum about the origin at ``time`` (default ``state.time``)."""
    pos, vel = predicted(state, time)
    return state.star_mass @ np.cross(pos, vel)
