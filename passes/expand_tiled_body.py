"""fmha-expand-tiled-body: the stage ops of tiled-body configs inside gpu.funcs -> the tiled body
(docs/design/tiled-body.md): dq_dk_dv on the config's matrix instruction (passes/tiled_body.py for
mma.sync, passes/tiled_body_mfma.py for MFMA), the row stages as the shared row kernels."""
from __future__ import annotations

import dataclasses

from fmha_mlir.dialects import fmha
from fmha_mlir.mlir import ir

from .base import FmhaPass
from .body_expansion import expand_stages
from .row_kernels import row_stage_builders
from . import tiled_body, tiled_body_mfma


def dq_dk_dv(op: "ir.Operation", spec, config) -> None:
    """The body of the config's instruction family."""
    (tiled_body_mfma if config.mfma else tiled_body).dq_dk_dv(op, spec, config)


BUILDERS = {**row_stage_builders(), fmha.DqDkDvOp.NAME: dq_dk_dv}


@dataclasses.dataclass(frozen=True)
class ExpandTiledBody(FmhaPass):
    NAME = "fmha-expand-tiled-body"
    DESCRIPTION = "Expand the stage ops of tiled-body configs inside gpu.func kernels into the tiled body"

    def run_on_module(self, module: "ir.Operation") -> None:
        expand_stages(module, "tiled", BUILDERS)
