"""The N-body mode's outputs as the Monte Carlo run's (issue 50): binaries, their diagnostics
columns, and the escaper table.

Functions of arrays only (no run object), so that :mod:`cmc.nbody` can call them from
``NBodyRun.diagnostics()`` and ``NBodyRun.run()``:

* :func:`find_binaries`: the binaries of a set of stars by a neighbour search (mutual nearest
  neighbours, bound, and not tidally disrupted by their neighbours), as a :class:`Binaries`
  structure of arrays in a fixed order (the smaller member id);
* :func:`binary_columns`: the diagnostics columns ``N_binaries``, ``binary_fraction``,
  ``binary_fraction_core``, ``E_binding`` with the Monte Carlo run's names, units and meanings
  (:data:`cmc.diagnostics.DIAG_UNITS`, :data:`cmc.diagnostics.DIAG_MEANINGS`);
* :func:`density_centre`: the 3-D Casertano & Hut (1985) density centre, core radius and
  density;
* :func:`escaper_rows`: the rows of the escaper table (``escapers.h5``, columns
  :func:`cmc.fields.escaper_columns`) of the stars that escaped at an output;
* :func:`open_escapers`: ``escapers.h5`` through the project's appending writer
  (:class:`cmc.io.DiagnosticsWriter`, as :class:`cmc.output.escapers.EscaperTable` uses it):
  a new file, or on a restart the rows up to the checkpoint's output rewritten atomically and
  appended from there.

Units are N-body (Hénon) units: G = 1, M0 = 1, r_vir, v_NB; times of the escaper table in
t_rel = t_NB N0 / ln(gamma N0) as the Monte Carlo run's.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from cmc import io as cio
from cmc.errors import DamagedFileError, InputError
from cmc.fields import ESCAPE_UNBOUND, Field, escaper_columns
from physics.binaries import binding_energy

log = logging.getLogger("cmc.nbody")

#: Largest tidal perturbation of a binary at its apocentre (see :func:`find_binaries`).
GAMMA_MAX = 0.25
#: Nearest bodies to a pair's centre of mass whose tidal fields are compared (the members
#: excepted): the strongest of them is the perturbation.
N_PERTURBERS = 8

#: Neighbours of the 3-D Casertano-Hut density (the J of Casertano & Hut 1985).
CH_J = 6
#: Columns of :func:`binary_columns`, as in the Monte Carlo run's diagnostics.
BINARY_COLUMNS = ("N_binaries", "binary_fraction", "binary_fraction_core", "E_binding")


@dataclass(frozen=True)
class Binaries:
    """Binaries found by :func:`find_binaries`: a structure of arrays, one row per binary,
    sorted by ``id1``.

    Attributes
    ----------
    id1, id2 : numpy.ndarray of int64, shape (K,)
        Ids of the members, ``id1 < id2``.
    i1, i2 : numpy.ndarray of int64, shape (K,)
        Rows of the members in the arrays given to :func:`find_binaries` (these depend on
        the input order; everything else does not).
    m1, m2 : numpy.ndarray of float64, shape (K,)
        Masses of the members [M0].
    a : numpy.ndarray of float64, shape (K,)
        Semi-major axis of the Kepler orbit (unsoftened) [r_vir].
    e : numpy.ndarray of float64, shape (K,)
        Eccentricity.
    E_b : numpy.ndarray of float64, shape (K,)
        Internal energy ``-m1 m2 / (2 a)`` [E_NB] (negative).
    gamma : numpy.ndarray of float64, shape (K,)
        Tidal perturbation at the apocentre (the criterion of :func:`find_binaries`).
    x_cm, v_cm : numpy.ndarray of float64, shape (K, 3)
        Position [r_vir] and velocity [v_NB] of the centre of mass, in the frame of the input.
    """

    id1: np.ndarray
    id2: np.ndarray
    i1: np.ndarray
    i2: np.ndarray
    m1: np.ndarray
    m2: np.ndarray
    a: np.ndarray
    e: np.ndarray
    E_b: np.ndarray
    gamma: np.ndarray
    x_cm: np.ndarray
    v_cm: np.ndarray

    @property
    def size(self) -> int:
        """Number of binaries."""
        return int(self.id1.size)

    def as_dict(self) -> dict[str, np.ndarray]:
        """The arrays by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def select(self, keep: np.ndarray) -> Binaries:
        """The binaries where the boolean mask ``keep`` (shape (K,)) is True, in order."""
        return type(self)(**{name: arr[keep] for name, arr in self.as_dict().items()})

    @classmethod
    def empty(cls) -> Binaries:
        """No binaries."""
        i = np.zeros(0, dtype=np.int64)
        x = np.zeros(0)
        v3 = np.zeros((0, 3))
        return cls(id1=i, id2=i.copy(), i1=i.copy(), i2=i.copy(), m1=x, m2=x.copy(),
                   a=x.copy(), e=x.copy(), E_b=x.copy(), gamma=x.copy(), x_cm=v3,
                   v_cm=v3.copy())


def _others(tree, points: np.ndarray, k: int, exclude: tuple[np.ndarray, ...]
            ) -> np.ndarray:
    """The ``k`` nearest stars of each of ``points`` (indices, nearest first) with the
    indices of ``exclude`` (one array per column, shape (P,)) removed: shape (P, k - ...),
    padded with -1 where fewer were left."""
    _, idx = tree.query(points, k=k)
    idx = np.asarray(idx, dtype=np.int64).reshape(len(points), k)
    keep = np.ones(idx.shape, dtype=bool)
    for ex in exclude:
        keep &= idx != ex[:, None]
    # move the kept entries to the front of each row, in their order (nearest first)
    order = np.argsort(~keep, axis=1, kind="stable")
    out = np.take_along_axis(idx, order, axis=1)
    out[~np.take_along_axis(keep, order, axis=1)] = -1
    return out


def find_binaries(pos: np.ndarray, vel: np.ndarray, mass: np.ndarray, ids: np.ndarray,
                  eps2: float = 0.0, *, gamma_max: float = GAMMA_MAX,
                  n_perturbers: int = N_PERTURBERS) -> Binaries:
    """The binaries among stars: mutual nearest neighbours, bound, and tidally unperturbed.

    A pair (i, j) is a binary when all of these hold:

    1. i is j's nearest neighbour and j is i's (a k-d tree, :class:`scipy.spatial.cKDTree`);
       each star is in at most one pair, and a member of a tight binary is never paired with
       a third body;
    2. the pair is bound: ``|v_j - v_i|^2 / 2 - (m_i + m_j) / sqrt(r_ij^2 + eps2) < 0``
       (the integration's softened potential; since softening makes the potential
       shallower, such a pair is bound as a Kepler orbit too, and ``a``, ``e`` are the
       unsoftened Kepler elements);
    3. it is not torn by its neighbours: the tidal perturbation at its apocentre
       ``gamma = 2 Q^3 max_k(m_k / R_k^3) / (m_i + m_j) < gamma_max``, where
       ``Q = a (1 + e)``, and ``R_k`` are the distances from the pair's centre of mass to
       the ``n_perturbers + 2`` nearest stars other than the members (``2 m_k Q / R_k^3`` is
       the tidal acceleration across the pair at its widest, ``(m_i + m_j) / Q^2`` its own).

    Why this criterion: a pair of neighbours that is bound in the two-body sense is a
    binary only if a third body does not dominate its motion; the relative force
    perturbation gamma is the measure direct N-body codes use to decide whether a pair is
    treated as a (perturbed or unperturbed) two-body orbit (Aarseth 2003, *Gravitational
    N-Body Simulations*: KS regularisation of close pairs; :mod:`physics.nbody_pairs` uses
    it too), and a perturbation of order 1 means a resonant triple or a chance encounter,
    not a binary.  Evaluating it at the apocentre rather than at the
    current separation makes the verdict independent of the orbital phase (a binary does
    not leave the list near its apocentre and come back near its pericentre), and is the
    stricter of the two.  The strongest of the nearest few perturbers (rather than the
    nearest alone) keeps a heavy body a little farther away from being ignored.  The
    default 0.25 rejects a pair with an equal-mass third body (m_k = m_i = m_j) within
    4^(1/3) Q = 1.59 Q of its centre of mass.  Mutual nearest neighbours alone would count
    any bound pair inside a dense group; the tidal criterion alone would pair a heavy star
    with a member of a light tight binary orbiting it (in that hierarchical triple mutual
    neighbours give the inner binary, and the heavy star is its perturber).  Soft pairs
    (|E_b| below kT) that pass are counted: filter on ``E_b`` for hard binaries only.

    Parameters
    ----------
    pos, vel : numpy.ndarray, shape (N, 3)
        Positions [r_vir] and velocities [v_NB] (any one frame).
    mass : numpy.ndarray, shape (N,)
        Masses [M0].
    ids : numpy.ndarray of int64, shape (N,)
        Unique star ids: they fix the order of the result and of the members.
    eps2 : float
        Softening length squared [r_vir^2] of the integration (0: none).
    gamma_max : float
        Largest tidal perturbation at the apocentre of a binary.
    n_perturbers : int
        Stars (the members excepted) near the centre of mass whose tides are compared.

    Returns
    -------
    Binaries
        Sorted by ``id1`` (the smaller member id); ``m1``, ``i1`` are the member with
        ``id1``.  The same bits for any order of the input stars (up to ``i1``, ``i2``),
        except for exact ties of distances in the neighbour search.
    """
    from scipy.spatial import cKDTree

    pos = np.ascontiguousarray(pos, dtype=np.float64).reshape(-1, 3)
    vel = np.ascontiguousarray(vel, dtype=np.float64).reshape(-1, 3)
    mass = np.ascontiguousarray(mass, dtype=np.float64).reshape(-1)
    ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
    n = mass.size
    if not (pos.shape[0] == vel.shape[0] == ids.size == n):
        raise ValueError(f"find_binaries: pos {pos.shape}, vel {vel.shape}, mass {mass.shape}"
                         f", ids {ids.shape} do not describe the same stars")
    if n < 2:
        return Binaries.empty()
    tree = cKDTree(pos)
    rows = np.arange(n, dtype=np.int64)
    nearest = _others(tree, pos, min(n, 3), (rows,))[:, 0]
    mutual = (nearest >= 0) & (nearest[np.maximum(nearest, 0)] == rows) & (rows < nearest)
    i = rows[mutual]
    j = nearest[mutual]
    swap = ids[i] > ids[j]  # member 1: the smaller id
    i1 = np.where(swap, j, i)
    i2 = np.where(swap, i, j)
    m1, m2 = mass[i1], mass[i2]
    mt = m1 + m2
    dr = pos[i2] - pos[i1]
    dv = vel[i2] - vel[i1]
    r2 = np.einsum("kc,kc->k", dr, dr)
    v2 = np.einsum("kc,kc->k", dv, dv)
    r = np.sqrt(r2)
    bound = (r > 0.0) & (0.5 * v2 - mt / np.sqrt(r2 + eps2) < 0.0)
    i1, i2, m1, m2, mt, dr, dv, r, v2 = (x[bound] for x in (i1, i2, m1, m2, mt, dr, dv, r,
                                                          v2))
    e_spec = 0.5 * v2 - mt / r  # Kepler (unsoftened), < 0 since the softened one is
    a = -mt / (2.0 * e_spec)
    h = np.cross(dr, dv)
    e_vec = np.cross(dv, h) / mt[:, None] - dr / r[:, None]
    ecc = np.sqrt(np.einsum("kc,kc->k", e_vec, e_vec))
    x_cm = (m1[:, None] * pos[i1] + m2[:, None] * pos[i2]) / mt[:, None]
    v_cm = (m1[:, None] * vel[i1] + m2[:, None] * vel[i2]) / mt[:, None]
    gamma = np.zeros(i1.size)
    if n > 2 and i1.size:
        near = _others(tree, x_cm, min(n, n_perturbers + 2), (i1, i2))
        ok = near >= 0
        d = pos[np.maximum(near, 0)] - x_cm[:, None, :]
        big_r2 = np.einsum("kpc,kpc->kp", d, d)
        with np.errstate(divide="ignore"):
            tide = np.where(ok, mass[np.maximum(near, 0)] / (big_r2 * np.sqrt(big_r2)), 0.0)
        q = a * (1.0 + ecc)
        gamma = 2.0 * q ** 3 * tide.max(axis=1) / mt
    keep = gamma < gamma_max
    order = np.argsort(ids[i1[keep]], kind="stable")
    sel = np.flatnonzero(keep)[order]
    return Binaries(id1=ids[i1[sel]], id2=ids[i2[sel]], i1=i1[sel], i2=i2[sel],
                    m1=m1[sel], m2=m2[sel], a=a[sel], e=ecc[sel],
                    E_b=binding_energy(m1[sel], m2[sel], a[sel]), gamma=gamma[sel],
                    x_cm=x_cm[sel], v_cm=v_cm[sel])


def binary_columns(binaries: Binaries, pos: np.ndarray, r_c: float, centre: np.ndarray
                   ) -> dict[str, float]:
    """The Monte Carlo run's binary columns of the diagnostics row.

    A binary counts as one object, at its centre of mass, as in the Monte Carlo run (where
    it is one row of the star table): with N stars and K binaries there are N - K objects.

    Parameters
    ----------
    binaries : Binaries
        :func:`find_binaries` of the same stars as ``pos`` (its ``i1``, ``i2`` are rows of
        ``pos``).
    pos : numpy.ndarray, shape (N, 3)
        Positions of the stars counted (the bound stars) [r_vir].
    r_c : float
        Core radius [r_vir] (the diagnostics row's ``r_c``).
    centre : numpy.ndarray, shape (3,)
        Centre the radii are measured from [r_vir] (the row's ``centre``).

    Returns
    -------
    dict
        ``N_binaries`` [binaries] (a float, as the Monte Carlo run's column),
        ``binary_fraction`` = K / (N - K), ``binary_fraction_core`` = binaries / objects
        with ``|x - centre| <= r_c`` (a binary inside if its centre of mass is; 0 when no
        object is), ``E_binding`` [E_NB] = the sum of their ``E_b`` (negative; in the
        N-body mode it is part of K + W already: do not add it to ``E_tot``).
    """
    pos = np.asarray(pos, dtype=np.float64).reshape(-1, 3)
    centre = np.asarray(centre, dtype=np.float64).reshape(3)
    n = pos.shape[0]
    k = binaries.size
    if k and (max(int(binaries.i1.max()), int(binaries.i2.max())) >= n):
        raise ValueError("binary_columns: the binaries' rows are beyond pos: give the "
                         "positions find_binaries was given")
    d = pos - centre
    inside = np.einsum("ic,ic->i", d, d) <= r_c * r_c
    dc = binaries.x_cm - centre
    cm_inside = np.einsum("kc,kc->k", dc, dc) <= r_c * r_c
    n_core_objects = (int(np.count_nonzero(inside)) - int(np.count_nonzero(inside[binaries.i1]))
                      - int(np.count_nonzero(inside[binaries.i2]))
                      + int(np.count_nonzero(cm_inside)))
    n_bin_core = int(np.count_nonzero(cm_inside))
    return {"N_binaries": float(k), "binary_fraction": k / max(n - k, 1),
            "binary_fraction_core": n_bin_core / max(n_core_objects, 1),
            "E_binding": float(np.sum(binaries.E_b))}


def density_centre(pos: np.ndarray, mass: np.ndarray):
    """3-D Casertano & Hut (1985): each star's density from its :data:`CH_J`-th neighbour
    ``rho_i = 3 M_{J-1} / (4 pi d_J^3)`` (``M_{J-1}`` the mass of its J - 1 nearest
    neighbours), the density centre ``x_d = sum rho_i x_i / sum rho_i``, core radius
    ``sqrt(sum rho_i^2 |x_i - x_d|^2 / sum rho_i^2)``, core density
    ``sum rho_i^2 / sum rho_i``.  Returns ``(x_d, r_c, rho_c)``."""
    from scipy.spatial import cKDTree

    n = mass.size
    if n <= CH_J:
        return pos.mean(axis=0) if n else np.zeros(3), math.nan, math.nan
    d, idx = cKDTree(pos).query(pos, k=CH_J + 1)
    m_in = mass[idx[:, 1:CH_J]].sum(axis=1)
    rho = m_in / (4.0 / 3.0 * np.pi * d[:, CH_J] ** 3)
    xd = rho @ pos / rho.sum()
    rr = np.einsum("ic,ic->i", pos - xd, pos - xd)
    r_c = math.sqrt(float(rho ** 2 @ rr / np.sum(rho ** 2)))
    return xd, r_c, float(np.sum(rho ** 2) / np.sum(rho))


def escaper_fields() -> tuple[Field, ...]:
    """The columns of the N-body mode's escaper table: the Monte Carlo run's without
    binaries or stellar evolution (:func:`cmc.fields.escaper_columns`)."""
    return escaper_columns(False, False)


def escape_energies(binaries: Binaries, rows: np.ndarray, e_star: np.ndarray,
                    rad: np.ndarray, mass: np.ndarray, pos: np.ndarray, vel: np.ndarray,
                    pot: np.ndarray, v_frame: np.ndarray, centre: np.ndarray,
                    eps2: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Each star's energy and radius for the escape test, a binary's members taking their
    centre of mass's.

    A member of a hard binary is bound to its companion however fast the pair moves, so the
    test of single stars would never let a binary escape.  For each binary the energy per
    unit mass of its centre of mass is ``|v_cm - v_frame|^2 / 2 + (m1 phi1' + m2 phi2') /
    (m1 + m2)``, with ``phi'`` each member's potential less its companion's (the pair's own
    binding is not energy it can use to leave), and its radius ``|x_cm - centre|``.

    Parameters
    ----------
    binaries : Binaries
        :func:`find_binaries` of the stars ``rows`` (its ``i1``, ``i2`` index ``rows``).
    rows : numpy.ndarray of int64
        The stars given to :func:`find_binaries`, as rows of the arrays below.
    e_star, rad : numpy.ndarray, shape (N,)
        Each star's own energy per unit mass [v_NB^2] and radius [r_vir].
    mass, pos, vel, pot : numpy.ndarray
        Masses [M0] (N,), positions [r_vir] and velocities [v_NB] (N, 3), potentials of the
        other stars [v_NB^2] (N,), softened with ``eps2`` as the integration's.
    v_frame, centre : numpy.ndarray, shape (3,)
        The frame's velocity [v_NB] and the cluster's centre [r_vir].

    Returns
    -------
    e, r : numpy.ndarray, shape (N,)
        Copies of ``e_star``, ``rad`` with each binary's members given its values.
    """
    e = np.array(e_star, dtype=np.float64, copy=True)
    r = np.array(rad, dtype=np.float64, copy=True)
    if binaries.id1.size == 0:
        return e, r
    g1, g2 = rows[binaries.i1], rows[binaries.i2]
    m1, m2 = mass[g1], mass[g2]
    mt = m1 + m2
    d = pos[g2] - pos[g1]
    mutual = 1.0 / np.sqrt(np.einsum("ic,ic->i", d, d) + eps2)
    phi = (m1 * (pot[g1] + m2 * mutual) + m2 * (pot[g2] + m1 * mutual)) / mt
    v = (m1[:, None] * vel[g1] + m2[:, None] * vel[g2]) / mt[:, None] - v_frame
    x = (m1[:, None] * pos[g1] + m2[:, None] * pos[g2]) / mt[:, None] - centre
    e_cm = 0.5 * np.einsum("ic,ic->i", v, v) + phi
    r_cm = np.sqrt(np.einsum("ic,ic->i", x, x))
    e[g1] = e[g2] = e_cm
    r[g1] = r[g2] = r_cm
    return e, r


def escaper_rows(new_mask: np.ndarray, ids: np.ndarray, mass: np.ndarray, pos: np.ndarray,
                 vel: np.ndarray, pot: np.ndarray, centre: np.ndarray, v_cm: np.ndarray,
                 step: int, time_rel: float, *,
                 star_fields: dict[str, np.ndarray] | None = None,
                 kind: int = ESCAPE_UNBOUND, r_tidal: float = 0.0) -> dict[str, np.ndarray]:
    """Rows of the escaper table for the stars that escaped at this output.

    Parameters
    ----------
    new_mask : numpy.ndarray of bool, shape (N,)
        The stars that escaped at this output (not those of earlier outputs).
    ids : numpy.ndarray of int64, shape (N,)
        Star ids.
    mass : numpy.ndarray, shape (N,)
        Masses [M0].
    pos, vel : numpy.ndarray, shape (N, 3)
        Positions [r_vir] and velocities [v_NB] in the integration's frame.
    pot : numpy.ndarray, shape (N,)
        Potential of the other stars at each star [v_NB^2] (the integration's, softened).
    centre : numpy.ndarray, shape (3,)
        Centre of the cluster [r_vir] (the diagnostics row's ``centre``).
    v_cm : numpy.ndarray, shape (3,)
        Velocity of the centre of mass of all stars [v_NB]: the frame of ``vr``, ``vt``,
        ``E`` and ``J``.
    step : int
        Output number (the diagnostics row's ``step``).
    time_rel : float
        Time of the output [t_rel = t_NB N0 / ln(gamma N0)] (the row's ``time``).
    star_fields : dict, optional
        Other saved star columns per star, shape (N,) each (e.g. the initial ``m_msun``,
        ``rad``, ``startype``); absent ones take the Monte Carlo table's defaults
        (``binind`` -1, ``startype`` 1, ``rad`` 0, ``m_msun`` 0).
    kind : int
        How they left (:data:`cmc.fields.ESCAPE_UNBOUND`: the N-body mode has no tidal
        stripping yet).
    r_tidal : float
        Tidal radius [r_vir] (0: isolated).

    Returns
    -------
    dict of numpy.ndarray
        One array per column of :func:`escaper_fields`, in its dtype, sorted by id (the Monte
        Carlo table's order: kind, then id): ``r`` = ``|x - centre|``, ``vr`` the radial and
        ``vt`` >= 0 the transverse speed about the centre of ``v - v_cm``, ``E`` =
        ``|v - v_cm|^2 / 2 + pot``, ``J`` = ``|(x - centre) x (v - v_cm)|`` (= r vt).
    """
    mask = np.asarray(new_mask, dtype=bool).reshape(-1)
    sel = np.flatnonzero(mask)
    ids_sel = np.asarray(ids, dtype=np.int64).reshape(-1)[sel]
    sel = sel[np.argsort(ids_sel, kind="stable")]
    n = sel.size
    x = np.asarray(pos, dtype=np.float64).reshape(-1, 3)[sel] - np.asarray(centre, np.float64)
    v = np.asarray(vel, dtype=np.float64).reshape(-1, 3)[sel] - np.asarray(v_cm, np.float64)
    r = np.sqrt(np.einsum("ic,ic->i", x, x))
    jv = np.cross(x, v)
    j = np.sqrt(np.einsum("ic,ic->i", jv, jv))
    with np.errstate(divide="ignore", invalid="ignore"):
        vr = np.where(r > 0.0, np.einsum("ic,ic->i", x, v) / r, 0.0)
        vt = np.where(r > 0.0, j / r, np.sqrt(np.einsum("ic,ic->i", v, v)))
    computed = {
        "id": np.asarray(ids, dtype=np.int64).reshape(-1)[sel],
        "m": np.asarray(mass, dtype=np.float64).reshape(-1)[sel], "r": r, "vr": vr,
        "vt": vt, "E": 0.5 * np.einsum("ic,ic->i", v, v)
        + np.asarray(pot, dtype=np.float64).reshape(-1)[sel], "J": j,
        "step": np.full(n, step), "time": np.full(n, time_rel), "kind": np.full(n, kind),
        "r_tidal": np.full(n, r_tidal)}
    extra = star_fields or {}
    rows = {}
    for f in escaper_fields():
        if f.name in computed:
            rows[f.name] = np.asarray(computed[f.name], dtype=f.dtype)
        elif f.name in extra:
            rows[f.name] = np.asarray(extra[f.name]).reshape(-1)[sel].astype(f.dtype)
        else:
            rows[f.name] = np.full(n, f.default, dtype=f.dtype)
    return rows


def empty_escaper_rows() -> dict[str, np.ndarray]:
    """No rows: an empty array per column of :func:`escaper_fields`."""
    return {f.name: np.zeros(0, dtype=f.dtype) for f in escaper_fields()}


def concat_rows(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Rows of several :func:`escaper_rows` calls, in the given order, as one table."""
    if not parts:
        return empty_escaper_rows()
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def open_escapers(path: str | os.PathLike, attrs: dict, step: int) -> cio.DiagnosticsWriter:
    """``escapers.h5`` through :class:`cmc.io.DiagnosticsWriter` (appendable, SWMR; written
    first to a temporary file and renamed, :func:`cmc.io.atomic_h5`).

    At ``step`` 0 a new file with no rows; on a restart (``step`` > 0, the checkpoint's
    output) the rows of outputs up to ``step`` read back from the old file and written
    anew (later rows, of outputs the restart recomputes, dropped), as ``NBodyRun._open_writer``
    does with diagnostics.h5.  A missing old file starts an empty table (logged); a damaged
    one raises :class:`cmc.errors.DamagedFileError` (its rows are the only record of the
    escapers so far).  Append with ``writer.append(rows)``; close with ``writer.close()``.

    Parameters
    ----------
    path : path-like
        The file (``OUTDIR/escapers.h5``).
    attrs : dict
        File attributes (e.g. ``mode``, ``n0`` and the run's ``Units.attrs()``).
    step : int
        0 for a new run, else the checkpoint's output number.

    Returns
    -------
    cmc.io.DiagnosticsWriter
        Datasets named as the columns of :func:`escaper_fields`, with attributes ``unit``
        and ``meaning``.
    """
    path = Path(path)
    rows = empty_escaper_rows()
    if step > 0:
        try:
            old, _ = cio.read_diagnostics(path, max_step=step)
            n_old = old["step"].size if "step" in old else 0
            rows = {k: np.asarray(old[k], dtype=v.dtype) if k in old
                    else np.full(n_old, _default(k), dtype=v.dtype) for k, v in rows.items()}
        except InputError:
            log.info("no escaper table to continue in %s: it starts at output %d", path, step)
        except DamagedFileError as exc:
            raise DamagedFileError(f"{exc}, or move it aside to continue without the "
                                   f"escapers up to output {step}") from None
    cols = escaper_fields()
    return cio.DiagnosticsWriter(path, dict(attrs), {f.name: f.unit for f in cols},
                                 {f.name: f.meaning for f in cols}, rows)


def _default(name: str):
    return next(f.default for f in escaper_fields() if f.name == name)
