"""The real kernels at two levels, run by the interpreter through the bundle runner: the compiler's
"kernel" stage (target kernel IR, generic text, as bundles carry it) and its "gpu" stage (the bodies
expanded into target-neutral fmha kernel ops and, for the tiled body, nvgpu matrix ops), judged by the
one gate against the float64 oracle."""

import dataclasses

import pytest

from fmha_mlir.bodies.tiled import tiled_config
from fmha_mlir.compiler import INTERP_IR_FILE, compile_spec
from fmha_mlir.kernel_config import TiledConfig
from fmha_mlir.problem import ProblemSize, make_problem
from fmha_mlir.runtime.bundle import Bundle
from fmha_mlir.runtime.cpu_executor import CpuExecutor
from fmha_mlir.runtime.runner import run_bundle
from fmha_mlir.spec import AttentionBwdSpec, Mask
from fmha_mlir.target import TARGETS

from interp_support import generic

def stage_bundle(compiled, stage: str) -> Bundle:
    """The compiled bundle, with the interpreter's IR taken from `stage` instead of the kernel stage."""
    files = compiled.bundle_files()
    if stage != "kernel":
        files[INTERP_IR_FILE] = generic(compiled.stages[stage]).encode()
    return Bundle(compiled.manifest, files)

@pytest.mark.parametrize("arch,body,dtype,mask,gqa,atomic_order,stage", [
    ("gfx942", "warp", "f16", "bottom_right", 2, "sequential", "kernel"),
    ("sm_90", "warp", "bf16", "window:5,3", 1, "random", "kernel"),
    ("gfx950", "warp", "f32", "top_left", 1, "random", "kernel"),
    ("sm_90", "warp", "f16", "window:5,3", 2, "sequential", "gpu"),
    ("sm_90", "tiled", "bf16", "bottom_right", 2, "random", "gpu"),
    ("sm_90", "tiled", "f16", "window:5,3", 1, "sequential", "kernel"),
    ("gfx942", "tiled", "bf16", "bottom_right", 2, "random", "gpu"),
    ("gfx950", "tiled", "f16", "window:5,3", 1, "sequential", "gpu"),
])
def test_compiled_kernels_match_the_oracle(arch, body, dtype, mask, gqa, atomic_order, stage):
    spec = AttentionBwdSpec(dtype=dtype, hdim_q=64, gqa_ratio=gqa, mask=Mask.parse(mask))
    compiled = compile_spec(spec, arch, body=body)
    bundle = stage_bundle(compiled, stage)
    assert bundle.config.body == body
    # Sq < Sk, lengths that fill no tile, BSHD storage: the kernels must honour strides and edges.
    problem = make_problem(spec, ProblemSize(1, 2 * gqa, 24, 40), seed=7, layout="bshd")
    inputs = {n: problem.tensors[n] for n in ("q", "k", "v", "o", "do", "lse")}
    grads = run_bundle(bundle, CpuExecutor(atomic_order=atomic_order, seed=1), inputs)
    checks = problem.check(grads, bundle.numerics)
    assert all(c.passed for c in checks), "\n".join(map(str, checks))
    assert max(c.scale for c in checks) > 0.1  # a real problem, not all-masked zeros


def _tiled_across_tiles(arch: str, spec, size, config) -> Bundle:
    """The tiled bundle (kernel stage) through the gate on a problem of two tiles or more on each axis."""
    bundle = stage_bundle(compile_spec(spec, arch, body="tiled", config=config), "kernel")
    problem = make_problem(spec, size, seed=11, layout="bshd")
    grads = run_bundle(bundle, CpuExecutor(atomic_order="random", seed=2),
                       {n: problem.tensors[n] for n in ("q", "k", "v", "o", "do", "lse")})
    checks = problem.check(grads, bundle.numerics)
    assert all(c.passed for c in checks), "\n".join(map(str, checks))
    assert size.seqlen_k > bundle.config.block_n and size.seqlen_q > bundle.config.block_m
    return bundle


SMALL_TILES = dict(wave_size=32, instruction="mma.m16n8k16", swizzle="xor")
M32N32_DOUBLE_BUFFERED = TiledConfig(**SMALL_TILES, block_m=32, block_n=32, warps=2, stages=2, sdp_warps=(2, 1),
                                      dkv_warps=(2, 1), dq_warps=(2, 1), p_in_registers=True)
M32N64_P_IN_SHARED = TiledConfig(**SMALL_TILES, block_m=32, block_n=64, warps=4, stages=1, sdp_warps=(2, 2),
                                  dkv_warps=(4, 1), dq_warps=(1, 4), p_in_registers=False)


@pytest.mark.parametrize("spec,size,config", [
    (AttentionBwdSpec("bf16", 64, mask=Mask("causal_bottom_right"), gqa_ratio=2), ProblemSize(1, 4, 150, 100),
     M32N32_DOUBLE_BUFFERED),
    (AttentionBwdSpec("f16", 64, mask=Mask("sliding_window", 20, 7)), ProblemSize(1, 1, 90, 170), M32N64_P_IN_SHARED),
    (AttentionBwdSpec("f16", 128, hdim_v=64, mask=Mask("sliding_window", -1, 0)), ProblemSize(1, 2, 70, 100),
     M32N32_DOUBLE_BUFFERED),
    (AttentionBwdSpec("bf16", 64, mask=Mask("causal_top_left")), ProblemSize(1, 2, 130, 130), None),
    (AttentionBwdSpec("f16", 64, gqa_ratio=2), ProblemSize(2, 2, 150, 260), None),
    (AttentionBwdSpec("bf16", 64, mask=Mask("causal_top_left"), gqa_ratio=2), ProblemSize(2, 4, 100, 130),
     dataclasses.replace(M32N32_DOUBLE_BUFFERED, grid_order="keys_inner")),
    (AttentionBwdSpec("bf16", 64, softcap=30.0, gqa_ratio=2), ProblemSize(1, 4, 90, 170),
     dataclasses.replace(M32N64_P_IN_SHARED, split_tail_loop=True)),
], ids=["br-sq>sk-m32n32", "window-m32n64-p-shared", "window-left-unbounded-dv64", "tl-table-config",
        "none-batch2-table-config", "tl-batch2-gqa-keys-inner", "none-softcap-split-tail-loop-m32n64"])
def test_tiled_body_across_tiles(spec, size, config):
    """Several key blocks per head and several query blocks per key block: the double-buffered query
    loop, the GQA head walk, tiles the mask cuts next to tiles it leaves whole, and partial last
    blocks on both axes."""
    bundle = _tiled_across_tiles("sm_90", spec, size, config)
    config = bundle.config
    grid = next(s["grid"] for s in bundle.manifest["steps"] if str(s.get("kernel")).endswith("dq_dk_dv"))
    key_axis = {"keys_inner": 0, "keys_outer": 2}[config.grid_order]
    assert grid[key_axis] == {"ceildiv": [{"dim": ["k", 2]}, config.block_n]}  # the order the kernel reads


MFMA_TILES = dict(wave_size=64, stages=1, swizzle="none")
M64N64_32X32X8 = TiledConfig(**MFMA_TILES, instruction="mfma.32x32x8", block_m=64, block_n=64, warps=4,
                              sdp_warps=(2, 2), dkv_warps=(2, 2), dq_warps=(2, 2))
M32N64_32X32X16 = TiledConfig(**MFMA_TILES, instruction="mfma.32x32x16", block_m=32, block_n=64, warps=2,
                               sdp_warps=(2, 1), dkv_warps=(2, 1), dq_warps=(1, 2))
M32N32_16X16X32 = TiledConfig(**MFMA_TILES, instruction="mfma.16x16x32", block_m=32, block_n=32, warps=4,
                               sdp_warps=(2, 2), dkv_warps=(1, 4), dq_warps=(2, 2), grid_order="keys_inner")


@pytest.mark.parametrize("arch,spec,size,config", [
    ("gfx942", AttentionBwdSpec("bf16", 64, mask=Mask("causal_bottom_right"), gqa_ratio=2), ProblemSize(1, 4, 150, 100),
     M64N64_32X32X8),
    ("gfx942", AttentionBwdSpec("f16", 128, hdim_v=64, mask=Mask("sliding_window", 20, 7)), ProblemSize(1, 1, 90, 170),
     dataclasses.replace(M32N64_32X32X16, instruction="mfma.32x32x8")),
    ("gfx950", AttentionBwdSpec("bf16", 64, mask=Mask("sliding_window", -1, 0)), ProblemSize(1, 2, 70, 100),
     M32N64_32X32X16),
    ("gfx950", AttentionBwdSpec("f16", 64, mask=Mask("causal_top_left"), gqa_ratio=2), ProblemSize(2, 4, 100, 130),
     M32N32_16X16X32),
    ("gfx942", AttentionBwdSpec("bf16", 128, mask=Mask("causal_top_left")), ProblemSize(1, 2, 130, 130), None),
    ("gfx950", AttentionBwdSpec("f16", 256, gqa_ratio=2), ProblemSize(2, 2, 80, 150), None),
    ("gfx950", AttentionBwdSpec("bf16", 64), ProblemSize(1, 2, 70, 100),
     dataclasses.replace(M32N64_32X32X16, split_tail_loop=True)),
], ids=["gfx942-br-sq>sk-32x32x8", "gfx942-window-dv64-32x32x8", "gfx950-window-left-unbounded-32x32x16",
        "gfx950-tl-batch2-gqa-keys-inner-16x16x32", "gfx942-tl-table-config", "gfx950-none-d256-table-config",
        "gfx950-none-split-tail-loop-32x32x16"])
def test_mfma_tiled_body_across_tiles(arch, spec, size, config):
    """The MFMA body over several key and query blocks: every MFMA shape (the table uses the 16x16
    ones), the GQA head walk, cut and whole tiles, partial last blocks, both grid orders."""
    bundle = _tiled_across_tiles(arch, spec, size, config)
    assert bundle.config.mfma is not None and bundle.config.wave_size == 64


@pytest.mark.parametrize("spec,split", [
    (AttentionBwdSpec("bf16", 128), True),
    (AttentionBwdSpec("bf16", 64, mask=Mask("causal_top_left")), True),   # the row's choice; no tail loop to split
    (AttentionBwdSpec("bf16", 128, softcap=30.0), False),
    (AttentionBwdSpec("bf16", 128, bias="alibi"), False),
    (AttentionBwdSpec("bf16", 256), False),
])
def test_the_table_splits_the_tail_loop_of_plain_scores_at_d64_d128(spec, split):
    """The sm_90 rows that measured faster with the tail loop split (d64, d128) keep it for plain scores;
    a score modification, whose split loop spills more, and d256 keep the per-step test."""
    assert tiled_config(spec, TARGETS["sm_90"]).split_tail_loop is split
