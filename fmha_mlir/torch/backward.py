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
from ..runtime.bound_plan import BoundPlans
from .bound_backward import BoundBackward, stride_key
from .call import BACKWARD_ARCH, Call, check_capturable, checked_call
from .options import PACKED, caller_layout, describe, logical


@functools.cache
def backward_runner(device_type: str, device_index: int | None, bundle_dir: str | None,
                    debug: bool = False) -> AttentionBackward:
    """The AttentionBackward of one device (it caches compiled bundles, so it lives as long as the process)."""
    if device_type == "cpu":
        return AttentionBackward(executor="cpu", arch=BACKWARD_ARCH["cpu"], bundle_dir=bundle_dir)
    if device_type == "cuda":
        return AttentionBackward(executor="cuda", device_index=device_index or 0, bundle_dir=bundle_dir,
                                 debug=debug)
    raise SpecError([Reason("device", f"our backward runs on CPU and CUDA tensors, not {device_type!r} ones",
                            "move the tensors to 'cuda' or 'cpu'")])


def run_backward(call: Call, grad_out, q, k, v, out, lse, bias, slopes, sinks=None, dlse=None, packing=None) -> list:
    """[dq, dk, dv] in the caller's layout (contiguous), plus dbias or d(slopes) in their shape when the
    call's spec has dbias, plus dsinks (in the sinks' dtype) with sinks. dlse: the returned lse's gradient,
    or None when none flows into it (the backward is then built without it). An empty call computes
    nothing: its gradients are zeros (dsinks too: no key, so D = 0, and dlse's term is the host's).
    A head dim no body computes runs padded (Call.padding): q and k, then v, out and dO get zero columns
    up to the spec's head dims (a zero column adds nothing to a score, to O or to D; its gradients are
    zeros), and dq, dk, dv are sliced back (one copy each). packing: packed sequences'
    varlen_forwards.Packing (the spec is then varlen), else None."""
    pad_q, pad_v = call.padding
    if not (pad_q or pad_v):
        return _run_backward(call, grad_out, q, k, v, out, lse, bias, slopes, sinks, dlse, packing)
    pad = torch.nn.functional.pad   # the head dim is last in every layout
    grads = _run_backward(call, pad(grad_out, (0, pad_v)), pad(q, (0, pad_q)), pad(k, (0, pad_q)),
                          pad(v, (0, pad_v)), pad(out, (0, pad_v)), lse, bias, slopes, sinks, dlse, packing)
    sizes = (call.case.hdim_q, call.case.hdim_q, call.case.hdim_v)
    return [g[..., :n].contiguous() for g, n in zip(grads[:3], sizes)] + list(grads[3:])


def _run_backward(call: Call, grad_out, q, k, v, out, lse, bias, slopes, sinks, dlse, packing) -> list:
    # The kernels read rows of stride 1; out.sum()'s gradient is an expanded tensor (stride 0).
    if grad_out.stride(-1) != 1:
        grad_out = grad_out.contiguous()
    # Packed sequences run through the runner, which binds a plan per geometry and max lengths itself.
    rows = sinks is not None or dlse is not None or packing is not None
    # A repeat CUDA call (never an empty one, nor in debug mode: neither is bound) runs its bound backward.
    bound = None if rows else call.bound.get(stride_key(grad_out, q, k, v, out, lse, bias, slopes))
    if bound is not None:
        return bound(q, k, v, out, grad_out, lse, bias, slopes)
    spec, layout = call.backward_spec(dlse is not None), call.options.layout
    given = bias if bias is not None else slopes
    if call.case.empty and not rows:
        return [torch.zeros_like(x, memory_format=torch.contiguous_format) for x in (q, k, v)] + (
            [torch.zeros_like(given)] if spec.dbias else [])
    check_capturable(call, q)
    runner = backward_runner(q.device.type, q.device.index, call.options.bundle_dir, call.options.debug)
    if q.is_cuda and not call.options.debug and not rows:
        tensors = (q, k, v, out, grad_out, lse, bias, slopes)
        bound = call.bound.setdefault(stride_key(grad_out, q, k, v, out, lse, bias, slopes),
                                      BoundBackward(_PLANS, runner, call, tensors))
        return bound(*tensors)
    views = [logical(x, layout) for x in (q, k, v, out, grad_out)]
    lengths = {} if packing is None else dict(zip(("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"),
                                                  packing))
    grads = runner.run(spec, *views, lse, bias=bias, alibi_slopes=slopes,
                       sinks=None if sinks is None else sinks.float().contiguous(),
                       dlse=None if dlse is None else dlse.contiguous(), **lengths)
    if sinks is not None:
        grads = [*grads[:-1], grads[-1].to(sinks.dtype)]
    # Contiguous in the caller's layout: no copy when the runner wrote them in the inputs' strides.
    return [caller_layout(g, layout).contiguous() for g in grads[:3]] + [g.contiguous() for g in grads[3:]]


# The plans the op binds, by bundle and geometry (a training loop: one per attention shape).
_PLANS = BoundPlans()


def prebuild(bundle_dir, q, k, v, *, arch: str = "sm_90", mask="none", scale: float | None = None, bias=None,
             alibi_slopes=None, softcap: float = 0.0, sinks=None, lse_grad: bool = False, layout: str = "bhsd",
             deterministic: bool = False, ptxas: str | None = None) -> Path:
    """Compile, where MLIR is installed, the bundle attention(q, k, v, ...) will look for under bundle_dir
    on the GPU machine; returns its path. q, k, v (and bias, alibi_slopes, sinks) may be meta tensors
    (torch.empty(shape, dtype=..., device="meta")); a bias or slopes tensor with requires_grad=True
    asks for the bundle that also computes its gradient, as attention() would; lse_grad: the bundle of a
    backward a gradient into the returned lse flows to (return_lse=True). layout='thd': the bundle of
    attention_varlen on packed q [total_q, Hq, D], k, v [total_k, Hkv, D] (one for any lengths). ptxas: a
    CUDA toolkit's, for a bundle with a cubin, which the GPU loads without JIT-compiling PTX first."""
    bias_tensor = bias if isinstance(bias, torch.Tensor) else None
    text = describe(mask, scale, softcap, None if bias_tensor is not None else bias,
                    any(t is not None and t.requires_grad for t in (bias_tensor, alibi_slopes)), layout,
                    deterministic, str(bundle_dir), "auto", False, lse_grad)
    cu_seqlens = (torch.empty(2, dtype=torch.int32, device=q.device),) * 2 if layout == PACKED else None
    spec = checked_call(text, q, k, v, bias_tensor, alibi_slopes, sinks, arch=arch,
                        cu_seqlens=cu_seqlens).backward_spec(lse_grad)
    path = bundle_path(bundle_dir, spec, arch)
    compiler = None
    if ptxas:
        from ..compiler import Compiler   # MLIR is imported only when something is compiled

        compiler = Compiler(ptxas=ptxas)
    compile_bundle(spec, arch, compiler).save(path)
    return path
