"""fmha-expand-tiled-body: the stage ops of tiled-body configs inside gpu.funcs -> the tiled body
(docs/design/tiled-body.md): dq_dk_dv as the FlashAttention backward schedule (passes/flash_bwd.py) on
the config's instruction family, the row stages as the shared row kernels."""
from __future__ import annotations

import dataclasses

from fmha_mlir.dialects import fmha
from fmha_mlir.kernel_config import MMA_SYNC as MMA_SYNC_INSTRUCTION, WGMMA as WGMMA_INSTRUCTION
from fmha_mlir.mlir import ir

from .base import FmhaPass
from .body_expansion import expand_stages
from .row_kernels import row_stage_builders
from . import flash_bwd
from .copy_atoms import BufferLoadCopy, CpAsyncCopy
from .dq_convert_tail import with_convert_tail
from .mfma_atom import MfmaAtom
from .mma_atoms import MmaSyncAtom
from .warp_roles import ProducerConsumerBackward
from .wgmma_mma_atom import WgmmaMmaAtom

# A tiled body is the schedule on an instruction family's atoms (its table: fmha_mlir/bodies/).
MMA_SYNC = flash_bwd.Hardware(atom=lambda config, element, lane, lanes: MmaSyncAtom(element, lane, lanes),
                              copy=CpAsyncCopy)
MFMA = flash_bwd.Hardware(atom=lambda config, element, lane, lanes: MfmaAtom(config.mfma, element, lane, lanes),
                          copy=BufferLoadCopy)
WGMMA = flash_bwd.Hardware(atom=lambda config, element, thread, lanes: WgmmaMmaAtom(element, thread, lanes),
                           copy=CpAsyncCopy)
HARDWARE = {MMA_SYNC_INSTRUCTION: MMA_SYNC, WGMMA_INSTRUCTION: WGMMA}


def dq_dk_dv(op: "ir.Operation", spec, config) -> None:
    """The schedule on the config's instruction family, warp-specialised where the config has a producer;
    with config.dq_convert_rows, dQ's conversion in work-groups appended to its grid."""
    hardware = MFMA if config.mfma else HARDWARE[config.instruction]
    schedule = ProducerConsumerBackward if config.producer else flash_bwd.FlashBackward
    main = lambda: schedule(op, spec, config, hardware).build()   # noqa: E731
    if config.dq_convert_rows:
        with_convert_tail(op, spec, config, main)
    else:
        main()


BUILDERS = {**row_stage_builders(), fmha.DqDkDvOp.NAME: dq_dk_dv}


@dataclasses.dataclass(frozen=True)
class ExpandTiledBody(FmhaPass):
    NAME = "fmha-expand-tiled-body"
    DESCRIPTION = "Expand the stage ops of tiled-body configs inside gpu.func kernels into the tiled body"

    def run_on_module(self, module: "ir.Operation") -> None:
        expand_stages(module, "tiled", BUILDERS)
