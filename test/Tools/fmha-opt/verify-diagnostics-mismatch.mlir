// Unexpected diagnostics and expectations nothing produced both fail, located like mlir-opt, in file order.
// RUN: not fmha-opt %s -split-input-file -verify-diagnostics 2>&1 | FileCheck %s

// CHECK: verify-diagnostics-mismatch.mlir:[[# @LINE + 3]]:6: error: expected error "this text is not in the message" was not produced
// CHECK-NEXT: verify-diagnostics-mismatch.mlir:[[# @LINE + 3]]:8: error: unexpected error: 'fmha.exp2' op operand #0 ('x') must be f32 or a 1-D vector of it, got index
func.func @unexpected(%i: index) -> f32 {
  // expected-error @+1 {{this text is not in the message}}
  %e = "fmha.exp2"(%i) : (index) -> f32
  return %e : f32
}

// -----

// An expectation of the wrong severity does not match.
// CHECK-NEXT: verify-diagnostics-mismatch.mlir:[[# @LINE + 3]]:6: error: expected warning "must be f32" was not produced
// CHECK-NEXT: verify-diagnostics-mismatch.mlir:[[# @LINE + 3]]:8: error: unexpected error: 'fmha.exp2'
func.func @wrong_severity(%i: index) -> f32 {
  // expected-warning @+1 {{must be f32}}
  %e = "fmha.exp2"(%i) : (index) -> f32
  return %e : f32
}
