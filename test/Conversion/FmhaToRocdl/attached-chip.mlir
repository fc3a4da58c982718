// RUN: fmha-opt %s --verify-diagnostics --pass-pipeline='builtin.module(convert-fmha-to-rocdl{chipset=gfx942})'
// RUN: fmha-opt %s --verify-diagnostics --pass-pipeline='builtin.module(convert-fmha-to-rocdl{chipset=gfx950})'
// RUN: fmha-opt %s --verify-diagnostics --pass-pipeline='builtin.module(fmha-hardware-atomics{target=amd})'

// A gfx950 body in a gpu.module for gfx942: refused whether the conversion is for gfx942 (its chipset)
// or for gfx950 (the module's chip), and by the last fmha pass before the binary, where LLVM would
// otherwise abort ("Cannot select: intrinsic %llvm.amdgcn.mfma.f32.16x16x32.bf16").

gpu.module @kernels [#rocdl.target<chip = "gfx942">] {
  // expected-error @+1 {{kernel @gfx950_body (tiled body, wave 64, mfma.16x16x32) cannot run on gfx942: config.instruction: mfma.16x16x32 is not an gfx942 instruction (use one of mfma.32x32x8, mfma.16x16x16) (compile it for gfx942, or lower it for the chip it was built for)}}
  gpu.func @gfx950_body() kernel attributes {fmha.config = {block_m = 32 : i64, block_n = 128 : i64, body = "tiled", dkv_warps = array<i64: 4, 2>, dq_warps = array<i64: 2, 4>, instruction = "mfma.16x16x32", sdp_warps = array<i64: 4, 2>, swizzle = "pad", warps = 8 : i64, wave_size = 64 : i64}, fmha.spec = {bias = "none", dbias = false, deterministic = false, dtype = "bf16", gqa_ratio = 1 : i64, hdim_q = 128 : i64, hdim_v = 128 : i64, mask = "none", scale = 0.0883883461 : f32, window_left = -1 : i64, window_right = -1 : i64}} {
    gpu.return
  }
}
