"""attention(): a drop-in PyTorch attention whose forward is torch's and whose backward is ours.

Eager calls run an autograd.Function straight on the checked Call: a custom op's eager call goes through
the dispatcher twice per op and torch's custom-op autograd wrapper (argument defaults, aliasing checks,
a dynamo-disabled frame), most of a step's host time. While torch.compile traces, the call is the custom
ops (ops.py), which it needs to see. Both run the same forward and backward code; eager calls return out
in the strides torch's forward gives it (BSHD storage behind a BHSD view of a fused qkv projection:
no copy), the op contiguous in the caller's layout, as its fake implementation says.
"""
from __future__ import annotations

import functools

import torch

from ..errors import Reason, SpecError
from . import ops
from .backward import run_backward
from .call import Call, checked_call
from .options import PACKED, describe
from .varlen_forwards import Packing


def attention(q, k, v, *, mask="none", scale=None, bias=None, alibi_slopes=None, softcap=0.0, sinks=None,
              return_lse=False, layout="bhsd", deterministic=False, bundle_dir=None, forward="auto", debug=False):
    """softmax(S) V with S = scale Q K^T (C tanh(. / C) with softcap=C) + bias, masked; returns out in
    the caller's layout, differentiable in q, k, v and a bias, slopes or sinks tensor that requires grad.

    layout: 'bhsd' ([B, H, S, D]) or 'bshd' ([B, S, H, D]); k, v may have fewer heads (GQA / MQA).
    mask: 'none', 'top_left', 'bottom_right', 'window:LEFT,RIGHT' or a Mask.
    bias: a tensor [Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk] in q's dtype (size-1 dims broadcast) or
    'alibi' (-slope_h |i + Sk - Sq - j|, the standard slopes or alibi_slopes [H] / [B, H] f32).
    sinks: learnable attention sinks (gpt-oss), a tensor [Hq] (f32 or q's dtype) of per-head logits in
    every row's softmax denominator: torch's forward, then lse = logaddexp(lse', sink), O = exp(lse' -
    lse) O'; the backward gives d(sinks) in the sinks' dtype.
    return_lse: return (out, lse), lse [B, Hq, Sq] f32 (natural log, the sinks included; +inf for a row
    that sees no key and has no sink), differentiable: a gradient into it reaches q, k, v and the sinks
    (ring attention merges partial results through it). An lse no gradient flows into costs nothing
    (eager; under torch.compile the backward takes a zero dlse).
    Head dims: any up to 256, q and k's apart from v's. One no body computes (today: not a multiple of
    32) costs a padded backward: the forward is torch's at the caller's head dims, then the backward
    copies q, k (to the next head dim a body computes) and v, out, dO (likewise) with zero columns, runs
    at the padded head dims and copies dq, dk, dv back out: the kernels' work and the copies' bytes grow
    by padded / given (40 -> 64: 1.6x; 80 -> 96: 1.2x; 59 -> 64: 1.08x; 16 -> 32: 2x), plus the 8 copies.
    scale stays 1/sqrt(the caller's head dim) unless given.
    forward: 'auto' or a name of fmha_mlir.torch.forwards.FORWARDS; bundle_dir: prebuilt bundles (prebuild).
    debug: on CUDA, our backward NaN-fills every buffer its kernels write before they run, so an element
    none writes shows up as NaN (a device synchronisation and host uploads per call: not for training).
    Everything the backward would refuse is refused before the forward runs (SpecError, with the fix).
    """
    return _attend(q, k, v, None, mask, scale, bias, alibi_slopes, softcap, sinks, return_lse, layout, deterministic,
                   bundle_dir, forward, debug)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, mask="none", scale=None,
                     bias=None, alibi_slopes=None, softcap=0.0, sinks=None, return_lse=False, deterministic=False,
                     bundle_dir=None, forward="auto", debug=False):
    """attention() of packed sequences (FlashAttention's varlen layout): q [total_q, Hq, D], k, v
    [total_k, Hkv, D] hold the sequences one after another; cu_seqlens_q / cu_seqlens_k (int32 [batch +
    1], on q's device) are their prefix sums, sequence b being q[cu_seqlens_q[b]:cu_seqlens_q[b + 1]]
    (a length may be 0); max_seqlen_q / max_seqlen_k (ints) bound the lengths. Returns out [total_q,
    Hq, Dv], with return_lse (out, lse [Hq, total_q] f32, +inf on a row that sees no key and has no sink).

    Each sequence has its own mask (bottom_right and windows align to its own lengths) and its own ALiBi
    (bias='alibi', the standard slopes); the other options are attention()'s. Not for packed sequences:
    a bias or slopes tensor and deterministic mode (the varlen backward has neither: refused, with the
    fix, before the forward runs). The forward: on CUDA torch's FlashAttention-2 varlen forward where it
    serves (f16/bf16, no top-left causal, no ALiBi or softcap: varlen_forwards.FORWARDS_VARLEN), else each
    sequence through plain torch (which reads cu_seqlens on the host: a device sync on CUDA). CPU
    cu_seqlens are checked against the packed tensors and the max lengths; CUDA ones are trusted, as
    FlashAttention trusts them.
    """
    return _attend(q, k, v, (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k), mask, scale, bias,
                   alibi_slopes, softcap, sinks, return_lse, PACKED, deterministic, bundle_dir, forward, debug)


def _attend(q, k, v, packing, mask, scale, bias, alibi_slopes, softcap, sinks, return_lse, layout, deterministic,
            bundle_dir, forward, debug):
    """attention()'s and attention_varlen()'s call: packing (cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    max_seqlen_k) for packed sequences, else None."""
    bias_tensor = bias if isinstance(bias, torch.Tensor) else None
    # (no generator expressions here: torch.compile traces this function, and older dynamos refuse them)
    wanted = torch.is_grad_enabled() and ((bias_tensor is not None and bias_tensor.requires_grad) or (
        isinstance(alibi_slopes, torch.Tensor) and alibi_slopes.requires_grad))
    described = (mask, scale, softcap, None if bias_tensor is not None else bias, wanted, layout, deterministic,
                 bundle_dir, forward, debug, return_lse)
    if torch.compiler.is_compiling():   # traced: no cache (dynamo would trace hash())
        out, lse = ops.attention_forward(q, k, v, bias_tensor, alibi_slopes, sinks, describe(*described),
                                         *(packing or ()))
        return (out, lse) if return_lse is True else out
    try:
        text = _described(*described)
    except TypeError:   # an unhashable argument (a list for the mask): described uncached, then refused
        text = describe(*described)
    cu_seqlens = None if packing is None else packing[:2]
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
            and (alibi_slopes is None or isinstance(alibi_slopes, torch.Tensor))
            and (sinks is None or isinstance(sinks, torch.Tensor))
            and (cu_seqlens is None or (isinstance(cu_seqlens[0], torch.Tensor)
                                        and isinstance(cu_seqlens[1], torch.Tensor)))):
        _refuse_non_tensors(q, k, v, alibi_slopes, sinks, cu_seqlens)
    call = checked_call(text, q, k, v, bias_tensor, alibi_slopes, sinks, cu_seqlens=cu_seqlens)
    packing = None if packing is None else Packing(*packing)
    if torch._C._are_functorch_transforms_active():   # Function.apply's path for them
        return _Attention.apply(q, k, v, bias_tensor, alibi_slopes, sinks, call, packing)
    # Function.apply's eager path without its Python layers: dead functorch wrappers unwrapped, then the
    # C apply (~35% of apply's host time, a dozen Python calls per step)
    unwrap = torch._C._functorch.unwrap_if_dead
    return _APPLY(unwrap(q), unwrap(k), unwrap(v), None if bias_tensor is None else unwrap(bias_tensor),
                  None if alibi_slopes is None else unwrap(alibi_slopes), None if sinks is None else unwrap(sinks),
                  call, packing)


# A training loop passes the same keyword arguments at every call; typed: True and 1 are told apart.
_described = functools.lru_cache(maxsize=256, typed=True)(describe)


def _refuse_non_tensors(q, k, v, alibi_slopes, sinks, cu_seqlens=None) -> None:
    """SpecError naming the first of q, k, v, the slopes, the sinks and cu_seqlens (when packed) that is
    not a tensor (the slopes and sinks may be None)."""
    named = [("q", q), ("k", k), ("v", v), ("alibi_slopes", alibi_slopes), ("sinks", sinks)]
    if cu_seqlens is not None:
        named += [("cu_seqlens_q", cu_seqlens[0]), ("cu_seqlens_k", cu_seqlens[1])]
    for name, x in named:
        if not (isinstance(x, torch.Tensor) or (x is None and name in ("alibi_slopes", "sinks"))):
            raise SpecError([Reason(name, f"must be a torch tensor (got {type(x).__name__})")])


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, slopes, sinks, call: Call, packing):
        # out in the strides the forward gives (the custom op's contiguous copy is for compile's fake)
        out, lse = call.run_forward(q, k, v, bias, slopes, sinks, packing)
        ctx.call, ctx.packing = call, packing
        ctx.save_for_backward(q, k, v, bias, slopes, sinks, out, lse)
        if not call.options.return_lse:
            return out
        ctx.set_materialize_grads(False)   # an lse no gradient flows into: None, and no dlse
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse=None):
        q, k, v, bias, slopes, sinks, out, lse = ctx.saved_tensors
        if grad_out is None:   # only the lse is used
            grad_out = torch.zeros_like(out)
        grads = run_backward(ctx.call, grad_out, q, k, v, out, lse, bias, slopes, sinks, grad_lse, ctx.packing)
        return (*ops.split_gradients(grads, bias, slopes, sinks), None, None)


_APPLY = super(torch.autograd.Function, _Attention).apply   # torch._C._FunctionBase.apply, bound to _Attention
