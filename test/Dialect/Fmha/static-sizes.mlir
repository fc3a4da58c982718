// Static dims that fix one size in two operands must agree, and heads_q must be gqa_ratio x heads_kv:
// a contradiction would lower without an error and compute garbage. Dynamic dims are checked at launch.
// RUN: fmha-opt %s -split-input-file -verify-diagnostics

// batch_2_vs_3
func.func @batch_2_vs_3(%a: memref<2x2x8x64xf16>, %b: memref<3x2x8x64xf16>, %l: memref<2x2x8xf32>) {
  // expected-error @+1 {{batch is 2 in 'q' but 3 in 'k', 'v', 'dk', 'dv'}}
  "fmha.attention_bwd"(%a, %b, %b, %a, %a, %l, %a, %b, %b) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<2x2x8x64xf16>, memref<3x2x8x64xf16>, memref<3x2x8x64xf16>, memref<2x2x8x64xf16>, memref<2x2x8x64xf16>, memref<2x2x8xf32>, memref<2x2x8x64xf16>, memref<3x2x8x64xf16>, memref<3x2x8x64xf16>) -> ()
  return
}

// -----

// gqa_4_with_equal_heads
func.func @gqa_4_with_equal_heads(%t: memref<1x4x8x64xf16>, %l: memref<1x4x8xf32>) {
  // expected-error @+1 {{heads_q 4 (in 'q') must be gqa_ratio 4 x heads_kv 4 (in 'k')}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 4 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x4x8x64xf16>, memref<1x4x8x64xf16>, memref<1x4x8x64xf16>, memref<1x4x8x64xf16>, memref<1x4x8x64xf16>, memref<1x4x8xf32>, memref<1x4x8x64xf16>, memref<1x4x8x64xf16>, memref<1x4x8x64xf16>) -> ()
  return
}

// -----

// lse_one_row_short
func.func @lse_one_row_short(%t: memref<1x2x8x64xf16>, %l: memref<1x2x7xf32>) {
  // expected-error @+1 {{seqlen_q is 8 in 'q' but 7 in 'lse'}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x7xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// A consistent static problem (GQA 2, seqlen_q != seqlen_k) is valid.
func.func @consistent(%q: memref<1x4x8x64xf16>, %k: memref<1x2x5x64xf16>, %l: memref<1x4x8xf32>) {
  "fmha.attention_bwd"(%q, %k, %k, %q, %q, %l, %q, %k, %k) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 2 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x4x8x64xf16>, memref<1x2x5x64xf16>, memref<1x2x5x64xf16>, memref<1x4x8x64xf16>, memref<1x4x8x64xf16>, memref<1x4x8xf32>, memref<1x4x8x64xf16>, memref<1x2x5x64xf16>, memref<1x2x5x64xf16>) -> ()
  return
}
