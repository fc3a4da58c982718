// The Hopper building blocks lower for sm_90a to their PTX: mbarrier init / expect-tx / try_wait.parity,
// a TMA box load into 1024-aligned dynamic shared memory, wgmma (fence, mma_async, commit, wait),
// fence.proxy.async, a named barrier and setmaxnreg; the tensor map a by-value __grid_constant__ parameter. For sm_90 the wgmma fence is refused by name.
// RUN: fmha-compile %s --from-stage gpu --target sm_90a --emit isa | FileCheck %s
// RUN: not fmha-compile %s --from-stage gpu --target sm_90 --emit isa 2>&1 | FileCheck %s --check-prefix=SM90

// CHECK: .target sm_90a
// CHECK: .extern .shared .align 1024 .b8 __dynamic_shmem__0[];
// CHECK-LABEL: .visible .entry hopper_ops(
// The tensor map is a by-value __grid_constant__ parameter, read in place (fmha-grid-constant-params).
// CHECK-NEXT: .param .align 64 .b8 hopper_ops_param_0[128],
// CHECK-NEXT: .param .u64 .ptr .align 1 hopper_ops_param_1,
// CHECK: mov.b64 [[MAP:%rd[0-9]+]], hopper_ops_param_0;
// CHECK: cvta.param.u64 {{%rd[0-9]+}}, [[MAP]];
// CHECK: mbarrier.init.shared.b64
// CHECK: mov.b32 [[BYTES:%r[0-9]+]], 8192;
// CHECK: mbarrier.arrive.expect_tx.shared.b64 {{.*}}, [[BYTES]];
// CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// CHECK: mbarrier.try_wait.parity.shared.b64
// CHECK: wgmma.fence.sync.aligned;
// CHECK: wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16
// CHECK: wgmma.commit_group.sync.aligned;
// CHECK: wgmma.wait_group.sync.aligned 0;
// CHECK: fence.proxy.async.shared::cta;
// CHECK: bar.sync 1, 128;
// CHECK: setmaxnreg.inc.sync.aligned.u32 240;

// SM90: error: fmha-check-chip-features: 'nvvm.wgmma.fence.aligned' needs an arch-specific chip (sm_90a); sm_90 lacks it

module attributes {gpu.container_module} {
gpu.module @fmha_kernels {
gpu.func @hopper_ops(%map: !llvm.ptr, %out: memref<64xf32>) kernel attributes {known_block_size = array<i32: 128, 1, 1>, fmha.tensor_map_params = array<i64: 0>} {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1 : index
  %bar = nvgpu.mbarrier.create -> !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>, num_barriers = 2>
  nvgpu.mbarrier.init %bar[%c0], %one : !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>, num_barriers = 2>
  %desc = builtin.unrealized_conversion_cast %map : !llvm.ptr to !nvgpu.tensormap.descriptor<tensor = memref<64x64xbf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>
  %smem = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
  %tile = memref.view %smem[%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<64x64xbf16, #gpu.address_space<workgroup>>
  %bytes = arith.constant 8192 : index
  nvgpu.mbarrier.arrive.expect_tx %bar[%c0], %bytes : !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>, num_barriers = 2>
  nvgpu.tma.async.load %desc[%c0, %c0], %bar[%c0] to %tile : !nvgpu.tensormap.descriptor<tensor = memref<64x64xbf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>, !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>, num_barriers = 2> -> memref<64x64xbf16, #gpu.address_space<workgroup>>
  %parity = arith.constant false
  %ticks = arith.constant 10000000 : index
  nvgpu.mbarrier.try_wait.parity %bar[%c0], %parity, %ticks : !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>, num_barriers = 2>
  %address = memref.extract_aligned_pointer_as_index %tile : memref<64x64xbf16, #gpu.address_space<workgroup>> -> index
  %descriptor = arith.index_cast %address : index to i64
  %zero = llvm.mlir.zero : !llvm.struct<(f32, f32, f32, f32, f32, f32, f32, f32)>
  nvvm.wgmma.fence.aligned
  %acc = nvvm.wgmma.mma_async %descriptor, %descriptor, %zero, <m = 64, n = 16, k = 16>, D[<f32>, <zero>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>] : !llvm.struct<(f32, f32, f32, f32, f32, f32, f32, f32)> -> !llvm.struct<(f32, f32, f32, f32, f32, f32, f32, f32)>
  nvvm.wgmma.commit.group.sync.aligned
  nvvm.wgmma.wait.group.sync.aligned 0
  %first = llvm.extractvalue %acc[0] : !llvm.struct<(f32, f32, f32, f32, f32, f32, f32, f32)>
  memref.store %first, %out[%c0] : memref<64xf32>
  nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
  %id = arith.constant 1 : i32
  %threads = arith.constant 128 : i32
  nvvm.barrier id = %id number_of_threads = %threads
  nvvm.setmaxregister increase 240
  gpu.return
}
}
}
