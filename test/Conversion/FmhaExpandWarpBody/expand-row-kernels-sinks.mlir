// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(fmha-expand-warp-body)' | FileCheck %s

// dot_do_o with sinks and an lse gradient, f16, hdim 64, waves of 64 (8 lanes a row, 8 rows a wave): the
// row's D = rowsum(dO * O) minus dlse is stored by the row's first lane in range; its dsinks term is
// -exp2((sink_h - lse) log2 e) D, 0 where lse = -inf; the wave sums the terms of its in-range rows (one
// lane each) and its first lane adds the sum to dsinks[h] by one atomic.

!t = memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>
!heads = memref<?xf32, strided<[1]>>

// CHECK-LABEL: gpu.func @dot_do_o_sinks
// CHECK-SAME:  (%[[O:arg0]]: {{.*}}, %[[DO:arg1]]: {{.*}}, %[[DLSE:arg2]]: {{.*}}, %[[LSE:arg3]]: {{.*}}, %[[SINKS:arg4]]: {{.*}}, %[[D:arg5]]: {{.*}}, %[[DSINKS:arg6]]: memref<?xf32, strided<[1]>>)
// CHECK-DAG:   %[[HEAD:.*]] = gpu.block_id y
// CHECK-DAG:   %[[BATCH:.*]] = gpu.block_id z
// CHECK:       %[[ROW:.*]] = arith.addi
// CHECK:       %[[LANE:.*]] = arith.remui %{{.*}}, %c8{{.*}} : index
// CHECK:       %[[READ:.*]] = arith.minui %[[ROW]]
// CHECK:       %[[DOT:.*]] = "fmha.wave_reduce"(%{{.*}}) {kind = "add", width = 8 : i32}
// CHECK-NEXT:  %[[G:.*]] = memref.load %[[DLSE]][%[[BATCH]], %[[HEAD]], %[[READ]]]
// CHECK-NEXT:  %[[DMINUS:.*]] = arith.subf %[[DOT]], %[[G]] : f32
// CHECK:       %[[FIRST:.*]] = arith.cmpi eq, %[[LANE]], %c0
// CHECK-NEXT:  %[[INSIDE:.*]] = arith.cmpi ult, %[[ROW]]
// CHECK-NEXT:  %[[STORES:.*]] = arith.andi %[[FIRST]], %[[INSIDE]] : i1
// CHECK-NEXT:  %[[SINK:.*]] = memref.load %[[SINKS]][%[[HEAD]]] : memref<?xf32, strided<[1]>>
// CHECK-NEXT:  %[[L:.*]] = memref.load %[[LSE]][%[[BATCH]], %[[HEAD]], %[[READ]]]
// CHECK-NEXT:  %[[X:.*]] = arith.subf %[[SINK]], %[[L]] : f32
// CHECK:       %[[X2:.*]] = arith.mulf %[[X]], %{{.*}} : f32
// CHECK-NEXT:  %[[PS:.*]] = "fmha.exp2"(%[[X2]]) : (f32) -> f32
// CHECK:       %[[EMPTY:.*]] = arith.cmpf oeq, %[[L]], %{{.*}} : f32
// CHECK:       %[[PD:.*]] = arith.mulf %[[PS]], %[[DMINUS]] : f32
// CHECK-NEXT:  %[[NEG:.*]] = arith.negf %[[PD]] : f32
// CHECK-NEXT:  %[[TERM:.*]] = arith.select %[[EMPTY]], %{{.*}}, %[[NEG]] : f32
// CHECK-NEXT:  scf.if %[[STORES]] {
// CHECK-NEXT:    memref.store %[[DMINUS]], %[[D]][%[[BATCH]], %[[HEAD]], %[[ROW]]]
// CHECK-NEXT:  }
// CHECK:       %[[MINE:.*]] = arith.select %[[STORES]], %[[TERM]], %{{.*}} : f32
// CHECK:       %[[WAVE:.*]] = "fmha.wave_reduce"(%[[MINE]]) {kind = "add", width = 64 : i32}
// CHECK:       %[[WLANE:.*]] = arith.remui %{{.*}}, %c64{{.*}} : index
// CHECK:       %[[WFIRST:.*]] = arith.cmpi eq, %[[WLANE]], %c0
// CHECK-NEXT:  scf.if %[[WFIRST]] {
// CHECK-NEXT:    "fmha.atomic_add"(%[[WAVE]], %[[DSINKS]], %[[HEAD]]) : (f32, memref<?xf32, strided<[1]>>, index) -> ()
// CHECK-NEXT:  }
// CHECK-NEXT:  gpu.return
gpu.module @kernels {
  gpu.func @dot_do_o_sinks(%o: !t, %do: !t, %dlse: !rows, %lse: !rows, %sinks: !heads, %d: !rows, %dsinks: !heads)
      kernel attributes {known_block_size = array<i32: 512, 1, 1>} {
    "fmha.dot_do_o"(%o, %do, %dlse, %lse, %sinks, %d, %dsinks) {
        dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
        mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
        bias = "none", dbias = false, deterministic = false, sinks = true, lse_grad = true,
        config = {body = "warp", wave_size = 64 : i64}}
        : (!t, !t, !rows, !rows, !heads, !rows, !heads) -> ()
    gpu.return
  }
}
