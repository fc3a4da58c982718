"""The warp-distributed bodies of the three stages (docs/ir.md level 4).

One work-group is one wave of W lanes per (query row, head, batch) = block id (x, y, z); lane t owns
head-dim elements [t * E, (t + 1) * E), E = hdim / W. Everything is accumulated in f32.
"""
from __future__ import annotations

import math as pymath
from dataclasses import dataclass

from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import arith, gpu, ir, memref, scf
from fmha_mlir.spec import AttentionBwdSpec

from .ir_builders import dims, f32, index
from .key_range import key_range
from .lane_slice import LaneSlice, copy_slice, load_f32, store_from_f32

LOG2_E = pymath.log2(pymath.e)


@dataclass(frozen=True)
class Wave:
    """Where this wave works: the row (batch, head, seqlen index) it owns and its lane."""

    batch: "ir.Value"
    head: "ir.Value"
    row: "ir.Value"
    lane: "ir.Value"
    size: int

    @staticmethod
    def current(size: int) -> "Wave":
        block = [gpu.block_id(d) for d in (gpu.Dimension.x, gpu.Dimension.y, gpu.Dimension.z)]
        return Wave(batch=block[2], head=block[1], row=block[0], lane=gpu.thread_id(gpu.Dimension.x), size=size)

    def slice_of(self, buffer: "ir.Value") -> LaneSlice:
        """This lane's slice of the head dim of a rank-4 `buffer`."""
        return LaneSlice.of_lane(self.lane, ir.MemRefType(buffer.type).shape[-1] // self.size)

    @property
    def indices(self) -> list["ir.Value"]:
        return [self.batch, self.head, self.row]


def dot_do_o(op: "ir.Operation", spec: AttentionBwdSpec, wave: Wave) -> None:
    """d[b, h, s] = sum(dO * O) over the row: lane partials, a wave all-reduce, lane 0 stores."""
    o, do, d = op.operands
    row = wave.indices
    lanes = wave.slice_of(o)
    total = fmha.WaveReduceOp.build(_dot(load_f32(do, row, lanes), load_f32(o, row, lanes)), wave.size)
    is_first = arith.cmpi(arith.CmpIPredicate.eq, wave.lane, index(0))
    if_first = scf.IfOp(is_first)
    with ir.InsertionPoint(if_first.then_block):
        memref.store(total, d, row)
        scf.yield_([])


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
    scale_log2 = spec.scale * LOG2_E

    dk_columns, dv_columns = q_slice.elements(), v_slice.elements()

    loop = scf.ForOp(first_key, end_key, index(1), [f32(0.0)] * q_slice.width)
    with ir.InsertionPoint(loop.body):
        key = loop.induction_variable
        kv_row = [wave.batch, kv_head, key]
        k_lane = load_f32(k, kv_row, q_slice)
        v_lane = load_f32(v, kv_row, v_slice)
        qk = fmha.WaveReduceOp.build(_dot(q_lane, k_lane), wave.size)
        score = fmha.MaskedScoreOp.build(qk, wave.row, key, seqlen_q, seqlen_k, spec.mask, scale_log2)
        p = fmha.Exp2Op.build(arith.subf(score, lse_log2))
        dp = fmha.WaveReduceOp.build(_dot(do_lane, v_lane), wave.size)
        ds = arith.mulf(arith.mulf(p, arith.subf(dp, d_row)), scale)
        for x, column in zip(do_lane, dv_columns):
            fmha.AtomicAddOp.build(arith.mulf(p, x), dv_out, kv_row + [column])
        for x, column in zip(q_lane, dk_columns):
            fmha.AtomicAddOp.build(arith.mulf(ds, x), dk_out, kv_row + [column])
        scf.yield_([_fma(ds, k_e, dq_e) for k_e, dq_e in zip(k_lane, loop.inner_iter_args)])
    store_from_f32(list(loop.results), dq_out, row, q_slice)


def convert_grad(op: "ir.Operation", spec: AttentionBwdSpec, wave: Wave) -> None:
    """out[b, h, s, :] = acc[b, h, s, :] rounded to T."""
    acc, out = op.operands
    copy_slice(acc, out, wave.indices, wave.slice_of(acc))


BODIES = {fmha.DotDoOOp.NAME: dot_do_o, fmha.DqDkDvOp.NAME: dq_dk_dv, fmha.ConvertGradOp.NAME: convert_grad}


def _dot(a: list["ir.Value"], b: list["ir.Value"]) -> "ir.Value":
    """sum(a * b) of one lane's elements, as an fma chain."""
    total = arith.mulf(a[0], b[0])
    for x, y in zip(a[1:], b[1:]):
        total = _fma(x, y, total)
    return total


def _fma(a: "ir.Value", b: "ir.Value", c: "ir.Value") -> "ir.Value":
    """a * b + c, contractible into one fma by every backend.

    Not math.fma: convert-gpu-to-nvvm turns it into a libdevice call (__nv_fmaf) that ptxas cannot link.
    """
    contract = ir.Attribute.parse("#arith.fastmath<contract>")
    return arith.addf(arith.mulf(a, b, fastmath=contract), c, fastmath=contract)
