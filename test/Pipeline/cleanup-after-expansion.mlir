// The gpu stage ends with canonicalize and cse inside the gpu.module (fmha_mlir/compiler.py stage_pipeline):
// the constants the body builders emit per use are folded to one of each, hoisted to the kernel's entry,
// so nothing below the first non-constant op defines one; the host function (the launch plan) is left alone.
// RUN: fmha-opt %s --pass-pipeline='builtin.module(fmha-select-kernel-config{target=sm_90 body=warp},fmha-decompose-bwd,fmha-stages-to-gpu,fmha-expand-warp-body,gpu.module(canonicalize,cse))' | FileCheck %s

!t = memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @bwd
// CHECK:         gpu.launch_func @fmha_kernels::@fmha_bwd_f16_d128x128_g1_win32_0_warp32_dq_dk_dv
// CHECK-LABEL: gpu.func @fmha_bwd_f16_d128x128_g1_win32_0_warp32_dq_dk_dv(
// CHECK:         arith.constant 0.0883883461 : f32
// CHECK:         %c0 = arith.constant 0 : index
// CHECK-NOT:     arith.constant 0 : index
// CHECK:         gpu.block_id x
// CHECK-NOT:     arith.constant
// CHECK:         gpu.return
func.func @bwd(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %dq: !t, %dk: !t, %dv: !t) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "f16", hdim_q = 128 : i64, hdim_v = 128 : i64, gqa_ratio = 1 : i64,
      mask = "sliding_window", window_left = 32 : i64, window_right = 0 : i64,
      scale = 0.0883883461 : f32, bias = "none", dbias = false, deterministic = false
  } : (!t, !t, !t, !t, !t, !rows, !t, !t, !t) -> ()
  return
}
