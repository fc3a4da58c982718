"""Our backward for torch tensors: one AttentionBackward per device, and the bundles it will look for.

CPU tensors run the sm_90 bundle in the interpreter (the bundle the CUDA path launches; wave32 also
takes head dims gfx942's wave64 bodies do not), CUDA tensors launch it on the GPU.
"""
from __future__ import annotations

import functools
from pathlib import Path

import torch

from ..api import AttentionBackward, bundle_path, compile_bundle
from ..errors import Reason, SpecError
from .options import AttentionOptions, logical, options_of

INTERPRETED_ARCH = "sm_90"


@functools.cache
def backward_runner(device_type: str, device_index: int | None, bundle_dir: str | None,
                    debug: bool = False) -> AttentionBackward:
    """The AttentionBackward of one device (it caches compiled bundles, so it lives as long as the process)."""
    if device_type == "cpu":
        return AttentionBackward(executor="cpu", arch=INTERPRETED_ARCH, bundle_dir=bundle_dir)
    if device_type == "cuda":
        return AttentionBackward(executor="cuda", device_index=device_index or 0, bundle_dir=bundle_dir,
                                 debug=debug)
    raise SpecError([Reason("device", f"our backward runs on CPU and CUDA tensors, not {device_type!r} ones",
                            "move the tensors to 'cuda' or 'cpu'")])


def backward_kwargs(bias, slopes, options: AttentionOptions, bias_grad: bool) -> dict:
    """The keyword arguments of AttentionBackward's call (and spec_for) for these options."""
    return dict(mask=options.mask, scale=options.scale, softcap=options.softcap,
                bias="alibi" if options.bias == "alibi" and slopes is None else bias, alibi_slopes=slopes,
                dbias=bias_grad, deterministic=options.deterministic)


def spec_of(runner: AttentionBackward, q, k, v, bias, slopes, options: AttentionOptions, bias_grad: bool):
    """The spec our backward compiles for logical [B, H, S, D] q, k, v and these options."""
    return runner.spec_for(q, k, v, **backward_kwargs(bias, slopes, options, bias_grad))


def prebuild(bundle_dir, q, k, v, *, arch: str = "sm_90", mask="none", scale: float | None = None, bias=None,
             alibi_slopes=None, softcap: float = 0.0, layout: str = "bhsd", deterministic: bool = False) -> Path:
    """Compile, where MLIR is installed, the bundle attention(q, k, v, ...) will look for under bundle_dir
    on the GPU machine; returns its path. q, k, v (and bias, alibi_slopes) may be meta tensors
    (torch.empty(shape, dtype=..., device="meta")); a bias or slopes tensor with requires_grad=True
    asks for the bundle that also computes its gradient, as attention() would."""
    options = options_of(q, mask=mask, scale=scale, bias=bias, softcap=softcap, layout=layout,
                         deterministic=deterministic, bundle_dir=str(bundle_dir), forward="auto",
                         alibi_slopes=alibi_slopes)
    bias_tensor = bias if isinstance(bias, torch.Tensor) else None
    bias_grad = any(t is not None and t.requires_grad for t in (bias_tensor, alibi_slopes))
    q, k, v = (logical(x, layout) for x in (q, k, v))
    spec = spec_of(AttentionBackward(arch=arch), q, k, v, bias_tensor, alibi_slopes, options, bias_grad)
    path = bundle_path(bundle_dir, spec, arch)
    compile_bundle(spec, arch).save(path)
    return path
