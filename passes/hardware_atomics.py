"""fmha-hardware-atomics: make lowered float atomic adds relaxed, device-scope hardware atomics.

`memref.atomic_rmw addf` lowers to an acq_rel, system-scope `llvm.atomicrmw fadd`: a compare-and-swap
loop on gfx942/gfx950 and `atom.acq_rel.sys` on sm_90. Gradient accumulation needs neither ordering
nor system scope, so after convert-gpu-to-rocdl/-nvvm this pass rewrites every f32 (and packed
vector<2xbf16>) fadd inside a gpu.module to monotonic ordering at agent (AMD) / device (NVIDIA) scope.
On AMD the op also gets `rocdl.no_fine_grained_memory`: without it the backend must assume the address
may be fine-grained host memory and keeps the CAS loop (global_atomic_add_f32 needs coarse memory).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from fmha_mlir.mlir import ir

from .base import FmhaPass, PassFailure
from .ir_builders import collect_ops, enclosing_op
from .kernel_target import check_attached_chips

# llvm dialect enum values (AtomicBinOp::fadd, AtomicOrdering::monotonic), as the i64 attributes the
# generic form of llvm.atomicrmw stores them.
ATOMIC_BIN_OP_FADD = 11
ATOMIC_ORDERING_MONOTONIC = 2
SYNC_SCOPES = {"amd": "agent", "nvidia": "device"}
TARGET_ATTRIBUTES = {"amd": "#rocdl.target", "nvidia": "#nvvm.target"}
NO_FINE_GRAINED_MEMORY = "rocdl.no_fine_grained_memory"


@dataclasses.dataclass(frozen=True)
class HardwareAtomics(FmhaPass):
    NAME: ClassVar[str] = "fmha-hardware-atomics"
    DESCRIPTION: ClassVar[str] = "Relax float atomic adds in gpu.modules to device-scope monotonic atomics"

    target: str = "amd"

    def __post_init__(self):
        if self.target not in SYNC_SCOPES:
            raise ValueError(f"unknown target {self.target!r}; use amd or nvidia")

    def run_on_module(self, module: "ir.Operation") -> None:
        i64 = ir.IntegerType.get_signless(64, context=module.context)
        for gpu_module in collect_ops(module, ["gpu.module"]):
            self._check_target(gpu_module)
        check_attached_chips(module)   # the last fmha pass before the binary: LLVM aborts on a foreign kernel
        for op in float_atomic_adds(module):
            op.attributes["ordering"] = ir.IntegerAttr.get(i64, ATOMIC_ORDERING_MONOTONIC)
            op.attributes["syncscope"] = ir.StringAttr.get(SYNC_SCOPES[self.target], context=module.context)
            if self.target == "amd":
                op.attributes[NO_FINE_GRAINED_MEMORY] = ir.UnitAttr.get(module.context)


    def _check_target(self, gpu_module: "ir.Operation") -> None:
        """The other vendor's scope and attributes do not exist on this module's chip: LLVM would die on
        them (AMD's backend fatally, NVIDIA's with an error it prints while going on)."""
        if "targets" not in gpu_module.attributes:
            return
        targets = str(gpu_module.attributes["targets"])
        other = next(t for t in SYNC_SCOPES if t != self.target)
        if TARGET_ATTRIBUTES[other] in targets and TARGET_ATTRIBUTES[self.target] not in targets:
            raise PassFailure(f"fmha-hardware-atomics{{target={self.target}}} on a gpu.module for "
                              f"{TARGET_ATTRIBUTES[other]}: use target={other}", gpu_module)


def float_atomic_adds(module: "ir.Operation") -> list["ir.Operation"]:
    """The `llvm.atomicrmw fadd` ops on f32 or vector<2xbf16> inside gpu.modules."""
    return [op for op in collect_ops(module, ["llvm.atomicrmw"])
            if _is_hardware_fadd(op) and enclosing_op(op, "gpu.module") is not None]


def _is_hardware_fadd(op: "ir.Operation") -> bool:
    if ir.IntegerAttr(op.attributes["bin_op"]).value != ATOMIC_BIN_OP_FADD:
        return False
    value_type = op.operands[1].type
    if isinstance(value_type, ir.F32Type):
        return True
    return (isinstance(value_type, ir.VectorType) and ir.VectorType(value_type).shape == [2]
            and isinstance(ir.VectorType(value_type).element_type, ir.BF16Type))
