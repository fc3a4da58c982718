// RUN: fmha-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(fmha-vector-atomics-to-nvvm)'

gpu.module @kernels {
  gpu.func @scalar_left(%x: f32, %acc: memref<?xf32>, %i: index) kernel {
    // expected-error @+1 {{an f32 'fmha.atomic_add' is lowered by convert-fmha-to-nvvm; run it first}}
    "fmha.atomic_add"(%x, %acc, %i) : (f32, memref<?xf32>, index) -> ()
    gpu.return
  }
}

// -----

gpu.module @kernels {
  gpu.func @strided_last_dim(%p: vector<2xf32>, %acc: memref<?xf32, strided<[2]>>, %i: index) kernel {
    // expected-error @+1 {{the buffer's last dimension must have stride 1, got memref<?xf32, strided<[2]>>}}
    "fmha.atomic_add"(%p, %acc, %i) : (vector<2xf32>, memref<?xf32, strided<[2]>>, index) -> ()
    gpu.return
  }
}
