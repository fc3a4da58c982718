"""Stand-ins for the CUDA driver and torch's CUDA tensors, so that the torch path's host code runs as it
does on a GPU machine, here, without one (tools/bench_host_path.py times it; tests check what it
launches). What runs is ours and torch's real code; only what needs a GPU is replaced:

- cuda-bindings' driver module: StandInDriver, one method per driver call the executor makes (tensor
  maps are encoded as 128 zero bytes), each returning success at once (one Python call each, as the
  real module's Cython functions are one call each). Launches are counted, not run; `on_launch` sees
  each launch's arguments.
- a torch CUDA tensor: a CPU tensor of the subclass CudaLike, whose `is_cuda` and `device` say
  cuda:0. They are class attributes (no Python call per access, like torch's C getters), and its
  __torch_function__ is off, so every torch op on it runs as on a plain CPU tensor (and returns one).
- torch.cuda.current_stream (and torch._C._cuda_getCurrentRawStream) returns a fixed handle, and
  torch.empty(..., device=cuda:N) allocates on the CPU, and torch's flash forward op returns empty out
  and lse tensors (`torch_cuda_stand_ins`).
- for a whole training step, whose tensors torch makes (out, lse, the gradients torch's autograd
  hands on), `every_tensor_on_cuda`: every tensor says so, by the same class attributes on torch.Tensor.
"""
from __future__ import annotations

import contextlib
import ctypes
import types

import torch

CONTEXT = 0x7ACE     # the primary context: current already, as torch leaves it on a GPU machine
STREAM = 7           # the handle torch.cuda.current_stream(...).cuda_stream gives here
MAJOR, MINOR = 75, 76   # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR (their CUDA values)


class _Members:
    """A driver enum: each member is its name."""

    def __getattr__(self, name: str) -> str:
        return name


class _TensorMap:
    """cuTensorMapEncodeTiled's result: 128 bytes (zeros here) at getPtr()."""

    def __init__(self):
        self.data = ctypes.create_string_buffer(128)

    def getPtr(self) -> int:
        return ctypes.addressof(self.data)


class StandInDriver:
    """cuda-bindings' `driver` as CudaExecutor uses it, on an sm_90 device."""

    CUdevice_attribute = types.SimpleNamespace(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR=MAJOR,
                                               CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR=MINOR)
    CUfunction_attribute = types.SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8)
    CUdeviceptr = int
    cuuint32_t = cuuint64_t = int
    CUtensorMapDataType = CUtensorMapInterleave = CUtensorMapSwizzle = CUtensorMapL2promotion = _Members()
    CUtensorMapFloatOOBfill = _Members()

    def __init__(self, on_launch=None, on_fill=None):
        self.launches = self.fills = self.synchronizations = self.tensor_maps = 0
        # Called with cuLaunchKernel's arguments (function, grid, block, shared, stream, params) and with
        # a zero fill's (pointer, bytes, stream) (tests); None: counted only.
        self.on_launch, self.on_fill = on_launch, on_fill

    def cuInit(self, flags):
        return (0,)

    def cuDeviceGetCount(self):
        return (0, 1)

    def cuDeviceGet(self, index):
        return (0, index)

    def cuDeviceGetName(self, length, device):
        return (0, b"stand-in sm_90\0")

    def cuDeviceGetAttribute(self, attribute, device):
        return (0, {MAJOR: 9, MINOR: 0}[attribute])

    def cuDevicePrimaryCtxRetain(self, device):
        return (0, CONTEXT)

    def cuDevicePrimaryCtxRelease(self, device):
        return (0,)

    def cuCtxGetCurrent(self):
        return (0, CONTEXT)

    def cuModuleLoadData(self, image):
        return (0, 1)

    def cuModuleUnload(self, module):
        return (0,)

    def cuModuleGetFunction(self, module, name):
        return (0, name.decode())

    def cuFuncSetAttribute(self, function, attribute, value):
        return (0,)

    def cuCtxSynchronize(self):
        self.synchronizations += 1
        return (0,)

    def cuMemcpyHtoD(self, pointer, host, nbytes):   # (debug mode's NaN poisoning; nothing is written)
        return (0,)

    def cuMemsetD32Async(self, pointer, value, count, stream):   # (one call, as the real one: no delegation)
        self.fills += 1
        if self.on_fill is not None:
            self.on_fill(pointer, 4 * count, stream)
        return (0,)

    def cuMemsetD8Async(self, pointer, value, count, stream):
        self.fills += 1
        if self.on_fill is not None:
            self.on_fill(pointer, count, stream)
        return (0,)

    def cuTensorMapEncodeTiled(self, *geometry):
        self.tensor_maps += 1
        return (0, _TensorMap())

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self.launches += 1
        if self.on_launch is not None:
            self.on_launch(function, (gx, gy, gz), (bx, by, bz), shared, stream, params)
        return (0,)


class CudaLike(torch.Tensor):
    """A CPU tensor that says it is on cuda:0 (see the module's docstring)."""

    __module__ = "torch.cuda_stand_in"   # fmha_mlir tells torch tensors by their type's module
    __torch_function__ = torch._C._disabled_torch_function_impl
    is_cuda = True
    device = torch.device("cuda", 0)


def cuda_like(tensor: torch.Tensor) -> CudaLike:
    """`tensor` (a CPU tensor) as a stand-in CUDA tensor on cuda:0: the same memory."""
    return torch.Tensor._make_subclass(CudaLike, tensor, tensor.requires_grad)


@contextlib.contextmanager
def torch_cuda_stand_ins(driver: StandInDriver):
    """While inside: fmha_mlir's CUDA executor drives `driver`, torch.cuda.current_stream gives STREAM,
    torch.cuda.get_device_capability the driver's (9, 0), torch.empty on a CUDA device allocates on the
    CPU, and torch's flash forward op (CUDA only) returns empty out and lse tensors."""
    import torch._dynamo  # noqa: F401  (imported by the custom ops' first call; with the real flash op, as it expects)

    from fmha_mlir.runtime import cuda_executor

    real_empty, real_stream, real_driver = torch.empty, torch.cuda.current_stream, cuda_executor._driver
    real_capability = torch.cuda.get_device_capability
    stream = types.SimpleNamespace(cuda_stream=STREAM)

    def empty(*size, device=None, **kwargs):
        return real_empty(*size, **kwargs, device=None if getattr(device, "type", device) == "cuda" else device)

    def current_stream(device=None):
        return stream

    def flash_forward(q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
        # (out, lse) of the right shapes, uncomputed: the GPU op, too, only queues its work
        return q.new_empty(q.shape[:-1] + v.shape[-1:]), q.new_empty(q.shape[:-1], dtype=torch.float32)

    real_raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)   # absent from CPU builds
    torch.empty, torch.cuda.current_stream, cuda_executor._driver = empty, current_stream, lambda: driver
    torch.cuda.get_device_capability = lambda device=None: (9, 0)
    torch._C._cuda_getCurrentRawStream = lambda index: STREAM
    setattr(torch.ops.aten, "_scaled_dot_product_flash_attention", flash_forward)
    try:
        yield
    finally:
        torch.empty, torch.cuda.current_stream, cuda_executor._driver = real_empty, real_stream, real_driver
        torch.cuda.get_device_capability = real_capability
        if real_raw is None:
            del torch._C._cuda_getCurrentRawStream
        else:
            torch._C._cuda_getCurrentRawStream = real_raw
        delattr(torch.ops.aten, "_scaled_dot_product_flash_attention")


@contextlib.contextmanager
def every_tensor_on_cuda():
    """While inside, every torch tensor's `is_cuda` and `device` say cuda:0 (Python readers only: torch's
    C++ code, the dispatcher and the autograd engine, still see CPU tensors)."""
    torch.Tensor.is_cuda, torch.Tensor.device = CudaLike.is_cuda, CudaLike.device
    try:
        yield
    finally:
        del torch.Tensor.is_cuda, torch.Tensor.device
