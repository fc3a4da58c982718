"""convert-fmha-to-nvvm: fmha kernel-level ops -> NVIDIA target ops (docs/ir.md level 5).

wave_reduce is a gpu.shuffle xor butterfly (shfl.sync.bfly); exp2 calls the ex2.approx.ftz intrinsic
directly, since math.exp2 would become a libdevice call and llvm.intr.exp2 is illegal for NVVM. A
vector atomic_add stays for fmha-vector-atomics-to-nvvm (docs/ir.md, level 5).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import ir
from fmha_mlir.target import TARGETS

from .base import FmhaPass
from .ir_builders import create_op
from .kernel_target import check_attached_chips, check_kernels_for
from .kernel_op_lowering import (elementwise, is_vector_atomic_add, is_semaphore, lower_kernel_ops,
                                 reduce_width, shared_lowerings, shuffle_xor_reduce)

EX2_INTRINSIC = "llvm.nvvm.ex2.approx.ftz.f32"
WARP_SIZE = TARGETS["sm_90"].wave_size


def nvvm_chips() -> list[str]:
    return [arch for arch, target in TARGETS.items() if target.backend == "nvvm"]


@dataclasses.dataclass(frozen=True)
class ConvertFmhaToNvvm(FmhaPass):
    NAME: ClassVar[str] = "convert-fmha-to-nvvm"
    DESCRIPTION: ClassVar[str] = "Lower fmha kernel-level ops to gpu/llvm/arith/memref ops for NVVM"

    chip: str = "sm_90"    # what the kernels are checked against: sm_90a takes the wgmma body too

    def __post_init__(self):
        if self.chip not in nvvm_chips():
            raise ValueError(f"unknown chip {self.chip!r}; use one of {', '.join(nvvm_chips())}")

    def run_on_module(self, module: "ir.Operation") -> None:
        check_kernels_for(module, TARGETS[self.chip])
        check_attached_chips(module)
        lowerings = shared_lowerings()
        lowerings[fmha.WaveReduceOp.NAME] = lower_wave_reduce
        lowerings[fmha.Exp2Op.NAME] = lower_exp2
        # Vector atomic adds need the buffer's address: fmha-vector-atomics-to-nvvm lowers them later.
        lower_kernel_ops(module, lowerings, deferred=lambda op: is_vector_atomic_add(op) or is_semaphore(op))


def lower_wave_reduce(op: "ir.Operation") -> "ir.Value":
    return shuffle_xor_reduce(op.operands[0], reduce_width(op, WARP_SIZE), WARP_SIZE)


def lower_exp2(op: "ir.Operation") -> "ir.Value":
    """ex2.approx.ftz.f32 per element: 2^x, and +0 for -inf (masked keys)."""
    return elementwise(op.operands[0], _ex2)


def _ex2(x: "ir.Value") -> "ir.Value":
    attributes = {
        "intrin": ir.StringAttr.get(EX2_INTRINSIC),
        "fastmathFlags": ir.Attribute.parse("#llvm.fastmath<none>"),
        "op_bundle_sizes": ir.DenseI32ArrayAttr.get([]),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0]),
    }
    return create_op("llvm.call_intrinsic", ir.F32Type.get(), [x], attributes)
