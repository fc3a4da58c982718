"""fmha-expand-warp-body: each stage op inside a gpu.func -> its warp-distributed body (docs/ir.md level 4).

The body is scf / arith / memref / vector ops plus the four kernel-level fmha ops, which the target
passes (convert-fmha-to-rocdl / -nvvm) lower next.
"""
from __future__ import annotations

import dataclasses

from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import ir
from fmha_mlir.spec import AttentionBwdSpec

from .base import FmhaPass, PassFailure, rewriting
from .ir_builders import collect_ops, enclosing_op
from .verify import check_wave_size, verified_spec
from .warp_body import BODIES, Wave


@dataclasses.dataclass(frozen=True)
class ExpandWarpBody(FmhaPass):
    NAME = "fmha-expand-warp-body"
    DESCRIPTION = "Expand the fmha stage ops inside gpu.func kernels into warp-distributed bodies"

    wave_size: int = 64

    def __post_init__(self):
        check_wave_size(self.wave_size)

    def run_on_module(self, module: "ir.Operation") -> None:
        for op in collect_ops(module, BODIES):
            spec = self._checked_spec(op)
            with rewriting(op):
                BODIES[op.name](op, spec, Wave.current(self.wave_size))
            op.erase()

    def _checked_spec(self, op: "ir.Operation") -> AttentionBwdSpec:
        """The op's spec once the op is known to be expandable here; PassFailure saying why not."""
        kernel = enclosing_op(op, "gpu.func")
        if kernel is None:
            raise PassFailure(f"'{op.name}' is outside a gpu.func; run fmha-stages-to-gpu first", op)
        spec = verified_spec(op)
        w = self.wave_size
        reasons = spec.body_reasons(w)
        if reasons:
            raise PassFailure("; ".join(map(str, reasons)), op)
        block = kernel.attributes["known_block_size"] if "known_block_size" in kernel.attributes else None
        if block is not None and list(ir.DenseI32ArrayAttr(block)) != [w, 1, 1]:
            raise PassFailure(
                f"the enclosing kernel has known_block_size {list(ir.DenseI32ArrayAttr(block))} but the "
                f"body needs one wave of {w} lanes: use the same wave-size for fmha-stages-to-gpu", op)
        return spec
