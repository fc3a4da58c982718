"""The CPU executor: device memory is NumPy, kernels run in the SIMT interpreter on the bundle's IR.

It runs bundles of every target (the interpreter executes the target kernel IR, not the binary), so it
is the fallback where no GPU is present and the reference for atomic-order experiments.

Thread safety: one executor may serve several threads and several bundles at once. Every bundle loaded
stays loaded (Executor.load), and launches run one at a time (the interpreter and its atomic-order
generator hold state).
"""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from ..dtypes import BUFFER_STORAGE
from ..errors import RuntimeLaunchError
from .args import DeviceBuffer, KernelArg, TensorMapArg, strided_view
from .executor import Allocation, Executor, KernelSet


class CpuExecutor(Executor):
    name = "cpu"
    vendor = None

    def __init__(self, atomic_order: str = "sequential", seed: int = 0):
        # Imported lazily (here and in load), so that a broken interpreter only disables this executor.
        from .interp.interpreter import ATOMIC_ORDERS

        if atomic_order not in ATOMIC_ORDERS:
            raise RuntimeLaunchError(f"atomic_order must be one of {ATOMIC_ORDERS}, got {atomic_order!r}")
        super().__init__()
        self.atomic_order = atomic_order
        self.seed = seed
        self._lock = threading.Lock()   # one launch at a time, over every kernel set

    @classmethod
    def available(cls) -> tuple[bool, str]:
        try:
            from .interp import Interpreter  # noqa: F401
        except ImportError as exc:
            return False, f"the CPU interpreter cannot be imported: {exc}"
        return True, "the NumPy SIMT interpreter"

    def _load(self, bundle) -> "InterpretedKernels":
        from .interp import Interpreter

        interpreter = Interpreter(bundle.interp_ir, bundle.target.wave_size, atomic_order=self.atomic_order,
                                  seed=self.seed)
        return InterpretedKernels(interpreter, self._lock)

    def alloc(self, nbytes: int) -> Allocation:
        try:
            memory = np.zeros(nbytes, np.uint8)
        except MemoryError:
            raise RuntimeLaunchError(f"the CPU interpreter cannot allocate {nbytes} bytes ({nbytes / 2**30:.1f} GiB) "
                                     "of host memory for a buffer: use a smaller problem") from None
        return Allocation(memory.ctypes.data, nbytes, memory)

    def upload(self, allocation: Allocation, host: np.ndarray) -> None:
        allocation.native[:host.nbytes] = host.reshape(-1).view(np.uint8)

    def download(self, allocation: Allocation, host: np.ndarray) -> None:
        host.reshape(-1).view(np.uint8)[...] = allocation.native[:host.nbytes]

    def zero(self, allocation: Allocation, stream: int | None = None) -> None:
        allocation.native[...] = 0

    def synchronize(self) -> None:
        """The interpreter runs each launch to completion."""

    def free(self, allocation: Allocation) -> None:
        """NumPy memory goes with its last reference."""


class InterpretedKernels(KernelSet):
    """A bundle's kernels as the interpreter of its IR; `lock` serialises launches across kernel sets."""

    def __init__(self, interpreter, lock: threading.Lock):
        self._interpreter, self._lock = interpreter, lock

    def prepare(self, kernel: str, grid: Sequence[int], block: Sequence[int], args: Sequence[KernelArg],
                shared_bytes: int = 0, stream: int | None = None):
        if kernel not in self._interpreter.kernel_names():
            raise RuntimeLaunchError(f"the bundle has no kernel {kernel!r}")
        from .interp.hopper import TensorMap

        values = [device_view(arg) if isinstance(arg, DeviceBuffer) else
                  TensorMap(device_view(arg.buffer), arg.box, arg.swizzle, arg.buffer.dtype)
                  if isinstance(arg, TensorMapArg) else arg.value for arg in args]
        grid, block = tuple(grid), tuple(block)

        def run():
            with self._lock:
                self._interpreter.run_kernel(kernel, values, grid, block, shared_bytes)

        return run


def device_view(buf: DeviceBuffer) -> np.ndarray:
    """The NumPy view a kernel writes through: the buffer's logical tensor over its allocation."""
    return strided_view(buf.allocation.native.view(BUFFER_STORAGE[buf.dtype]), buf.shape, buf.strides)
