"""The tiled body on AMD's MFMA (wave64): which configs it takes, and its tables for gfx942 / gfx950.
The IR builder is passes/flash_bwd.py on passes/mfma_atom.py."""
from __future__ import annotations

from ..errors import Reason
from ..kernel_config import TiledConfig
from ..matrix_layouts import MFMA_SHAPES

# No AMD GPU is lent, so these rows are chosen from the code objects (tools/amd_static_report.py,
# reports/amd_static.md), by three rules:
#   - occupancy >= 2 waves per SIMD: 8 waves per CU (4 SIMDs), i.e. one 8-wave work-group whose LDS
#     (K, V, Q, dO, P^T, dS^T, LSE, D: TiledBody.shared_layout) fits the CU's 64 KB (gfx942) / 160 KB
#     (gfx950); registers are not the limit (the report shows < 128 VGPRs + AGPRs per lane);
#   - every wave owns whole instruction tiles of S^T, dK / dV and dQ: 16x16 instructions, since with 8
#     waves the S^T tile of these blocks (bn x bm <= 8192) has too few 32x32 tiles to go round;
#   - within that, the largest key block (fewer key blocks: fewer dQ atomics per FLOP and more reuse of
#     Q / dO per load), then the largest query block;
#   - rows of the 2-byte tiles padded by one operand fragment (swizzle="pad": 8 or 16 bytes), so a
#     fragment read's 16 rows start in different banks (test_lds_banks.py: 16x fewer LDS passes).
# gfx942 has no d256 row: K, V, Q and dO of the smallest block that gives 8 waves whole S^T tiles
# (64 keys x 32 queries) need 96 KB of LDS; those specs take the warp body.
_AMD = dict(wave_size=64, warps=8, stages=1, swizzle="pad")
AMD_TILED_TABLE: dict[str, dict[int, TiledConfig]] = {
    "gfx942": {   # 64 KB LDS, 16x16x16
        64: TiledConfig(**_AMD, instruction="mfma.16x16x16", block_m=64, block_n=64, sdp_warps=(4, 2),
                        dkv_warps=(4, 2), dq_warps=(4, 2)),                        # 51.5 KB LDS
        128: TiledConfig(**_AMD, instruction="mfma.16x16x16", block_m=32, block_n=64, sdp_warps=(4, 2),
                         dkv_warps=(4, 2), dq_warps=(2, 4)),                       # 58.8 KB
    },
    "gfx950": {   # 160 KB LDS, the double-K 16x16x32
        64: TiledConfig(**_AMD, instruction="mfma.16x16x32", block_m=64, block_n=128, sdp_warps=(4, 2),
                        dkv_warps=(4, 2), dq_warps=(4, 2)),                        # 90.5 KB
        128: TiledConfig(**_AMD, instruction="mfma.16x16x32", block_m=32, block_n=128, sdp_warps=(4, 2),
                         dkv_warps=(4, 2), dq_warps=(2, 4)),                       # 105.3 KB
        256: TiledConfig(**_AMD, instruction="mfma.16x16x32", block_m=32, block_n=64, sdp_warps=(4, 2),
                         dkv_warps=(4, 2), dq_warps=(2, 4)),                       # 109.3 KB
    },
}


def instruction_reasons(target, config: TiledConfig) -> list[Reason]:
    """The MFMA must be one the chip has, and the config must ask for what the MFMA body builds:
    register-staged copies (one Q / dO buffer), P^T and dS^T through LDS, padded or plain tiles."""
    shape = config.mfma
    if shape is None or target.arch not in shape.chips:
        have = [f"mfma.{n}" for n, s in MFMA_SHAPES.items() if target.arch in s.chips]
        return [Reason("config.instruction", f"{config.instruction} is not an {target.arch} instruction",
                       f"use one of {', '.join(have)}")]
    wrong = [(name, value, want) for name, value, want in (("stages", config.stages, (1,)),
                                                             ("p_in_registers", config.p_in_registers, (False,)),
                                                             ("swizzle", config.swizzle, ("pad", "none")))
             if value not in want]
    return [Reason(f"config.{name}", f"{value!r}: the MFMA body builds {' or '.join(map(repr, want))} only",
                   f"use {name}={want[0]!r}") for name, value, want in wrong]
