// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(fmha-expand-warp-body)' | FileCheck %s

// dot_do_o, f16, hdim 128 in a block of 512: each row gets 128*2/16 = 16 lanes that each load one
// 16-byte vector<8xf16> per tensor, so the block covers 32 rows. A lane past the last row reads the
// last row (clamped, so the shuffle tree keeps every lane) and does not store; the row partial is
// reduced over the row's 16 lanes and the row's first lane stores D.

!t = memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: gpu.func @dot_do_o
// CHECK-SAME:  (%[[O:arg0]]: {{.*}}, %[[DO:arg1]]: {{.*}}, %[[D:arg2]]: {{.*}})
// CHECK-DAG:   %[[BLOCK:.*]] = gpu.block_id x
// CHECK-DAG:   %[[HEAD:.*]] = gpu.block_id y
// CHECK-DAG:   %[[BATCH:.*]] = gpu.block_id z
// CHECK-DAG:   %[[TID:.*]] = gpu.thread_id x
// CHECK:       %[[FIRST_ROW:.*]] = arith.muli %[[BLOCK]], %c32
// CHECK:       %[[ROW_IN_BLOCK:.*]] = arith.divui %[[TID]], %c16
// CHECK:       %[[ROW:.*]] = arith.addi %[[FIRST_ROW]], %[[ROW_IN_BLOCK]]
// CHECK:       %[[LANE:.*]] = arith.remui %[[TID]], %c16
// CHECK:       %[[S:.*]] = memref.dim %[[O]], %c2
// CHECK:       %[[LAST:.*]] = arith.subi %[[S]], %c1
// CHECK:       %[[CLAMPED:.*]] = arith.minui %[[ROW]], %[[LAST]]
// CHECK:       %[[START:.*]] = arith.muli %[[LANE]], %c8
// CHECK:       %[[DOV:.*]] = vector.load %[[DO]][%[[BATCH]], %[[HEAD]], %[[CLAMPED]], %[[START]]] {alignment = 16 : i64} : {{.*}}, vector<8xf16>
// CHECK:       arith.extf %[[DOV]] : vector<8xf16> to vector<8xf32>
// CHECK:       %[[OV:.*]] = vector.load %[[O]][%[[BATCH]], %[[HEAD]], %[[CLAMPED]], %[[START]]] {alignment = 16 : i64} : {{.*}}, vector<8xf16>
// CHECK:       arith.extf %[[OV]] : vector<8xf16> to vector<8xf32>
// CHECK-COUNT-8: arith.mulf
// CHECK:       %[[PARTIAL:.*]] = arith.addf
// CHECK:       %[[SUM:.*]] = "fmha.wave_reduce"(%[[PARTIAL]]) {kind = "add", width = 16 : i32} : (f32) -> f32
// CHECK:       %[[LEADER:.*]] = arith.cmpi eq, %[[LANE]], %c0
// CHECK:       %[[IN_RANGE:.*]] = arith.cmpi ult, %[[ROW]], %[[S]]
// CHECK:       %[[STORES:.*]] = arith.andi %[[LEADER]], %[[IN_RANGE]]
// CHECK:       scf.if %[[STORES]] {
// CHECK-NEXT:    memref.store %[[SUM]], %[[D]][%[[BATCH]], %[[HEAD]], %[[ROW]]]
// CHECK-NEXT:  }
// CHECK-NEXT:  gpu.return
module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @dot_do_o(%o: !t, %do: !t, %d: !rows) kernel attributes {known_block_size = array<i32: 512, 1, 1>} {
      "fmha.dot_do_o"(%o, %do, %d) {
          dtype = "f16", hdim_q = 128 : i64, hdim_v = 128 : i64, gqa_ratio = 1 : i64,
          mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
          bias = "none", dbias = false, deterministic = false,
          config = {body = "warp", wave_size = 64 : i64}} : (!t, !t, !rows) -> ()
      gpu.return
    }
  }
}

// -----

// dq_dk_dv, f16, hdim_q 128 (E = 2), hdim_v 64 (E = 1), GQA 4, no mask: one key loop over [0, Sk)
// carrying the lane's two dQ partials; K / V rows of head h / 4; 1 dV + 2 dK atomics per key; dQ
// stored once, rounded to f16.

!t = memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>
!tv = memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>
!acc = memref<?x?x?x128xf32, strided<[?, ?, ?, 1]>>
!accv = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: gpu.func @dq_dk_dv_f16
// CHECK-SAME:  (%[[Q:arg0]]: {{.*}}, %[[K:arg1]]: {{.*}}, %[[V:arg2]]: {{.*}}, %[[DO:arg3]]: {{.*}}, %[[LSE:arg4]]: {{.*}}, %[[D:arg5]]: {{.*}}, %[[DQ:arg6]]: {{.*}}, %[[DK:arg7]]: {{.*}}, %[[DV:arg8]]: {{.*}})
// CHECK-DAG:   %[[ROW:.*]] = gpu.block_id x
// CHECK-DAG:   %[[HEAD:.*]] = gpu.block_id y
// CHECK-DAG:   %[[BATCH:.*]] = gpu.block_id z
// CHECK-DAG:   %[[LANE:.*]] = gpu.thread_id x
// CHECK:       %[[QSTART:.*]] = arith.muli %[[LANE]], %c2
// CHECK:       vector.load %[[Q]][%[[BATCH]], %[[HEAD]], %[[ROW]], %[[QSTART]]] {alignment = 4 : i64} : {{.*}}, vector<2xf16>
// CHECK:       memref.load %[[DO]][%[[BATCH]], %[[HEAD]], %[[ROW]], %[[LANE]]]
// CHECK:       %[[LSE_ROW:.*]] = memref.load %[[LSE]][%[[BATCH]], %[[HEAD]], %[[ROW]]]
// CHECK:       %[[LOG2E:.*]] = arith.constant 1.44269502 : f32
// CHECK:       %[[LSE2:.*]] = arith.mulf %[[LSE_ROW]], %[[LOG2E]]
// CHECK:       %[[D_ROW:.*]] = memref.load %[[D]][%[[BATCH]], %[[HEAD]], %[[ROW]]]
// CHECK:       %[[KV_HEAD:.*]] = arith.divui %[[HEAD]], %c4
// CHECK-DAG:   %[[SQ:.*]] = memref.dim %[[Q]], %c2
// CHECK-DAG:   %[[SK:.*]] = memref.dim %[[K]], %c2
// CHECK-DAG:   %[[ZERO:.*]] = arith.constant 0 : index
// CHECK-DAG:   %[[SCALE:.*]] = arith.constant 1.250000e-01 : f32
// CHECK-DAG:   %[[QSTART1:.*]] = arith.addi %[[QSTART]], %c1
// CHECK:       %[[DQ_ROW:.*]]:2 = scf.for %[[KEY:.*]] = %[[ZERO]] to %[[SK]] step %c1{{.*}} iter_args(%[[DQ0:.*]] = %[[F0:.*]], %[[DQ1:.*]] = %[[F0]]) -> (f32, f32) {
// CHECK:         vector.load %[[K]][%[[BATCH]], %[[KV_HEAD]], %[[KEY]], %[[QSTART]]] {{.*}} vector<2xf16>
// CHECK:         memref.load %[[V]][%[[BATCH]], %[[KV_HEAD]], %[[KEY]], %[[LANE]]]
// CHECK:         %[[QK:.*]] = "fmha.wave_reduce"({{.*}}) {kind = "add", width = 64 : i32}
// CHECK:         %[[SCORE:.*]] = "fmha.masked_score"(%[[QK]], %[[ROW]], %[[KEY]], %[[SQ]], %[[SK]]) {mask = "none", scale_log2 = 0.180336878 : f32, window_left = -1 : i64, window_right = -1 : i64}
// CHECK:         %[[SHIFTED:.*]] = arith.subf %[[SCORE]], %[[LSE2]]
// CHECK:         %[[P:.*]] = "fmha.exp2"(%[[SHIFTED]]) : (f32) -> f32
// CHECK:         %[[DP:.*]] = "fmha.wave_reduce"({{.*}}) {kind = "add", width = 64 : i32}
// CHECK:         %[[DP_D:.*]] = arith.subf %[[DP]], %[[D_ROW]]
// CHECK:         %[[PDP:.*]] = arith.mulf %[[P]], %[[DP_D]]
// CHECK:         %[[DS:.*]] = arith.mulf %[[PDP]], %[[SCALE]]
// dV += P * dO, dK += dS * Q (dS carries the softmax scale).
// CHECK:         %[[PDO:.*]] = arith.mulf %[[P]], %{{.*}} : f32
// CHECK-NEXT:    "fmha.atomic_add"(%[[PDO]], %[[DV]], %[[BATCH]], %[[KV_HEAD]], %[[KEY]], %[[LANE]])
// CHECK:         %[[DSQ0:.*]] = arith.mulf %[[DS]], %{{.*}} : f32
// CHECK-NEXT:    "fmha.atomic_add"(%[[DSQ0]], %[[DK]], %[[BATCH]], %[[KV_HEAD]], %[[KEY]], %[[QSTART]])
// CHECK:         %[[DSQ1:.*]] = arith.mulf %[[DS]], %{{.*}} : f32
// CHECK-NEXT:    "fmha.atomic_add"(%[[DSQ1]], %[[DK]], %[[BATCH]], %[[KV_HEAD]], %[[KEY]], %[[QSTART1]])
// CHECK-NOT:     "fmha.atomic_add"
// CHECK:         arith.mulf %[[DS]], {{.*}} fastmath<contract>
// CHECK:         %[[NEW0:.*]] = arith.addf {{.*}}, %[[DQ0]] fastmath<contract>
// CHECK:         arith.mulf %[[DS]], {{.*}} fastmath<contract>
// CHECK:         %[[NEW1:.*]] = arith.addf {{.*}}, %[[DQ1]] fastmath<contract>
// CHECK:         scf.yield %[[NEW0]], %[[NEW1]] : f32, f32
// CHECK:       }
// CHECK:       %[[PACKED:.*]] = vector.from_elements %[[DQ_ROW]]#0, %[[DQ_ROW]]#1 : vector<2xf32>
// CHECK:       %[[ROUNDED:.*]] = arith.truncf %[[PACKED]] : vector<2xf32> to vector<2xf16>
// CHECK:       vector.store %[[ROUNDED]], %[[DQ]][%[[BATCH]], %[[HEAD]], %[[ROW]], %[[QSTART]]]
// CHECK-NEXT:  gpu.return
module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @dq_dk_dv_f16(%q: !t, %k: !t, %v: !tv, %do: !tv, %lse: !rows, %d: !rows, %dq: !t, %dk: !acc, %dv: !accv)
        kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      "fmha.dq_dk_dv"(%q, %k, %v, %do, %lse, %d, %dq, %dk, %dv) {
          dtype = "f16", hdim_q = 128 : i64, hdim_v = 64 : i64, gqa_ratio = 4 : i64,
          mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
          bias = "none", dbias = false, deterministic = false,
          config = {body = "warp", wave_size = 64 : i64}}
          : (!t, !t, !tv, !tv, !rows, !rows, !t, !acc, !accv) -> ()
      gpu.return
    }
  }
}

// -----

// f32, hdim 64 (E = 1), causal top-left: scalar loads without extf, keys [0, min(Sk, q + 1)), MHA (no
// head division), dK / dV straight into the f32 outputs, dQ stored without truncf.

!t = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: gpu.func @dq_dk_dv_top_left
// CHECK-DAG:   %[[ROW:.*]] = gpu.block_id x
// CHECK-DAG:   %[[HEAD:.*]] = gpu.block_id y
// CHECK-NOT:   arith.extf
// CHECK-NOT:   arith.divui
// CHECK:       %[[SK:.*]] = memref.dim %arg1, %c2
// CHECK:       %[[NEXT:.*]] = arith.addi %[[ROW]], %c1
// CHECK:       %[[END:.*]] = arith.minsi %[[SK]], %[[NEXT]]
// CHECK:       %[[ZERO:.*]] = arith.constant 0 : index
// CHECK:       %[[DQ_ROW:.*]] = scf.for %[[KEY:.*]] = %[[ZERO]] to %[[END]] step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f32) {
// CHECK:         memref.load %arg1[%{{.*}}, %[[HEAD]], %[[KEY]], %{{.*}}] : memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
// CHECK:         "fmha.masked_score"({{.*}}) {mask = "causal_top_left"
// CHECK-COUNT-2: "fmha.atomic_add"
// CHECK-NOT:     "fmha.atomic_add"
// CHECK:       }
// CHECK-NOT:   arith.truncf
// CHECK:       memref.store %[[DQ_ROW]], %arg6
module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @dq_dk_dv_top_left(%q: !t, %k: !t, %v: !t, %do: !t, %lse: !rows, %d: !rows, %dq: !t, %dk: !t, %dv: !t)
        kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      "fmha.dq_dk_dv"(%q, %k, %v, %do, %lse, %d, %dq, %dk, %dv) {
          dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
          mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
          bias = "none", dbias = false, deterministic = false,
          config = {body = "warp", wave_size = 64 : i64}}
          : (!t, !t, !t, !t, !rows, !rows, !t, !t, !t) -> ()
      gpu.return
    }
  }
}

// -----

// Causal bottom-right: keys [0, clamp(q + Sk - Sq + 1, 0, Sk)).

!t = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: gpu.func @dq_dk_dv_bottom_right
// CHECK:       %[[ROW:.*]] = gpu.block_id x
// CHECK:       %[[SQ:.*]] = memref.dim %arg0, %c2
// CHECK:       %[[SK:.*]] = memref.dim %arg1, %c2
// CHECK:       %[[OFF:.*]] = arith.subi %[[SK]], %[[SQ]]
// CHECK:       %[[DIAG:.*]] = arith.addi %[[ROW]], %[[OFF]]
// CHECK:       %[[NEXT:.*]] = arith.addi %[[DIAG]], %c1
// CHECK:       %[[C0:.*]] = arith.constant 0 : index
// CHECK:       %[[CLAMPED:.*]] = arith.maxsi %[[NEXT]], %[[C0]]
// CHECK:       %[[END:.*]] = arith.minsi %[[SK]], %[[CLAMPED]]
// CHECK:       %[[ZERO:.*]] = arith.constant 0 : index
// CHECK:       scf.for %{{.*}} = %[[ZERO]] to %[[END]] step
// CHECK:         "fmha.masked_score"({{.*}}) {mask = "causal_bottom_right"
module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @dq_dk_dv_bottom_right(%q: !t, %k: !t, %v: !t, %do: !t, %lse: !rows, %d: !rows, %dq: !t, %dk: !t, %dv: !t)
        kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      "fmha.dq_dk_dv"(%q, %k, %v, %do, %lse, %d, %dq, %dk, %dv) {
          dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
          mask = "causal_bottom_right", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
          bias = "none", dbias = false, deterministic = false,
          config = {body = "warp", wave_size = 64 : i64}}
          : (!t, !t, !t, !t, !rows, !rows, !t, !t, !t) -> ()
      gpu.return
    }
  }
}

// -----

// Sliding window (16, 0): keys [max(0, q + off - 16), min(Sk, q + off + 1)).

!t = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: gpu.func @dq_dk_dv_window
// CHECK:       %[[ROW:.*]] = gpu.block_id x
// CHECK:       %[[SQ:.*]] = memref.dim %arg0, %c2
// CHECK:       %[[SK:.*]] = memref.dim %arg1, %c2
// CHECK:       %[[OFF:.*]] = arith.subi %[[SK]], %[[SQ]]
// CHECK:       %[[DIAG:.*]] = arith.addi %[[ROW]], %[[OFF]]
// CHECK:       %[[FIRST:.*]] = arith.subi %[[DIAG]], %c16
// CHECK:       %[[ZERO:.*]] = arith.constant 0 : index
// CHECK:       %[[BEGIN:.*]] = arith.maxsi %[[ZERO]], %[[FIRST]]
// CHECK:       %[[LAST:.*]] = arith.addi %[[DIAG]], %c1
// CHECK:       %[[END:.*]] = arith.minsi %[[SK]], %[[LAST]]
// CHECK:       scf.for %{{.*}} = %[[BEGIN]] to %[[END]] step
// CHECK:         "fmha.masked_score"({{.*}}) {mask = "sliding_window", scale_log2 = {{.*}}, window_left = 16 : i64, window_right = 0 : i64}
module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @dq_dk_dv_window(%q: !t, %k: !t, %v: !t, %do: !t, %lse: !rows, %d: !rows, %dq: !t, %dk: !t, %dv: !t)
        kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      "fmha.dq_dk_dv"(%q, %k, %v, %do, %lse, %d, %dq, %dk, %dv) {
          dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
          mask = "sliding_window", window_left = 16 : i64, window_right = 0 : i64, scale = 0.125 : f32,
          bias = "none", dbias = false, deterministic = false,
          config = {body = "warp", wave_size = 64 : i64}}
          : (!t, !t, !t, !t, !rows, !rows, !t, !t, !t) -> ()
      gpu.return
    }
  }
}

// -----

// Sliding window (-1, 3): unbounded on the left, so keys [0, min(Sk, q + off + 4)).

!t = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: gpu.func @dq_dk_dv_window_right_only
// CHECK:       %[[DIAG:.*]] = arith.addi
// CHECK-NOT:   arith.maxsi
// CHECK:       %[[LAST:.*]] = arith.addi %[[DIAG]], %c4
// CHECK:       %[[END:.*]] = arith.minsi %{{.*}}, %[[LAST]]
// CHECK:       %[[ZERO:.*]] = arith.constant 0 : index
// CHECK:       scf.for %{{.*}} = %[[ZERO]] to %[[END]] step
module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @dq_dk_dv_window_right_only(%q: !t, %k: !t, %v: !t, %do: !t, %lse: !rows, %d: !rows, %dq: !t, %dk: !t, %dv: !t)
        kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      "fmha.dq_dk_dv"(%q, %k, %v, %do, %lse, %d, %dq, %dk, %dv) {
          dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
          mask = "sliding_window", window_left = -1 : i64, window_right = 3 : i64, scale = 0.125 : f32,
          bias = "none", dbias = false, deterministic = false,
          config = {body = "warp", wave_size = 64 : i64}}
          : (!t, !t, !t, !t, !rows, !rows, !t, !t, !t) -> ()
      gpu.return
    }
  }
}

// -----

// convert_grad, bf16, hdim 128 in a block of 512: 16 lanes per row, each one 32-byte vector<8xf32>
// load, a truncf to bf16 and one 16-byte store; rows past the end do nothing.

!acc = memref<?x?x?x128xf32, strided<[?, ?, ?, 1]>>
!t = memref<?x?x?x128xbf16, strided<[?, ?, ?, 1]>>

// CHECK-LABEL: gpu.func @convert_dk
// CHECK-DAG:   %[[BLOCK:.*]] = gpu.block_id x
// CHECK-DAG:   %[[HEAD:.*]] = gpu.block_id y
// CHECK-DAG:   %[[BATCH:.*]] = gpu.block_id z
// CHECK-DAG:   %[[TID:.*]] = gpu.thread_id x
// CHECK:       %[[FIRST_ROW:.*]] = arith.muli %[[BLOCK]], %c32
// CHECK:       %[[ROW_IN_BLOCK:.*]] = arith.divui %[[TID]], %c16
// CHECK:       %[[ROW:.*]] = arith.addi %[[FIRST_ROW]], %[[ROW_IN_BLOCK]]
// CHECK:       %[[LANE:.*]] = arith.remui %[[TID]], %c16
// CHECK:       %[[S:.*]] = memref.dim %arg1, %c2
// CHECK:       %[[IN_RANGE:.*]] = arith.cmpi slt, %[[ROW]], %[[S]]
// CHECK:       scf.if %[[IN_RANGE]] {
// CHECK:         %[[START:.*]] = arith.muli %[[LANE]], %c8
// CHECK:         %[[ACC:.*]] = vector.load %arg0[%[[BATCH]], %[[HEAD]], %[[ROW]], %[[START]]] {alignment = 32 : i64} : {{.*}}, vector<8xf32>
// CHECK-NEXT:    %[[ROUNDED:.*]] = arith.truncf %[[ACC]] : vector<8xf32> to vector<8xbf16>
// CHECK-NEXT:    vector.store %[[ROUNDED]], %arg1[%[[BATCH]], %[[HEAD]], %[[ROW]], %[[START]]] {alignment = 16 : i64} : {{.*}}, vector<8xbf16>
// CHECK-NEXT:  }
// CHECK-NEXT:  gpu.return
module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @convert_dk(%acc: !acc, %dk: !t) kernel attributes {known_block_size = array<i32: 512, 1, 1>} {
      "fmha.convert_grad"(%acc, %dk) {grad = "dk",
          dtype = "bf16", hdim_q = 128 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
          mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
          bias = "none", dbias = false, deterministic = false,
          config = {body = "warp", wave_size = 64 : i64}} : (!acc, !t) -> ()
      gpu.return
    }
  }
}
