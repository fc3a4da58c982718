"""Varlen (packed sequences): the facts every layer shares, without MLIR (the runtime imports it).

A varlen problem packs its sequences along one token axis (FlashAttention's varlen layout):
q, o, do, dq are [total_q, heads_q, D], k, v, dk, dv [total_k, heads_kv, D], lse [heads_q, total_q]
(FlashAttention varlen's convention: the token axis stays the contiguous one, as seqlen_q is in the
padded [B, H, Sq]), and cu_seqlens_q / cu_seqlens_k are int32 [batch + 1] prefix sums. The max lengths
are scalars the caller passes (host arguments `max_seqlen_q` / `max_seqlen_k`): they size the grids and
the workspaces, which stay padded per batch ([B, H, max_seqlen, D]: indexed by the grid's batch
coordinate, no per-sequence offsets).

The bodies do not change: at the top of each kernel every packed operand becomes a rank-4 view of its
sequence (passes/varlen_views.py): [batch, heads, length, D] with batch stride 0 and offset
cu_seqlens[b] * stride_token, so the bodies' [b, h, s, d] index math and their `memref.dim` of the
sequence length read the sequence's own values. This module translates the bodies' size expressions
over the logical rank-4 operands into expressions over the packed ones.
"""
from __future__ import annotations

from .shape_expr import Arg, BinOp, Dim, Expr

CU_SEQLENS = ("cu_seqlens_q", "cu_seqlens_k")
MAX_SEQLENS = ("max_seqlen_q", "max_seqlen_k")
# Packed problem operands: which sequence side they follow and their logical (rank-4 / rank-3) rank.
PACKED_SIDES = {"q": "q", "o": "q", "do": "q", "dq": "q", "lse": "q", "dlse": "q",
                "k": "k", "v": "k", "dk": "k", "dv": "k"}
# Stage operands that are packed when their value is (the accumulating ones may be padded workspaces).
STAGE_SIDES = {**PACKED_SIDES, "dq_out": "q", "dk_out": "k", "dv_out": "k"}
PACKED_DIMS = {
    "q": ("total_q", "heads_q", "hdim_q"), "k": ("total_k", "heads_kv", "hdim_q"),
    "v": ("total_k", "heads_kv", "hdim_v"), "o": ("total_q", "heads_q", "hdim_v"),
    "do": ("total_q", "heads_q", "hdim_v"), "lse": ("heads_q", "total_q"), "dlse": ("heads_q", "total_q"),
    "dq": ("total_q", "heads_q", "hdim_q"), "dk": ("total_k", "heads_kv", "hdim_q"),
    "dv": ("total_k", "heads_kv", "hdim_v"),
    "cu_seqlens_q": ("batch_plus_1",), "cu_seqlens_k": ("batch_plus_1",),
}


def batch() -> Expr:
    """The number of sequences: cu_seqlens_q has one entry more."""
    return BinOp("sub", Dim("cu_seqlens_q", 0), 1)


def packed_expr(expr: Expr, sides: dict[str, str]) -> Expr:
    """`expr` over logical operands -> the same size over packed ones. `sides` names the packed
    operands (name -> "q" | "k"); a rank-4 tensor's [B, H, S, D] is packed [T, H, D], lse's [B, H, S]
    is [H, T]: batch comes from cu_seqlens, S from the side's max length."""
    if isinstance(expr, BinOp):
        return BinOp(expr.op, packed_expr(expr.lhs, sides), packed_expr(expr.rhs, sides))
    if not isinstance(expr, Dim) or expr.buffer not in sides:
        return expr
    if expr.index == 0:
        return batch()
    if expr.index == 2:
        return Arg(f"max_seqlen_{sides[expr.buffer]}")
    if expr.buffer in ("lse", "dlse"):    # [H, T]
        return Dim(expr.buffer, 0)
    return Dim(expr.buffer, {1: 1, 3: 2}[expr.index])   # [T, H, D]


def check_cu_seqlens(cu_q, cu_k, total_q: int, total_k: int, max_q: int, max_k: int) -> str | None:
    """Why host cu_seqlens arrays do not describe the packed tensors, or None: each starts at 0,
    never decreases, ends at the tensor's token count, and no length exceeds the max length given."""
    for name, cu, total, most in (("cu_seqlens_q", cu_q, total_q, max_q), ("cu_seqlens_k", cu_k, total_k, max_k)):
        values = [int(x) for x in cu]
        lengths = [b - a for a, b in zip(values, values[1:])]
        if values[0] != 0 or values[-1] != total or min(lengths) < 0:
            return (f"{name} = {values} must start at 0, never decrease and end at the packed tensors' token "
                    f"count {total}")
        if max(lengths) > most:
            side = name[-1]
            return f"{name} has a sequence of {max(lengths)} tokens, but max_seqlen_{side} is {most}"
    return None
