"""Where device-half kernels run: on a GPU through the runtime, or on the CPU simulator.

A backend allocates state arrays, copies them between host and "device", and launches a
gpu_rand kernel over one thread per stream. The CUDA backend uses `cupric.runtime`
memory and `@cupric.kernel`; the simulator backend uses NumPy arrays and
`cupric.simulator.launch`, so the device path is testable on any machine.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CudaBackend", "SimulatorBackend", "backend_for", "BLOCK"]

# Threads per block of every gpu_rand kernel: a multiple of the warp, small enough that
# the register-resident states of 512-bit generators still fit several blocks per SM.
BLOCK = 256


def _blocks(n_threads: int) -> int:
    return max(1, -(-n_threads // BLOCK))


class SimulatorBackend:
    """Device arrays are NumPy arrays; kernels run on `cupric.simulator`."""

    name = "simulator"

    def empty(self, shape, dtype) -> np.ndarray:
        return np.zeros(shape, dtype)

    def to_device(self, host: np.ndarray) -> np.ndarray:
        return np.array(host, copy=True, order="C")

    def to_host(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, copy=True, order="C")

    def flat(self, out) -> np.ndarray:
        if not isinstance(out, np.ndarray):
            raise TypeError("the simulator backend fills NumPy arrays")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out must be a writeable C-contiguous array")
        return out.reshape(-1)

    def launch(self, kind: str, algorithm, n_threads: int, args: tuple) -> None:
        from cupric.simulator import launch

        from .device import kernel_function

        _, kernel = kernel_function(kind, algorithm)
        launch(kernel, (_blocks(n_threads),), (BLOCK,), args)

    def __eq__(self, other) -> bool:
        return isinstance(other, SimulatorBackend)

    __hash__ = object.__hash__


class CudaBackend:
    """Device arrays in GPU memory (`cupric.runtime.memory`), kernels from `@cupric.kernel`.

    Parameters
    ----------
    stream : cupric.runtime.Stream, optional
        Where copies and launches are ordered; None is the runtime's default stream.
    """

    name = "cuda"

    def __init__(self, stream=None) -> None:
        self.stream = stream

    def empty(self, shape, dtype):
        from cupric.runtime.memory import empty

        return empty(shape, dtype, stream=self.stream)

    def to_device(self, host: np.ndarray):
        from cupric.runtime.memory import to_device

        return to_device(np.ascontiguousarray(host), stream=self.stream)

    def to_host(self, array) -> np.ndarray:
        return array.to_numpy(stream=self.stream)

    def flat(self, out):
        from cupric.runtime.intake import as_buffer  # any device array, one intake

        buf = as_buffer(out, self.stream, name="out", writable=True)
        if not buf.is_c_contiguous:
            raise ValueError("out must be C-contiguous")
        return buf.reshape(-1)

    def launch(self, kind: str, algorithm, n_threads: int, args: tuple) -> None:
        from .device import compiled_kernel  # the compiler loads on the first GPU fill

        kernel = compiled_kernel(kind, algorithm)
        kernel.launch(*args, grid=(_blocks(n_threads),), block=(BLOCK,), stream=self.stream)

    def __eq__(self, other) -> bool:
        return isinstance(other, CudaBackend) and other.stream is self.stream

    __hash__ = object.__hash__


def backend_for(out, backend=None):
    """The backend that fills `out`: None for a NumPy array (the host half does it), the
    given one, ``"simulator"``, ``"cuda"``, or by default `CudaBackend` for device arrays."""
    if backend is None:
        return None if isinstance(out, np.ndarray) else CudaBackend()
    if backend == "simulator":
        return SimulatorBackend()
    if backend == "cuda":
        return CudaBackend()
    if isinstance(backend, (SimulatorBackend, CudaBackend)):
        return backend
    raise ValueError(f"backend must be None, 'cuda', 'simulator' or a backend object, "
                     f"got {backend!r}")
