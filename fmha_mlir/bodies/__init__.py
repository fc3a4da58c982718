"""The body layer: what each kernel body needs, answered without MLIR (the runtime imports it too).

A body is one way of computing the dq_dk_dv stage (plus its row stages). Each has a config class
(fmha_mlir.kernel_config), limits (`reasons`), a table of defaults, and answers that a BodyPlan gathers
once per (spec, config) for the passes and the manifest: workspaces, launches, shared layout,
alignment, numerics. The IR builders live in passes/.

  common    what every body shares (Workspace, Launch, SharedTile, the row kernels, the Body interface)
  warp      one wave per query row, a key loop of wave reductions, f32 atomics for dK and dV
  tiled     FlashAttention-2's shape on matrix instructions, over one of:
  mma_sync    NVIDIA mma.sync: its config limits and the sm_90 table
  mfma        AMD MFMA: its config limits and the gfx942 / gfx950 tables
  plan      BodyPlan, made once per (spec, config)
  choice    the bodies by name, the automatic choice, the check of a config against a spec and target
"""
from .choice import AUTO_ORDER, BODIES, body_of, check_config, choose_config, get_body
from .common import (ACCESSES, ACCUMULATE, COPY_ELEMENTS, DQ_DONE, DQ_SEMAPHORES, ELEMENT_BYTES, GRADS,
                     LSE_BYTES, MAX_ELEMENTS_PER_LANE, READ, ROW_BYTES, ROW_KERNEL_WAVES, STAGES, TILE_ALIGN, WRITE,
                     Body, Launch, SharedTile, TensorMap, Workspace,
                     bias_accumulation, partials_zeroed, row_alignment, row_lanes, row_launch, row_reasons,
                     row_stage_hdim, row_stage_output_access, sink_accumulation, tiled_row_reasons)
from .mfma import AMD_TILED_TABLE
from .mma_sync import TILED_TABLE
from .plan import BodyPlan, body_plan
from .tiled import (TiledBody, dispatch_index, dq_fragment_order, dq_in_turns, instruction_tile, key_blocks,
                    section_block_ids, section_heads, tile_hdims, tiled_block_ids, tiled_config, tiled_grid,
                    tiled_table)
from .warp import WarpBody

__all__ = [
    "AUTO_ORDER", "BODIES", "body_of", "check_config", "choose_config", "get_body",
    "ACCESSES", "ACCUMULATE", "COPY_ELEMENTS", "DQ_DONE", "DQ_SEMAPHORES", "ELEMENT_BYTES", "GRADS", "LSE_BYTES",
    "MAX_ELEMENTS_PER_LANE", "READ", "ROW_BYTES", "ROW_KERNEL_WAVES", "STAGES", "TILE_ALIGN", "WRITE", "Body",
    "Launch", "SharedTile", "TensorMap", "Workspace",
    "bias_accumulation", "partials_zeroed", "row_alignment", "row_lanes", "row_launch", "row_reasons", "row_stage_hdim",
    "row_stage_output_access", "sink_accumulation", "tiled_row_reasons",
    "AMD_TILED_TABLE", "TILED_TABLE", "BodyPlan", "body_plan",
    "TiledBody", "dispatch_index", "dq_fragment_order", "dq_in_turns", "instruction_tile", "key_blocks",
    "section_block_ids", "section_heads", "tile_hdims", "tiled_block_ids", "tiled_config", "tiled_grid", "tiled_table",
    "WarpBody",
]
