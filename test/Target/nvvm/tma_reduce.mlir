// The dQ writer's TMA reduce-add lowers to its PTX: cp.reduce.async.bulk.tensor (add, tile mode) from a
// shared-memory pointer taken from dynamic shared memory, through the tensor map passed by value, then the
// bulk group's commit and its read wait; sm_90 has these instructions (no arch-specific chip needed).
// RUN: fmha-compile %s --from-stage gpu --target sm_90a --emit isa | FileCheck %s
// RUN: fmha-compile %s --from-stage gpu --target sm_90 --emit isa | FileCheck %s

// CHECK-LABEL: .visible .entry tma_reduce(
// CHECK-NEXT: .param .align 64 .b8 tma_reduce_param_0[128]
// CHECK: mov.b64 [[MAP:%rd[0-9]+]], tma_reduce_param_0;
// CHECK: cvta.param.u64 [[GENERIC:%rd[0-9]+]], [[MAP]];
// CHECK: mov.b32 [[ROW:%r[0-9]+]], 48;
// CHECK: mov.b32 [[COLUMN:%r[0-9]+]], 0;
// CHECK: cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [[[GENERIC]], {[[COLUMN]], [[ROW]]}], [__dynamic_shmem__0];
// CHECK-NEXT: cp.async.bulk.commit_group;
// CHECK-NEXT: cp.async.bulk.wait_group.read 0;

module attributes {gpu.container_module} {
gpu.module @fmha_kernels {
gpu.func @tma_reduce(%map: !llvm.ptr) kernel attributes {known_block_size = array<i32: 128, 1, 1>, fmha.tensor_map_params = array<i64: 0>} {
  %smem = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
  %base = memref.extract_aligned_pointer_as_index %smem : memref<?xi8, #gpu.address_space<workgroup>> -> index
  %address = arith.index_cast %base : index to i64
  %source = llvm.inttoptr %address : i64 to !llvm.ptr<3>
  %column = arith.constant 0 : i32
  %row = arith.constant 48 : i32
  nvvm.cp.async.bulk.tensor.reduce %map, %source, box[%column, %row] {redKind = #nvvm.tma_redux_kind<add>} : !llvm.ptr, !llvm.ptr<3>
  nvvm.cp.async.bulk.commit.group
  nvvm.cp.async.bulk.wait_group 0 {read}
  gpu.return
}
}
}
