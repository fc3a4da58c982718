"""attention(): a drop-in PyTorch attention whose forward is torch's and whose backward is ours."""
from __future__ import annotations

import torch

from ..errors import Reason, SpecError
from . import ops
from .forwards import ForwardCase, choose_forward
from .options import AttentionOptions, logical, options_of

DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def attention(q, k, v, *, mask="none", scale=None, bias=None, alibi_slopes=None, softcap=0.0, layout="bhsd",
              deterministic=False, bundle_dir=None, forward="auto", debug=False):
    """softmax(S) V with S = scale Q K^T (C tanh(. / C) with softcap=C) + bias, masked; returns out in
    the caller's layout, differentiable in q, k, v and a bias or slopes tensor that requires grad.

    layout: 'bhsd' ([B, H, S, D]) or 'bshd' ([B, S, H, D]); k, v may have fewer heads (GQA / MQA).
    mask: 'none', 'top_left', 'bottom_right', 'window:LEFT,RIGHT' or a Mask.
    bias: a tensor [Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk] in q's dtype (size-1 dims broadcast) or
    'alibi' (-slope_h |i + Sk - Sq - j|, the standard slopes or alibi_slopes [H] / [B, H] f32).
    forward: 'auto' or a name of fmha_mlir.torch.forwards.FORWARDS; bundle_dir: prebuilt bundles (prebuild).
    debug: on CUDA, our backward NaN-fills every buffer its kernels write before they run, so an element
    none writes shows up as NaN (a device synchronisation and host uploads per call: not for training).
    """
    options = options_of(q, mask=mask, scale=scale, bias=bias, softcap=softcap, layout=layout,
                         deterministic=deterministic, bundle_dir=bundle_dir, forward=forward,
                         alibi_slopes=alibi_slopes, debug=debug)
    bias_tensor = bias if isinstance(bias, torch.Tensor) else None
    _check_tensors(q, k, v, bias_tensor, alibi_slopes, options)
    choose_forward(ForwardCase.of(logical(q, layout), logical(k, layout), logical(v, layout), options))  # refuse early
    out, _ = ops.attention_forward(q, k, v, bias_tensor, alibi_slopes, *options.as_op_args())
    return out


def _check_tensors(q, k, v, bias, slopes, options: AttentionOptions) -> None:
    """Every reason q, k, v, the bias and the slopes do not fit together, with the fix."""
    order = "[batch, seq, heads, dim]" if options.layout == "bshd" else "[batch, heads, seq, dim]"
    reasons = [Reason(name, f"must be a rank-4 torch tensor {order} (got {_describe(x)})")
               for name, x in (("q", q), ("k", k), ("v", v)) if not (isinstance(x, torch.Tensor) and x.dim() == 4)]
    if reasons:
        raise SpecError(reasons)
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        reasons.append(Reason("dtype", f"q, k, v are {q.dtype}, {k.dtype}, {v.dtype}",
                              "use one of float16, bfloat16, float32 for all three"))
    if len({q.device, k.device, v.device}) != 1:
        reasons.append(Reason("device", f"q, k, v are on {q.device}, {k.device}, {v.device}", "put them on one device"))
    (b, hq, sq, d), (bk, hk, sk, dk), (bv, hv, sv, _) = (logical(x, options.layout).shape for x in (q, k, v))
    if (bk, hk, sk) != (bv, hv, sv) or dk != d or bk != b:
        reasons.append(Reason("k", f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not fit in "
                                   f"layout {options.layout!r}",
                              f"k and v {order} with q's batch, one seq length and heads; k's dim equal to q's"))
    elif hk == 0 or hq % hk:
        reasons.append(Reason("k", f"{hq} query heads are not a multiple of {hk} key/value heads",
                              "use heads_q = heads_kv x group size"))
    if bias is not None:
        full = (b, hq, sq, sk)
        fits = 2 <= bias.dim() <= 4 and all(n in (1, m) for n, m in zip(bias.shape[:-2], full[4 - bias.dim():2]))
        if not fits or tuple(bias.shape[-2:]) != (sq, sk) or bias.dtype != q.dtype or bias.device != q.device:
            reasons.append(Reason("bias", f"{bias.dtype} {tuple(bias.shape)} on {bias.device} does not fit scores "
                                          f"{full}", f"pass [Sq, Sk], [H, Sq, Sk] or [B, H, Sq, Sk] (1 broadcasts) "
                                                     f"in {q.dtype} on {q.device}"))
    if slopes is not None:
        if not (isinstance(slopes, torch.Tensor) and slopes.dtype == torch.float32 and slopes.device == q.device
                and tuple(slopes.shape) in ((hq,), (b, hq), (1, hq))):
            reasons.append(Reason("alibi_slopes", f"got {_describe(slopes)}",
                                  f"pass float32 [H] or [B, H] = [{hq}] or [{b}, {hq}] on {q.device}"))
    if reasons:
        raise SpecError(reasons)


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"{x.dtype} {tuple(x.shape)} on {x.device}"
    return type(x).__name__
