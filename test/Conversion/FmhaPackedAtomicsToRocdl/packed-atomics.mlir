// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(fmha-packed-atomics-to-rocdl)' | FileCheck %s
// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(fmha-packed-atomics-to-rocdl,gpu.module(convert-gpu-to-rocdl),reconcile-unrealized-casts,fmha-hardware-atomics{target=amd})' | FileCheck %s --check-prefix=LLVM

// A packed bf16 pair: one vector<2xbf16> llvm.atomicrmw fadd at the element's address in the global
// address space (1); fmha-hardware-atomics then makes it agent-scope and coarse-grained.
gpu.module @kernels {
  // CHECK-LABEL: gpu.func @packed_bf16
  // CHECK-SAME: (%[[P:[^:]*]]: vector<2xbf16>
  // LLVM-LABEL: llvm.func @packed_bf16
  gpu.func @packed_bf16(%p: vector<2xbf16>, %buf: memref<?x?xbf16, strided<[?, 1]>>, %i: index, %j: index) kernel {
    // CHECK: %[[START:.*]] = llvm.inttoptr %{{.*}} : i64 to !llvm.ptr<1>
    // CHECK: %[[PTR:.*]] = llvm.getelementptr %[[START]][%{{.*}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, bf16
    // CHECK: llvm.atomicrmw fadd %[[PTR]], %[[P]] monotonic {alignment = 4 : i64} : !llvm.ptr<1>, vector<2xbf16>
    // CHECK-NOT: fmha.atomic_add
    // LLVM: llvm.atomicrmw fadd %{{.*}}, %{{.*}} syncscope("agent") monotonic {alignment = 4 : i64, rocdl.no_fine_grained_memory} : !llvm.ptr<1>, vector<2xbf16>
    "fmha.atomic_add"(%p, %buf, %i, %j) : (vector<2xbf16>, memref<?x?xbf16, strided<[?, 1]>>, index, index) -> ()
    gpu.return
  }
}
