// RUN: fmha-opt %s --pass-pipeline='builtin.module(fmha-expand-warp-body)' | FileCheck %s

// A wave of 32 (NVIDIA): hdim 128 gives E = 4 elements per lane, reductions over 32 lanes, and per key
// 4 dV + 4 dK atomics.

!t = memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>
!acc = memref<?x?x?x128xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: gpu.func @dq_dk_dv_wave32
// CHECK:       %[[LANE:.*]] = gpu.thread_id x
// CHECK:       %[[START:.*]] = arith.muli %[[LANE]], %c4
// CHECK:       vector.load %arg0[{{.*}}, %[[START]]] {alignment = 8 : i64} : {{.*}}, vector<4xf16>
// CHECK:       scf.for {{.*}} iter_args({{.*}}) -> (f32, f32, f32, f32) {
// CHECK:         "fmha.wave_reduce"({{.*}}) {kind = "add", width = 32 : i32}
// CHECK:         "fmha.wave_reduce"({{.*}}) {kind = "add", width = 32 : i32}
// CHECK-COUNT-4: "fmha.atomic_add"({{.*}}, %arg8,
// CHECK-COUNT-4: "fmha.atomic_add"({{.*}}, %arg7,
// CHECK:         scf.yield {{.*}} : f32, f32, f32, f32
// CHECK:       arith.truncf {{.*}} : vector<4xf32> to vector<4xf16>
// CHECK:       vector.store {{.*}} vector<4xf16>
module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @dq_dk_dv_wave32(%q: !t, %k: !t, %v: !t, %do: !t, %lse: !rows, %d: !rows, %dq: !t, %dk: !acc, %dv: !acc)
        kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      "fmha.dq_dk_dv"(%q, %k, %v, %do, %lse, %d, %dq, %dk, %dv) {
          dtype = "f16", hdim_q = 128 : i64, hdim_v = 128 : i64, gqa_ratio = 1 : i64,
          mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
          bias = "none", dbias = false, deterministic = false,
          config = {body = "warp", wave_size = 32 : i64}}
          : (!t, !t, !t, !t, !rows, !rows, !t, !acc, !acc) -> ()
      gpu.return
    }
  }
}
