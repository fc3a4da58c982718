// RUN: fmha-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(fmha-hardware-atomics{target=amd})'
// RUN: not fmha-opt %s --split-input-file --pass-pipeline='builtin.module(fmha-hardware-atomics{target=nvidia})' 2>&1 | FileCheck %s

// The other vendor's scope on a module for this chip: AMD's backend dies on "device" scope, NVIDIA's
// prints an error on "agent" and goes on; the pass refuses a gpu.module whose targets name the other
// vendor. With target=amd the first module is refused and the second relaxed; with
// target=nvidia the second is refused.

// expected-error @+1 {{fmha-hardware-atomics{target=amd} on a gpu.module for #nvvm.target: use target=nvidia}}
gpu.module @nv_kernels [#nvvm.target<chip = "sm_90">] {
  llvm.func @on_nvidia(%p: !llvm.ptr, %x: f32) {
    %0 = llvm.atomicrmw fadd %p, %x acq_rel : !llvm.ptr, f32
    llvm.return
  }
}

// -----

// CHECK: wrong-target.mlir:[[# @LINE + 1]]:1: error: fmha-hardware-atomics: fmha-hardware-atomics{target=nvidia} on a gpu.module for #rocdl.target: use target=amd
gpu.module @amd_kernels [#rocdl.target<chip = "gfx942">] {
  llvm.func @on_amd(%p: !llvm.ptr, %x: f32) {
    %0 = llvm.atomicrmw fadd %p, %x acq_rel : !llvm.ptr, f32
    llvm.return
  }
}
