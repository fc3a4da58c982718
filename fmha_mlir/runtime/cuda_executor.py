"""The CUDA executor: NVIDIA GPUs through the driver API of cuda-bindings (imported on first use).

PTX is JIT-compiled by the driver at load (it runs on the target's compute capability and later ones);
a cubin needs the target's major version. Each bundle is loaded once per executor (Executor.load).

Thread safety and torch: the executor works in the device's primary context (the one the CUDA runtime,
and so torch, uses). Every driver call runs with that context current, pushed only when the calling
thread has another one (or none), so any thread may use the executor and torch's own current device is
left as it was. Launches go to the stream given (torch's current stream); None is the legacy default.
Kernel parameters are passed as `kernelParams`: an array of pointers, each into the naturally aligned
kernarg blob that args.pack_args lays out.
"""
from __future__ import annotations

import functools

import threading
from typing import Sequence

import numpy as np

from ..errors import RuntimeLaunchError
from .args import KernelArg, PackedArgs, pack_args, tensor_map_fields
from .executor import Allocation, Executor, KernelSet, check_status

INSTALL_HINT = "pip install 'cuda-bindings>=12.6' (the fmha-mlir[cuda] extra)"
# A launch may use this much dynamic shared memory without asking; more needs the function attribute.
DEFAULT_DYNAMIC_SHARED_BYTES = 48 * 1024


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:
        raise RuntimeLaunchError(f"the CUDA executor needs cuda-bindings ({INSTALL_HINT})") from None
    return driver


def compute_capability(arch: str) -> tuple[int, int]:
    """'sm_90' -> (9, 0)."""
    digits = arch.removeprefix("sm_").rstrip("a")
    return int(digits[:-1]), int(digits[-1])


def binary_runs_on(target, binary_format: str, have: tuple[int, int]) -> bool:
    """Whether a `binary_format` binary for `target` runs on a GPU of compute capability `have`: an
    arch-specific target (sm_90a) on exactly its chip; a cubin on its major version from its minor one
    up; PTX on its capability and later ones (the driver JIT-compiles it)."""
    need = compute_capability(target.arch)
    if target.arch_specific:
        return have == need
    return have[0] == need[0] and have >= need if binary_format == "cubin" else have >= need


class CudaExecutor(Executor):
    name = "cuda"
    vendor = "nvidia"

    def __init__(self, device_index: int = 0):
        super().__init__()
        self._cu = _driver()
        self._context = None
        check_status(self._cu.cuInit(0), "cuInit")
        self.device_index = device_index
        self._device = check_status(self._cu.cuDeviceGet(device_index), f"cuDeviceGet({device_index})")
        self._context = check_status(self._cu.cuDevicePrimaryCtxRetain(self._device), "cuDevicePrimaryCtxRetain")
        from .tensor_maps import TensorMapCache

        self.tensor_maps = TensorMapCache(self._encode_tiled)
        self._current = _PrimaryContext(self._cu, self._context)

    def _encode_tiled(self, encoding) -> bytes:
        from .tensor_maps import encode_tiled

        with self.current():   # cuTensorMapEncodeTiled fails with CUDA_ERROR_INVALID_CONTEXT where none is current
            return encode_tiled(self._cu, encoding)

    def current(self) -> "_PrimaryContext":
        """The primary context current for the calls inside (pushed only where another one is). Nested
        uses cost no driver call: a run wraps its launches in one, and each launch's own is free."""
        return self._current

    @classmethod
    def available(cls) -> tuple[bool, str]:
        try:
            cu = _driver()
        except RuntimeLaunchError as exc:
            return False, str(exc)
        try:
            check_status(cu.cuInit(0), "cuInit")
            count = check_status(cu.cuDeviceGetCount(), "cuDeviceGetCount")
            if count == 0:
                return False, "the CUDA driver sees no device"
            device = check_status(cu.cuDeviceGet(0), "cuDeviceGet")
            name = check_status(cu.cuDeviceGetName(256, device), "cuDeviceGetName")
        except (RuntimeLaunchError, RuntimeError) as exc:  # RuntimeError: cuda-bindings cannot dlopen libcuda
            return False, f"no usable CUDA driver: {exc}"
        return True, "CUDA device 0: " + name.split(b"\0")[0].decode()

    def _load(self, bundle) -> "CudaKernels":
        self._check_capability(bundle)
        image = bundle.binary + (b"\0" if bundle.binary_format == "ptx" else b"")  # PTX text is NUL-terminated
        with self.current():
            module = check_status(self._cu.cuModuleLoadData(image), f"cuModuleLoadData({bundle.binary_format})")
        return CudaKernels(self, module)

    @functools.cached_property
    def capability(self) -> tuple[int, int]:
        """The device's compute capability (major, minor)."""
        attr = self._cu.CUdevice_attribute
        return tuple(check_status(self._cu.cuDeviceGetAttribute(a, self._device), "cuDeviceGetAttribute")
                     for a in (attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                               attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))

    def _check_capability(self, bundle) -> None:
        have = self.capability
        if not binary_runs_on(bundle.target, bundle.binary_format, have):
            raise RuntimeLaunchError(f"the bundle's {bundle.binary_format} is for {bundle.target.arch}; this GPU is "
                                     f"sm_{have[0]}{have[1]}: rebuild the bundle for it")

    def encode_tensor_map(self, arg, address: int) -> bytes:
        return self.tensor_maps.get(arg, address)

    def alloc(self, nbytes: int) -> Allocation:
        with self.current():
            pointer = check_status(self._cu.cuMemAlloc(max(nbytes, 1)), f"cuMemAlloc({nbytes})")
        return Allocation(int(pointer), nbytes, pointer)

    def upload(self, allocation: Allocation, host: np.ndarray) -> None:
        with self.current():
            check_status(self._cu.cuMemcpyHtoD(allocation.native, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")

    def download(self, allocation: Allocation, host: np.ndarray) -> None:
        with self.current():
            check_status(self._cu.cuMemcpyDtoH(host.ctypes.data, allocation.native, host.nbytes), "cuMemcpyDtoH")

    def zero(self, allocation: Allocation, stream: int | None = None) -> None:
        # Word-wide fills are several times faster than byte-wide ones on large workspaces.
        cu, stream = self._cu, stream or 0
        with self.current():
            if allocation.nbytes % 4 == 0:
                check_status(cu.cuMemsetD32Async(allocation.native, 0, allocation.nbytes // 4, stream),
                             "cuMemsetD32Async")
            else:
                check_status(cu.cuMemsetD8Async(allocation.native, 0, allocation.nbytes, stream), "cuMemsetD8Async")

    def zero_filler(self, nbytes: int):
        cu, what = self._cu, f"zero fill of {nbytes} bytes"
        memset, count = ((cu.cuMemsetD32Async, nbytes // 4) if nbytes % 4 == 0 else   # word-wide: see zero()
                         (cu.cuMemsetD8Async, nbytes))

        def fill(address: int, stream: int | None) -> None:
            result = memset(address, 0, count, stream or 0)
            if int(result[0]):
                check_status(result, what)

        return fill

    def synchronize(self) -> None:
        with self.current():
            check_status(self._cu.cuCtxSynchronize(), "cuCtxSynchronize (a kernel failed)")

    def borrow(self, address: int, nbytes: int) -> Allocation:
        return Allocation(address, nbytes, self._cu.CUdeviceptr(address))

    def free(self, allocation: Allocation) -> None:
        with self.current():
            check_status(self._cu.cuMemFree(allocation.native), "cuMemFree")

    def close(self) -> None:
        """Unload every module and release the primary context (once, even when unloading fails)."""
        try:
            super().close()
        finally:
            if self._context is not None:
                self._context = None
                check_status(self._cu.cuDevicePrimaryCtxRelease(self._device), "cuDevicePrimaryCtxRelease")

    def _unload(self, kernels: "CudaKernels") -> None:
        with self.current():
            check_status(self._cu.cuModuleUnload(kernels.module), "cuModuleUnload")


class _PrimaryContext:
    """A CudaExecutor's current(): its primary context made current on entry where another one (or none)
    is, restored on exit; reentrant per thread (only the outermost entry asks the driver)."""

    def __init__(self, cu, context):
        self._cu, self._context, self._handle = cu, context, int(context)
        self._inside = threading.local()   # this thread's depth inside, and whether its entry pushed

    def __enter__(self) -> None:
        inside = self._inside
        depth = getattr(inside, "depth", 0)
        if not depth:
            now = check_status(self._cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
            inside.pushed = int(now) != self._handle
            if inside.pushed:
                check_status(self._cu.cuCtxPushCurrent(self._context), "cuCtxPushCurrent")
        inside.depth = depth + 1

    def __exit__(self, *exc) -> None:
        inside = self._inside
        inside.depth -= 1
        if not inside.depth and inside.pushed:
            check_status(self._cu.cuCtxPopCurrent(), "cuCtxPopCurrent")


class CudaKernels(KernelSet):
    """One loaded module: functions looked up (and their shared-memory limit raised) once each."""

    def __init__(self, executor: CudaExecutor, module):
        self._executor, self._cu, self.module = executor, executor._cu, module
        self._functions: dict[str, object] = {}
        self._shared_limits: dict[str, int] = {}
        self._lock = threading.Lock()

    def _function(self, kernel: str, shared_bytes: int):
        with self._lock:
            if kernel not in self._functions:
                self._functions[kernel] = check_status(self._cu.cuModuleGetFunction(self.module, kernel.encode()),
                                                       f"cuModuleGetFunction({kernel})")
            function = self._functions[kernel]
            if shared_bytes > max(DEFAULT_DYNAMIC_SHARED_BYTES, self._shared_limits.get(kernel, 0)):
                attribute = self._cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                check_status(self._cu.cuFuncSetAttribute(function, attribute, shared_bytes),
                             f"cuFuncSetAttribute({kernel}, MAX_DYNAMIC_SHARED_SIZE_BYTES, {shared_bytes})")
                self._shared_limits[kernel] = shared_bytes
            return function

    def packed_launcher(self, kernel: str, grid: Sequence[int], block: Sequence[int], packed: PackedArgs,
                        blob: np.ndarray, shared_bytes: int = 0):
        """cuLaunchKernel on a pointer to each field of `blob`, computed once: the driver copies the values
        at each launch, so the caller may rewrite the blob for the next one as soon as this returns."""
        with self._executor.current():
            function = self._function(kernel, shared_bytes)
        params = np.array(packed.offsets, np.uint64) + np.uint64(blob.ctypes.data)   # a pointer to each field
        grid, block = tuple(grid), tuple(block)
        what = f"cuLaunchKernel({kernel}, grid={grid}, block={block})"
        launch, address, config = self._cu.cuLaunchKernel, params.ctypes.data, (function, *grid, *block, shared_bytes)

        def run(stream, blob=blob, params=params):  # keeps the arguments and their pointers alive with the callable
            result = launch(*config, stream or 0, address, 0)
            if int(result[0]):   # (checked inline: the hot path of every launch)
                check_status(result, what)

        return run

    def prepare(self, kernel: str, grid: Sequence[int], block: Sequence[int], args: Sequence[KernelArg],
                shared_bytes: int = 0, stream: int | None = None):
        """Look the function up and pack the arguments once; the returned callable only calls
        cuLaunchKernel (the driver copies the parameter values at each call)."""
        packed = pack_args(args)
        blob = np.frombuffer(packed.blob, np.uint8).copy()
        for offset, arg in tensor_map_fields(packed):   # by-value __grid_constant__ tensor maps
            encoded = self._executor.encode_tensor_map(arg, arg.buffer.address)
            blob[offset:offset + len(encoded)] = np.frombuffer(encoded, np.uint8)
        launch = self.packed_launcher(kernel, grid, block, packed, blob, shared_bytes)
        current = self._executor.current

        def run():
            with current():
                launch(stream)

        return run
