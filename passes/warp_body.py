"""The warp body (docs/ir.md level 4): dq_dk_dv as one wave of W lanes per (query row, head, batch),
the seeds' reference design; its row stages are the shared row kernels. Lane t owns head-dim elements
[t * E, (t + 1) * E), E = hdim / W. Everything is accumulated in f32.
"""
from __future__ import annotations

from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import arith, ir, memref, scf
from fmha_mlir.spec import AttentionBwdSpec

from .ir_builders import dims, f32, index
from .key_range import key_range
from .lane_slice import load_f32, store_from_f32
from .row_kernels import Wave, dot, fma
from .score_mods import LOG2_E, alibi_bias, alibi_slope, softcap_grad, softmax_input


def dq_dk_dv(op: "ir.Operation", spec: AttentionBwdSpec, wave: Wave) -> None:
    """One loop over the keys this row sees: dV and dK by atomics, the dQ row in registers.

    D from dot_do_o equals rowsum(P * dP), so one pass over the keys suffices.
    """
    q, k, v, do, lse, d, dq_out, dk_out, dv_out = op.operands
    row = wave.indices
    q_slice, v_slice = wave.slice_of(q), wave.slice_of(v)
    q_lane = load_f32(q, row, q_slice)
    do_lane = load_f32(do, row, v_slice)
    lse_log2 = arith.mulf(memref.load(lse, row), f32(LOG2_E))
    d_row = memref.load(d, row)
    kv_head = wave.head if spec.gqa_ratio == 1 else arith.divui(wave.head, index(spec.gqa_ratio))
    seqlen_q, = dims(q, [2])
    seqlen_k, = dims(k, [2])
    first_key, end_key = key_range(spec.mask, wave.row, seqlen_q, seqlen_k)
    scale = f32(spec.scale)
    slope = alibi_slope(wave.head, dims(q, [1])[0]) if spec.bias == "alibi" else None

    dk_columns, dv_columns = q_slice.elements(), v_slice.elements()

    loop = scf.ForOp(first_key, end_key, index(1), [f32(0.0)] * q_slice.width)
    with ir.InsertionPoint(loop.body):
        key = loop.induction_variable
        kv_row = [wave.batch, kv_head, key]
        k_lane = load_f32(k, kv_row, q_slice)
        v_lane = load_f32(v, kv_row, v_slice)
        qk = fmha.WaveReduceOp.build(dot(q_lane, k_lane), wave.size)
        alibi = None if slope is None else alibi_bias(slope, wave.row, key, seqlen_q, seqlen_k, qk)
        pre, factor = softmax_input(qk, spec, alibi)
        score = fmha.MaskedScoreOp.build(pre, wave.row, key, seqlen_q, seqlen_k, spec.mask, factor)
        p = fmha.Exp2Op.build(arith.subf(score, lse_log2))
        dp = fmha.WaveReduceOp.build(dot(do_lane, v_lane), wave.size)
        ds = arith.mulf(arith.mulf(p, arith.subf(dp, d_row)), scale)
        ds = softcap_grad(ds, qk, spec)
        for x, column in zip(do_lane, dv_columns):
            fmha.AtomicAddOp.build(arith.mulf(p, x), dv_out, kv_row + [column])
        for x, column in zip(q_lane, dk_columns):
            fmha.AtomicAddOp.build(arith.mulf(ds, x), dk_out, kv_row + [column])
        scf.yield_([fma(ds, k_e, dq_e) for k_e, dq_e in zip(k_lane, loop.inner_iter_args)])
    store_from_f32(list(loop.results), dq_out, row, q_slice)


