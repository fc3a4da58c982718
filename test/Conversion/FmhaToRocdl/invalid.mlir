// RUN: fmha-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(convert-fmha-to-rocdl)'
// RUN: not fmha-opt %s --pass-pipeline='builtin.module(convert-fmha-to-rocdl{chipset=sm_90})' 2>&1 | FileCheck %s --check-prefix=CHIPSET
// RUN: not fmha-opt %s --pass-pipeline='builtin.module(convert-fmha-to-rocdl{reduce=tree})' 2>&1 | FileCheck %s --check-prefix=REDUCE

// CHIPSET: unknown chipset 'sm_90'; use one of gfx942, gfx950
// REDUCE: unknown reduce strategy 'tree'; use dpp or shuffle

func.func @outside_kernel(%x: f32) -> f32 {
  // expected-error @+1 {{'fmha.exp2' must be inside a gpu.func}}
  %e = "fmha.exp2"(%x) : (f32) -> f32
  return %e : f32
}

// -----

gpu.module @kernels {
  gpu.func @bad_width(%x: f32) kernel {
    // expected-error @+1 {{attribute 'width' must be a power of two}}
    %r = "fmha.wave_reduce"(%x) {kind = "add", width = 48 : i32} : (f32) -> f32
    gpu.return
  }
}

// -----

gpu.module @kernels {
  gpu.func @bad_kind(%x: f32) kernel {
    // expected-error @+1 {{attribute 'kind' must be one of add}}
    %r = "fmha.wave_reduce"(%x) {kind = "max", width = 64 : i32} : (f32) -> f32
    gpu.return
  }
}
