// RUN: fmha-opt %s --pass-pipeline='builtin.module(fmha-select-kernel-config{target=sm_90a body=tiled},fmha-decompose-bwd,fmha-stages-to-gpu,fmha-expand-tiled-body)' | FileCheck %s

// d192 on the d256 row's config (written on the op; the table keeps d192 on mma.sync until the H200 has
// measured it): the two warpgroups split the head dim at 96 columns, so dV, dK and dQ are three m64n32k16 a
// k step (WgmmaMmaAtom.narrowed: 96 is not whole 64-column blocks), none m64n64. S^T and dP^T are chains of
// 12 m64n32k16 over the 192 columns. A narrow product's B descriptor starts at its own column, inside a
// block where it must: its base adds (column mod 64) x 2 bytes (WgmmaTile.bytes_at). dQ reaches a dq_acc in
// fragment order, 192 columns wide, by 12 v4 atomics a step.

// CHECK-LABEL: gpu.func @{{.*}}_dq_dk_dv(
// CHECK:       nvvm.wgmma.mma_async {{.*}} <m = 64, n = 32, k = 16>, D[<f32>, <zero>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK-COUNT-11: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 32, k = 16>, D[<f32>, <one>]
// CHECK:       nvvm.wgmma.commit.group.sync.aligned
// CHECK:       nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK:       nvvm.barrier id = {{.*}} number_of_threads = {{.*}}
// CHECK:       %[[TWO:c2_[0-9]+]] = arith.constant 2 : index
// CHECK-NEXT:  arith.muli %{{[0-9]+}}, %[[TWO]] : index
// CHECK-NOT:   <m = 64, n = 64, k = 16>
// CHECK:       nvvm.wgmma.mma_async {{.*}} <m = 64, n = 32, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <row>]
// CHECK-NOT:   <m = 64, n = 64, k = 16>
// CHECK-COUNT-12: "fmha.atomic_add"({{.*}}) : (vector<4xf32>, memref<?x?x?x192xf32
// CHECK-NOT:   "fmha.atomic_add"
// CHECK-LABEL: gpu.func @{{.*}}_convert_dq(
// CHECK:       vector.load {{.*}} vector<2xf32>

module {
  func.func @fmha_bwd_bf16_d192x192_g1_nomask(%arg0: memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "q"}, %arg1: memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "k"}, %arg2: memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "v"}, %arg3: memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "o"}, %arg4: memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "do"}, %arg5: memref<?x?x?xf32, strided<[?, ?, 1]>> {fmha.operand = "lse"}, %arg6: memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "dq"}, %arg7: memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "dk"}, %arg8: memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "dv"}) {
    "fmha.attention_bwd"(%arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7, %arg8) {bias = "none", config = {block_m = 64 : i64, block_n = 64 : i64, body = "tiled", dkv_warps = array<i64: 1, 2>, dq_warps = array<i64: 1, 2>, instruction = "wgmma.m64n64k16", producer = true, sdp_warps = array<i64: 1, 2>, stages = 2 : i64, swizzle = "sw128", warps = 8 : i64, wave_size = 32 : i64}, dbias = false, deterministic = false, dtype = "bf16", gqa_ratio = 1 : i64, hdim_q = 192 : i64, hdim_v = 192 : i64, mask = "none", scale = 0.0721687824 : f32, window_left = -1 : i64, window_right = -1 : i64} : (memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?xf32, strided<[?, ?, 1]>>, memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x192xbf16, strided<[?, ?, ?, 1]>>) -> ()
    return
  }
}
