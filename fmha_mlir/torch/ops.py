"""The two custom ops (namespace fmha_mlir): torch's forward with the lse, and our backward; what
torch.compile puts in its graphs (attention() calls them while it traces; eager calls skip the
dispatcher, attention.py says why).

Both take q, k, v, out and the gradients in the caller's layout and return contiguous tensors in it;
options: options.AttentionOptions.text(), checked by the op as by any entry point (call.checked_call).
Packed sequences (attention_varlen, layout 'thd') add cu_seqlens_q, cu_seqlens_k and the max lengths
after the options (the lse is then [Hq, total_q]); padded calls leave them out.
The fake implementations refuse nothing: an error raised while torch.compile traces reaches the caller
wrapped in one of dynamo's, so a refused call is refused when the graph runs, by the op, with the error
eager mode gives, before its forward runs.
No `from __future__ import annotations` here: torch.library reads the schemas from the annotations.
"""
from typing import Optional

import torch
from torch import Tensor

from ..errors import SpecError
from .backward import run_backward
from .call import Call, check_saved, checked_call
from .options import PACKED, logical, parse
from .varlen_forwards import Packing


def forward(call: Call, q, k, v, bias, slopes, sinks=None, packing=None) -> tuple:
    """(out in the caller's layout, contiguous; lse [B, Hq, Sq] (packed: [Hq, total_q]) f32 in our
    convention, the sinks in it)."""
    out, lse = call.run_forward(q, k, v, bias, slopes, sinks, packing)
    return out.contiguous(), lse


def packing_of(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """The ops' trailing arguments as a varlen_forwards.Packing, or None for a padded call."""
    return None if cu_seqlens_q is None else Packing(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)


def _checked(options, q, k, v, bias, alibi_slopes, sinks, packing):
    return checked_call(options, q, k, v, bias, alibi_slopes, sinks,
                        cu_seqlens=None if packing is None else (packing.cu_seqlens_q, packing.cu_seqlens_k))


@torch.library.custom_op("fmha_mlir::attention_forward", mutates_args=())
def attention_forward(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], alibi_slopes: Optional[Tensor],
                      sinks: Optional[Tensor], options: str, cu_seqlens_q: Optional[Tensor] = None,
                      cu_seqlens_k: Optional[Tensor] = None, max_seqlen_q: int = 0,
                      max_seqlen_k: int = 0) -> tuple[Tensor, Tensor]:
    """(out in the caller's layout, lse [B, Hq, Sq] (packed: [Hq, total_q]) f32 in our convention); the
    lse has a gradient when the options say return_lse."""
    packing = packing_of(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    call = _checked(options, q, k, v, bias, alibi_slopes, sinks, packing)
    return forward(call, q, k, v, bias, alibi_slopes, sinks, packing)


@attention_forward.register_fake
def _attention_forward_fake(q, k, v, bias, alibi_slopes, sinks, options, cu_seqlens_q=None, cu_seqlens_k=None,
                            max_seqlen_q=0, max_seqlen_k=0):
    try:
        layout = parse(options).layout
    except SpecError:   # refused when it runs
        layout = "bhsd"
    if layout == PACKED:
        rows = (q.shape[1], q.shape[0]) if q.dim() == 3 else (0, 0)
    else:
        rows = logical(q, layout).shape[:3] if q.dim() == 4 else (0, 0, 0)
    return q.new_empty(q.shape[:-1] + v.shape[-1:]), q.new_empty(rows, dtype=torch.float32)


@torch.library.custom_op("fmha_mlir::attention_backward", mutates_args=())
def attention_backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                       bias: Optional[Tensor], alibi_slopes: Optional[Tensor], sinks: Optional[Tensor],
                       dlse: Optional[Tensor], options: str, cu_seqlens_q: Optional[Tensor] = None,
                       cu_seqlens_k: Optional[Tensor] = None, max_seqlen_q: int = 0,
                       max_seqlen_k: int = 0) -> list[Tensor]:
    """[dq, dk, dv] in the caller's layout, plus dbias or d(slopes) in their shape when options.dbias, plus
    dsinks with sinks; dlse: the lse's gradient, or None."""
    packing = packing_of(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    call = _checked(options, q, k, v, bias, alibi_slopes, sinks, packing)
    check_saved(call, q, out, grad_out, lse, dlse)
    return run_backward(call, grad_out, q, k, v, out, lse, bias, alibi_slopes, sinks, dlse, packing)


@attention_backward.register_fake
def _attention_backward_fake(grad_out, q, k, v, out, lse, bias, alibi_slopes, sinks, dlse, options, *packing):
    grads = [torch.empty_like(x, memory_format=torch.contiguous_format) for x in (q, k, v)]
    given = bias if bias is not None else alibi_slopes
    try:
        dbias = parse(options).dbias and given is not None
    except SpecError:   # refused when it runs
        dbias = False
    extra = ([given] if dbias else []) + ([sinks] if sinks is not None else [])
    return grads + [torch.empty_like(x, memory_format=torch.contiguous_format) for x in extra]


_TENSOR_INPUTS = 6   # q, k, v, bias, alibi_slopes, sinks; the options string follows, then the packing


def _setup_context(ctx, inputs, output):
    ctx.options = inputs[_TENSOR_INPUTS]
    ctx.max_seqlens = inputs[_TENSOR_INPUTS + 3:]
    ctx.save_for_backward(*inputs[:_TENSOR_INPUTS], *output, *inputs[_TENSOR_INPUTS + 1:_TENSOR_INPUTS + 3])
    if not _returns_lse(ctx.options):   # no lse gradient, and no dlse in the backward
        ctx.mark_non_differentiable(output[1])


def _returns_lse(options: str) -> bool:
    try:
        return parse(options).return_lse
    except SpecError:   # (while torch.compile traces) refused when the op runs
        return False


def _backward(ctx, grad_out, grad_lse):
    q, k, v, bias, slopes, sinks, out, lse, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
    dlse = grad_lse if _returns_lse(ctx.options) else None
    grads = attention_backward(grad_out, q, k, v, out, lse, bias, slopes, sinks, dlse, ctx.options, cu_seqlens_q,
                               cu_seqlens_k, *ctx.max_seqlens)
    return (*split_gradients(grads, bias, slopes, sinks), None, None, None, None, None)


def split_gradients(grads: list, bias, slopes, sinks) -> tuple:
    """(dq, dk, dv, dbias, d(slopes), dsinks) from the backward's gradients (None for those it has not)."""
    dsinks = grads[-1] if sinks is not None else None
    extra = grads[3:len(grads) - (sinks is not None)]
    return (*grads[:3], extra[0] if extra and bias is not None else None,
            extra[0] if extra and slopes is not None else None, dsinks)


attention_forward.register_autograd(_backward, setup_context=_setup_context)
