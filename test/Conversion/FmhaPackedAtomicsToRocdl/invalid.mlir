// RUN: fmha-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(fmha-packed-atomics-to-rocdl)'

gpu.module @kernels {
  gpu.func @scalar_left(%x: f32, %acc: memref<?xf32>, %i: index) kernel {
    // expected-error @+1 {{an f32 'fmha.atomic_add' is lowered by convert-fmha-to-rocdl; run it first}}
    "fmha.atomic_add"(%x, %acc, %i) : (f32, memref<?xf32>, index) -> ()
    gpu.return
  }
}
