"""The CUDA executor: NVIDIA GPUs through the driver API of cuda-bindings (imported on first use).

PTX is JIT-compiled by the driver at load (it runs on the target's compute capability and later ones);
a cubin needs the target's major version. Kernel parameters are passed as `kernelParams`: an array of
pointers, each into the naturally aligned kernarg blob that args.pack_args lays out.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import RuntimeLaunchError
from .args import KernelArg, pack_args
from .executor import Allocation, Executor

INSTALL_HINT = "pip install cuda-bindings==13.0.3"


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:
        raise RuntimeLaunchError(f"the CUDA executor needs cuda-bindings ({INSTALL_HINT})") from None
    return driver


def _check(result: tuple, what: str):
    """Unpack a driver call's (CUresult, *values); a failure becomes RuntimeLaunchError with its name."""
    err, *values = result
    if int(err) != 0:  # CUDA_SUCCESS
        raise RuntimeLaunchError(f"{what} failed: {getattr(err, 'name', err)}")
    return values[0] if len(values) == 1 else tuple(values)


def compute_capability(arch: str) -> tuple[int, int]:
    """'sm_90' -> (9, 0)."""
    digits = arch.removeprefix("sm_").rstrip("a")
    return int(digits[:-1]), int(digits[-1])


class CudaExecutor(Executor):
    name = "cuda"
    vendor = "nvidia"

    def __init__(self, device_index: int = 0):
        self._cu = _driver()
        _check(self._cu.cuInit(0), "cuInit")
        self._device = _check(self._cu.cuDeviceGet(device_index), f"cuDeviceGet({device_index})")
        self._context = _check(self._cu.cuDevicePrimaryCtxRetain(self._device), "cuDevicePrimaryCtxRetain")
        _check(self._cu.cuCtxSetCurrent(self._context), "cuCtxSetCurrent")
        self._module = None
        self._functions: dict[str, object] = {}

    @classmethod
    def available(cls) -> tuple[bool, str]:
        try:
            cu = _driver()
        except RuntimeLaunchError as exc:
            return False, str(exc)
        try:
            _check(cu.cuInit(0), "cuInit")
            count = _check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
            if count == 0:
                return False, "the CUDA driver sees no device"
            name = _check(cu.cuDeviceGetName(256, _check(cu.cuDeviceGet(0), "cuDeviceGet")), "cuDeviceGetName")
        except (RuntimeLaunchError, RuntimeError) as exc:  # RuntimeError: cuda-bindings cannot dlopen libcuda
            return False, f"no usable CUDA driver: {exc}"
        return True, "CUDA device 0: " + name.split(b"\0")[0].decode()

    def load(self, bundle) -> None:
        self.check_bundle(bundle)
        self._check_capability(bundle)
        self._unload()
        image = bundle.binary + (b"\0" if bundle.binary_format == "ptx" else b"")  # PTX text is NUL-terminated
        self._module = _check(self._cu.cuModuleLoadData(image), f"cuModuleLoadData({bundle.binary_format})")

    def _check_capability(self, bundle) -> None:
        attr = self._cu.CUdevice_attribute
        have = tuple(_check(self._cu.cuDeviceGetAttribute(a, self._device), "cuDeviceGetAttribute") for a in (
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        need = compute_capability(bundle.target.arch)
        runs = have[0] == need[0] and have >= need if bundle.binary_format == "cubin" else have >= need
        if not runs:
            raise RuntimeLaunchError(f"the bundle's {bundle.binary_format} is for {bundle.target.arch}; this GPU is "
                                     f"sm_{have[0]}{have[1]}: rebuild the bundle for it")

    def _function(self, kernel: str):
        if self._module is None:
            raise RuntimeLaunchError("no bundle is loaded: call load(bundle) before launch")
        if kernel not in self._functions:
            self._functions[kernel] = _check(self._cu.cuModuleGetFunction(self._module, kernel.encode()),
                                             f"cuModuleGetFunction({kernel})")
        return self._functions[kernel]

    def alloc(self, nbytes: int) -> Allocation:
        pointer = _check(self._cu.cuMemAlloc(max(nbytes, 1)), f"cuMemAlloc({nbytes})")
        return Allocation(int(pointer), nbytes, pointer)

    def upload(self, allocation: Allocation, host: np.ndarray) -> None:
        _check(self._cu.cuMemcpyHtoD(allocation.native, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")

    def download(self, allocation: Allocation, host: np.ndarray) -> None:
        _check(self._cu.cuMemcpyDtoH(host.ctypes.data, allocation.native, host.nbytes), "cuMemcpyDtoH")

    def zero(self, allocation: Allocation) -> None:
        _check(self._cu.cuMemsetD8(allocation.native, 0, allocation.nbytes), "cuMemsetD8")

    def launch(self, kernel: str, grid: Sequence[int], block: Sequence[int], args: Sequence[KernelArg],
               shared_bytes: int = 0) -> None:
        function = self._function(kernel)
        packed = pack_args(args)
        blob = np.frombuffer(packed.blob, np.uint8).copy()
        params = np.array([blob.ctypes.data + f.offset for f in packed.fields], np.uint64)
        # The driver copies the parameter values during the call, so blob and params may go afterwards.
        _check(self._cu.cuLaunchKernel(function, *grid, *block, shared_bytes, None, params.ctypes.data, 0),
               f"cuLaunchKernel({kernel}, grid={tuple(grid)}, block={tuple(block)})")

    def synchronize(self) -> None:
        _check(self._cu.cuCtxSynchronize(), "cuCtxSynchronize (a kernel failed)")

    def free(self, allocation: Allocation) -> None:
        _check(self._cu.cuMemFree(allocation.native), "cuMemFree")

    def close(self) -> None:
        self._unload()
        if self._context is not None:
            _check(self._cu.cuDevicePrimaryCtxRelease(self._device), "cuDevicePrimaryCtxRelease")
        self._context = None

    def _unload(self) -> None:
        if self._module is not None:
            _check(self._cu.cuModuleUnload(self._module), "cuModuleUnload")
        self._module = None
        self._functions = {}
