"""The direct N-body force on a GPU (issue 50, "Forces"): the CPU kernel's own per-particle
sums compiled for CUDA (``numba.cuda``), as :mod:`physics.orbits_gpu` does for the orbit kernel.

Back ends of ``cmc nbody --forces``:

``cpu``
    :mod:`physics.nbody_kernels` (numba threads over the active particles; MPI over them with
    :class:`parallel.nbody_forces.SplitForces`).
``gpu``
    :class:`DeviceForces` on a CUDA device: CuPy arrays (the ``gpu`` extra) and the kernel
    below.
``gpu-sim``
    The same kernel run by numba's CUDA simulator on the CPU: slow, for tests and for checking
    the kernel on a machine without a GPU (``NUMBA_ENABLE_CUDASIM`` is set before
    ``numba.cuda`` is first imported; a process uses ``gpu`` or ``gpu-sim``, not both).

The kernel: one GPU thread per active particle runs :func:`physics.nbody_kernels._acc_jerk_one`
(4th order) or :func:`~physics.nbody_kernels._acc_jerk_snap_one` (6th order), compiled again
with ``numba.cuda.jit(device=True)`` from the same Python source
(:func:`physics.orbits_gpu.device_functions`): the sum over the field particles ``j`` in index
order, the same formulas.  **Agreement**: the simulator evaluates every operation in IEEE
double precision with one rounding each, like the CPU kernel (no fast-math, no fused
multiply-adds), so its forces, and a whole integration with them, equal the CPU's bit for bit
(tests/test_nbody_gpu.py).  On a device NVVM contracts ``a * b + c`` into fused multiply-adds;
square roots and divisions stay correctly rounded, so the forces differ from the CPU's by a
few ulps per pair term (relative ~1e-15 of each sum), and a run on the device is reproducible
on the device (the same bits for the same input: no atomics, a fixed order) but not bit for
bit the CPU run.

Per block step the predicted positions and velocities (and at order 6 accelerations) of all
bodies, the masses and the active list go to the device (``7 N`` or ``10 N`` doubles), the
block's forces come back.  Sapporo2's ideas (Bedorf et al. 2015, seed 002) not taken here:
splitting the j-sum over several threads for small blocks (it changes the order of the sum, so
the device would no longer agree with the simulator and the CPU bit for bit), keeping the
predictor on the device, and double-single arithmetic (the H200's double-precision rate makes
it unnecessary at the N of this mode).  Not yet run on a device (no GPU was lent to the
session that wrote it): the bench's GPU rows and a device check remain to be done.
"""

from __future__ import annotations

import time
import types

import numpy as np

from physics.orbits_gpu import (
    BACKENDS,
    _no_sync,
    _numba_cuda,
    check_backend,
    device_functions,
    device_name,
)

__all__ = ["BACKENDS", "NBODY_DEVICE_FUNCTIONS", "THREADS_PER_BLOCK", "DeviceForces",
           "build_force_kernels"]

#: The CPU kernel's per-particle functions compiled for the device, callees first.
NBODY_DEVICE_FUNCTIONS = {
    "physics.nbody_kernels": ("_field_range", "_acc_jerk_one", "_field_range6",
                              "_acc_jerk_snap_one"),
}
#: GPU threads (one per active particle) per CUDA thread block.
THREADS_PER_BLOCK = 64


def _force4_source(pos, vel, mass, active, eps2, acc, jerk, pot):
    """One thread per active particle: :func:`physics.nbody_kernels._acc_jerk_one` (names
    bound by :func:`build_force_kernels`)."""
    k = cuda.grid(1)  # noqa: F821 - bound by build_force_kernels
    if k < active.shape[0]:
        _acc_jerk_one(active[k], pos, vel, mass, eps2, k, acc, jerk, pot)  # noqa: F821


def _force6_source(pos, vel, acc, mass, active, eps2, aout, jout, sout, pot):
    """One thread per active particle: :func:`physics.nbody_kernels._acc_jerk_snap_one`."""
    k = cuda.grid(1)  # noqa: F821 - bound by build_force_kernels
    if k < active.shape[0]:
        _acc_jerk_snap_one(active[k], pos, vel, acc, mass, eps2, k, aout, jout,  # noqa: F821
                           sout, pot)


def build_force_kernels(simulate: bool):
    """The CUDA kernels (device or simulator) of the 4th- and 6th-order force."""
    cuda = _numba_cuda(simulate)
    dev = device_functions(cuda.jit(device=True), None, NBODY_DEVICE_FUNCTIONS)
    ns = {"cuda": cuda, **dev}
    k4 = cuda.jit(types.FunctionType(_force4_source.__code__, ns, "nbody_force4"))
    k6 = cuda.jit(types.FunctionType(_force6_source.__code__, ns, "nbody_force6"))
    return k4, k6


class DeviceForces:
    """``force_map`` of :class:`physics.nbody.NBodyState` computing a block's forces on a GPU
    (``gpu``) or the CUDA simulator (``gpu-sim``).

    Called as the integrator calls its force map, ``(kernel, inputs, active, eps2)``; the CPU
    ``kernel`` is not used, the number of ``inputs`` tells the order (3: positions,
    velocities, masses; 4: with the accelerations).  Returns what that CPU kernel returns:
    ``(acc, jerk, pot)`` or ``(acc, jerk, snap, pot)``, host arrays.

    Attributes
    ----------
    calls, bytes_to_device, bytes_to_host : int
        Counters.
    seconds : float
        Wall time spent in calls (transfers and kernel).
    """

    def __init__(self, backend: str = "gpu", device: int | None = None) -> None:
        if backend not in ("gpu", "gpu-sim"):
            raise ValueError(f"DeviceForces: backend must be gpu or gpu-sim, got {backend!r}")
        self.description = check_backend(backend)
        self.backend = backend
        if backend == "gpu-sim":
            self.xp, self._to_host, self._sync = np, np.asarray, _no_sync
            self.device = "CUDA simulator"
        else:
            import cupy

            if device is not None:
                cupy.cuda.Device(device).use()
            self.xp, self._to_host = cupy, cupy.asnumpy
            self._sync = cupy.cuda.runtime.deviceSynchronize
            self.device = device_name()
        self.k4, self.k6 = build_force_kernels(backend == "gpu-sim")
        self.calls = 0
        self.bytes_to_device = 0
        self.bytes_to_host = 0
        self.seconds = 0.0

    def __call__(self, kernel, inputs: tuple, active: np.ndarray, eps2: float) -> tuple:
        t0 = time.perf_counter()
        xp = self.xp
        order6 = len(inputs) == 4
        host = [np.ascontiguousarray(a, dtype=np.float64) for a in inputs]
        act = np.ascontiguousarray(active, dtype=np.int64)
        d_in = [xp.asarray(a) for a in host]
        d_act = xp.asarray(act)
        nb = act.shape[0]
        outs = [xp.empty((nb, 3)) for _ in range(3 if order6 else 2)] + [xp.empty(nb)]
        if nb:
            grid = (nb + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
            fn = self.k6 if order6 else self.k4
            fn[grid, THREADS_PER_BLOCK](*d_in, d_act, float(eps2), *outs)
            self._sync()
        result = tuple(np.ascontiguousarray(self._to_host(o)) for o in outs)
        self.calls += 1
        self.bytes_to_device += sum(a.nbytes for a in host) + act.nbytes
        self.bytes_to_host += sum(o.nbytes for o in result)
        self.seconds += time.perf_counter() - t0
        return result
