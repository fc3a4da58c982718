// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(convert-fmha-to-nvvm)' | FileCheck %s

// A warp sum is a 5-step xor butterfly over the whole warp (width operand 32).

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @warp_sum
  gpu.func @warp_sum(%x: f32, %out: memref<f32>) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
    // CHECK: %[[WARP:.*]] = arith.constant 32 : i32
    // CHECK: %[[O1:.*]] = arith.constant 1 : i32
    // CHECK: %[[R1:.*]], %{{.*}} = gpu.shuffle xor %[[X:.*]], %[[O1]], %[[WARP]] : f32
    // CHECK: %[[S1:.*]] = arith.addf %[[X]], %[[R1]] : f32
    // CHECK: arith.constant 2 : i32
    // CHECK: gpu.shuffle xor %[[S1]]
    // CHECK: arith.constant 4 : i32
    // CHECK: arith.constant 8 : i32
    // CHECK: arith.constant 16 : i32
    // CHECK: %[[R5:.*]], %{{.*}} = gpu.shuffle xor
    // CHECK: %[[S5:.*]] = arith.addf %{{.*}}, %[[R5]] : f32
    // CHECK-NOT: gpu.shuffle
    // CHECK: memref.store %[[S5]]
    // CHECK-NOT: rocdl
    %sum = "fmha.wave_reduce"(%x) {kind = "add", width = 32 : i32} : (f32) -> f32
    memref.store %sum, %out[] : memref<f32>
    gpu.return
  }
}

// -----

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @half_warp
  // CHECK-COUNT-4: gpu.shuffle xor %{{.*}}, %{{.*}}, %{{.*}} : f32
  // CHECK-NOT: gpu.shuffle
  // CHECK: gpu.return
  gpu.func @half_warp(%x: f32, %out: memref<f32>) kernel {
    %sum = "fmha.wave_reduce"(%x) {kind = "add", width = 16 : i32} : (f32) -> f32
    memref.store %sum, %out[] : memref<f32>
    gpu.return
  }
}

// -----

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @exp2
  gpu.func @exp2(%x: f32, %out: memref<f32>) kernel {
    // CHECK: %[[E:.*]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%{{.*}}) : (f32) -> f32
    // CHECK-NEXT: memref.store %[[E]]
    %e = "fmha.exp2"(%x) : (f32) -> f32
    memref.store %e, %out[] : memref<f32>
    gpu.return
  }
}

// -----

// masked_score and atomic_add lower exactly as on AMD (the shared helper); one case each.

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @shared_lowerings
  // CHECK-SAME: (%{{.*}}: f32, %[[Q:[^:]*]]: index, %[[K:[^:]*]]: index, %[[SQ:[^:]*]]: index, %[[SK:[^:]*]]: index,
  // CHECK-NOT: rocdl.flat_work_group_size
  gpu.func @shared_lowerings(%dot: f32, %q: index, %k: index, %sq: index, %sk: index, %acc: memref<?xf32>) kernel {
    // CHECK: %[[S:.*]] = arith.mulf
    // CHECK-NEXT: %[[VISIBLE:.*]] = arith.cmpi sle, %[[K]], %[[Q]] : index
    // CHECK-NEXT: %[[Q_IN:.*]] = arith.cmpi slt, %[[Q]], %[[SQ]] : index
    // CHECK-NEXT: %[[K_IN:.*]] = arith.cmpi slt, %[[K]], %[[SK]] : index
    // CHECK-NEXT: %[[INSIDE:.*]] = arith.andi %[[Q_IN]], %[[K_IN]] : i1
    // CHECK-NEXT: %[[SHOWN:.*]] = arith.andi %[[VISIBLE]], %[[INSIDE]] : i1
    // CHECK-NEXT: %[[NEG_INF:.*]] = arith.constant 0xFF800000 : f32
    // CHECK-NEXT: %[[MASKED:.*]] = arith.select %[[SHOWN]], %[[S]], %[[NEG_INF]] : f32
    // CHECK-NEXT: memref.atomic_rmw addf %[[MASKED]], %{{.*}}[%[[K]]] : (f32, memref<?xf32>) -> f32
    %s = "fmha.masked_score"(%dot, %q, %k, %sq, %sk) {mask = "causal_top_left", window_left = -1 : i64,
        window_right = -1 : i64, scale_log2 = 0.125 : f32} : (f32, index, index, index, index) -> f32
    "fmha.atomic_add"(%s, %acc, %k) : (f32, memref<?xf32>, index) -> ()
    gpu.return
  }
}

// -----

// A vector atomic_add stays for fmha-vector-atomics-to-nvvm (it needs the buffer's address).

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @vector_atomic_kept
  gpu.func @vector_atomic_kept(%p: vector<2xf32>, %acc: memref<?xf32>, %k: index) kernel {
    // CHECK-NEXT: "fmha.atomic_add"(%{{.*}}, %{{.*}}, %{{.*}}) : (vector<2xf32>, memref<?xf32>, index) -> ()
    // CHECK-NOT: memref.atomic_rmw
    "fmha.atomic_add"(%p, %acc, %k) : (vector<2xf32>, memref<?xf32>, index) -> ()
    gpu.return
  }
}
