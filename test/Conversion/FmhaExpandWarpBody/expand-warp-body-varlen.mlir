// RUN: fmha-opt %s --pass-pipeline='builtin.module(fmha-select-kernel-config{target=sm_90 body=warp},fmha-decompose-bwd,fmha-stages-to-gpu,fmha-expand-warp-body)' | FileCheck %s

// Varlen: the grids come from the host's max lengths and B = dim(cu_seqlens_q) - 1; each kernel reads
// its sequence's start and length from cu_seqlens at the batch coordinate (block z), views every packed
// operand as [B, H, len, D] with batch stride 0 from cu_seqlens[b] * stride_token, and builds the body
// under the guard that its first row lies inside the sequence.

// CHECK-LABEL: func.func @bwd_varlen
// CHECK-SAME:  %[[CUQ:arg9]]: {{.*}}, %[[MAXQ:arg11]]: index {fmha.operand = "max_seqlen_q"}
// CHECK:       %[[ROWBLOCKS:.*]] = arith.ceildivui %[[MAXQ]], %c32
// CHECK:       %[[NCU:.*]] = memref.dim %[[CUQ]], %c0
// CHECK:       %[[B:.*]] = arith.subi %[[NCU]], %c1
// CHECK:       gpu.launch_func @fmha_kernels::@{{.*}}_varlen_warp32_dot_do_o blocks in (%[[ROWBLOCKS]], %{{.*}}, %[[B]])
// CHECK:       gpu.launch_func @fmha_kernels::@{{.*}}_varlen_warp32_dq_dk_dv blocks in (%[[MAXQ]],

// CHECK-LABEL: gpu.func @{{.*}}_varlen_warp32_dot_do_o
// CHECK-SAME:  (%[[O:arg0]]: {{.*}}, %[[CU:arg3]]: memref<?xi32, strided<[1]>>
// CHECK:       %[[Z:.*]] = gpu.block_id z
// CHECK:       %[[START32:.*]] = memref.load %[[CU]][%[[Z]]]
// CHECK:       %[[START:.*]] = arith.index_cast %[[START32]]
// CHECK:       %[[END32:.*]] = memref.load %[[CU]][
// CHECK:       %[[END:.*]] = arith.index_cast %[[END32]]
// CHECK:       %[[LEN:.*]] = arith.subi %[[END]], %[[START]]
// CHECK:       %[[BASE:.*]], %[[OFF:.*]], %[[SIZES:.*]]:3, %[[STRIDES:.*]]:3 = memref.extract_strided_metadata %[[O]]
// CHECK:       %[[SKIP:.*]] = arith.muli %[[START]], %[[STRIDES]]#0
// CHECK:       %[[AT:.*]] = arith.addi %[[OFF]], %[[SKIP]]
// CHECK:       %[[VIEW:.*]] = memref.reinterpret_cast %[[BASE]] to offset: [%[[AT]]], sizes: [%{{.*}}, %[[SIZES]]#1, %[[LEN]], 64], strides: [0, %[[STRIDES]]#1, %[[STRIDES]]#0, 1]
// CHECK-SAME:  to memref<?x?x?x64xbf16, strided<[0, ?, ?, 1], offset: ?>>
// CHECK:       %[[FIRST:.*]] = arith.muli %{{.*}}, %c32
// CHECK:       %[[HAS:.*]] = arith.cmpi slt, %[[FIRST]], %[[LEN]]
// CHECK:       scf.if %[[HAS]]
// CHECK:         memref.dim %[[VIEW]], %c2
// CHECK:         vector.load %[[VIEW]]
!t = memref<?x?x64xbf16, strided<[?, ?, 1]>>
!lse = memref<?x?xf32, strided<[?, 1]>>
!cu = memref<?xi32, strided<[1]>>
func.func @bwd_varlen(%q: !t {fmha.operand = "q"}, %k: !t {fmha.operand = "k"}, %v: !t {fmha.operand = "v"}, %o: !t {fmha.operand = "o"}, %do: !t {fmha.operand = "do"}, %lse: !lse {fmha.operand = "lse"}, %dq: !t {fmha.operand = "dq"}, %dk: !t {fmha.operand = "dk"}, %dv: !t {fmha.operand = "dv"}, %cuq: !cu {fmha.operand = "cu_seqlens_q"}, %cuk: !cu {fmha.operand = "cu_seqlens_k"}, %mq: index {fmha.operand = "max_seqlen_q"}, %mk: index {fmha.operand = "max_seqlen_k"}) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv, %cuq, %cuk) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "causal_bottom_right", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false, varlen = true}
      : (!t, !t, !t, !t, !t, !lse, !t, !t, !t, !cu, !cu) -> ()
  return
}
