// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(fmha-decompose-bwd)' | FileCheck %s

// f16, sinks and an lse gradient, warp body: dsinks is zero-filled before dot_do_o, which reads dlse
// (D - dlse), lse and the sinks and adds into dsinks by atomics; dq_dk_dv takes d as before (the
// sinks and dlse reach it only through d) and no convert touches dsinks.

!t = memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>
!heads = memref<?xf32, strided<[1]>>

// CHECK-LABEL: func.func @bwd_sinks_dlse
// CHECK-SAME: (%[[Q:arg0]]: {{.*}}, %[[K:arg1]]: {{.*}}, %[[V:arg2]]: {{.*}}, %[[O:arg3]]: {{.*}}, %[[DO:arg4]]: {{.*}}, %[[LSE:arg5]]: {{.*}}, %[[DLSE:arg6]]: {{.*}}, %[[SINKS:arg7]]: {{.*}}, %[[DQ:arg8]]: {{.*}}, %[[DK:arg9]]: {{.*}}, %[[DV:arg10]]: {{.*}}, %[[DSINKS:arg11]]: memref<?xf32, strided<[1]>>)
// CHECK:      %[[D_ALLOC:.*]] = memref.alloc({{.*}}) {fmha.workspace = "d"} : memref<?x?x?xf32>
// CHECK:      %[[D:.*]] = memref.cast %[[D_ALLOC]]
// CHECK:      %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: gpu.memset %[[DSINKS]], %[[ZERO]] : memref<?xf32, strided<[1]>>, f32
// CHECK-NEXT: "fmha.dot_do_o"(%[[O]], %[[DO]], %[[DLSE]], %[[LSE]], %[[SINKS]], %[[D]], %[[DSINKS]])
// CHECK-SAME:     lse_grad = true
// CHECK-SAME:     sinks = true
// CHECK:      "fmha.dq_dk_dv"(%[[Q]], %[[K]], %[[V]], %[[DO]], %[[LSE]], %[[D]], %[[DQ]], %{{.*}}, %{{.*}})
// CHECK-NOT:  grad = "dsinks"
// CHECK:      return
func.func @bwd_sinks_dlse(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %dlse: !rows, %sinks: !heads,
                          %dq: !t, %dk: !t, %dv: !t, %dsinks: !heads) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dlse, %sinks, %dq, %dk, %dv, %dsinks) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false, sinks = true, lse_grad = true,
      config = {body = "warp", wave_size = 64 : i64}}
      : (!t, !t, !t, !t, !t, !rows, !rows, !heads, !t, !t, !t, !heads) -> ()
  return
}

// -----

// Deterministic sinks (tiled body): dot_do_o stores each row's term in a [B, Hq, Sq] workspace shaped
// like lse (every row is written: no zero fill), and convert_grad {grad = "dsinks", partials = true}
// sums it per head in a fixed order into dsinks; dsinks itself is never zero-filled nor added into.

!b = memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>
!heads = memref<?xf32, strided<[1]>>

// CHECK-LABEL: func.func @bwd_sinks_deterministic
// CHECK-SAME: %[[LSE:arg5]]: {{.*}}, %[[SINKS:arg6]]: {{.*}}, %{{arg7}}: {{.*}}, %{{arg8}}: {{.*}}, %{{arg9}}: {{.*}}, %[[DSINKS:arg10]]: memref<?xf32, strided<[1]>>)
// CHECK:      {fmha.workspace = "d"}
// CHECK:      %[[L0:.*]] = memref.dim %[[LSE]], %c0{{.*}} : memref<?x?x?xf32, strided<[?, ?, 1]>>
// CHECK:      %[[L1:.*]] = memref.dim %[[LSE]], %c1{{.*}} : memref<?x?x?xf32, strided<[?, ?, 1]>>
// CHECK:      %[[L2:.*]] = memref.dim %[[LSE]], %c2{{.*}} : memref<?x?x?xf32, strided<[?, ?, 1]>>
// CHECK-NEXT: %[[T_ALLOC:.*]] = memref.alloc(%[[L0]], %[[L1]], %[[L2]]) {fmha.workspace = "dsinks_acc"} : memref<?x?x?xf32>
// CHECK:      %[[TERMS:.*]] = memref.cast %[[T_ALLOC]]
// CHECK-NOT:  gpu.memset %[[DSINKS]]
// CHECK:      "fmha.dot_do_o"(%{{.*}}, %{{.*}}, %[[LSE]], %[[SINKS]], %{{.*}}, %[[TERMS]])
// CHECK-NOT:  gpu.memset %[[TERMS]]
// CHECK:      "fmha.dq_dk_dv"
// CHECK:      "fmha.convert_grad"(%[[TERMS]], %[[DSINKS]])
// CHECK-SAME:     grad = "dsinks"
// CHECK-SAME:     partials = true
// CHECK-SAME:     (memref<?x?x?xf32, strided<[?, ?, 1]>>, memref<?xf32, strided<[1]>>) -> ()
// CHECK:      memref.dealloc %[[T_ALLOC]] : memref<?x?x?xf32>
func.func @bwd_sinks_deterministic(%q: !b, %k: !b, %v: !b, %o: !b, %do: !b, %lse: !rows, %sinks: !heads,
                                   %dq: !b, %dk: !b, %dv: !b, %dsinks: !heads) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %sinks, %dq, %dk, %dv, %dsinks) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = true, sinks = true,
      config = {body = "tiled", wave_size = 32 : i64, block_m = 64 : i64, block_n = 128 : i64, warps = 8 : i64,
                stages = 2 : i64, instruction = "mma.m16n8k16", sdp_warps = array<i64: 8, 1>,
                dkv_warps = array<i64: 8, 1>, dq_warps = array<i64: 4, 2>, p_in_registers = true, swizzle = "xor"}}
      : (!b, !b, !b, !b, !b, !rows, !heads, !b, !b, !b, !heads) -> ()
  return
}
