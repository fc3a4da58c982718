"""fmha-vector-atomics-to-nvvm: fmha.atomic_add of vector<N x f32> -> one `red.global.add.vN.f32` (sm_90);
of a packed bf16 pair -> one `red.global.add.noftz.bf16x2` (grad_accum = "bf16", the same reasons).

A lane adding N adjacent f32 with one instruction halves (N = 2) the atomic requests of the tiled
body's dQ, and each request fills whole 32-byte sectors instead of half of them. LLVM has no NVPTX
spelling for it (`atomicrmw fadd <2 x float>` becomes a compare-and-swap loop), so it is inline PTX
(PTX 8.1) on the element's address: a getelementptr of the buffer's aligned pointer by its strided
offset (as a pointer, not integer arithmetic: LLVM then keeps fewer addresses live across the
tiled body's loop, 4 bytes of spills at d128 instead of 16: ir_builders.element_pointer). Relaxed and device-scope, as
fmha-hardware-atomics makes the scalar adds. Runs after convert-fmha-to-nvvm, before the gpu.module
becomes LLVM; the buffer's last dimension must be contiguous (stride 1).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import ir, vector

from .base import FmhaPass, PassFailure, rewriting
from .ir_builders import collect_ops, element_pointer
from .verify import check_verified


def red_asm(width: int) -> str:
    """PTX of one relaxed, device-scope vector add of `width` f32 at generic address $0."""
    values = ", ".join(f"${i + 1}" for i in range(width))
    return ("{ .reg .b64 ga; cvta.to.global.u64 ga, $0; "
            f"red.relaxed.gpu.global.add.v{width}.f32 [ga], {{{values}}}; }}")


def red_bf16x2_asm() -> str:
    """PTX of one relaxed, device-scope packed add of two bf16 ($1, one b32) at generic address $0: each
    half rounded to nearest even, denormals kept (.noftz; sm_90, PTX 7.8)."""
    return "{ .reg .b64 ga; cvta.to.global.u64 ga, $0; red.relaxed.gpu.global.add.noftz.bf16x2 [ga], $1; }"


@dataclasses.dataclass(frozen=True)
class VectorAtomicsToNvvm(FmhaPass):
    NAME: ClassVar[str] = "fmha-vector-atomics-to-nvvm"
    DESCRIPTION: ClassVar[str] = "Lower vector fmha.atomic_add to red.global.add.v2/v4.f32 / .noftz.bf16x2 (inline PTX)"

    def run_on_module(self, module: "ir.Operation") -> None:
        for op in collect_ops(module, [fmha.AtomicAddOp.NAME]):
            check_verified(op)
            width = fmha.AtomicAddOp.width_of(op.operands[0])
            if width is None and not fmha.AtomicAddOp.is_packed_bf16(op.operands[0]):
                raise PassFailure("an f32 'fmha.atomic_add' is lowered by convert-fmha-to-nvvm; run it first", op)
            if not _last_dim_contiguous(ir.MemRefType(op.operands[1].type)):
                raise PassFailure(f"the buffer's last dimension must have stride 1, got {op.operands[1].type}", op)
            with rewriting(op):
                _emit_red(op, width)
            op.erase()


def _last_dim_contiguous(t: "ir.MemRefType") -> bool:
    strides, _ = t.get_strides_and_offset()
    return strides[-1] == 1


def _emit_red(op: "ir.Operation", width: int | None) -> None:
    """One red.global.add: of `width` f32, or (width None) of a packed bf16 pair as one 32-bit register."""
    value, buffer, *indices = op.operands
    pointer = element_pointer(buffer, list(indices))
    if width is None:
        bits = ir.Operation.create("llvm.bitcast", results=[ir.IntegerType.get_signless(32)], operands=[value]).result
        operands, constraints, asm = [bits], ["r"], red_bf16x2_asm()
    else:
        operands = [vector.extract(value, [], [e]) for e in range(width)]
        constraints, asm = ["f"] * width, red_asm(width)
    ir.Operation.create("llvm.inline_asm", results=[], operands=[pointer, *operands], attributes={
        "asm_string": ir.StringAttr.get(asm),
        "constraints": ir.StringAttr.get(",".join(["l"] + constraints)),
        "has_side_effects": ir.UnitAttr.get(),
    })
