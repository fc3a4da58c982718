"""fmha-extern-dynamic-shared: make dynamic shared memory the backend's real dynamic window.

convert-gpu-to-nvvm and convert-gpu-to-rocdl lower gpu.dynamic_shared_memory to an internal `[0 x i8]`
global. NVPTX prints that as a 1-byte *static* shared variable: the "dynamic" window then starts at an
offset and overlaps static shared variables (seen on the H200). External linkage makes it
`.extern .shared .align A .b8 x[]` on NVIDIA and, on AMDGPU, the external zero-sized LDS global that
the backend places after all static LDS (the size comes from the launch). 1024-byte alignment suits
every swizzle and TMA layout.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from fmha_mlir.mlir import ir

from .base import FmhaPass
from .ir_builders import collect_ops, enclosing_op

DYNAMIC_SHARED_PREFIX = "__dynamic_shmem__"
ALIGNMENT = 1024
SHARED_ADDRESS_SPACE = 3


@dataclasses.dataclass(frozen=True)
class ExternDynamicShared(FmhaPass):
    NAME: ClassVar[str] = "fmha-extern-dynamic-shared"
    DESCRIPTION: ClassVar[str] = "Give lowered dynamic shared memory external linkage and 1024-byte alignment"

    def run_on_module(self, module: "ir.Operation") -> None:
        for op in collect_ops(module, ["llvm.mlir.global"]):
            if enclosing_op(op, "gpu.module") is None or not _is_dynamic_shared(op):
                continue
            op.attributes["linkage"] = ir.Attribute.parse("#llvm.linkage<external>")
            op.attributes["alignment"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), ALIGNMENT)
            op.attributes["dso_local"] = ir.UnitAttr.get()


def _is_dynamic_shared(op: "ir.Operation") -> bool:
    name = ir.StringAttr(op.attributes["sym_name"]).value
    space = ir.IntegerAttr(op.attributes["addr_space"]).value if "addr_space" in op.attributes else 0
    return name.startswith(DYNAMIC_SHARED_PREFIX) and space == SHARED_ADDRESS_SPACE
