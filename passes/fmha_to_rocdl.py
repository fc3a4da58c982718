"""convert-fmha-to-rocdl: fmha kernel-level ops -> AMD target ops (docs/ir.md level 5).

A full-wave reduction uses DPP by default: four in-row steps (quad_perm [1,0,3,2] and [2,3,0,1],
row_half_mirror, row_mirror) leave every lane of each 16-lane row with that row's sum; row_bcast_15
(rows 1, 3) and row_bcast_31 (rows 2, 3) then fold the rows so that lane 63 holds the sum of all 64
lanes, and `rocdl.readlane` 63 gives it to every lane. No LDS traffic and no waits, against one
ds_bpermute plus five ds_swizzle for the xor-shuffle butterfly (reduce=shuffle). A reduction over
groups of 2, 4, 8 or 16 lanes (the row kernels' rows) is the first 1-4 in-row steps alone; a group
of 32 has no DPP form that leaves the sum in every lane and uses the butterfly.
"""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from fmha_mlir.backends.amd import REDUCE_STRATEGIES
from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import arith, ir
from fmha_mlir.target import TARGETS

from .base import FmhaPass
from .ir_builders import collect_ops, create_op, f32
from .kernel_target import check_attached_chips, check_kernels_for
from .kernel_op_lowering import (elementwise, is_packed_atomic_add, is_semaphore, lower_kernel_ops,
                                 reduce_width, shared_lowerings, shuffle_xor_reduce)

DPP_WAVE = 64
# Group widths whose sum the in-row steps leave in every lane: width 2**k after the first k steps.
DPP_ROW_WIDTHS = (2, 4, 8, 16)

# (permutation, its argument, row_mask): each step adds the permuted value to the running sum.
# Rows left out of a row_mask keep `old` (0.0), so their sum is unchanged.
_DPP_STEPS = (
    ("quad_perm", (1, 0, 3, 2), 0xF),
    ("quad_perm", (2, 3, 0, 1), 0xF),
    ("row_half_mirror", None, 0xF),
    ("row_mirror", None, 0xF),
    ("row_bcast_15", None, 0xA),
    ("row_bcast_31", None, 0xC),
)


def rocdl_chipsets() -> list[str]:
    return [arch for arch, target in TARGETS.items() if target.backend == "rocdl"]


@dataclasses.dataclass(frozen=True)
class ConvertFmhaToRocdl(FmhaPass):
    NAME: ClassVar[str] = "convert-fmha-to-rocdl"
    DESCRIPTION: ClassVar[str] = "Lower fmha kernel-level ops to amdgpu/rocdl/arith/memref ops"

    chipset: str = "gfx942"
    reduce: str = "dpp"

    def __post_init__(self):
        if self.chipset not in rocdl_chipsets():
            raise ValueError(f"unknown chipset {self.chipset!r}; use one of {', '.join(rocdl_chipsets())}")
        if self.reduce not in REDUCE_STRATEGIES:
            raise ValueError(f"unknown reduce strategy {self.reduce!r}; use {' or '.join(REDUCE_STRATEGIES)}")

    def run_on_module(self, module: "ir.Operation") -> None:
        check_kernels_for(module, TARGETS[self.chipset])
        check_attached_chips(module)
        lowerings = shared_lowerings()
        lowerings[fmha.WaveReduceOp.NAME] = self._lower_wave_reduce
        lowerings[fmha.Exp2Op.NAME] = lower_exp2
        # Packed bf16 atomic adds need the buffer's address: fmha-packed-atomics-to-rocdl lowers them later.
        lower_kernel_ops(module, lowerings, deferred=lambda op: is_packed_atomic_add(op) or is_semaphore(op))
        set_flat_work_group_size(module)

    def _lower_wave_reduce(self, op: "ir.Operation") -> "ir.Value":
        width = reduce_width(op, TARGETS[self.chipset].wave_size)
        if self.reduce == "dpp" and width == DPP_WAVE:
            return dpp_wave_sum(op.operands[0])
        if self.reduce == "dpp" and width in DPP_ROW_WIDTHS:
            return dpp_sum(op.operands[0], _DPP_STEPS[:DPP_ROW_WIDTHS.index(width) + 1])
        return shuffle_xor_reduce(op.operands[0], width, TARGETS[self.chipset].wave_size)


def set_flat_work_group_size(module: "ir.Operation") -> None:
    """Give every kernel with known_block_size the matching `rocdl.flat_work_group_size` ("N,N").

    Without it the code object says at most 256 work-items, so a larger work-group fails to launch, and
    the backend cannot use the exact block size."""
    for func in collect_ops(module, ["gpu.func"]):
        if "known_block_size" not in func.attributes:
            continue
        threads = math.prod(ir.DenseI32ArrayAttr(func.attributes["known_block_size"]))
        func.attributes["rocdl.flat_work_group_size"] = ir.StringAttr.get(f"{threads},{threads}", module.context)


def dpp_wave_sum(value: "ir.Value") -> "ir.Value":
    """The sum of `value` over all 64 lanes, in every lane."""
    i32 = ir.IntegerType.get_signless(32)
    return create_op("rocdl.readlane", ir.F32Type.get(),
                     [dpp_sum(value, _DPP_STEPS), arith.constant(i32, DPP_WAVE - 1)])


def dpp_sum(value: "ir.Value", steps) -> "ir.Value":
    """`value` plus its DPP permutations, one step after another (see _DPP_STEPS)."""
    f32_type = ir.F32Type.get()
    i32 = ir.IntegerType.get_signless(32)
    zero = f32(0.0)
    for kind, argument, row_mask in steps:
        attributes = {
            "kind": ir.Attribute.parse(f"#amdgpu<dpp_perm {kind}>"),
            "row_mask": ir.IntegerAttr.get(i32, row_mask),
            "bank_mask": ir.IntegerAttr.get(i32, 0xF),
            "bound_ctrl": ir.BoolAttr.get(False),
        }
        if argument is not None:
            attributes["permArgument"] = ir.ArrayAttr.get([ir.IntegerAttr.get(i32, a) for a in argument])
        value = arith.addf(value, create_op("amdgpu.dpp", f32_type, [zero, value], attributes))
    return value


def lower_exp2(op: "ir.Operation") -> "ir.Value":
    """v_exp_f32 per element: 2^x, and 0 for -inf (masked keys)."""
    return elementwise(op.operands[0], lambda x: create_op("rocdl.exp2", ir.F32Type.get(), [x]))
