"""dQ converted inside dq_dk_dv's grid (config.dq_convert_rows), instead of by a convert kernel after it.

The grid's key-block axis (z under keys_outer) grows by bodies.tiled.convert_blocks slices of
convert work-groups. The GPU dispatches work-groups in block-id order, so every key block's work-group
has started before the first convert one, and the convert ones take the SMs the last wave of key blocks
leaves idle instead of waiting for the whole kernel to end. They are numbered head by head in the order
the L2 sections finish heads (section_block_ids numbers (batch, kv head) as kv_head + kv_heads x batch):

    convert work-group c  ->  head c // (gqa x chunks), then its query head and chunk of dq_convert_rows rows

Each waits until its kv head's counter in dq_done holds the key blocks of a head (every key block's
writer signals once its reduce-adds into dq_acc completed: warp_roles.write_dq), then converts its
rows as the convert kernel would (lane_slice.copy_slice: dq = scale x dq_acc, rounded to the dtype),
a row per group of row_lanes lanes. One thread polls, pausing POLL_BACKOFF_NS between polls, and a
barrier hands its acquire on to the rest: a work-group may wait through the last wave of key blocks,
and tight polls by every thread of a hundred SMs on one cache line slowed the reduce-adds they wait
for (bench_notes.md, "dQ converted in the grid, first timing"). The waits cannot deadlock: the
work-groups they wait for were dispatched first. A work-group whose chunk lies past seqlen_q converts
nothing.
"""
from __future__ import annotations

from typing import Callable

from fmha_mlir.bodies import dispatch_index, row_lanes
from fmha_mlir.dialects import fmha
from fmha_mlir.dtypes import BYTES
from fmha_mlir.mlir import arith, gpu, ir, scf
from fmha_mlir.spec import AttentionBwdSpec

from .ir_builders import dims, index, memref_type
from .ix import Ix, as_value
from .lane_slice import LaneSlice, copy_slice

# About a poll's own L2 round trip: a waiting work-group then polls about once a microsecond, where 12 warps
# polling back to back did ~50x as often; short beside the last key block's work (tens of us), which the
# pause may delay the convert by.
POLL_BACKOFF_NS = 256


def with_convert_tail(op: "ir.Operation", spec: AttentionBwdSpec, config, main: Callable[[], None]) -> None:
    """Build main() for the key blocks' work-groups and the conversion for the appended ones."""
    operands = fmha.DqDkDvOp.named_operands(op, spec)
    key_blocks = arith.ceildivui(dims(operands["k"], [2])[0], index(config.block_n))
    slice_ = gpu.block_id(gpu.Dimension.z)
    branch = scf.IfOp(arith.cmpi(arith.CmpIPredicate.ult, slice_, key_blocks), has_else=True)
    with ir.InsertionPoint(branch.then_block):
        main()
        scf.yield_([])
    with ir.InsertionPoint(branch.else_block):
        _convert(operands, spec, config, arith.subi(slice_, key_blocks), key_blocks)
        scf.yield_([])


def _convert(operands: dict, spec: AttentionBwdSpec, config, slice_: "ir.Value", key_blocks: "ir.Value") -> None:
    acc, out, done = operands["dq_out"], operands["dq"], operands["dq_done"]
    batches, kv_heads = dims(operands["k"], [0, 1])
    seqlen_q, = dims(operands["q"], [2])
    rows = index(config.dq_convert_rows)
    chunks = arith.ceildivui(seqlen_q, rows)
    # keys_outer's ids: x the kv head, y the batch, the slice slowest (bodies.tiled_grid).
    x, y = gpu.block_id(gpu.Dimension.x), gpu.block_id(gpu.Dimension.y)
    linear = as_value(dispatch_index(*(Ix(v, nonnegative=True) for v in (x, y, slice_, kv_heads, batches))))
    per_head = arith.muli(chunks, index(spec.gqa_ratio))
    head, rest = arith.divui(linear, per_head), arith.remui(linear, per_head)
    kv_head, batch = arith.remui(head, kv_heads), arith.divui(head, kv_heads)
    q_head = arith.addi(arith.muli(kv_head, index(spec.gqa_ratio)), arith.divui(rest, chunks))
    first = arith.muli(arith.remui(rest, chunks), rows)
    tid = gpu.thread_id(gpu.Dimension.x)
    poller = scf.IfOp(arith.cmpi(arith.CmpIPredicate.eq, tid, index(0)))
    with ir.InsertionPoint(poller.then_block):
        fmha.SemaphoreWaitOp.build(arith.index_cast(ir.IntegerType.get_signless(32), key_blocks), done,
                                   [batch, kv_head], backoff_ns=POLL_BACKOFF_NS)
        scf.yield_([])
    gpu.barrier()
    lanes = row_lanes(spec.hdim_q, config.wave_size, BYTES[spec.dtype])
    lane_slice = LaneSlice.of_lane(arith.remui(tid, index(lanes)), memref_type(acc).shape[-1] // lanes)
    end = arith.minui(arith.addi(first, rows), seqlen_q)
    loop = scf.ForOp(arith.addi(first, arith.divui(tid, index(lanes))), end, index(config.threads // lanes))
    with ir.InsertionPoint(loop.body):
        copy_slice(acc, out, [batch, q_head, loop.induction_variable], lane_slice, spec.scale)
        scf.yield_([])
