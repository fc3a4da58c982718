"""The tiled body on NVIDIA's mma.sync (m16n8k16): which configs it takes, and its table for sm_90.
The IR builder is passes/flash_bwd.py on passes/mma_atoms.py."""
from __future__ import annotations

from ..errors import Reason
from ..kernel_config import MMA_SYNC, TiledConfig

# Rows by head-dim bucket (the larger head dim, next bucket up), chosen by measurement on the H200
# (reports/bench_notes.md says which run picked each row and what it beat).
_SM90 = dict(wave_size=32, warps=8, instruction=MMA_SYNC, swizzle="xor")
TILED_TABLE: dict[int, TiledConfig] = {
    64: TiledConfig(**_SM90, block_m=128, block_n=128, stages=2, sdp_warps=(4, 2), dkv_warps=(4, 2),
                    dq_warps=(4, 2), p_in_registers=False, split_tail_loop=True),
    128: TiledConfig(**_SM90, block_m=64, block_n=128, stages=2, sdp_warps=(4, 2), dkv_warps=(4, 2),
                     dq_warps=(2, 4), p_in_registers=False, split_tail_loop=True),
    256: TiledConfig(**_SM90, block_m=64, block_n=64, stages=2, sdp_warps=(2, 4), dkv_warps=(2, 4),
                     dq_warps=(2, 4), p_in_registers=False),
}


def instruction_reasons(target, config: TiledConfig) -> list[Reason]:
    """mma.sync is NVIDIA's instruction; its shared tiles are XOR-swizzled or plain (padding is MFMA's)."""
    if config.instruction != MMA_SYNC:
        return [Reason("config.instruction", f"{config.instruction} is not an {target.arch} instruction",
                       f"use {MMA_SYNC}")]
    return [] if config.swizzle != "pad" else [
        Reason("config.swizzle", "'pad' is the MFMA body's layout", "use swizzle='xor' or 'none'")]
