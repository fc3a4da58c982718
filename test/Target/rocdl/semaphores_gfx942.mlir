// The same turns on gfx942 (no AMD GPU has run them): the acquire is a load with sc1 followed by a
// buffer_inv sc1, the release a buffer_wbl2 sc1 and a wait before the add (LLVM's AMDGPU memory model
// for agent scope); one lane adds for all the lanes it stands for.
// RUN: fmha-compile %s --from-stage gpu --target gfx942 --emit isa | FileCheck %s

// CHECK-LABEL: turn:
// CHECK: [[SPIN:.LBB0_[0-9]+]]:
// CHECK: global_load_dword [[NOW:v[0-9]+]], v{{[0-9]+}}, s[{{[0-9]+:[0-9]+}}] sc1
// CHECK-NEXT: s_waitcnt vmcnt(0)
// CHECK-NEXT: buffer_inv sc1
// CHECK: s_cbranch_vccnz [[SPIN]]
// CHECK: buffer_wbl2 sc1
// CHECK-NEXT: s_waitcnt vmcnt(0)
// CHECK-NEXT: global_atomic_add

// With backoff_ns, an s_sleep in the poll loop (9 units of about 64 clocks for 256 ns).
// CHECK-LABEL: poll:
// CHECK: [[POLL:.LBB1_[0-9]+]]:
// CHECK: s_sleep 9
// CHECK: global_load_dword {{v[0-9]+}}, v{{[0-9]+}}, s[{{[0-9]+:[0-9]+}}] sc1
// CHECK: s_cbranch_vccnz [[POLL]]

module attributes {gpu.container_module} {
gpu.module @fmha_kernels {
gpu.func @turn(%sem: memref<?xi32>, %want: i32, %i: index) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
  "fmha.semaphore_wait"(%want, %sem, %i) : (i32, memref<?xi32>, index) -> ()
  "fmha.semaphore_signal"(%sem, %i) : (memref<?xi32>, index) -> ()
  gpu.return
}
gpu.func @poll(%sem: memref<?xi32>, %want: i32, %i: index) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
  "fmha.semaphore_wait"(%want, %sem, %i) {backoff_ns = 256 : i32} : (i32, memref<?xi32>, index) -> ()
  gpu.return
}
}
}
