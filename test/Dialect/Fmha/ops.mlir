// Every fmha op parses, passes the fmha verifier and prints back unchanged (also from generic form).
// RUN: fmha-opt %s | fmha-opt | FileCheck %s
// RUN: fmha-opt %s --mlir-print-op-generic | fmha-opt | FileCheck %s

!t64 = memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>
!t128 = memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>
!acc64 = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!acc128 = memref<?x?x?x128xf32, strided<[?, ?, ?, 1]>>
!b64 = memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>
!bias = memref<1x4x?x?xbf16, strided<[?, ?, ?, 1]>>
!bdyn = memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>
!accdyn = memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>
!slopes = memref<?x?xf32, strided<[?, 1]>>

// CHECK-LABEL: func.func @attention_bwd
// CHECK-SAME: (%[[Q:[^:]*]]: memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>, %[[K:[^:]*]]:
// CHECK: "fmha.attention_bwd"(%[[Q]], %[[K]], %{{.*}}) {bias = "none", dbias = false, deterministic = false, dtype = "f16", gqa_ratio = 4 : i64, hdim_q = 64 : i64, hdim_v = 128 : i64, mask = "sliding_window", scale = 1.250000e-01 : f32, window_left = 64 : i64, window_right = 0 : i64}
// CHECK-SAME: : (memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>, memref<?x?x?xf32, strided<[?, ?, 1]>>, memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>) -> ()
func.func @attention_bwd(%q: !t64, %k: !t64, %v: !t128, %o: !t128, %do: !t128, %lse: !rows,
                         %dq: !t64, %dk: !t64, %dv: !t128) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %dq, %dk, %dv) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 128 : i64, gqa_ratio = 4 : i64,
      mask = "sliding_window", window_left = 64 : i64, window_right = 0 : i64,
      scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (!t64, !t64, !t128, !t128, !t128, !rows, !t64, !t64, !t128) -> ()
  return
}

// The identity layout and static sizes satisfy the contract too.
// CHECK-LABEL: func.func @attention_bwd_identity_layout
// CHECK: "fmha.attention_bwd"({{.*}}) {{{.*}}dtype = "f32"{{.*}}mask = "causal_bottom_right"{{.*}}} : (memref<2x4x16x64xf32>,
func.func @attention_bwd_identity_layout(%t: memref<2x4x16x64xf32>, %lse: memref<2x4x16xf32>) {
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %lse, %t, %t, %t) {
      dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "causal_bottom_right", window_left = -1 : i64, window_right = -1 : i64,
      scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false}
      : (memref<2x4x16x64xf32>, memref<2x4x16x64xf32>, memref<2x4x16x64xf32>, memref<2x4x16x64xf32>,
         memref<2x4x16x64xf32>, memref<2x4x16xf32>, memref<2x4x16x64xf32>, memref<2x4x16x64xf32>,
         memref<2x4x16x64xf32>) -> ()
  return
}

// softcap is an optional spec attribute (absent: off).
// CHECK-LABEL: func.func @attention_bwd_softcap
// CHECK: "fmha.attention_bwd"({{.*}}) {{{.*}}scale = 1.250000e-01 : f32, softcap = 3.000000e+01 : f32{{.*}}}
func.func @attention_bwd_softcap(%t: memref<2x4x16x64xbf16>, %lse: memref<2x4x16xf32>) {
  "fmha.attention_bwd"(%t, %t, %t, %t, %t, %lse, %t, %t, %t) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64,
      scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, softcap = 30.0 : f32}
      : (memref<2x4x16x64xbf16>, memref<2x4x16x64xbf16>, memref<2x4x16x64xbf16>, memref<2x4x16x64xbf16>,
         memref<2x4x16x64xbf16>, memref<2x4x16xf32>, memref<2x4x16x64xbf16>, memref<2x4x16x64xbf16>,
         memref<2x4x16x64xbf16>) -> ()
  return
}

// CHECK-LABEL: func.func @stages
// CHECK: "fmha.dot_do_o"(%{{.*}}, %{{.*}}, %{{.*}}) {{{.*}}mask = "causal_top_left"{{.*}}} : (memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>, memref<?x?x?xf32, strided<[?, ?, 1]>>) -> ()
// CHECK: "fmha.dq_dk_dv"({{.*}}) {{{.*}}} : ({{.*}}, memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, memref<?x?x?x128xf32, strided<[?, ?, ?, 1]>>) -> ()
// CHECK: "fmha.convert_grad"(%{{.*}}, %{{.*}}) {{{.*}}grad = "dk"{{.*}}} : (memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>) -> ()
// CHECK: "fmha.convert_grad"(%{{.*}}, %{{.*}}) {{{.*}}grad = "dv"{{.*}}} : (memref<?x?x?x128xf32, strided<[?, ?, ?, 1]>>, memref<?x?x?x128xf16, strided<[?, ?, ?, 1]>>) -> ()
func.func @stages(%q: !t64, %k: !t64, %v: !t128, %o: !t128, %do: !t128, %lse: !rows, %d: !rows,
                  %dq: !t64, %dk: !t64, %dv: !t128, %dk_acc: !acc64, %dv_acc: !acc128) {
  "fmha.dot_do_o"(%o, %do, %d) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 128 : i64, gqa_ratio = 1 : i64,
      mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64,
      scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}}
      : (!t128, !t128, !rows) -> ()
  "fmha.dq_dk_dv"(%q, %k, %v, %do, %lse, %d, %dq, %dk_acc, %dv_acc) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 128 : i64, gqa_ratio = 1 : i64,
      mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64,
      scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}}
      : (!t64, !t64, !t128, !t128, !rows, !rows, !t64, !acc64, !acc128) -> ()
  "fmha.convert_grad"(%dk_acc, %dk) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 128 : i64, gqa_ratio = 1 : i64,
      mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64,
      scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}, grad = "dk"}
      : (!acc64, !t64) -> ()
  "fmha.convert_grad"(%dv_acc, %dv) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 128 : i64, gqa_ratio = 1 : i64,
      mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64,
      scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}, grad = "dv"}
      : (!acc128, !t128) -> ()
  return
}

// A static dim of one convert_grad operand may meet a dynamic one of the other (the workspace of a
// statically shaped output is dynamically sized).
// CHECK-LABEL: func.func @convert_grad_static_output
// CHECK: "fmha.convert_grad"(%{{.*}}, %{{.*}}) {{{.*}}grad = "dk"{{.*}}} : (memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, memref<2x4x16x64xf16>) -> ()
func.func @convert_grad_static_output(%acc: !acc64, %dk: memref<2x4x16x64xf16>) {
  "fmha.convert_grad"(%acc, %dk) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64,
      scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "warp", wave_size = 64 : i64}, grad = "dk"}
      : (!acc64, memref<2x4x16x64xf16>) -> ()
  return
}

// Deterministic dQ in turns: dq_dk_dv takes the i32 semaphores after the gradients; the kernel ops that
// take the turns.
// CHECK-LABEL: func.func @dq_in_turns
// CHECK: "fmha.dq_dk_dv"(%{{.*}}, %[[DQ:[^,]*]], %{{[^,]*}}, %{{[^,]*}}, %[[SEM:[^)]*]]) {{{.*}}deterministic = true, dq_semaphores = true{{.*}}} : ({{.*}}, memref<?x?x?xi32, strided<[?, ?, 1]>>) -> ()
// CHECK: "fmha.semaphore_wait"(%{{.*}}, %[[SEM]], %{{.*}}, %{{.*}}, %{{.*}}) : (i32, memref<?x?x?xi32, strided<[?, ?, 1]>>, index, index, index) -> ()
// CHECK: "fmha.semaphore_signal"(%[[SEM]], %{{.*}}, %{{.*}}, %{{.*}}) : (memref<?x?x?xi32, strided<[?, ?, 1]>>, index, index, index) -> ()
// CHECK: "fmha.semaphore_wait"(%{{.*}}, %[[SEM]], %{{.*}}, %{{.*}}, %{{.*}}) {backoff_ns = 256 : i32}
func.func @dq_in_turns(%q: !t64, %k: !t64, %v: !t64, %do: !t64, %lse: !rows, %d: !rows, %dq_acc: !acc64, %dk: !t64,
                       %dv: !t64, %sem: memref<?x?x?xi32, strided<[?, ?, 1]>>, %turn: i32, %i: index) {
  "fmha.dq_dk_dv"(%q, %k, %v, %do, %lse, %d, %dq_acc, %dk, %dv, %sem) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64,
      scale = 0.125 : f32, bias = "none", dbias = false, deterministic = true, dq_semaphores = true,
      config = {body = "warp", wave_size = 64 : i64}}
      : (!t64, !t64, !t64, !t64, !rows, !rows, !acc64, !t64, !t64, memref<?x?x?xi32, strided<[?, ?, 1]>>) -> ()
  "fmha.semaphore_wait"(%turn, %sem, %i, %i, %i) : (i32, memref<?x?x?xi32, strided<[?, ?, 1]>>, index, index, index) -> ()
  "fmha.semaphore_signal"(%sem, %i, %i, %i) : (memref<?x?x?xi32, strided<[?, ?, 1]>>, index, index, index) -> ()
  "fmha.semaphore_wait"(%turn, %sem, %i, %i, %i) {backoff_ns = 256 : i32} : (i32, memref<?x?x?xi32, strided<[?, ?, 1]>>, index, index, index) -> ()
  return
}

// CHECK-LABEL: func.func @kernel_ops
// CHECK-SAME: (%[[X:[^:]*]]: f32, %[[I:[^:]*]]: index, %[[J:[^:]*]]: index, %[[N:[^:]*]]: index, %[[BUF:[^:]*]]: memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>)
// CHECK: %[[R:[^ ]*]] = "fmha.wave_reduce"(%[[X]]) {kind = "add", width = 64 : i32} : (f32) -> f32
// CHECK: %[[E:[^ ]*]] = "fmha.exp2"(%[[R]]) : (f32) -> f32
// CHECK: %[[S:[^ ]*]] = "fmha.masked_score"(%[[E]], %[[I]], %[[J]], %[[N]], %[[N]]) {mask = "causal_bottom_right", scale_log2 = 1.275000e-01 : f32, window_left = -1 : i64, window_right = -1 : i64} : (f32, index, index, index, index) -> f32
// CHECK: "fmha.atomic_add"(%[[S]], %[[BUF]], %[[I]], %[[J]], %[[I]], %[[J]]) : (f32, memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>, index, index, index, index) -> ()
// CHECK: "fmha.atomic_add"(%[[P:[^,]*]], %[[BUF]], %[[I]], %[[J]], %[[I]], %[[J]]) : (vector<2xf32>, memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>, index, index, index, index) -> ()
func.func @kernel_ops(%x: f32, %i: index, %j: index, %n: index, %buf: memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>) {
  %r = "fmha.wave_reduce"(%x) {kind = "add", width = 64 : i32} : (f32) -> f32
  %e = "fmha.exp2"(%r) : (f32) -> f32
  %s = "fmha.masked_score"(%e, %i, %j, %n, %n)
      {mask = "causal_bottom_right", window_left = -1 : i64, window_right = -1 : i64, scale_log2 = 0.1275 : f32}
      : (f32, index, index, index, index) -> f32
  "fmha.atomic_add"(%s, %buf, %i, %j, %i, %j) : (f32, memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>, index, index, index, index) -> ()
  %p = vector.broadcast %s : f32 to vector<2xf32>
  "fmha.atomic_add"(%p, %buf, %i, %j, %i, %j) : (vector<2xf32>, memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>, index, index, index, index) -> ()
  return
}

// CHECK-LABEL: func.func @sliding_window_score
// CHECK: "fmha.masked_score"({{.*}}) {mask = "sliding_window", scale_log2 = 2.500000e-01 : f32, window_left = 16 : i64, window_right = -1 : i64}
// CHECK: "fmha.wave_reduce"({{.*}}) {kind = "add", width = 2 : i32}
func.func @sliding_window_score(%x: f32, %i: index) -> f32 {
  %s = "fmha.masked_score"(%x, %i, %i, %i, %i)
      {mask = "sliding_window", window_left = 16 : i64, window_right = -1 : i64, scale_log2 = 0.25 : f32}
      : (f32, index, index, index, index) -> f32
  %r = "fmha.wave_reduce"(%s) {kind = "add", width = 2 : i32} : (f32) -> f32
  return %r : f32
}

// The elementwise kernel ops on vectors (the tiled body's accumulator pairs): a scalar position
// applies to every element.
// CHECK-LABEL: func.func @vector_kernel_ops
// CHECK: "fmha.masked_score"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) {{.*}} : (vector<2xf32>, vector<2xindex>, index, index, index) -> vector<2xf32>
// CHECK: "fmha.exp2"(%{{.*}}) : (vector<2xf32>) -> vector<2xf32>
func.func @vector_kernel_ops(%x: vector<2xf32>, %q: vector<2xindex>, %k: index, %n: index) -> vector<2xf32> {
  %s = "fmha.masked_score"(%x, %q, %k, %n, %n)
      {mask = "causal_top_left", window_left = -1 : i64, window_right = -1 : i64, scale_log2 = 0.25 : f32}
      : (vector<2xf32>, vector<2xindex>, index, index, index) -> vector<2xf32>
  %e = "fmha.exp2"(%s) : (vector<2xf32>) -> vector<2xf32>
  return %e : vector<2xf32>
}

// A tiled-body config on a stage op round-trips; fields at their defaults are not printed.
// CHECK-LABEL: func.func @tiled_config
// CHECK: "fmha.dot_do_o"{{.*}}config = {block_m = 64 : i64, block_n = 128 : i64, body = "tiled", dkv_warps = array<i64: 8, 1>, dq_warps = array<i64: 4, 2>, instruction = "mma.m16n8k16", p_in_registers = true, sdp_warps = array<i64: 8, 1>, stages = 2 : i64, swizzle = "xor", warps = 8 : i64, wave_size = 32 : i64}
func.func @tiled_config(%t: memref<1x2x8x64xbf16>, %d: memref<1x2x8xf32>) {
  "fmha.dot_do_o"(%t, %t, %d) {dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "tiled", wave_size = 32 : i64, block_m = 64 : i64, block_n = 128 : i64, warps = 8 : i64, stages = 2 : i64, instruction = "mma.m16n8k16", sdp_warps = array<i64: 8, 1>, dkv_warps = array<i64: 8, 1>, dq_warps = array<i64: 4, 2>, p_in_registers = true, swizzle = "xor"}} : (memref<1x2x8x64xbf16>, memref<1x2x8x64xbf16>, memref<1x2x8xf32>) -> ()
  return
}

// An elementwise bias and its gradient: the bias after lse, dbias after dv; both rank 4 with a
// dynamic innermost dim (seqlen_k) and broadcastable batch / head dims (here 1 x 4).
// CHECK-LABEL: func.func @attention_bwd_bias_dbias
// CHECK-SAME: %[[LSE:[^:]*]]: memref<?x?x?xf32, strided<[?, ?, 1]>>, %[[BIAS:[^:]*]]: memref<1x4x?x?xbf16, strided<[?, ?, ?, 1]>>, %[[DQ:[^:]*]]: memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, %[[DK:[^:]*]]: memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, %[[DV:[^:]*]]: memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, %[[DBIAS:[^:]*]]: memref<1x4x?x?xbf16, strided<[?, ?, ?, 1]>>)
// CHECK: "fmha.attention_bwd"(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[LSE]], %[[BIAS]], %[[DQ]], %[[DK]], %[[DV]], %[[DBIAS]]) {bias = "elementwise", dbias = true, deterministic = false, dtype = "bf16", gqa_ratio = 1 : i64, hdim_q = 64 : i64, hdim_v = 64 : i64, mask = "causal_bottom_right", scale = 1.250000e-01 : f32, window_left = -1 : i64, window_right = -1 : i64}
// CHECK-SAME: memref<?x?x?xf32, strided<[?, ?, 1]>>, memref<1x4x?x?xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<1x4x?x?xbf16, strided<[?, ?, ?, 1]>>) -> ()
func.func @attention_bwd_bias_dbias(%q: !b64, %k: !b64, %v: !b64, %o: !b64, %do: !b64, %lse: !rows,
                                    %bias: !bias, %dq: !b64, %dk: !b64, %dv: !b64, %dbias: !bias) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %bias, %dq, %dk, %dv, %dbias) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "causal_bottom_right", window_left = -1 : i64, window_right = -1 : i64,
      scale = 0.125 : f32, bias = "elementwise", dbias = true, deterministic = false}
      : (!b64, !b64, !b64, !b64, !b64, !rows, !bias, !b64, !b64, !b64, !bias) -> ()
  return
}

// ALiBi slopes from an f32 [1 or B, H] tensor and their gradient; alibi_slopes is an optional spec
// attribute, printed only when on.
// CHECK-LABEL: func.func @attention_bwd_alibi_slopes_dbias
// CHECK-SAME: %[[SLOPES:[^:]*]]: memref<?x?xf32, strided<[?, 1]>>, %[[DQ:[^:]*]]: {{.*}}, %[[DSLOPES:[^:]*]]: memref<?x?xf32, strided<[?, 1]>>)
// CHECK: "fmha.attention_bwd"(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[SLOPES]], %[[DQ]], %{{[^,]*}}, %{{[^,]*}}, %[[DSLOPES]]) {alibi_slopes = true, bias = "alibi", dbias = true, deterministic = false, dtype = "f16"
// CHECK-SAME: memref<?x?x?xf32, strided<[?, ?, 1]>>, memref<?x?xf32, strided<[?, 1]>>, memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xf16, strided<[?, ?, ?, 1]>>, memref<?x?xf32, strided<[?, 1]>>) -> ()
func.func @attention_bwd_alibi_slopes_dbias(%q: !t64, %k: !t64, %v: !t64, %o: !t64, %do: !t64, %lse: !rows,
                                            %slopes: !slopes, %dq: !t64, %dk: !t64, %dv: !t64, %dslopes: !slopes) {
  "fmha.attention_bwd"(%q, %k, %v, %o, %do, %lse, %slopes, %dq, %dk, %dv, %dslopes) {
      dtype = "f16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 2 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64,
      scale = 0.125 : f32, bias = "alibi", alibi_slopes = true, dbias = true, deterministic = false}
      : (!t64, !t64, !t64, !t64, !t64, !rows, !slopes, !t64, !t64, !t64, !slopes) -> ()
  return
}

// The stage ops with a bias: dq_dk_dv takes the bias after d and the f32 dbias accumulator last;
// convert_grad {grad = "dbias"} rounds it into dbias.
// CHECK-LABEL: func.func @stages_bias_dbias
// CHECK-SAME: %[[D:[^:]*]]: memref<?x?x?xf32, strided<[?, ?, 1]>>, %[[BIAS:[^:]*]]: memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>, %[[DQ:[^:]*]]: {{.*}}, %[[DBIAS_ACC:[^:]*]]: memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>, %[[DBIAS:[^:]*]]: memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>)
// CHECK: "fmha.dq_dk_dv"(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[D]], %[[BIAS]], %[[DQ]], %{{[^,]*}}, %{{[^,]*}}, %[[DBIAS_ACC]]) {bias = "elementwise"
// CHECK-SAME: memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xbf16, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>, memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>) -> ()
// CHECK: "fmha.convert_grad"(%[[DBIAS_ACC]], %[[DBIAS]]) {{{.*}}grad = "dbias"{{.*}}} : (memref<?x?x?x?xf32, strided<[?, ?, ?, 1]>>, memref<?x?x?x?xbf16, strided<[?, ?, ?, 1]>>) -> ()
func.func @stages_bias_dbias(%q: !b64, %k: !b64, %v: !b64, %do: !b64, %lse: !rows, %d: !rows, %bias: !bdyn,
                             %dq: !b64, %dk_acc: !acc64, %dv_acc: !acc64, %dbias_acc: !accdyn, %dbias: !bdyn) {
  "fmha.dq_dk_dv"(%q, %k, %v, %do, %lse, %d, %bias, %dq, %dk_acc, %dv_acc, %dbias_acc) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64,
      scale = 0.125 : f32, bias = "elementwise", dbias = true, deterministic = false, config = {body = "warp", wave_size = 64 : i64}}
      : (!b64, !b64, !b64, !b64, !rows, !rows, !bdyn, !b64, !acc64, !acc64, !accdyn) -> ()
  "fmha.convert_grad"(%dbias_acc, %dbias) {
      dtype = "bf16", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64,
      scale = 0.125 : f32, bias = "elementwise", dbias = true, deterministic = false, config = {body = "warp", wave_size = 64 : i64}, grad = "dbias"}
      : (!accdyn, !bdyn) -> ()
  return
}
