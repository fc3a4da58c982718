// RUN: fmha-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(fmha-decompose-bwd)' | FileCheck %s

// Varlen: packed [total, H, 64] tensors, lse [H, total_q], cu_seqlens last. The workspaces stay padded
// per batch: B = dim(cu_seqlens_q) - 1 and the rows come from the host's max_seqlen_q argument.

!t = memref<?x?x64xbf16, strided<[?, ?, 1]>>
!lse = memref<?x?xf32, strided<[?, 1]>>
!cu = memref<?xi32, strided<[1]>>

// CHECK-LABEL: func.func @bwd_varlen
// CHECK-SAME: %[[Q:arg0]]: {{.*}}, %[[LSE:arg5]]: {{.*}}, %[[DQ:arg6]]: {{.*}}, %[[CUQ:arg9]]: {{.*}}, %[[CUK:arg10]]: {{.*}}, %[[MAXQ:arg11]]: index
// CHECK:      %[[NCU:.*]] = memref.dim %[[CUQ]], %c0
// CHECK:      %[[B:.*]] = arith.subi %[[NCU]], %c1
// CHECK:      %[[H:.*]] = memref.dim %[[LSE]], %c0
// CHECK:      memref.alloc(%[[B]], %[[H]], %[[MAXQ]]) {fmha.workspace = "d"}
// CHECK:      %[[BLOCKS:.*]] = arith.ceildivui %[[MAXQ]], %c128
// CHECK:      %[[ROWS:.*]] = arith.muli %[[BLOCKS]], %c128
// CHECK:      memref.alloc(%{{.*}}, %{{.*}}, %[[ROWS]]) {fmha.workspace = "dq_acc"} : memref<?x?x?x64xf32>
// CHECK:      "fmha.dot_do_o"({{.*}}, %[[CUQ]], %[[CUK]])
// CHECK:      "fmha.dq_dk_dv"(%[[Q]], {{.*}}, %[[CUQ]], %[[CUK]])
// CHECK-SAME:     varlen = true
// CHECK:      "fmha.convert_grad"(%{{.*}}, %[[DQ]], %[[CUQ]], %[[CUK]])
func.func @bwd_varlen(%q: !t {fmha.operand = "q"}, %k: !t {fmha.operand = "k"}, %v: !t {fmha.operand = "v"},
                      %o: !t {fmha.operand = "o"}, %do: !t {fmha.operand = "do"}, %lse: !lse {fmha.operand = "lse"},
                      %dq: !t {fmha.operand = "dq"}, %dk: !t {fmha.operand = "dk"}, %dv: !t {fmha.operand = "dv"},
                      %cuq: !cu {fmha.operand = "cu_seqlens_q"}, %cuk: !cu {fmha.operand = "cu_seqlens_k"},
                      %mq: index {fmha.operand = "max_seqlen_q"}, %mk: index {fmha.operand = "max_seqlen_k"}) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv, %cuq, %cuk) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "causal_bottom_right", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false, varlen = true,
      config = {body = "tiled", wave_size = 32 : i64, block_m = 128 : i64, block_n = 128 : i64, warps = 8 : i64,
                stages = 2 : i64, instruction = "mma.m16n8k16", sdp_warps = array<i64: 4, 2>,
                dkv_warps = array<i64: 4, 2>, dq_warps = array<i64: 4, 2>, swizzle = "xor"}}
      : (!t, !t, !t, !t, !t, !lse, !t, !t, !t, !cu, !cu) -> ()
  return
}

// -----

// The max lengths size the workspaces: a varlen problem in a function without them is refused.

!t = memref<?x?x64xbf16, strided<[?, ?, 1]>>
!lse = memref<?x?xf32, strided<[?, 1]>>
!cu = memref<?xi32, strided<[1]>>

func.func @bwd_varlen_no_max(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !lse, %dq: !t, %dk: !t, %dv: !t, %cuq: !cu, %cuk: !cu) {
  // expected-error @+1 {{needs the host function's index arguments max_seqlen_q, max_seqlen_k}}
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv, %cuq, %cuk) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false, varlen = true,
      config = {body = "warp", wave_size = 32 : i64}}
      : (!t, !t, !t, !t, !t, !lse, !t, !t, !t, !cu, !cu) -> ()
  return
}
