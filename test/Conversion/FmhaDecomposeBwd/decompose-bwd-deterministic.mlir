// RUN: fmha-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(fmha-decompose-bwd)' | FileCheck %s

// Deterministic mode on the tiled body: dQ's workspace holds one partial per key block and batch,
// [B x ceil(seqlen_k / 128), H, padded rows, 64]; without a mask every key block writes its whole
// partial, so nothing is zero-filled; the convert sums the partials in order ({partials = true}) and
// takes k, whose seqlen_k says which key blocks visit a row's query block.

!t = memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @bwd_tiled_deterministic
// CHECK-SAME: (%[[Q:arg0]]: {{.*}}, %[[K:arg1]]: {{.*}}, %[[V:arg2]]: {{.*}}, %[[O:arg3]]: {{.*}}, %[[DO:arg4]]: {{.*}}, %[[LSE:arg5]]: {{.*}}, %[[DQ:arg6]]: {{.*}}, %[[DK:arg7]]: {{.*}}, %[[DV:arg8]]: {{.*}})
// CHECK:      memref.alloc({{.*}}) {fmha.workspace = "d"}
// CHECK-DAG:  %[[B:.*]] = memref.dim %[[Q]], %c0
// CHECK-DAG:  %[[SK:.*]] = memref.dim %[[K]], %c2
// CHECK-DAG:  %[[BN:.*]] = arith.constant 128 : index
// CHECK:      %[[KBLOCKS:.*]] = arith.ceildivui %[[SK]], %[[BN]]
// CHECK:      %[[PARTIALS:.*]] = arith.muli %[[B]], %[[KBLOCKS]]
// CHECK:      %[[DQ_ALLOC:.*]] = memref.alloc(%[[PARTIALS]], {{.*}}, {{.*}}) {fmha.workspace = "dq_acc"} : memref<?x?x?x64xf32>
// CHECK:      %[[DQ_ACC:.*]] = memref.cast %[[DQ_ALLOC]]
// CHECK-NOT:  gpu.memset
// CHECK:      "fmha.dq_dk_dv"(%[[Q]], %[[K]], %[[V]], %[[DO]], %[[LSE]], %{{.*}}, %[[DQ_ACC]], %[[DK]], %[[DV]])
// CHECK-SAME:     deterministic = true
// CHECK:      "fmha.convert_grad"(%[[DQ_ACC]], %[[DQ]], %[[K]])
// CHECK-SAME:     grad = "dq"
// CHECK-SAME:     partials = true
func.func @bwd_tiled_deterministic(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %dq: !t, %dk: !t, %dv: !t) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = true,
      config = {body = "tiled", wave_size = 32 : i64, block_m = 64 : i64, block_n = 128 : i64, warps = 8 : i64,
                stages = 2 : i64, instruction = "mma.m16n8k16", sdp_warps = array<i64: 8, 1>,
                dkv_warps = array<i64: 8, 1>, dq_warps = array<i64: 4, 2>, p_in_registers = true, swizzle = "xor"}}
      : (!t, !t, !t, !t, !t, !rows, !t, !t, !t) -> ()
  return
}

// -----

// The warp body cannot be deterministic: the verifier says why.

!t = memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

func.func @bwd_warp_deterministic(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %dq: !t, %dk: !t, %dv: !t) {
  // expected-error @+1 {{the warp body sums dK and dV over query rows by f32 atomics}}
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = true,
      config = {body = "warp", wave_size = 32 : i64}}
      : (!t, !t, !t, !t, !t, !rows, !t, !t, !t) -> ()
  return
}

// -----

// Under a mask a key block skips the query blocks it cannot see; the convert skips the same partials
// (key_block_range), so they need no zero fill either.

!t = memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @bwd_tiled_deterministic_causal
// CHECK:      %[[DQ_ALLOC:.*]] = memref.alloc({{.*}}) {fmha.workspace = "dq_acc"} : memref<?x?x?x64xf32>
// CHECK:      %[[DQ_ACC:.*]] = memref.cast %[[DQ_ALLOC]]
// CHECK-NOT:  gpu.memset
// CHECK:      "fmha.convert_grad"(%[[DQ_ACC]], %{{[a-z0-9]+}}, %{{[a-z0-9]+}})
// CHECK-SAME:     partials = true
func.func @bwd_tiled_deterministic_causal(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %dq: !t, %dk: !t, %dv: !t) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = true,
      config = {body = "tiled", wave_size = 32 : i64, block_m = 64 : i64, block_n = 128 : i64, warps = 8 : i64,
                stages = 2 : i64, instruction = "mma.m16n8k16", sdp_warps = array<i64: 8, 1>,
                dkv_warps = array<i64: 8, 1>, dq_warps = array<i64: 4, 2>, p_in_registers = true, swizzle = "xor"}}
      : (!t, !t, !t, !t, !t, !rows, !t, !t, !t) -> ()
  return
}

// -----

// Deterministic dbias: a [B, Hq, Sq, Sk] workspace (q's batch and heads, dbias's sequence dims), one
// stored partial per (batch, query head); its convert sums the dims the bias broadcasts over.

!t = memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
!bias = memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @bwd_tiled_deterministic_dbias
// CHECK-SAME: (%[[Q:arg0]]: {{.*}}, %[[DQ:arg7]]: {{.*}}, %[[DBIAS:arg10]]: {{.*}})
// CHECK:      {fmha.workspace = "dq_acc"}
// CHECK-DAG:  %[[B:.*]] = memref.dim %[[Q]], %c0
// CHECK-DAG:  %[[H:.*]] = memref.dim %[[Q]], %c1
// CHECK-DAG:  %[[SQ:.*]] = memref.dim %[[DBIAS]], %c2
// CHECK-DAG:  %[[SK:.*]] = memref.dim %[[DBIAS]], %c3
// CHECK:      %[[DB_ALLOC:.*]] = memref.alloc(%[[B]], %[[H]], %[[SQ]], %[[SK]]) {fmha.workspace = "dbias_acc"} : memref<?x?x?x?xf32>
// CHECK:      %[[DB_ACC:.*]] = memref.cast %[[DB_ALLOC]]
// CHECK-NOT:  gpu.memset
// CHECK:      "fmha.dq_dk_dv"
// CHECK:      "fmha.convert_grad"(%{{[a-z0-9_]+}}, %[[DQ]], %{{[a-z0-9_]+}})
// CHECK-SAME:     partials = true
// CHECK:      "fmha.convert_grad"(%[[DB_ACC]], %[[DBIAS]])
// CHECK-SAME:     grad = "dbias"
// CHECK-SAME:     partials = true
func.func @bwd_tiled_deterministic_dbias(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %bias: !bias, %dq: !t, %dk: !t, %dv: !t, %dbias: !bias) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %bias, %dq, %dk, %dv, %dbias) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "elementwise", dbias = true, deterministic = true,
      config = {body = "tiled", wave_size = 32 : i64, block_m = 64 : i64, block_n = 128 : i64, warps = 8 : i64,
                stages = 2 : i64, instruction = "mma.m16n8k16", sdp_warps = array<i64: 8, 1>,
                dkv_warps = array<i64: 8, 1>, dq_warps = array<i64: 4, 2>, p_in_registers = true, swizzle = "xor"}}
      : (!t, !t, !t, !t, !t, !rows, !bias, !t, !t, !t, !bias) -> ()
  return
}
