"""Score modifications every body applies the same way (issue 9): softcap and ALiBi.

ALiBi (bias = "alibi") adds -slope_h |q + Sk - Sq - k| after the softcap (FlashAttention's order and
bottom-right alignment; oracle.alibi_bias), with the standard geometric slopes slope_h = 2^(-8 (h + 1) /
H) of query head h of H computed in the kernel: no bias tensor is read, and dS is unchanged.

With softcap c > 0 a score is s = c tanh(x / c), x = scale q.k, before the mask and the softmax; the
backward multiplies dS by ds/dx = 1 - tanh^2(x / c) (the products then apply `scale` as without it).
tanh comes from fmha.exp2, which every target has (AMD has no math.tanh without ROCm's device
libraries): tanh(y) = 1 - 2 / (2^(2 y log2 e) + 1), saturating to +-1 as 2^... goes to inf or 0. The
gate's same-dtype reference computes tanh by the same formula in f32 (oracle.kernel_tanh).
"""
from __future__ import annotations

import math

from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import arith, ir
from fmha_mlir.spec import AttentionBwdSpec

from .ir_builders import f32, index, splat, vector_shape

LOG2_E = math.log2(math.e)


def softmax_input(dot: "ir.Value", spec: AttentionBwdSpec, alibi: "ir.Value | None" = None
                  ) -> tuple["ir.Value", float]:
    """(value, factor) with value * factor = the score times log2(e), what exp2 and fmha.masked_score
    take: (dot, scale log2 e) without softcap or ALiBi, else (s, log2 e) with s = scale dot or
    c tanh(scale dot / c), plus the ALiBi term `alibi` (alibi_bias) when given."""
    if not spec.softcap and alibi is None:
        return dot, spec.scale * LOG2_E
    score = (arith.mulf(_tanh(dot, spec), _constant(spec.softcap, dot)) if spec.softcap
             else arith.mulf(dot, _constant(spec.scale, dot)))
    return (score if alibi is None else arith.addf(score, alibi)), LOG2_E


def alibi_slope(head: "ir.Value", heads: "ir.Value") -> "ir.Value":
    """2^(-8 (head + 1) / heads) (f32) for query head `head` of `heads` (index values)."""
    h = arith.sitofp(ir.F32Type.get(), arith.index_cast(ir.IntegerType.get_signless(32), arith.addi(head, index(1))))
    n = arith.sitofp(ir.F32Type.get(), arith.index_cast(ir.IntegerType.get_signless(32), heads))
    return fmha.Exp2Op.build(arith.divf(arith.mulf(h, f32(-8.0)), n))


def alibi_bias(slope: "ir.Value", q_pos, k_pos, seqlen_q, seqlen_k, like: "ir.Value") -> "ir.Value":
    """-slope |q + Sk - Sq - k|, shaped like `like` (positions index or vector<N x index>)."""
    shape = vector_shape(like.type)
    q_pos, k_pos, seqlen_q, seqlen_k = (splat(v, shape) for v in (q_pos, k_pos, seqlen_q, seqlen_k))
    distance = arith.subi(arith.addi(q_pos, arith.subi(seqlen_k, seqlen_q)), k_pos)
    distance = arith.maxsi(distance, arith.subi(splat(index(0), shape), distance))
    i32 = ir.IntegerType.get_signless(32)
    as_i32 = arith.index_cast(ir.VectorType.get(shape, i32) if shape else i32, distance)
    as_f32 = arith.sitofp(like.type, as_i32)
    return arith.mulf(as_f32, splat(arith.negf(slope), shape))


def softcap_grad(ds: "ir.Value", dot: "ir.Value", spec: AttentionBwdSpec) -> "ir.Value":
    """dS times 1 - tanh^2(scale dot / c) (dS itself without softcap)."""
    if not spec.softcap:
        return ds
    t = _tanh(dot, spec)
    return arith.mulf(ds, arith.subf(_constant(1.0, dot), arith.mulf(t, t)))


def _tanh(dot: "ir.Value", spec: AttentionBwdSpec) -> "ir.Value":
    """tanh(scale dot / c) = 1 - 2 / (2^(dot 2 scale log2(e) / c) + 1); 2^... = inf gives 1 - 0."""
    e = fmha.Exp2Op.build(arith.mulf(dot, _constant(2 * spec.scale * LOG2_E / spec.softcap, dot)))
    one = _constant(1.0, dot)
    # afn: the division as the hardware's approximate reciprocal (div.approx / v_rcp_f32, ~1 ulp) instead
    # of IEEE division, a ~10-instruction sequence per element on sm_90: the softcap cost falls from 31%
    # to 13% (tools/reports/bench_notes.md, softcap v1-v3, with what it costs in accuracy).
    fast = ir.Attribute.parse("#arith.fastmath<afn>")
    return arith.subf(one, arith.divf(_constant(2.0, dot), arith.addf(e, one), fastmath=fast))


def _constant(value: float, like: "ir.Value") -> "ir.Value":
    return splat(f32(value), vector_shape(like.type))
