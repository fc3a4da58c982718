// RUN: fmha-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(fmha-expand-warp-body)'

// A stage op on the host: the body needs the kernel fmha-stages-to-gpu makes.

!t = memref<?x?x?x64xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

func.func @on_host(%o: !t, %do: !t, %d: !rows) {
  // expected-error @+1 {{'fmha.dot_do_o' is outside a gpu.func; run fmha-stages-to-gpu first}}
  "fmha.dot_do_o"(%o, %do, %d) {
      dtype = "f32", hdim_q = 64 : i64, hdim_v = 64 : i64, gqa_ratio = 1 : i64,
      mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
      bias = "none", dbias = false, deterministic = false,
          config = {body = "warp", wave_size = 64 : i64}} : (!t, !t, !rows) -> ()
  return
}

// -----

// hdim 96 is not a multiple of the wave size.

!t = memref<?x?x?x96xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @not_a_multiple(%o: !t, %do: !t, %d: !rows) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      // expected-error @+1 {{hdim_q: 96 is not supported by the warp body (wave size 64) (use a multiple of 64 from 64 to 512); hdim_v: 96 is not supported by the warp body (wave size 64)}}
      "fmha.dot_do_o"(%o, %do, %d) {
          dtype = "f32", hdim_q = 96 : i64, hdim_v = 96 : i64, gqa_ratio = 1 : i64,
          mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
          bias = "none", dbias = false, deterministic = false,
          config = {body = "warp", wave_size = 64 : i64}} : (!t, !t, !rows) -> ()
      gpu.return
    }
  }
}

// -----

// hdim_v 1024 would give each lane E = 16 > 8 elements.

!t = memref<?x?x?x1024xf16, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @too_wide(%o: !t, %do: !t, %d: !rows) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      // expected-error @+1 {{hdim_q: 1024 is not supported by the warp body (wave size 64) (use a multiple of 64 from 64 to 512); hdim_v: 1024 is not supported by the warp body (wave size 64)}}
      "fmha.dot_do_o"(%o, %do, %d) {
          dtype = "f16", hdim_q = 1024 : i64, hdim_v = 1024 : i64, gqa_ratio = 1 : i64,
          mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
          bias = "none", dbias = false, deterministic = false,
          config = {body = "warp", wave_size = 64 : i64}} : (!t, !t, !rows) -> ()
      gpu.return
    }
  }
}

// -----

// The kernel was outlined for 32 threads but the row kernel of this op needs a block of 512.

!t = memref<?x?x?x128xf32, strided<[?, ?, ?, 1]>>
!rows = memref<?x?x?xf32, strided<[?, ?, 1]>>

module attributes {gpu.container_module} {
  gpu.module @fmha_kernels {
    gpu.func @wrong_block(%o: !t, %do: !t, %d: !rows) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      // expected-error @+1 {{the enclosing kernel has known_block_size [32, 1, 1] but the warp body's dot_do_o needs [512, 1, 1]}}
      "fmha.dot_do_o"(%o, %do, %d) {
          dtype = "f32", hdim_q = 128 : i64, hdim_v = 128 : i64, gqa_ratio = 1 : i64,
          mask = "none", window_left = -1 : i64, window_right = -1 : i64, scale = 0.125 : f32,
          bias = "none", dbias = false, deterministic = false,
          config = {body = "warp", wave_size = 64 : i64}} : (!t, !t, !rows) -> ()
      gpu.return
    }
  }
}
