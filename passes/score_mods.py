"""Score modifications every body applies the same way (issue 9): softcap.

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

from .ir_builders import f32, splat, vector_shape

LOG2_E = math.log2(math.e)


def softmax_input(dot: "ir.Value", spec: AttentionBwdSpec) -> tuple["ir.Value", float]:
    """(value, factor) with value * factor = the score times log2(e), what exp2 and fmha.masked_score
    take: (dot, scale log2 e) without softcap, (c tanh(scale dot / c), log2 e) with it."""
    if not spec.softcap:
        return dot, spec.scale * LOG2_E
    return arith.mulf(_tanh(dot, spec), _constant(spec.softcap, dot)), LOG2_E


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
