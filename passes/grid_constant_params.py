"""fmha-grid-constant-params: tensor-map parameters become by-value __grid_constant__ kernel parameters.

A TMA load needs its tensor map in parameter (or constant / global) memory, and the kernel parameter
is the cheapest place: 128 bytes passed by value, aligned to 64, read in place (PTX `.param .align 64
.b8 p[128]`). The gpu dialect refuses nvvm.grid_constant on gpu.func arguments and its lowering drops
llvm.byval, so the kernel builder records the lowered parameter indices on the function
(tma_copy.tensor_map_params) and this pass, run after the lowering, writes the attributes there.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from fmha_mlir.mlir import ir

from .base import FmhaPass, PassFailure
from .ir_builders import collect_ops
from .tma_copy import TENSOR_MAP_ATTRIBUTE

TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN = 64


@dataclasses.dataclass(frozen=True)
class GridConstantParams(FmhaPass):
    NAME: ClassVar[str] = "fmha-grid-constant-params"
    DESCRIPTION: ClassVar[str] = "Make marked tensor-map parameters by-value __grid_constant__ kernel parameters"

    def run_on_module(self, module: "ir.Operation") -> None:
        for function in collect_ops(module, ["llvm.func"]):
            if TENSOR_MAP_ATTRIBUTE not in function.attributes:
                continue
            positions = list(ir.DenseI64ArrayAttr(function.attributes[TENSOR_MAP_ATTRIBUTE]))
            arguments = function.regions[0].blocks[0].arguments
            old = (list(ir.ArrayAttr(function.attributes["arg_attrs"])) if "arg_attrs" in function.attributes
                   else [ir.DictAttr.get({})] * len(arguments))
            attrs = []
            for i, current in enumerate(old):
                if i not in positions:
                    attrs.append(current)
                    continue
                if str(arguments[i].type) != "!llvm.ptr":
                    raise PassFailure(f"tensor-map parameter {i} is {arguments[i].type}, not !llvm.ptr", function)
                attrs.append(ir.DictAttr.get({
                    "llvm.byval": ir.TypeAttr.get(ir.Type.parse(f"!llvm.array<{TENSOR_MAP_BYTES} x i8>")),
                    "llvm.align": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), TENSOR_MAP_ALIGN),
                    "nvvm.grid_constant": ir.UnitAttr.get()}))
            function.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)
