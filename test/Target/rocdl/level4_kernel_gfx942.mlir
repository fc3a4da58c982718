// A hand-written level-4 kernel fed to the compiler itself: its wave_reduce becomes the DPP sequence,
// its exp2 v_exp_f32 and its atomic_add a hardware atomic; 64 threads and no scratch in the metadata.
// RUN: fmha-compile %s --from-stage gpu --target gfx942 --emit isa | FileCheck %s
// RUN: fmha-compile %s --from-stage gpu --target gfx942 --emit metadata | FileCheck %s --check-prefix=META

// CHECK-LABEL: reduce_exp_add:
// CHECK: quad_perm:[1,0,3,2]
// CHECK: quad_perm:[2,3,0,1]
// CHECK: row_half_mirror
// CHECK: row_mirror
// CHECK: row_bcast:15 row_mask:0xa
// CHECK: row_bcast:31 row_mask:0xc
// CHECK: v_readlane_b32 [[SUM:s[0-9]+]], v{{[0-9]+}}, 63
// CHECK: v_exp_f32
// CHECK: global_atomic_add_f32
// CHECK-NOT: global_atomic_cmpswap
// CHECK: s_endpgm

// META: "max_flat_workgroup_size": 64,
// META: "private_segment_fixed_size": 0,
// META: "wavefront_size": 64

module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @reduce_exp_add(%acc: memref<?xf32>, %x: f32) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %sum = "fmha.wave_reduce"(%x) {kind = "add", width = 64 : i32} : (f32) -> f32
      %e = "fmha.exp2"(%sum) : (f32) -> f32
      %lane = gpu.thread_id x
      "fmha.atomic_add"(%e, %acc, %lane) : (f32, memref<?xf32>, index) -> ()
      gpu.return
    }
  }
}
