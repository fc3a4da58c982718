// RUN: fmha-opt %s --split-input-file --pass-pipeline='builtin.module(fmha-decompose-bwd)' | FileCheck %s

// f16: d workspace, f32 dK / dV accumulators zero-filled before dq_dk_dv, converted after it.

!t = memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>
!tv = memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @bwd_f16
// CHECK-SAME: (%[[Q:arg0]]: {{.*}}, %[[K:arg1]]: {{.*}}, %[[V:arg2]]: {{.*}}, %[[O:arg3]]: {{.*}}, %[[DO:arg4]]: {{.*}}, %[[LSE:arg5]]: {{.*}}, %[[DQ:arg6]]: {{.*}}, %[[DK:arg7]]: {{.*}}, %[[DV:arg8]]: {{.*}})
// CHECK-DAG:  %[[B:.*]] = memref.dim %[[LSE]], %c0{{.*}} : memref<?x?x?xf32, strided<[?, ?, 1]>>
// CHECK-DAG:  %[[H:.*]] = memref.dim %[[LSE]], %c1{{.*}} : memref<?x?x?xf32, strided<[?, ?, 1]>>
// CHECK-DAG:  %[[S:.*]] = memref.dim %[[LSE]], %c2{{.*}} : memref<?x?x?xf32, strided<[?, ?, 1]>>
// CHECK:      %[[D_ALLOC:.*]] = memref.alloc(%[[B]], %[[H]], %[[S]]) {fmha.workspace = "d"} : memref<?x?x?xf32>
// CHECK:      %[[D:.*]] = memref.cast %[[D_ALLOC]] : memref<?x?x?xf32> to memref<?x?x?xf32, strided<[?, ?, 1]>>
// CHECK:      memref.dim %[[DK]]
// CHECK:      %[[DK_ALLOC:.*]] = memref.alloc({{.*}}) {fmha.workspace = "dk_acc"} : memref<?x?x?x128xf32>
// CHECK:      %[[DK_ACC:.*]] = memref.cast %[[DK_ALLOC]] : memref<?x?x?x128xf32> to memref<?x?x?x128xf32, strided<[?, ?, ?, 1]>>
// CHECK:      memref.dim %[[DV]]
// CHECK:      %[[DV_ALLOC:.*]] = memref.alloc({{.*}}) {fmha.workspace = "dv_acc"} : memref<?x?x?x64xf32>
// CHECK:      %[[DV_ACC:.*]] = memref.cast %[[DV_ALLOC]] : memref<?x?x?x64xf32> to memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
// CHECK:      "fmha.dot_do_o"(%[[O]], %[[DO]], %[[D]])
// CHECK-SAME:     config = {body = "warp", {{.*}}wave_size = 64 : i64}
// CHECK-SAME:     dtype = "f16"
// CHECK:      %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:      gpu.memset %[[DK_ACC]], %[[ZERO]]
// CHECK:      gpu.memset %[[DV_ACC]], %[[ZERO]]
// CHECK:      "fmha.dq_dk_dv"(%[[Q]], %[[K]], %[[V]], %[[DO]], %[[LSE]], %[[D]], %[[DQ]], %[[DK_ACC]], %[[DV_ACC]])
// CHECK:      "fmha.convert_grad"(%[[DK_ACC]], %[[DK]])
// CHECK-SAME:     grad = "dk"
// CHECK:      "fmha.convert_grad"(%[[DV_ACC]], %[[DV]])
// CHECK-SAME:     grad = "dv"
// CHECK:      memref.dealloc %[[D_ALLOC]]
// CHECK:      memref.dealloc %[[DK_ALLOC]]
// CHECK:      memref.dealloc %[[DV_ALLOC]]
// CHECK-NOT:  fmha.attention_bwd
// CHECK:      return
func.func @bwd_f16(%q: !t, %k: !t, %v: !tv, %o: !tv, %do: !tv, %lse: !rows, %dq: !t, %dk: !t, %dv: !tv) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "f16", hdim_q = 128 : i64, hdim_v = 64 : i64, gqa_ratio = 2 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}}
      : (!t, !t, !tv, !tv, !tv, !rows, !t, !t, !tv) -> ()
  return
}

// -----

// f32: dK / dV accumulate straight into the outputs, which are zero-filled; no convert stage.

!t = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @bwd_f32
// CHECK-SAME: (%[[Q:arg0]]: {{.*}}, %[[K:arg1]]: {{.*}}, %[[V:arg2]]: {{.*}}, %[[O:arg3]]: {{.*}}, %[[DO:arg4]]: {{.*}}, %[[LSE:arg5]]: {{.*}}, %[[DQ:arg6]]: {{.*}}, %[[DK:arg7]]: {{.*}}, %[[DV:arg8]]: {{.*}})
// CHECK:      %[[D_ALLOC:.*]] = memref.alloc({{.*}}) {fmha.workspace = "d"} : memref<?x?x?xf32>
// CHECK:      %[[D:.*]] = memref.cast %[[D_ALLOC]]
// CHECK:      "fmha.dot_do_o"(%[[O]], %[[DO]], %[[D]])
// CHECK:      %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NOT:  memref.alloc
// CHECK:      gpu.memset %[[DK]], %[[ZERO]]
// CHECK:      gpu.memset %[[DV]], %[[ZERO]]
// CHECK:      "fmha.dq_dk_dv"(%[[Q]], %[[K]], %[[V]], %[[DO]], %[[LSE]], %[[D]], %[[DQ]], %[[DK]], %[[DV]])
// CHECK-NOT:  fmha.convert_grad
// CHECK:      memref.dealloc %[[D_ALLOC]]
// CHECK-NEXT: return
func.func @bwd_f32(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %dq: !t, %dk: !t, %dv: !t) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}}
      : (!t, !t, !t, !t, !t, !rows, !t, !t, !t) -> ()
  return
}

// -----

// bf16 with identity-layout (contiguous BHSD) operands: the workspaces still take the strided
// contract type, and the stage ops keep the spec attributes, mask included.

!t = memref<?x?x?x64xbf16>
!rows = memref<?x?x?xf32>

// CHECK-LABEL: func.func @bwd_bf16_contiguous
// CHECK:      "fmha.dot_do_o"
// CHECK-SAME:     mask = "sliding_window"
// CHECK-SAME:     window_left = 16 : i64, window_right = 0 : i64
// CHECK-SAME:     (memref<?x?x?x64xbf16>, memref<?x?x?x64xbf16>, memref<?x?x?xf32, strided<[?, ?, 1]>>) -> ()
// CHECK:      gpu.memset {{.*}} : memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, f32
// CHECK:      gpu.memset {{.*}} : memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, f32
// CHECK:      "fmha.dq_dk_dv"
// CHECK-SAME:     mask = "sliding_window"
// CHECK-COUNT-2: "fmha.convert_grad"
// CHECK-COUNT-3: memref.dealloc
func.func @bwd_bf16_contiguous(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %dq: !t, %dk: !t, %dv: !t) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "sliding_window", window_left = 16 : i64, window_right = 0 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}}
      : (!t, !t, !t, !t, !t, !rows, !t, !t, !t) -> ()
  return
}

// -----

// Static sizes: workspaces are sized by memref.dim of the operands all the same (the launch plan reads
// their sizes as expressions), cast to the contract type, which convert_grad accepts next to the
// static output.

!t = memref<2x4x16x64xf16>
!rows = memref<2x4x16xf32>

// CHECK-LABEL: func.func @bwd_f16_static
// CHECK-SAME: %[[DK:arg7]]: memref<2x4x16x64xf16>
// CHECK:      %[[DK_ALLOC:.*]] = memref.alloc({{.*}}) {fmha.workspace = "dk_acc"} : memref<?x?x?x64xf32>
// CHECK:      %[[DK_ACC:.*]] = memref.cast %[[DK_ALLOC]] : memref<?x?x?x64xf32> to memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
// CHECK:      "fmha.convert_grad"(%[[DK_ACC]], %[[DK]])
// CHECK-SAME:     grad = "dk"
// CHECK-SAME:     (memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, memref<2x4x16x64xf16>) -> ()
func.func @bwd_f16_static(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %dq: !t, %dk: !t, %dv: !t) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}}
      : (!t, !t, !t, !t, !t, !rows, !t, !t, !t) -> ()
  return
}

// -----

// The tiled body: dQ accumulates by atomics into a workspace whose rows are padded to whole query
// blocks (ceil(seqlen_q / 64) * 64); dK, dV are written directly; one convert (dq).

!t = memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// CHECK-LABEL: func.func @bwd_tiled
// CHECK-SAME: (%[[Q:arg0]]: {{.*}}, %[[K:arg1]]: {{.*}}, %[[V:arg2]]: {{.*}}, %[[O:arg3]]: {{.*}}, %[[DO:arg4]]: {{.*}}, %[[LSE:arg5]]: {{.*}}, %[[DQ:arg6]]: {{.*}}, %[[DK:arg7]]: {{.*}}, %[[DV:arg8]]: {{.*}})
// CHECK:      memref.alloc({{.*}}) {fmha.workspace = "d"}
// CHECK-DAG:  %[[SQ:.*]] = memref.dim %[[Q]], %c2
// CHECK-DAG:  %[[BM:.*]] = arith.constant 64 : index
// CHECK:      %[[BLOCKS:.*]] = arith.ceildivui %[[SQ]], %[[BM]]
// CHECK:      %[[ROWS:.*]] = arith.muli %[[BLOCKS]], %[[BM]]
// CHECK:      %[[DQ_ALLOC:.*]] = memref.alloc({{.*}}, %[[ROWS]]) {fmha.workspace = "dq_acc"} : memref<?x?x?x64xf32>
// CHECK:      %[[DQ_ACC:.*]] = memref.cast %[[DQ_ALLOC]]
// CHECK:      "fmha.dot_do_o"
// CHECK:      gpu.memset %[[DQ_ACC]]
// CHECK-NOT:  gpu.memset
// CHECK:      "fmha.dq_dk_dv"(%[[Q]], %[[K]], %[[V]], %[[DO]], %[[LSE]], %{{.*}}, %[[DQ_ACC]], %[[DK]], %[[DV]])
// CHECK-SAME:     body = "tiled"
// CHECK:      "fmha.convert_grad"(%[[DQ_ACC]], %[[DQ]])
// CHECK-SAME:     grad = "dq"
// CHECK-NOT:  "fmha.convert_grad"
// CHECK-COUNT-2: memref.dealloc
func.func @bwd_tiled(%q: !t, %k: !t, %v: !t, %o: !t, %do: !t, %lse: !rows, %dq: !t, %dk: !t, %dv: !t) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false,
      config = {body = "tiled", wave_size = 32 : i64, block_m = 64 : i64, block_n = 128 : i64, warps = 8 : i64,
                stages = 2 : i64, instruction = "mma.m16n8k16", sdp_warps = array<i64: 8, 1>,
                dkv_warps = array<i64: 8, 1>, dq_warps = array<i64: 4, 2>, p_in_registers = true, swizzle = "xor"}}
      : (!t, !t, !t, !t, !t, !rows, !t, !t, !t) -> ()
  return
}
