"""The two custom ops (namespace fmha_mlir): torch's forward with the lse, and our backward; what
torch.compile puts in its graphs (attention() calls them while it traces; eager calls skip the
dispatcher, attention.py says why).

Both take q, k, v, out and the gradients in the caller's layout and return contiguous tensors in it;
options: options.AttentionOptions.text(), checked by the op as by any entry point (call.checked_call).
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
from .options import logical, parse


def forward(call: Call, q, k, v, bias, slopes) -> tuple:
    """(out in the caller's layout, contiguous; lse [B, Hq, Sq] f32 in our convention)."""
    out, lse = call.run_forward(q, k, v, bias, slopes)
    return out.contiguous(), lse


@torch.library.custom_op("fmha_mlir::attention_forward", mutates_args=())
def attention_forward(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], alibi_slopes: Optional[Tensor],
                      options: str) -> tuple[Tensor, Tensor]:
    """(out in the caller's layout, lse [B, Hq, Sq] f32 in our convention)."""
    return forward(checked_call(options, q, k, v, bias, alibi_slopes), q, k, v, bias, alibi_slopes)


@attention_forward.register_fake
def _attention_forward_fake(q, k, v, bias, alibi_slopes, options):
    try:
        layout = parse(options).layout
    except SpecError:   # refused when it runs
        layout = "bhsd"
    rows = logical(q, layout).shape[:3] if q.dim() == 4 else (0, 0, 0)
    return q.new_empty(q.shape[:-1] + v.shape[-1:]), q.new_empty(rows, dtype=torch.float32)


@torch.library.custom_op("fmha_mlir::attention_backward", mutates_args=())
def attention_backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                       bias: Optional[Tensor], alibi_slopes: Optional[Tensor], options: str) -> list[Tensor]:
    """[dq, dk, dv] in the caller's layout, plus dbias or d(slopes) in their shape when options.dbias."""
    call = checked_call(options, q, k, v, bias, alibi_slopes)
    check_saved(call, q, out, grad_out, lse)
    return run_backward(call, grad_out, q, k, v, out, lse, bias, alibi_slopes)


@attention_backward.register_fake
def _attention_backward_fake(grad_out, q, k, v, out, lse, bias, alibi_slopes, options):
    grads = [torch.empty_like(x, memory_format=torch.contiguous_format) for x in (q, k, v)]
    given = bias if bias is not None else alibi_slopes
    try:
        dbias = parse(options).dbias and given is not None
    except SpecError:   # refused when it runs
        dbias = False
    return grads + ([torch.empty_like(given, memory_format=torch.contiguous_format)] if dbias else [])


_TENSOR_INPUTS = 5   # q, k, v, bias, alibi_slopes; the options string follows


def _setup_context(ctx, inputs, output):
    ctx.options = inputs[_TENSOR_INPUTS]
    ctx.save_for_backward(*inputs[:_TENSOR_INPUTS], *output)
    ctx.mark_non_differentiable(output[1])


def _backward(ctx, grad_out, grad_lse):
    q, k, v, bias, slopes, out, lse = ctx.saved_tensors
    grads = attention_backward(grad_out, q, k, v, out, lse, bias, slopes, ctx.options)
    return (*grads[:3], *bias_gradients(grads[3:], bias, slopes), None)


def bias_gradients(extra: list, bias, slopes) -> tuple:
    """(dbias, d(slopes)) from the backward's gradients past dq, dk, dv (at most one)."""
    return (extra[0] if extra and bias is not None else None, extra[0] if extra and slopes is not None else None)


attention_forward.register_autograd(_backward, setup_context=_setup_context)
