// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(fmha-decompose-bwd)' | FileCheck %s

// bf16, elementwise bias + dbias: dbias accumulates (by atomics, every body) in a zero-filled f32
// workspace sized by dbias's four dims, innermost dynamic; dq_dk_dv takes the bias after d and the
// dbias accumulator last; a convert_grad {grad = "dbias"} rounds it into dbias.

!t = memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
!bias = memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @bwd_bias_dbias_bf16
// CHECK-SAME: (%[[Q:arg0]]: {{.*}}, %[[K:arg1]]: {{.*}}, %[[V:arg2]]: {{.*}}, %[[O:arg3]]: {{.*}}, %[[DO:arg4]]: {{.*}}, %[[LSE:arg5]]: {{.*}}, %[[BIAS:arg6]]: {{.*}}, %[[DQ:arg7]]: {{.*}}, %[[DK:arg8]]: {{.*}}, %[[DV:arg9]]: {{.*}}, %[[DBIAS:arg10]]: memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>)
// CHECK:      %[[D_ALLOC:.*]] = memref.alloc({{.*}}) {fmha.workspace = "d"} : memref<?x?x?xf32>
// CHECK:      %[[D:.*]] = memref.cast %[[D_ALLOC]]
// CHECK:      %[[DK_ALLOC:.*]] = memref.alloc({{.*}}) {fmha.workspace = "dk_acc"} : memref<?x?x?x64xf32>
// CHECK:      %[[DK_ACC:.*]] = memref.cast %[[DK_ALLOC]]
// CHECK:      %[[DV_ALLOC:.*]] = memref.alloc({{.*}}) {fmha.workspace = "dv_acc"} : memref<?x?x?x64xf32>
// CHECK:      %[[DV_ACC:.*]] = memref.cast %[[DV_ALLOC]]
// CHECK-DAG:  %[[DB0:.*]] = memref.dim %[[DBIAS]], %c0{{.*}} : memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>
// CHECK-DAG:  %[[DB1:.*]] = memref.dim %[[DBIAS]], %c1{{.*}} : memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>
// CHECK-DAG:  %[[DB2:.*]] = memref.dim %[[DBIAS]], %c2{{.*}} : memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>
// CHECK-DAG:  %[[DB3:.*]] = memref.dim %[[DBIAS]], %c3{{.*}} : memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>
// CHECK:      %[[DB_ALLOC:.*]] = memref.alloc(%[[DB0]], %[[DB1]], %[[DB2]], %[[DB3]]) {fmha.workspace = "dbias_acc"} : memref<?x?x?x?xf32>
// CHECK:      %[[DB_ACC:.*]] = memref.cast %[[DB_ALLOC]] : memref<?x?x?x?xf32> to memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>
// CHECK:      "fmha.dot_do_o"(%[[O]], %[[DO]], %[[D]])
// CHECK-SAME:     bias = "elementwise"
// CHECK-SAME:     dbias = true
// CHECK:      %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:      gpu.memset %[[DK_ACC]], %[[ZERO]]
// CHECK:      gpu.memset %[[DV_ACC]], %[[ZERO]]
// CHECK:      gpu.memset %[[DB_ACC]], %[[ZERO]] : memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>, f32
// CHECK-NOT:  gpu.memset
// CHECK:      "fmha.dq_dk_dv"(%[[Q]], %[[K]], %[[V]], %[[DO]], %[[LSE]], %[[D]], %[[BIAS]], %[[DQ]], %[[DK_ACC]], %[[DV_ACC]], %[[DB_ACC]])
// CHECK-SAME:     bias = "elementwise"
// CHECK-SAME:     dbias = true
// CHECK-SAME:     memref<?x?x?xf32, strided<[?, ?, 1]>>, memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>) -> ()
// CHECK:      "fmha.convert_grad"(%[[DK_ACC]], %[[DK]])
// CHECK-SAME:     grad = "dk"
// CHECK:      "fmha.convert_grad"(%[[DV_ACC]], %[[DV]])
// CHECK-SAME:     grad = "dv"
// CHECK:      "fmha.convert_grad"(%[[DB_ACC]], %[[DBIAS]])
// CHECK-SAME:     grad = "dbias"
// CHECK-SAME:     (memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>, memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>) -> ()
// CHECK-NOT:  "fmha.convert_grad"
// CHECK:      memref.dealloc %[[D_ALLOC]]
// CHECK:      memref.dealloc %[[DK_ALLOC]]
// CHECK:      memref.dealloc %[[DV_ALLOC]]
// CHECK:      memref.dealloc %[[DB_ALLOC]] : memref<?x?x?x?xf32>
// CHECK-NEXT: return
func.func @bwd_bias_dbias_bf16(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %bias: !bias,
                               %dq: !t, %dk: !t, %dv: !t, %dbias: !bias) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %bias, %dq, %dk, %dv, %dbias) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "elementwise", dbias = true, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}}
      : (!t, !t, !t, !t, !t, !rows, !bias, !t, !t, !t, !bias) -> ()
  return
}

// -----

// f32, elementwise bias + dbias: dbias is accumulated in place, zero-filled like dK / dV; no
// workspace but d, no convert stage.

!t = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!bias = memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @bwd_bias_dbias_f32
// CHECK-SAME: (%[[Q:arg0]]: {{.*}}, %[[K:arg1]]: {{.*}}, %[[V:arg2]]: {{.*}}, %[[O:arg3]]: {{.*}}, %[[DO:arg4]]: {{.*}}, %[[LSE:arg5]]: {{.*}}, %[[BIAS:arg6]]: {{.*}}, %[[DQ:arg7]]: {{.*}}, %[[DK:arg8]]: {{.*}}, %[[DV:arg9]]: {{.*}}, %[[DBIAS:arg10]]: memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>)
// CHECK:      %[[D_ALLOC:.*]] = memref.alloc({{.*}}) {fmha.workspace = "d"} : memref<?x?x?xf32>
// CHECK:      %[[D:.*]] = memref.cast %[[D_ALLOC]]
// CHECK-NOT:  memref.alloc
// CHECK:      "fmha.dot_do_o"(%[[O]], %[[DO]], %[[D]])
// CHECK:      %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NOT:  memref.alloc
// CHECK:      gpu.memset %[[DK]], %[[ZERO]]
// CHECK:      gpu.memset %[[DV]], %[[ZERO]]
// CHECK:      gpu.memset %[[DBIAS]], %[[ZERO]] : memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>, f32
// CHECK:      "fmha.dq_dk_dv"(%[[Q]], %[[K]], %[[V]], %[[DO]], %[[LSE]], %[[D]], %[[BIAS]], %[[DQ]], %[[DK]], %[[DV]], %[[DBIAS]])
// CHECK-NOT:  fmha.convert_grad
// CHECK:      memref.dealloc %[[D_ALLOC]]
// CHECK-NEXT: return
func.func @bwd_bias_dbias_f32(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %bias: !bias,
                              %dq: !t, %dk: !t, %dv: !t, %dbias: !bias) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %bias, %dq, %dk, %dv, %dbias) {
      dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "elementwise", dbias = true, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}}
      : (!t, !t, !t, !t, !t, !rows, !bias, !t, !t, !t, !bias) -> ()
  return
}

// -----

// f16, elementwise bias without dbias: the bias goes to dq_dk_dv after d, no dbias workspace.

!t = memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>
!bias = memref<?x?x?x?xf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @bwd_bias_f16
// CHECK-SAME: %[[LSE:arg5]]: {{.*}}, %[[BIAS:arg6]]: {{.*}}, %[[DQ:arg7]]: {{.*}}, %[[DK:arg8]]: {{.*}}, %[[DV:arg9]]: {{.*}})
// CHECK-NOT:  "dbias_acc"
// CHECK:      "fmha.dq_dk_dv"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[LSE]], %{{.*}}, %[[BIAS]], %[[DQ]], %{{[^,]*}}, %{{[^,]*}})
// CHECK-SAME:     dbias = false
// CHECK-COUNT-2: "fmha.convert_grad"
// CHECK-NOT:  "fmha.convert_grad"
// CHECK:      return
func.func @bwd_bias_f16(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %bias: !bias,
                        %dq: !t, %dk: !t, %dv: !t) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %bias, %dq, %dk, %dv) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "elementwise", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}}
      : (!t, !t, !t, !t, !t, !rows, !bias, !t, !t, !t) -> ()
  return
}

// -----

// f16, ALiBi slopes from a tensor + their gradient: d(slopes) is f32, so it is zero-filled and
// accumulated in place for every dtype (no workspace, no convert); dq_dk_dv takes the slopes after d
// and d(slopes) last; dK / dV still go through their f32 accumulators.

!t = memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>
!slopes = memref<?x?xf32, strided<[?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @bwd_alibi_slopes_dbias
// CHECK-SAME: (%[[Q:arg0]]: {{.*}}, %[[K:arg1]]: {{.*}}, %[[V:arg2]]: {{.*}}, %[[O:arg3]]: {{.*}}, %[[DO:arg4]]: {{.*}}, %[[LSE:arg5]]: {{.*}}, %[[SLOPES:arg6]]: memref<?x?xf32, strided<[?, 1]>>, %[[DQ:arg7]]: {{.*}}, %[[DK:arg8]]: {{.*}}, %[[DV:arg9]]: {{.*}}, %[[DSLOPES:arg10]]: memref<?x?xf32, strided<[?, 1]>>)
// CHECK:      memref.alloc({{.*}}) {fmha.workspace = "d"}
// CHECK:      %[[DK_ALLOC:.*]] = memref.alloc({{.*}}) {fmha.workspace = "dk_acc"}
// CHECK:      %[[DK_ACC:.*]] = memref.cast %[[DK_ALLOC]]
// CHECK:      %[[DV_ALLOC:.*]] = memref.alloc({{.*}}) {fmha.workspace = "dv_acc"}
// CHECK:      %[[DV_ACC:.*]] = memref.cast %[[DV_ALLOC]]
// CHECK-NOT:  memref.alloc
// CHECK:      "fmha.dot_do_o"
// CHECK-SAME:     alibi_slopes = true, bias = "alibi"
// CHECK:      %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:      gpu.memset %[[DK_ACC]], %[[ZERO]]
// CHECK:      gpu.memset %[[DV_ACC]], %[[ZERO]]
// CHECK:      gpu.memset %[[DSLOPES]], %[[ZERO]] : memref<?x?xf32, strided<[?, 1]>>, f32
// CHECK:      "fmha.dq_dk_dv"(%[[Q]], %[[K]], %[[V]], %[[DO]], %[[LSE]], %{{[^,]*}}, %[[SLOPES]], %[[DQ]], %[[DK_ACC]], %[[DV_ACC]], %[[DSLOPES]])
// CHECK-SAME:     alibi_slopes = true, bias = "alibi"
// CHECK-SAME:     dbias = true
// CHECK:      "fmha.convert_grad"(%[[DK_ACC]], %[[DK]])
// CHECK:      "fmha.convert_grad"(%[[DV_ACC]], %[[DV]])
// CHECK-NOT:  "fmha.convert_grad"
// CHECK-COUNT-3: memref.dealloc
// CHECK-NEXT: return
func.func @bwd_alibi_slopes_dbias(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %slopes: !slopes,
                                  %dq: !t, %dk: !t, %dv: !t, %dslopes: !slopes) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %slopes, %dq, %dk, %dv, %dslopes) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "alibi", alibi_slopes = true, dbias = true, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}}
      : (!t, !t, !t, !t, !t, !rows, !slopes, !t, !t, !t, !slopes) -> ()
  return
}

// -----

// The tiled body, bf16, bias + dbias: dbias accumulates the same way as with the warp body (a
// zero-filled f32 workspace, converted), next to the row-padded dq workspace.

!t = memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
!bias = memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @bwd_bias_dbias_tiled
// CHECK-SAME: %[[BIAS:arg6]]: {{.*}}, %[[DQ:arg7]]: {{.*}}, %[[DK:arg8]]: {{.*}}, %[[DV:arg9]]: {{.*}}, %[[DBIAS:arg10]]: {{.*}})
// CHECK:      %[[DQ_ALLOC:.*]] = memref.alloc({{.*}}) {fmha.workspace = "dq_acc"} : memref<?x?x?x64xf32>
// CHECK:      %[[DQ_ACC:.*]] = memref.cast %[[DQ_ALLOC]]
// CHECK:      %[[DB_ALLOC:.*]] = memref.alloc({{.*}}) {fmha.workspace = "dbias_acc"} : memref<?x?x?x?xf32>
// CHECK:      %[[DB_ACC:.*]] = memref.cast %[[DB_ALLOC]]
// CHECK:      gpu.memset %[[DQ_ACC]]
// CHECK:      gpu.memset %[[DB_ACC]]
// CHECK-NOT:  gpu.memset
// CHECK:      "fmha.dq_dk_dv"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{[^,]*}}, %[[BIAS]], %[[DQ_ACC]], %[[DK]], %[[DV]], %[[DB_ACC]])
// CHECK-SAME:     body = "tiled"
// CHECK:      "fmha.convert_grad"(%[[DQ_ACC]], %[[DQ]])
// CHECK-SAME:     grad = "dq"
// CHECK:      "fmha.convert_grad"(%[[DB_ACC]], %[[DBIAS]])
// CHECK-SAME:     grad = "dbias"
// CHECK-NOT:  "fmha.convert_grad"
// CHECK-COUNT-3: memref.dealloc
func.func @bwd_bias_dbias_tiled(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %bias: !bias,
                                %dq: !t, %dk: !t, %dv: !t, %dbias: !bias) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %bias, %dq, %dk, %dv, %dbias) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "elementwise", dbias = true, deterministic = false,
      config = {body = "tiled", wave_size = 32 : i64, block_m = 64 : i64, block_n = 128 : i64, warps = 8 : i64,
                stages = 2 : i64, instruction = "mma.m16n8k16", sdp_warps = array<i64: 8, 1>,
                dkv_warps = array<i64: 8, 1>, dq_warps = array<i64: 4, 2>, p_in_registers = true, swizzle = "xor"}}
      : (!t, !t, !t, !t, !t, !rows, !bias, !t, !t, !t, !bias) -> ()
  return
}
