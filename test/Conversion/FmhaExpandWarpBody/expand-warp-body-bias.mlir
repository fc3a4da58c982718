// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(fmha-expand-warp-body)' | FileCheck %s

// dq_dk_dv with an elementwise bias and its gradient, bf16, hdim 64 in a wave of 64 (E = 1): the bias batch /
// head indices are clamped to the bias's dims once (broadcast of a size-1 dim: min(b, dim0 - 1),
// min(h, dim1 - 1)); per key the bias element at [b', h', min(q, Sq - 1), min(k, Sk - 1)] is loaded,
// widened and selected to 0 past the sequence ends, minus the row's lse (natural units), then added to scale * dot before the masked score.
// The unscaled dS = P (dP - D) goes to dbias by one atomic of the wave's first lane, only in range.

!t = memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
!bias = memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>
!acc = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!dbias = memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: gpu.func @dq_dk_dv_bias
// CHECK-SAME:  (%[[Q:arg0]]: {{.*}}, %[[K:arg1]]: {{.*}}, %[[V:arg2]]: {{.*}}, %[[DO:arg3]]: {{.*}}, %[[LSE:arg4]]: {{.*}}, %[[D:arg5]]: {{.*}}, %[[BIAS:arg6]]: memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>, %[[DQ:arg7]]: {{.*}}, %[[DK:arg8]]: {{.*}}, %[[DV:arg9]]: {{.*}}, %[[DBIAS:arg10]]: memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>)
// CHECK-DAG:   %[[ROW:.*]] = gpu.block_id x
// CHECK-DAG:   %[[HEAD:.*]] = gpu.block_id y
// CHECK-DAG:   %[[BATCH:.*]] = gpu.block_id z
// CHECK-DAG:   %[[LANE:.*]] = gpu.thread_id x
// CHECK:       %[[LSE_ROW:.*]] = memref.load %[[LSE]][%[[BATCH]], %[[HEAD]], %[[ROW]]]
// CHECK:       %[[D_ROW:.*]] = memref.load %[[D]][%[[BATCH]], %[[HEAD]], %[[ROW]]]
// CHECK-DAG:   %[[SQ:.*]] = memref.dim %[[Q]], %c2
// CHECK-DAG:   %[[SK:.*]] = memref.dim %[[K]], %c2
// CHECK:       %[[BB:.*]] = memref.dim %[[BIAS]], %c0
// CHECK:       %[[BB_LAST:.*]] = arith.subi %[[BB]], %c1
// CHECK:       %[[BBATCH:.*]] = arith.minui %[[BATCH]], %[[BB_LAST]] : index
// CHECK:       %[[BH:.*]] = memref.dim %[[BIAS]], %c1
// CHECK:       %[[BH_LAST:.*]] = arith.subi %[[BH]], %c1
// CHECK:       %[[BHEAD:.*]] = arith.minui %[[HEAD]], %[[BH_LAST]] : index
// CHECK:       %[[LEADER:.*]] = arith.cmpi eq, %[[LANE]], %c0
// CHECK:       scf.for %[[KEY:.*]] = %{{.*}} to %[[SK]] step %{{.*}} iter_args
// CHECK:         %[[QK:.*]] = "fmha.wave_reduce"
// CHECK:         %[[SQ_LAST:.*]] = arith.subi %[[SQ]], %c1
// CHECK:         %[[SK_LAST:.*]] = arith.subi %[[SK]], %c1
// CHECK:         %[[Q_IN:.*]] = arith.cmpi slt, %[[ROW]], %[[SQ]] : index
// CHECK:         %[[K_IN:.*]] = arith.cmpi slt, %[[KEY]], %[[SK]] : index
// CHECK:         %[[IN:.*]] = arith.andi %[[Q_IN]], %[[K_IN]] : i1
// CHECK:         %[[BQ:.*]] = arith.minui %[[ROW]], %[[SQ_LAST]] : index
// CHECK:         %[[BK:.*]] = arith.minui %[[KEY]], %[[SK_LAST]] : index
// CHECK:         %[[B:.*]] = memref.load %[[BIAS]][%[[BBATCH]], %[[BHEAD]], %[[BQ]], %[[BK]]] : memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>
// CHECK-NEXT:    %[[BF:.*]] = arith.extf %[[B]] : bf16 to f32
// CHECK-NEXT:    %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:    %[[BSEL:.*]] = arith.select %[[IN]], %[[BF]], %[[ZERO]] : f32
// CHECK-NEXT:    %[[SHIFTED:.*]] = arith.subf %[[BSEL]], %[[LSE_ROW]] : f32
// CHECK:         %[[SCALED:.*]] = arith.mulf %[[QK]], %{{.*}} : f32
// CHECK-NEXT:    %[[S:.*]] = arith.addf %[[SCALED]], %[[SHIFTED]] : f32
// CHECK-NEXT:    "fmha.masked_score"(%[[S]], %[[ROW]], %[[KEY]], %[[SQ]], %[[SK]]) {mask = "none", scale_log2 = 1.44269502 : f32
// CHECK:         %[[P:.*]] = "fmha.exp2"
// CHECK:         %[[DP:.*]] = "fmha.wave_reduce"
// CHECK:         %[[DP_D:.*]] = arith.subf %[[DP]], %[[D_ROW]]
// CHECK-NEXT:    %[[PDP:.*]] = arith.mulf %[[P]], %[[DP_D]]
// CHECK-NEXT:    %[[DS:.*]] = arith.mulf %[[PDP]], %{{.*}} : f32
// CHECK:         "fmha.atomic_add"(%{{.*}}, %[[DV]],
// CHECK:         "fmha.atomic_add"(%{{.*}}, %[[DK]],
// CHECK-NOT:     "fmha.atomic_add"
// CHECK:         scf.if %[[LEADER]] {
// CHECK-NEXT:      %[[Q_IN2:.*]] = arith.cmpi slt, %[[ROW]], %[[SQ]] : index
// CHECK-NEXT:      %[[K_IN2:.*]] = arith.cmpi slt, %[[KEY]], %[[SK]] : index
// CHECK-NEXT:      %[[IN2:.*]] = arith.andi %[[Q_IN2]], %[[K_IN2]] : i1
// CHECK-NEXT:      scf.if %[[IN2]] {
// CHECK-NEXT:        "fmha.atomic_add"(%[[PDP]], %[[DBIAS]], %[[BBATCH]], %[[BHEAD]], %[[ROW]], %[[KEY]]) : (f32, memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>, index, index, index, index) -> ()
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NEXT:    scf.yield
// CHECK:       %[[DQ_ROUNDED:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT:  memref.store %[[DQ_ROUNDED]], %[[DQ]][%[[BATCH]], %[[HEAD]], %[[ROW]], %[[LANE]]]
// CHECK-NEXT:  gpu.return
module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @dq_dk_dv_bias(%q: !t, %k: !t, %v: !t, %do: !t, %lse: !rows, %d: !rows, %bias: !bias,
                            %dq: !t, %dk: !acc, %dv: !acc, %dbias: !dbias)
        kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      "fmha.dq_dk_dv"(%q, %k, %v, %do, %lse, %d, %bias, %dq, %dk, %dv, %dbias) {
          dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
          mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
          bias = "elementwise", dbias = true, deterministic = false,
          config = {body = "warp", wave_size = 64 : i64}}
          : (!t, !t, !t, !t, !rows, !rows, !bias, !t, !acc, !acc, !dbias) -> ()
      gpu.return
    }
  }
}

// -----

// A bias without its gradient: the bias is loaded all the same, no atomic into a dbias.

!t = memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>
!bias = memref<?x?x?x?xf16, strided<[?, ?, ?, 1]>>
!acc = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: gpu.func @dq_dk_dv_bias_no_dbias
// CHECK-SAME:  %[[BIAS:arg6]]: memref<?x?x?x?xf16, strided<[?, ?, ?, 1]>>
// CHECK:       scf.for
// CHECK:         memref.load %[[BIAS]][{{.*}}] : memref<?x?x?x?xf16, strided<[?, ?, ?, 1]>>
// CHECK-NEXT:    arith.extf %{{.*}} : f16 to f32
// CHECK-COUNT-2: "fmha.atomic_add"
// CHECK-NOT:     "fmha.atomic_add"
// CHECK-NOT:     scf.if
// CHECK:         scf.yield
// CHECK:       gpu.return
module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @dq_dk_dv_bias_no_dbias(%q: !t, %k: !t, %v: !t, %do: !t, %lse: !rows, %d: !rows, %bias: !bias,
                                     %dq: !t, %dk: !acc, %dv: !acc)
        kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      "fmha.dq_dk_dv"(%q, %k, %v, %do, %lse, %d, %bias, %dq, %dk, %dv) {
          dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
          mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
          bias = "elementwise", dbias = false, deterministic = false,
          config = {body = "warp", wave_size = 64 : i64}}
          : (!t, !t, !t, !t, !rows, !rows, !bias, !t, !acc, !acc) -> ()
      gpu.return
    }
  }
}

// -----

// convert_grad of dbias, bf16, in a block of 512 with wave 64: dbias's rows are seqlen_k long (a
// dynamic size), so each row gets a whole wave (8 rows a block) that walks it with an scf.for from
// the lane by the wave size to dim 3, one f32 load, truncf and store a turn; rows past the end do
// nothing.

!acc = memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>
!t = memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>

// CHECK-LABEL: gpu.func @convert_dbias
// CHECK-SAME:  (%[[ACC:arg0]]: memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>, %[[OUT:arg1]]: memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>)
// CHECK-DAG:   %[[BLOCK:.*]] = gpu.block_id x
// CHECK-DAG:   %[[HEAD:.*]] = gpu.block_id y
// CHECK-DAG:   %[[BATCH:.*]] = gpu.block_id z
// CHECK-DAG:   %[[TID:.*]] = gpu.thread_id x
// CHECK:       %[[FIRST_ROW:.*]] = arith.muli %[[BLOCK]], %c8
// CHECK:       %[[ROW_IN_BLOCK:.*]] = arith.divui %[[TID]], %c64
// CHECK:       %[[ROW:.*]] = arith.addi %[[FIRST_ROW]], %[[ROW_IN_BLOCK]]
// CHECK:       %[[LANE:.*]] = arith.remui %[[TID]], %c64
// CHECK:       %[[S:.*]] = memref.dim %[[OUT]], %c2
// CHECK:       %[[IN_RANGE:.*]] = arith.cmpi slt, %[[ROW]], %[[S]]
// CHECK:       scf.if %[[IN_RANGE]] {
// CHECK-NEXT:    %[[C3:.*]] = arith.constant 3 : index
// CHECK-NEXT:    %[[SK:.*]] = memref.dim %[[OUT]], %[[C3]]
// CHECK-NEXT:    %[[STEP:.*]] = arith.constant 64 : index
// CHECK-NEXT:    scf.for %[[COL:.*]] = %[[LANE]] to %[[SK]] step %[[STEP]] {
// CHECK-NEXT:      %[[X:.*]] = memref.load %[[ACC]][%[[BATCH]], %[[HEAD]], %[[ROW]], %[[COL]]] : memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>
// CHECK-NEXT:      %[[ROUNDED:.*]] = arith.truncf %[[X]] : f32 to bf16
// CHECK-NEXT:      memref.store %[[ROUNDED]], %[[OUT]][%[[BATCH]], %[[HEAD]], %[[ROW]], %[[COL]]] : memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>
// CHECK-NEXT:    }
// CHECK-NEXT:  }
// CHECK-NEXT:  gpu.return
module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @convert_dbias(%acc: !acc, %dbias: !t) kernel attributes {known_block_size = array<i32: 512, 1, 1>} {
      "fmha.convert_grad"(%acc, %dbias) {grad = "dbias",
          dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
          mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
          bias = "elementwise", dbias = true, deterministic = false,
          config = {body = "warp", wave_size = 64 : i64}} : (!acc, !t) -> ()
      gpu.return
    }
  }
}
