// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(fmha-stages-to-gpu)' | FileCheck %s

// Each stage becomes a kernel in @fmha_kernels and a host launch whose grid is read from its operands.

!t = memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>
!tv = memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>
!acc = memref<?x?x?x128xf32, strided<[?, ?, ?, 1]>>
!accv = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: module attributes {gpu.container_module}
// CHECK-LABEL: func.func @stages
// CHECK-SAME: (%[[Q:arg0]]: {{.*}}, %[[K:arg1]]: {{.*}}, %[[V:arg2]]: {{.*}}, %[[O:arg3]]: {{.*}}, %[[DO:arg4]]: {{.*}}, %[[LSE:arg5]]: {{.*}}, %[[DQ:arg6]]: {{.*}}, %[[DK:arg7]]: {{.*}}, %[[DV:arg8]]: {{.*}}, %[[D:arg9]]: {{.*}}, %[[DK_ACC:arg10]]: {{.*}}, %[[DV_ACC:arg11]]: {{.*}})
// The row kernels give each row hdim_v*2/16 = 8 lanes: 512 threads cover 64 rows.
// CHECK-DAG:  %[[OS:.*]] = memref.dim %[[O]], %c2
// CHECK-DAG:  %[[OROWS:.*]] = arith.ceildivui %[[OS]], %c64
// CHECK-DAG:  %[[OH:.*]] = memref.dim %[[O]], %c1
// CHECK-DAG:  %[[OB:.*]] = memref.dim %[[O]], %c0
// CHECK-DAG:  %[[W:.*]] = arith.constant 512 : index
// CHECK:      gpu.launch_func @fmha_kernels::@fmha_bwd_f16_d128x64_g2_br_s0p125_warp64_dot_do_o blocks in (%[[OROWS]], %[[OH]], %[[OB]]) threads in (%[[W]], %{{.*}}, %{{.*}}) args(%[[O]] : {{.*}}, %[[DO]] : {{.*}}, %[[D]] : {{.*}})
// CHECK:      gpu.memset %[[DK_ACC]]
// CHECK-DAG:  %[[QS:.*]] = memref.dim %[[Q]], %c2
// CHECK-DAG:  %[[QH:.*]] = memref.dim %[[Q]], %c1
// CHECK-DAG:  %[[QB:.*]] = memref.dim %[[Q]], %c0
// CHECK:      gpu.launch_func @fmha_kernels::@fmha_bwd_f16_d128x64_g2_br_s0p125_warp64_dq_dk_dv blocks in (%[[QS]], %[[QH]], %[[QB]]) threads in ({{.*}}) args(%[[Q]] : {{.*}}, %[[K]] : {{.*}}, %[[V]] : {{.*}}, %[[DO]] : {{.*}}, %[[LSE]] : {{.*}}, %[[D]] : {{.*}}, %[[DQ]] : {{.*}}, %[[DK_ACC]] : {{.*}}, %[[DV_ACC]] : {{.*}})
// CHECK-DAG:  %[[KS:.*]] = memref.dim %[[DK]], %c2
// CHECK-DAG:  %[[KROWS:.*]] = arith.ceildivui %[[KS]], %c32
// CHECK-DAG:  %[[KH:.*]] = memref.dim %[[DK]], %c1
// CHECK-DAG:  %[[KB:.*]] = memref.dim %[[DK]], %c0
// CHECK:      gpu.launch_func @fmha_kernels::@fmha_bwd_f16_d128x64_g2_br_s0p125_warp64_convert_dk blocks in (%[[KROWS]], %[[KH]], %[[KB]]) threads in ({{.*}}) args(%[[DK_ACC]] : {{.*}}, %[[DK]] : {{.*}})
// CHECK:      gpu.launch_func @fmha_kernels::@fmha_bwd_f16_d128x64_g2_br_s0p125_warp64_convert_dv {{.*}} args(%[[DV_ACC]] : {{.*}}, %[[DV]] : {{.*}})
// CHECK-NOT:  "fmha.
// CHECK:      return

// CHECK:      gpu.module @fmha_kernels
// CHECK:        gpu.func @fmha_bwd_f16_d128x64_g2_br_s0p125_warp64_dot_do_o(%[[A0:.*]]: memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>, %[[A1:.*]]: memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>, %[[A2:.*]]: memref<?x?x?xf32, strided<[?, ?, 1]>>) kernel
// CHECK-SAME:       fmha.config = {body = "warp", wave_size = 64 : i64}
// CHECK-SAME:       fmha.spec = {bias = "none", {{.*}}mask = "causal_bottom_right"
// CHECK-SAME:       known_block_size = array<i32: 512, 1, 1>
// CHECK-NEXT:     "fmha.dot_do_o"(%[[A0]], %[[A1]], %[[A2]])
// CHECK-SAME:       mask = "causal_bottom_right"
// CHECK-NEXT:     gpu.return
// CHECK:        gpu.func @fmha_bwd_f16_d128x64_g2_br_s0p125_warp64_dq_dk_dv({{.*}}) kernel attributes {{{.*}}known_block_size = array<i32: 64, 1, 1>}
// CHECK-NEXT:     "fmha.dq_dk_dv"(%arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7, %arg8)
// CHECK-NEXT:     gpu.return
// CHECK:        gpu.func @fmha_bwd_f16_d128x64_g2_br_s0p125_warp64_convert_dk(%{{.*}}: memref<?x?x?x128xf32, strided<[?, ?, ?, 1]>>, %{{.*}}: memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>) kernel
// CHECK-NEXT:     "fmha.convert_grad"(%arg0, %arg1)
// CHECK-SAME:       grad = "dk"
// CHECK:        gpu.func @fmha_bwd_f16_d128x64_g2_br_s0p125_warp64_convert_dv(%{{.*}}: memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, %{{.*}}: memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>) kernel
// CHECK-NEXT:     "fmha.convert_grad"(%arg0, %arg1)
// CHECK-SAME:       grad = "dv"
func.func @stages(%q: !t, %k: !t, %v: !tv, %o: !tv, %do: !tv, %lse: !rows, %dq: !t, %dk: !t, %dv: !tv,
                  %d: !rows, %dk_acc: !acc, %dv_acc: !accv) {
  "fmha.dot_do_o"(%o, %do, %d) {
      dtype = "f16", hdim_q = 128 : i64, hdim_v = 64 : i64, gqa_ratio = 2 : i64,
      mask = "causal_bottom_right", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}} : (!tv, !tv, !rows) -> ()
  %zero = arith.constant 0.0 : f32
  gpu.memset %dk_acc, %zero : !acc, f32
  gpu.memset %dv_acc, %zero : !accv, f32
  "fmha.dq_dk_dv"(%q, %k, %v, %do, %lse, %d, %dq, %dk_acc, %dv_acc) {
      dtype = "f16", hdim_q = 128 : i64, hdim_v = 64 : i64, gqa_ratio = 2 : i64,
      mask = "causal_bottom_right", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}}
      : (!t, !t, !tv, !tv, !rows, !rows, !t, !acc, !accv) -> ()
  "fmha.convert_grad"(%dk_acc, %dk) {grad = "dk",
      dtype = "f16", hdim_q = 128 : i64, hdim_v = 64 : i64, gqa_ratio = 2 : i64,
      mask = "causal_bottom_right", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}} : (!acc, !t) -> ()
  "fmha.convert_grad"(%dv_acc, %dv) {grad = "dv",
      dtype = "f16", hdim_q = 128 : i64, hdim_v = 64 : i64, gqa_ratio = 2 : i64,
      mask = "causal_bottom_right", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}} : (!accv, !tv) -> ()
  return
}

// -----

// The same stage twice (two problems with one spec) gives one kernel and two launches; an existing
// @fmha_kernels module is reused.

!t = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @twice
// CHECK:      gpu.launch_func @fmha_kernels::@fmha_bwd_f32_d64x64_g1_nomask_warp64_dot_do_o {{.*}} args(%arg0 : {{.*}}, %arg1 : {{.*}}, %arg2 : {{.*}})
// CHECK:      gpu.launch_func @fmha_kernels::@fmha_bwd_f32_d64x64_g1_nomask_warp64_dot_do_o {{.*}} args(%arg3 : {{.*}}, %arg4 : {{.*}}, %arg5 : {{.*}})
// CHECK:      gpu.module @fmha_kernels
// CHECK-NEXT:   gpu.func @already_there() kernel
// CHECK:        gpu.func @fmha_bwd_f32_d64x64_g1_nomask_warp64_dot_do_o(
// CHECK-NOT:    gpu.func
// CHECK-NOT:  gpu.module
module {
  func.func @twice(%o: !t, %do: !t, %d: !rows, %o2: !t, %do2: !t, %d2: !rows) {
    "fmha.dot_do_o"(%o, %do, %d) {
        dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
        mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
        bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}} : (!t, !t, !rows) -> ()
    "fmha.dot_do_o"(%o2, %do2, %d2) {
        dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
        mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
        bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}} : (!t, !t, !rows) -> ()
    return
  }
  gpu.module @fmha_kernels {
    gpu.func @already_there() kernel {
      gpu.return
    }
  }
}

// -----

// A tiled-body stage: one work-group of 8 warps per key block of 128 with the body's dynamic shared
// memory; the default grid order (keys_outer) is x = kv heads, y = batch, z = ceil(seqlen_k / 128).

!t = memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
!acc = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @tiled
// CHECK-DAG:  %[[H:.*]] = memref.dim %arg1, %c1
// CHECK-DAG:  %[[B:.*]] = memref.dim %arg1, %c0
// CHECK-DAG:  %[[SK:.*]] = memref.dim %arg1, %c2
// CHECK-DAG:  %[[BN:.*]] = arith.constant 128 : index
// CHECK:      %[[BLOCKS:.*]] = arith.ceildivui %[[SK]], %[[BN]]
// CHECK-DAG:  %[[T:.*]] = arith.constant 256 : index
// CHECK-DAG:  %[[SMEM:.*]] = arith.constant {{[0-9]+}} : i32
// CHECK:      gpu.launch_func @fmha_kernels::@fmha_bwd_bf16_d64x64_g1_nomask_tiled_m64n128w8s2_{{[0-9a-f]+}}_dq_dk_dv blocks in (%[[H]], %[[B]], %[[BLOCKS]]) threads in (%[[T]], %{{.*}}, %{{.*}}) dynamic_shared_memory_size %[[SMEM]]
// CHECK:        gpu.func @fmha_bwd_bf16_d64x64_g1_nomask_tiled_m64n128w8s2_{{[0-9a-f]+}}_dq_dk_dv({{.*}}) kernel
// CHECK-SAME:       known_block_size = array<i32: 256, 1, 1>
func.func @tiled(%q: !t, %k: !t, %v: !t, %do: !t, %lse: !rows, %d: !rows, %dq_acc: !acc, %dk: !t, %dv: !t) {
  "fmha.dq_dk_dv"(%q, %k, %v, %do, %lse, %d, %dq_acc, %dk, %dv) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false,
      config = {body = "tiled", wave_size = 32 : i64, block_m = 64 : i64, block_n = 128 : i64, warps = 8 : i64,
                stages = 2 : i64, instruction = "mma.m16n8k16", sdp_warps = array<i64: 8, 1>,
                dkv_warps = array<i64: 8, 1>, dq_warps = array<i64: 4, 2>, p_in_registers = true, swizzle = "xor"}}
      : (!t, !t, !t, !t, !rows, !rows, !acc, !t, !t) -> ()
  return
}
