"""The device interface the runner drives, and choosing an executor by name or automatically.

An executor owns device memory and one loaded kernel set at a time. The GPU executors import their
vendor bindings (cuda-bindings, hip-python) only when used, so this package imports with NumPy alone.
"""
from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Sequence

import numpy as np

from ..errors import RuntimeLaunchError

if TYPE_CHECKING:
    from .args import KernelArg
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


class Executor(ABC):
    """Runs a bundle's kernels on one device."""

    name: ClassVar[str]
    vendor: ClassVar[str | None]  # the target vendor whose binaries it runs; None: any (the CPU interpreter)

    @classmethod
    @abstractmethod
    def available(cls) -> tuple[bool, str]:
        """(usable here, why not / which device)."""

    @abstractmethod
    def load(self, bundle: "Bundle") -> None:
        """Load the bundle's kernels, replacing any loaded before."""

    @abstractmethod
    def alloc(self, nbytes: int) -> Allocation: ...

    @abstractmethod
    def upload(self, allocation: Allocation, host: np.ndarray) -> None:
        """Copy the bytes of the C-contiguous `host` to the start of `allocation`."""

    @abstractmethod
    def download(self, allocation: Allocation, host: np.ndarray) -> None:
        """Fill the C-contiguous `host` from the start of `allocation`."""

    @abstractmethod
    def zero(self, allocation: Allocation) -> None: ...

    @abstractmethod
    def launch(self, kernel: str, grid: Sequence[int], block: Sequence[int], args: Sequence["KernelArg"],
               shared_bytes: int = 0) -> None: ...

    def prepare(self, kernel: str, grid: Sequence[int], block: Sequence[int], args: Sequence["KernelArg"],
                shared_bytes: int = 0):
        """A callable that launches `kernel` with these fixed arguments; executors that can pack the
        arguments once (the CUDA one) make repeated launches cheaper for the host."""
        return lambda: self.launch(kernel, grid, block, args, shared_bytes)

    @abstractmethod
    def synchronize(self) -> None: ...

    @abstractmethod
    def free(self, allocation: Allocation) -> None: ...

    def borrow(self, address: int, nbytes: int) -> Allocation:
        """Device memory someone else owns (a DeviceArray), to launch on and zero-fill; never freed here."""
        raise RuntimeLaunchError(f"the {self.name} executor cannot use tensors that live in GPU memory; "
                                 "pass NumPy arrays (or use the cuda executor)")

    def close(self) -> None:
        """Release the loaded kernels (device memory is freed by whoever allocated it)."""

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


def get_executor(name: str | None = None, vendor: str | None = None) -> Executor:
    """The executor `name` ('cuda', 'hip', 'cpu'), or with None the GPU executor for `vendor` ('nvidia'
    or 'amd', e.g. `bundle.target.vendor`; None tries both) when it is usable here, else 'cpu'."""
    if vendor is not None and vendor not in GPU_EXECUTOR_OF_VENDOR:
        raise RuntimeLaunchError(f"unknown vendor {vendor!r}; choose one of {', '.join(GPU_EXECUTOR_OF_VENDOR)}")
    if name is not None:
        cls = executor_class(name)
        usable, reason = cls.available()
        if not usable:
            raise RuntimeLaunchError(f"executor {name!r} is not available: {reason}")
        return cls()
    candidates = [GPU_EXECUTOR_OF_VENDOR[vendor]] if vendor else list(GPU_EXECUTOR_OF_VENDOR.values())
    for candidate in candidates + ["cpu"]:
        cls = executor_class(candidate)
        if cls.available()[0]:
            return cls()
    raise RuntimeLaunchError("no executor is available, not even 'cpu': " + executor_class("cpu").available()[1])
