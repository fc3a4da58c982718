"""tools/amd_static_report.py: AMD's occupancy rules and the ISA loop counts it reports (no GPU)."""
import pytest

from fmha_mlir.compiler import Compiler
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.bodies import AMD_TILED_TABLE
from fmha_mlir.runtime.hsaco_metadata import read_hsaco_metadata
from fmha_mlir.tools.amd_static_report import (PARTS, Loop, allocated_vgprs, innermost_loops, roofline, tile_step,
                                              waves_per_simd)


@pytest.mark.parametrize("vgpr,agpr,allocated", [(1, 0, 8), (22, 0, 24), (38, 0, 40), (130, 128, 264), (256, 256, 512)])
def test_registers_are_allocated_in_granules_of_the_unified_file(vgpr, agpr, allocated):
    assert allocated_vgprs(vgpr, agpr) == allocated


@pytest.mark.parametrize("vgpr,agpr,lds,waves,arch,want", [
    (16, 0, 0, 1, "gfx942", (8, "max")),                 # 512 / 16 = 32 waves' worth: the hardware's 8
    (128, 0, 0, 4, "gfx942", (4, "registers")),
    (128, 128, 0, 4, "gfx950", (2, "registers")),        # AGPRs share the 512
    (32, 0, 40 * 1024, 4, "gfx942", (1, "lds")),         # one 40 KB work-group of 4 waves per 64 KB CU
    (32, 0, 40 * 1024, 4, "gfx950", (4, "lds")),         # four per 160 KB CU: 16 waves on 4 SIMDs
])
def test_waves_per_simd(vgpr, agpr, lds, waves, arch, want):
    assert waves_per_simd(vgpr, agpr, lds, waves, arch) == want


ISA = """k:
\ts_mov_b32 s0, 0
.LBB0_1:
\tv_mfma_f32_32x32x8_bf16 v[0:15], v[16:17], v[18:19], v[0:15]
.LBB0_2:
\tds_read_b64 v[16:17], v20
\ts_waitcnt lgkmcnt(0)
\tglobal_load_dwordx4 v[20:23], v[24:25], off
\ts_cbranch_scc1 .LBB0_2
; a comment
\tbuffer_store_dword v0, off, s[0:3], 0
\ts_cbranch_vccnz .LBB0_1
\ts_endpgm
.Lfunc_end0:
other:
.LBB1_1:
\ts_branch .LBB1_1
"""


def test_only_the_innermost_loop_of_the_kernel_is_counted():
    assert innermost_loops(ISA, "k") == [Loop(".LBB0_2", instructions=4, mfma=0, global_memory=1, lds=1, waitcnt=1)]
    with pytest.raises(ValueError, match="kernel missing is not in the assembly"):
        innermost_loops(ISA, "missing")


def test_the_warp_body_loop_has_no_scratch_and_no_mfma():
    """On a real code object: the gfx942 warp body's key loop (vector ALU and global memory only)."""
    result = Compiler().compile_spec(AttentionBwdSpec("bf16", 64, mask=Mask("causal_top_left")), "gfx942", body="warp")
    name = next(n for n in result.kernel_names if n.endswith("dq_dk_dv"))
    loops = innermost_loops(result.isa, name)
    assert len(loops) == 1 and loops[0].mfma == 0 and loops[0].global_memory > 0 and loops[0].instructions > 20
    assert ".private_segment_fixed_size: 0" in result.isa


@pytest.mark.parametrize("arch,hdim", [(arch, h) for arch, rows in AMD_TILED_TABLE.items() for h in rows])
def test_every_tiled_table_row_has_mfma_in_its_loop_no_scratch_and_two_waves_per_simd(arch, hdim):
    """The static facts the AMD table rows were chosen by, for each gfx942 / gfx950 row, from the code object
    (causal: the loop holds both the cut and the whole tile's code)."""
    spec = AttentionBwdSpec("bf16", hdim, mask=Mask("causal_bottom_right"))
    result = Compiler().compile_spec(spec, arch)
    assert result.config == AMD_TILED_TABLE[arch][hdim]
    name = next(n for n in result.kernel_names if n.endswith("dq_dk_dv"))
    kernel = read_hsaco_metadata(result.binary)["kernels"][name]
    step = next(s for s in result.manifest["steps"] if s.get("kernel") == name)
    lds = kernel["group_segment_fixed_size"] + step["shared_bytes"]
    assert kernel["private_segment_fixed_size"] == 0 and kernel["wavefront_size"] == 64
    waves, _ = waves_per_simd(kernel["vgpr_count"], kernel["agpr_count"], lds, result.config.warps, arch)
    assert waves >= 2
    loop, = innermost_loops(result.isa, name)
    config = result.config
    per_wave = 2 * config.block_m * config.block_n * (3 * hdim + 2 * hdim) // config.warps
    shape = config.mfma
    assert loop.mfma == per_wave // (2 * shape.m * shape.n * shape.k)   # every product's MFMAs, once per step


def test_the_tile_step_counts_and_the_roofline():
    from fmha_mlir.kernel_config import TiledConfig
    spec = AttentionBwdSpec("bf16", 128)
    config = TiledConfig(wave_size=64, block_m=32, block_n=64, warps=8, instruction="mfma.16x16x16")
    flops, moved = tile_step(spec, config)
    assert flops == 2 * 32 * 64 * 5 * 128
    assert moved == 32 * 256 * 2 + 8 * 32 + 32 * 128 * 4
    assert roofline(flops, moved, PARTS["gfx942"]) == pytest.approx(flops / moved * 5.3)
    assert roofline(10 ** 9, 1, PARTS["gfx950"]) == PARTS["gfx950"].peak_tflops
