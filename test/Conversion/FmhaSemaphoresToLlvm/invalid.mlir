// RUN: fmha-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(fmha-semaphores-to-llvm)'

gpu.module @kernels {
  gpu.func @float_counter(%want: i32, %sem: memref<?xf32>, %i: index) kernel {
    // expected-error @+1 {{operand #1 ('buffer') must be a ranked memref of i32, got memref<?xf32>}}
    "fmha.semaphore_wait"(%want, %sem, %i) : (i32, memref<?xf32>, index) -> ()
    gpu.return
  }
}
