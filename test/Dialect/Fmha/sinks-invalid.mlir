// Each chunk breaks one rule of sinks (a per-head f32 logit and its gradient) or of the lse gradient
// (an f32 tensor shaped like lse) and expects the verifier's message (docs/ir.md).
// RUN: fmha-opt %s -split-input-file -verify-diagnostics

// sinks_operand_count: sinks = true adds the sinks after lse and dsinks after dv
func.func @sinks_operand_count(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{'fmha.attention_bwd' op takes 11 operands (q, k, v, o, do, lse, sinks, dq, dk, dv, dsinks), got 9}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, sinks = true}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// sinks_element_type: the sink logits are f32 whatever the dtype
func.func @sinks_element_type(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %s: memref<2xf16>, %ds: memref<2xf32>) {
  // expected-error @+1 {{operand #6 ('sinks'): expected element type f32, got f16}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %s, %t, %t, %t, %ds) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, sinks = true}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<2xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<2xf32>) -> ()
  return
}

// -----

// sinks_heads: one sink per query head
func.func @sinks_heads(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %s: memref<3xf32>) {
  // expected-error @+1 {{heads_q is 2 in 'q' but 3 in 'sinks', 'dsinks'}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %s, %t, %t, %t, %s) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, sinks = true}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<3xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<3xf32>) -> ()
  return
}

// -----

// dlse_rank: dlse is shaped like lse
func.func @dlse_rank(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>, %x: memref<2x8xf32>) {
  // expected-error @+1 {{operand #6 ('dlse'): expected rank 3, got memref<2x8xf32> (rank 2)}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %x, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, lse_grad = true}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// lse_grad_attribute: a bool
func.func @lse_grad_attribute(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{attribute 'lse_grad' must be a bool, got 1 : i64}}
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %l, %t, %t, %t) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, lse_grad = 1 : i64}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8x64xf16>) -> ()
  return
}

// -----

// dot_do_o_operands: with sinks and dlse the row stage reads dlse, lse and the sinks and adds into dsinks
func.func @dot_do_o_operands(%t: memref<1x2x8x64xf16>, %l: memref<1x2x8xf32>) {
  // expected-error @+1 {{'fmha.dot_do_o' op takes 7 operands (o, do, dlse, lse, sinks, d, dsinks_out), got 3}}
  "fmha.dot_do_o"(%t, %t, %l) {dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, sinks = true, lse_grad = true, config = {body = "warp", wave_size = 64 : i64}}
      : (memref<1x2x8x64xf16>, memref<1x2x8x64xf16>, memref<1x2x8xf32>) -> ()
  return
}

// -----

// convert_dsinks_atomic: dsinks is converted only from deterministic mode's per-row terms
func.func @convert_dsinks_atomic(%acc: memref<1x2x8xf32>, %out: memref<2xf32>) {
  // expected-error @+1 {{grad 'dsinks' sums deterministic mode's per-row terms: it needs sinks = true, deterministic = true and partials = true}}
  "fmha.convert_grad"(%acc, %out) {dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, sinks = true, grad = "dsinks", partials = true, config = {body = "warp", wave_size = 64 : i64}}
      : (memref<1x2x8xf32>, memref<2xf32>) -> ()
  return
}
