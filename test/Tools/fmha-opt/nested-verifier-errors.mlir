// MLIR verifies isolated ops such as gpu.module on worker threads when multithreading is on; a
// diagnostic emitted there reached our Python handler without the GIL and aborted the process. The
// context is single-threaded: every error is reported, located, and the tool exits 1.
// RUN: fmha-opt %s -verify-diagnostics
// RUN: not fmha-opt %s 2>&1 | FileCheck %s

// CHECK-NOT: Critical nanobind error
// CHECK: nested-verifier-errors.mlir:[[# @LINE + 7]]:3: error: redefinition of symbol named 'k'
// CHECK: nested-verifier-errors.mlir:[[# @LINE + 13]]:10: error: 'arith.addi' op operand #0 must be signless
gpu.module @first {
  gpu.func @k() kernel { gpu.return }
  // expected-error @+3 {{redefinition of symbol named 'k'}}
  // expected-note @+2 {{see current operation}}
  // expected-note @-3 {{see existing symbol definition here}}
  gpu.func @k() kernel { gpu.return }
}

gpu.module @second {
  func.func @f(%x: f32) -> f32 {
    // expected-error @+2 {{'arith.addi' op operand #0 must be signless-non-zero-bitwidth-integer-like, but got 'f32'}}
    // expected-note @+1 {{see current operation}}
    %y = arith.addi %x, %x : f32
    return %y : f32
  }
}
