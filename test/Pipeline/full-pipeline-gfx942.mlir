// The whole AMD pipeline by pass name in one fmha-opt pipeline, ours and upstream mixed: problem op
// -> stages -> kernels and launches -> warp body -> DPP / rocdl.exp2 -> LLVM with hardware atomics.
// RUN: fmha-opt %s --pass-pipeline='builtin.module(fmha-select-kernel-config{target=gfx942 body=warp},fmha-decompose-bwd,fmha-stages-to-gpu,fmha-expand-warp-body,gpu.module(canonicalize,cse),convert-fmha-to-rocdl{chipset=gfx942},rocdl-attach-target{chip=gfx942},gpu.module(convert-scf-to-cf,expand-strided-metadata,lower-affine,convert-amdgpu-to-rocdl{chipset=gfx942},convert-gpu-to-rocdl{chipset=gfx942}),reconcile-unrealized-casts,fmha-hardware-atomics{target=amd})' | FileCheck %s

!t = memref<?x?x?x128xbf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @bwd
// CHECK:         memref.alloc({{.*}}) {fmha.workspace = "d"} : memref<?x?x?xf32>
// CHECK:         gpu.launch_func @fmha_kernels::@fmha_bwd_bf16_d128x128_g4_br_warp64_dot_do_o
// CHECK-COUNT-2: gpu.memset
// CHECK:         gpu.launch_func @fmha_kernels::@fmha_bwd_bf16_d128x128_g4_br_warp64_dq_dk_dv
// CHECK:         gpu.launch_func @fmha_kernels::@fmha_bwd_bf16_d128x128_g4_br_warp64_convert_dk
// CHECK:         gpu.launch_func @fmha_kernels::@fmha_bwd_bf16_d128x128_g4_br_warp64_convert_dv
// CHECK:       gpu.module @fmha_kernels [#rocdl.target<chip = "gfx942">]
// dot_do_o: 512 threads, 16 lanes (16 bytes each) per 128-element row; D is an in-row DPP sum.
// CHECK-LABEL:   llvm.func @fmha_bwd_bf16_d128x128_g4_br_warp64_dot_do_o
// CHECK-SAME:      rocdl.flat_work_group_size = "512,512"
// CHECK-COUNT-4:   rocdl.update.dpp
// CHECK-NOT:       rocdl.update.dpp
// CHECK-NOT:       rocdl.readlane
// CHECK-LABEL:   llvm.func @fmha_bwd_bf16_d128x128_g4_br_warp64_dq_dk_dv
// CHECK-SAME:      rocdl.flat_work_group_size = "64,64"
// CHECK-COUNT-6:   rocdl.update.dpp
// CHECK:           rocdl.readlane
// CHECK:           rocdl.exp2
// E = 128 / 64 = 2 elements per lane: two dK and two dV hardware atomics per key.
// CHECK-COUNT-4:   llvm.atomicrmw fadd {{.*}} syncscope("agent") monotonic {rocdl.no_fine_grained_memory}
// CHECK-NOT:       llvm.atomicrmw
// CHECK-LABEL:   llvm.func @fmha_bwd_bf16_d128x128_g4_br_warp64_convert_dk
func.func @bwd(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %dq: !t, %dk: !t, %dv: !t) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "bf16", hdim_q = 128 : i64, hdim_v = 128 : i64, gqa_ratio = 4 : i64,
      mask = "causal_bottom_right", window_left = -1 : i64, window_right = -1 : i64,
      scale = 0.0883883461 : f32, bias = "none", dbias = false, deterministic = false
  } : (!t, !t, !t, !t, !t, !rows, !t, !t, !t) -> ()
  return
}
