// RUN: fmha-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(convert-fmha-to-nvvm)'

gpu.module @kernels {
  gpu.func @wider_than_warp(%x: f32) kernel {
    // expected-error @+1 {{wave_reduce width 64 exceeds the wave size 32 of this target}}
    %r = "fmha.wave_reduce"(%x) {kind = "add", width = 64 : i32} : (f32) -> f32
    gpu.return
  }
}

// -----

gpu.module @kernels {
  gpu.func @bad_atomic(%x: f32, %acc: memref<?xf32>) kernel {
    // expected-error @+1 {{needs 1 indices}}
    "fmha.atomic_add"(%x, %acc) : (f32, memref<?xf32>) -> ()
    gpu.return
  }
}
