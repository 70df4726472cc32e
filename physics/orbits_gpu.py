"""The orbit kernel on a GPU: the CPU kernel's own source compiled for CUDA (``numba.cuda``).

:func:`physics.orbits.new_orbits_rows` runs :func:`physics.orbits._orbit_block` once per
20-star block on the CPU cores.  Here the *same* Python functions -- ``_orbit_block`` and
everything it calls, down to :func:`parallel.rng.taus_uniform` -- are compiled a second time
with ``numba.cuda.jit(device=True)`` (:func:`device_functions`) and launched with one GPU
thread per block: N/20 threads, well above the 6000-8000 at which the CMC paper's GPU kernel
saturated (appendix "GPU acceleration of the orbit computation").  Each thread draws from its
block's lfsr113 sub-stream in star order, exactly as the CPU thread does, so a GPU run can be
compared star by star with a CPU run and with the MPI emulation.

Three back ends (``run.orbit_backend``):

``cpu``
    :func:`physics.orbits.new_orbits_rows` (numba, all cores).
``gpu``
    CuPy device arrays (the optional ``gpu`` extra) and the numba.cuda kernel.  Per step the
    replicated radii, potential and enclosed mass (with the search levels and radius lookup
    table made from them on the host, as the CPU kernel makes them) go to the device packed
    into one float64 and one int64 buffer, the local masses and velocities into one more; the
    per-star results come back in one float64 buffer.
``gpu-sim``
    The same kernel run by numba's CUDA simulator on the CPU (NumPy arrays, Python threads):
    slow, for tests and for checking the GPU kernel on a machine without a GPU.  The simulator
    needs ``NUMBA_ENABLE_CUDASIM=1`` before ``numba.cuda`` is first imported; a process can
    therefore use ``gpu`` or ``gpu-sim``, not both.

Agreement with the CPU kernel: the simulator evaluates every operation in IEEE double
precision with one rounding each, like the CPU kernel (compiled without fast-math, so without
fused multiply-adds), so its results are bit-identical (tested).  On a device, NVVM contracts
``a * b + c`` into fused multiply-adds (one rounding instead of two); division and square root
stay correctly rounded (no ``fastmath``) and no other libdevice function is called, so FMA
contraction is the only source of differences.  They are a few ulps per operation, amplified
where a difference of nearly equal numbers is taken (the turning-point discriminant): use
:func:`compare_orbits` with a tolerance in ulps, and expect identical accept/reject decisions
(the trial counts) except where a comparison is decided within those few ulps.

Nothing else imports ``cupy`` or ``numba.cuda``: :func:`check_backend` tells, in one line,
what a back end lacks.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
import types
from dataclasses import dataclass, field

import numpy as np

from physics.orbits import ORBIT_REMOVED, search_levels
from physics.potential import radius_lookup_table

log = logging.getLogger("cmc.orbits_gpu")

#: Back ends of ``run.orbit_backend``.
BACKENDS = ("cpu", "gpu", "gpu-sim")
#: GPU threads (one per 20-star block) per CUDA thread block.
THREADS_PER_BLOCK = 128
#: Functions compiled for the device, by module, callees first.  Every njit function that
#: :func:`physics.orbits._orbit_block` reaches must be here (checked by the tests).
DEVICE_FUNCTIONS = {
    "parallel.taus113": ("_step4", "taus_next_u32", "taus_uniform"),
    "physics.potential": ("_log_scale", "_count_at_most", "locate_radius"),
    "physics.orbits": ("_interval_coeffs", "_turning_predicate", "_count_true", "_bisect_true",
                       "_narrow", "_checked", "_level_search", "_turning_intervals",
                       "_turning_points_lv", "_interval_lut", "_sample_one", "_orbit_turning",
                       "_orbit_block"),
}


class BackendUnavailable(RuntimeError):
    """The chosen orbit back end cannot run here (the message says what is missing)."""


def _float_bits_host(x):
    """Python stand-in for :func:`physics.potential._float_bits` (an LLVM intrinsic, which the
    simulator cannot call): the IEEE-754 bit pattern of a float64 as an int64."""
    return np.float64(x).view(np.int64)


# ---------------------------------------------------------------------------
# importing numba.cuda in the right mode
# ---------------------------------------------------------------------------
def _numba_cuda(simulate: bool):
    """``numba.cuda``, imported as the simulator (``simulate``) or for a device.

    Raises
    ------
    BackendUnavailable
        If ``numba.cuda`` was already imported in the other mode in this process.
    """
    from numba.core import config

    if "numba.cuda" not in sys.modules:
        if simulate:
            # reload_config resets every setting from the environment: keep the kernel cache
            # folder keyed by the kernel sources (parallel/jit_cache.py), or later kernels
            # would be cached beside stale ones
            cache_dir = config.CACHE_DIR
            os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
            config.reload_config()
            config.CACHE_DIR = cache_dir
        elif config.ENABLE_CUDASIM:
            raise BackendUnavailable("NUMBA_ENABLE_CUDASIM=1 is set: numba.cuda would be the "
                                     "simulator (unset it, or use run.orbit_backend = gpu-sim)")
    from numba import cuda

    if bool(config.ENABLE_CUDASIM) != simulate:
        want = "the CUDA simulator" if simulate else "a CUDA device"
        raise BackendUnavailable(f"numba.cuda was already loaded without {want} in this "
                                 "process (gpu and gpu-sim cannot be mixed)")
    return cuda


def check_backend(name: str) -> str:
    """Check that orbit back end ``name`` can run here; return a one-line description.

    Raises
    ------
    BackendUnavailable
        With one line naming what is missing: CuPy, a CUDA device, or numba's CUDA target.
    ValueError
        For an unknown back end.
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown orbit back end {name!r}; one of {', '.join(BACKENDS)}")
    if name == "cpu":
        return "cpu (numba)"
    if name == "gpu-sim":
        _numba_cuda(True)
        return "gpu-sim (numba CUDA simulator on the CPU)"
    try:
        import cupy
    except ImportError as exc:
        raise BackendUnavailable("CuPy is not installed (pip install 'henon-cmc[gpu]'; the "
                                 f"import failed: {exc})") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError without a driver or a device
        raise BackendUnavailable(f"no CUDA device: {str(exc).splitlines()[0]}") from None
    if count < 1:
        raise BackendUnavailable("no CUDA device (CuPy sees 0 devices)")
    cuda = _numba_cuda(False)
    if not cuda.is_available():
        raise BackendUnavailable("numba's CUDA target finds no usable device or driver "
                                 "(install numba-cuda: pip install 'henon-cmc[gpu]')")
    return f"gpu ({device_name()})"


def device_count() -> int:
    """Number of CUDA devices CuPy sees (:func:`check_backend` first)."""
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def device_name() -> str:
    """Name of the current CUDA device (CuPy), or ``"CUDA simulator"``."""
    try:
        import cupy

        dev = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return "CUDA simulator"


# ---------------------------------------------------------------------------
# the same source compiled for the device
# ---------------------------------------------------------------------------
def device_functions(device_jit, overrides: dict | None = None,
                     functions: dict[str, tuple[str, ...]] | None = None
                     ) -> dict[str, object]:
    """Compile the functions of ``functions`` (default :data:`DEVICE_FUNCTIONS`) again with
    ``device_jit``.

    Each function's Python source (its numba dispatcher's ``py_func``) is rebound to a copy
    of its module's namespace in which every name of :data:`DEVICE_FUNCTIONS` refers to the
    new compilation, so ``_orbit_block`` calls the device ``taus_uniform`` and so on: the
    bytecode is the CPU kernel's, only the target differs.

    Parameters
    ----------
    device_jit : callable
        E.g. ``numba.cuda.jit(device=True)``, or ``numba.njit`` (a second CPU compilation).
    overrides : dict, optional
        Names to bind to something else in every namespace (the simulator's stand-in for the
        LLVM intrinsic ``_float_bits``).
    functions : dict, optional
        Module -> names, callees first (:mod:`physics.nbody_gpu` compiles its own).

    Returns
    -------
    dict
        Name -> compiled function.
    """
    functions = DEVICE_FUNCTIONS if functions is None else functions
    spaces = {mod: dict(vars(importlib.import_module(mod))) for mod in functions}
    compiled: dict[str, object] = dict(overrides or {})
    for mod, names in functions.items():
        module = importlib.import_module(mod)
        for name in names:
            py = getattr(module, name).py_func
            fn = types.FunctionType(py.__code__, spaces[mod], name, py.__defaults__,
                                    py.__closure__)
            fn.__qualname__ = py.__qualname__
            fn.__doc__ = py.__doc__
            compiled[name] = device_jit(fn)
    for ns in spaces.values():
        ns.update(compiled)
    return compiled


def _kernel_source(r_all, phi_all, mcum_all, lev_r, lev_phi, offsets, shifts, lut, lut_lo,
                   lut_inv, gidx, block_start, m, vr, vt, states, r_tidal, r_new, vr_new,
                   vt_new, phi_oo, phi_on, status, counters, r_apo):
    """One thread per 20-star block: :func:`physics.orbits._orbit_block` (rebound globals
    ``cuda`` and ``_orbit_block`` are set by :func:`build_kernel`)."""
    blk = cuda.grid(1)  # noqa: F821 - bound by build_kernel
    if blk < states.shape[0]:
        _orbit_block(blk, r_all, phi_all, mcum_all, lev_r, lev_phi, offsets,  # noqa: F821
                     shifts, lut, lut_lo, lut_inv, gidx, block_start, m, vr, vt, states,
                     r_tidal, r_new, vr_new, vt_new, phi_oo, phi_on, status, counters, r_apo)


def build_kernel(simulate: bool):
    """The CUDA kernel (device or simulator) running one 20-star block per thread."""
    cuda = _numba_cuda(simulate)
    overrides = {"_float_bits": _float_bits_host} if simulate else None
    dev = device_functions(cuda.jit(device=True), overrides)
    ns = {"cuda": cuda, "_orbit_block": dev["_orbit_block"]}
    fn = types.FunctionType(_kernel_source.__code__, ns, "orbit_kernel")
    return cuda.jit(fn)


# ---------------------------------------------------------------------------
# the back end
# ---------------------------------------------------------------------------
@dataclass
class TransferStats:
    """Accumulated host<->device traffic and kernel time of a :class:`DeviceOrbits`."""

    calls: int = 0
    bytes_to_device: int = 0
    bytes_to_host: int = 0
    s_prepare: float = 0.0
    s_to_device: float = 0.0
    s_kernel: float = 0.0
    s_to_host: float = 0.0
    extra: dict = field(default_factory=dict)


class DeviceOrbits:
    """:func:`physics.orbits.new_orbits_rows` on a GPU (``gpu``) or the CUDA simulator.

    Call it with the arguments of :func:`~physics.orbits.new_orbits_rows` (host NumPy
    arrays); outputs and stream states are written back into them.

    Parameters
    ----------
    backend : {"gpu", "gpu-sim"}
        Device through CuPy, or numba's simulator on NumPy arrays.
    device : int, optional
        CUDA device to use (``gpu``; default: the current one).
    """

    def __init__(self, backend: str = "gpu", device: int | None = None) -> None:
        if backend not in ("gpu", "gpu-sim"):
            raise ValueError(f"DeviceOrbits: backend must be gpu or gpu-sim, got {backend!r}")
        check_backend(backend)
        self.backend = backend
        self.simulate = backend == "gpu-sim"
        if self.simulate:
            self.xp = np
            self._to_host = np.asarray
            self._sync = _no_sync
        else:
            import cupy

            if device is not None:
                cupy.cuda.Device(device).use()
            self.xp = cupy
            self._to_host = cupy.asnumpy
            self._sync = cupy.cuda.runtime.deviceSynchronize
        self.kernel = build_kernel(self.simulate)
        self.device = "CUDA simulator" if self.simulate else device_name()
        self.stats = TransferStats()

    def __call__(self, r_all, phi_all, mcum_all, gidx, block_start, m, vr, vt, states,
                 r_tidal, r_new, vr_new, vt_new, phi_oo, phi_on, status, counters,
                 r_apo) -> None:
        xp = self.xp
        st = self.stats
        t0 = time.perf_counter()
        n_all = r_all.shape[0]
        n = m.shape[0]
        nb = states.shape[0]
        # the host side of the CPU kernel's set-up: the same njit functions, same results
        lut, lut_lo, lut_inv = radius_lookup_table(r_all, 4)
        lev_r, lev_phi, offsets, shifts = search_levels(r_all, phi_all)
        nl = lev_r.shape[0]
        # pack: one float64 buffer of replicated data, one int64 buffer, one of local data
        fbuf = np.concatenate((r_all, phi_all, mcum_all, lev_r, lev_phi))
        ibuf = np.concatenate((lut, offsets, shifts, gidx.astype(np.int64, copy=False),
                               block_start.astype(np.int64, copy=False)))
        lbuf = np.concatenate((m, vr, vt))
        sbuf = np.ascontiguousarray(states)
        t1 = time.perf_counter()
        d_f = xp.asarray(fbuf)
        d_i = xp.asarray(ibuf)
        d_l = xp.asarray(lbuf)
        d_s = xp.array(sbuf, copy=True)
        d_status = xp.array(np.ascontiguousarray(status, dtype=np.int8), copy=True)  # REMOVED in
        self._sync()
        t2 = time.perf_counter()
        a = 0
        views = []
        for size in (n_all, n_all, n_all, nl, nl):
            views.append(d_f[a:a + size])
            a += size
        d_r, d_phi, d_mcum, d_lev_r, d_lev_phi = views
        nlut = lut.shape[0]
        nlev = offsets.shape[0]
        d_lut = d_i[:nlut]
        d_off = d_i[nlut:nlut + nlev]
        d_sh = d_i[nlut + nlev:nlut + 2 * nlev]
        a = nlut + 2 * nlev
        d_gidx = d_i[a:a + n]
        d_bs = d_i[a + n:a + n + nb + 1]
        d_m, d_vr, d_vt = d_l[:n], d_l[n:2 * n], d_l[2 * n:]
        # outputs: rows r_new, vr_new, vt_new, phi_oo, phi_on, r_apo (escapers keep v)
        d_out = xp.empty((6, n))
        d_out[1] = d_vr
        d_out[2] = d_vt
        d_cnt = xp.zeros((nb, 2))
        grid = max(1, (nb + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK)
        if nb:
            self.kernel[grid, THREADS_PER_BLOCK](
                d_r, d_phi, d_mcum, d_lev_r, d_lev_phi, d_off, d_sh, d_lut, float(lut_lo),
                float(lut_inv), d_gidx, d_bs, d_m, d_vr, d_vt, d_s, float(r_tidal), d_out[0],
                d_out[1], d_out[2], d_out[3], d_out[4], d_status, d_cnt, d_out[5])
        self._sync()
        t3 = time.perf_counter()
        out = self._to_host(d_out)
        status[:] = self._to_host(d_status)
        counters[:] = self._to_host(d_cnt)
        states[:] = self._to_host(d_s)
        t4 = time.perf_counter()
        for dst, row in zip((r_new, vr_new, vt_new, phi_oo, phi_on, r_apo), out, strict=True):
            dst[:] = row
        st.calls += 1
        st.bytes_to_device += fbuf.nbytes + ibuf.nbytes + lbuf.nbytes + sbuf.nbytes + n
        st.bytes_to_host += out.nbytes + n + counters.nbytes + states.nbytes
        st.s_prepare += t1 - t0
        st.s_to_device += t2 - t1
        st.s_kernel += t3 - t2
        st.s_to_host += t4 - t3


def _no_sync() -> None:
    """Nothing to wait for (the simulator runs synchronously)."""


# ---------------------------------------------------------------------------
# comparing two back ends
# ---------------------------------------------------------------------------
def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Number of representable float64 values between ``a`` and ``b`` (elementwise; 0 where
    equal, including equal infinities; NaN against a number: the int64 maximum)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)

    def ordered(x):
        bits = x.view(np.int64)
        return np.where(bits < 0, np.int64(-(2**63)) - bits, bits)

    with np.errstate(over="ignore"):
        d = np.abs(ordered(a) - ordered(b))
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    d = np.where(same, 0, d)
    return np.where(np.isnan(a) != np.isnan(b), np.iinfo(np.int64).max, d)


#: Tolerance for a device run against the CPU kernel (:func:`compare_orbits`): FMA
#: contraction alone (the CPU kernel compiled with ``fastmath={"contract"}``, 3 x 1e5 Plummer
#: stars) moved new radii by at most 63 ulps and v_r^2 by at most 84 ulps of |phi|.
DEVICE_MAX_ULPS = 256


def compare_orbits(ref: dict[str, np.ndarray], other: dict[str, np.ndarray],
                   max_ulps: int = 0) -> dict[str, object]:
    """Star-by-star comparison of two runs of the orbit kernel on the same inputs.

    Radii, potentials and ``v_t`` are compared in ulps.  ``v_r`` is compared through
    ``v_r |v_r|`` in ulps of the star's ``|phi_s|`` at its new radius: near a turning point
    ``v_r = sqrt(Q)`` with ``Q`` a small difference of terms of order ``|phi|``, so a rounding
    difference of one ulp of ``|phi|`` changes ``v_r`` by an arbitrary number of its own ulps
    while the energy moves by one ulp.

    Parameters
    ----------
    ref, other : dict
        Outputs of each run (:func:`run_orbit_kernel`): ``r_new, vr_new, vt_new, phi_oo,
        phi_on, r_apo`` (float), ``status``, ``counters`` (per block: trials, violations)
        and ``states``.
    max_ulps : int
        Largest difference allowed (0: bit-identical); :data:`DEVICE_MAX_ULPS` for a device.

    Returns
    -------
    dict
        ``ok`` (bool), ``max_ulps`` per output, ``same_status``, ``same_trials`` (the
        accept/reject decisions), ``same_states`` (the streams advanced alike).
    """
    ulps = {k: int(ulp_distance(ref[k], other[k]).max(initial=0))
            for k in ("r_new", "vt_new", "phi_oo", "phi_on", "r_apo")}
    sq_ref = ref["vr_new"] * np.abs(ref["vr_new"])
    sq_other = other["vr_new"] * np.abs(other["vr_new"])
    with np.errstate(invalid="ignore"):
        d = np.abs(sq_ref - sq_other) / np.spacing(np.abs(ref["phi_on"]))
    d = np.where(sq_ref == sq_other, 0.0, d)
    ulps["vr_new"] = int(np.ceil(np.nan_to_num(d, nan=np.inf, posinf=2.0**62).max(initial=0)))
    same_status = bool(np.array_equal(ref["status"], other["status"]))
    same_trials = bool(np.array_equal(ref["counters"], other["counters"]))
    same_states = bool(np.array_equal(ref["states"], other["states"]))
    ok = same_status and same_trials and same_states and max(ulps.values()) <= max_ulps
    return {"ok": ok, "max_ulps": ulps, "same_status": same_status,
            "same_trials": same_trials, "same_states": same_states}


def run_orbit_kernel(fn, r_all, phi_all, mcum_all, gidx, block_start, m, vr, vt, states,
                     r_tidal: float = 0.0,
                     removed: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Run an orbit kernel (``new_orbits_rows`` or a :class:`DeviceOrbits`) on copies of the
    inputs; return its outputs by name (the dictionary :func:`compare_orbits` takes).
    ``removed`` (bool per row) presets ``ORBIT_REMOVED`` (those rows' outputs are undefined)."""
    n = m.shape[0]
    states = np.array(states, copy=True)
    status = np.zeros(n, dtype=np.int8)
    if removed is not None:
        status[removed] = ORBIT_REMOVED
    res = {"r_new": np.zeros(n), "vr_new": vr.copy(), "vt_new": vt.copy(),
           "phi_oo": np.zeros(n), "phi_on": np.zeros(n), "status": status,
           "counters": np.zeros((states.shape[0], 2)), "r_apo": np.zeros(n)}
    fn(r_all, phi_all, mcum_all, gidx, block_start, m, vr, vt, states, float(r_tidal),
       res["r_new"], res["vr_new"], res["vt_new"], res["phi_oo"], res["phi_on"], res["status"],
       res["counters"], res["r_apo"])
    res["states"] = states
    return res

