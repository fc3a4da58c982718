// RUN: fmha-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(fmha-decompose-bwd)' | FileCheck %s

// grad_accum = "bf16" on the tiled body: dQ's packed bf16 atomics add into dq itself, so there is no
// dq_acc workspace and no convert; dq is zero-filled (with a bf16 zero) before the main kernel.

!t = memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @bwd_tiled_bf16_accum
// CHECK-SAME: (%[[Q:arg0]]: {{.*}}, %[[K:arg1]]: {{.*}}, %[[V:arg2]]: {{.*}}, %[[O:arg3]]: {{.*}}, %[[DO:arg4]]: {{.*}}, %[[LSE:arg5]]: {{.*}}, %[[DQ:arg6]]: {{.*}}, %[[DK:arg7]]: {{.*}}, %[[DV:arg8]]: {{.*}})
// CHECK:      memref.alloc({{.*}}) {fmha.workspace = "d"}
// CHECK-NOT:  fmha.workspace = "dq_acc"
// CHECK:      %[[ZERO:.*]] = arith.constant 0.000000e+00 : bf16
// CHECK:      gpu.memset %[[DQ]], %[[ZERO]]
// CHECK:      "fmha.dq_dk_dv"(%[[Q]], %[[K]], %[[V]], %[[DO]], %[[LSE]], %{{.*}}, %[[DQ]], %[[DK]], %[[DV]])
// CHECK-SAME:     grad_accum = "bf16"
// CHECK-NOT:  fmha.convert_grad
func.func @bwd_tiled_bf16_accum(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %dq: !t, %dk: !t, %dv: !t) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false, grad_accum = "bf16",
      config = {body = "tiled", wave_size = 32 : i64, block_m = 64 : i64, block_n = 128 : i64, warps = 8 : i64,
                stages = 2 : i64, instruction = "mma.m16n8k16", sdp_warps = array<i64: 8, 1>,
                dkv_warps = array<i64: 8, 1>, dq_warps = array<i64: 4, 2>, p_in_registers = true, swizzle = "xor"}}
      : (!t, !t, !t, !t, !t, !rows, !t, !t, !t) -> ()
  return
}

// -----

// The warp body has no dQ atomics to make bf16: the verifier says why.

!t = memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

func.func @bwd_warp_bf16_accum(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %dq: !t, %dk: !t, %dv: !t) {
  // expected-error @+1 {{the warp body stores dQ (one wave owns a row)}}
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false, grad_accum = "bf16",
      config = {body = "warp", wave_size = 32 : i64}}
      : (!t, !t, !t, !t, !t, !rows, !t, !t, !t) -> ()
  return
}
