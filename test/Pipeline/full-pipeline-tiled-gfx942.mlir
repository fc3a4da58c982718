// The whole AMD pipeline of the tiled (MFMA) body by pass name: problem op -> stages -> kernels with a
// dynamic-LDS launch -> the MFMA body -> rocdl.mfma, raw buffer loads, hardware f32 atomics, and the
// dynamic LDS as the external zero-sized global AMDGPU places after static LDS.
// RUN: fmha-opt %s --pass-pipeline='builtin.module(fmha-select-kernel-config{target=gfx942},fmha-decompose-bwd,fmha-stages-to-gpu,fmha-expand-tiled-body,gpu.module(canonicalize,cse),convert-fmha-to-rocdl{chipset=gfx942},rocdl-attach-target{chip=gfx942},gpu.module(convert-scf-to-cf,expand-strided-metadata,lower-affine,convert-amdgpu-to-rocdl{chipset=gfx942},convert-gpu-to-rocdl{chipset=gfx942}),reconcile-unrealized-casts,fmha-hardware-atomics{target=amd},fmha-extern-dynamic-shared)' | FileCheck %s

!t = memref<?x?x?x128xbf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// d128 on gfx942 takes the table's 32 x 64 tile, 8 waves, 16x16x16; 60160 bytes of LDS.
// CHECK-LABEL: func.func @bwd
// CHECK:         gpu.launch_func @fmha_kernels::@fmha_bwd_bf16_d128x128_g2_br_tiled_m32n64w8s1_{{[0-9a-f]+}}_dot_do_o
// CHECK:         gpu.launch_func @fmha_kernels::@fmha_bwd_bf16_d128x128_g2_br_tiled_m32n64w8s1_{{[0-9a-f]+}}_dq_dk_dv
// CHECK-SAME:      threads in (%{{.*}}, %{{.*}}, %{{.*}}) dynamic_shared_memory_size %c60160_i32
// CHECK:         gpu.launch_func @fmha_kernels::@fmha_bwd_bf16_d128x128_g2_br_tiled_m32n64w8s1_{{[0-9a-f]+}}_convert_dq
// CHECK:       gpu.module @fmha_kernels [#rocdl.target<chip = "gfx942">]
// CHECK:         llvm.mlir.global external @__dynamic_shmem__0() {addr_space = 3 : i32, alignment = 1024 : i64, dso_local} : !llvm.array<0 x i8>
// CHECK-LABEL:   llvm.func @fmha_bwd_bf16_d128x128_g2_br_tiled_m32n64w8s1_{{[0-9a-f]+}}_dq_dk_dv
// CHECK-SAME:      rocdl.flat_work_group_size = "512,512"
// K and V: 64 rows of 16 chunks over 512 lanes, two rounds each, before the loop.
// CHECK-COUNT-4:   rocdl.raw.ptr.buffer.load {{.*}} : vector<4xi32>
// CHECK:           rocdl.mfma.f32.16x16x16bf16.1k
// A wave's dQ tile is 16 queries x 32 columns: 2 instruction tiles x 4 registers, one atomic each.
// CHECK-COUNT-8:   llvm.atomicrmw fadd {{.*}} syncscope("agent") monotonic {rocdl.no_fine_grained_memory}
// CHECK-NOT:       llvm.atomicrmw
// CHECK-LABEL:   llvm.func @fmha_bwd_bf16_d128x128_g2_br_tiled_m32n64w8s1_{{[0-9a-f]+}}_convert_dq
func.func @bwd(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %dq: !t, %dk: !t, %dv: !t) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "bf16", hdim_q = 128 : i64, hdim_v = 128 : i64, gqa_ratio = 2 : i64,
      mask = "causal_bottom_right", window_left = -1 : i64, window_right = -1 : i64,
      scale = 0.0883883461 : f32, bias = "none", dbias = false, deterministic = false
  } : (!t, !t, !t, !t, !t, !rows, !t, !t, !t) -> ()
  return
}
