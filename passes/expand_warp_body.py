"""fmha-expand-warp-body: the stage ops of warp-body configs inside gpu.funcs -> the warp body
(docs/ir.md level 4): scf / arith / memref / vector ops plus the kernel-level fmha ops, which the target
passes (convert-fmha-to-rocdl / -nvvm) lower next."""
from __future__ import annotations

import dataclasses

from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import ir

from .base import FmhaPass
from .body_expansion import expand_stages
from .row_kernels import Wave, row_stage_builders
from .warp_body import dq_dk_dv

BUILDERS = {**row_stage_builders(),
            fmha.DqDkDvOp.NAME: lambda op, spec, config: dq_dk_dv(op, spec, Wave.current(config.wave_size))}


@dataclasses.dataclass(frozen=True)
class ExpandWarpBody(FmhaPass):
    NAME = "fmha-expand-warp-body"
    DESCRIPTION = "Expand the stage ops of warp-body configs inside gpu.func kernels into the warp body"

    def run_on_module(self, module: "ir.Operation") -> None:
        expand_stages(module, "warp", BUILDERS)
