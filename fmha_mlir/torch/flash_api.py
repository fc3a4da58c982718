"""FlashAttention-2's Python API on our attention: a flash_attn user swaps one import.

    from fmha_mlir.torch.flash_api import flash_attn_func   # was: from flash_attn import flash_attn_func

The signatures and semantics are flash_attn's (2.6+): q, k, v [batch, seqlen, heads, head dim] (bshd;
k, v may have fewer heads), causal aligned bottom-right (query i sees keys j <= i + seqlen_k - seqlen_q),
window_size = (left, right) with -1 unbounded and a size >= seqlen_k unbounded, softcap (0: off),
alibi_slopes [heads] or [batch, heads] f32 (bias -slope |i + seqlen_k - seqlen_q - j|), deterministic,
softmax_scale (None: 1/sqrt(head dim)), return_attn_probs -> (out, softmax_lse [batch, heads, seqlen_q]
f32, None). flash_attn_varlen_func: packed q [total_q, heads, d], k, v [total_k, heads_k, d] with int32
cu_seqlens (attention_varlen), causal and windows per sequence, softmax_lse [heads, total_q].
One keyword beyond flash_attn's: bundle_dir, prebuilt bundles (attention()'s). What we do not do is an
error naming it: dropout (dropout_p > 0), a paged KV cache (block_table), the attention probabilities
(the third value is always None); for packed sequences also alibi_slopes and deterministic=True (the
varlen backward has neither).
"""
from __future__ import annotations

from ..errors import Reason, SpecError
from .attention import attention, attention_varlen


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, bundle_dir=None):
    """out [batch, seqlen_q, heads, head dim] of q [batch, seqlen_q, heads, d], k, v [batch, seqlen_k,
    heads_k, d] (heads a multiple of heads_k); (out, softmax_lse, None) with return_attn_probs."""
    _refuse_dropout(dropout_p)
    mask = flash_mask(causal, window_size, q.shape[1], k.shape[1])
    result = attention(q, k, v, mask=mask, scale=softmax_scale, softcap=softcap,
                       bias="alibi" if alibi_slopes is not None else None, alibi_slopes=alibi_slopes,
                       layout="bshd", deterministic=deterministic, return_lse=bool(return_attn_probs),
                       bundle_dir=bundle_dir)
    return (*result, None) if return_attn_probs else result


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                              bundle_dir=None):
    """flash_attn_func of qkv [batch, seqlen, 3, heads, d] (views of it: no copy)."""
    q, k, v = qkv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs, bundle_dir=bundle_dir)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                             bundle_dir=None):
    """flash_attn_func of q and kv [batch, seqlen_k, 2, heads_k, d] (views of it: no copy)."""
    k, v = kv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs, bundle_dir=bundle_dir)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *, bundle_dir=None):
    """out [total_q, heads, head dim] of packed q [total_q, heads, d], k, v [total_k, heads_k, d] and int32
    cu_seqlens [batch + 1]; (out, softmax_lse [heads, total_q], None) with return_attn_probs. causal and
    window_size align bottom-right per sequence; a window size >= max_seqlen_k is unbounded."""
    _refuse_dropout(dropout_p)
    if block_table is not None:
        raise SpecError([Reason("block_table", "a paged KV cache is not implemented",
                                "pass k and v packed [total_k, heads_k, dim] and block_table=None")])
    mask = flash_mask(causal, window_size, max_seqlen_q, max_seqlen_k)
    result = attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, mask=mask,
                              scale=softmax_scale, softcap=softcap, bias="alibi" if alibi_slopes is not None else None,
                              alibi_slopes=alibi_slopes, deterministic=deterministic,
                              return_lse=bool(return_attn_probs), bundle_dir=bundle_dir)
    return (*result, None) if return_attn_probs else result


def flash_mask(causal: bool, window_size, seqlen_q: int, seqlen_k: int) -> str:
    """flash_attn's causal and window_size as our mask: causal sets the right size to 0; a size < 0 or
    >= seqlen_k is unbounded; unbounded left with right 0 is bottom-right causal."""
    if not (isinstance(window_size, (tuple, list)) and len(window_size) == 2
            and all(isinstance(s, int) and not isinstance(s, bool) for s in window_size)):
        raise SpecError([Reason("window_size", f"must be a pair of ints (left, right) (got {window_size!r})",
                                "use (-1, -1) for no window")])
    left, right = window_size
    if causal:
        right = 0
    left, right = (-1 if size < 0 or size >= seqlen_k else size for size in (left, right))
    if left < 0 and right < 0:
        return "none"
    if left < 0 and right == 0:
        return "bottom_right"
    return f"window:{left},{right}"


def _refuse_dropout(dropout_p) -> None:
    if dropout_p:
        raise SpecError([Reason("dropout_p", f"dropout is not implemented (got {dropout_p!r})",
                                "use dropout_p=0.0 (e.g. model.eval(), or attention_dropout=0 in the config)")])
