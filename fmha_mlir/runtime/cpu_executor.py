"""The CPU executor: device memory is NumPy, kernels run in the SIMT interpreter on the bundle's IR.

It runs bundles of every target (the interpreter executes the target kernel IR, not the binary), so it
is the fallback where no GPU is present and the reference for atomic-order experiments.

Thread safety: one executor may serve several threads and several bundles at once. Every bundle loaded
stays loaded (its interpreter found by kernel name: symbols are unique per spec and config), and
launches run one at a time (the interpreter and its atomic-order generator hold state).
"""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from ..dtypes import BUFFER_STORAGE
from ..errors import RuntimeLaunchError
from .args import DeviceBuffer, KernelArg, strided_view
from .executor import Allocation, Executor


class CpuExecutor(Executor):
    name = "cpu"
    vendor = None

    def __init__(self, atomic_order: str = "sequential", seed: int = 0):
        # Imported lazily (here and in load), so that a broken interpreter only disables this executor.
        from .interp.interpreter import ATOMIC_ORDERS

        if atomic_order not in ATOMIC_ORDERS:
            raise RuntimeLaunchError(f"atomic_order must be one of {ATOMIC_ORDERS}, got {atomic_order!r}")
        self.atomic_order = atomic_order
        self.seed = seed
        self._interpreters: dict[str, object] = {}   # kernel name -> the interpreter of its bundle's IR
        self._loaded: dict[str, object] = {}         # the bundle IR text -> its interpreter
        self._lock = threading.Lock()

    @classmethod
    def available(cls) -> tuple[bool, str]:
        try:
            from .interp import Interpreter  # noqa: F401
        except ImportError as exc:
            return False, f"the CPU interpreter cannot be imported: {exc}"
        return True, "the NumPy SIMT interpreter"

    def load(self, bundle) -> None:
        from .interp import Interpreter

        self.check_bundle(bundle)
        with self._lock:
            if bundle.interp_ir in self._loaded:
                return
            interpreter = Interpreter(bundle.interp_ir, bundle.target.wave_size, atomic_order=self.atomic_order,
                                      seed=self.seed)
            self._loaded[bundle.interp_ir] = interpreter
            self._interpreters.update(dict.fromkeys(interpreter.kernel_names(), interpreter))

    def alloc(self, nbytes: int) -> Allocation:
        memory = np.zeros(nbytes, np.uint8)
        return Allocation(memory.ctypes.data, nbytes, memory)

    def upload(self, allocation: Allocation, host: np.ndarray) -> None:
        allocation.native[:host.nbytes] = host.reshape(-1).view(np.uint8)

    def download(self, allocation: Allocation, host: np.ndarray) -> None:
        host.reshape(-1).view(np.uint8)[...] = allocation.native[:host.nbytes]

    def zero(self, allocation: Allocation) -> None:
        allocation.native[...] = 0

    def launch(self, kernel: str, grid: Sequence[int], block: Sequence[int], args: Sequence[KernelArg],
               shared_bytes: int = 0) -> None:
        interpreter = self._interpreters.get(kernel)
        if interpreter is None:
            raise RuntimeLaunchError(f"no loaded bundle has kernel {kernel!r}: call load(bundle) before launch")
        values = [device_view(arg) if isinstance(arg, DeviceBuffer) else arg.value for arg in args]
        with self._lock:
            interpreter.run_kernel(kernel, values, tuple(grid), tuple(block), shared_bytes)

    def synchronize(self) -> None:
        """The interpreter runs each launch to completion."""

    def free(self, allocation: Allocation) -> None:
        """NumPy memory goes with its last reference."""


def device_view(buf: DeviceBuffer) -> np.ndarray:
    """The NumPy view a kernel writes through: the buffer's logical tensor over its allocation."""
    return strided_view(buf.allocation.native.view(BUFFER_STORAGE[buf.dtype]), buf.shape, buf.strides)
