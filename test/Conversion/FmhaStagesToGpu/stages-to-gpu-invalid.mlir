// RUN: fmha-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(fmha-stages-to-gpu)'

// One spec and stage, two operand layouts: both would be the same kernel symbol.

!strided = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!dense = memref<?x?x?x64xf32>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

func.func @clash(%o: !strided, %do: !strided, %d: !rows, %o2: !dense, %do2: !dense) {
  "fmha.dot_do_o"(%o, %do, %d) {
      dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}} : (!strided, !strided, !rows) -> ()
  // expected-error @+1 {{kernel @fmha_bwd_f32_d64x64_g1_nomask_warp64_dot_do_o already exists with argument types}}
  "fmha.dot_do_o"(%o2, %do2, %d) {
      dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}} : (!dense, !dense, !rows) -> ()
  return
}

// -----

// A module that already holds a kernel of this symbol computing something else (here: another scale).

!t = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @fmha_bwd_f32_d64x64_g1_nomask_s0p5_warp64_dq_dk_dv(%q: !t, %k: !t, %v: !t, %do: !t, %lse: !rows, %d: !rows, %dq: !t, %dk: !t, %dv: !t) kernel {
      "fmha.dq_dk_dv"(%q, %k, %v, %do, %lse, %d, %dq, %dk, %dv) {
          dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
          mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.25 : f32,
          bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}} : (!t, !t, !t, !t, !rows, !rows, !t, !t, !t) -> ()
      gpu.return
    }
  }
  func.func @other_scale(%q: !t, %k: !t, %v: !t, %do: !t, %lse: !rows, %d: !rows, %dq: !t, %dk: !t, %dv: !t) {
    // expected-error @+1 {{kernel @fmha_bwd_f32_d64x64_g1_nomask_s0p5_warp64_dq_dk_dv already exists for other attributes}}
    "fmha.dq_dk_dv"(%q, %k, %v, %do, %lse, %d, %dq, %dk, %dv) {
        dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
        mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.5 : f32,
        bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}} : (!t, !t, !t, !t, !rows, !rows, !t, !t, !t) -> ()
    return
  }
}

// -----

// The kernel's symbol is taken by another kind of op in the kernel module (this used to give a
// duplicate symbol that MLIR reported from a worker thread, aborting the process).

!t = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    func.func @fmha_bwd_f32_d64x64_g1_nomask_warp64_dot_do_o() {
      return
    }
  }
  func.func @symbol_taken(%o: !t, %do: !t, %d: !rows) {
    // expected-error @+1 {{kernel symbol @fmha_bwd_f32_d64x64_g1_nomask_warp64_dot_do_o is taken by a func.func in gpu.module @fmha_kernels}}
    "fmha.dot_do_o"(%o, %do, %d) {
        dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
        mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
        bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}} : (!t, !t, !rows) -> ()
    return
  }
}

// -----

// The kernel module's symbol is taken.

!t = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

// expected-error @+1 {{symbol @fmha_kernels is taken by a func.func; the kernels need it for their gpu.module}}
func.func @fmha_kernels() {
  return
}
func.func @module_symbol_taken(%o: !t, %do: !t, %d: !rows) {
  "fmha.dot_do_o"(%o, %do, %d) {
      dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false,
      config = {body = "warp", wave_size = 64 : i64}} : (!t, !t, !rows) -> ()
  return
}

// -----

// The tiled body computes on f16 / bf16 matrix instructions: valid IR, but its plan refuses an f32 spec.
func.func @config_tiled_f32(%t: memref<1x2x8x64xf32>, %d: memref<1x2x8xf32>) {
  // expected-error @+1 {{dtype: the tiled body computes f16 and bf16 on matrix instructions, not f32 (use body='warp' for f32)}}
  "fmha.dot_do_o"(%t, %t, %d) {dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64, mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32, bias = "none", dbias = false, deterministic = false, config = {body = "tiled", wave_size = 32 : i64, block_m = 64 : i64, block_n = 128 : i64, warps = 8 : i64, stages = 2 : i64, instruction = "mma.m16n8k16", sdp_warps = array<i64: 8, 1>, dkv_warps = array<i64: 8, 1>, dq_warps = array<i64: 4, 2>, swizzle = "xor"}} : (memref<1x2x8x64xf32>, memref<1x2x8x64xf32>, memref<1x2x8xf32>) -> ()
  return
}
