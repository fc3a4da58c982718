"""fmha-vector-atomics-to-nvvm: fmha.atomic_add of vector<N x f32> -> one `red.global.add.vN.f32` (sm_90).

A lane adding N adjacent f32 with one instruction halves (N = 2) the atomic requests of the tiled
body's dQ, and each request fills whole 32-byte sectors instead of half of them. LLVM has no NVPTX
spelling for it (`atomicrmw fadd <2 x float>` becomes a compare-and-swap loop), so it is inline PTX
(PTX 8.1) on the element's address: a getelementptr of the buffer's aligned pointer by its strided
offset (as a pointer, not integer arithmetic: LLVM then keeps fewer addresses live across the
tiled body's loop, 4 bytes of spills at d128 instead of 16). Relaxed and device-scope, as
fmha-hardware-atomics makes the scalar adds. Runs after convert-fmha-to-nvvm, before the gpu.module
becomes LLVM; the buffer's last dimension must be contiguous (stride 1).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import arith, ir, memref, vector

from .base import FmhaPass, PassFailure, rewriting
from .ir_builders import collect_ops

# llvm.getelementptr's marker for "this index is an operand, not a constant" (LLVM::GEPOp::kDynamicIndex).
GEP_DYNAMIC_INDEX = -2 ** 31


def red_asm(width: int) -> str:
    """PTX of one relaxed, device-scope vector add of `width` f32 at generic address $0."""
    values = ", ".join(f"${i + 1}" for i in range(width))
    return ("{ .reg .b64 ga; cvta.to.global.u64 ga, $0; "
            f"red.relaxed.gpu.global.add.v{width}.f32 [ga], {{{values}}}; }}")


@dataclasses.dataclass(frozen=True)
class VectorAtomicsToNvvm(FmhaPass):
    NAME: ClassVar[str] = "fmha-vector-atomics-to-nvvm"
    DESCRIPTION: ClassVar[str] = "Lower vector fmha.atomic_add to red.global.add.v2/v4.f32 (inline PTX)"

    def run_on_module(self, module: "ir.Operation") -> None:
        for op in collect_ops(module, [fmha.AtomicAddOp.NAME]):
            problems = fmha.verify_op(op)
            if problems:
                raise PassFailure("invalid op: " + "; ".join(problems), op)
            width = fmha.AtomicAddOp.width_of(op.operands[0])
            if width is None:
                raise PassFailure("an f32 'fmha.atomic_add' is lowered by convert-fmha-to-nvvm; run it first", op)
            if not _last_dim_contiguous(ir.MemRefType(op.operands[1].type)):
                raise PassFailure(f"the buffer's last dimension must have stride 1, got {op.operands[1].type}", op)
            with rewriting(op):
                _emit_red(op, width)
            op.erase()


def _last_dim_contiguous(t: "ir.MemRefType") -> bool:
    strides, _ = t.get_strides_and_offset()
    return strides[-1] == 1


def _emit_red(op: "ir.Operation", width: int) -> None:
    value, buffer, *indices = op.operands
    metadata = memref.ExtractStridedMetadataOp(buffer)
    offset = metadata.offset
    for i, stride in zip(indices, metadata.strides):
        offset = arith.addi(offset, arith.muli(i, stride))
    base = arith.index_cast(ir.IntegerType.get_signless(64), memref.extract_aligned_pointer_as_index(buffer))
    start = ir.Operation.create("llvm.inttoptr", results=[ir.Type.parse("!llvm.ptr")], operands=[base]).result
    i64_offset = arith.index_cast(ir.IntegerType.get_signless(64), offset)
    pointer = ir.Operation.create("llvm.getelementptr", results=[ir.Type.parse("!llvm.ptr")],
                                  operands=[start, i64_offset], attributes={
                                      "rawConstantIndices": ir.DenseI32ArrayAttr.get([GEP_DYNAMIC_INDEX]),
                                      "elem_type": ir.TypeAttr.get(ir.F32Type.get())}).result
    elements = [vector.extract(value, [], [e]) for e in range(width)]
    ir.Operation.create("llvm.inline_asm", results=[], operands=[pointer, *elements], attributes={
        "asm_string": ir.StringAttr.get(red_asm(width)),
        "constraints": ir.StringAttr.get(",".join(["l"] + ["f"] * width)),
        "has_side_effects": ir.UnitAttr.get(),
    })
