// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(convert-fmha-to-rocdl{chipset=gfx942})' | FileCheck %s

// exp2 is v_exp_f32; masked_score is arith (the same lowering as convert-fmha-to-nvvm): the mask's
// compares, and for every mask kind the sequence ends (positions past them are padding).

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @exp2
  gpu.func @exp2(%x: f32, %out: memref<f32>) kernel {
    // CHECK: %[[E:.*]] = rocdl.exp2 %{{.*}} f32 -> f32
    // CHECK-NEXT: memref.store %[[E]]
    %e = "fmha.exp2"(%x) : (f32) -> f32
    memref.store %e, %out[] : memref<f32>
    gpu.return
  }
}

// -----

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @no_mask
  // CHECK-SAME: (%{{.*}}: f32, %[[Q:[^:]*]]: index, %[[K:[^:]*]]: index, %[[SQ:[^:]*]]: index, %[[SK:[^:]*]]: index,
  gpu.func @no_mask(%dot: f32, %q: index, %k: index, %sq: index, %sk: index, %out: memref<f32>) kernel {
    // CHECK: %[[SCALE:.*]] = arith.constant 1.250000e-01 : f32
    // CHECK-NEXT: %[[S:.*]] = arith.mulf %{{.*}}, %[[SCALE]] : f32
    // CHECK-NEXT: %[[Q_IN:.*]] = arith.cmpi slt, %[[Q]], %[[SQ]] : index
    // CHECK-NEXT: %[[K_IN:.*]] = arith.cmpi slt, %[[K]], %[[SK]] : index
    // CHECK-NEXT: %[[INSIDE:.*]] = arith.andi %[[Q_IN]], %[[K_IN]] : i1
    // CHECK-NEXT: %[[NEG_INF:.*]] = arith.constant 0xFF800000 : f32
    // CHECK-NEXT: %[[MASKED:.*]] = arith.select %[[INSIDE]], %[[S]], %[[NEG_INF]] : f32
    // CHECK-NEXT: memref.store %[[MASKED]]
    %s = "fmha.masked_score"(%dot, %q, %k, %sq, %sk) {mask = "none", window_left = -1 : i64, window_right = -1 : i64,
        scale_log2 = 0.125 : f32} : (f32, index, index, index, index) -> f32
    memref.store %s, %out[] : memref<f32>
    gpu.return
  }
}

// -----

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @top_left
  // CHECK-SAME: (%{{.*}}: f32, %[[Q:[^:]*]]: index, %[[K:[^:]*]]: index, %[[SQ:[^:]*]]: index, %[[SK:[^:]*]]: index,
  gpu.func @top_left(%dot: f32, %q: index, %k: index, %sq: index, %sk: index, %out: memref<f32>) kernel {
    // CHECK: %[[S:.*]] = arith.mulf
    // CHECK-NEXT: %[[VISIBLE:.*]] = arith.cmpi sle, %[[K]], %[[Q]] : index
    // CHECK-NEXT: %[[Q_IN:.*]] = arith.cmpi slt, %[[Q]], %[[SQ]] : index
    // CHECK-NEXT: %[[K_IN:.*]] = arith.cmpi slt, %[[K]], %[[SK]] : index
    // CHECK-NEXT: %[[INSIDE:.*]] = arith.andi %[[Q_IN]], %[[K_IN]] : i1
    // CHECK-NEXT: %[[SHOWN:.*]] = arith.andi %[[VISIBLE]], %[[INSIDE]] : i1
    // CHECK-NEXT: %[[NEG_INF:.*]] = arith.constant 0xFF800000 : f32
    // CHECK-NEXT: arith.select %[[SHOWN]], %[[S]], %[[NEG_INF]] : f32
    %s = "fmha.masked_score"(%dot, %q, %k, %sq, %sk) {mask = "causal_top_left", window_left = -1 : i64,
        window_right = -1 : i64, scale_log2 = 0.125 : f32} : (f32, index, index, index, index) -> f32
    memref.store %s, %out[] : memref<f32>
    gpu.return
  }
}

// -----

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @bottom_right
  // CHECK-SAME: (%{{.*}}: f32, %[[Q:[^:]*]]: index, %[[K:[^:]*]]: index, %[[SQ:[^:]*]]: index, %[[SK:[^:]*]]: index,
  gpu.func @bottom_right(%dot: f32, %q: index, %k: index, %sq: index, %sk: index, %out: memref<f32>) kernel {
    // CHECK: %[[OFF:.*]] = arith.subi %[[SK]], %[[SQ]] : index
    // CHECK-NEXT: %[[DIAG:.*]] = arith.addi %[[Q]], %[[OFF]] : index
    // CHECK-NEXT: %[[VISIBLE:.*]] = arith.cmpi sle, %[[K]], %[[DIAG]] : index
    // CHECK-NEXT: %[[Q_IN:.*]] = arith.cmpi slt, %[[Q]], %[[SQ]] : index
    // CHECK-NEXT: %[[K_IN:.*]] = arith.cmpi slt, %[[K]], %[[SK]] : index
    // CHECK-NEXT: %[[INSIDE:.*]] = arith.andi %[[Q_IN]], %[[K_IN]] : i1
    // CHECK-NEXT: %[[SHOWN:.*]] = arith.andi %[[VISIBLE]], %[[INSIDE]] : i1
    // CHECK: arith.select %[[SHOWN]]
    %s = "fmha.masked_score"(%dot, %q, %k, %sq, %sk) {mask = "causal_bottom_right", window_left = -1 : i64,
        window_right = -1 : i64, scale_log2 = 0.125 : f32} : (f32, index, index, index, index) -> f32
    memref.store %s, %out[] : memref<f32>
    gpu.return
  }
}

// -----

// q + off - 16 <= k <= q + off + 2 (bottom-right aligned).

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @window
  // CHECK-SAME: (%{{.*}}: f32, %[[Q:[^:]*]]: index, %[[K:[^:]*]]: index, %[[SQ:[^:]*]]: index, %[[SK:[^:]*]]: index,
  gpu.func @window(%dot: f32, %q: index, %k: index, %sq: index, %sk: index, %out: memref<f32>) kernel {
    // CHECK: %[[OFF:.*]] = arith.subi %[[SK]], %[[SQ]] : index
    // CHECK-NEXT: %[[DIAG:.*]] = arith.addi %[[Q]], %[[OFF]] : index
    // CHECK-NEXT: %[[LEFT:.*]] = arith.constant 16 : index
    // CHECK-NEXT: %[[LO:.*]] = arith.subi %[[DIAG]], %[[LEFT]] : index
    // CHECK-NEXT: %[[LO_OK:.*]] = arith.cmpi sge, %[[K]], %[[LO]] : index
    // CHECK-NEXT: %[[RIGHT:.*]] = arith.constant 2 : index
    // CHECK-NEXT: %[[HI:.*]] = arith.addi %[[DIAG]], %[[RIGHT]] : index
    // CHECK-NEXT: %[[HI_OK:.*]] = arith.cmpi sle, %[[K]], %[[HI]] : index
    // CHECK-NEXT: %[[VISIBLE:.*]] = arith.andi %[[LO_OK]], %[[HI_OK]] : i1
    // CHECK-NEXT: %[[Q_IN:.*]] = arith.cmpi slt, %[[Q]], %[[SQ]] : index
    // CHECK-NEXT: %[[K_IN:.*]] = arith.cmpi slt, %[[K]], %[[SK]] : index
    // CHECK-NEXT: %[[INSIDE:.*]] = arith.andi %[[Q_IN]], %[[K_IN]] : i1
    // CHECK-NEXT: %[[SHOWN:.*]] = arith.andi %[[VISIBLE]], %[[INSIDE]] : i1
    // CHECK: arith.select %[[SHOWN]]
    %s = "fmha.masked_score"(%dot, %q, %k, %sq, %sk) {mask = "sliding_window", window_left = 16 : i64,
        window_right = 2 : i64, scale_log2 = 0.125 : f32} : (f32, index, index, index, index) -> f32
    memref.store %s, %out[] : memref<f32>
    gpu.return
  }
}

// -----

// A window unbounded on the right and one of width 0 on the right: only the bounded sides compare.

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @left_only
  // CHECK-SAME: (%{{.*}}: f32, %[[Q:[^:]*]]: index, %[[K:[^:]*]]: index, %[[SQ:[^:]*]]: index, %[[SK:[^:]*]]: index,
  gpu.func @left_only(%dot: f32, %q: index, %k: index, %sq: index, %sk: index, %out: memref<f32>) kernel {
    // CHECK: %[[DIAG:.*]] = arith.addi %[[Q]]
    // CHECK: %[[VISIBLE:.*]] = arith.cmpi sge, %[[K]]
    // CHECK-NEXT: %[[Q_IN:.*]] = arith.cmpi slt, %[[Q]], %[[SQ]] : index
    // CHECK-NEXT: %[[K_IN:.*]] = arith.cmpi slt, %[[K]], %[[SK]] : index
    // CHECK-NEXT: %[[INSIDE:.*]] = arith.andi %[[Q_IN]], %[[K_IN]] : i1
    // CHECK-NEXT: %[[SHOWN:.*]] = arith.andi %[[VISIBLE]], %[[INSIDE]] : i1
    // CHECK-NEXT: arith.constant 0xFF800000
    // CHECK-NEXT: arith.select %[[SHOWN]]
    %s = "fmha.masked_score"(%dot, %q, %k, %sq, %sk) {mask = "sliding_window", window_left = 4 : i64,
        window_right = -1 : i64, scale_log2 = 0.125 : f32} : (f32, index, index, index, index) -> f32
    memref.store %s, %out[] : memref<f32>
    gpu.return
  }

  // CHECK-LABEL: gpu.func @right_zero
  // CHECK-SAME: (%{{.*}}: f32, %[[Q:[^:]*]]: index, %[[K:[^:]*]]: index, %[[SQ:[^:]*]]: index, %[[SK:[^:]*]]: index,
  gpu.func @right_zero(%dot: f32, %q: index, %k: index, %sq: index, %sk: index, %out: memref<f32>) kernel {
    // CHECK: %[[DIAG:.*]] = arith.addi %[[Q]]
    // CHECK-NEXT: %[[VISIBLE:.*]] = arith.cmpi sle, %[[K]], %[[DIAG]] : index
    // CHECK-NEXT: %[[Q_IN:.*]] = arith.cmpi slt, %[[Q]], %[[SQ]] : index
    // CHECK-NEXT: %[[K_IN:.*]] = arith.cmpi slt, %[[K]], %[[SK]] : index
    // CHECK-NEXT: %[[INSIDE:.*]] = arith.andi %[[Q_IN]], %[[K_IN]] : i1
    // CHECK-NEXT: %[[SHOWN:.*]] = arith.andi %[[VISIBLE]], %[[INSIDE]] : i1
    // CHECK-NEXT: arith.constant 0xFF800000
    // CHECK-NEXT: arith.select %[[SHOWN]]
    %s = "fmha.masked_score"(%dot, %q, %k, %sq, %sk) {mask = "sliding_window", window_left = -1 : i64,
        window_right = 0 : i64, scale_log2 = 0.125 : f32} : (f32, index, index, index, index) -> f32
    memref.store %s, %out[] : memref<f32>
    gpu.return
  }
}

// -----

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @atomic_add
  // CHECK-SAME: (%[[V:[^:]*]]: f32, %[[BUF:[^:]*]]: memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, %[[I:[^:]*]]: index)
  gpu.func @atomic_add(%v: f32, %buf: memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, %i: index) kernel {
    // CHECK: memref.atomic_rmw addf %[[V]], %[[BUF]][%[[I]], %[[I]], %[[I]], %[[I]]] : (f32, memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>) -> f32
    // CHECK-NOT: fmha.atomic_add
    "fmha.atomic_add"(%v, %buf, %i, %i, %i, %i) : (f32, memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, index, index, index, index) -> ()
    gpu.return
  }

  // AMD has no vector f32 atomic: one scalar add per element, element e at the last index + e.
  // CHECK-LABEL: gpu.func @vector_atomic_add
  // CHECK-SAME: (%[[P:[^:]*]]: vector<2xf32>, %[[BUF:[^:]*]]: memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, %[[I:[^:]*]]: index)
  gpu.func @vector_atomic_add(%p: vector<2xf32>, %buf: memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, %i: index) kernel {
    // CHECK: %[[X0:.*]] = vector.extract %[[P]][0] : f32 from vector<2xf32>
    // CHECK: memref.atomic_rmw addf %[[X0]], %[[BUF]][%[[I]], %[[I]], %[[I]], %[[I]]]
    // CHECK: %[[ONE:.*]] = arith.constant 1 : index
    // CHECK: %[[NEXT:.*]] = arith.addi %[[I]], %[[ONE]] : index
    // CHECK: %[[X1:.*]] = vector.extract %[[P]][1] : f32 from vector<2xf32>
    // CHECK: memref.atomic_rmw addf %[[X1]], %[[BUF]][%[[I]], %[[I]], %[[I]], %[[NEXT]]]
    // CHECK-NOT: fmha.atomic_add
    "fmha.atomic_add"(%p, %buf, %i, %i, %i, %i) : (vector<2xf32>, memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, index, index, index, index) -> ()
    gpu.return
  }
}

// -----

// A packed bf16 pair stays for fmha-packed-atomics-to-rocdl (memref.atomic_rmw has no vector form).
gpu.module @kernels {
  // CHECK-LABEL: gpu.func @packed_atomic_add
  gpu.func @packed_atomic_add(%p: vector<2xbf16>, %buf: memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, %i: index) kernel {
    // CHECK-NOT: memref.atomic_rmw
    // CHECK: "fmha.atomic_add"(%{{.*}}) : (vector<2xbf16>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, index, index, index, index) -> ()
    "fmha.atomic_add"(%p, %buf, %i, %i, %i, %i) : (vector<2xbf16>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, index, index, index, index) -> ()
    gpu.return
  }
}
