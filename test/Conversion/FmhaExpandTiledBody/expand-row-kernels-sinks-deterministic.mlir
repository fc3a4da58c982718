// RUN: fmha-opt %s --pass-pipeline='builtin.module(fmha-expand-tiled-body)' | FileCheck %s

// Deterministic sinks (tiled body, sm_90's waves of 32): dot_do_o stores each row's term beside D (no
// atomic); convert_grad {grad = "dsinks"} is one wave per head: lane t sums rows t, t + 32, ... of each
// batch in order, then the wave's reduction, stored by its first lane.

// CHECK-LABEL: gpu.func @dot_do_o_sinks_deterministic
// CHECK:       scf.if %[[STORES:.*]] {
// CHECK-NEXT:    memref.store %{{.*}}, %arg4[
// CHECK-NEXT:    memref.store %{{.*}}, %arg5[
// CHECK-NEXT:  }
// CHECK-NOT:   "fmha.atomic_add"
// CHECK:       gpu.return
// CHECK-LABEL: gpu.func @convert_dsinks
// CHECK-SAME:  (%[[ACC:arg0]]: memref<?x?x?xf32, strided<[?, ?, 1]>>, %[[OUT:arg1]]: memref<?xf32, strided<[1]>>)
// CHECK-DAG:   %[[HEAD:.*]] = gpu.block_id y
// CHECK-DAG:   %[[LANE:.*]] = gpu.thread_id x
// CHECK-DAG:   %[[B:.*]] = memref.dim %[[ACC]], %c0
// CHECK-DAG:   %[[S:.*]] = memref.dim %[[ACC]], %c2
// CHECK:       %[[SUM:.*]] = scf.for %[[BI:.*]] = %c0{{.*}} to %[[B]] step %c1{{.*}} iter_args(%[[X:.*]] = %{{.*}}) -> (f32) {
// CHECK:         %[[ROWS:.*]] = scf.for %[[SI:.*]] = %[[LANE]] to %[[S]] step %c32{{.*}} iter_args(%[[Y:.*]] = %[[X]]) -> (f32) {
// CHECK-NEXT:      %[[T:.*]] = memref.load %[[ACC]][%[[BI]], %[[HEAD]], %[[SI]]]
// CHECK-NEXT:      %[[Z:.*]] = arith.addf %[[Y]], %[[T]] : f32
// CHECK-NEXT:      scf.yield %[[Z]] : f32
// CHECK:         scf.yield %[[ROWS]] : f32
// CHECK:       %[[TOTAL:.*]] = "fmha.wave_reduce"(%[[SUM]]) {kind = "add", width = 32 : i32}
// CHECK:       scf.if
// CHECK-NEXT:    memref.store %[[TOTAL]], %[[OUT]][%[[HEAD]]] : memref<?xf32, strided<[1]>>

!b = memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>
!heads = memref<?xf32, strided<[1]>>
gpu.module @kernels {
  gpu.func @dot_do_o_sinks_deterministic(%o: !b, %do: !b, %lse: !rows, %sinks: !heads, %d: !rows, %terms: !rows)
      kernel attributes {known_block_size = array<i32: 256, 1, 1>} {
    "fmha.dot_do_o"(%o, %do, %lse, %sinks, %d, %terms) {
        dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
        mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
        bias = "none", dbias = false, deterministic = true, sinks = true,
        config = {body = "tiled", wave_size = 32 : i64, block_m = 64 : i64, block_n = 128 : i64, warps = 8 : i64,
                  stages = 2 : i64, instruction = "mma.m16n8k16", sdp_warps = array<i64: 8, 1>,
                  dkv_warps = array<i64: 8, 1>, dq_warps = array<i64: 4, 2>, p_in_registers = true, swizzle = "xor"}}
        : (!b, !b, !rows, !heads, !rows, !rows) -> ()
    gpu.return
  }
  gpu.func @convert_dsinks(%acc: !rows, %out: !heads) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    "fmha.convert_grad"(%acc, %out) {
        dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
        mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
        bias = "none", dbias = false, deterministic = true, sinks = true, grad = "dsinks", partials = true,
        config = {body = "tiled", wave_size = 32 : i64, block_m = 64 : i64, block_n = 128 : i64, warps = 8 : i64,
                  stages = 2 : i64, instruction = "mma.m16n8k16", sdp_warps = array<i64: 8, 1>,
                  dkv_warps = array<i64: 8, 1>, dq_warps = array<i64: 4, 2>, p_in_registers = true, swizzle = "xor"}}
        : (!rows, !heads) -> ()
    gpu.return
  }
}
