"""The HIP executor: AMD GPUs through hip-python (imported on first use).

Kernel arguments go to hipModuleLaunchKernel as one packed kernarg blob through `extra`
(HIP_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END). Before every launch the blob's layout is checked
against the code object's own metadata (.args offsets and sizes, .kernarg_segment_size), so a bundle
whose manifest and binary disagree fails with a message instead of reading garbage on the GPU.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Sequence

import numpy as np

from ..errors import RuntimeLaunchError
from .args import KernelArg, check_against_metadata, metadata_field, pack_args
from .executor import Allocation, Executor, KernelSet, check_status

INSTALL_HINT = "pip install 'hip-python>=6.2' (the fmha-mlir[rocm] extra)"
# The `extra` tags, fixed by hip_runtime_api.h as ((void*)1), ((void*)2), ((void*)3). Spelled out here
# because hip-python does not promise to export these macros as plain integers.
HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END = 1, 2, 3


def _hip():
    try:
        from hip import hip
    except ImportError:
        raise RuntimeLaunchError(f"the HIP executor needs hip-python ({INSTALL_HINT})") from None
    return hip


def code_object_kernels(bundle) -> dict[str, dict]:
    """Kernel name -> its entry of the AMDGPU metadata note of the bundle's code object."""
    from .hsaco_metadata import read_hsaco_metadata  # pyelftools + msgpack, needed on AMD machines only

    metadata = read_hsaco_metadata(bundle.binary)
    if metadata["arch"] != bundle.target.arch:
        raise RuntimeLaunchError(f"the bundle's manifest says {bundle.target.arch} but its code object is for "
                                 f"{metadata['arch']}: the bundle is inconsistent")
    return metadata["kernels"]


class HipExecutor(Executor):
    name = "hip"
    vendor = "amd"

    def __init__(self, device_index: int = 0):
        super().__init__()
        self._hip = _hip()
        self.device_index = device_index
        self._set_device()
        props = self._hip.hipDeviceProp_t()
        check_status(self._hip.hipGetDeviceProperties(props, device_index), "hipGetDeviceProperties")
        # e.g. b"gfx942:sramecc+:xnack-": the chip, then target features
        self.arch = props.gcnArchName.split(b"\0")[0].decode().split(":")[0]

    def _set_device(self) -> None:
        check_status(self._hip.hipSetDevice(self.device_index), f"hipSetDevice({self.device_index})")

    @classmethod
    def available(cls) -> tuple[bool, str]:
        try:
            hip = _hip()
        except RuntimeLaunchError as exc:
            return False, str(exc)
        try:
            count = check_status(hip.hipGetDeviceCount(), "hipGetDeviceCount")
        except (RuntimeLaunchError, RuntimeError) as exc:  # RuntimeError: hip-python cannot dlopen libamdhip64
            return False, f"no usable HIP runtime: {exc}"
        if count == 0:
            return False, "the HIP runtime sees no device"
        return True, f"{count} HIP device(s)"

    def _load(self, bundle) -> "HipKernels":
        if bundle.target.arch != self.arch:
            raise RuntimeLaunchError(f"the bundle's code object is for {bundle.target.arch}; this GPU is "
                                     f"{self.arch}: rebuild the bundle for it")
        metadata = code_object_kernels(bundle)
        self._set_device()
        return HipKernels(self, check_status(self._hip.hipModuleLoadData(bundle.binary), "hipModuleLoadData"),
                          metadata)

    def alloc(self, nbytes: int) -> Allocation:
        self._set_device()
        pointer = check_status(self._hip.hipMalloc(max(nbytes, 1)), f"hipMalloc({nbytes})")
        return Allocation(int(pointer), nbytes, pointer)

    def upload(self, allocation: Allocation, host: np.ndarray) -> None:
        self._set_device()
        check_status(self._hip.hipMemcpy(allocation.native, host.ctypes.data, host.nbytes,
                                         self._hip.hipMemcpyKind.hipMemcpyHostToDevice), "hipMemcpy (to device)")

    def download(self, allocation: Allocation, host: np.ndarray) -> None:
        self._set_device()
        check_status(self._hip.hipMemcpy(host.ctypes.data, allocation.native, host.nbytes,
                                         self._hip.hipMemcpyKind.hipMemcpyDeviceToHost), "hipMemcpy (to host)")

    def zero(self, allocation: Allocation, stream: int | None = None) -> None:
        self._set_device()
        check_status(self._hip.hipMemsetAsync(allocation.native, 0, allocation.nbytes, stream), "hipMemsetAsync")

    def synchronize(self) -> None:
        self._set_device()
        check_status(self._hip.hipDeviceSynchronize(), "hipDeviceSynchronize (a kernel failed)")

    def free(self, allocation: Allocation) -> None:
        self._set_device()
        check_status(self._hip.hipFree(allocation.native), "hipFree")

    def _unload(self, kernels: "HipKernels") -> None:
        self._set_device()
        check_status(self._hip.hipModuleUnload(kernels.module), "hipModuleUnload")


class HipKernels(KernelSet):
    """One loaded code object and its metadata; functions looked up once each."""

    def __init__(self, executor: HipExecutor, module, metadata: dict[str, dict]):
        self._executor, self._hip, self.module, self._metadata = executor, executor._hip, module, metadata
        self._functions: dict[str, object] = {}
        self._lock = threading.Lock()

    def _function(self, kernel: str):
        with self._lock:
            if kernel not in self._functions:
                self._functions[kernel] = check_status(self._hip.hipModuleGetFunction(self.module, kernel.encode()),
                                                       f"hipModuleGetFunction({kernel})")
            return self._functions[kernel]

    def prepare(self, kernel: str, grid: Sequence[int], block: Sequence[int], args: Sequence[KernelArg],
                shared_bytes: int = 0, stream: int | None = None):
        function = self._function(kernel)
        if kernel not in self._metadata:
            raise RuntimeLaunchError(f"kernel {kernel} is not in the code object's metadata")
        packed = pack_args(args)
        check_against_metadata(kernel, packed, self._metadata[kernel])
        # Pad to the whole segment: the runtime fills any hidden arguments past the explicit ones.
        segment = max(packed.size, metadata_field(self._metadata[kernel], "kernarg_segment_size", kernel))
        blob = ctypes.create_string_buffer(packed.blob, segment)
        size = ctypes.c_size_t(segment)
        extra = (ctypes.c_void_p * 5)(HIP_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(blob),
                                      HIP_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(size), HIP_LAUNCH_PARAM_END)
        grid, block = tuple(grid), tuple(block)
        what = f"hipModuleLaunchKernel({kernel}, grid={grid}, block={block})"
        launch, set_device = self._hip.hipModuleLaunchKernel, self._executor._set_device

        def run(blob=blob, size=size, extra=extra):  # keeps the kernarg blob alive with the callable
            set_device()
            check_status(launch(function, *grid, *block, shared_bytes, stream, None, extra), what)

        return run
