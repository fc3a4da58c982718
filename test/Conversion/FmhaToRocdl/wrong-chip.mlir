// RUN: fmha-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(convert-fmha-to-rocdl{chipset=gfx942})'
// RUN: not fmha-opt %s --split-input-file --pass-pipeline='builtin.module(convert-fmha-to-rocdl{chipset=gfx942})' 2>/dev/null | FileCheck %s

// Each kernel's fmha.spec / fmha.config (fmha-stages-to-gpu) is checked against the chipset before
// anything is lowered: a body built for another chip is an error located at its gpu.func, not a
// module the backend rejects later, or an LLVM abort.

gpu.module @kernels {
  // expected-error @+1 {{convert-fmha-to-rocdl: kernel @sm90_body (tiled body, wave 32, mma.m16n8k16) cannot run on gfx942: config.wave_size: 32, but gfx942 waves have 64 lanes (compile it for gfx942, or lower it for the chip it was built for)}}
  gpu.func @sm90_body() kernel attributes {fmha.config = {block_m = 64 : i64, block_n = 128 : i64, body = "tiled", dkv_warps = array<i64: 4, 2>, dq_warps = array<i64: 2, 4>, instruction = "mma.m16n8k16", sdp_warps = array<i64: 4, 2>, stages = 2 : i64, swizzle = "xor", warps = 8 : i64, wave_size = 32 : i64}, fmha.spec = {bias = "none", dbias = false, deterministic = false, dtype = "bf16", gqa_ratio = 1 : i64, hdim_q = 128 : i64, hdim_v = 128 : i64, mask = "none", scale = 0.0883883461 : f32, window_left = -1 : i64, window_right = -1 : i64}} {
    gpu.return
  }
}

// -----

gpu.module @kernels {
  // expected-error @+1 {{kernel @gfx950_body (tiled body, wave 64, mfma.16x16x32) cannot run on gfx942: config.instruction: mfma.16x16x32 is not an gfx942 instruction (use one of mfma.32x32x8, mfma.16x16x16)}}
  gpu.func @gfx950_body() kernel attributes {fmha.config = {block_m = 32 : i64, block_n = 128 : i64, body = "tiled", dkv_warps = array<i64: 4, 2>, dq_warps = array<i64: 2, 4>, instruction = "mfma.16x16x32", sdp_warps = array<i64: 4, 2>, swizzle = "pad", warps = 8 : i64, wave_size = 64 : i64}, fmha.spec = {bias = "none", dbias = false, deterministic = false, dtype = "bf16", gqa_ratio = 1 : i64, hdim_q = 128 : i64, hdim_v = 128 : i64, mask = "none", scale = 0.0883883461 : f32, window_left = -1 : i64, window_right = -1 : i64}} {
    gpu.return
  }
}

// -----

// The chipset's own body converts.
// CHECK-LABEL: gpu.module @own_chip
gpu.module @own_chip {
  // CHECK: gpu.func @gfx942_body() kernel
  gpu.func @gfx942_body() kernel attributes {fmha.config = {block_m = 32 : i64, block_n = 64 : i64, body = "tiled", dkv_warps = array<i64: 4, 2>, dq_warps = array<i64: 2, 4>, instruction = "mfma.16x16x16", sdp_warps = array<i64: 4, 2>, swizzle = "pad", warps = 8 : i64, wave_size = 64 : i64}, fmha.spec = {bias = "none", dbias = false, deterministic = false, dtype = "bf16", gqa_ratio = 1 : i64, hdim_q = 128 : i64, hdim_v = 128 : i64, mask = "none", scale = 0.0883883461 : f32, window_left = -1 : i64, window_right = -1 : i64}} {
    gpu.return
  }
}
