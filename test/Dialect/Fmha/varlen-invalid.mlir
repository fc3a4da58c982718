// RUN: fmha-opt %s --split-input-file --verify-diagnostics

// Varlen's operands: packed rank-3 tensors and the int32 cu_seqlens; what it does not build is refused.

!t = memref<?x?x64xf16, strided<[?, ?, 1]>>
!t4 = memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>
!lse = memref<?x?xf32, strided<[?, 1]>>
!cu = memref<?xi32, strided<[1]>>

func.func @padded_q(%q4: !t4, %t: !t, %lse: !lse, %cu: !cu) {
  // expected-error @+1 {{operand #0 ('q'): expected rank 3}}
  "fmha.attention_bwd"(%q4, %t, %t, %t, %t, %lse, %t, %t, %t, %cu, %cu) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false, varlen = true}
      : (!t4, !t, !t, !t, !t, !lse, !t, !t, !t, !cu, !cu) -> ()
  return
}

// -----

!t = memref<?x?x64xf16, strided<[?, ?, 1]>>
!lse = memref<?x?xf32, strided<[?, 1]>>
!cu = memref<?xi32, strided<[1]>>

func.func @deterministic(%q: !t, %lse: !lse, %cu: !cu) {
  // expected-error @+2 {{varlen: deterministic mode's dQ partials}}
  // expected-error @+1 {{takes 9 operands}}
  "fmha.attention_bwd"(%q, %q, %q, %q, %q, %lse, %q, %q, %q, %cu, %cu) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = true, varlen = true}
      : (!t, !t, !t, !t, !t, !lse, !t, !t, !t, !cu, !cu) -> ()
  return
}

// -----

!t = memref<?x?x64xf16, strided<[?, ?, 1]>>
!lse = memref<?x?xf32, strided<[?, 1]>>
!cu = memref<?xi32, strided<[1]>>
!cu64 = memref<?xi64, strided<[1]>>

func.func @cu_seqlens_i64(%q: !t, %lse: !lse, %cu64: !cu64, %cu: !cu) {
  // expected-error @+1 {{operand #9 ('cu_seqlens_q'): expected element type i32}}
  "fmha.attention_bwd"(%q, %q, %q, %q, %q, %lse, %q, %q, %q, %cu64, %cu) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false, varlen = true}
      : (!t, !t, !t, !t, !t, !lse, !t, !t, !t, !cu64, !cu) -> ()
  return
}
