// IR that an upstream pass would abort the process on is reported, located, before the pipeline runs.
// RUN: fmha-opt %s -verify-diagnostics --pass-pipeline='builtin.module(gpu.module(convert-gpu-to-rocdl{chipset=gfx942}))'
// Without a pipeline nothing would abort: the IR prints back.
// RUN: fmha-opt %s | FileCheck %s

// CHECK-LABEL: gpu.func @duplicate_kernel_attribute
// CHECK-SAME: kernel {
module attributes {gpu.container_module} {
  gpu.module @kernels {
    // expected-error @+1 {{gpu.func carries a 'gpu.kernel' attribute, which convert-gpu-to-rocdl/-nvvm would add a second time and abort on}}
    gpu.func @duplicate_kernel_attribute(%x: f32, %out: memref<f32>) kernel attributes {gpu.kernel} {
      memref.store %x, %out[] : memref<f32>
      gpu.return
    }
  }
}
