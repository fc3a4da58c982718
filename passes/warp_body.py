"""The warp body (docs/ir.md level 4): dq_dk_dv as one wave of W lanes per (query row, head, batch),
the simplest body, for every dtype; its row stages are the shared row kernels. Lane t owns head-dim elements
[t * E, (t + 1) * E), E = hdim / W. Everything is accumulated in f32.
"""
from __future__ import annotations

from fmha_mlir import mask_geometry
from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import arith, ir, memref, scf
from fmha_mlir.spec import AttentionBwdSpec

from .ir_builders import dims, f32, index
from .ix import Ix, as_value
from .lane_slice import load_f32, store_from_f32
from .row_kernels import Wave, dot, fma
from .score_mods import ScoreBias, exp2_argument, lse_operand, softcap_grad, softmax_input


def dq_dk_dv(op: "ir.Operation", spec: AttentionBwdSpec, wave: Wave) -> None:
    """One loop over the keys this row sees: dV and dK by atomics, the dQ row in registers.

    D from dot_do_o equals rowsum(P * dP), so one pass over the keys suffices. Every lane holds the
    row's score, so the first lane alone adds the bias's gradient: dbias per key, d(slopes) once per row.
    """
    operands = fmha.DqDkDvOp.named_operands(op, spec)
    q, k, v, do, lse, d = (operands[n] for n in ("q", "k", "v", "do", "lse", "d"))
    dq_out, dk_out, dv_out = (operands[n] for n in ("dq_out", "dk_out", "dv_out"))
    row = wave.indices
    q_slice, v_slice = wave.slice_of(q), wave.slice_of(v)
    q_lane = load_f32(q, row, q_slice)
    do_lane = load_f32(do, row, v_slice)
    lse_row = lse_operand(memref.load(lse, row), spec)
    d_row = memref.load(d, row)
    kv_head = wave.head if spec.gqa_ratio == 1 else arith.divui(wave.head, index(spec.gqa_ratio))
    seqlen_q, = dims(q, [2])
    seqlen_k, = dims(k, [2])
    keys = mask_geometry.key_range(spec.mask, Ix(wave.row), Ix(seqlen_q), Ix(seqlen_k))
    first_key, end_key = (as_value(x) for x in keys)
    scale = f32(spec.scale)
    bias = ScoreBias.of(spec, operands, wave.batch, wave.head, dims(q, [1])[0], seqlen_q, seqlen_k)
    first_lane = arith.cmpi(arith.CmpIPredicate.eq, wave.lane, index(0)) if spec.dbias else None
    slope_grad = bias is not None and bias.has_slope_grad

    dk_columns, dv_columns = q_slice.elements(), v_slice.elements()

    loop = scf.ForOp(first_key, end_key, index(1), [f32(0.0)] * (q_slice.width + slope_grad))
    with ir.InsertionPoint(loop.body):
        key = loop.induction_variable
        kv_row = [wave.batch, kv_head, key]
        k_lane = load_f32(k, kv_row, q_slice)
        v_lane = load_f32(v, kv_row, v_slice)
        qk = fmha.WaveReduceOp.build(dot(q_lane, k_lane), wave.size)
        shifted = None if bias is None else bias.shifted(wave.row, key, qk, lse_row)
        pre, factor = softmax_input(qk, spec, lse_row, shifted)
        score = fmha.MaskedScoreOp.build(pre, wave.row, key, seqlen_q, seqlen_k, spec.mask, factor)
        p = fmha.Exp2Op.build(exp2_argument(score, lse_row, spec))
        dp = fmha.WaveReduceOp.build(dot(do_lane, v_lane), wave.size)
        ds_score = arith.mulf(p, arith.subf(dp, d_row))
        ds = softcap_grad(arith.mulf(ds_score, scale), qk, spec)
        for x, column in zip(do_lane, dv_columns):
            fmha.AtomicAddOp.build(arith.mulf(p, x), dv_out, kv_row + [column])
        for x, column in zip(q_lane, dk_columns):
            fmha.AtomicAddOp.build(arith.mulf(ds, x), dk_out, kv_row + [column])
        carried = [fma(ds, k_e, dq_e) for k_e, dq_e in zip(k_lane, loop.inner_iter_args)]
        if spec.dbias:
            if slope_grad:
                carried.append(arith.addf(loop.inner_iter_args[-1], bias.grad(ds_score, wave.row, key)))
            else:
                first = scf.IfOp(first_lane)
                with ir.InsertionPoint(first.then_block):
                    bias.grad(ds_score, wave.row, key)
                    scf.yield_([])
        scf.yield_(carried)
    results = list(loop.results)
    store_from_f32(results[:q_slice.width], dq_out, row, q_slice)
    if slope_grad:
        first = scf.IfOp(first_lane)
        with ir.InsertionPoint(first.then_block):
            bias.add_slope_grad(results[-1])
            scf.yield_([])


