"""The two custom ops (namespace fmha_mlir): torch's forward with the lse, and our backward.

Both take q, k, v, out and the gradients in the caller's layout and return contiguous tensors in it (the
fake implementations promise exactly that, for torch.compile); inside they work on logical views.
No `from __future__ import annotations` here: torch.library reads the schemas from the annotations.
"""
from typing import Optional

import torch
from torch import Tensor

from .backward import backward_kwargs, backward_runner
from .forwards import run_forward
from .options import AttentionOptions, caller_layout, logical


@torch.library.custom_op("fmha_mlir::attention_forward", mutates_args=())
def attention_forward(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], alibi_slopes: Optional[Tensor],
                      options: str) -> tuple[Tensor, Tensor]:
    """(out in the caller's layout, lse [B, Hq, Sq] f32 in our convention). options: AttentionOptions
    .as_op_args(), the backward's included, so that setup_context can hand them on."""
    options = AttentionOptions.from_op_args(options)
    layout = options.layout
    out, lse = run_forward(logical(q, layout), logical(k, layout), logical(v, layout), bias, alibi_slopes, options)
    return caller_layout(out, layout).contiguous(), lse


@attention_forward.register_fake
def _attention_forward_fake(q, k, v, bias, alibi_slopes, options):
    batch, heads_q, seqlen_q, _ = logical(q, AttentionOptions.from_op_args(options).layout).shape
    return q.new_empty(q.shape[:-1] + v.shape[-1:]), q.new_empty((batch, heads_q, seqlen_q), dtype=torch.float32)


@torch.library.custom_op("fmha_mlir::attention_backward", mutates_args=())
def attention_backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                       bias: Optional[Tensor], alibi_slopes: Optional[Tensor], bias_grad: bool,
                       options: str) -> list[Tensor]:
    """[dq, dk, dv] in the caller's layout, plus dbias or d(slopes) in their shape when bias_grad."""
    options = AttentionOptions.from_op_args(options)
    layout = options.layout
    runner = backward_runner(q.device.type, q.device.index, options.bundle_dir, options.debug)
    # The kernels read rows of stride 1; out.sum()'s gradient is an expanded tensor (stride 0).
    grad_out = grad_out if grad_out.stride(-1) == 1 else grad_out.contiguous()
    views = (logical(x, layout) for x in (q, k, v, out, grad_out))
    grads = runner(*views, lse, **backward_kwargs(bias, alibi_slopes, options, bias_grad))
    # Contiguous in the caller's layout: no copy when the runner wrote them in the inputs' strides.
    return [caller_layout(g, layout).contiguous() for g in grads[:3]] + [g.contiguous() for g in grads[3:]]


@attention_backward.register_fake
def _attention_backward_fake(grad_out, q, k, v, out, lse, bias, alibi_slopes, bias_grad, *options):
    grads = [torch.empty_like(x, memory_format=torch.contiguous_format) for x in (q, k, v)]
    if bias_grad:
        source = bias if bias is not None else alibi_slopes
        grads.append(torch.empty_like(source, memory_format=torch.contiguous_format))
    return grads


_TENSOR_INPUTS = 5   # q, k, v, bias, alibi_slopes; the options follow


def _setup_context(ctx, inputs, output):
    ctx.options = inputs[_TENSOR_INPUTS:]
    ctx.save_for_backward(*inputs[:_TENSOR_INPUTS], *output)
    ctx.mark_non_differentiable(output[1])


def _backward(ctx, grad_out, grad_lse):
    q, k, v, bias, slopes, out, lse = ctx.saved_tensors
    bias_grad = bool(ctx.needs_input_grad[3] or ctx.needs_input_grad[4])
    grads = attention_backward(grad_out, q, k, v, out, lse, bias, slopes, bias_grad, *ctx.options)
    dbias = grads[3] if bias_grad and bias is not None else None
    dslopes = grads[3] if bias_grad and slopes is not None else None
    return (grads[0], grads[1], grads[2], dbias, dslopes) + (None,) * len(ctx.options)


attention_forward.register_autograd(_backward, setup_context=_setup_context)
