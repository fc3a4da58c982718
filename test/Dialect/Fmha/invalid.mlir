// Each chunk breaks one rule of the fmha verifier (docs/ir.md) and expects its message.
// RUN: fmha-opt %s -split-input-file -verify-diagnostics

// operand_count
func.func @operand_count(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{'fmha.attention_bwd' op takes 9 operands (q, k, v, o, do, lse, dq, dk, dv), got 8}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// element_type
func.func @element_type(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %x: memref<1x2x8x64xf32>) {
  // expected-error @+1 {{'fmha.attention_bwd' op operand #0 ('q'): expected element type f16, got f32}}
  "fmha.attention_bwd"(%x, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// lse_element_type
func.func @lse_element_type(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %x: memref<1x2x8xf16>) {
  // expected-error @+1 {{operand #5 ('lse'): expected element type f32, got f16}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %x, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// rank
func.func @rank(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %x: memref<2x8x64xf16>) {
  // expected-error @+1 {{operand #1 ('k'): expected rank 4, got memref<2x8x64xf16> (rank 3)}}
  "fmha.attention_bwd"(%t, %x, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// lse_rank
func.func @lse_rank(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %x: memref<1x2x8x1xf32>) {
  // expected-error @+1 {{operand #5 ('lse'): expected rank 3, got memref<1x2x8x1xf32> (rank 4)}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %x, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x1xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// hdim_q
func.func @hdim_q(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %x: memref<1x2x8x128xf16>) {
  // expected-error @+1 {{operand #7 ('dk'): expected a static innermost dim of 64, got 128}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %x, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x128xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// hdim_v
func.func @hdim_v(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+4 {{operand #2 ('v'): expected a static innermost dim of 32, got 64}}
  // expected-error @+3 {{operand #3 ('o'): expected a static innermost dim of 32, got 64}}
  // expected-error @+2 {{operand #4 ('do'): expected a static innermost dim of 32, got 64}}
  // expected-error @+1 {{operand #8 ('dv'): expected a static innermost dim of 32, got 64}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 32 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// dynamic_hdim
func.func @dynamic_hdim(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %x: memref<?x?x?x?xf16>) {
  // expected-error @+1 {{operand #3 ('o'): expected a static innermost dim of 64, got ?}}
  "fmha.attention_bwd"(%t, %t, %t, %x, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<?x?x?x?xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// inner_stride
func.func @inner_stride(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %x: memref<1x2x8x64xf16, strided<[?, ?, 1, ?]>>) {
  // expected-error @+1 {{operand #4 ('do'): expected the innermost dim contiguous (stride 1)}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %x, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16, strided<[?, ?, 1, ?]>>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// offset
func.func @offset(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %x: memref<1x2x8x64xf16, strided<[?, ?, ?, 1], offset: ?>>) {
  // expected-error @+1 {{operand #6 ('dq'): expected offset 0}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %x, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16, strided<[?, ?, ?, 1], offset: ?>>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// layout
func.func @layout(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %x: memref<1x2x8x64xf16, affine_map<(a, b, c, d) -> (b, a, c, d)>>) {
  // expected-error @+1 {{operand #8 ('dv'): expected a strided or identity layout}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %x) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16, affine_map<(a, b, c, d) -> (b, a, c, d)>>) -> ()
  return
}

// -----

// not_memref
func.func @not_memref(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %x: tensor<1x2x8x64xf16>) {
  // expected-error @+1 {{operand #0 ('q'): expected a rank-4 memref of f16, innermost dim 64, got tensor<1x2x8x64xf16>}}
  "fmha.attention_bwd"(%x, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (tensor<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// missing_attribute
func.func @missing_attribute(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{missing attribute 'scale' (an f32 float)}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// integer_width
func.func @integer_width(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{attribute 'hdim_q' must be an i64 integer, got 64 : i32}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i32, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// string_attribute
func.func @string_attribute(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{attribute 'dtype' must be a string, got 16 : i64}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = 16 : i64, hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// bool_attribute
func.func @bool_attribute(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{attribute 'dbias' must be a bool, got 0 : i64}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = 0 : i64, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// float_attribute
func.func @float_attribute(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{attribute 'scale' must be an f32 float, got 1.250000e-01 : f64}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f64, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// dtype
func.func @dtype(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{dtype: unsupported element type 'f64'}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f64", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// mask_kind
func.func @mask_kind(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{mask.kind: unknown mask kind 'causal'}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "causal", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// window_without_sliding
func.func @window_without_sliding(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{mask: window sizes given for mask 'causal_top_left'}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "causal_top_left", window_left = 8 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// window_unbounded
func.func @window_unbounded(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{mask: sliding window with both sides unbounded}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "sliding_window", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// gqa_ratio
func.func @gqa_ratio(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{gqa_ratio: must be a positive integer (got 0)}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 0 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// hdim_zero
func.func @hdim_zero(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{hdim_q: must be a positive integer (got 0)}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 0 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// scale_negative
func.func @scale_negative(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{attribute 'scale' must be finite and > 0, got -0.125}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = -0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// scale_zero
func.func @scale_zero(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{attribute 'scale' must be finite and > 0, got 0.0}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.0 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// scale_inf
func.func @scale_inf(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{attribute 'scale' must be finite and > 0, got inf}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0x7F800000 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// bias_operand_missing: an elementwise bias adds a bias operand after lse.
func.func @bias_operand_missing(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{'fmha.attention_bwd' op takes 10 operands (q, k, v, o, do, lse, bias, dq, dk, dv), got 9}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "elementwise", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// bias_kind
func.func @bias_kind(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{bias: unknown bias kind 'relative'}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "relative", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// dbias_without_bias: dbias needs a bias to be the gradient of.
func.func @dbias_without_bias(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{'fmha.attention_bwd' op dbias: dbias asks for the gradient of a bias, but bias is 'none' (use bias='elementwise' (dbias) or 'alibi' with a slopes tensor (d(slopes)))}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = true, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// deterministic mode does not cover d(slopes) yet (its f32 atomics)
func.func @deterministic_dslopes(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{deterministic: d(slopes) is still summed by f32 atomics in any order; deterministic mode does not cover it yet (use dbias=False, or deterministic=False)}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "alibi", alibi_slopes = true, dbias = true, deterministic = true}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// results
func.func @results(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{'fmha.attention_bwd' op must have no results, got 1}}
  %r = "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> i32
  return
}

// -----

// unknown_op
func.func @unknown_op() {
  // expected-error @+1 {{'fmha.forward' is not an fmha op; known: fmha.atomic_add}}
  "fmha.forward"() : () -> ()
  return
}

// -----

// dot_do_o_d
func.func @dot_do_o_d(%t: memref<1x2x8x64xf16>, %d: memref<1x2x8xf16>) {
  // expected-error @+1 {{'fmha.dot_do_o' op operand #2 ('d'): expected element type f32, got f16}}
  "fmha.dot_do_o"(%t, %t, %d) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}} : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf16>) -> ()
  return
}

// -----

// dot_do_o_count
func.func @dot_do_o_count(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{'fmha.dot_do_o' op takes 3 operands (o, do, d), got 4}}
  "fmha.dot_do_o"(%t, %t, %l, %l) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}} : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8xf32>) -> ()
  return
}

// -----

// dq_dk_dv_accumulator
func.func @dq_dk_dv_accumulator(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %acc: memref<1x2x8x64xf32>, %b: memref<1x2x8x64xbf16>) {
  // expected-error @+1 {{'fmha.dq_dk_dv' op operand #8 ('dv_out'): expected element type f16 or f32, got bf16}}
  "fmha.dq_dk_dv"(%t, %t, %t, %t, %l, %l, %t, %acc, %b) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf32>, memref<1x2x8x64xbf16>) -> ()
  return
}

// -----

// convert_grad_missing_grad
func.func @convert_grad_missing_grad(%acc: memref<1x2x8x64xf32>, %out: memref<1x2x8x64xf16>) {
  // expected-error @+1 {{'fmha.convert_grad' op missing attribute 'grad' (a string)}}
  "fmha.convert_grad"(%acc, %out) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}} : (memref<1x2x8x64xf32>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// convert_grad_unknown_grad
func.func @convert_grad_unknown_grad(%acc: memref<1x2x8x64xf32>, %out: memref<1x2x8x64xf16>) {
  // expected-error @+1 {{attribute 'grad' must be one of dq, dk, dv, dbias, dsinks, got 'dlse'}}
  "fmha.convert_grad"(%acc, %out) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}, grad = "dlse"} : (memref<1x2x8x64xf32>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// convert_grad_acc_type
func.func @convert_grad_acc_type(%acc: memref<1x2x8x64xf16>, %out: memref<1x2x8x64xf16>) {
  // expected-error @+1 {{operand #0 ('acc'): expected element type f32, got f16}}
  "fmha.convert_grad"(%acc, %out) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}, grad = "dk"} : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// convert_grad_out_type
func.func @convert_grad_out_type(%acc: memref<1x2x8x64xf32>, %out: memref<1x2x8x64xf32>) {
  // expected-error @+1 {{operand #1 ('out'): expected element type f16, got f32}}
  "fmha.convert_grad"(%acc, %out) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}, grad = "dk"} : (memref<1x2x8x64xf32>, memref<1x2x8x64xf32>) -> ()
  return
}

// -----

// convert_grad_hdim
func.func @convert_grad_hdim(%acc: memref<1x2x8x64xf32>, %out: memref<1x2x8x128xf16>) {
  // expected-error @+1 {{operand #0 ('acc'): expected a static innermost dim of 128, got 64}}
  "fmha.convert_grad"(%acc, %out) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 128 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}, grad = "dv"} : (memref<1x2x8x64xf32>, memref<1x2x8x128xf16>) -> ()
  return
}

// -----

// convert_grad_shape
func.func @convert_grad_shape(%acc: memref<1x2x8x64xf32>, %out: memref<1x2x4x64xf16>) {
  // expected-error @+1 {{operands 'acc' and 'out' must have the same shape, got memref<1x2x8x64xf32> and memref<1x2x4x64xf16>}}
  "fmha.convert_grad"(%acc, %out) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}, grad = "dk"} : (memref<1x2x8x64xf32>, memref<1x2x4x64xf16>) -> ()
  return
}

// -----

// convert_grad_partials_without_k: dQ's partials convert reads seqlen_k off k (which key blocks visit a row)
func.func @convert_grad_partials_without_k(%acc: memref<4x2x128x64xf32>, %out: memref<1x2x100x64xbf16>) {
  // expected-error @+1 {{takes 3 operands (acc, out, k), got 2}}
  "fmha.convert_grad"(%acc, %out) {dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = true, config = {body = "tiled", wave_size = 32 : i64, block_m = 64 : i64, block_n = 128 : i64, warps = 8 : i64, stages = 2 : i64, instruction = "mma.m16n8k16", sdp_warps = array<i64: 8, 1>, dkv_warps = array<i64: 8, 1>, dq_warps = array<i64: 4, 2>, p_in_registers = true, swizzle = "xor"}, grad = "dq", partials = true} : (memref<4x2x128x64xf32>, memref<1x2x100x64xbf16>) -> ()
  return
}

// -----

// wave_reduce_width
func.func @wave_reduce_width(%x: f32) {
  // expected-error @+1 {{'fmha.wave_reduce' op attribute 'width' must be a power of two from 2 to 64, got 48}}
  %r = "fmha.wave_reduce"(%x) {kind = "add", width = 48 : i32} : (f32) -> f32
  return
}

// -----

// wave_reduce_wide
func.func @wave_reduce_wide(%x: f32) {
  // expected-error @+1 {{attribute 'width' must be a power of two from 2 to 64, got 128}}
  %r = "fmha.wave_reduce"(%x) {kind = "add", width = 128 : i32} : (f32) -> f32
  return
}

// -----

// wave_reduce_one
func.func @wave_reduce_one(%x: f32) {
  // expected-error @+1 {{attribute 'width' must be a power of two from 2 to 64, got 1}}
  %r = "fmha.wave_reduce"(%x) {kind = "add", width = 1 : i32} : (f32) -> f32
  return
}

// -----

// wave_reduce_width_type
func.func @wave_reduce_width_type(%x: f32) {
  // expected-error @+1 {{attribute 'width' must be an i32 integer, got 64 : i64}}
  %r = "fmha.wave_reduce"(%x) {kind = "add", width = 64 : i64} : (f32) -> f32
  return
}

// -----

// wave_reduce_kind
func.func @wave_reduce_kind(%x: f32) {
  // expected-error @+1 {{attribute 'kind' must be one of add, got 'max'}}
  %r = "fmha.wave_reduce"(%x) {kind = "max", width = 64 : i32} : (f32) -> f32
  return
}

// -----

// wave_reduce_missing_kind
func.func @wave_reduce_missing_kind(%x: f32) {
  // expected-error @+1 {{missing attribute 'kind' (a string)}}
  %r = "fmha.wave_reduce"(%x) {width = 64 : i32} : (f32) -> f32
  return
}

// -----

// wave_reduce_operand
func.func @wave_reduce_operand(%x: f16) {
  // expected-error @+1 {{'fmha.wave_reduce' op operand #0 ('x') must be f32, got f16}}
  %r = "fmha.wave_reduce"(%x) {kind = "add", width = 64 : i32} : (f16) -> f32
  return
}

// -----

// wave_reduce_result
func.func @wave_reduce_result(%x: f32) {
  // expected-error @+1 {{must have one f32 result, got f16}}
  %r = "fmha.wave_reduce"(%x) {kind = "add", width = 64 : i32} : (f32) -> f16
  return
}

// -----

// exp2_operand
func.func @exp2_operand(%x: f64) {
  // expected-error @+1 {{'fmha.exp2' op operand #0 ('x') must be f32 or a 1-D vector of it, got f64}}
  %r = "fmha.exp2"(%x) : (f64) -> f32
  return
}

// -----

// exp2_count
func.func @exp2_count(%x: f32) {
  // expected-error @+1 {{'fmha.exp2' op takes 1 operands (x: f32), got 2}}
  %r = "fmha.exp2"(%x, %x) : (f32, f32) -> f32
  return
}

// -----

// masked_score_dot
func.func @masked_score_dot(%x: f32, %i: index) {
  // expected-error @+1 {{'fmha.masked_score' op operand #0 ('dot') must be f32 or a 1-D vector of it, got index}}
  %s = "fmha.masked_score"(%i, %i, %i, %i, %i) {mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64, scale_log2 = 0.18 : f32} : (index, index, index, index, index) -> f32
  return
}

// -----

// masked_score_position
func.func @masked_score_position(%x: f32, %i: index, %n: i32) {
  // expected-error @+1 {{operand #2 ('k_pos') must be index, got i32}}
  %s = "fmha.masked_score"(%x, %i, %n, %i, %i) {mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64, scale_log2 = 0.18 : f32} : (f32, index, i32, index, index) -> f32
  return
}

// -----

// masked_score_count
func.func @masked_score_count(%x: f32, %i: index) {
  // expected-error @+1 {{takes 5 operands (dot: f32, q_pos: index, k_pos: index, seqlen_q: index, seqlen_k: index), got 4}}
  %s = "fmha.masked_score"(%x, %i, %i, %i) {mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64, scale_log2 = 0.18 : f32} : (f32, index, index, index) -> f32
  return
}

// -----

// masked_score_mask
func.func @masked_score_mask(%x: f32, %i: index) {
  // expected-error @+1 {{mask.kind: unknown mask kind 'diagonal'}}
  %s = "fmha.masked_score"(%x, %i, %i, %i, %i) {mask = "diagonal", window_left = -1 : i64, window_right = -1 : i64, scale_log2 = 0.18 : f32} : (f32, index, index, index, index) -> f32
  return
}

// -----

// masked_score_window
func.func @masked_score_window(%x: f32, %i: index) {
  // expected-error @+1 {{mask: window sizes given for mask 'causal_top_left'}}
  %s = "fmha.masked_score"(%x, %i, %i, %i, %i) {mask = "causal_top_left", window_left = -1 : i64, window_right = 4 : i64, scale_log2 = 0.18 : f32} : (f32, index, index, index, index) -> f32
  return
}

// -----

// masked_score_scale
func.func @masked_score_scale(%x: f32, %i: index) {
  // expected-error @+1 {{attribute 'scale_log2' must be finite and > 0, got -1.0}}
  %s = "fmha.masked_score"(%x, %i, %i, %i, %i) {mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64, scale_log2 = -1.0 : f32} : (f32, index, index, index, index) -> f32
  return
}

// -----

// masked_score_missing_scale
func.func @masked_score_missing_scale(%x: f32, %i: index) {
  // expected-error @+1 {{missing attribute 'scale_log2' (an f32 float)}}
  %s = "fmha.masked_score"(%x, %i, %i, %i, %i) {mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64} : (f32, index, index, index, index) -> f32
  return
}

// -----

// masked_score_window_type
func.func @masked_score_window_type(%x: f32, %i: index) {
  // expected-error @+1 {{attribute 'window_left' must be an i64 integer, got -1 : i32}}
  %s = "fmha.masked_score"(%x, %i, %i, %i, %i) {mask = "causal_top_left", window_left = -1 : i32, window_right = -1 : i64, scale_log2 = 0.18 : f32} : (f32, index, index, index, index) -> f32
  return
}

// -----

// atomic_add_value
func.func @atomic_add_value(%h: f16, %b: memref<?x?xf32>, %i: index) {
  // expected-error @+1 {{'fmha.atomic_add' op operand #0 ('value') must be f32, vector<2xf32>, vector<4xf32> or vector<2xbf16>, got f16}}
  "fmha.atomic_add"(%h, %b, %i, %i) : (f16, memref<?x?xf32>, index, index) -> ()
  return
}

// -----

// atomic_add_vector_width
func.func @atomic_add_vector_width(%v: vector<3xf32>, %b: memref<?x?xf32>, %i: index) {
  // expected-error @+1 {{'fmha.atomic_add' op operand #0 ('value') must be f32, vector<2xf32>, vector<4xf32> or vector<2xbf16>, got vector<3xf32>}}
  "fmha.atomic_add"(%v, %b, %i, %i) : (vector<3xf32>, memref<?x?xf32>, index, index) -> ()
  return
}

// -----

// atomic_add_buffer
func.func @atomic_add_buffer(%v: f32, %b: memref<?x?xf16>, %i: index) {
  // expected-error @+1 {{operand #1 ('buffer') must be a ranked memref of f32, got memref<?x?xf16>}}
  "fmha.atomic_add"(%v, %b, %i, %i) : (f32, memref<?x?xf16>, index, index) -> ()
  return
}

// -----

// atomic_add_packed_bf16_buffer: a packed bf16 pair adds into a bf16 buffer.
func.func @atomic_add_packed_bf16_buffer(%v: vector<2xbf16>, %b: memref<?x?xf32>, %i: index) {
  // expected-error @+1 {{operand #1 ('buffer') must be a ranked memref of bf16 for a vector<2xbf16> value, got memref<?x?xf32>}}
  "fmha.atomic_add"(%v, %b, %i, %i) : (vector<2xbf16>, memref<?x?xf32>, index, index) -> ()
  return
}

// -----

// atomic_add_not_memref
func.func @atomic_add_not_memref(%v: f32, %b: memref<?x?xf32>, %i: index) {
  // expected-error @+1 {{operand #1 ('buffer') must be a ranked memref of f32, got f32}}
  "fmha.atomic_add"(%v, %v, %i) : (f32, f32, index) -> ()
  return
}

// -----

// atomic_add_index_count
func.func @atomic_add_index_count(%v: f32, %b: memref<?x?xf32>, %i: index) {
  // expected-error @+1 {{needs 2 indices for memref<?x?xf32>, got 3}}
  "fmha.atomic_add"(%v, %b, %i, %i, %i) : (f32, memref<?x?xf32>, index, index, index) -> ()
  return
}

// -----

// atomic_add_index_type
func.func @atomic_add_index_type(%v: f32, %b: memref<?x?xf32>, %i: index, %n: i64) {
  // expected-error @+1 {{operand #3 (index of dim 1) must be index, got i64}}
  "fmha.atomic_add"(%v, %b, %i, %n) : (f32, memref<?x?xf32>, index, i64) -> ()
  return
}

// -----

// atomic_add_too_few
func.func @atomic_add_too_few(%v: f32, %b: memref<?x?xf32>, %i: index) {
  // expected-error @+1 {{takes a value, a buffer and one index per buffer dim, got 1 operands}}
  "fmha.atomic_add"(%v) : (f32) -> ()
  return
}

// -----

// atomic_add_result
func.func @atomic_add_result(%v: f32, %b: memref<?x?xf32>, %i: index) {
  // expected-error @+1 {{'fmha.atomic_add' op must have no results, got 1}}
  %r = "fmha.atomic_add"(%v, %b, %i, %i) : (f32, memref<?x?xf32>, index, index) -> f32
  return
}

// -----

// region: a lowering erases the op, which would leave the ops inside its region dangling.
func.func @region(%x: f32) -> f32 {
  // expected-error @+1 {{'fmha.exp2' op must have no regions, got 1}}
  %e = "fmha.exp2"(%x) ({
    %inner = "fmha.exp2"(%x) : (f32) -> f32
  }) : (f32) -> f32
  return %e : f32
}

// -----

// successor
func.func @successor(%x: f32) {
  // expected-error @+1 {{'fmha.exp2' op must have no successors, got 1}}
  %e = "fmha.exp2"(%x)[^next] : (f32) -> f32
^next:
  return
}

// -----

// memory_space: the kernels take device-global buffers.
func.func @memory_space(%t: memref<1x2x8x64xf16>, %w: memref<1x2x8x64xf16, 3>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{operand #2 ('v'): expected the default memory space, got 3 : i64 in memref<1x2x8x64xf16, 3>}}
  "fmha.attention_bwd"(%t, %t, %w, %t, %t, %l, %t, %t, %t) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64,
      scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16, 3>, memref<1x2x8x64xf16>,
         memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>,
         memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// stage_without_config
func.func @stage_without_config(%t: memref<1x2x8x64xf16>, %d: memref<1x2x8xf32>) {
  // expected-error @+1 {{'fmha.dot_do_o' op missing attribute 'config' (the kernel config: run fmha-select-kernel-config first)}}
  "fmha.dot_do_o"(%t, %t, %d) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false} : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>) -> ()
  return
}

// -----

// config_unknown_body
func.func @config_unknown_body(%t: memref<1x2x8x64xf16>, %d: memref<1x2x8xf32>) {
  // expected-error @+1 {{attribute 'config': config.body: unknown body 'scalar' (use one of warp, tiled)}}
  "fmha.dot_do_o"(%t, %t, %d) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "scalar", wave_size = 64 : i64}} : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>) -> ()
  return
}

// -----

// config_warp_layout
func.func @config_warp_layout(%t: memref<1x2x8x64xf16>, %d: memref<1x2x8xf32>) {
  // expected-error @+1 {{config.dq_warps: 2 x 2 warps, but the work-group has 8 (make the two multiply to 8)}}
  "fmha.dot_do_o"(%t, %t, %d) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "tiled", wave_size = 32 : i64, block_m = 64 : i64, block_n = 128 : i64, warps = 8 : i64, stages = 2 : i64, instruction = "mma.m16n8k16", sdp_warps = array<i64: 8, 1>, dkv_warps = array<i64: 8, 1>, dq_warps = array<i64: 2, 2>, swizzle = "xor"}} : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>) -> ()
  return
}

// -----

// config_entry_type
func.func @config_entry_type(%t: memref<1x2x8x64xf16>, %d: memref<1x2x8xf32>) {
  // expected-error @+1 {{attribute 'config': entries wave_size must be strings, bools, integers or i64 arrays}}
  "fmha.dot_do_o"(%t, %t, %d) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 6.4e1 : f32}} : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>) -> ()
  return
}

// -----

// exp2_vector_result: elementwise ops give the type of their first operand.
func.func @exp2_vector_result(%x: vector<2xf32>) {
  // expected-error @+1 {{'fmha.exp2' op must have one result of the type of operand #0 (vector<2xf32>), got f32}}
  %r = "fmha.exp2"(%x) : (vector<2xf32>) -> f32
  return
}

// -----

// masked_score_vector_lanes: positions are scalars or vectors of the score's length.
func.func @masked_score_vector_lanes(%x: vector<2xf32>, %q: vector<4xindex>, %i: index) {
  // expected-error @+1 {{operand #1 ('q_pos') must be index or vector<2xindex>, got vector<4xindex>}}
  %s = "fmha.masked_score"(%x, %q, %i, %i, %i) {mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64, scale_log2 = 0.18 : f32} : (vector<2xf32>, vector<4xindex>, index, index, index) -> vector<2xf32>
  return
}

// -----

// masked_score_vector_seqlen: sequence lengths are uniform.
func.func @masked_score_vector_seqlen(%x: vector<2xf32>, %q: vector<2xindex>, %i: index) {
  // expected-error @+1 {{operand #3 ('seqlen_q') must be index, got vector<2xindex>}}
  %s = "fmha.masked_score"(%x, %q, %i, %q, %i) {mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64, scale_log2 = 0.18 : f32} : (vector<2xf32>, vector<2xindex>, index, vector<2xindex>, index) -> vector<2xf32>
  return
}

// -----

// softcap_negative: the optional softcap attribute, when present, is a positive f32 (0: off).
func.func @softcap_negative(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{softcap: must be 0 (off) or a positive f32 value}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, softcap = -30.0 : f32}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// softcap_f64: typed like scale.
func.func @softcap_f64(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{attribute 'softcap' must be an f32 float, got 3.000000e+01 : f64}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, softcap = 30.0 : f64}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// alibi_slopes_elementwise: a slopes tensor is ALiBi's. (The spec being invalid, the operands are
// checked against the list without a bias operand.)
func.func @alibi_slopes_elementwise(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{'fmha.attention_bwd' op alibi_slopes: a slopes tensor is ALiBi's, but bias is 'elementwise' (use bias='alibi', or alibi_slopes=False)}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "elementwise", dbias = false, deterministic = false, alibi_slopes = true}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// alibi_slopes_none: nor with no bias at all.
func.func @alibi_slopes_none(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{alibi_slopes: a slopes tensor is ALiBi's, but bias is 'none'}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, alibi_slopes = true}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// alibi_dbias_standard_slopes: d(slopes) needs the slopes as a tensor; the standard ones are constants.
func.func @alibi_dbias_standard_slopes(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{dbias: d(slopes) is the gradient of a slopes tensor; the standard slopes are constants of the kernel (pass the slopes as a tensor (alibi_slopes=True))}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "alibi", dbias = true, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// alibi_slopes_bool
func.func @alibi_slopes_bool(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{attribute 'alibi_slopes' must be a bool, got 1 : i64}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "alibi", dbias = false, deterministic = false, alibi_slopes = 1 : i64}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// dbias_operand_missing: dbias adds its gradient operand after dv.
func.func @dbias_operand_missing(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %b: memref<1x2x8x8xf16>) {
  // expected-error @+1 {{'fmha.attention_bwd' op takes 11 operands (q, k, v, o, do, lse, bias, dq, dk, dv, dbias), got 10}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %b, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "elementwise", dbias = true, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x8xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// slopes_operand_missing: ALiBi from a tensor adds the slopes operand after lse.
func.func @slopes_operand_missing(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{'fmha.attention_bwd' op takes 10 operands (q, k, v, o, do, lse, alibi_slopes, dq, dk, dv), got 9}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "alibi", dbias = false, deterministic = false, alibi_slopes = true}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// bias_element_type: the bias has the element type of the problem.
func.func @bias_element_type(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %b: memref<1x2x8x8xf32>) {
  // expected-error @+1 {{'fmha.attention_bwd' op operand #6 ('bias'): expected element type f16, got f32 in memref<1x2x8x8xf32>}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %b, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "elementwise", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// bias_rank: the bias is [1 or B, 1 or H, Sq, Sk].
func.func @bias_rank(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %b: memref<8x8xf16>) {
  // expected-error @+1 {{operand #6 ('bias'): expected rank 4, got memref<8x8xf16> (rank 2)}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %b, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "elementwise", dbias = false, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<8x8xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// dbias_element_type: so is dbias.
func.func @dbias_element_type(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %b: memref<1x2x8x8xf16>, %db: memref<1x2x8x8xbf16>) {
  // expected-error @+1 {{operand #10 ('dbias'): expected element type f16, got bf16 in memref<1x2x8x8xbf16>}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %b, %t, %t, %t, %db) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "elementwise", dbias = true, deterministic = false}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x8xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x8xbf16>) -> ()
  return
}

// -----

// slopes_element_type: the slopes are f32 whatever the dtype.
func.func @slopes_element_type(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %s: memref<1x2xf16>) {
  // expected-error @+1 {{operand #6 ('alibi_slopes'): expected element type f32, got f16 in memref<1x2xf16>}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %s, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "alibi", dbias = false, deterministic = false, alibi_slopes = true}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// slopes_rank: [1 or B, H].
func.func @slopes_rank(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %s: memref<2xf32>) {
  // expected-error @+1 {{operand #6 ('alibi_slopes'): expected rank 2, got memref<2xf32> (rank 1)}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %s, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "alibi", dbias = false, deterministic = false, alibi_slopes = true}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<2xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// dq_dk_dv_bias_position: the bias goes after d, not after the gradients.
func.func @dq_dk_dv_bias_position(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %b: memref<1x2x8x8xf16>, %acc: memref<1x2x8x64xf32>) {
  // expected-error @+1 {{'fmha.dq_dk_dv' op operand #9 ('dv_out'): expected a static innermost dim of 64, got 8}}
  "fmha.dq_dk_dv"(%t, %t, %t, %t, %l, %l, %t, %acc, %acc, %b) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "elementwise", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf32>, memref<1x2x8x64xf32>, memref<1x2x8x8xf16>) -> ()
  return
}

// -----

// convert_grad_dbias_no_bias: there is a dbias to convert only with an elementwise bias and dbias.
func.func @convert_grad_dbias_no_bias(%acc: memref<1x2x8x8xf32>, %out: memref<1x2x8x8xf16>) {
  // expected-error @+1 {{'fmha.convert_grad' op grad 'dbias' needs a spec with bias = "elementwise" and dbias = true}}
  "fmha.convert_grad"(%acc, %out) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}, grad = "dbias"} : (memref<1x2x8x8xf32>, memref<1x2x8x8xf16>) -> ()
  return
}

// -----

// convert_grad_dbias_off: a bias without dbias.
func.func @convert_grad_dbias_off(%acc: memref<1x2x8x8xf32>, %out: memref<1x2x8x8xf16>) {
  // expected-error @+1 {{grad 'dbias' needs a spec with bias = "elementwise" and dbias = true}}
  "fmha.convert_grad"(%acc, %out) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "elementwise", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}, grad = "dbias"} : (memref<1x2x8x8xf32>, memref<1x2x8x8xf16>) -> ()
  return
}

// -----

// convert_grad_dbias_alibi: d(slopes) is f32 already, never converted.
func.func @convert_grad_dbias_alibi(%acc: memref<1x2x8x8xf32>, %out: memref<1x2x8x8xf16>) {
  // expected-error @+1 {{grad 'dbias' needs a spec with bias = "elementwise" and dbias = true}}
  "fmha.convert_grad"(%acc, %out) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "alibi", alibi_slopes = true, dbias = true, deterministic = false, config = {body = "warp", wave_size = 64 : i64}, grad = "dbias"} : (memref<1x2x8x8xf32>, memref<1x2x8x8xf16>) -> ()
  return
}

// -----

// attention_bwd_bf16_accum_deterministic: bf16 atomics land in any order, deterministic mode forbids it.
func.func @attention_bwd_bf16_accum_deterministic(%t: memref<1x2x8x64xbf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{grad_accum: bf16 atomics add in any order, and bf16 rounding makes the order show}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = true, grad_accum = "bf16"} : (memref<1x2x8x64xbf16>, memref<1x2x8x64xbf16>, memref<1x2x8x64xbf16>, memref<1x2x8x64xbf16>, memref<1x2x8x64xbf16>, memref<1x2x8xf32>, memref<1x2x8x64xbf16>, memref<1x2x8x64xbf16>, memref<1x2x8x64xbf16>) -> ()
  return
}

// -----

// attention_bwd_bf16_accum_f16: packed bf16 atomics add into a bf16 dQ.
func.func @attention_bwd_bf16_accum_f16(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{grad_accum: bf16 atomics add into a bf16 dQ; this spec's dtype is f16}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, grad_accum = "bf16"} : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// attention_bwd_grad_accum_unknown: f32 or bf16 only.
func.func @attention_bwd_grad_accum_unknown(%t: memref<1x2x8x64xbf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{grad_accum: unknown gradient accumulation dtype 'f16' (use one of f32, bf16)}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, grad_accum = "f16"} : (memref<1x2x8x64xbf16>, memref<1x2x8x64xbf16>, memref<1x2x8x64xbf16>, memref<1x2x8x64xbf16>, memref<1x2x8x64xbf16>, memref<1x2x8xf32>, memref<1x2x8x64xbf16>, memref<1x2x8x64xbf16>, memref<1x2x8x64xbf16>) -> ()
  return
}

// -----

// semaphore_wait_value
func.func @semaphore_wait_value(%v: index, %s: memref<?xi32>, %i: index) {
  // expected-error @+1 {{'fmha.semaphore_wait' op operand #0 ('value') must be i32, got index}}
  "fmha.semaphore_wait"(%v, %s, %i) : (index, memref<?xi32>, index) -> ()
  return
}

// -----

// semaphore_wait_backoff: a pause between polls is 1 ns to nanosleep's 1 ms
func.func @semaphore_wait_backoff(%v: i32, %s: memref<?xi32>, %i: index) {
  // expected-error @+1 {{'fmha.semaphore_wait' op attribute 'backoff_ns' must be 1..1000000 ns, got 0}}
  "fmha.semaphore_wait"(%v, %s, %i) {backoff_ns = 0 : i32} : (i32, memref<?xi32>, index) -> ()
  return
}

// -----

// semaphore_signal_buffer: the counters are i32
func.func @semaphore_signal_buffer(%s: memref<?xf32>, %i: index) {
  // expected-error @+1 {{'fmha.semaphore_signal' op operand #0 ('buffer') must be a ranked memref of i32, got memref<?xf32>}}
  "fmha.semaphore_signal"(%s, %i) : (memref<?xf32>, index) -> ()
  return
}

// -----

// semaphore_signal_indices
func.func @semaphore_signal_indices(%s: memref<?x?xi32>, %i: index) {
  // expected-error @+1 {{'fmha.semaphore_signal' op needs 2 indices for memref<?x?xi32>, got 1}}
  "fmha.semaphore_signal"(%s, %i) : (memref<?x?xi32>, index) -> ()
  return
}

// -----

// semaphore_wait_shared: work-groups take turns through global memory
func.func @semaphore_wait_shared(%v: i32, %s: memref<?xi32, 3>, %i: index) {
  // expected-error @+1 {{'fmha.semaphore_wait' op operand #1 ('buffer') must be in global memory, got memref<?xi32, 3>}}
  "fmha.semaphore_wait"(%v, %s, %i) : (i32, memref<?xi32, 3>, index) -> ()
  return
}

// -----

// dq_semaphores_deterministic: the turns order deterministic mode's adds
func.func @dq_semaphores_deterministic(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %acc: memref<1x2x8x64xf32>, %s: memref<1x2x1xi32>) {
  // expected-error @+1 {{'fmha.dq_dk_dv' op dq_semaphores = true orders deterministic mode's dQ adds: it needs deterministic = true}}
  "fmha.dq_dk_dv"(%t, %t, %t, %t, %l, %l, %acc, %t, %t, %s) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, dq_semaphores = true, config = {body = "warp", wave_size = 64 : i64}}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8xf32>, memref<1x2x8x64xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x1xi32>) -> ()
  return
}

// -----

// dq_semaphores_operand: the semaphores are i32
func.func @dq_semaphores_operand(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %acc: memref<1x2x8x64xf32>) {
  // expected-error @+1 {{'fmha.dq_dk_dv' op operand #9 ('dq_semaphores'): expected element type i32, got f32}}
  "fmha.dq_dk_dv"(%t, %t, %t, %t, %l, %l, %acc, %t, %t, %l) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = true, dq_semaphores = true, config = {body = "warp", wave_size = 64 : i64}}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8xf32>, memref<1x2x8x64xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>) -> ()
  return
}

// -----

// dq_converted_deterministic: dQ converted in the grid sums whole heads in any order
func.func @dq_converted_deterministic(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %acc: memref<1x2x8x64xf32>, %done: memref<1x2xi32>) {
  // expected-error @+1 {{'fmha.dq_dk_dv' op dq_converted = true converts dQ of whole heads added in any order: not in deterministic mode or with varlen}}
  "fmha.dq_dk_dv"(%t, %t, %t, %t, %l, %l, %acc, %t, %t, %t, %done) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = true, dq_converted = true, config = {body = "warp", wave_size = 64 : i64}}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8xf32>, memref<1x2x8x64xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2xi32>) -> ()
  return
}

// -----

// dq_converted_counters: dq_done counts key blocks in i32
func.func @dq_converted_counters(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %acc: memref<1x2x8x64xf32>, %done: memref<1x2xf32>) {
  // expected-error @+1 {{'fmha.dq_dk_dv' op operand #10 ('dq_done'): expected element type i32, got f32}}
  "fmha.dq_dk_dv"(%t, %t, %t, %t, %l, %l, %acc, %t, %t, %t, %done) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, dq_converted = true, config = {body = "warp", wave_size = 64 : i64}}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8xf32>, memref<1x2x8x64xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2xf32>) -> ()
  return
}
