// RUN: fmha-opt %s --pass-pipeline='builtin.module(fmha-semaphores-to-llvm{target=nvidia})' | FileCheck %s --check-prefixes=CHECK,NVIDIA
// RUN: fmha-opt %s --pass-pipeline='builtin.module(fmha-semaphores-to-llvm{target=amd})' | FileCheck %s --check-prefixes=CHECK,AMD

// A wait is a spin on an acquire load of the element's address until it holds the value; a signal one
// release add of 1; both in the target's device-wide sync scope, no fence beside them.

gpu.module @kernels {
  // CHECK-LABEL: gpu.func @turn
  // CHECK-SAME: (%[[WANT:[^:]*]]: i32, %[[SEM:[^:]*]]: memref<?x?x?xi32, strided<[?, ?, 1]>>, %[[B:[^:]*]]: index, %[[H:[^:]*]]: index, %[[M:[^:]*]]: index)
  gpu.func @turn(%want: i32, %sem: memref<?x?x?xi32, strided<[?, ?, 1]>>, %b: index, %h: index, %m: index) kernel {
    // CHECK: %[[PTR:.*]] = llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, i32
    // CHECK: scf.while : () -> () {
    // NVIDIA-NEXT: %[[NOW:.*]] = llvm.load %[[PTR]] atomic syncscope("device") acquire {alignment = 4 : i64} : !llvm.ptr -> i32
    // AMD-NEXT: %[[NOW:.*]] = llvm.load %[[PTR]] atomic syncscope("agent") acquire {alignment = 4 : i64} : !llvm.ptr -> i32
    // CHECK-NEXT: %[[OTHER:.*]] = arith.cmpi ne, %[[NOW]], %[[WANT]] : i32
    // CHECK-NEXT: scf.condition(%[[OTHER]])
    // CHECK: } do {
    // CHECK-NEXT: scf.yield
    "fmha.semaphore_wait"(%want, %sem, %b, %h, %m) : (i32, memref<?x?x?xi32, strided<[?, ?, 1]>>, index, index, index) -> ()
    // CHECK: %[[PTR2:.*]] = llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, i32
    // CHECK: %[[ONE:.*]] = arith.constant 1 : i32
    // NVIDIA: llvm.atomicrmw add %[[PTR2]], %[[ONE]] syncscope("device") release : !llvm.ptr, i32
    // AMD: llvm.atomicrmw add %[[PTR2]], %[[ONE]] syncscope("agent") release : !llvm.ptr, i32
    // CHECK-NOT: fmha.semaphore
    "fmha.semaphore_signal"(%sem, %b, %h, %m) : (memref<?x?x?xi32, strided<[?, ?, 1]>>, index, index, index) -> ()
    gpu.return
  }
}

// A wait with backoff_ns sleeps between polls (the convert work-groups' long waits): nanosleep on NVIDIA,
// s_sleep in units of about 30 ns on AMD (256 ns: 9 units).
gpu.module @backoff {
  // CHECK-LABEL: gpu.func @poll
  gpu.func @poll(%want: i32, %sem: memref<?xi32>, %i: index) kernel {
    // CHECK: scf.while : () -> () {
    // CHECK: scf.condition
    // CHECK: } do {
    // NVIDIA-NEXT: %[[NS:.*]] = arith.constant 256 : i32
    // NVIDIA-NEXT: nvvm.nanosleep %[[NS]]
    // AMD-NEXT: rocdl.s.sleep 9
    // CHECK-NEXT: scf.yield
    "fmha.semaphore_wait"(%want, %sem, %i) {backoff_ns = 256 : i32} : (i32, memref<?xi32>, index) -> ()
    gpu.return
  }
}
