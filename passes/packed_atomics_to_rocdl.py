"""fmha-packed-atomics-to-rocdl: fmha.atomic_add of a packed bf16 pair -> `global_atomic_pk_add_bf16`.

grad_accum = "bf16" adds dQ's element pairs into dq itself. memref.atomic_rmw has no vector form, but
an `llvm.atomicrmw fadd` of vector<2xbf16> on a global (address space 1) pointer selects
`global_atomic_pk_add_bf16` on gfx942 and gfx950 (test/Target/rocdl checks the instruction), once
fmha-hardware-atomics has made it agent-scope, monotonic and coarse-grained as it makes every float add.
The pointer is the element's address in the global address space (ir_builders.element_pointer): the
runtime passes device-global buffers, and a flat pointer would give the flat form of the instruction.
Runs after convert-fmha-to-rocdl, before the gpu.module becomes LLVM.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import ir

from .base import FmhaPass, PassFailure, rewriting
from .hardware_atomics import ATOMIC_BIN_OP_FADD, ATOMIC_ORDERING_MONOTONIC
from .ir_builders import collect_ops, element_pointer
from .verify import check_verified

GLOBAL_ADDRESS_SPACE = 1
PAIR_BYTES = 4


@dataclasses.dataclass(frozen=True)
class PackedAtomicsToRocdl(FmhaPass):
    NAME: ClassVar[str] = "fmha-packed-atomics-to-rocdl"
    DESCRIPTION: ClassVar[str] = "Lower packed bf16 fmha.atomic_add to a vector<2xbf16> llvm.atomicrmw fadd (AMD)"

    def run_on_module(self, module: "ir.Operation") -> None:
        for op in collect_ops(module, [fmha.AtomicAddOp.NAME]):
            check_verified(op)
            if not fmha.AtomicAddOp.is_packed_bf16(op.operands[0]):
                raise PassFailure("an f32 'fmha.atomic_add' is lowered by convert-fmha-to-rocdl; run it first", op)
            value, buffer, *indices = op.operands
            with rewriting(op):
                i64 = ir.IntegerType.get_signless(64)
                ir.Operation.create("llvm.atomicrmw", results=[value.type], operands=[
                    element_pointer(buffer, list(indices), GLOBAL_ADDRESS_SPACE), value], attributes={
                    "bin_op": ir.IntegerAttr.get(i64, ATOMIC_BIN_OP_FADD),
                    "ordering": ir.IntegerAttr.get(i64, ATOMIC_ORDERING_MONOTONIC),
                    "alignment": ir.IntegerAttr.get(i64, PAIR_BYTES),
                })
            op.erase()
