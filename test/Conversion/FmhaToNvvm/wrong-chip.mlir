// RUN: fmha-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(convert-fmha-to-nvvm)'

// An MFMA body (wave 64) is not lowered for sm_90: the error names the kernel and what it was built for.

gpu.module @kernels {
  // expected-error @+1 {{convert-fmha-to-nvvm: kernel @gfx942_body (tiled body, wave 64, mfma.16x16x16) cannot run on sm_90: config.wave_size: 64, but sm_90 waves have 32 lanes (compile it for sm_90, or lower it for the chip it was built for)}}
  gpu.func @gfx942_body() kernel attributes {fmha.config = {block_m = 32 : i64, block_n = 64 : i64, body = "tiled", dkv_warps = array<i64: 4, 2>, dq_warps = array<i64: 2, 4>, instruction = "mfma.16x16x16", sdp_warps = array<i64: 4, 2>, swizzle = "pad", warps = 8 : i64, wave_size = 64 : i64}, fmha.spec = {bias = "none", dbias = false, deterministic = false, dtype = "bf16", gqa_ratio = 1 : i64, hdim_q = 128 : i64, hdim_v = 128 : i64, mask = "none", scale = 0.0883883461 : f32, window_left = -1 : i64, window_right = -1 : i64}} {
    gpu.return
  }
}

// -----

// A module attached to an AMD chip is not lowered for NVIDIA.
gpu.module @kernels [#rocdl.target<chip = "gfx942">] {
  // expected-error @+1 {{cannot run on sm_90}}
  gpu.func @amd_module() kernel attributes {fmha.config = {block_m = 32 : i64, block_n = 64 : i64, body = "tiled", dkv_warps = array<i64: 4, 2>, dq_warps = array<i64: 2, 4>, instruction = "mfma.16x16x16", sdp_warps = array<i64: 4, 2>, swizzle = "pad", warps = 8 : i64, wave_size = 64 : i64}, fmha.spec = {bias = "none", dbias = false, deterministic = false, dtype = "bf16", gqa_ratio = 1 : i64, hdim_q = 128 : i64, hdim_v = 128 : i64, mask = "none", scale = 0.0883883461 : f32, window_left = -1 : i64, window_right = -1 : i64}} {
    gpu.return
  }
}
