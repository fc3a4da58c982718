// A pass that fails reports its error at the op it blames, with MLIR's notes, and exits 1.
// RUN: not fmha-opt %s --pass-pipeline='builtin.module(gpu-module-to-binary)' 2>&1 | FileCheck %s

// CHECK: pass-failure.mlir:[[# @LINE + 3]]:3: error: the module has no target attributes
// CHECK-NOT: Traceback
module attributes {gpu.container_module} {
  gpu.module @kernels {
  }
}
