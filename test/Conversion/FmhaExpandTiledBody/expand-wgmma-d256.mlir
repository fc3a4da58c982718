// RUN: fmha-opt %s --pass-pipeline='builtin.module(fmha-select-kernel-config{target=sm_90a body=tiled},fmha-decompose-bwd,fmha-stages-to-gpu,fmha-expand-tiled-body)' | FileCheck %s

// The wgmma body's d256 row (sm_90a's table): two consumer warpgroups split S^T's 64 queries, so each
// warpgroup's S^T and dP^T are chains of 16 m64n32k16 over the head dim (the narrow atom), the first of each
// with scale-d zero; P^T and dS^T are stored and fenced before the consumers' named barrier, then dV, dK and dQ
// are m64n64k16 with both operands from shared memory (no RS form, no inline-PTX product). dQ reaches dq_acc
// by 16 v4 atomics a step (a dq_acc in fragment order), and the convert gathers each lane's four column pairs
// (vector<2xf32> loads) and stores its 8 columns at once.

// CHECK-LABEL: gpu.func @{{.*}}_dq_dk_dv(
// CHECK:       nvvm.wgmma.mma_async {{.*}} <m = 64, n = 32, k = 16>, D[<f32>, <zero>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK-COUNT-15: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 32, k = 16>, D[<f32>, <one>]
// CHECK:       nvvm.wgmma.commit.group.sync.aligned
// CHECK:       nvvm.wgmma.mma_async {{.*}} <m = 64, n = 32, k = 16>, D[<f32>, <zero>]
// CHECK-COUNT-15: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 32, k = 16>, D[<f32>, <one>]
// CHECK:       nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK:       nvvm.barrier id = {{.*}} number_of_threads = {{.*}}
// CHECK-NOT:   wgmma.mma_async.sync.aligned
// CHECK:       nvvm.wgmma.mma_async {{.*}} <m = 64, n = 64, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <row>]
// CHECK:       nvvm.wgmma.mma_async {{.*}} <m = 64, n = 64, k = 16>, D[<f32>, <zero>], A[<bf16>, <one>, <col>], B[<bf16>, <one>, <row>]
// CHECK-COUNT-16: "fmha.atomic_add"({{.*}}) : (vector<4xf32>, memref<?x?x?x256xf32
// CHECK-NOT:   "fmha.atomic_add"
// CHECK-LABEL: gpu.func @{{.*}}_convert_dq(
// CHECK-COUNT-4: vector.load {{.*}} vector<2xf32>
// CHECK:       vector.store {{.*}} vector<8xbf16>

module {
  func.func @fmha_bwd_bf16_d256x256_g1_nomask(%arg0: memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "q"}, %arg1: memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "k"}, %arg2: memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "v"}, %arg3: memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "o"}, %arg4: memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "do"}, %arg5: memref<?x?x?xf32, strided<[?, ?, 1]>> {fmha.operand = "lse"}, %arg6: memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "dq"}, %arg7: memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "dk"}, %arg8: memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>> {fmha.operand = "dv"}) {
    "fmha.attention_bwd"(%arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7, %arg8) {bias = "none", dbias = false, deterministic = false, dtype = "bf16", gqa_ratio = 1 : i64, hdim_q = 256 : i64, hdim_v = 256 : i64, mask = "none", scale = 6.250000e-02 : f32, window_left = -1 : i64, window_right = -1 : i64} : (memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?xf32, strided<[?, ?, 1]>>, memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x256xbf16, strided<[?, ?, ?, 1]>>) -> ()
    return
  }
}
