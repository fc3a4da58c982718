// RUN: fmha-opt %s --pass-pipeline='builtin.module(fmha-stages-to-gpu,fmha-expand-tiled-body)' | FileCheck %s

// The warp-specialised wgmma body (config producer = true; one consumer warpgroup, 64 x 64 tiles): the
// host makes a tensor map per produced tile (K, V, Q, dO: 1 x 1 x 64 x 64 boxes, 128-byte swizzle, zero
// fill) and passes it after the stage's operands; the kernel declares its roles (consumers 0-127,
// producer 128-255) and one work-group per SM. Thread 0 initialises the pipeline's full barriers (128
// producer arrivals + the TMA issuer's expect-tx) and empty ones (128 consumer arrivals) and the K / V
// barrier. The consumers take 240 registers, wait for K and V, then per step for the stage's full phase,
// sync with a named barrier over their 128 threads before they store dS^T and after, and release the
// stage. The producer gives registers back, loads K and V by TMA, then per step waits for a free stage
// (its empty phase) from the third step on, issues Q and dO by TMA, stores LSE and D and arrives.

// CHECK-LABEL: func.func @fmha_bwd_bf16_d64x64_g1_nomask(
// CHECK-COUNT-4: nvgpu.tma.create.descriptor {{.*}} box[{{.*}}] : memref<*xbf16> -> <tensor = memref<1x1x64x64xbf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>
// CHECK:       gpu.launch_func @fmha_kernels::@{{.*}}_dq_dk_dv {{.*}} threads in (%c256{{.*}} : !llvm.ptr, {{.*}} : !llvm.ptr, {{.*}} : !llvm.ptr, {{.*}} : !llvm.ptr)
// CHECK-LABEL: gpu.func @{{.*}}_dq_dk_dv(
// CHECK-SAME:  %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr) kernel
// CHECK-SAME:  fmha.roles = array<i32: 0, 128, 128, 256>
// CHECK-SAME:  fmha.tensor_map_params = array<i64: 95, 96, 97, 98>
// CHECK-SAME:  nvvm.minctasm = 1 : i32
// CHECK:       nvgpu.mbarrier.init %[[FULL:.*]][%{{.*}}], %c129
// CHECK:       nvgpu.mbarrier.init %[[FULL]][%{{.*}}], %c128
// CHECK:       nvvm.fence.proxy
// CHECK:       gpu.barrier
// CHECK:       nvvm.setmaxregister increase 240
// CHECK:       nvgpu.mbarrier.try_wait.parity %[[KV:.*]][%{{.*}}], %false
// CHECK:       scf.for
// CHECK:       nvgpu.mbarrier.try_wait.parity %[[FULL]]
// CHECK:       nvvm.wgmma.mma_async
// CHECK:       nvvm.barrier id = %c1_i32{{.*}} number_of_threads = %c128_i32
// CHECK:       nvvm.barrier id = %c1_i32{{.*}} number_of_threads = %c128_i32
// CHECK:       nvgpu.mbarrier.arrive %[[FULL]]
// CHECK:       nvvm.setmaxregister decrease 24
// CHECK:       nvgpu.mbarrier.arrive.expect_tx %[[KV]][%{{.*}}], %c16384
// CHECK-COUNT-2: nvgpu.tma.async.load
// CHECK:       scf.for
// CHECK:       nvgpu.mbarrier.try_wait.parity %[[FULL]]
// CHECK:       nvgpu.mbarrier.arrive.expect_tx %[[FULL]][%{{.*}}], %c16384
// CHECK-COUNT-2: nvgpu.tma.async.load
// CHECK:       memref.store
// CHECK:       memref.store
// CHECK:       nvgpu.mbarrier.arrive %[[FULL]]
// CHECK-LABEL: gpu.func @{{.*}}_convert_dq(

module {
  func.func @fmha_bwd_bf16_d64x64_g1_nomask(%arg0: memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "q"}, %arg1: memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "k"}, %arg2: memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "v"}, %arg3: memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "o"}, %arg4: memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "do"}, %arg5: memref<?x?x?xf32, strided<[?, ?, 1]>> {fmha.operand = "lse"}, %arg6: memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "dq"}, %arg7: memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "dk"}, %arg8: memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "dv"}) {
    %c0 = arith.constant 0 : index
    %dim = memref.dim %arg5, %c0 : memref<?x?x?xf32, strided<[?, ?, 1]>>
    %c1 = arith.constant 1 : index
    %dim_0 = memref.dim %arg5, %c1 : memref<?x?x?xf32, strided<[?, ?, 1]>>
    %c2 = arith.constant 2 : index
    %dim_1 = memref.dim %arg5, %c2 : memref<?x?x?xf32, strided<[?, ?, 1]>>
    %alloc = memref.alloc(%dim, %dim_0, %dim_1) {fmha.workspace = "d"} : memref<?x?x?xf32>
    %cast = memref.cast %alloc : memref<?x?x?xf32> to memref<?x?x?xf32, strided<[?, ?, 1]>>
    %c0_2 = arith.constant 0 : index
    %dim_3 = memref.dim %arg0, %c0_2 : memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
    %c1_4 = arith.constant 1 : index
    %dim_5 = memref.dim %arg0, %c1_4 : memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
    %c2_6 = arith.constant 2 : index
    %dim_7 = memref.dim %arg0, %c2_6 : memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
    %c64 = arith.constant 64 : index
    %0 = arith.ceildivui %dim_7, %c64 : index
    %c64_8 = arith.constant 64 : index
    %1 = arith.muli %0, %c64_8 : index
    %alloc_9 = memref.alloc(%dim_3, %dim_5, %1) {fmha.workspace = "dq_acc"} : memref<?x?x?x64xf32>
    %cast_10 = memref.cast %alloc_9 : memref<?x?x?x64xf32> to memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
    "fmha.dot_do_o"(%arg3, %arg4, %cast) {bias = "none", config = {block_m = 64 : i64, block_n = 64 : i64, body = "tiled", instruction = "wgmma.m64n64k16", p_in_registers = true, producer = true, stages = 2 : i64, swizzle = "sw128", warps = 4 : i64, wave_size = 32 : i64}, dbias = false, deterministic = false, dtype = "bf16", gqa_ratio = 1 : i64, hdim_q = 64 : i64, hdim_v = 64 : i64, mask = "none", scale = 1.250000e-01 : f32, window_left = -1 : i64, window_right = -1 : i64} : (memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?xf32, strided<[?, ?, 1]>>) -> ()
    %cst = arith.constant 0.000000e+00 : f32
    gpu.memset  %cast_10, %cst : memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, f32
    "fmha.dq_dk_dv"(%arg0, %arg1, %arg2, %arg4, %arg5, %cast, %cast_10, %arg7, %arg8) {bias = "none", config = {block_m = 64 : i64, block_n = 64 : i64, body = "tiled", instruction = "wgmma.m64n64k16", p_in_registers = true, producer = true, stages = 2 : i64, swizzle = "sw128", warps = 4 : i64, wave_size = 32 : i64}, dbias = false, deterministic = false, dtype = "bf16", gqa_ratio = 1 : i64, hdim_q = 64 : i64, hdim_v = 64 : i64, mask = "none", scale = 1.250000e-01 : f32, window_left = -1 : i64, window_right = -1 : i64} : (memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?xf32, strided<[?, ?, 1]>>, memref<?x?x?xf32, strided<[?, ?, 1]>>, memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>) -> ()
    "fmha.convert_grad"(%cast_10, %arg6) {bias = "none", config = {block_m = 64 : i64, block_n = 64 : i64, body = "tiled", instruction = "wgmma.m64n64k16", p_in_registers = true, producer = true, stages = 2 : i64, swizzle = "sw128", warps = 4 : i64, wave_size = 32 : i64}, dbias = false, deterministic = false, dtype = "bf16", factor = 1.250000e-01 : f32, gqa_ratio = 1 : i64, grad = "dq", hdim_q = 64 : i64, hdim_v = 64 : i64, mask = "none", scale = 1.250000e-01 : f32, window_left = -1 : i64, window_right = -1 : i64} : (memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>) -> ()
    memref.dealloc %alloc : memref<?x?x?xf32>
    memref.dealloc %alloc_9 : memref<?x?x?x64xf32>
    return
  }
}
