"""fmha-check-chip-features: ops that only an arch-specific chip (sm_90a) runs, refused elsewhere.

wgmma and setmaxnreg exist on sm_90a alone (PTX ISA, "Architecture-specific features"). For sm_90 the
upstream lowering stops at the first wgmma fence with a terse message, and the same instructions written
as inline PTX pass every MLIR stage and fail only in ptxas or, for a PTX bundle, in the driver at load on
the GPU. This pass names the op and the chip to use instead, before any lowering.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from fmha_mlir.mlir import ir
from fmha_mlir.target import TARGETS

from .base import FmhaPass, PassFailure

# Op-name prefixes, and the leading PTX mnemonics of inline assembly, that need an arch-specific chip.
ARCH_SPECIFIC_OPS = ("nvvm.wgmma.", "nvgpu.warpgroup.", "nvvm.setmaxregister")
ARCH_SPECIFIC_PTX = ("wgmma.", "setmaxnreg.")


def needs_arch_specific(op: "ir.Operation") -> bool:
    if op.name.startswith(ARCH_SPECIFIC_OPS):
        return True
    if op.name == "llvm.inline_asm":
        asm = ir.StringAttr(op.attributes["asm_string"]).value
        return any(line.strip().startswith(ARCH_SPECIFIC_PTX) for line in asm.replace("{", ";").split(";"))
    return False


def arch_specific_chips() -> list[str]:
    return [arch for arch, target in TARGETS.items() if target.arch_specific]


@dataclasses.dataclass(frozen=True)
class CheckChipFeatures(FmhaPass):
    NAME: ClassVar[str] = "fmha-check-chip-features"
    DESCRIPTION: ClassVar[str] = "Refuse wgmma / setmaxnreg ops for a chip without arch-specific features"

    target: str = "sm_90"

    def __post_init__(self):
        if self.target not in TARGETS:
            raise ValueError(f"unknown target {self.target!r}; use one of {', '.join(TARGETS)}")

    def run_on_module(self, module: "ir.Operation") -> None:
        if TARGETS[self.target].arch_specific:
            return
        found = []

        def visit(op):
            if needs_arch_specific(op):
                found.append(op)
                return ir.WalkResult.INTERRUPT
            return ir.WalkResult.ADVANCE

        module.walk(visit)
        if found:
            raise PassFailure(f"'{found[0].name}' needs an arch-specific chip ({', '.join(arch_specific_chips())}); "
                              f"{self.target} lacks it: compile for --target {arch_specific_chips()[0]}", found[0])
