// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(fmha-vector-atomics-to-nvvm)' | FileCheck %s
// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(fmha-vector-atomics-to-nvvm,gpu.module(convert-gpu-to-nvvm),reconcile-unrealized-casts)' | FileCheck %s --check-prefix=LLVM

// One red.global.add.v2.f32 at the element's address: the aligned pointer, offset (a getelementptr over
// f32) by offset + sum of index x stride.

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @pair
  // CHECK-SAME: (%[[P:[^:]*]]: vector<2xf32>, %[[BUF:[^:]*]]: memref<?x?xf32, strided<[?, 1]>>, %[[I:[^:]*]]: index, %[[J:[^:]*]]: index)
  // LLVM-LABEL: llvm.func @pair
  gpu.func @pair(%p: vector<2xf32>, %buf: memref<?x?xf32, strided<[?, 1]>>, %i: index, %j: index) kernel {
    // CHECK: %{{.*}}, %[[OFF:[^,]*]], %{{.*}}:2, %[[STRIDES:[^:]*]]:2 = memref.extract_strided_metadata %[[BUF]]
    // CHECK: %[[R:.*]] = arith.muli %[[I]], %[[STRIDES]]#0 : index
    // CHECK: %[[A:.*]] = arith.addi %[[OFF]], %[[R]] : index
    // CHECK: %[[C:.*]] = arith.muli %[[J]], %[[STRIDES]]#1 : index
    // CHECK: %[[E:.*]] = arith.addi %[[A]], %[[C]] : index
    // CHECK: %[[BASE:.*]] = memref.extract_aligned_pointer_as_index %[[BUF]]
    // CHECK: %[[BASE64:.*]] = arith.index_cast %[[BASE]] : index to i64
    // CHECK: %[[START:.*]] = llvm.inttoptr %[[BASE64]] : i64 to !llvm.ptr
    // CHECK: %[[E64:.*]] = arith.index_cast %[[E]] : index to i64
    // CHECK: %[[PTR:.*]] = llvm.getelementptr %[[START]][%[[E64]]] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    // CHECK: %[[X0:.*]] = vector.extract %[[P]][0]
    // CHECK: %[[X1:.*]] = vector.extract %[[P]][1]
    // CHECK: llvm.inline_asm has_side_effects "{ .reg .b64 ga; cvta.to.global.u64 ga, $0; red.relaxed.gpu.global.add.v2.f32 [ga], {$1, $2}; }", "l,f,f" %[[PTR]], %[[X0]], %[[X1]] : (!llvm.ptr, f32, f32) -> ()
    // CHECK-NOT: fmha.atomic_add
    // LLVM: llvm.inline_asm has_side_effects "{{.*}}red.relaxed.gpu.global.add.v2.f32{{.*}}", "l,f,f"
    // LLVM-NOT: memref.
    // LLVM-NOT: atomicrmw
    "fmha.atomic_add"(%p, %buf, %i, %j) : (vector<2xf32>, memref<?x?xf32, strided<[?, 1]>>, index, index) -> ()
    gpu.return
  }
}

// -----

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @quad
  gpu.func @quad(%p: vector<4xf32>, %buf: memref<?xf32>, %i: index) kernel {
    // CHECK: llvm.inline_asm has_side_effects "{{.*}}red.relaxed.gpu.global.add.v4.f32 [ga], {$1, $2, $3, $4}; }", "l,f,f,f,f"
    "fmha.atomic_add"(%p, %buf, %i) : (vector<4xf32>, memref<?xf32>, index) -> ()
    gpu.return
  }
}

// -----

// A packed bf16 pair (grad_accum = "bf16"): one red.global.add.noftz.bf16x2 of the pair as one b32,
// at the element's address (a getelementptr over bf16).
gpu.module @kernels {
  // CHECK-LABEL: gpu.func @packed_bf16
  // CHECK-SAME: (%[[P:[^:]*]]: vector<2xbf16>
  gpu.func @packed_bf16(%p: vector<2xbf16>, %buf: memref<?x?xbf16, strided<[?, 1]>>, %i: index, %j: index) kernel {
    // CHECK: %[[PTR:.*]] = llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
    // CHECK: %[[BITS:.*]] = llvm.bitcast %[[P]] : vector<2xbf16> to i32
    // CHECK: llvm.inline_asm has_side_effects "{ .reg .b64 ga; cvta.to.global.u64 ga, $0; red.relaxed.gpu.global.add.noftz.bf16x2 [ga], $1; }", "l,r" %[[PTR]], %[[BITS]] : (!llvm.ptr, i32) -> ()
    // CHECK-NOT: fmha.atomic_add
    // LLVM: llvm.inline_asm has_side_effects "{{.*}}red.relaxed.gpu.global.add.noftz.bf16x2{{.*}}", "l,r"
    "fmha.atomic_add"(%p, %buf, %i, %j) : (vector<2xbf16>, memref<?x?xbf16, strided<[?, 1]>>, index, index) -> ()
    gpu.return
  }
}
