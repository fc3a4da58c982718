"""The device interface the runner drives, and choosing an executor by name or automatically.

An executor owns device memory on one device and the kernel sets loaded onto it: `load(bundle)` loads
a bundle's binary once and returns the same KernelSet on every later call, so one executor serves any
number of bundles and threads at once. The GPU executors import their vendor bindings (cuda-bindings,
hip-python) only when used, so this package imports with NumPy alone.
"""
from __future__ import annotations

import contextlib
import importlib
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Sequence

import numpy as np

from ..errors import RuntimeLaunchError

if TYPE_CHECKING:
    from .args import KernelArg, PackedArgs, TensorMapArg
    from .bundle import Bundle

# name -> "module:class"; imported on demand so a broken vendor binding cannot break the others.
EXECUTORS = {
    "cuda": "fmha_mlir.runtime.cuda_executor:CudaExecutor",
    "hip": "fmha_mlir.runtime.hip_executor:HipExecutor",
    "cpu": "fmha_mlir.runtime.cpu_executor:CpuExecutor",
}
GPU_EXECUTOR_OF_VENDOR = {"nvidia": "cuda", "amd": "hip"}


@dataclass(frozen=True)
class Allocation:
    """A device allocation: its address (what kernels see) and the executor's own handle."""

    address: int
    nbytes: int
    native: object


def check_status(result: tuple, what: str):
    """Unpack a vendor binding's `(status, *values)` (cuda-bindings and hip-python both return that);
    a non-zero status becomes RuntimeLaunchError naming the call and the status enum's name."""
    status, *values = result
    if int(status) != 0:  # CUDA_SUCCESS / hipSuccess
        raise RuntimeLaunchError(f"{what} failed: {getattr(status, 'name', status)}")
    return values[0] if len(values) == 1 else tuple(values)


class KernelSet(ABC):
    """One bundle's kernels loaded on one device."""

    @abstractmethod
    def prepare(self, kernel: str, grid: Sequence[int], block: Sequence[int], args: Sequence["KernelArg"],
                shared_bytes: int = 0, stream: int | None = None) -> Callable[[], None]:
        """A callable that launches `kernel` with these fixed arguments on `stream` (a native stream
        handle; None: the default stream). Arguments are packed once, so repeated launches are cheap."""

    def launch(self, kernel: str, grid: Sequence[int], block: Sequence[int], args: Sequence["KernelArg"],
               shared_bytes: int = 0, stream: int | None = None) -> None:
        self.prepare(kernel, grid, block, args, shared_bytes, stream)()

    def packed_launcher(self, kernel: str, grid: Sequence[int], block: Sequence[int], packed: "PackedArgs",
                        blob: np.ndarray, shared_bytes: int = 0) -> Callable[[int | None], None]:
        """A callable `launch(stream)` of `kernel` on the arguments `blob` holds at the time of each call:
        `packed` lays them out (args.pack_args), `blob` (uint8, packed.size bytes, kept alive by the
        callable) is where the caller rewrites their addresses between calls (a BoundPlan, once per run).
        Called inside the executor's current(). Executors that launch from a packed blob have it."""
        raise RuntimeLaunchError(f"the {type(self).__name__} kernels cannot launch from a packed argument "
                                 "blob (a launch plan bound to GPU-resident tensors needs the cuda executor)")


class Executor(ABC):
    """Runs bundles' kernels on one device."""

    name: ClassVar[str]
    vendor: ClassVar[str | None]  # the target vendor whose binaries it runs; None: any (the CPU interpreter)

    def __init__(self):
        self._kernel_sets: dict[str, KernelSet] = {}   # Bundle.key -> its kernels on this device
        self._load_lock = threading.Lock()

    @classmethod
    @abstractmethod
    def available(cls) -> tuple[bool, str]:
        """(usable here, why not / which device)."""

    def load(self, bundle: "Bundle") -> KernelSet:
        """The bundle's kernels on this device, loaded on the first call (once, whichever thread asks)."""
        self.check_bundle(bundle)
        with self._load_lock:
            kernels = self._kernel_sets.get(bundle.key)
            if kernels is None:
                kernels = self._kernel_sets[bundle.key] = self._load(bundle)
            return kernels

    @abstractmethod
    def _load(self, bundle: "Bundle") -> KernelSet:
        """Load the bundle's binary (called once per bundle)."""

    @abstractmethod
    def alloc(self, nbytes: int) -> Allocation: ...

    @abstractmethod
    def upload(self, allocation: Allocation, host: np.ndarray) -> None:
        """Copy the bytes of the C-contiguous `host` to the start of `allocation`."""

    @abstractmethod
    def download(self, allocation: Allocation, host: np.ndarray) -> None:
        """Fill the C-contiguous `host` from the start of `allocation`."""

    @abstractmethod
    def zero(self, allocation: Allocation, stream: int | None = None) -> None:
        """Zero-fill the allocation (queued on `stream` where the device has streams)."""

    @abstractmethod
    def synchronize(self) -> None: ...

    @abstractmethod
    def free(self, allocation: Allocation) -> None: ...

    def current(self):
        """A context manager under which a run's calls go to this device (the CUDA executor makes its
        context current once for all of them); a no-op where the device needs nothing. Reusable and
        reentrant: a caller may keep the one it gets and enter it at every run."""
        return contextlib.nullcontext()

    def zero_filler(self, nbytes: int) -> Callable[[int, int | None], None]:
        """A callable `fill(address, stream)` that zero-fills the `nbytes` bytes at `address` on `stream`
        (a launch plan's zero step, built once; called inside current())."""
        return lambda address, stream: self.zero(self.borrow(address, nbytes), stream)

    def encode_tensor_map(self, arg: "TensorMapArg", address: int) -> bytes:
        """The 128 bytes of `arg`'s TMA tensor map over its buffer at `address` (executors whose kernels
        take tensor maps by value; cached per address and geometry, a host call)."""
        raise RuntimeLaunchError(f"the {self.name} executor cannot encode TMA tensor maps (tensor map "
                                 f"{arg.name!r}); the cuda executor does")

    def borrow(self, address: int, nbytes: int) -> Allocation:
        """Device memory someone else owns (a DeviceArray), to launch on and zero-fill; never freed here."""
        raise RuntimeLaunchError(f"the {self.name} executor cannot use tensors that live in GPU memory; "
                                 "pass NumPy arrays (or use the cuda executor)")

    def close(self) -> None:
        """Release the loaded kernels (device memory is freed by whoever allocated it)."""
        with self._load_lock:
            kernel_sets = list(self._kernel_sets.values())
            self._kernel_sets.clear()
        for kernels in kernel_sets:
            self._unload(kernels)

    def _unload(self, kernels: KernelSet) -> None:
        """Release one kernel set's module (the GPU executors)."""

    def check_bundle(self, bundle: "Bundle") -> None:
        """Refuse a bundle built for another vendor's GPU."""
        if self.vendor is not None and bundle.target.vendor != self.vendor:
            raise RuntimeLaunchError(
                f"the bundle is for {bundle.target.arch} ({bundle.target.vendor}); the {self.name} executor runs "
                f"{self.vendor} binaries only: use executor "
                f"{GPU_EXECUTOR_OF_VENDOR[bundle.target.vendor]!r} or 'cpu'")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def executor_class(name: str) -> type[Executor]:
    if name not in EXECUTORS:
        raise RuntimeLaunchError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
    module, _, cls = EXECUTORS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def get_executor(name: str | None = None, vendor: str | None = None, device_index: int = 0) -> Executor:
    """The executor `name` ('cuda', 'hip', 'cpu'), or with None the GPU executor for `vendor` ('nvidia'
    or 'amd', e.g. `bundle.target.vendor`; None tries both) when it is usable here, else 'cpu'.
    device_index: the GPU a GPU executor drives."""
    if vendor is not None and vendor not in GPU_EXECUTOR_OF_VENDOR:
        raise RuntimeLaunchError(f"unknown vendor {vendor!r}; choose one of {', '.join(GPU_EXECUTOR_OF_VENDOR)}")
    if name is not None:
        cls = executor_class(name)
        usable, reason = cls.available()
        if not usable:
            raise RuntimeLaunchError(f"executor {name!r} is not available: {reason}")
        return _create(cls, device_index)
    candidates = [GPU_EXECUTOR_OF_VENDOR[vendor]] if vendor else list(GPU_EXECUTOR_OF_VENDOR.values())
    for candidate in candidates + ["cpu"]:
        cls = executor_class(candidate)
        if cls.available()[0]:
            return _create(cls, device_index)
    raise RuntimeLaunchError("no executor is available, not even 'cpu': " + executor_class("cpu").available()[1])


def _create(cls: type[Executor], device_index: int) -> Executor:
    return cls(device_index) if cls.vendor is not None else cls()
