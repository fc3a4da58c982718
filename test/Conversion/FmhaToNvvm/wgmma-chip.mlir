// RUN: fmha-opt %s --verify-diagnostics --pass-pipeline='builtin.module(convert-fmha-to-nvvm)'
// RUN: fmha-opt %s --pass-pipeline='builtin.module(convert-fmha-to-nvvm{chip=sm_90a})' | FileCheck %s

// A wgmma body is lowered for the arch-specific chip only: plain sm_90 (the pass's default chip) refuses
// it with the reason; chip=sm_90a takes it.

// CHECK-LABEL: gpu.func @wgmma_body
gpu.module @kernels {
  // expected-error @+1 {{convert-fmha-to-nvvm: kernel @wgmma_body (tiled body, wave 32, wgmma.m64n64k16) cannot run on sm_90: config.instruction: wgmma.m64n64k16 needs an arch-specific chip (sm_90a), not sm_90 (compile with --target sm_90a, or use instruction mma.m16n8k16)}}
  gpu.func @wgmma_body() kernel attributes {fmha.config = {block_m = 64 : i64, block_n = 64 : i64, body = "tiled", dkv_warps = array<i64: 1, 1>, dq_warps = array<i64: 1, 1>, instruction = "wgmma.m64n64k16", p_in_registers = true, sdp_warps = array<i64: 1, 1>, stages = 2 : i64, swizzle = "sw128", warps = 4 : i64, wave_size = 32 : i64}, fmha.spec = {bias = "none", dbias = false, deterministic = false, dtype = "bf16", gqa_ratio = 1 : i64, hdim_q = 64 : i64, hdim_v = 64 : i64, mask = "none", scale = 0.125 : f32, window_left = -1 : i64, window_right = -1 : i64}} {
    gpu.return
  }
}
