"""The Python API: attention-backward gradients from arrays, and the compile / load / launch steps.

    from fmha_mlir import attention_bwd
    dq, dk, dv = attention_bwd(q, k, v, o, do, lse, mask="top_left")

Arrays are NumPy arrays (or torch tensors) in logical [batch, heads, seq, dim] shape with any strides
(docs/ir.md); NumPy has no bfloat16, so bf16 data is passed as uint16 bit patterns with dtype="bf16".
Compiling needs MLIR (flydsl); a machine without it runs bundles compiled elsewhere (`bundle_dir`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .bodies import choose_config
from .dtypes import STORAGE
from .errors import Reason, SpecError
from .kernel_config import KernelConfig
from .runtime.bundle import Bundle
from .runtime.device_array import DeviceArray
from .runtime.executor import Executor, get_executor
from .runtime.runner import run_bundle
from .spec import AttentionBwdSpec, Mask
from .target import get_target

_NUMPY_DTYPES = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32"}
# The arch a GPU-less run interprets: gfx942 exercises the wave64 (DPP) path no GPU here can run.
CPU_DEFAULT_ARCH = "gfx942"
GPU_ARCH_OF_EXECUTOR = {"cuda": "sm_90"}


def compile_bundle(spec: AttentionBwdSpec, arch: str, compiler=None, *, body: str = "auto",
                   config: KernelConfig | None = None) -> Bundle:
    """Compile `spec` for `arch` into a launchable bundle (needs MLIR); `body` / `config` as
    Compiler.compile_spec takes them."""
    from .compiler import Compiler  # MLIR is imported only when something is compiled

    compiled = (compiler or Compiler()).compile_spec(spec, arch, body=body, config=config)
    return Bundle(compiled.manifest, compiled.bundle_files())


def bundle_path(directory, spec: AttentionBwdSpec, arch: str, body: str = "auto",
                config: KernelConfig | None = None) -> Path:
    """Where a prebuilt bundle for (spec, arch, config) lives under a bundle directory:
    <dir>/<arch>/<kernel_prefix>_<config tag> (the config `body` picks when none is given)."""
    config = config or choose_config(spec, get_target(arch), body)
    return Path(directory) / arch / f"{spec.kernel_prefix}_{config.tag}"


def infer_dtype(q, dtype: str | None) -> str:
    if dtype is not None:
        return dtype
    if q.dtype in _NUMPY_DTYPES:
        return _NUMPY_DTYPES[q.dtype]
    raise SpecError([Reason("dtype", f"cannot tell the element type of {q.dtype} arrays",
                            "pass float16 or float32 arrays, or uint16 bf16 bit patterns with dtype='bf16'")])


@dataclass
class AttentionBackward:
    """Compiles (once per spec and arch) and runs the backward on one executor.

    executor: 'cuda', 'hip', 'cpu' or None (a usable GPU, else the CPU interpreter).
    arch: the target to compile for; None picks the executor's (sm_90 on CUDA, gfx942 on the CPU).
    body: 'auto' (the fastest body that supports the spec on the arch), 'warp' or 'tiled'.
    bundle_dir: prebuilt bundles (bundle_path) used before compiling.
    """

    executor: str | None = None
    arch: str | None = None
    bundle_dir: str | None = None
    atomic_order: str = "sequential"
    body: str = "auto"
    _bundles: dict = field(default_factory=dict, repr=False)
    _compiler: object = field(default=None, repr=False)
    _device: Executor | None = field(default=None, repr=False)

    def device(self) -> Executor:
        if self._device is None:
            if self.executor == "cpu":
                from .runtime.cpu_executor import CpuExecutor

                self._device = CpuExecutor(atomic_order=self.atomic_order)
            else:
                vendor = get_target(self.arch).vendor if self.arch else None
                self._device = get_executor(self.executor, vendor)
        return self._device

    def target_arch(self) -> str:
        if self.arch is None:
            device = self.device()
            if device.name == "hip":
                raise SpecError([Reason("arch", "the HIP executor needs the chip to compile for",
                                        "pass arch='gfx942' or arch='gfx950'")])
            self.arch = GPU_ARCH_OF_EXECUTOR.get(device.name, CPU_DEFAULT_ARCH)
        return self.arch

    def bundle(self, spec: AttentionBwdSpec) -> Bundle:
        arch = self.target_arch()
        key = (spec, arch)
        if key not in self._bundles:
            config = choose_config(spec, get_target(arch), self.body)
            prebuilt = bundle_path(self.bundle_dir, spec, arch, config=config) if self.bundle_dir else None
            if prebuilt is not None and prebuilt.is_dir():
                self._bundles[key] = Bundle.load(prebuilt)
            else:
                if self._compiler is None:
                    from .compiler import Compiler

                    self._compiler = Compiler()
                self._bundles[key] = compile_bundle(spec, arch, self._compiler, config=config)
        return self._bundles[key]

    def __call__(self, q, k, v, o, do, lse, *, mask: str | Mask = "none", scale: float = 0.0,
                 dtype: str | None = None, softcap: float = 0.0, bias: str = "none"):
        torch_like = _is_torch(q)
        spec = AttentionBwdSpec(
            dtype=_torch_dtype(q) if torch_like else infer_dtype(np.asarray(q), dtype),
            hdim_q=q.shape[-1], hdim_v=v.shape[-1], gqa_ratio=_gqa_ratio(q, k),
            mask=mask if isinstance(mask, Mask) else Mask.parse(mask), scale=scale, softcap=softcap, bias=bias)
        bundle, device = self.bundle(spec), self.device()
        if torch_like and q.is_cuda and device.name == "cuda":
            return _run_in_place(bundle, device, (q, k, v, o, do, lse))
        arrays = [_to_numpy(t) for t in (q, k, v, o, do, lse)]
        grads = run_bundle(bundle, device, dict(zip(("q", "k", "v", "o", "do", "lse"), arrays)))
        out = tuple(grads[name] for name in ("dq", "dk", "dv"))
        return tuple(_like(q, g) for g in out) if torch_like else out


def attention_bwd(q, k, v, o, do, lse, *, mask: str | Mask = "none", scale: float = 0.0,
                  dtype: str | None = None, executor: str | None = None, arch: str | None = None,
                  body: str = "auto", softcap: float = 0.0, bias: str = "none"):
    """dQ, dK, dV of softmax(S, masked) V for upstream gradient dO, S = Q K^T * scale or, with softcap
    C > 0, C tanh(Q K^T * scale / C), plus -slope_h |i + Sk - Sq - j| with bias="alibi" (standard
    slopes 2^(-8 (h + 1) / H)) (one-shot; for repeated calls keep an AttentionBackward, which caches
    compiled bundles)."""
    return AttentionBackward(executor=executor, arch=arch, body=body)(q, k, v, o, do, lse, mask=mask, scale=scale,
                                                                      dtype=dtype, softcap=softcap, bias=bias)


def _run_in_place(bundle: Bundle, device: Executor, inputs: tuple):
    """torch CUDA tensors on the CUDA executor: the kernels read and write GPU memory, no copies."""
    import torch

    q, k, v = inputs[:3]
    outputs = tuple(torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    # Our launches go to the legacy default stream: wait for whatever torch queued that made the inputs.
    torch.cuda.synchronize(q.device)
    tensors = dict(zip(("q", "k", "v", "o", "do", "lse", "dq", "dk", "dv"), map(torch_device_array, inputs + outputs)))
    run_bundle(bundle, device, tensors)
    return outputs


def torch_device_array(t) -> DeviceArray:
    """A torch CUDA tensor as the runtime's DeviceArray (same memory, strides in bytes; kept alive)."""
    return DeviceArray(t.data_ptr(), tuple(t.shape), tuple(s * t.element_size() for s in t.stride()),
                       STORAGE[_torch_dtype(t)], owner=t)


def _gqa_ratio(q, k) -> int:
    if q.ndim != 4 or k.ndim != 4 or k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise SpecError([Reason("k", f"q {tuple(q.shape)} and k {tuple(k.shape)} must be [batch, heads, seq, dim] "
                                     "with heads_q a multiple of heads_kv")])
    return q.shape[1] // k.shape[1]


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def torch_dtype_names() -> dict:
    """torch dtype -> our dtype name (torch is imported only when asked)."""
    import torch

    return {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}


def _torch_dtype(t) -> str:
    names = torch_dtype_names()
    if t.dtype not in names:
        raise SpecError([Reason("dtype", f"unsupported torch dtype {t.dtype}", "use float16, bfloat16 or float32")])
    return names[t.dtype]


def _to_numpy(t) -> np.ndarray:
    """A NumPy view of the data (torch tensors are copied to the host; bf16 becomes uint16 bits)."""
    if not _is_torch(t):
        return np.asarray(t)
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _like(reference, array: np.ndarray):
    """`array` as a torch tensor of `reference`'s dtype on its device."""
    import torch

    if reference.dtype == torch.bfloat16:
        tensor = torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(torch.bfloat16)
    else:
        tensor = torch.from_numpy(np.ascontiguousarray(array))
    return tensor.to(reference.device)
