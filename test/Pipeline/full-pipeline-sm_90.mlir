// The whole NVIDIA pipeline by pass name in one fmha-opt pipeline, warp body: wave32, xor shuffles,
// ex2.approx, device-scope relaxed atomics.
// RUN: fmha-opt %s --pass-pipeline='builtin.module(fmha-select-kernel-config{target=sm_90 body=warp},fmha-decompose-bwd,fmha-stages-to-gpu,fmha-expand-warp-body,gpu.module(canonicalize,cse),convert-fmha-to-nvvm,nvvm-attach-target{chip=sm_90},gpu.module(convert-scf-to-cf,expand-strided-metadata,lower-affine,convert-gpu-to-nvvm),reconcile-unrealized-casts,fmha-hardware-atomics{target=nvidia})' | FileCheck %s

!t = memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @bwd
// CHECK:         gpu.launch_func @fmha_kernels::@fmha_bwd_f16_d128x128_g1_win32_0_warp32_dot_do_o {{.*}} threads in (%{{.*}}, %{{.*}}, %{{.*}})
// CHECK:         gpu.launch_func @fmha_kernels::@fmha_bwd_f16_d128x128_g1_win32_0_warp32_dq_dk_dv
// CHECK:       gpu.module @fmha_kernels [#nvvm.target<chip = "sm_90">]
// CHECK-LABEL:   llvm.func @fmha_bwd_f16_d128x128_g1_win32_0_warp32_dot_do_o
// A row of 128 f16 is 16 lanes of 16 bytes: log2(16) = 4 butterfly steps for D.
// CHECK-COUNT-4:   nvvm.shfl.sync bfly
// CHECK-NOT:       nvvm.shfl.sync
// CHECK-LABEL:   llvm.func @fmha_bwd_f16_d128x128_g1_win32_0_warp32_dq_dk_dv
// log2(32) = 5 butterfly steps per wave reduction in the warp body.
// CHECK-COUNT-5:   nvvm.shfl.sync bfly
// CHECK:           llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK-COUNT-5:   nvvm.shfl.sync bfly
// E = 128 / 32 = 4 elements per lane: four dV and four dK atomics per key.
// CHECK-COUNT-8:   llvm.atomicrmw fadd {{.*}} syncscope("device") monotonic
// CHECK-NOT:       llvm.atomicrmw
// CHECK-LABEL:   llvm.func @fmha_bwd_f16_d128x128_g1_win32_0_warp32_convert_dk
func.func @bwd(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %dq: !t, %dk: !t, %dv: !t) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "f16", hdim_q = 128 : i64, hdim_v = 128 : i64, gqa_ratio = 1 : i64,
      mask = "sliding_window", window_left = 32 : i64, window_right = 0 : i64,
      scale = 0.0883883461 : f32, bias = "none", dbias = false, deterministic = false
  } : (!t, !t, !t, !t, !t, !rows, !t, !t, !t) -> ()
  return
}
