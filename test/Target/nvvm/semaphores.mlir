// Deterministic dQ's turns as PTX: a spin on ld.acquire.gpu until the counter holds the turn, then one
// atom.release.gpu add of 1 (LLVM keeps the unused old value's atom, not red).
// RUN: fmha-compile %s --from-stage gpu --target sm_90a --emit isa | FileCheck %s

// CHECK-LABEL: .visible .entry turn(
// CHECK: cvta.to.global.u64 [[BASE:%rd[0-9]+]],
// CHECK: add.s64 [[COUNTER:%rd[0-9]+]], [[BASE]], {{%rd[0-9]+}};
// CHECK: [[SPIN:\$L__BB0_[0-9]+]]:
// CHECK-NEXT: ld.acquire.gpu.global.b32 [[NOW:%r[0-9]+]], [[[COUNTER]]];
// CHECK-NEXT: setp.ne.b32 [[OTHER:%p[0-9]+]], [[NOW]], {{%r[0-9]+}};
// CHECK-NEXT: @[[OTHER]] bra [[SPIN]];
// CHECK-NEXT: atom.release.gpu.global.add.u32 {{%r[0-9]+}}, [[[COUNTER]]], 1;

// With backoff_ns, a nanosleep before each poll after the first.
// CHECK-LABEL: .visible .entry poll(
// CHECK: ld.acquire.gpu.global.b32
// CHECK: [[POLL:\$L__BB1_[0-9]+]]:
// CHECK-NEXT: nanosleep.u32 256;
// CHECK-NEXT: ld.acquire.gpu.global.b32
// CHECK-NEXT: setp.ne.b32 [[OTHER2:%p[0-9]+]]
// CHECK-NEXT: @[[OTHER2]] bra [[POLL]];

module attributes {gpu.container_module} {
gpu.module @fmha_kernels {
gpu.func @turn(%sem: memref<?xi32>, %want: i32, %i: index) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
  "fmha.semaphore_wait"(%want, %sem, %i) : (i32, memref<?xi32>, index) -> ()
  "fmha.semaphore_signal"(%sem, %i) : (memref<?xi32>, index) -> ()
  gpu.return
}
gpu.func @poll(%sem: memref<?xi32>, %want: i32, %i: index) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
  "fmha.semaphore_wait"(%want, %sem, %i) {backoff_ns = 256 : i32} : (i32, memref<?xi32>, index) -> ()
  gpu.return
}
}
}
