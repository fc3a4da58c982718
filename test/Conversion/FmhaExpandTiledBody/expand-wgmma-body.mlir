// RUN: fmha-opt %s --pass-pipeline='builtin.module(fmha-stages-to-gpu,fmha-expand-tiled-body)' | FileCheck %s

// The wgmma body (sm_90a; one warpgroup, 64 x 64 tiles, P^T in registers): copies published to the async
// proxy before the step's barrier; S^T and dP^T as two chains of four m64n64k16 (K-major A and B, the
// first product of each with scale-d zero) committed as two groups, P^T computed once S^T's group is
// done (wait 1); dV and dK as RS products (P^T, dS^T from registers: inline PTX, B = dO / Q MN-major);
// dS^T stored and fenced before the barrier that dQ's products (both operands MN-major) follow; dQ is
// issued before dK and waited for alone (wait 1), so its atomics overlap dK's product (wait 0 after them).

// CHECK-LABEL: gpu.func @{{.*}}_dq_dk_dv(
// CHECK:       nvvm.cp.async.wait.group 0
// CHECK-NEXT:  nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT:  gpu.barrier
// CHECK:       nvvm.wgmma.fence.aligned
// CHECK:       nvvm.wgmma.mma_async {{.*}} D[<f32>, <zero>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK-COUNT-3: nvvm.wgmma.mma_async {{.*}} D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK-NEXT:  nvvm.wgmma.commit.group.sync.aligned
// CHECK:       nvvm.wgmma.mma_async {{.*}} D[<f32>, <zero>]
// CHECK:       nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT:  nvvm.wgmma.wait.group.sync.aligned 1
// CHECK:       nvvm.wgmma.wait.group.sync.aligned 0
// CHECK:       nvvm.wgmma.fence.aligned
// CHECK:       llvm.inline_asm has_side_effects {{.*}}wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}p, 1, 1, 1;
// CHECK:       nvvm.wgmma.commit.group.sync.aligned
// CHECK:       nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT:  gpu.barrier
// CHECK:       nvvm.wgmma.mma_async {{.*}} D[<f32>, <zero>], A[<bf16>, <one>, <col>], B[<bf16>, <one>, <row>]
// CHECK:       nvvm.wgmma.commit.group.sync.aligned
// CHECK:       llvm.inline_asm has_side_effects {{.*}}wgmma.mma_async
// CHECK:       nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT:  nvvm.wgmma.wait.group.sync.aligned 1
// CHECK:       fmha.atomic_add
// CHECK:       nvvm.wgmma.wait.group.sync.aligned 0
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
    "fmha.dot_do_o"(%arg3, %arg4, %cast) {bias = "none", config = {block_m = 64 : i64, block_n = 64 : i64, body = "tiled", instruction = "wgmma.m64n64k16", p_in_registers = true, stages = 2 : i64, swizzle = "sw128", warps = 4 : i64, wave_size = 32 : i64}, dbias = false, deterministic = false, dtype = "bf16", gqa_ratio = 1 : i64, hdim_q = 64 : i64, hdim_v = 64 : i64, mask = "none", scale = 1.250000e-01 : f32, window_left = -1 : i64, window_right = -1 : i64} : (memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?xf32, strided<[?, ?, 1]>>) -> ()
    %cst = arith.constant 0.000000e+00 : f32
    gpu.memset  %cast_10, %cst : memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, f32
    "fmha.dq_dk_dv"(%arg0, %arg1, %arg2, %arg4, %arg5, %cast, %cast_10, %arg7, %arg8) {bias = "none", config = {block_m = 64 : i64, block_n = 64 : i64, body = "tiled", instruction = "wgmma.m64n64k16", p_in_registers = true, stages = 2 : i64, swizzle = "sw128", warps = 4 : i64, wave_size = 32 : i64}, dbias = false, deterministic = false, dtype = "bf16", gqa_ratio = 1 : i64, hdim_q = 64 : i64, hdim_v = 64 : i64, mask = "none", scale = 1.250000e-01 : f32, window_left = -1 : i64, window_right = -1 : i64} : (memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?xf32, strided<[?, ?, 1]>>, memref<?x?x?xf32, strided<[?, ?, 1]>>, memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>) -> ()
    "fmha.convert_grad"(%cast_10, %arg6) {bias = "none", config = {block_m = 64 : i64, block_n = 64 : i64, body = "tiled", instruction = "wgmma.m64n64k16", p_in_registers = true, stages = 2 : i64, swizzle = "sw128", warps = 4 : i64, wave_size = 32 : i64}, dbias = false, deterministic = false, dtype = "bf16", factor = 1.250000e-01 : f32, gqa_ratio = 1 : i64, grad = "dq", hdim_q = 64 : i64, hdim_v = 64 : i64, mask = "none", scale = 1.250000e-01 : f32, window_left = -1 : i64, window_right = -1 : i64} : (memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>) -> ()
    memref.dealloc %alloc : memref<?x?x?xf32>
    memref.dealloc %alloc_9 : memref<?x?x?x64xf32>
    return
  }
}
